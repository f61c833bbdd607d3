"""Ctrl-C during fine-tuning: the Trainer finishes its step, saves a checkpoint there and stops (`StopAtInterrupt`),
so that ``--resume-from-checkpoint last`` continues where the user stopped it; a second Ctrl-C stops at once.

transformers' Trainer has no such stop of its own: a KeyboardInterrupt ends it wherever it lands, losing every step
since the last ``--eval-steps`` checkpoint. Its public callback protocol asks for the checkpoint instead: at the end
of the step, ``control.should_save`` and ``control.should_training_stop``.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from transformers import TrainerCallback

logger = logging.getLogger(__name__)


class StopAtInterrupt(TrainerCallback):
    """Asked to stop (`requested`), the Trainer saves a checkpoint at the end of the current step and stops."""

    def __init__(self) -> None:
        self.requested = False

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control


@contextmanager
def checkpoint_on_interrupt(stop: StopAtInterrupt) -> Iterator[None]:
    """While inside: the first Ctrl-C (SIGINT) sets ``stop.requested`` and says so; the second interrupts at once.
    Only where SIGINT has Python's default handler, in the main thread (elsewhere nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:  # ignored, or handled by the program that runs this
        yield
        return

    def request_stop(signum, frame) -> None:
        stop.requested = True
        signal.signal(signal.SIGINT, previous)  # the next Ctrl-C raises KeyboardInterrupt at once
        logger.warning("Ctrl-C: saving a checkpoint at the end of this step, then stopping (Ctrl-C again: at once)")

    signal.signal(signal.SIGINT, request_stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


__all__ = ["StopAtInterrupt", "checkpoint_on_interrupt"]
