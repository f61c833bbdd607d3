"""Average the last checkpoints of a training run into a Hugging Face model directory (section 6.1 of the paper).

    vanilla-transformer average runs/wmt14-base --last 5 --output runs/wmt14-base/average-5

`vanilla-transformer train` already does this at the end of a run (into ``<run>/model``); use this script to average a
different number of checkpoints, or the checkpoints of an interrupted run.

The model directory is written as a whole (`vanilla_transformer.atomic.write_directory`): a killed ``average``
leaves the old folder or the new one, never a mix (no stale training_summary.json, no empty config.json). An existing
``--output`` is replaced only if it is a model directory; any other non-empty folder is refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.atomic import write_directory
from vanilla_transformer.parsing import CommandParser, Range, summary


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("run_dir", help="the training run's --output-dir")
    parser.add_argument(
        "--last", type=Range(int, 1), help="checkpoints to average (default: the run's --average-checkpoints)"
    )
    parser.add_argument("--output", help="model directory to write (default: <run_dir>/average-<last>)")
    return parser.parse_args(argv)


def default_output(run_dir: Path, last: int | None) -> Path:
    """``<run_dir>/average-<n>``, n the number of checkpoints `average_run` averages (at most `last`); a missing or
    damaged ``training_config.json`` is named."""
    from vanilla_transformer.training.checkpoints import list_checkpoints  # torch: not for --help
    from vanilla_transformer.training.run_dir import RunLayout, load_saved_config

    layout = RunLayout(run_dir)
    if not layout.settings.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run: it has no {layout.settings.name}")
    last = load_saved_config(layout.settings).checkpointing.average_checkpoints if last is None else last
    return layout.average(max(min(last, len(list_checkpoints(layout.checkpoints))), 1))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from vanilla_transformer.model_dir import is_saved_model_dir  # torch: not for --help
    from vanilla_transformer.training import average_run

    run_dir = Path(args.run_dir)
    default = default_output(run_dir, args.last)  # checks the run's settings before anything is written
    output = Path(args.output) if args.output else default
    write_directory(
        output,
        lambda folder: average_run(run_dir, last=args.last, output_dir=folder),
        replaceable=is_saved_model_dir,
        what="--output",
    )
    print(output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
