"""The training modules' logger: Accelerate's, which logs on the main process only unless asked
(``main_process_only=False``), but with its ``[RANK n]`` prefix only where several processes run, where it tells
their lines apart; with one process it is noise on every line."""

from __future__ import annotations

import logging

from accelerate import PartialState
from accelerate.logging import MultiProcessAdapter


class RunLogger(MultiProcessAdapter):
    """`accelerate.logging.MultiProcessAdapter`, prefixing the process's rank only when there are several."""

    def process(self, msg, kwargs):
        if PartialState().num_processes > 1:
            return super().process(msg, kwargs)
        kwargs.setdefault("stacklevel", 2)  # as Accelerate's: the caller's line, not this module's
        return msg, kwargs


def get_logger(name: str) -> RunLogger:
    """The logger of a training module (as `accelerate.logging.get_logger`)."""
    return RunLogger(logging.getLogger(name), {})


__all__ = ["RunLogger", "get_logger"]
