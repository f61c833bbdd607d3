"""The settings the command line shows in ``--help``, defined here once, in a module that imports nothing, so that
a command's ``--help`` builds its parser without torch or transformers; the modules that use them import them from
here (`vanilla_transformer.serving.search`, `vanilla_transformer.export.ctranslate2`, `vanilla_transformer.visualization`).
"""

from __future__ import annotations

NUM_BEAMS = 4
"""Beam size of section 6.1."""

LENGTH_PENALTY = 0.6
"""GNMT length penalty alpha of section 6.1."""

MAX_LENGTH_OFFSET = 50
"""Section 6.1: the maximum output length is the input length + 50 tokens."""

QUANTIZATIONS = ("float32", "int8", "int8_float32", "int16", "float16", "bfloat16", "int8_float16", "int8_bfloat16")
"""Weight types CTranslate2 can store; ``None`` keeps the model's own (float32)."""

ATTENTION_KINDS: dict[str, str] = {
    "encoder_self": "Encoder self-attention",
    "decoder_self": "Decoder self-attention",
    "cross": "Encoder-decoder (cross) attention",
}
"""The kinds of attention plotted, with their titles; the kind starts the file names."""

DECODING_DTYPES = ("fp32", "bf16", "fp16")
"""The precisions ``--dtype`` offers for decoding (torch's float32, bfloat16 and float16)."""

__all__ = ["ATTENTION_KINDS", "DECODING_DTYPES", "LENGTH_PENALTY", "MAX_LENGTH_OFFSET", "NUM_BEAMS", "QUANTIZATIONS"]
