"""The training state of a checkpoint, written and read without pickle.

``torch.save``/``torch.load`` (and Accelerate's ``save_state``/``load_state``, which use them) store Python objects
with pickle, and unpickling a file can run any code it names: a shared checkpoint must not be able to do that. Here
every piece is a ``.safetensors`` file: its tensors (optimizer moments, random number generator states) as tensors,
everything else (optimizer hyperparameters, scheduler, progress, loss scale) as JSON in the file's metadata, decoded by
`decode` into dicts, lists, tuples, numbers and strings only. Reading such a file parses a header and copies bytes;
nothing in it is ever executed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from ..reading import parse_json

_STATE_KEY = "state"  # the metadata entry holding the JSON


class CheckpointError(ValueError):
    """A checkpoint, or a piece of one, is missing, incomplete or damaged."""


def encode(value: Any, tensors: dict[str, torch.Tensor], path: str = "") -> Any:
    """`value` as JSON-compatible data; its tensors go to `tensors` under their path (``.optimizer.state.3.exp_avg``)."""
    if isinstance(value, torch.Tensor):
        tensors[path] = value.detach().to("cpu").contiguous()
        return {"tensor": path}
    if isinstance(value, Mapping):
        return {"dict": [[key, encode(item, tensors, f"{path}.{key}")] for key, item in value.items()]}
    if isinstance(value, (list, tuple)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        return {kind: [encode(item, tensors, f"{path}.{index}") for index, item in enumerate(value)]}
    if value is None or isinstance(value, (bool, int, float, str)):
        return {"value": value}
    raise TypeError(f"cannot save a {type(value).__name__} (at {path or 'the top'}) without pickle")


def decode(data: Any, tensors: Mapping[str, torch.Tensor]) -> Any:
    """The inverse of `encode`. Raises a ValueError on anything `encode` does not write."""
    if not isinstance(data, dict) or len(data) != 1:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    ((kind, content),) = data.items()
    if kind == "tensor":
        return tensors[content]
    if kind == "dict":
        return {key: decode(item, tensors) for key, item in content}
    if kind in ("list", "tuple"):
        items = [decode(item, tensors) for item in content]
        return tuple(items) if kind == "tuple" else items
    if kind == "value" and (content is None or isinstance(content, (bool, int, float, str))):
        return content
    raise ValueError(f"not an encoded value: {str(data)[:80]}")


def save_state(state: Mapping[str, Any], file: str | Path) -> None:
    """Write `state` (nested dicts, lists, tuples, tensors, numbers, strings) to one ``.safetensors`` file."""
    tensors: dict[str, torch.Tensor] = {}
    encoded = encode(state, tensors)
    save_file(tensors, str(file), metadata={_STATE_KEY: json.dumps(encoded)})


def load_state(file: str | Path) -> dict[str, Any]:
    """Read what `save_state` wrote. Raises `CheckpointError` naming the file if it is missing or damaged."""
    file = Path(file)
    if not file.is_file():
        raise CheckpointError(f"{file} is missing")
    try:
        with safe_open(str(file), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # a safetensors handle, not a dict
        return decode(parse_json(metadata[_STATE_KEY], f"{file} (its training state)"), tensors)
    except Exception as error:  # a damaged file fails in the parser, the JSON or the decoder
        raise CheckpointError(f"{file} is damaged: not a training state file ({error})") from error


# --------------------------------------------------------------------------------------------------------------------
# Random number generators
# --------------------------------------------------------------------------------------------------------------------


def rng_state() -> dict[str, Any]:
    """The state of Python's, NumPy's and torch's generators (CPU, and every CUDA device when there is one)."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what `rng_state` returned."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, position, has_gauss, cached_gaussian = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    torch.set_rng_state(state["torch"])
    if "cuda" in state:
        if not torch.cuda.is_available():
            raise CheckpointError("the checkpoint holds CUDA generator states, but no CUDA device is available")
        torch.cuda.set_rng_state_all(list(state["cuda"]))


__all__ = ["CheckpointError", "decode", "encode", "load_state", "rng_state", "save_state", "set_rng_state"]
