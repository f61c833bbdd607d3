"""The demo in a real browser (issue 28): Debian's Chromium, headless, driven by Selenium through chromedriver.

The app runs on a free local port with the copy-task model. The test types a sentence, presses Translate and reads
the translation (it must be `translate()`'s), opens the attention view, picks a layer and head and reads the maps'
data from the page (target × source; the decoder's self-attention lower-triangular), and checks the beam and
positions views, an error message on the page, and that the page fetched nothing from outside this machine.
Screenshots go to ``$TEST_ARTIFACTS/demo`` (or the test's temporary folder). Without gradio, selenium or
chromium the test skips, naming what is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from vanilla_transformer.serving.search import translate

gradio = pytest.importorskip("gradio", reason="the demo extra (gradio) is not installed")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra)")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)",
)

SENTENCE = "big cat sees old bird"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    folder = Path(os.environ["TEST_ARTIFACTS"]) / "demo" if "TEST_ARTIFACTS" in os.environ else None
    folder = folder or tmp_path_factory.mktemp("demo-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def serve(demo) -> str:
    from vanilla_transformer.demo import launch_settings

    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **launch_settings(free_port()))
    return url


@pytest.fixture(scope="module")
def app_url(copy_model):
    from vanilla_transformer.demo import build_app

    demo = build_app(*copy_model)
    yield serve(demo)
    demo.close()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1100"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=webdriver.ChromeService(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def wait(driver, condition, seconds: float = 90):
    return WebDriverWait(driver, seconds).until(condition)


def open_tab(driver, title: str) -> None:
    tab = wait(driver, lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, "button[role=tab]") if b.text == title])
    tab[0].click()


def choose(driver, radio: str, value: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'#{radio} label[data-testid="{value}-radio-label"]').click()


def maps_of(driver, layer: str, head: str) -> dict[str, dict]:
    """The maps on the page for `layer` and `head`: kind -> {"shape", "weights"}, read from the tables' data."""
    selector = f'#vt-attention table.vt-map[data-layer="{layer}"][data-head="{head}"]'
    tables = wait(
        driver,
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, selector)
            if len(d.find_elements(By.CSS_SELECTOR, selector)) == 3
            else None
        ),
    )
    return {
        table.get_attribute("data-kind"): {
            "shape": json.loads(table.get_attribute("data-shape")),
            "weights": np.array(json.loads(table.get_attribute("data-weights"))),
        }
        for table in tables
    }


def test_translate_attention_beam_and_positions_in_chromium(copy_model, app_url, browser, artifacts):
    model, tokenizer = copy_model
    browser.get(app_url)
    source = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#vt-source textarea"))
    assert "it knows only what its training data held" in browser.find_element(By.ID, "vt-knows").text
    source.send_keys(SENTENCE)
    browser.find_element(By.ID, "vt-translate").click()
    output = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#vt-output textarea").get_attribute("value"))
    expected = translate(model, tokenizer, [SENTENCE])[0]
    assert output == expected
    wait(browser, lambda d: expected in d.find_element(By.ID, "vt-hypotheses").text)
    assert "ms" in browser.find_element(By.ID, "vt-time").text
    browser.save_screenshot(str(artifacts / "translate.png"))

    open_tab(browser, "Attention")
    choose(browser, "vt-layer", "2")
    choose(browser, "vt-head", "3")
    maps = maps_of(browser, "2", "3")
    assert browser.find_element(By.CSS_SELECTOR, "#vt-attention .vt-scale .vt-bar").size["width"] >= 200  # the scale
    source_length = len(tokenizer(SENTENCE)["input_ids"])
    target_length = len(tokenizer(text_target=expected)["input_ids"])
    assert maps["cross"]["shape"] == [target_length, source_length]  # target × source
    assert maps["encoder_self"]["shape"] == [source_length, source_length]
    decoder = maps["decoder_self"]["weights"]
    assert decoder.shape == (target_length, target_length)
    assert np.all(np.triu(decoder, k=1) == 0) and np.all(np.diag(decoder) > 0)  # the causal triangle
    np.testing.assert_allclose(maps["cross"]["weights"].sum(axis=1), 1, atol=1e-3)
    browser.save_screenshot(str(artifacts / "attention.png"))
    choose(browser, "vt-head", "all")
    wait(
        browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, '#vt-attention table.vt-map[data-kind="cross"]')) == 4
    )
    browser.save_screenshot(str(artifacts / "attention_all_heads.png"))

    open_tab(browser, "Beam search step by step")
    verdict = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#vt-beam .vt-verdict").text)
    assert f"{expected!r} wins" in verdict
    assert len(browser.find_elements(By.CSS_SELECTOR, "#vt-beam tr[data-step]")) >= target_length
    browser.save_screenshot(str(artifacts / "beam.png"))

    open_tab(browser, "Positions and embeddings")
    image = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#vt-encoding img"))
    assert wait(browser, lambda d: image.get_attribute("naturalWidth") not in (None, "0"))
    browser.save_screenshot(str(artifacts / "positions.png"))

    open_tab(browser, "Translate")
    source = browser.find_element(By.CSS_SELECTOR, "#vt-source textarea")
    source.send_keys(Keys.CONTROL, "a")
    source.send_keys(Keys.DELETE)  # as a user does: clear() bypasses the page's input events
    browser.find_element(By.ID, "vt-translate").click()
    toast = wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, '[data-testid="toast-text"]').text)
    assert toast == "Enter a sentence to translate: the text box is empty."
    browser.save_screenshot(str(artifacts / "empty_input.png"))

    requested = set()
    for entry in browser.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            requested.add(message["params"]["request"]["url"])
    outside = [
        url
        for url in requested
        if url.startswith(("http:", "https:", "ws:", "wss:")) and not url.startswith(app_url.rstrip("/"))
    ]
    assert outside == [], "the page fetched from outside this machine"
    assert all((artifacts / name).stat().st_size > 0 for name in ("translate.png", "attention.png", "beam.png"))


def test_a_model_that_does_not_load_is_named_on_the_page(browser, tmp_path):
    from vanilla_transformer.demo import build_app

    demo = build_app(str(tmp_path / "no-such-model"))
    url = serve(demo)
    try:
        browser.get(url)
        status = wait(browser, lambda d: d.find_element(By.ID, "vt-status").text)
        assert "did not load" in status and "no-such-model" in status
    finally:
        demo.close()
