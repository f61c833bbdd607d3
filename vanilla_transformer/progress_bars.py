"""transformers' progress bars where they help: over a load or save that takes more than a second, not over a
small model's, where a bar flashes on every command. Imports nothing of the package."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

QUICK_WEIGHTS_BYTES = 256 * 2**20
"""Weights up to this size load and save in under a second on a CPU (the base model's 241 MiB: its "Loading
weights" loop took 0.1-0.2 s on this project's 2-core CPU at load 7), so transformers' "Loading weights" and "Writing model shards" bars are not drawn for them."""


@contextmanager
def progress_bars_over(weights_bytes: int | None) -> Iterator[None]:
    """While inside: transformers' progress bars only for weights over `QUICK_WEIGHTS_BYTES` (or of unknown size,
    None, as a Hub download's); as they were afterwards (`transformers.utils.logging`'s public switch)."""
    from transformers.utils import logging as transformers_logging

    quick = weights_bytes is not None and weights_bytes <= QUICK_WEIGHTS_BYTES
    if not quick or not transformers_logging.is_progress_bar_enabled():
        yield
        return
    transformers_logging.disable_progress_bar()
    try:
        yield
    finally:
        transformers_logging.enable_progress_bar()


__all__ = ["QUICK_WEIGHTS_BYTES", "progress_bars_over"]
