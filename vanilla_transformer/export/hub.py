"""Share a trained model on the Hugging Face Hub: the upload folder, its model card, and the translation pipelines.

`prepare_upload_folder` turns a trained model directory into the folder that is uploaded; `push_to_hub` uploads
it. The folder loads where this package is not installed::

    model = AutoModelForSeq2SeqLM.from_pretrained("org/name", trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained("org/name", trust_remote_code=True)  # else it asks to run the code
    translator = pipeline("translation", model="org/name", trust_remote_code=True)

The model card (README.md) is the template ``model_card.md`` filled with the run's figures, read from the
`SUMMARY_FILE` that training writes next to the model (see `read_training_summary` for its keys) and from the model
itself (see `CARD_FIELDS`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import HfApi, ModelCardData
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel

from ..generation import paper_generation_config
from ..tokenization import check_tokenizer_matches_config

logger = logging.getLogger(__name__)

# --------------------------------------------------------------------------- pipelines

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


# --------------------------------------------------------------------------- training summary

SUMMARY_FILE = "training_summary.json"
"""Name of the run summary that training writes next to the exported model."""

_NUMBER = (int, float)
SUMMARY_KEYS: dict[str, tuple[type, ...]] = {
    "dataset": (str,),
    "dataset_config": (str,),
    "src_lang": (str,),
    "tgt_lang": (str,),
    "train_pairs": (int,),
    "eval_split": (str,),
    "steps": (int,),
    "epochs": _NUMBER,
    "train_hours": _NUMBER,
    "hardware": (str,),
    "bleu": _NUMBER,
    "signature": (str,),
    "chrf": _NUMBER,
    "chrf_signature": (str,),
    "exact_match": _NUMBER,
    "recipe": (dict,),
    "base_model": (str,),
    "notes": (str,),
}
"""The keys of `SUMMARY_FILE` that the model card reads, with their JSON types; see `read_training_summary`."""


def read_training_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a run summary, a JSON object whose keys are all optional:

    ========================  ======================================================================================
    ``dataset``               Hub id or name of the training corpus, e.g. ``"wmt14"``
    ``dataset_config``        its configuration, e.g. ``"de-en"``
    ``src_lang``/``tgt_lang`` language codes, e.g. ``"en"``, ``"de"``
    ``train_pairs``           number of training sentence pairs, after cleaning
    ``eval_split``            the split or test set the scores are measured on, e.g. ``"newstest2014"``
    ``steps``                 optimizer steps
    ``epochs``                passes over the training data
    ``train_hours``           wall-clock training time
    ``hardware``              e.g. ``"8 x NVIDIA P100"``
    ``bleu``, ``signature``   sacreBLEU BLEU (0-100) on ``eval_split`` and its signature
    ``chrf``                  sacreBLEU chrF (0-100), with ``chrf_signature``
    ``exact_match``           percentage of translations identical to their reference
    ``recipe``                object of hyperparameters (optimizer, warmup, label smoothing, batch size, beam ...)
    ``base_model``            the model fine-tuned, absent when trained from scratch
    ``notes``                 free text, added to the card's limitations
    ========================  ======================================================================================

    ``null`` values count as absent, and other keys are ignored.

    Raises:
        ValueError: If the file is not a JSON object or a key has the wrong type.
    """
    path = Path(path)
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(summary, dict):
        raise ValueError(f"{path} must hold a JSON object, found {type(summary).__name__}")
    checked = {}
    for key, value in summary.items():
        if key not in SUMMARY_KEYS:
            logger.info("%s: ignoring key %r, which the model card does not use", path, key)
        elif value is not None:
            types = SUMMARY_KEYS[key]
            if isinstance(value, bool) or not isinstance(value, types):
                expected = " or ".join(t.__name__ for t in types)
                raise ValueError(f"{path}: {key} must be {expected}, got {key}={value!r}")
            checked[key] = value
    return checked


# --------------------------------------------------------------------------- model card

CARD_FIELDS: dict[str, str] = {
    **{key: f"{key} of the training summary" for key in SUMMARY_KEYS},
    "model_name": "the repository name, the last part of repo_id",
    "repo_id": "the Hub repository, org/name",
    "parameters": "number of parameters (shared embeddings counted once)",
    "d_model": "model width",
    "encoder_layers": "encoder layers",
    "decoder_layers": "decoder layers",
    "attention_heads": "attention heads per layer",
    "ffn_dim": "inner width of the feed-forward networks",
    "vocab_size": "shared vocabulary size",
    "num_beams": "beam size of the generation config",
    "length_penalty": "length penalty of the generation config",
}
"""The fields a model card template may use, as ``{{ name }}``."""

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")
_HEADER = re.compile(r"\A---\n(.*?\n)---\n", re.DOTALL)
_COMMENT = re.compile(r"<!--.*?-->\n?", re.DOTALL)
_NOT_MEASURED = "to be measured"
_DESCRIPTIONS = ("dataset", "dataset_config", "src_lang", "tgt_lang", "eval_split", "hardware", "recipe")
_WHEN_MISSING = {
    **{key: "not recorded" for key in _DESCRIPTIONS},
    "base_model": "none: trained from scratch",
    "notes": "",
}
_FORMATS = {"bleu": "{:.2f}", "chrf": "{:.2f}", "exact_match": "{:.2f}", "epochs": "{:.2f}", "train_hours": "{:.3g}"}
_MISSING = object()


def model_card_fields(model: PreTrainedModel, summary: Mapping[str, Any], repo_id: str) -> dict[str, Any]:
    """Values of `CARD_FIELDS`: the summary's, the model's architecture and generation config; None where unknown."""
    config, generation = model.config, model.generation_config
    fields: dict[str, Any] = {key: summary.get(key) for key in SUMMARY_KEYS}
    fields.update(
        model_name=repo_id.rsplit("/", 1)[-1],
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
    return fields


def render_model_card(template: str | os.PathLike[str], fields: Mapping[str, Any]) -> str:
    """Fill a model card template with `fields`.

    The template is a Markdown file that starts with a YAML metadata header between ``---`` lines, and writes the
    fields of `CARD_FIELDS` as ``{{ name }}``. In the Markdown body, a field without a value (absent or None) reads
    "to be measured" ("not recorded" for descriptions). In the header, a string that is exactly one placeholder takes
    the field's value and type (numbers stay numbers), and a value whose field is missing is removed together with
    the innermost list item holding it (a metric without a value, an unknown language); a top-level key left empty
    is removed. The metadata thus stays valid for the Hub, which `huggingface_hub.ModelCardData` checks. HTML
    comments, notes to the template's editors, are left out.

    Raises:
        ValueError: If the template has no metadata header, uses a field not in `CARD_FIELDS` or a malformed
            placeholder, or its metadata is invalid once filled.
    """
    path = Path(template)
    text = path.read_text(encoding="utf-8")
    unknown = sorted({name for name in _PLACEHOLDER.findall(text) if name not in CARD_FIELDS})
    if unknown:
        raise ValueError(
            f"model card template {path} uses unknown field(s) {unknown}; the known fields are {sorted(CARD_FIELDS)}"
        )
    if "{{" in _PLACEHOLDER.sub("", text) or "}}" in _PLACEHOLDER.sub("", text):
        raise ValueError(f"model card template {path} has a malformed placeholder; write fields as {{{{ name }}}}")
    match = _HEADER.match(text)
    if match is None:
        raise ValueError(f"model card template {path} does not start with a YAML metadata header between '---' lines")
    try:
        metadata = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"the metadata header of model card template {path} is not valid YAML: {error}") from error
    if not isinstance(metadata, dict):
        raise ValueError(f"the metadata header of model card template {path} is not a YAML mapping")

    filled = {key: _fill_metadata(value, fields) for key, value in metadata.items()}
    filled = {key: value for key, value in filled.items() if value is not _MISSING}
    try:
        ModelCardData(**filled)  # the Hub's own checks, of model-index in particular
    except (TypeError, ValueError, KeyError) as error:
        raise ValueError(f"model card template {path} gives invalid metadata: {error}") from error
    header = yaml.safe_dump(filled, sort_keys=False, allow_unicode=True)
    body = _COMMENT.sub("", text[match.end() :])
    body = _PLACEHOLDER.sub(lambda m: _markdown(m.group(1), fields.get(m.group(1))), body)
    body = re.sub(r"\n{3,}", "\n\n", body)  # blank lines left by comments and empty fields
    return f"---\n{header}---\n{body}"


def _fill_metadata(node: Any, fields: Mapping[str, Any]) -> Any:
    """Placeholders of a metadata value replaced; `_MISSING` if a field it needs has no value."""
    if isinstance(node, str):
        names = _PLACEHOLDER.findall(node)
        if any(fields.get(name) is None for name in names):
            return _MISSING
        whole = _PLACEHOLDER.fullmatch(node.strip())
        if whole is not None:
            value = fields[whole.group(1)]
            return round(value, 2) if isinstance(value, float) else value
        return _PLACEHOLDER.sub(lambda m: str(fields[m.group(1)]), node)
    if isinstance(node, dict):
        items = {key: _fill_metadata(value, fields) for key, value in node.items()}
        return _MISSING if _MISSING in items.values() else items
    if isinstance(node, list):
        kept = [item for item in (_fill_metadata(item, fields) for item in node) if item is not _MISSING]
        return kept if kept or not node else _MISSING
    return node


def _markdown(name: str, value: Any) -> str:
    """A field's value as Markdown text."""
    if value is None:
        return _WHEN_MISSING.get(name, _NOT_MEASURED)
    if name in _FORMATS:
        return _FORMATS[name].format(value)
    if name in ("signature", "chrf_signature"):
        return f"`{value}`"
    if isinstance(value, dict):
        rows = [f"| `{key}` | {str(item).replace('|', '&#124;')} |" for key, item in value.items()]
        return "\n".join(["| Setting | Value |", "| --- | --- |", *rows])
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


# --------------------------------------------------------------------------- upload folder


def prepare_upload_folder(
    model_dir: str | os.PathLike[str],
    folder: str | os.PathLike[str],
    *,
    repo_id: str,
    template: str | os.PathLike[str],
) -> Path:
    """Write the folder that `push_to_hub` uploads, from a trained model directory.

    The folder holds the model saved anew (config.json with ``auto_map`` and ``custom_pipelines``, safetensors
    weights, the modeling, configuration and pipeline code files, generation_config.json), the tokenizer, the
    `SUMMARY_FILE` if `model_dir` has one, and README.md, the model card rendered from `template`. A model directory
    whose generation config was derived from the model config (``_from_model_config``) or is absent gets
    `paper_generation_config` instead, with a warning.

    Args:
        model_dir: The trained model directory: model, tokenizer and, optionally, `SUMMARY_FILE`.
        folder: Where to write; it must not exist or be empty.
        repo_id: The Hub repository, ``org/name``, named in the model card.
        template: The model card template, see `render_model_card`.

    Raises:
        ValueError: If `folder` is not empty, `model_dir` lacks a model or a tokenizer, or the template or the
            summary is invalid.
    """
    model_dir, folder = Path(model_dir), Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"folder={str(folder)!r} exists and is not an empty directory")
    if not (model_dir / "config.json").is_file():
        raise ValueError(f"model_dir={str(model_dir)!r} is not a saved model directory: it has no config.json")
    if not any((model_dir / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        raise ValueError(
            f"model_dir={str(model_dir)!r} has no tokenizer (tokenizer.json, tokenizer_config.json); "
            "save it there with tokenizer.save_pretrained()"
        )
    summary_path = model_dir / SUMMARY_FILE
    summary = read_training_summary(summary_path) if summary_path.is_file() else {}
    if not summary:
        logger.warning("%s has no %s: the model card will show no measured figures", model_dir, SUMMARY_FILE)

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    check_tokenizer_matches_config(tokenizer, model.config)
    generation_path = model_dir / "generation_config.json"
    if not generation_path.is_file() or json.loads(generation_path.read_text()).get("_from_model_config", False):
        model.generation_config = paper_generation_config(model.config)
        logger.warning("%s has no generation config of its own: writing the paper's beam search", model_dir)

    card = render_model_card(template, model_card_fields(model, summary, repo_id))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    add_pipeline_support(folder)
    if summary_path.is_file():
        shutil.copyfile(summary_path, folder / SUMMARY_FILE)
    (folder / "README.md").write_text(card, encoding="utf-8")
    return folder


def push_to_hub(
    model_dir: str | os.PathLike[str],
    repo_id: str,
    *,
    template: str | os.PathLike[str],
    private: bool = False,
    token: str | None = None,
    commit_message: str = "Upload vanilla Transformer",
) -> str:
    """Upload a trained model directory to a Hub model repository, created if needed.

    The files uploaded are those of `prepare_upload_folder`, written to a temporary directory; files already in the
    repository that are not among them are left as they are.

    Args:
        model_dir, repo_id, template: As for `prepare_upload_folder`.
        private: Create the repository private (an existing repository keeps its visibility).
        token: A Hub token with write access; by default the one `hf auth login` saved.
        commit_message: Message of the upload commit.

    Returns:
        The URL of the commit.
    """
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory() as staging:
        folder = prepare_upload_folder(model_dir, Path(staging) / "upload", repo_id=repo_id, template=template)
        api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        commit = api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message)
    return commit.commit_url


__all__ = [
    "CARD_FIELDS",
    "PIPELINE_TASKS",
    "SUMMARY_FILE",
    "SUMMARY_KEYS",
    "add_pipeline_support",
    "model_card_fields",
    "prepare_upload_folder",
    "push_to_hub",
    "read_training_summary",
    "render_model_card",
]
