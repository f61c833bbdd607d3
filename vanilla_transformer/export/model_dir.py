"""Writing a trained model as a Hugging Face model directory."""

from __future__ import annotations

from pathlib import Path

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..generation import paper_generation_config


def export_model(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    directory: str | Path,
    *,
    num_beams: int,
    length_penalty: float,
    max_new_tokens: int,
) -> Path:
    """Write a Hugging Face model directory: ``config.json``, ``model.safetensors``, ``generation_config.json``
    (`vanilla_transformer.generation.paper_generation_config`) and the tokenizer, loadable with
    ``AutoModelForSeq2SeqLM.from_pretrained(directory)``."""
    model.generation_config = paper_generation_config(
        model.config, num_beams=num_beams, length_penalty=length_penalty, max_new_tokens=max_new_tokens
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return Path(directory)
