"""What a model folder must pass before anything in it is used: no code of its own to run (an ``auto_map`` naming
a class transformers and this package lack), and every tensor of its weights the model its config.json describes, by
name, shape and dtype. `vanilla_transformer.model_dir.check_model_dir` runs these; checkpoints and adapters reuse
`safetensors_header` and `check_tensors`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM

WEIGHTS_FILE = "model.safetensors"
"""The weights of a model directory."""

LOAD_FIX = "copy, export or download the model directory again"
"""What the errors of `load_tokenizer` and `load_model` tell the user to do about a damaged file."""


REMOTE_CODE_FILES = {"config.json": "model_type", "tokenizer_config.json": "tokenizer_class"}
"""The files whose ``auto_map`` may name code to run, with the field that names the class without it."""


def check_no_foreign_code(directory: str | os.PathLike[str]) -> None:
    """Refuse a model folder that could only be loaded by running its own code: its config.json names another model
    type than this package's, or its tokenizer_config.json a tokenizer class transformers does not have, with an
    ``auto_map`` naming code files. This package's own model directories carry ``auto_map`` too, for users of remote
    code, but load with the package's classes and run none of it."""
    import transformers

    directory = Path(directory)
    config = _json_object(directory / "config.json")
    tokenizer = _json_object(directory / "tokenizer_config.json")
    ours = config.get("model_type") == "vanilla_transformer"
    foreign = {
        "config.json": config.get("auto_map") and not ours,
        "tokenizer_config.json": tokenizer.get("auto_map")
        and not hasattr(transformers, str(tokenizer.get("tokenizer_class", ""))),
    }
    for name, needs_code in foreign.items():
        if needs_code:
            raise ValueError(remote_code_refusal(directory, name))


def remote_code_refusal(directory: str | os.PathLike[str], name: str | None = None) -> str:
    """The one line refusing a folder that asks to run its own code: the file, the code it names, how to inspect it."""
    directory = Path(directory)
    names = [name] if name else list(REMOTE_CODE_FILES)
    entries = {}
    for file in names:
        auto_map = _json_object(directory / file).get("auto_map")
        if isinstance(auto_map, dict):
            entries[file] = sorted(
                {str(v) for value in auto_map.values() for v in ([value] if isinstance(value, str) else value) if v}
            )
    file = next((file for file in names if entries.get(file)), names[0])
    modules = sorted({entry.rsplit(".", 1)[0].split("--")[-1] + ".py" for entry in entries.get(file, [])})
    code = ", ".join(str(directory / module) for module in modules) or "code it does not ship"
    return (
        f"{directory / file} asks to run code from {code} (auto_map: {', '.join(entries.get(file, [])) or '?'}) to "
        f"load this model; vanilla-transformer never runs code from a model folder. Read that code (e.g. less "
        f"{code.split(', ')[0]}) to see what the folder is; a model of this package loads without it"
    )


def _json_object(path: Path) -> dict[str, Any]:
    try:
        content = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return content if isinstance(content, dict) else {}


SAFETENSORS_DTYPES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}  # fmt: skip
"""How a safetensors header names each torch dtype."""


def safetensors_header(path: str | os.PathLike[str]) -> dict[str, tuple[str, list[int]]]:
    """The (dtype, shape) of each tensor a safetensors file declares, from its header (no weight is read): the one
    reader of a safetensors header, safetensors' own, which also checks that the header covers the whole file.

    Raises:
        ValueError: If the file is empty, cut, or not a safetensors file, naming the file.
    """
    try:
        with safe_open(str(path), framework="pt") as handle:
            slices = {name: handle.get_slice(name) for name in handle.keys()}
            return {name: (part.get_dtype(), list(part.get_shape())) for name, part in slices.items()}
    except SafetensorError as error:  # an empty, truncated or foreign file
        raise ValueError(
            f"{path} is not a complete safetensors file ({error}): the file is damaged: {LOAD_FIX}"
        ) from error


def check_tensors(
    path: str | os.PathLike[str],
    expected: Mapping[str, torch.Tensor],
    *,
    model: str = "the model",
    fix: str = LOAD_FIX,
    exact: bool = True,
) -> None:
    """Refuse a safetensors file holding a tensor whose name, shape or dtype is not that of `expected` (a state dict,
    of meta tensors for example), before any weight is read: one line naming the file, the tensor and both values.
    Not `exact`: a floating point weight may be stored in another floating point dtype (a model saved in bf16)."""
    for name, (dtype, shape) in safetensors_header(path).items():
        if name not in expected:
            raise ValueError(f"{path} holds the tensor {name}, which {model} has no place for: {fix}")
        tensor = expected[name]
        want = SAFETENSORS_DTYPES.get(tensor.dtype, str(tensor.dtype))
        floating = {"F64", "F32", "F16", "BF16"}
        if list(tensor.shape) != shape:
            raise ValueError(f"{path}: {name} has shape {shape}, in {model} {list(tensor.shape)}: {fix}")
        if dtype != want and (exact or not (want in floating and dtype in floating)):
            raise ValueError(f"{path}: {name} is stored as {dtype}, in {model} {want}: {fix}")


SIZE_SETTINGS = ("vocab_size", "encoder_layers", "decoder_layers", "max_position_embeddings")
"""The declared sizes that drive a model's memory, each with d_model (and the feed-forward sizes)."""


def declared_bytes(config: Any, bytes_per_parameter: int = 4) -> dict[str, int]:
    """The memory of the model `config` declares, by the setting of `SIZE_SETTINGS` that drives each part: the
    embedding, the layers of each stack (their attention and feed-forward weights), the two positional tables.
    `bytes_per_parameter`: 4 to hold float32 weights, 16 to train them with Adam (weights, gradients, two moments)."""
    d_model = int(getattr(config, "d_model", 0) or 0)
    ffn = {part: int(getattr(config, f"{part}_ffn_dim", 0) or 0) for part in ("encoder", "decoder")}
    per_layer = {"encoder": 4 * d_model**2 + 2 * d_model * ffn["encoder"], "decoder": 8 * d_model**2 + 2 * d_model * ffn["decoder"]}  # fmt: skip
    count = {name: int(getattr(config, name, 0) or 0) for name in SIZE_SETTINGS}
    return {
        "vocab_size": count["vocab_size"] * d_model * bytes_per_parameter,
        "encoder_layers": count["encoder_layers"] * per_layer["encoder"] * bytes_per_parameter,
        "decoder_layers": count["decoder_layers"] * per_layer["decoder"] * bytes_per_parameter,
        "max_position_embeddings": 2 * count["max_position_embeddings"] * d_model * 4,
    }


def layers_held(header: Mapping[str, tuple[str, list[int]]], stack: str) -> int:
    """How many layers of `stack` (``encoder``, ``decoder``) a weights file holds: one more than the highest index
    of a ``<stack>.layers.<i>.`` tensor."""
    pattern = re.compile(rf"(?:^|\.){stack}\.layers\.(\d+)\.")
    return max((int(match.group(1)) + 1 for name in header if (match := pattern.search(name))), default=0)


def check_declared_sizes(
    config: Any,
    source: str,
    header: Mapping[str, tuple[str, list[int]]] | None = None,
    *,
    weights: str = WEIGHTS_FILE,
    bytes_per_parameter: int = 4,
    fix: str = LOAD_FIX,
) -> None:
    """Refuse, before anything is built or allocated, a model whose declared sizes (`source`: a config.json, a run's
    settings) the weights do not hold (the layers of each stack in `header`, the weights file's header) or memory
    cannot (`declared_bytes` against `environment.available_memory`): one line naming the setting and its value."""
    from .environment import available_memory

    for stack in ("encoder", "decoder") if header else ():
        declared, held = getattr(config, f"{stack}_layers", None), layers_held(header, stack)
        if held and declared != held:
            raise ValueError(f"{source} declares {stack}_layers={declared:,}, {weights} holds {held}: {fix}")
    parts = declared_bytes(config, bytes_per_parameter)
    need, available = sum(parts.values()), available_memory()
    if need > available:
        setting = max(parts, key=parts.__getitem__)
        raise ValueError(
            f"{source} declares {setting}={getattr(config, setting):,} (d_model={getattr(config, 'd_model', '?')}): "
            f"a model of {need / 1e9:,.1f} GB, more than the {available / 1e9:,.1f} GB of memory available here; "
            f"{fix}"
        )


def check_weights(directory: str | os.PathLike[str]) -> None:
    """Check every tensor of the directory's ``model.safetensors`` against the model its config.json describes (built
    on the meta device: no memory, no weights): name, shape and dtype (its config's ``dtype`` when recorded); first, the
    sizes config.json declares against what the weights hold and memory allows (`check_declared_sizes`)."""
    directory = Path(directory)
    weights = directory / WEIGHTS_FILE

    def refusal(error: Exception) -> ValueError:
        if "trust_remote_code" in str(error):
            return ValueError(remote_code_refusal(directory))
        return ValueError(f"{directory / 'config.json'} does not describe a model ({error}): {LOAD_FIX}")

    try:
        config = AutoConfig.from_pretrained(directory, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise refusal(error) from error
    header = safetensors_header(weights) if weights.is_file() else None
    check_declared_sizes(config, str(directory / "config.json"), header, weights=str(weights))
    if header is None:
        return
    try:
        with torch.device("meta"):
            model = AutoModelForSeq2SeqLM.from_config(config, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise refusal(error) from error
    recorded = getattr(config, "dtype", None)
    expected = model.state_dict()
    if isinstance(recorded, torch.dtype):
        expected = {name: t.to(recorded) if t.is_floating_point() else t for name, t in expected.items()}
    model_source = f"the model of {directory / 'config.json'}"
    check_tensors(weights, expected, model=model_source, exact=isinstance(recorded, torch.dtype))


__all__ = [
    "LOAD_FIX",
    "REMOTE_CODE_FILES",
    "SAFETENSORS_DTYPES",
    "WEIGHTS_FILE",
    "SIZE_SETTINGS",
    "check_declared_sizes",
    "check_no_foreign_code",
    "declared_bytes",
    "layers_held",
    "check_tensors",
    "check_weights",
    "remote_code_refusal",
    "safetensors_header",
]
