"""Average the last checkpoints of a training run into a Hugging Face model directory (section 6.1 of the paper).

    vanilla-transformer average runs/wmt14-base --last 5 --output runs/wmt14-base/average-5

`vanilla-transformer train` already does this at the end of a run (into ``<run>/model``); use this script to average a
different number of checkpoints, or the checkpoints of an interrupted run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from vanilla_transformer.training import average_run


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="the training run's --output-dir")
    parser.add_argument("--last", type=int, help="checkpoints to average (default: the run's --average-checkpoints)")
    parser.add_argument("--output", help="model directory to write (default: <run_dir>/average-<last>)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    print(average_run(args.run_dir, last=args.last, output_dir=args.output))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
