"""Train a Transformer with the paper's recipe. The default job (``--preset numbers``) takes minutes on a CPU.

    vanilla-transformer train                                      # numbers task, small model, 2 CPU cores
    vanilla-transformer train --preset multi30k                    # Multi30k English-German, small model
    accelerate launch -m vanilla_transformer train --preset wmt14-base       # the paper's base model, on all GPUs
    vanilla-transformer train --resume --output-dir runs/numbers   # continue an interrupted run

Options override the preset's settings (``--help`` lists them); see `vanilla_transformer.training`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from vanilla_transformer import training


def parse_args(argv: Sequence[str] | None = None) -> training.TrainingConfig:
    """The run's settings: the preset's, overridden by the options in `argv` (default: ``sys.argv[1:]``)."""
    return training.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(format="%(asctime)s %(message)s", datefmt="%H:%M:%S", level=logging.WARNING)
    logging.getLogger("vanilla_transformer").setLevel(logging.INFO)
    # Accelerate warns at every checkpoint that the tied embeddings are saved once; that is expected here.
    logging.getLogger("accelerate.utils.other").setLevel(logging.ERROR)
    training.train(parse_args(argv))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
