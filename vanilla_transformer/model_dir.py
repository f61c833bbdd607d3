"""The one way to save and to load a model directory: what training, fine-tuning, averaging and the Hub upload
write, and what translate, evaluate, attention, finetune and push read.

A model directory holds ``config.json`` (with ``auto_map`` for remote code and ``custom_pipelines`` for the
translation pipelines), ``model.safetensors``, the modeling, configuration and pipeline code files,
``generation_config.json``, the tokenizer (whose ``model_max_length`` is the model's ``max_position_embeddings``)
and, from a training run, ``training_summary.json`` (`vanilla_transformer.model_summary`)::

    save_model_dir(model, tokenizer, "runs/numbers/model", generation_config=paper_generation_config(model.config))
    model, tokenizer = load_model_dir("runs/numbers/model")

`load_model_dir` also loads a LoRA adapter folder (``adapter_config.json``, ``adapter_model.safetensors``, as
``vanilla-transformer finetune --lora`` and peft's ``save_pretrained`` write it): its base model is the one named by
``base_model_name_or_path`` in ``adapter_config.json``, loaded as a model directory, and the adapter is applied with
peft, as ``AutoPeftModelForSeq2SeqLM`` would; the model returned is the ``PeftModel``; `save_adapter_dir` writes
one. Loading never runs code from the directory (``trust_remote_code=False``: the package's own classes serve the
model).
"""

from __future__ import annotations

import json
import os
import pickle
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoConfig,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from .atomic import write_file
from .extras import import_optional
from .folder_kinds import is_ctranslate2_dir, is_onnx_dir
from .library_errors import load_failure
from .model_checks import (
    LOAD_FIX,
    WEIGHTS_FILE,
    check_no_foreign_code,
    check_weights,
    remote_code_refusal,
    safetensors_header,
)
from .model_summary import build_summary, write_training_summary
from .progress_bars import progress_bars_over
from .reading import check_links_inside, note_read, read_json
from .tokenization import check_tokenizer_matches_config

ADAPTER_CONFIG_FILE = "adapter_config.json"
"""What marks a directory as a peft adapter folder; its ``base_model_name_or_path`` names the base model."""

ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
"""The adapter's weights; an adapter folder without them (peft's pickled ``adapter_model.bin``) is not loaded."""

PIPELINE_CODE_FILE = Path(__file__).resolve().parent / "pipeline_vanilla_transformer.py"
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
    write_file(model_dir / PIPELINE_CODE_FILE.name, PIPELINE_CODE_FILE.read_bytes())
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["custom_pipelines"] = PIPELINE_TASKS
    write_file(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")  # never a cut config.json


def _weights_bytes(name: str | os.PathLike[str]) -> int | None:
    """The size of a local model directory's weight files; None for a Hub id."""
    folder = Path(name)
    if not folder.is_dir():
        return None
    return sum(path.stat().st_size for path in folder.glob("*.safetensors") if path.is_file())


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
            `vanilla_transformer.serving.search.paper_generation_config`); by default the model's own is saved.
        summary: The run's figures, written as its summary (see `vanilla_transformer.model_summary`).
    """
    directory = Path(directory)
    if generation_config is not None:
        model.generation_config = generation_config
    with progress_bars_over(sum(p.numel() * p.element_size() for p in model.parameters())):
        model.save_pretrained(directory)
    if tokenizer is not None:
        tokenizer.model_max_length = model.config.max_position_embeddings
        tokenizer.save_pretrained(directory)
    add_pipeline_support(directory)
    if summary is not None:
        write_training_summary(directory, summary)
    return directory


def save_adapter_dir(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase | None,
    directory: str | os.PathLike[str],
    *,
    summary: Mapping[str, Any] | None = None,
    base_model: str | None = None,
) -> Path:
    """Write an adapter folder, which `load_model_dir` loads: the adapter (safetensors), the tokenizer and `summary`
    as ``training_summary.json``. Its model card is written by whoever saves an adapter for others to read
    (`vanilla_transformer.export.hub.save_adapter_with_card`: fine-tuning and the Hub upload).

    Args:
        model: A ``PeftModel`` (see `add_lora`).
        tokenizer: Its tokenizer (``model_max_length`` set to ``max_position_embeddings``); None leaves it out.
        directory: Where to write; created if needed.
        summary: The run's figures (see `vanilla_transformer.model_summary`).
        base_model: Recorded as ``base_model_name_or_path`` (e.g. the base's Hub id); by default the model's own.

    Raises:
        ValueError: If `model` is not a ``PeftModel``, or a value of `summary` has the wrong type.
        TypeError: If `summary` has a key that is not a summary field.
    """
    if not is_peft_model(model):
        raise ValueError(f"save_adapter_dir saves a peft PeftModel, got {type(model).__name__}")
    summary = build_summary(**(summary or {}))  # checked before anything is written
    directory = Path(directory)
    if base_model is not None:
        model.peft_config[model.active_adapter].base_model_name_or_path = base_model
    model.save_pretrained(directory, safe_serialization=True)
    if tokenizer is not None:
        tokenizer.model_max_length = model.config.max_position_embeddings
        tokenizer.save_pretrained(directory)
    if summary:
        write_training_summary(directory, {**summary, "base_model": base_model_of(model)})
    return directory


def load_model_dir(
    name_or_path: str | os.PathLike[str],
    device: str | torch.device = "cpu",
    *,
    revision: str | None = None,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The model (in eval mode, on `device`) and tokenizer of a model directory, Hub repository or adapter folder.

    A training run's directory (the ``--output-dir`` of ``vanilla-transformer train``) is not a model directory:
    its model is in ``<run>/model``, which the error names. A local LoRA adapter folder (see `is_adapter_dir`) gives
    its base model with the adapter applied, a peft ``PeftModel`` (see `load_adapter_dir`).

    Raises:
        FileNotFoundError: If a local path does not exist, or is a directory without a model, or an adapter folder's
            base model is not found.
        ValueError: If the model or the tokenizer cannot be loaded, or they do not fit each other.
    """
    name = str(name_or_path)
    if is_local_path(name):
        if is_adapter_dir(name):
            return load_adapter_dir(name, device)
        check_model_dir(name)
    model, tokenizer = _load_model_and_tokenizer(name, revision=revision)
    return model.to(device).eval(), tokenizer


def is_local_path(name: str) -> bool:
    """Whether `name` is a local directory rather than a Hub id ("name" or "org/name"): it exists here, or it starts
    with ".", "/" or "~", or it has more than one "/"."""
    return Path(name).exists() or name.startswith((".", "/", "~")) or name.count("/") > 1


def _load_model_and_tokenizer(
    name: str, *, revision: str | None = None, use_safetensors: bool | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    tokenizer = load_tokenizer(name, revision=revision)
    try:  # the tokenizer against config.json before the weights load; a config.json that fails: load_model names it
        config = AutoConfig.from_pretrained(name, revision=revision, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError):
        config = None
    if config is not None:
        check_tokenizer_matches_config(tokenizer, config)
    model = load_model(name, revision=revision, use_safetensors=use_safetensors)
    check_tokenizer_matches_config(tokenizer, model.config)
    if tokenizer.model_max_length > model.config.max_position_embeddings:  # saved before model_max_length was set
        tokenizer.model_max_length = model.config.max_position_embeddings
    return model, tokenizer


def load_tokenizer(name: str | os.PathLike[str], *, revision: str | None = None) -> PreTrainedTokenizerBase:
    """The tokenizer of a model directory or Hub id, without running code from it (``trust_remote_code=False``).

    Raises:
        ValueError: If it does not load, whatever the cause (a damaged file fails in transformers or tokenizers as
            any exception), naming the directory, its tokenizer files and the fix.
    """
    if Path(name).is_dir():
        check_links_inside(name, "tokenizer folder")
    try:
        return AutoTokenizer.from_pretrained(name, revision=revision, trust_remote_code=False)
    except ImportError:
        raise
    except Exception as error:
        if "trust_remote_code" in str(error):
            raise ValueError(remote_code_refusal(name)) from error
        raise ValueError(
            f"{str(name)!r} has no loadable tokenizer: its tokenizer.json or tokenizer_config.json ({type(error).__name__}: "
            f"{error}): save it next to the model with save_model_dir, or {LOAD_FIX}"
        ) from error


def load_model(
    name: str | os.PathLike[str], *, revision: str | None = None, use_safetensors: bool | None = None
) -> PreTrainedModel:
    """The model of a model directory or Hub id, without running code from it, every weight read from its file.

    Raises:
        ValueError: If config.json or the weights do not load, or the weights file lacks (or mis-sizes) some of the
            model's weights, which transformers would otherwise start from random values; naming the file and the fix.
    """
    try:
        with progress_bars_over(_weights_bytes(name)):
            model, info = AutoModelForSeq2SeqLM.from_pretrained(
                name, revision=revision, trust_remote_code=False, use_safetensors=use_safetensors,
                output_loading_info=True,
            )  # fmt: skip
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, MemoryError, pickle.UnpicklingError) as error:
        failure = load_failure(str(name), error)  # memory, a refused pickle: named with their file
        if failure is not None:
            raise failure from error
        if "trust_remote_code" in str(error):
            raise ValueError(remote_code_refusal(name)) from error
        raise ValueError(
            f"{str(name)!r} has no loadable model: its config.json or {WEIGHTS_FILE} ({type(error).__name__}: "
            f"{error}); {LOAD_FIX}"
        ) from error
    missing = sorted(map(str, info.get("missing_keys") or [])) + sorted(map(str, info.get("mismatched_keys") or []))
    if missing:
        raise ValueError(
            f"{os.path.join(name, WEIGHTS_FILE)} lacks or mis-sizes {len(missing)} of the model's weights "
            f"({missing[:3]}): it is damaged or belongs to another model; {LOAD_FIX}"
        )
    return model


def is_peft_model(model: Any) -> bool:
    """Whether `model` is a peft ``PeftModel`` (without importing peft)."""
    return any(cls.__module__.startswith("peft.") for cls in type(model).__mro__) and hasattr(model, "peft_config")


def base_model_of(model: PreTrainedModel) -> str:
    """The base model recorded in the active adapter's config (``base_model_name_or_path``)."""
    return model.peft_config[model.active_adapter].base_model_name_or_path


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


def is_saved_model_dir(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` is a model directory of this package (its config.json names ``vanilla_transformer``): what
    `save_model_dir` writes, so that an atomic rewrite (`vanilla_transformer.atomic`) may replace it."""
    try:
        config = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") == "vanilla_transformer"


def is_adapter_dir(directory: str | os.PathLike[str]) -> bool:
    """Whether `directory` is a local peft adapter folder: it holds ``adapter_config.json`` and no ``config.json``."""
    directory = Path(directory)
    return (directory / ADAPTER_CONFIG_FILE).is_file() and not (directory / "config.json").is_file()


def adapter_base_model(directory: str | os.PathLike[str]) -> str:
    """The base model of an adapter folder: ``base_model_name_or_path`` of its ``adapter_config.json``.

    Raises:
        ValueError: If the file is not JSON or does not name a base model.
    """
    path = Path(directory) / ADAPTER_CONFIG_FILE
    try:
        base = read_json(path, "adapter config", inside=directory).get("base_model_name_or_path")
    except (ValueError, AttributeError) as error:
        raise ValueError(f"{path} is not a JSON object: {error}") from error
    if not isinstance(base, str) or not base:
        raise ValueError(f"{path} names no base model (base_model_name_or_path={base!r})")
    return base


def load_adapter_dir(
    directory: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The base model of a LoRA adapter folder with the adapter applied (a ``PeftModel``, in eval mode, on `device`),
    and the folder's tokenizer (else the base model's).

    The base is ``base_model_name_or_path`` of ``adapter_config.json``, as ``AutoPeftModelForSeq2SeqLM`` reads it
    (a relative path from the current directory), loaded as a model directory with safetensors weights only and no
    remote code; the adapter's weights must be ``adapter_model.safetensors``.

    Raises:
        FileNotFoundError: If the weights are missing, or the base model is not found; the message names the
            adapter folder and the path it tried.
        ValueError: If the base model cannot be loaded, or the adapter does not fit it.
    """
    peft = import_optional("peft", "peft", f"loading the adapter folder {directory}")
    directory = Path(directory)
    check_links_inside(directory, "adapter folder")
    note_read(directory, f"the adapter folder {directory}")
    if not (directory / ADAPTER_WEIGHTS_FILE).is_file():
        raise FileNotFoundError(
            f"adapter folder {directory} has no {ADAPTER_WEIGHTS_FILE}: only safetensors adapters are loaded"
        )
    base = adapter_base_model(directory)
    local = is_local_path(base)
    tried = f"the directory {Path(base).expanduser().resolve()}" if local else f"the Hub repository {base}"
    context = f"adapter folder {directory}: its base model {base!r} (base_model_name_or_path in {ADAPTER_CONFIG_FILE})"
    if local and is_adapter_dir(base):
        raise ValueError(f"{context} is itself an adapter folder; merge it first (finetune --lora --merge)")
    try:
        if local:
            check_model_dir(base)
        model, tokenizer = _load_model_and_tokenizer(base, use_safetensors=True)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{context} was not found: tried {tried} ({error})") from error
    except ValueError as error:
        raise ValueError(f"{context} could not be loaded from {tried} ({error})") from error
    if any((directory / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
        check_tokenizer_matches_config(tokenizer, model.config)
        tokenizer.model_max_length = min(tokenizer.model_max_length, model.config.max_position_embeddings)
    check_adapter_sizes(directory, model, base)
    try:
        with warnings.catch_warnings():  # peft reads the deprecated is_gradient_checkpointing: not the user's to fix
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
            model = peft.PeftModel.from_pretrained(model, directory, is_trainable=False)
    except (KeyError, RuntimeError, ValueError) as error:
        first = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"adapter folder {directory} does not fit its base model {base!r} ({first})") from error
    return model.to(device).eval(), tokenizer


def check_adapter_sizes(directory: Path, model: PreTrainedModel, base: str) -> None:
    """Refuse, in one line naming both sizes, an adapter made for a base model of another size (peft would print a
    table of every mismatched weight): each ``lora_A`` must read the inputs, each ``lora_B`` write the outputs, of the
    base model's layer it adapts."""
    modules = dict(model.named_modules())
    for name, (_, shape) in safetensors_header(directory / ADAPTER_WEIGHTS_FILE).items():
        for part, axis, feature in ((".lora_A.", 1, "in_features"), (".lora_B.", 0, "out_features")):
            if part not in name or len(shape) != 2:
                continue
            layer = modules.get(name.split(part)[0].removeprefix("base_model.model."))
            size = getattr(layer, feature, None)
            if size is not None and size != shape[axis]:
                raise ValueError(
                    f"adapter folder {directory} was made for a base model of another size: its {name} has "
                    f"{shape[axis]} {feature.replace('_', ' ')}, the base model {base!r} (d_model "
                    f"{model.config.d_model}) has {size}; give it the base it was trained on"
                )


def check_model_dir(directory: str | os.PathLike[str]) -> None:
    """Raise a FileNotFoundError unless `directory` is a Hugging Face model directory, naming the likely mistake: a
    training run's directory names its model, ``<run>/model``."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no model directory at {directory}")
    if is_adapter_dir(directory):
        raise FileNotFoundError(
            f"{directory} is a LoRA adapter folder, not a model directory: write a merged model directory with "
            "vanilla-transformer finetune --lora --merge"
        )
    check_not_exported(directory)
    if not (directory / "config.json").is_file():
        if (directory / "model" / "config.json").is_file():
            raise FileNotFoundError(
                f"{directory} is a training run directory, not a model directory: pass {directory / 'model'}"
            )
        raise FileNotFoundError(f"{directory} holds no config.json: it is not a Hugging Face model directory")
    check_links_inside(directory, "model directory")
    note_read(directory, f"the model directory {directory}")  # an output must not replace it (`reading`)
    check_model_files(directory)
    check_no_foreign_code(directory)
    check_weights(directory)


def check_not_exported(directory: Path) -> None:
    """Name an export given where a model directory goes: an ONNX folder (``export-onnx``) or a CTranslate2 model
    (``export-ctranslate2``) holds no PyTorch weights; ``translate`` and ``evaluate`` serve the first, and
    every command takes the model directory it was exported from."""
    kind = (
        "an ONNX export"
        if is_onnx_dir(directory)
        else "a CTranslate2 export"
        if is_ctranslate2_dir(directory)
        else None
    )
    if kind is not None:
        served = (
            "translate and evaluate serve it (--engine onnxruntime)" if "ONNX" in kind else "it has no weights here"
        )
        raise ValueError(
            f"{directory} is {kind}, not a model directory: {served}; give this command the model directory it was "
            f"exported from"
        )


JSON_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
"""The JSON files of a model directory that `check_model_files` parses before anything loads them."""


def check_model_files(directory: str | os.PathLike[str]) -> None:
    """Raise a ValueError naming the file and the fix if a JSON file of `directory` (`JSON_FILES`) is not JSON or
    ``model.safetensors`` is damaged or truncated (`safetensors_header`); transformers' own errors name neither, and a
    damaged generation_config.json would be skipped silently (decoding with other settings than the model's).

    Only headers are read: the weights themselves are checked by safetensors as they load."""
    directory = Path(directory)
    fix = f"the file is damaged: {LOAD_FIX}"
    for name in (*JSON_FILES, WEIGHTS_FILE):
        path = directory / name
        if path.exists() and not path.is_file():
            raise ValueError(f"{path} is not a regular file (a folder, a device or a pipe): {fix}")
    for name in JSON_FILES:
        path = directory / name
        if path.is_file():
            try:
                content = read_json(path, "model directory's JSON file", inside=directory)
            except ValueError as error:
                raise ValueError(f"{path} is not valid JSON ({error}): {fix}") from error
            if not isinstance(content, dict):
                raise ValueError(f"{path} must hold a JSON object, not a {type(content).__name__}: {fix}")
    if (directory / WEIGHTS_FILE).is_file():
        safetensors_header(directory / WEIGHTS_FILE)


__all__ = [
    "ADAPTER_CONFIG_FILE",
    "LOAD_FIX",
    "ADAPTER_WEIGHTS_FILE",
    "PIPELINE_TASKS",
    "adapter_base_model",
    "add_pipeline_support",
    "base_model_of",
    "check_model_dir",
    "check_model_files",
    "check_not_exported",
    "is_adapter_dir",
    "is_local_path",
    "is_peft_model",
    "is_saved_model_dir",
    "load_adapter_dir",
    "load_model",
    "load_model_dir",
    "load_tokenizer",
    "lora_settings",
    "save_adapter_dir",
    "save_model_dir",
]
