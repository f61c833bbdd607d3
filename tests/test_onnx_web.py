"""Translation with transformers.js (issue 37): the ONNX folder in Node (onnxruntime-node) and the static page of
``export-onnx --web`` in Debian's Chromium (onnxruntime-web, wasm). transformers.js's generate() gives our greedy
tokens; the page's own beam search (search.js, issue 44) gives ``translate_ids``' tokens at beam 1 and 4 in Node and
at beam 4 in Chromium, for a trained tiny model whose beam-4 translations differ from greedy ones; the page fetches
nothing from outside its folder.

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
import re
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra (onnxscript) is not installed")
from copy_task import sentences
from tiny_model import SPLITS

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.export.onnx import export_onnx
from vanilla_transformer.export.web import TRANSFORMERS_JS_ENV
from vanilla_transformer.model_dir import load_tokenizer
from vanilla_transformer.serving.search import paper_generation_config, translate_ids

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
TINY_SOURCES = [pair[0] for pair in SPLITS.valid[:8]]
"""Numbers in English words, three of which beam 4 translates other than greedy search."""


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


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory, tiny_model_dir):
    """(model, tokenizer, site): the trained tiny model, its width set to 3 in its generation config (the page's
    default), exported with its page."""
    model = VanillaTransformerForConditionalGeneration.from_pretrained(tiny_model_dir).eval()
    tokenizer = load_tokenizer(tiny_model_dir)
    model.generation_config.num_beams = 3
    folder = tmp_path_factory.mktemp("onnx-web-tiny") / "site"
    return model, tokenizer, export_onnx(model, folder, tokenizer=tokenizer, web=True, transformers_js=PACKAGE)


def paper_tokens(tiny_onnx, num_beams: int) -> list[list[int]]:
    """translate_ids' tokens (the package's search) of each of `TINY_SOURCES` alone."""
    model, tokenizer, _ = tiny_onnx
    return [
        translate_ids(model, **tokenizer([sentence], return_tensors="pt"), num_beams=num_beams)[0].tolist()
        for sentence in TINY_SOURCES
    ]


@needs_package
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed (apt-get install nodejs)")
@pytest.mark.parametrize("num_beams", [1, 4])
def test_the_page_search_in_node_gives_translate_ids_tokens(tiny_onnx, num_beams):
    """search.js, the page's beam search, on onnxruntime-node: the package's tokens at beam 1 and 4."""
    script = Path(__file__).with_name("transformers_js_beam.mjs")
    sources = json.dumps(TINY_SOURCES)
    run = subprocess.run(
        ["node", str(script), str(PACKAGE), str(tiny_onnx[2]), str(num_beams), sources],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == paper_tokens(tiny_onnx, num_beams)


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


def serve(site):
    """The page's folder on a local port, as any static host serves it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def served_tiny(tiny_onnx):
    yield from serve(tiny_onnx[2])


def cross_attention(tiny_onnx, sentence: str, tokens: list[int]) -> tuple[torch.Tensor, ...]:
    """The PyTorch model's cross-attention (output_attentions, eager attention) on the translation `tokens`: each
    layer's ``[1, heads, output tokens, source tokens]``, rows the predicted tokens."""
    model, tokenizer, _ = tiny_onnx
    model.set_attn_implementation("eager")
    with torch.no_grad():
        outputs = model(
            **tokenizer([sentence], return_tensors="pt"),
            decoder_input_ids=torch.tensor([tokens[:-1]]),
            output_attentions=True,
        )
    return outputs.cross_attentions


def chromium():
    """Headless Debian Chromium with its own background requests off and the network log on (skips without it)."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
    binary, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or chromedriver is None:
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
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
    return webdriver.Chrome(service=webdriver.ChromeService(chromedriver), options=options)


class Page:
    """The translation page in a browser, driven as a visitor would."""

    def __init__(self, browser):
        from selenium.webdriver.common.by import By

        self.browser, self.by = browser, By

    def find(self, name: str):
        return self.browser.find_element(self.by.ID, f"vt-{name}")

    def status(self) -> str:
        return self.find("status").text

    def wait(self, ready):
        from selenium.webdriver.support.ui import WebDriverWait

        WebDriverWait(self.browser, 120).until(lambda _: ready() or "failed" in self.status())

    def type(self, name: str, text: str) -> None:
        from selenium.webdriver.common.keys import Keys

        box = self.find(name)
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE)
        box.send_keys(text)

    def translate(self, sentence: str, beams: int) -> list[int]:
        self.type("beams", str(beams))
        self.type("source", sentence)
        self.browser.execute_script("document.getElementById('vt-output').removeAttribute('data-tokens')")
        self.find("translate").click()
        self.wait(lambda: self.find("output").get_attribute("data-tokens"))
        return json.loads(self.find("output").get_attribute("data-tokens"))

    def requested(self) -> set[str]:
        urls = set()
        for entry in self.browser.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                urls.add(message["params"]["request"]["url"])
        return urls


@needs_package
def test_the_page_runs_the_paper_search_offline_in_chromium(served_tiny, tiny_onnx):
    """Beam 4 in Chromium gives translate_ids' tokens (which differ from greedy for some sentence); the width control
    runs 1 to 8 from the model's default; the page says how long the model took to load, and clears its output when
    the box is emptied; nothing is fetched from outside its folder."""
    from selenium.webdriver.support.ui import Select

    browser = chromium()
    page = Page(browser)
    try:
        browser.get(f"{served_tiny}/index.html")
        page.wait(lambda: page.status().startswith(("Ready", "The model did not load")))
        assert re.match(r"Ready: the model loaded in \d+\.\d s ", page.status()), page.status()
        beams = page.find("beams")
        assert (beams.get_attribute("min"), beams.get_attribute("max"), beams.get_attribute("value")) == (
            "1",
            "8",
            "3",
        )
        tokens = [page.translate(sentence, beams=4) for sentence in TINY_SOURCES]
        assert page.status().startswith("Translated with beam 4 in ")
        shown = {}
        for layer, head in ((1, 0), (0, 2)):  # the last layer's first head at first, then as chosen
            if (layer, head) != (1, 0):
                Select(page.find("layer")).select_by_value(str(layer))
                Select(page.find("head")).select_by_value(str(head))
            assert page.find("attention").is_displayed()
            shown[layer, head] = json.loads(page.find("attention").get_attribute("data-weights"))
        page.type("source", "")
        assert page.find("output").get_attribute("value") == ""
        assert page.find("output").get_attribute("data-tokens") is None
        assert not page.find("attention").is_displayed()
        requested = page.requested()
    finally:
        browser.quit()
    assert tokens == paper_tokens(tiny_onnx, num_beams=4)
    assert tokens != paper_tokens(tiny_onnx, num_beams=1)  # the test tells beam search from greedy
    expected = cross_attention(tiny_onnx, TINY_SOURCES[-1], tokens[-1])
    for (layer, head), weights in shown.items():
        assert torch.allclose(torch.tensor(weights), expected[layer][0, head], atol=1e-5)
    assert f"{served_tiny}/onnx/decoder_model_merged.onnx" in requested
    assert f"{served_tiny}/js/ort-wasm-simd-threaded.asyncify.wasm" in requested
    outside = sorted(
        url for url in requested if not url.startswith((served_tiny + "/", "blob:" + served_tiny, "data:"))
    )
    assert outside == [], "the page fetched from outside its folder"


@needs_package
def test_push_static_space_dry_run_writes_the_page_as_a_static_space(tiny_model_dir, tmp_path):
    """push --space --static --dry-run: the model's folder, and beside it the Space's: the page and its ONNX folder,
    with a README whose metadata says sdk: static and serves index.html."""
    from huggingface_hub import metadata_load
    from tiny_model import load_script

    from vanilla_transformer.folder_kinds import is_onnx_dir

    target = tmp_path / "upload"
    arguments = [str(tiny_model_dir), "org/numbers", "--dry-run", str(target), "--space", "org/page"]
    assert load_script("push").main([*arguments, "--static", "--transformers-js", str(PACKAGE)]) == 0
    assert (target / "model.safetensors").is_file()
    space = tmp_path / "upload-space"
    metadata = metadata_load(space / "README.md")
    assert (metadata["sdk"], metadata["app_file"], metadata["models"]) == ("static", "index.html", ["org/numbers"])
    assert is_onnx_dir(space)
    for name in ("index.html", "translate.js", "search.js", "attention.js", "js/transformers.min.js"):
        assert (space / name).is_file(), name
    assert not (space / "app.py").exists()


def test_static_goes_with_space(tiny_model_dir, tmp_path, capsys):
    from tiny_model import load_script

    with pytest.raises(SystemExit):
        load_script("push").main([str(tiny_model_dir), "org/numbers", "--dry-run", str(tmp_path / "up"), "--static"])
    assert "--static goes with --space" in capsys.readouterr().err


@needs_package
def test_both_spaces_upload_through_one_helper_with_their_sdk_and_files(tiny_model_dir, monkeypatch):
    """push_space (Gradio) and push_static_space (the page) create their Space with their own SDK and upload the
    folder their writer wrote, staged in a folder that is gone afterwards."""
    import vanilla_transformer.export.hub as hub
    from vanilla_transformer.demo.space import push_space
    from vanilla_transformer.export.static_space import push_static_space

    uploads = []

    class FakeHfApi:
        def __init__(self, token=None):
            self.token = token

        def create_repo(self, repo_id, **kwargs):
            uploads.append({"repo_id": repo_id, "token": self.token, **kwargs})

        def upload_folder(self, *, repo_id, repo_type, folder_path, commit_message):
            files = sorted(str(path.relative_to(folder_path)) for path in folder_path.rglob("*") if path.is_file())
            uploads[-1].update(folder=folder_path, files=files, upload_type=repo_type)
            return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/spaces/{repo_id}/commit/abc"})()

    monkeypatch.setattr(hub, "HfApi", FakeHfApi)
    gradio_url = push_space("org/demo", "org/numbers", token="hf_a")
    static_url = push_static_space(
        "org/page", tiny_model_dir, "org/numbers", transformers_js=PACKAGE, private=True, token="hf_b"
    )

    assert gradio_url == "https://huggingface.co/spaces/org/demo/commit/abc"
    assert static_url == "https://huggingface.co/spaces/org/page/commit/abc"
    gradio, static = uploads
    assert (gradio["repo_id"], gradio["space_sdk"], gradio["private"], gradio["token"]) == (
        "org/demo",
        "gradio",
        False,
        "hf_a",
    )
    assert (static["repo_id"], static["space_sdk"], static["private"], static["token"]) == (
        "org/page",
        "static",
        True,
        "hf_b",
    )
    assert {gradio["repo_type"], gradio["upload_type"], static["repo_type"], static["upload_type"]} == {"space"}
    assert {"app.py", "README.md", "requirements.txt"} <= set(gradio["files"])
    assert {"index.html", "README.md", "onnx/encoder_model.onnx", "onnx/decoder_model_merged.onnx"} <= set(
        static["files"]
    )
    assert not gradio["folder"].exists() and not static["folder"].exists()
