"""LoRA adapters (peft): add one to a model, save it as an adapter folder with its model card, and share it.

An adapter folder is what ``vanilla-transformer finetune --lora`` writes: ``adapter_config.json`` (whose
``base_model_name_or_path`` names the base model), ``adapter_model.safetensors``, the tokenizer, the run's
``training_summary.json`` and a model card (README.md) whose metadata names the base model.
`vanilla_transformer.export.model_dir.load_model_dir` loads it (the base, with the adapter applied)::

    model, tokenizer = load_model_dir("runs/numbers/model")
    model = add_lora(model, r=8, alpha=16, dropout=0.1, target_modules=["q_proj", "v_proj"])
    ...                                                          # train it, e.g. with training.finetune.finetune
    save_adapter_dir(model, tokenizer, "runs/lora")
    model, tokenizer = load_model_dir("runs/lora")               # a PeftModel over runs/numbers/model

peft comes with the ``peft`` extra (``pip install "vanilla-transformer[peft]"``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi, ModelCard
from huggingface_hub.utils import HFValidationError, validate_repo_id
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..extras import import_optional
from .hub import hub_url, model_card_data, read_training_summary
from .model_dir import (
    ADAPTER_CONFIG_FILE,
    SUMMARY_FILE,
    adapter_base_model,
    is_adapter_dir,
    is_local_path,
    load_model_dir,
    write_training_summary,
)

logger = logging.getLogger(__name__)

LORA_DEFAULTS: dict[str, Any] = dict(r=8, alpha=16, dropout=0.1, target_modules=("q_proj", "v_proj"))
"""LoRA's settings when not given: rank 8 and alpha 16 on the attention's query and value projections (the LoRA
paper's choice of matrices), and dropout 0.1 on the adapter's input, the paper's P_drop for the base model: the
adapted sublayers keep the regularisation they were trained with, which small fine-tuning sets need."""

ALL_LINEAR = "all-linear"
"""peft's shorthand for every linear layer but the output projection."""


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft ``PeftModel`` (without importing peft)."""
    return any(cls.__module__.startswith("peft.") for cls in type(model).__mro__) and hasattr(model, "peft_config")


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


def lora_settings(model: PreTrainedModel) -> dict[str, Any]:
    """The active adapter's settings and sizes: ``lora_r``, ``lora_alpha``, ``lora_dropout``,
    ``lora_target_modules`` (comma-separated), ``adapter_parameters`` and ``base_parameters``."""
    config = model.peft_config[model.active_adapter]
    targets = config.target_modules
    adapter = sum(p.numel() for name, p in model.named_parameters() if ".lora_" in name)
    return {
        "lora_r": config.r,
        "lora_alpha": config.lora_alpha,
        "lora_dropout": config.lora_dropout,
        "lora_target_modules": targets if isinstance(targets, str) else ",".join(sorted(targets)),
        "adapter_parameters": adapter,
        "base_parameters": sum(p.numel() for p in model.parameters()) - adapter,
    }


def base_model_of(model: PreTrainedModel) -> str:
    """The base model recorded in the active adapter's config (``base_model_name_or_path``)."""
    return model.peft_config[model.active_adapter].base_model_name_or_path


ADAPTER_CARD = """---
{{ card_data }}
---

# {{ model_name }}

A LoRA adapter (peft) for {% if base_model_url %}[`{{ base_model }}`]({{ base_model_url }}){% else %}`{{ base_model }}`{% endif %}, the Transformer of Vaswani et al. (2017),
["Attention Is All You Need"](https://arxiv.org/abs/1706.03762), fine-tuned with the `vanilla-transformer` package
to translate from `{{ src_lang or "?" }}` to `{{ tgt_lang or "?" }}`.

## Usage

```python
from peft import PeftModel
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

base = AutoModelForSeq2SeqLM.from_pretrained("{{ base_model }}", trust_remote_code=True)
model = PeftModel.from_pretrained(base, "{{ repo_id }}")
tokenizer = AutoTokenizer.from_pretrained("{{ repo_id }}")
inputs = tokenizer(["first sentence"], return_tensors="pt")
print(tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True))
```

With the package installed, `vanilla-transformer translate --model ADAPTER_FOLDER` loads the base and the adapter.

## Adapter

| | |
| --- | --- |
| Base model | `{{ base_model }}` ({{ "{:,}".format(base_parameters) }} parameters) |
| LoRA rank r / alpha / dropout | {{ lora_r }} / {{ lora_alpha }} / {{ lora_dropout }} |
| Adapted layers | {{ lora_target_modules }} |
| Adapter parameters | {{ "{:,}".format(adapter_parameters) }} |

## Training and results

- Corpus: {{ dataset or dataset_name or "not recorded" }}; training pairs: {{ train_pairs or "not recorded" }}
- Optimizer steps: {{ steps or "not recorded" }}
{%- set scores = [] %}
{%- if exact_match is defined %}{% set _ = scores.append("exact match %.1f%%"|format(exact_match)) %}{% endif %}
{%- if chrf is defined %}{% set _ = scores.append("chrF %.2f"|format(chrf)) %}{% endif %}
{%- if bleu is defined %}{% set _ = scores.append("BLEU %.2f"|format(bleu)) %}{% endif %}
{%- if scores %}
- On {{ eval_split or "the evaluation set" }}: {{ scores|join(", ") }}
{%- endif %}
"""
"""The Jinja template of an adapter's model card (the values of `build_adapter_card`)."""


def build_adapter_card(
    model: PreTrainedModel, summary: Mapping[str, Any], repo_id: str, *, base_model: str | None = None
) -> ModelCard:
    """The model card of a ``PeftModel``'s adapter: metadata with ``base_model`` (`base_model`, by default the
    adapter's ``base_model_name_or_path``), ``library_name: peft``, the languages and the scores of `summary`
    (see `vanilla_transformer.export.hub.read_training_summary`), and the adapter's settings and sizes."""
    base_model = base_model or base_model_of(model)
    model_name = repo_id.rstrip("/").rsplit("/", 1)[-1]
    data = model_card_data(summary, model_name)
    data.base_model = base_model
    data.library_name = "peft"
    data.tags = [*(data.tags or []), "lora", "peft"]
    values = {**summary, **lora_settings(model), "base_model": base_model, "repo_id": repo_id}
    values["base_model_url"] = hub_url(base_model)
    return ModelCard.from_template(data, template_str=ADAPTER_CARD, model_name=model_name, **values)


def save_adapter_dir(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    directory: str | os.PathLike[str],
    *,
    summary: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    repo_id: str | None = None,
) -> Path:
    """Write an adapter folder, which `load_model_dir` loads: the adapter (safetensors), the tokenizer, `summary` as
    ``training_summary.json``, and README.md, the card of `build_adapter_card`.

    Args:
        model: A ``PeftModel`` (see `add_lora`).
        tokenizer: Its tokenizer (``model_max_length`` set to ``max_position_embeddings``); None leaves it out.
        directory: Where to write; created if needed.
        summary: The run's figures (see `vanilla_transformer.export.hub.read_training_summary`).
        base_model: Recorded as ``base_model_name_or_path`` (e.g. the base's Hub id); by default the model's own.
        repo_id: Where the card says the adapter is (default: `directory`).

    Raises:
        ValueError: If `model` is not a ``PeftModel``.
    """
    if not is_peft_model(model):
        raise ValueError(f"save_adapter_dir saves a peft PeftModel, got {type(model).__name__}")
    directory = Path(directory)
    if base_model is not None:
        model.peft_config[model.active_adapter].base_model_name_or_path = base_model
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.model_max_length = model.config.max_position_embeddings
        tokenizer.save_pretrained(directory)
    summary = {key: value for key, value in (summary or {}).items() if value is not None}
    if summary:
        write_training_summary(directory, {**summary, "base_model": base_model_of(model)})
    build_adapter_card(model, summary, repo_id or str(directory)).save(directory / "README.md")
    return directory


def prepare_adapter_upload_folder(
    adapter_dir: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    repo_id: str,
    base_model: str | None = None,
) -> Path:
    """Write the folder that `push_adapter_to_hub` uploads, from an adapter folder: the adapter, the tokenizer, the
    run summary and the model card, with `base_model` (a Hub id; by default the one recorded) as the base model.

    The adapter is loaded first, with its base (`load_model_dir`), so that what is uploaded is known to load.

    Raises:
        ValueError: If `folder` is not empty, `adapter_dir` is not an adapter folder, or the base model is not a Hub
            id (a local path others cannot load: push the base, then pass ``base_model``).
        FileNotFoundError: If the base model is not found.
    """
    adapter_dir, folder = Path(adapter_dir), Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"folder={str(folder)!r} exists and is not an empty directory")
    if not is_adapter_dir(adapter_dir):
        raise ValueError(f"{adapter_dir} is not an adapter folder: it has no {ADAPTER_CONFIG_FILE}")
    hub_base = base_model or adapter_base_model(adapter_dir)
    if not _is_hub_id(hub_base):
        raise ValueError(
            f"the base model of {adapter_dir} is {hub_base!r}, not a Hub id that others can load: push the base model "
            "first, then give its Hub id (vanilla-transformer push --base-model ORG/NAME)"
        )
    model, tokenizer = load_model_dir(adapter_dir)
    summary_path = adapter_dir / SUMMARY_FILE
    summary = read_training_summary(summary_path) if summary_path.is_file() else {}
    return save_adapter_dir(model, tokenizer, folder, summary=summary, base_model=hub_base, repo_id=repo_id)


def _is_hub_id(name: str) -> bool:
    if is_local_path(name):
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def push_adapter_to_hub(
    adapter_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    base_model: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str = "Upload LoRA adapter",
) -> str:
    """Upload an adapter folder (the files of `prepare_adapter_upload_folder`) to a Hub model repository, created if
    needed; returns the URL of the commit."""
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as staging:
        folder = prepare_adapter_upload_folder(
            adapter_dir, Path(staging) / "upload", repo_id=repo_id, base_model=base_model
        )
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message)
    return commit.commit_url


__all__ = [
    "ADAPTER_CARD",
    "ALL_LINEAR",
    "LORA_DEFAULTS",
    "add_lora",
    "build_adapter_card",
    "check_lora_settings",
    "is_peft_model",
    "linear_module_names",
    "lora_settings",
    "prepare_adapter_upload_folder",
    "push_adapter_to_hub",
    "save_adapter_dir",
]
