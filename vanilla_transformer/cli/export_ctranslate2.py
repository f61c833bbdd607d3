"""Export a saved model directory (weights and tokenizer) to a CTranslate2 model directory, for fast serving.

    vanilla-transformer export-ctranslate2 runs/multi30k runs/multi30k-ct2                    # float32
    vanilla-transformer export-ctranslate2 runs/multi30k runs/multi30k-ct2-int8 --quantization int8

Translate with `vanilla_transformer.serving.with_ctranslate2.translate_ctranslate2`. Needs ``pip install ctranslate2``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from vanilla_transformer.constants import QUANTIZATIONS
from vanilla_transformer.parsing import CommandParser, summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("model_dir", help="directory written by save_pretrained, with the tokenizer")
    parser.add_argument("output_dir", help="CTranslate2 model directory to write")
    parser.add_argument(
        "--quantization",
        default=None,
        choices=QUANTIZATIONS,
        help="stored weight type (default: float32); int8 is the fastest on CPU",
    )
    parser.add_argument("--force", action="store_true", help="replace output_dir if it exists")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from vanilla_transformer.export import ctranslate2 as ctranslate2_export  # not for --help: torch

    path = ctranslate2_export.export_ctranslate2(
        args.model_dir, args.output_dir, quantization=args.quantization, force=args.force
    )
    print(f"CTranslate2 model written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
