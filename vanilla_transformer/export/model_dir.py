"""The one way to save and to load a model directory: what training, fine-tuning, averaging and the Hub upload
write, and what translate, evaluate, attention, finetune and push read.

A model directory holds ``config.json`` (with ``auto_map`` for remote code and ``custom_pipelines`` for the
translation pipelines), ``model.safetensors``, the modeling, configuration and pipeline code files,
``generation_config.json``, the tokenizer (whose ``model_max_length`` is the model's ``max_position_embeddings``)
and, from a training run, ``training_summary.json``::

    save_model_dir(model, tokenizer, "runs/numbers/model", generation_config=paper_generation_config(model.config))
    model, tokenizer = load_model_dir("runs/numbers/model")
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from ..tokenization import check_tokenizer_matches_config

SUMMARY_FILE = "training_summary.json"
"""The run summary that training and fine-tuning write into the model directory; the model card reads it."""

PIPELINE_CODE_FILE = Path(__file__).resolve().parents[1] / "pipeline_vanilla_transformer.py"
"""The self-contained pipeline classes, copied next to a saved model."""

PIPELINE_TASKS: dict[str, dict[str, Any]] = {
    "translation": {
        "impl": "pipeline_vanilla_transformer.TranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    },
    "text2text-generation": {
        "impl": "pipeline_vanilla_transformer.Text2TextGenerationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    },
}
"""The ``custom_pipelines`` entry of config.json, in the format `transformers.Pipeline.save_pretrained` writes."""


def add_pipeline_support(model_dir: str | os.PathLike[str]) -> None:
    """Make ``pipeline("translation" | "text2text-generation", model=model_dir, trust_remote_code=True)`` work.

    transformers 5 removed these two pipeline tasks; a model can still bring its own. This copies
    ``pipeline_vanilla_transformer.py`` into `model_dir` and lists both tasks under ``custom_pipelines`` in its
    config.json. Running it again changes nothing.

    Raises:
        ValueError: If `model_dir` has no config.json.
    """
    model_dir = Path(model_dir)
    config_path = model_dir / "config.json"
    if not config_path.is_file():
        raise ValueError(f"model_dir={str(model_dir)!r} has no config.json; save the model there first")
    shutil.copyfile(PIPELINE_CODE_FILE, model_dir / PIPELINE_CODE_FILE.name)
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["custom_pipelines"] = PIPELINE_TASKS
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def save_model_dir(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    directory: str | os.PathLike[str],
    *,
    generation_config: GenerationConfig | None = None,
    summary: dict[str, Any] | None = None,
) -> Path:
    """Write a model directory, loadable with `load_model_dir` and with ``AutoModelForSeq2SeqLM.from_pretrained``.

    Args:
        model: The model; saved as safetensors, with its code files and ``auto_map``.
        tokenizer: Its tokenizer; its ``model_max_length`` is set to ``max_position_embeddings``, so that
            ``truncation=True`` cuts inputs to what the model accepts. None saves the model alone.
        directory: Where to write; created if needed.
        generation_config: Replaces the model's generation config (for example
            `vanilla_transformer.generation.paper_generation_config`); by default the model's own is saved.
        summary: The run's figures, written as `SUMMARY_FILE` (see `vanilla_transformer.export.hub`).
    """
    directory = Path(directory)
    if generation_config is not None:
        model.generation_config = generation_config
    model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.model_max_length = model.config.max_position_embeddings
        tokenizer.save_pretrained(directory)
    add_pipeline_support(directory)
    if summary is not None:
        write_training_summary(directory, summary)
    return directory


def write_training_summary(directory: str | os.PathLike[str], summary: dict[str, Any]) -> Path:
    """Write the run's figures into a model directory as `SUMMARY_FILE`; None values are left out."""
    path = Path(directory) / SUMMARY_FILE
    kept = {key: value for key, value in summary.items() if value is not None}
    path.write_text(json.dumps(kept, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load_model_dir(
    name_or_path: str | os.PathLike[str],
    device: str | torch.device = "cpu",
    *,
    revision: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in eval mode, on `device`) and tokenizer of a model directory or Hub repository.

    A training run's directory (the ``--output-dir`` of ``vanilla-transformer train``) is not a model directory:
    its model is in ``<run>/model``, which the error names.

    Raises:
        FileNotFoundError: If a local path does not exist, or is a directory without a model.
        ValueError: If the model or the tokenizer cannot be loaded, or they do not fit each other.
    """
    name = str(name_or_path)
    # A Hub id is "name" or "org/name"; anything else, or anything that exists here, is a local directory.
    if Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") > 1:
        check_model_dir(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(name_or_path, revision=revision)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"{str(name_or_path)!r} has no loadable tokenizer; save it next to the model with save_model_dir ({error})"
        ) from error
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(name_or_path, revision=revision)
    except (OSError, ValueError) as error:
        raise ValueError(f"{str(name_or_path)!r} has no loadable model ({error})") from error
    check_tokenizer_matches_config(tokenizer, model.config)
    if tokenizer.model_max_length > model.config.max_position_embeddings:  # saved before model_max_length was set
        tokenizer.model_max_length = model.config.max_position_embeddings
    return model.to(device).eval(), tokenizer


def check_model_dir(directory: str | os.PathLike[str]) -> None:
    """Raise a FileNotFoundError unless `directory` is a Hugging Face model directory, naming the likely mistake: a
    training run's directory names its model, ``<run>/model``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no model directory at {directory}")
    if not (directory / "config.json").is_file():
        if (directory / "model" / "config.json").is_file():
            raise FileNotFoundError(
                f"{directory} is a training run directory, not a model directory: pass {directory / 'model'}"
            )
        raise FileNotFoundError(f"{directory} holds no config.json: it is not a Hugging Face model directory")


__all__ = [
    "PIPELINE_TASKS",
    "SUMMARY_FILE",
    "add_pipeline_support",
    "check_model_dir",
    "load_model_dir",
    "save_model_dir",
    "write_training_summary",
]
