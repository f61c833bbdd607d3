"""Serve the browser demo of a model: translate, see every attention map, follow the beam search, see the positions.

Examples:
    vanilla-transformer demo runs/multi30k/model                 # http://127.0.0.1:7860
    vanilla-transformer demo my-org/transformer-base-en-de --port 8000

The app (Gradio, the 'demo' extra) runs offline on this machine: no share link, no fonts or scripts from the
internet. A model that does not load still gets a page, which says why. Stop it with Ctrl+C (exit status 130).
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence

from vanilla_transformer.cli import configure_logging
from vanilla_transformer.parsing import CommandParser, Range, summary

logger = logging.getLogger("demo")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("model", help="saved model directory or Hub id, with its tokenizer")
    parser.add_argument("--host", default="127.0.0.1", help="address to serve on (default: 127.0.0.1, this machine)")
    parser.add_argument("--port", type=Range(int, 0, 65535), default=7860, help="port to serve on (default: 7860)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    logging.getLogger("httpx").setLevel(logging.WARNING)  # gradio's requests to its own server, one line each
    args = parse_args(argv)
    from vanilla_transformer.demo import build_app, launch_settings  # gradio and torch: not for --help

    demo = build_app(args.model)
    if demo.vt_session.load_error is not None:
        logger.error("%s (the page says so too)", demo.vt_session.load_error)
    # quiet: the launch lines are this command's own (gradio's advise share=True, which a command line cannot set);
    # not gradio's thread lock, which takes Ctrl-C as a normal end (status 0): here it is an interrupt (130)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **launch_settings(args.port, args.host))
    print(f"serving {args.model} at {url} (Ctrl-C stops it)", flush=True)
    try:
        while True:
            time.sleep(1)
    finally:
        demo.close()


if __name__ == "__main__":
    raise SystemExit(main())
