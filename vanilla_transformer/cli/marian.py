"""``vanilla-transformer import-marian`` and ``export-marian``: MarianMT directories in and out.

    vanilla-transformer import-marian Helsinki-NLP/opus-mt-en-de runs/opus-en-de   # an OPUS-MT model, to ours
    vanilla-transformer export-marian runs/multi30k/model runs/multi30k-marian      # ours, to a plain MarianMTModel

Neither overwrites anything: DST must be new or an empty directory. See `vanilla_transformer.export.marian`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from ..parsing import CommandParser


def _parser(prog: str, description: str, src_help: str, dst_help: str) -> argparse.ArgumentParser:
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("src", metavar="SRC", help=src_help)
    parser.add_argument("dst", metavar="DST", help=dst_help + " (must not exist, or be empty)")
    parser.add_argument(
        "--no-tokenizer", action="store_true", help="convert the model alone, for a SRC saved without its tokenizer"
    )
    return parser


def _run(convert: Callable, args: argparse.Namespace, done: str) -> int:
    """Convert; a refused conversion (`marian.MarianConversionError`, a ValueError) or an existing DST reaches the
    user through the command's one error path (`vanilla_transformer.cli.main`)."""
    convert(args.src, args.dst, with_tokenizer=not args.no_tokenizer)
    print(f"{done} {args.dst}")
    return 0


def import_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser(
        "vanilla-transformer import-marian",
        "Convert a MarianMT model (OPUS-MT) into a vanilla-transformer model directory: weights permuted to the "
        "paper's interleaved positional layout, Marian's activation, generation settings and tokenizer.",
        "MarianMT model directory or Hub id (e.g. Helsinki-NLP/opus-mt-en-de)",
        "model directory to write",
    )
    args = parser.parse_args(argv)
    from ..export import marian  # torch: not for --help

    return _run(marian.import_marian, args, "vanilla-transformer model written to")


def export_main(argv: Sequence[str] | None = None) -> int:
    parser = _parser(
        "vanilla-transformer export-marian",
        "Write a vanilla-transformer model directory as a plain MarianMT directory (MarianMTModel.from_pretrained "
        "without remote code; CTranslate2's and Optimum's converters): weights permuted to Marian's positional layout.",
        "vanilla-transformer model directory",
        "MarianMT directory to write",
    )
    args = parser.parse_args(argv)
    from ..export import marian  # torch: not for --help

    return _run(marian.export_marian, args, "MarianMT model written to")


__all__ = ["export_main", "import_main"]
