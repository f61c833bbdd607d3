"""The range of every numeric training setting, declared once (`RANGES`): ``train``'s parser declares its options
with them, and the settings' types (`config.TrainingConfig`'s parts) check every value against them as they are
built, so a value from the command line, a resumed run's ``training_config.json`` or a library call meets one check.
"""

from __future__ import annotations

from ..parsing import SEED_RANGE, Range, thread_range

_AT_LEAST_1 = Range(int, 1)
_FRACTION = Range(float, 0, 1, high_open=True)
_ABOVE_0 = Range(float, 0, low_open=True)
RANGES: dict[str, Range] = {
    **dict.fromkeys(("num_train", "max_number", "max_length", "vocab_size"), _AT_LEAST_1),
    **dict.fromkeys(
        ("num_valid", "num_test", "num_samples", "max_length_offset", "tokenizer_train_pairs"), Range(int, 0)
    ),
    **dict.fromkeys(("d_model", "layers", "heads", "ffn_dim", "max_tokens", "tokens_per_step"), _AT_LEAST_1),
    **dict.fromkeys(("grad_accum", "max_steps", "warmup_steps", "save_every", "keep_checkpoints"), _AT_LEAST_1),
    **dict.fromkeys(("average_checkpoints", "num_beams", "translate_batch_size", "log_every"), _AT_LEAST_1),
    "eval_every": _AT_LEAST_1,
    **dict.fromkeys(("dropout", "adam_beta1", "adam_beta2", "label_smoothing"), _FRACTION),
    **dict.fromkeys(("max_train_minutes", "lr_scale", "adam_eps", "max_grad_norm"), _ABOVE_0),
    **dict.fromkeys(("select_margin", "length_penalty"), Range(float, 0)),
    "seed": SEED_RANGE,
    "num_threads": thread_range(),
}
"""The range of each numeric setting (`parsing.Range`), by option name: the one check of its value, wherever it comes
from (`config.check_setting`): the command line (``train``'s parser declares these), a resumed run's
``training_config.json``, a library call. A learning rate scale of NaN or -1 trains to weights that are not finite
or backwards, a gradient norm of -1 flips the gradients' sign."""


__all__ = ["RANGES"]
