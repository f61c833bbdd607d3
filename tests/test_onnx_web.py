"""Translation with transformers.js (issue 37): the ONNX folder in Node (onnxruntime-node) and the static page of
``export-onnx --web`` in Debian's Chromium (onnxruntime-web, wasm), each giving the tokens of our greedy
``generate()``; the page fetches nothing from outside its folder.

transformers.js comes from an npm install (``npm install --ignore-scripts @huggingface/transformers``): the folder
named by ``$VANILLA_TRANSFORMER_TRANSFORMERS_JS``, else the checkout's ``.cache/transformers-js`` (where ``.ci/run``
installs it). Without it, Node, Chromium or selenium, the tests skip, naming what is missing. The browser is driven
as in ``test_demo_browser.py``, with Chromium's own background requests (updates, sync, ...) turned off.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra (onnxscript) is not installed")
from copy_task import sentences

from vanilla_transformer.export.onnx import export_onnx
from vanilla_transformer.export.web import TRANSFORMERS_JS_ENV
from vanilla_transformer.serving.search import paper_generation_config

CHECKOUT_PACKAGE = (
    Path(__file__).resolve().parents[1] / ".cache/transformers-js/node_modules/@huggingface/transformers"
)
PACKAGE = Path(os.environ.get(TRANSFORMERS_JS_ENV) or CHECKOUT_PACKAGE)
needs_package = pytest.mark.skipif(
    not (PACKAGE / "package.json").is_file(),
    reason=f"no transformers.js at {PACKAGE}: npm install --ignore-scripts --prefix .cache/transformers-js "
    "@huggingface/transformers (as .ci/run does), or set " + TRANSFORMERS_JS_ENV,
)
SOURCES = sentences(6, seed=21)


@pytest.fixture(scope="module")
def site(tmp_path_factory, copy_model):
    """The copy model exported with its translation page."""
    model, tokenizer = copy_model
    folder = tmp_path_factory.mktemp("onnx-web") / "site"
    return export_onnx(model, folder, tokenizer=tokenizer, web=True, transformers_js=PACKAGE)


def greedy_tokens(copy_model) -> list[list[int]]:
    """Our greedy generate() of each sentence alone, with the paper's limit (input length + 50)."""
    model, tokenizer = copy_model
    generation = paper_generation_config(model.config, num_beams=1)
    expected = []
    for sentence in SOURCES:
        ids = model.generate(**tokenizer([sentence], return_tensors="pt"), generation_config=generation)[0].tolist()
        expected.append(ids)
    assert max(map(len, expected)) > 6  # translations of several tokens
    return expected


@needs_package
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed (apt-get install nodejs)")
def test_transformers_js_in_node_gives_our_greedy_tokens(site, copy_model):
    script = Path(__file__).with_name("transformers_js_translate.mjs")
    run = subprocess.run(
        ["node", str(script), str(PACKAGE), str(site), json.dumps(SOURCES)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == greedy_tokens(copy_model)


@pytest.fixture(scope="module")
def served(site):
    """The page's folder on a local port, as any static host serves it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@needs_package
def test_the_page_translates_offline_in_chromium_with_our_greedy_tokens(served, copy_model):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or chromedriver is None:
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-background-networking",  # Chromium's own requests (updates, sync, ...), not the page's
        "--disable-component-update",
        "--disable-sync",
        "--disable-default-apps",
        "--no-first-run",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    browser = webdriver.Chrome(service=webdriver.ChromeService(chromedriver), options=options)
    try:
        browser.get(f"{served}/index.html")
        status = lambda: browser.find_element(By.ID, "vt-status").text  # noqa: E731
        WebDriverWait(browser, 120).until(lambda _: status().startswith(("Ready", "The model did not load")))
        assert status().startswith("Ready"), status()
        assert "Greedy decoding only" in browser.find_element(By.ID, "vt-search").text
        tokens = []
        for sentence in SOURCES:
            source = browser.find_element(By.ID, "vt-source")
            source.send_keys(Keys.CONTROL, "a")
            source.send_keys(Keys.DELETE)
            source.send_keys(sentence)
            browser.execute_script("document.getElementById('vt-output').removeAttribute('data-tokens')")
            browser.find_element(By.ID, "vt-translate").click()
            WebDriverWait(browser, 120).until(
                lambda _: browser.find_element(By.ID, "vt-output").get_attribute("data-tokens") or "failed" in status()
            )
            tokens.append(json.loads(browser.find_element(By.ID, "vt-output").get_attribute("data-tokens")))
        assert tokens == greedy_tokens(copy_model)
        requested = set()
        for entry in browser.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                requested.add(message["params"]["request"]["url"])
    finally:
        browser.quit()
    assert f"{served}/onnx/decoder_model_merged.onnx" in requested
    assert f"{served}/js/ort-wasm-simd-threaded.asyncify.wasm" in requested
    outside = sorted(url for url in requested if not url.startswith((served + "/", "blob:" + served, "data:")))
    assert outside == [], "the page fetched from outside its folder"
