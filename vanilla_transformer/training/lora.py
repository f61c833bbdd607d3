"""LoRA (peft) for fine-tuning: add an adapter to a trained model, with settings checked against the model.

    model, tokenizer = load_model_dir("runs/numbers/model")
    model = add_lora(model, r=8, alpha=16, dropout=0.1, target_modules=["q_proj", "v_proj"])
    ...                                                   # train it, e.g. with training.finetune.finetune
    save_adapter_with_card(model, tokenizer, "runs/lora")  # vanilla_transformer.export.hub: the folder and its card
    model, tokenizer = load_model_dir("runs/lora")         # a PeftModel over runs/numbers/model

peft comes with the ``peft`` extra (``pip install "vanilla-transformer[peft]"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from torch import nn
from transformers import PreTrainedModel

from ..constants import LORA_DEFAULTS
from ..extras import import_optional

ALL_LINEAR = "all-linear"
"""peft's shorthand for every linear layer but the output projection."""


def linear_module_names(model: PreTrainedModel) -> list[str]:
    """The names LoRA can target: the last name part of every ``nn.Linear`` of `model` but its output projection
    (``lm_head``, which shares its weight with the embeddings, section 3.4): ``fc1``, ``k_proj``, ..."""
    return sorted({name.rsplit(".", 1)[-1] for name in _linear_modules(model)})


def _linear_modules(model: PreTrainedModel) -> list[str]:
    output = model.get_output_embeddings()
    return [name for name, module in model.named_modules() if isinstance(module, nn.Linear) and module is not output]


def check_lora_settings(
    model: PreTrainedModel | None, *, r: int, alpha: float, dropout: float, target_modules: Sequence[str] | str
) -> None:
    """Raise a ValueError naming the setting (and its ``finetune`` option) unless the LoRA settings are valid for
    `model`: r >= 1, alpha > 0, 0 <= dropout < 1, and each target module the name (or a dotted name suffix) of a
    linear layer (`linear_module_names`), or `ALL_LINEAR`. `model` None checks the numbers only."""
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise ValueError(f"the LoRA rank must be an integer of at least 1 (--lora-r), got r={r!r}")
    if not alpha > 0:
        raise ValueError(f"the LoRA scaling alpha must be positive (--lora-alpha), got alpha={alpha!r}")
    if not 0 <= dropout < 1:
        raise ValueError(f"the LoRA dropout must be in [0, 1) (--lora-dropout), got dropout={dropout!r}")
    targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
    if not targets or any(not target for target in targets):
        raise ValueError(f"give at least one target module (--lora-target-modules), got {targets!r}")
    if model is None or targets == [ALL_LINEAR]:
        return
    names = _linear_modules(model)
    unknown = [t for t in targets if not any(name == t or name.endswith(f".{t}") for name in names)]
    if unknown:
        raise ValueError(
            f"target module(s) {unknown} (--lora-target-modules) match no linear layer of the model; its linear "
            f"layers are {', '.join(linear_module_names(model))} (or {ALL_LINEAR}; lm_head shares its weight with "
            "the embeddings and is not adapted)"
        )


def add_lora(
    model: PreTrainedModel,
    *,
    r: int = LORA_DEFAULTS["r"],
    alpha: float = LORA_DEFAULTS["alpha"],
    dropout: float = LORA_DEFAULTS["dropout"],
    target_modules: Sequence[str] | str = LORA_DEFAULTS["target_modules"],
) -> PreTrainedModel:
    """`model` wrapped in a peft ``PeftModel`` with a new LoRA adapter (B = 0, so it starts as the base model); only
    the adapter's weights are trainable.

    Raises:
        ValueError: If a setting is invalid (see `check_lora_settings`).
        MissingExtraError: If peft is not installed.
    """
    peft = import_optional("peft", "peft", "LoRA fine-tuning")
    check_lora_settings(model, r=r, alpha=alpha, dropout=dropout, target_modules=target_modules)
    targets = target_modules if isinstance(target_modules, str) else list(target_modules)
    config = peft.LoraConfig(
        task_type=peft.TaskType.SEQ_2_SEQ_LM, r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets
    )
    with warnings.catch_warnings():  # peft reads the deprecated is_gradient_checkpointing: nothing a user can act on
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        return peft.get_peft_model(model, config)


__all__ = ["ALL_LINEAR", "LORA_DEFAULTS", "add_lora", "check_lora_settings", "linear_module_names"]
