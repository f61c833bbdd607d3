"""Train a Transformer with the paper's recipe. The default job (``--preset numbers``) takes minutes on a CPU.

    vanilla-transformer train                                      # numbers task, small model, 2 CPU cores
    vanilla-transformer train --preset multi30k --data-dir DIR     # Multi30k English-German (DIR/train.en, ...)
    accelerate launch -m vanilla_transformer train --preset wmt14-base       # the paper's base model, on all GPUs
    vanilla-transformer train --resume --output-dir runs/numbers   # continue an interrupted run

Options override the preset's settings (``--help`` lists them); see `vanilla_transformer.training`. A preset's
corpus is found in ``$VANILLA_TRANSFORMER_DATA`` (e.g. ``$VANILLA_TRANSFORMER_DATA/multi30k``) unless ``--data-dir``
is given. Several CPU processes: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N -m
vanilla_transformer train``; ``accelerate launch --cpu --num_processes N`` starts one process without MPI, and the
run warns that it does.
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
    config = parse_args(argv)
    training.train(config)
    report_outputs(training.RunLayout(config.checkpointing.output_dir))
    return 0


def report_outputs(layout: training.RunLayout) -> None:
    """Say where the run put the model and its results (once, from the main process of a launch)."""
    from accelerate import PartialState

    if PartialState().is_main_process:
        print(f"model: {layout.model}\nresults: {layout.results}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
