"""Train a Transformer with the paper's recipe. The default job (``--preset numbers``) takes minutes on a CPU.

    vanilla-transformer train                                      # numbers task, small model, 2 CPU cores
    vanilla-transformer train --preset multi30k --data-dir DIR     # Multi30k English-German (DIR/train.en, ...)
    accelerate launch -m vanilla_transformer train --preset wmt14-base       # the paper's base model, on all GPUs
    vanilla-transformer train --resume --output-dir runs/numbers   # continue an interrupted run
    vanilla-transformer train --resume --finish-again              # average and test a finished run again

Options override the preset's settings (``--help`` lists them); see `vanilla_transformer.training`. A preset's
corpus is found in ``$VANILLA_TRANSFORMER_DATA`` (e.g. ``$VANILLA_TRANSFORMER_DATA/multi30k``) unless ``--data-dir``
is given. Several CPU processes: ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N -m
vanilla_transformer train``; ``accelerate launch --cpu --num_processes N`` starts one process without MPI, and the
run warns that it does.

Ctrl-C ends the command with one line naming the step reached, the last checkpoint and the command that continues
the run. ``--resume`` on a finished run says so and writes nothing.
"""

from __future__ import annotations

import logging
import shlex
import sys
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
    from vanilla_transformer.training.progress import Interrupted
    from vanilla_transformer.training.run_dir import RunFinished

    try:
        training.train(config)
    except RunFinished as finished:
        if _is_main_process():
            print(finished, flush=True)
        return 0
    except Interrupted as interrupt:
        if not _is_main_process():
            raise
        raise KeyboardInterrupt(f"{interrupt.describe()}; continue with: {continue_command(argv, config)}") from None
    report_outputs(training.RunLayout(config.checkpointing.output_dir))
    return 0


def _is_main_process() -> bool:
    from accelerate import PartialState

    return PartialState().is_main_process


def continue_command(argv: Sequence[str] | None, config: training.TrainingConfig) -> str:
    """The command that continues the run of `config` where an interrupt left it: ``--resume --output-dir DIR``
    once the run has started (its saved settings are the run's), else the command as typed; as an ``accelerate
    launch`` of the same processes where several run."""
    layout = training.RunLayout(config.checkpointing.output_dir)
    argv = list(sys.argv[1:] if argv is None else argv)
    if layout.settings.is_file():
        argv = ["--resume", "--output-dir", str(layout.root)]
    command = "vanilla-transformer train"
    from accelerate import PartialState

    processes = PartialState().num_processes  # the launch's, as the run saw it
    if processes > 1:
        command = f"accelerate launch <the same launch options, {processes} processes> -m vanilla_transformer train"
    return " ".join([command, *map(shlex.quote, argv)])


def report_outputs(layout: training.RunLayout) -> None:
    """Say where the run put the model and its results (once, from the main process of a launch)."""
    from accelerate import PartialState

    if PartialState().is_main_process:
        print(f"model: {layout.model}\nresults: {layout.results}", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
