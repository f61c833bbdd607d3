"""Share a trained model on the Hugging Face Hub: the upload folder and its model card.

`prepare_upload_folder` turns a trained model directory into the folder that is uploaded; `push_to_hub` uploads
it. The folder loads where this package is not installed::

    model = AutoModelForSeq2SeqLM.from_pretrained("org/name", trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained("org/name", trust_remote_code=True)  # else it asks to run the code
    translator = pipeline("translation", model="org/name", trust_remote_code=True)

The model card (README.md) is built by `build_model_card` with huggingface_hub's `ModelCard`, `ModelCardData` and
`EvalResult` (which write the metadata header and its model-index), from the Jinja template `TEMPLATE` and the
figures of the run's summary (`SUMMARY_FILE`), which training and fine-tuning write next to the model from what
the run measured; `vanilla_transformer.model_summary` owns its fields, reader and writer. An adapter folder is saved
by `vanilla_transformer.model_dir.save_adapter_dir`; `save_adapter_with_card` adds the card of `build_adapter_card`,
as fine-tuning and the upload save one.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, HfApi, ModelCard, ModelCardData
from huggingface_hub.utils import HFValidationError, validate_repo_id
from transformers import PreTrainedModel

from ..atomic import check_output_dir, write_directory, write_file
from ..model_dir import (
    ADAPTER_CONFIG_FILE,
    adapter_base_model,
    base_model_of,
    check_model_dir,
    is_adapter_dir,
    is_local_path,
    load_model_dir,
    lora_settings,
    save_adapter_dir,
    save_model_dir,
)
from ..model_summary import SUMMARY_FIELDS, SUMMARY_FILE, build_summary, read_training_summary
from ..reading import read_bytes
from ..serving.search import paper_generation_config
from .space import check_repo_id

logger = logging.getLogger(__name__)

TEMPLATE = Path(__file__).resolve().parent / "model_card.md"
"""The packaged model card template, a copy of the repository's top-level ``model_card.md`` (its source; a test
checks that the two are equal)."""

# --------------------------------------------------------------------------- model card

_TAGS = ["translation", "transformer", "attention-is-all-you-need", "vanilla-transformer"]
_METRICS = {
    "bleu": "BLEU (sacreBLEU)",
    "bleu_compound_split": "BLEU (tokenized, compound-split)",
    "chrf": "chrF (sacreBLEU)",
    "exact_match": "Exact match (%)",
}


def is_hub_id(name: str) -> bool:
    """Whether `name` is a Hub model id, ``org/name``, that others can load: not a local path (`is_local_path`), one
    "/", and valid by the Hub's rules (``validate_repo_id``)."""
    if is_local_path(name) or name.count("/") != 1:
        return False
    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def hub_url(name: str) -> str | None:
    """The absolute address of a Hub model id (``org/name``): cards are read on the Hub and elsewhere, where a
    relative link would point into the card's own repository; None for a local path or a plain name."""
    return f"https://huggingface.co/{name}" if is_hub_id(name) else None


def model_card_data(summary: Mapping[str, Any], model_name: str) -> ModelCardData:
    """The card's metadata: languages, Hub dataset, base model (a Hub id), and a model-index entry per score.

    The Hub reads the model-index's dataset ``type`` as a Hub dataset id, so only a Hub dataset (``dataset``) gets
    a model-index: a corpus of the user's own files (``local_data``) or the built-in number words has none, and the
    card's text names the corpus and gives the scores."""
    corpus = summary.get("dataset")
    eval_results = [
        EvalResult(
            task_type="translation",
            task_name="Translation",
            dataset_type=corpus,
            dataset_name=corpus,
            dataset_config=summary.get("dataset_config"),
            dataset_split=summary.get("eval_split"),
            metric_type=metric,
            metric_name=name,
            metric_value=round(summary[metric], 2),
        )
        for metric, name in _METRICS.items()
        if corpus is not None and summary.get(metric) is not None
    ]
    base_model = summary.get("base_model")
    return ModelCardData(
        language=[summary[key] for key in ("src_lang", "tgt_lang") if summary.get(key)] or None,
        license="apache-2.0",
        library_name="transformers",
        pipeline_tag="translation",
        tags=_TAGS,
        datasets=[summary["dataset"]] if summary.get("dataset") else None,
        base_model=base_model if base_model and is_hub_id(base_model) else None,
        model_name=model_name,
        eval_results=eval_results or None,
    )


def build_model_card(
    model: PreTrainedModel,
    summary: Mapping[str, Any],
    repo_id: str,
    template: str | os.PathLike[str] | None = None,
) -> ModelCard:
    """The model card of `model` for `repo_id`, filled with the figures of `summary`
    (`vanilla_transformer.model_summary`).

    `template` (default `TEMPLATE`) is a Jinja template rendered by `ModelCard.from_template`; it sees the summary's
    keys (absent ones as undefined; ``base_model`` only as a Hub id, else None, and ``fine_tuned``, whether the
    summary names one), ``card_data`` (the YAML of `model_card_data`), ``model_name``, ``repo_id``, the
    architecture (``parameters``, ``d_model``, ``encoder_layers``, ``decoder_layers``, ``attention_heads``,
    ``ffn_dim``, ``vocab_size``) and the saved generation config (``num_beams``, ``length_penalty``).

    Raises:
        FileNotFoundError: If there is no template at `template`.
        ValueError: If the template does not render to a card with a valid metadata header.
    """
    config, generation = model.config, model.generation_config
    model_name = repo_id.rsplit("/", 1)[-1]
    values = {key: value for key, value in summary.items() if key in SUMMARY_FIELDS}
    base_model = values.pop("base_model", None)  # a local folder's path says nothing to the card's readers
    values.update(
        base_model=base_model if base_model and is_hub_id(base_model) else None,
        fine_tuned=base_model is not None,
        model_name=model_name,
        repo_id=repo_id,
        parameters=model.num_parameters(),
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        attention_heads=config.encoder_attention_heads,
        ffn_dim=config.encoder_ffn_dim,
        vocab_size=config.vocab_size,
        num_beams=generation.num_beams or 1,
        length_penalty=generation.length_penalty if generation.length_penalty is not None else 1.0,
    )
    template = Path(template or TEMPLATE)
    if not template.is_file():
        raise FileNotFoundError(f"no model card template at {template}")
    text = read_bytes(template, "model card template", limit=TEMPLATE_LIMIT, note=True)
    try:
        card = render_card(model_card_data(summary, model_name), text.decode("utf-8"), **values)
    except Exception as error:  # jinja2's errors (the sandbox's too), not UTF-8, or the metadata checks of ModelCard
        raise ValueError(f"model card template {template} does not render: {error}") from error
    return card


TEMPLATE_LIMIT = 16 << 20
"""The largest model card template read (16 MiB)."""


def render_card(data: ModelCardData, template: str, **values: Any) -> ModelCard:
    """The card `template` renders, as ``ModelCard.from_template`` renders it (``card_data``: the YAML of `data`;
    `data`'s fields and `values` as variables), in Jinja's sandbox: a template the user passes reaches no Python
    object's internals (``lipsum.__globals__``, ``cycler.__init__``), so it cannot run code."""
    from jinja2.sandbox import SandboxedEnvironment

    variables = {**data.to_dict(), **values}
    return ModelCard(SandboxedEnvironment().from_string(template).render(card_data=data.to_yaml(), **variables))


# --------------------------------------------------------------------------- upload folder


def prepare_upload_folder(
    model_dir: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    repo_id: str,
    template: str | os.PathLike[str] | None = None,
    base_model: str | None = None,
) -> Path:
    """Write the folder that `push_to_hub` uploads, from a trained model directory or a LoRA adapter folder.

    A model directory gives the model saved anew (config.json with ``auto_map`` and ``custom_pipelines``,
    safetensors weights, the modeling, configuration and pipeline code files, generation_config.json), the tokenizer,
    the `SUMMARY_FILE` if `model_dir` has one, and README.md, the model card rendered from `template`. A model
    directory whose generation config was derived from the model config (``_from_model_config``) or is absent gets
    `paper_generation_config` instead, with a warning. An adapter folder (``finetune --lora``) gives the adapter, the
    tokenizer, the run summary and the adapter card (`ADAPTER_CARD`), with `base_model` as its base.

    Args:
        model_dir: The trained model directory (model, tokenizer and, optionally, `SUMMARY_FILE`), or an adapter
            folder.
        folder: Where to write; it must not exist or be empty.
        repo_id: The Hub repository, ``org/name``, named in the model card.
        template: The model card template of a model directory (default: `TEMPLATE`), see `build_model_card`.
        base_model: For an adapter folder, the Hub id of its base model (default: the one the adapter records).

    Raises:
        FileNotFoundError: If `model_dir` is not a model directory (a training run's names its ``model``), or an
            adapter's base model is not found.
        ValueError: If `repo_id` or `base_model` is not a Hub repository id, `folder` is not empty, `model_dir`
            lacks a tokenizer, the template or the summary is invalid,
            an adapter's base model is not a Hub id, or `base_model` is given for a model directory.
    """
    model_dir, folder = Path(model_dir), Path(folder)
    check_repo_id(repo_id)  # written into the model card: the Hub's rules, before any work
    if base_model is not None:
        check_repo_id(base_model, "base_model")
    check_output_dir(folder, "folder")  # before any work; written whole by write_directory
    if is_adapter_dir(model_dir):
        if template is not None:
            logger.warning("a model card template is for model directories: an adapter gets the adapter card")
        return _prepare_adapter_folder(model_dir, folder, repo_id=repo_id, base_model=base_model)
    if base_model is not None:
        raise ValueError(f"base_model is for a LoRA adapter folder; {model_dir} has no {ADAPTER_CONFIG_FILE}")
    return _prepare_model_folder(model_dir, folder, repo_id=repo_id, template=template)


def _prepare_model_folder(model_dir: Path, folder: Path, *, repo_id: str, template: str | os.PathLike[str] | None):
    check_model_dir(model_dir)
    if not any((model_dir / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ValueError(
            f"model_dir={str(model_dir)!r} has no tokenizer (tokenizer.json, tokenizer_config.json); "
            "save it there with tokenizer.save_pretrained()"
        )
    summary_path = model_dir / SUMMARY_FILE
    summary = read_training_summary(summary_path) if summary_path.is_file() else {}
    if not summary:
        logger.warning("%s has no %s: the model card will show no measured figures", model_dir, SUMMARY_FILE)

    model, tokenizer = load_model_dir(model_dir)
    generation_path = model_dir / "generation_config.json"
    if not generation_path.is_file() or json.loads(generation_path.read_text()).get("_from_model_config", False):
        model.generation_config = paper_generation_config(model.config)
        logger.warning("%s has no generation config of its own: writing the paper's beam search", model_dir)

    card = build_model_card(model, summary, repo_id, template)

    def write(temporary: Path) -> None:
        save_model_dir(model, tokenizer, temporary)
        if summary_path.is_file():
            write_file(temporary / SUMMARY_FILE, summary_path.read_bytes())
        card.save(temporary / "README.md")

    write_directory(folder, write, what="folder")
    return folder


# --------------------------------------------------------------------------- adapter folders


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
    (`vanilla_transformer.model_summary`), and the adapter's settings and sizes."""
    base_model = base_model or base_model_of(model)
    model_name = repo_id.rstrip("/").rsplit("/", 1)[-1]
    data = model_card_data(summary, model_name)
    data.base_model = base_model
    data.library_name = "peft"
    data.tags = [*(data.tags or []), "lora", "peft"]
    values = {**summary, **lora_settings(model), "base_model": base_model, "repo_id": repo_id}
    values["base_model_url"] = hub_url(base_model)
    return render_card(data, ADAPTER_CARD, model_name=model_name, **values)


def save_adapter_with_card(
    model: PreTrainedModel,
    tokenizer: Any,
    directory: str | os.PathLike[str],
    *,
    summary: Mapping[str, Any] | None = None,
    base_model: str | None = None,
    repo_id: str | None = None,
) -> Path:
    """An adapter folder (`save_adapter_dir`, with `tokenizer`, `summary` and `base_model`) and its model card,
    README.md (`build_adapter_card`), which says the adapter is at `repo_id` (default: `directory`).

    Raises:
        ValueError: If `model` is not a ``PeftModel``, or a value of `summary` has the wrong type.
        TypeError: If `summary` has a key that is not a summary field.
    """
    summary = build_summary(**(summary or {}))  # checked before anything is written
    directory = save_adapter_dir(model, tokenizer, directory, summary=summary, base_model=base_model)
    build_adapter_card(model, summary, repo_id or str(directory)).save(directory / "README.md")
    return directory


def _prepare_adapter_folder(
    adapter_dir: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    repo_id: str,
    base_model: str | None = None,
) -> Path:
    """The upload folder of an adapter folder: the adapter, the tokenizer, the
    run summary and the model card, with `base_model` (a Hub id; by default the one recorded) as the base model.

    The adapter is loaded first, with its base (`load_model_dir`), so that what is uploaded is known to load.

    Raises:
        ValueError: If the base model is not a Hub id (a local path others cannot load: push the base, then pass
            ``base_model``).
        FileNotFoundError: If the base model is not found.
    """
    hub_base = base_model or adapter_base_model(adapter_dir)
    if not is_hub_id(hub_base):
        raise ValueError(
            f"the base model of {adapter_dir} is {hub_base!r}, not a Hub id that others can load: push the base model "
            "first, then give its Hub id (vanilla-transformer push --base-model ORG/NAME)"
        )
    model, tokenizer = load_model_dir(adapter_dir)
    summary_path = adapter_dir / SUMMARY_FILE
    summary = read_training_summary(summary_path) if summary_path.is_file() else {}
    write_directory(
        folder,
        lambda temporary: save_adapter_with_card(
            model, tokenizer, temporary, summary=summary, base_model=hub_base, repo_id=repo_id
        ),
        what="folder",
    )
    return Path(folder)


# --------------------------------------------------------------------------- upload


def push_to_hub(
    model_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    template: str | os.PathLike[str] | None = None,
    base_model: str | None = None,
    private: bool = False,
    token: str | None = None,
    commit_message: str | None = None,
) -> str:
    """Upload a trained model directory or a LoRA adapter folder to a Hub model repository, created if needed.

    The files uploaded are those of `prepare_upload_folder`, written to a temporary directory; files already in the
    repository that are not among them are left as they are.

    Args:
        model_dir, repo_id, template, base_model: As for `prepare_upload_folder`.
        private: Create the repository private (an existing repository keeps its visibility).
        token: A Hub token with write access; by default the one `hf auth login` saved.
        commit_message: Message of the upload commit (default: "Upload vanilla Transformer", or "Upload LoRA
            adapter" for an adapter folder).

    Returns:
        The URL of the commit.
    """
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as staging:
        folder = prepare_upload_folder(
            model_dir, Path(staging) / "upload", repo_id=repo_id, template=template, base_model=base_model
        )
        if commit_message is None:
            commit_message = "Upload LoRA adapter" if is_adapter_dir(model_dir) else "Upload vanilla Transformer"
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message)
    return commit.commit_url


__all__ = [
    "ADAPTER_CARD",
    "TEMPLATE",
    "build_adapter_card",
    "build_model_card",
    "hub_url",
    "is_hub_id",
    "model_card_data",
    "prepare_upload_folder",
    "push_to_hub",
    "save_adapter_with_card",
]
