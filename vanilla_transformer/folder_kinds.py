"""What kind of folder a path is, told from its files alone: an ONNX export or a CTranslate2 export.

A low module (the standard library only): `model_dir` names an export given where a model directory goes,
``serving/`` loads one, ``export/`` writes one and knows what ``--force`` may replace, all by these rules. The ONNX
folder is laid out as transformers.js and Optimum read a Marian model: ``config.json``, the tokenizer, and the graphs
`ENCODER_FILE` and `DECODER_FILE`, with int8 copies (`quantized_name`) where it was exported with ``--quantize``.
"""

from __future__ import annotations

import os
from pathlib import Path

ENCODER_FILE = "onnx/encoder_model.onnx"
DECODER_FILE = "onnx/decoder_model_merged.onnx"
QUANTIZED_SUFFIX = "_quantized"
"""``onnx/encoder_model_quantized.onnx``: the int8 files' names, as transformers.js asks for them."""


def quantized_name(file: str) -> str:
    return file.removesuffix(".onnx") + QUANTIZED_SUFFIX + ".onnx"


def is_onnx_dir(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds an export of `export_onnx` (both graphs and config.json) and no PyTorch weights:
    what ``--force`` may replace, and what ``translate`` serves with onnxruntime."""
    directory = Path(directory)
    return (
        all((directory / name).is_file() for name in (ENCODER_FILE, DECODER_FILE, "config.json"))
        and not (directory / "model.safetensors").exists()
    )


def is_ctranslate2_dir(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a CTranslate2 model (``model.bin``) and no Hugging Face model: what `--force` may
    replace."""
    directory = Path(directory)
    return (directory / "model.bin").is_file() and not any(
        (directory / name).is_file() for name in ("model.safetensors", "pytorch_model.bin", "tokenizer_config.json")
    )


__all__ = ["DECODER_FILE", "ENCODER_FILE", "QUANTIZED_SUFFIX", "is_ctranslate2_dir", "is_onnx_dir", "quantized_name"]
