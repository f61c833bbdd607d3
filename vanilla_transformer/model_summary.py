"""The model folder's summary: what a run measured, written by training and fine-tuning next to the model as
`SUMMARY_FILE` and read by the model cards (`vanilla_transformer.export.hub`) and the demo.

This module is its one owner: the fields (`SUMMARY_FIELDS`: each one's JSON types and meaning), their checks, the
constructor the producers build a summary with (`build_summary`), the writer (`write_training_summary`) and the
reader (`read_training_summary`)::

    summary = build_summary(dataset_name="numbers", src_lang="en", tgt_lang="de", steps=1000, exact_match=99.5)
    write_training_summary("runs/numbers/model", summary)
    read_training_summary("runs/numbers/model/training_summary.json")  # the same fields
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from .atomic import write_file
from .reading import read_json

logger = logging.getLogger(__name__)

SUMMARY_FILE = "training_summary.json"
"""The run summary that training and fine-tuning write into the model directory; the model card reads it."""


class SummaryField(NamedTuple):
    """One field of the summary: the JSON types its value may have, and what it means."""

    types: tuple[type, ...]
    meaning: str


_NUMBER = (int, float)
SUMMARY_FIELDS: dict[str, SummaryField] = {
    "dataset": SummaryField((str,), 'Hub id of the training corpus, e.g. "wmt14" (absent for local files)'),
    "dataset_name": SummaryField((str,), 'name of the training corpus, e.g. "numbers", "wmt14"'),
    "dataset_config": SummaryField((str,), 'its configuration, e.g. "de-en"'),
    "local_data": SummaryField(
        (str,),
        "the user's own files the corpus was read from, by name and folder name, e.g. "
        '"train.tsv (training) and test.tsv (test) in the folder my-corpus" (no Hub id)',
    ),
    "src_lang": SummaryField((str,), 'source language code, e.g. "en"'),
    "tgt_lang": SummaryField((str,), 'target language code, e.g. "de"'),
    "train_pairs": SummaryField((int,), "number of training sentence pairs, after cleaning"),
    "eval_split": SummaryField((str,), 'the split or test set the scores are measured on, e.g. "newstest2014"'),
    "steps": SummaryField((int,), "optimizer steps"),
    "epochs": SummaryField(_NUMBER, "passes over the training data"),
    "train_hours": SummaryField(
        _NUMBER, "wall-clock time of the training loop (evaluations and checkpoints included)"
    ),
    "hardware": SummaryField((str,), 'e.g. "8 x NVIDIA P100"'),
    "num_processes": SummaryField((int,), "processes that trained together"),
    "tokens_per_step": SummaryField((int,), "padded source + target tokens per optimizer step, over all processes"),
    "bleu": SummaryField(_NUMBER, "sacreBLEU BLEU (0-100) on eval_split"),
    "signature": SummaryField((str,), "the signature of that BLEU"),
    "bleu_compound_split": SummaryField(
        _NUMBER, "the paper's BLEU (0-100) on eval_split: Moses-tokenized and compound-split, as get_ende_bleu.sh"
    ),
    "bleu_compound_split_recipe": SummaryField((str,), "how that BLEU was computed, with the versions"),
    "chrf": SummaryField(_NUMBER, "sacreBLEU chrF (0-100) on eval_split"),
    "chrf_signature": SummaryField((str,), "the signature of that chrF"),
    "exact_match": SummaryField(_NUMBER, "percentage of translations identical to their reference"),
    "recipe": SummaryField(
        (dict,), "object of hyperparameters (optimizer, warmup, label smoothing, batch size, beam ...)"
    ),
    "base_model": SummaryField((str,), "the model fine-tuned, absent when trained from scratch"),
    "notes": SummaryField((str,), "free text, added to the card's limitations"),
}
"""The fields of a summary, all optional, with their JSON types and meaning; ``null`` values count as absent."""


def check_summary(summary: Mapping[str, Any], source: str | os.PathLike[str]) -> dict[str, Any]:
    """The fields of `summary` that `SUMMARY_FIELDS` knows, in the order given, without ``None`` values; other keys
    are left out (logged).

    Raises:
        ValueError: If a value has none of its field's types, naming `source`.
    """
    checked = {}
    for key, value in summary.items():
        if key not in SUMMARY_FIELDS:
            logger.info("%s: ignoring key %r, which the model card does not use", source, key)
        elif value is not None:
            types = SUMMARY_FIELDS[key].types
            if isinstance(value, bool) or not isinstance(value, types):
                expected = " or ".join(t.__name__ for t in types)
                raise ValueError(f"{source}: {key} must be {expected}, got {key}={value!r}")
            checked[key] = value
    return checked


def build_summary(**fields: Any) -> dict[str, Any]:
    """A summary of the fields given (`SUMMARY_FIELDS`), in their order (the order of the file written), ``None``
    values left out: how training, fine-tuning and saving make one.

    Raises:
        TypeError: If a field is not one of `SUMMARY_FIELDS`.
        ValueError: If a value has none of its field's types.
    """
    unknown = [key for key in fields if key not in SUMMARY_FIELDS]
    if unknown:
        raise TypeError(f"the training summary has no field {', '.join(map(repr, unknown))}: see SUMMARY_FIELDS")
    return check_summary(fields, "training summary")


def write_training_summary(directory: str | os.PathLike[str], summary: Mapping[str, Any]) -> Path:
    """Write the run's figures into a model directory as `SUMMARY_FILE`; None values are left out.

    Raises:
        TypeError, ValueError: As `build_summary`, before anything is written.
    """
    path = Path(directory) / SUMMARY_FILE
    kept = build_summary(**summary)
    return write_file(path, json.dumps(kept, indent=2, ensure_ascii=False) + "\n")


def read_training_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run summary, a JSON object of `SUMMARY_FIELDS`, all optional; ``null`` values count as absent, and
    other keys are ignored.

    Raises:
        ValueError: If the file is not a JSON object or a key has the wrong type.
    """
    path = Path(path)
    summary = read_json(path, "training summary")  # size, text and JSON judged: one line naming the file
    if not isinstance(summary, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(summary).__name__}")
    return check_summary(summary, path)


__all__ = [
    "SUMMARY_FIELDS",
    "SUMMARY_FILE",
    "SummaryField",
    "build_summary",
    "check_summary",
    "read_training_summary",
    "write_training_summary",
]
