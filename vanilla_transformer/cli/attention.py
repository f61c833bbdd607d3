"""Plot a model's attention on a sentence: PNG heatmaps per layer and head, of the three kinds of attention.

Examples:
    vanilla-transformer attention runs/base "The house is small." --output-dir attention
    vanilla-transformer attention runs/base "The house is small." --target "Das Haus ist klein." --layers 1 6

Without --target, the model's greedy translation is plotted. A LoRA adapter folder (finetune --lora) is loaded with
its base model (adapter_config.json's base_model_name_or_path). Files: encoder_self_layerN.png,
decoder_self_layerN.png and cross_layerN.png in --output-dir, one panel per head. The folder is written whole, and
only where it is new, empty or holds nothing but the maps this command wrote there (its manifest lists them): a folder
holding anything else is refused, naming the file.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.atomic import check_output_dir, write_directory
from vanilla_transformer.cli import configure_logging
from vanilla_transformer.constants import ATTENTION_KINDS as KINDS
from vanilla_transformer.parsing import CommandParser, Range, summary
from vanilla_transformer.written import check_replaceable, record_written, written_by

MAX_DPI = 1200
"""The finest ``--dpi``: a print's; more makes images matplotlib refuses to draw (10,000,000 dots per inch)."""

logger = logging.getLogger("visualize_attention")

ATTENTION_KIND = "attention"
"""What this command records as the writer of its folder (`written.record_written`)."""

ATTENTION_FILES = ("encoder_self_layer*.png", "decoder_self_layer*.png", "cross_layer*.png")
"""The names of the maps this command writes: what a rewrite may delete, with the manifest's word."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("model", help="saved model directory, Hub id or LoRA adapter folder, with its tokenizer")
    parser.add_argument("source", help="source sentence")
    parser.add_argument("--target", help="its translation (default: the model's greedy translation)")
    parser.add_argument("--output-dir", type=Path, default=Path("attention"), help="where to write the PNG files")
    parser.add_argument(
        "--layers", type=Range(int, 1), nargs="+", help="layers to plot, counted from 1 (default: all)"
    )
    parser.add_argument("--kinds", nargs="+", choices=list(KINDS), default=list(KINDS), help="attention kinds to plot")
    parser.add_argument(
        "--max-new-tokens", type=Range(int, 1), default=64, help="length limit of the greedy translation"
    )
    parser.add_argument(
        "--dpi", type=Range(int, 1, MAX_DPI), default=100, help=f"image resolution, at most {MAX_DPI} (default: 100)"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    from vanilla_transformer.model_dir import load_model_dir  # not for --help: torch
    from vanilla_transformer.visualization import plot_attention

    # before the model loads: a new or empty folder, or one holding only the maps this command wrote there
    check_replaceable(args.output_dir, ATTENTION_KIND, "--output-dir", ATTENTION_FILES)
    check_output_dir(args.output_dir, "--output-dir", replaceable=written_by(ATTENTION_KIND, ATTENTION_FILES))
    model, tokenizer = load_model_dir(args.model)

    def write(folder: Path) -> int:
        figures = plot_attention(
            model,
            tokenizer,
            args.source,
            args.target,
            output_dir=folder,
            layers=args.layers,
            kinds=args.kinds,
            max_new_tokens=args.max_new_tokens,
            dpi=args.dpi,
        )
        record_written(folder, ATTENTION_KIND, ATTENTION_FILES)
        return len(figures)

    count = write_directory(
        args.output_dir, write, replaceable=written_by(ATTENTION_KIND, ATTENTION_FILES), what="--output-dir"
    )
    logger.info("wrote %d files to %s", count, args.output_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
