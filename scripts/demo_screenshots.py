#!/usr/bin/env python
"""The screenshots of docs/demo.md, from a real run: serve ``vanilla-transformer demo`` for a trained model, drive
Debian's Chromium (headless, Selenium), translate a sentence and save each view as a PNG.

Writes demo_translate.png, demo_attention.png (one head), demo_attention_all_heads.png, demo_beam.png and
demo_positions.png to --output-dir. Needs the demo extra, selenium and ``apt-get install chromium chromium-driver``.

Usage (a model of ``vanilla-transformer train --preset numbers``, or of the multi30k preset)::

    python scripts/demo_screenshots.py --model runs/numbers/model --sentence "three hundred and twelve"
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from vanilla_transformer.demo import build_app, launch_settings

IMAGES = Path(__file__).resolve().parent.parent / "docs" / "images"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def chromium(width: int, height: int) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}"):
        options.add_argument(argument)
    return webdriver.Chrome(service=webdriver.ChromeService("/usr/bin/chromedriver"), options=options)


def open_tab(driver: webdriver.Chrome, title: str) -> None:
    tabs = WebDriverWait(driver, 60).until(
        lambda d: [b for b in d.find_elements(By.CSS_SELECTOR, "button[role=tab]") if b.text == title]
    )
    tabs[0].click()


def shoot(url: str, args: argparse.Namespace) -> list[Path]:
    driver = chromium(args.width, args.height)
    wait = WebDriverWait(driver, 120)
    written = []

    def save(name: str) -> None:
        path = args.output_dir / f"demo_{name}.png"
        driver.save_screenshot(str(path))
        written.append(path)

    try:
        driver.get(url)
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#vt-source textarea")).send_keys(args.sentence)
        driver.find_element(By.ID, "vt-translate").click()
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#vt-output textarea").get_attribute("value"))
        save("translate")
        open_tab(driver, "Attention")
        for radio, value in (("vt-layer", args.layer), ("vt-head", args.head)):
            driver.find_element(By.CSS_SELECTOR, f'#{radio} label[data-testid="{value}-radio-label"]').click()
        selector = f'#vt-attention table.vt-map[data-layer="{args.layer}"][data-head="{args.head}"]'
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, selector))
        save("attention")
        driver.find_element(By.CSS_SELECTOR, '#vt-head label[data-testid="all-radio-label"]').click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, '#vt-attention table[data-kind="cross"]')) > 1)
        save("attention_all_heads")
        open_tab(driver, "Beam search step by step")
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#vt-beam .vt-verdict"))
        save("beam")
        open_tab(driver, "Positions and embeddings")
        wait.until(lambda d: d.find_element(By.CSS_SELECTOR, "#vt-similarity img").get_attribute("naturalWidth"))
        save("positions")
    finally:
        driver.quit()
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="trained model directory or Hub id")
    parser.add_argument("--sentence", required=True, help="the sentence to translate")
    parser.add_argument("--layer", default="1", help="the attention layer to show (default: %(default)s)")
    parser.add_argument("--head", default="1", help="the attention head to show (default: %(default)s)")
    parser.add_argument("--output-dir", type=Path, default=IMAGES, help="where to write (default: docs/images)")
    parser.add_argument("--width", type=int, default=1400, help="window width in pixels (default: %(default)s)")
    parser.add_argument("--height", type=int, default=1000, help="window height in pixels (default: %(default)s)")
    args = parser.parse_args(argv)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    demo = build_app(args.model)
    if demo.vt_session.load_error is not None:
        parser.error(demo.vt_session.load_error)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **launch_settings(free_port()))
    try:
        for path in shoot(url, args):
            print(path)
    finally:
        demo.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
