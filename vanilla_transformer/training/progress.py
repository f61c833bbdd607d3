"""Where training stands (`TrainingProgress`, saved in every checkpoint), when its time is up (`out_of_time`), and
where an interrupted run stopped (`Interrupted`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import torch
from accelerate import Accelerator

from ..parsing import Range

RANGES = {
    **dict.fromkeys(("step", "epoch", "batch", "micro_batch_tokens", "micro_batches"), Range(int, 0)),
    "seconds": Range(float, 0),
}
"""The range of each field of `TrainingProgress`, checked as a checkpoint's progress is restored: a count of
Infinity or -1 is a damaged checkpoint, not a place to resume from."""


@dataclass
class TrainingProgress:
    """Where training stands. Saved in every checkpoint, so that a resumed run continues at the same batch."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epoch of the next training batch
    batch: int = 0  # index of this process's next training batch within its epoch
    seconds: float = 0.0  # wall time of the training loop so far (for --max-train-minutes)
    micro_batch_tokens: int = 0  # the micro-batch plan the batches were cut by (0: a checkpoint that predates it)
    micro_batches: int = 0

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        """Restore a saved progress, each field checked against its range (`RANGES`): a ValueError names the field.
        ``seconds`` is absent in checkpoints of version 0.1, the micro-batch plan in those that predate it (0)."""
        values = {
            f.name: state[f.name] if f.name in ("step", "epoch", "batch") else state.get(f.name, f.default)
            for f in fields(self)
        }
        for name, value in values.items():
            RANGES[name].check(f"progress {name}", value)
        for name, value in values.items():  # all checked: a progress restored whole or not at all
            setattr(self, name, value)


# Processes agree on the time budget every this many steps: agreeing is a collective and a host-device sync.
AGREE_ON_TIME_EVERY = 10


def out_of_time(accelerator: Accelerator, progress: TrainingProgress, max_minutes: float | None) -> bool:
    """Whether the training loop has used up ``max_minutes``. One process reads its clock before every step; several
    agree (all stop at the same step) every `AGREE_ON_TIME_EVERY` steps, so they may overrun by fewer steps than that."""
    if max_minutes is None:
        return False
    late = progress.seconds >= 60 * max_minutes
    if accelerator.num_processes == 1:
        return late
    if progress.step % AGREE_ON_TIME_EVERY != 0:
        return False
    return bool(accelerator.reduce(torch.tensor(float(late), device=accelerator.device), "max").item())


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run (`train`, `finetune`): a KeyboardInterrupt that says where the run stopped, the `step` it
    had reached (None before training began), and the `checkpoint` it can continue from (None if none was written),
    whose step is `checkpoint_step`. The steps after that checkpoint are lost."""

    def __init__(self, step: int | None, checkpoint: str | None, checkpoint_step: int | None) -> None:
        super().__init__()
        self.step, self.checkpoint, self.checkpoint_step = step, checkpoint, checkpoint_step

    @property
    def lost_steps(self) -> int:
        """The steps taken since the checkpoint, which a continued run takes again."""
        return max((self.step or 0) - (self.checkpoint_step or 0), 0)

    def describe(self) -> str:
        """Where the run stopped, for the interrupt's line: ``at step 573; checkpoint-00000500 kept, the 73 steps
        since then lost``, ``at step 40; checkpoint-40 kept at that step``, ``at step 12; no checkpoint yet``."""
        where = "before training" if self.step is None else f"at step {self.step}"
        if self.checkpoint is None:
            return f"{where}; no checkpoint yet"
        lost = self.lost_steps
        kept = f"the {lost} step{'s' if lost != 1 else ''} since then lost" if lost else "at that step"
        return f"{where}; {self.checkpoint} kept, {kept}"


__all__ = ["AGREE_ON_TIME_EVERY", "RANGES", "Interrupted", "TrainingProgress", "out_of_time"]
