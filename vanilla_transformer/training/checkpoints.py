"""Training checkpoints: atomic saving, keeping the last few, averaging them, and exporting a model.

A checkpoint is a directory ``checkpoint-<step>`` written by ``accelerator.save_state``: the model weights
(``model.safetensors``), the optimizer, the random number generator states of every process and the objects
registered with ``accelerator.register_for_checkpointing``. It is written under a temporary name and renamed when
complete, so a run killed while saving leaves the previous checkpoints intact and no half-written one.

Section 6.1 of the paper: "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models, we averaged the last 20 checkpoints."
`average_checkpoints` averages the weights of such checkpoints, parameter by parameter; `load_weights` puts them into
a model and `export_model` writes it as a Hugging Face model directory.
"""

from __future__ import annotations

import re
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from accelerate import Accelerator
from safetensors.torch import load_file

CHECKPOINT_PREFIX = "checkpoint-"
_CHECKPOINT_NAME = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")
_TEMPORARY_PREFIX = ".incomplete-"
_WEIGHTS_NAME = "model.safetensors"
# Prefixes that wrappers add to parameter names: DistributedDataParallel, torch.compile.
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def list_checkpoints(directory: str | Path) -> list[Path]:
    """The complete checkpoints in `directory`, oldest (lowest step) first; none if it does not exist."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), path) for path in directory.iterdir() if (m := _CHECKPOINT_NAME.match(path.name))]
    return [path for _, path in sorted(found)]


def checkpoint_step(path: str | Path) -> int:
    """The optimizer step a checkpoint directory was written at, read from its name."""
    match = _CHECKPOINT_NAME.match(Path(path).name)
    if match is None:
        raise ValueError(f"{path} is not a checkpoint directory: its name must be {CHECKPOINT_PREFIX}<step>")
    return int(match.group(1))


def save_checkpoint(accelerator: Accelerator, directory: str | Path, step: int, keep_last: int) -> Path:
    """Save the training state atomically as ``directory/checkpoint-<step>`` and delete all but the last `keep_last`.

    Every process must call this (each saves its random number generator states). The state goes to a temporary
    directory first, which the main process renames once all processes have finished writing.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got keep_last={keep_last}")
    directory = Path(directory)
    final = directory / f"{CHECKPOINT_PREFIX}{step:08d}"
    temporary = directory / f"{_TEMPORARY_PREFIX}{final.name}"
    if accelerator.is_main_process:
        for incomplete in directory.glob(f"{_TEMPORARY_PREFIX}*"):  # left by a run killed while saving
            shutil.rmtree(incomplete)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(temporary))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        temporary.rename(final)
        for old in list_checkpoints(directory)[:-keep_last]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint directory (or a ``.safetensors`` file), with wrapper prefixes removed.

    Weights tied together are stored once, under one of their names; `load_weights` fills in the others.
    """
    path = Path(path)
    file = path / _WEIGHTS_NAME if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no model weights at {file}")
    weights = {}
    for name, tensor in load_file(file).items():
        for prefix in _WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        weights[name] = tensor
    return weights


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the model weights of several checkpoints (section 6.1 of the paper).

    The mean is accumulated in float64 and returned in each tensor's own dtype.

    Raises:
        ValueError: If `paths` is empty or the checkpoints hold different parameter names or shapes.
    """
    if not paths:
        raise ValueError("paths is empty: need at least one checkpoint to average")
    first, *others = paths
    weights = load_checkpoint_weights(first)
    dtypes = {name: tensor.dtype for name, tensor in weights.items()}
    total = {name: tensor.to(torch.float64) for name, tensor in weights.items()}
    for path in others:
        weights = load_checkpoint_weights(path)
        if weights.keys() != total.keys():
            difference = sorted(weights.keys() ^ total.keys())
            raise ValueError(f"checkpoints {first} and {path} hold different parameters: {difference[:5]}")
        for name, tensor in weights.items():
            if tensor.shape != total[name].shape:
                raise ValueError(
                    f"parameter {name} has shape {tuple(tensor.shape)} in {path} "
                    f"but {tuple(total[name].shape)} in {first}"
                )
            total[name] += tensor.to(torch.float64)
    return {name: (tensor / len(paths)).to(dtypes[name]) for name, tensor in total.items()}


@torch.no_grad()
def load_weights(model: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy `weights` into `model`; parameters tied together need to be given under one of their names only.

    Raises:
        ValueError: If a weight has no parameter of that name, or a parameter (or tied group) has no weight.
    """
    groups: dict[int, list[str]] = defaultdict(list)  # the names of each storage: tied parameters share one
    state = model.state_dict()
    for name, tensor in state.items():
        groups[tensor.data_ptr()].append(name)
    unexpected = sorted(weights.keys() - state.keys())
    missing = [names for names in groups.values() if not any(name in weights for name in names)]
    if unexpected or missing:
        raise ValueError(f"weights do not fit the model: unexpected {unexpected[:5]}, missing {missing[:5]}")
    for name, tensor in weights.items():
        state[name].copy_(tensor)
