"""Checks of a run's training data before any training, with errors that say which setting or file to fix."""

from __future__ import annotations

from collections.abc import Sequence

from ..data import Pair
from .options import TrainingConfig


def _training_source(config: TrainingConfig) -> str:
    """Where the training pairs come from, as the user gave it."""
    if config.train_src is not None:
        return f"--train-src={config.train_src} and --train-tgt={config.train_tgt}"
    if config.dataset in ("text", "tsv", "jsonl"):
        return f"split {config.train_split!r} of --dataset={config.dataset} in --data-dir={config.data_dir}"
    return f"split {config.train_split!r} of --dataset={config.dataset}"


def check_training_pairs(config: TrainingConfig, read: Sequence[Pair], kept: Sequence[Pair] | None = None) -> None:
    """Raise a ValueError if the training data holds no pair (`read`), or none that cleaning and ``--max-length``
    kept (`kept`, when given)."""
    if not read:
        raise ValueError(f"no training pairs: {_training_source(config)} is empty")
    if kept is not None and not kept:
        raise ValueError(
            f"none of the {len(read):,} training pairs of {_training_source(config)} has both sides within "
            f"--max-length={config.max_length} tokens (or they are empty): raise --max-length"
        )


__all__ = ["check_training_pairs"]
