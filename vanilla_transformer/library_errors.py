"""The errors of the libraries underneath that a user can act on, told in one line: memory that could not be
allocated, and a pickled weights file that torch refuses to unpickle.

Both arrive as exceptions whose text is many lines long and names no file (torch's allocator raises a RuntimeError
``[enforce fail at alloc_cpu.cpp:127] ... DefaultCPUAllocator: can't allocate memory: you tried to allocate N
bytes``; ``torch.load(weights_only=True)`` an ``UnpicklingError`` of a dozen lines). The loaders name the file
(`vanilla_transformer.model_dir.load_model`); the command line reports what reaches it anywhere else
(`vanilla_transformer.cli.user_error`). Nothing here imports torch.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

_ALLOCATION = re.compile(
    r"can't allocate memory|out of memory|Cannot allocate memory|failed to allocate|\[enforce fail at alloc",
    re.IGNORECASE,
)
_REQUESTED = re.compile(r"(?:tried|unable) to allocate (\d+(?:\.\d+)?) ?(bytes|[KMGTP]iB)", re.IGNORECASE)
_UNPICKLER = re.compile(r"WeightsUnpickler error: ([^\n]*?)(?: was not an allowed global.*)?$", re.MULTILINE)

MEMORY_FIX = "give smaller inputs (or a smaller --batch-size), a smaller model, or use a machine with more memory"
"""What to do when memory runs out."""

PICKLE_FIX = (
    "nothing in it was run; use the model's safetensors weights, or, only if you trust where the file comes from, "
    "convert it to model.safetensors"
)
"""What to do about a pickled weights file that torch refuses."""


class ModelTooLarge(MemoryError):
    """A model that does not fit in the memory left, named with the config.json that sets its size."""


class SettingError(ValueError):
    """A refusal whose fix is a setting, worded for who gives it: the message names the library's argument
    (``force=True``), `command_line` the command's option (``--force``), which `vanilla_transformer.cli.user_error`
    prints instead."""

    def __init__(self, message: str, command_line: str) -> None:
        super().__init__(message)
        self.command_line = command_line


def allocation_failure(error: BaseException) -> str | None:
    """How much memory `error` failed to get (``"tried to allocate 4.0 PiB"``, or ``""`` where it does not say), if
    it is a MemoryError or an allocator's RuntimeError (torch's CPU allocator, CUDA's ``OutOfMemoryError``); else
    None."""
    if not isinstance(error, (MemoryError, RuntimeError)):
        return None
    text = str(error)
    if not isinstance(error, MemoryError) and not _ALLOCATION.search(text):
        return None
    requested = _REQUESTED.search(text)
    if requested is None:
        return ""
    amount, unit = float(requested.group(1)), requested.group(2)
    if unit == "bytes":
        for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
            if amount < 1024 or unit == "PiB":
                break
            amount /= 1024
    return f"tried to allocate {amount:.1f} {unit}" if unit != "bytes" else f"tried to allocate {amount:.0f} bytes"


def unpickling_refusal(error: BaseException) -> str | None:
    """What torch's unpickler refused in `error` (``"Unsupported global: GLOBAL builtins.exec"``, or ``""``), if it
    is an ``UnpicklingError``; else None."""
    if not isinstance(error, pickle.UnpicklingError):
        return None
    found = _UNPICKLER.search(str(error))
    return found.group(1).strip() if found else ""


def load_failure(source: str, error: BaseException) -> Exception | None:
    """The one-line error for a model `source` (a folder or Hub id) that failed to load with `error`, naming its
    file: a `ModelTooLarge` (a MemoryError) where its config.json describes more than the memory left, a ValueError where its pickled
    weights were refused; None for other errors."""
    requested = allocation_failure(error)
    if requested is not None:
        return ModelTooLarge(
            f"the model of {source} does not fit in the memory left{f' ({requested})' if requested else ''}: its "
            f"size is set by {Path(source, 'config.json')}; free some memory or use a machine with more"
        )
    refused = unpickling_refusal(error)
    if refused is not None:
        pickles = sorted(Path(source).glob("*.bin")) if Path(source).is_dir() else []
        file = pickles[0] if len(pickles) == 1 else Path(source, "pytorch_model.bin")
        return ValueError(
            f"{file} is a pickle that torch refuses to load{f' ({refused})' if refused else ''}: {PICKLE_FIX}"
        )
    return None


__all__ = [
    "MEMORY_FIX",
    "PICKLE_FIX",
    "ModelTooLarge",
    "SettingError",
    "allocation_failure",
    "load_failure",
    "unpickling_refusal",
]
