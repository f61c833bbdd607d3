"""The settings the command line shows in ``--help``, defined here once, in a module that imports nothing but the
parser's `Range`, so that a command's ``--help`` builds its parser without torch or transformers; the modules that use them import them from
here (`vanilla_transformer.serving.search`, `vanilla_transformer.export.ctranslate2`,
`vanilla_transformer.visualization`, `vanilla_transformer.training.finetune`, `vanilla_transformer.training.lora`).
"""

from __future__ import annotations

from typing import Any

from .parsing import SEED_RANGE, Range

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

AUTO_METRIC = "auto"
"""``metric_for_best_model`` that the evaluation set decides (`vanilla_transformer.metrics.selection_metric`):
``bleu`` where BLEU applies to its references, else ``exact_match`` (number words, where BLEU is 0 by
construction)."""

SEARCH_DEFAULTS = dict(num_beams=NUM_BEAMS, length_penalty=LENGTH_PENALTY, max_length_offset=MAX_LENGTH_OFFSET)
"""The search that evaluation translates with: the paper's (beam 4, GNMT alpha 0.6, input + 50 tokens)."""


FINETUNE_SETTINGS: dict[str, Any] = dict(
    learning_rate=1e-4,
    lr_scheduler_type="linear",
    warmup_steps=0.05,
    adam_beta1=0.9,
    adam_beta2=0.98,
    adam_epsilon=1e-9,
    label_smoothing_factor=0.1,
    per_device_train_batch_size=32,
    per_device_eval_batch_size=32,
    eval_strategy="steps",
    eval_steps=500,
    logging_steps=50,
    save_total_limit=2,
    load_best_model_at_end=True,
    metric_for_best_model=AUTO_METRIC,
    report_to="none",
)
"""Where fine-tuning departs from `Seq2SeqTrainingArguments`' defaults: the paper's Adam (beta2 0.98, epsilon 1e-9)
and label smoothing 0.1; linear warmup and decay of a fine-tuning learning rate (1e-4); evaluation by translating
with the paper's search every 500 steps, a checkpoint at each evaluation, and the checkpoint with the best score
(`AUTO_METRIC`: BLEU where it applies, else exact match) loaded and kept at the end. ``finetune --help`` shows
them; `vanilla_transformer.training.finetune.FINETUNE_DEFAULTS` adds what depends on the machine."""

FINETUNE_RANGES: dict[str, Range] = {
    **dict.fromkeys(("max_steps", "gradient_accumulation_steps", "save_total_limit"), Range(int, 1)),
    **dict.fromkeys(
        ("per_device_train_batch_size", "per_device_eval_batch_size", "generation_num_beams"), Range(int, 1)
    ),
    **dict.fromkeys(
        ("num_train_epochs", "learning_rate", "eval_steps", "logging_steps"), Range(float, 0, low_open=True)
    ),
    "warmup_steps": Range(float, 0),
    "label_smoothing_factor": Range(float, 0, 1, high_open=True),
    "seed": SEED_RANGE,
}
"""The range of each `Seq2SeqTrainingArguments` field that fine-tuning checks, by field name: ``finetune``'s own
options declare them (``--learning-rate``, ``--grad-accum`` for ``gradient_accumulation_steps``), and
`vanilla_transformer.training.finetune.check_trainer_values` checks the Trainer's arguments against them however they
were given: ``--learning_rate inf`` passed through to the Trainer, a library call. Unset (None, and ``max_steps=-1``,
the Trainer's "by epochs") passes."""

LORA_DEFAULTS: dict[str, Any] = dict(r=8, alpha=16, dropout=0.1, target_modules=("q_proj", "v_proj"))
"""LoRA's settings when not given: rank 8 and alpha 16 on the attention's query and value projections (the LoRA
paper's choice of matrices), and dropout 0.1 on the adapter's input, the paper's P_drop for the base model: the
adapted sublayers keep the regularisation they were trained with, which small fine-tuning sets need."""

__all__ = [
    "ATTENTION_KINDS",
    "AUTO_METRIC",
    "FINETUNE_RANGES",
    "FINETUNE_SETTINGS",
    "LORA_DEFAULTS",
    "SEARCH_DEFAULTS",
    "DECODING_DTYPES",
    "LENGTH_PENALTY",
    "MAX_LENGTH_OFFSET",
    "NUM_BEAMS",
    "QUANTIZATIONS",
]
