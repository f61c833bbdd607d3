"""Export a saved model directory to ONNX, in the layout transformers.js and Optimum read (a Marian model), for
onnxruntime and the browser.

    vanilla-transformer export-onnx runs/multi30k/model runs/multi30k-onnx               # float32
    vanilla-transformer export-onnx runs/multi30k/model runs/multi30k-onnx --quantize    # and int8 *_quantized.onnx
    vanilla-transformer export-onnx runs/multi30k/model site --web --transformers-js node_modules/@huggingface/transformers

Translate with onnxruntime under the paper's beam search: ``vanilla-transformer translate --model runs/multi30k-onnx``.
``--web`` adds a static page that translates in the browser (the paper's beam search, with its cross-attention
view), served from the folder alone.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from vanilla_transformer.parsing import CommandParser, summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("model_dir", help="directory written by save_pretrained, with the tokenizer")
    parser.add_argument("output_dir", help="folder to write")
    parser.add_argument("--quantize", action="store_true", help="also write onnxruntime's dynamic int8 graphs")
    parser.add_argument(
        "--web", action="store_true", help="also write index.html: translation in the browser with transformers.js"
    )
    parser.add_argument(
        "--transformers-js",
        metavar="DIR",
        help="with --web: the @huggingface/transformers npm package to copy the scripts from (default: "
        "$VANILLA_TRANSFORMER_TRANSFORMERS_JS, else ./node_modules/@huggingface/transformers); install it with "
        "npm install --ignore-scripts @huggingface/transformers",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace output_dir if it is an ONNX export holding nothing else (never the model itself or a folder holding it)",
    )
    args = parser.parse_args(argv)
    if args.transformers_js is not None and not args.web:
        parser.error("--transformers-js goes with --web")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from vanilla_transformer.export import onnx as onnx_export  # not for --help: torch

    path = onnx_export.export_onnx(
        args.model_dir,
        args.output_dir,
        quantize=args.quantize,
        force=args.force,
        web=args.web,
        transformers_js=args.transformers_js,
    )
    print(f"ONNX model written to {path}")
    if args.web:
        print(f"translation page: {path}/index.html (serve the folder, e.g. python -m http.server -d {path})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
