"""Training checkpoints: atomic, complete, pickle-free saving; checking and resuming; averaging them.

A checkpoint is a directory ``checkpoint-<step>`` holding

* ``model.safetensors``: the model weights (tied weights once);
* ``training_state.safetensors``: the optimizer, the learning-rate schedule, the position in the data and the
  mixed-precision loss scale (`state.save_state`: tensors, plus JSON, no pickle);
* ``rng-<process>.safetensors``: the random number generator states of each process;
* ``manifest.json``: the size and SHA-256 of each of these files, the step and the run id, written last.

It is written whole (`vanilla_transformer.atomic.write_directory`: under a temporary name, put in place when
complete), so a run killed while saving leaves the previous checkpoints intact and no half-written one. Before
resuming, `find_resumable_checkpoint` checks the newest checkpoint against its manifest; one with a missing or damaged
piece is skipped with a warning for the previous complete one.
Nothing is loaded with pickle, so a crafted checkpoint cannot run code (older, pickled checkpoints are refused).

Nor is a manifest trusted: it must list exactly the pieces of a checkpoint, by their plain names (never a path such
as ``../../x`` or ``/etc/hostname``); its step must be the one the folder is named for (a renamed checkpoint is
refused); and its run id must be the run's, the id that training writes into the run's marker file (`RUN_MARKER`)
when a run starts (a checkpoint copied in from another run is refused, for resuming and for averaging).

Section 6.1 of the paper: "For the base models, we used a single model obtained by averaging the last 5
checkpoints, which were written at 10-minute intervals. For the big models, we averaged the last 20 checkpoints."
`average_checkpoints` averages the weights of such checkpoints, parameter by parameter; `load_weights` puts them into
a model and `save_model_dir` writes it as a Hugging Face model directory.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list
from safetensors.torch import load_file, save_file

from ..atomic import check_links_inside, remove_leftovers, write_directory, writing
from ..reading import read_json
from .state import CheckpointError, load_state, rng_state, save_state, set_rng_state

logger = logging.getLogger(__name__)

CHECKPOINT_PREFIX = "checkpoint-"
_CHECKPOINT_NAME = re.compile(rf"^{CHECKPOINT_PREFIX}(\d+)$")
_LEGACY_TEMPORARY_PREFIX = ".incomplete-"  # the temporary checkpoints of versions that wrote their own
_WEIGHTS_NAME = "model.safetensors"
_STATE_NAME = "training_state.safetensors"
_MANIFEST_NAME = "manifest.json"
_FORMAT = 2  # 1: without the run id
RUN_MARKER = ".vanilla-transformer-run"
"""The file marking a folder that `train` created or claimed while it was empty (`run_dir`); it holds the run's id,
written when the run starts (`run_dir.prepare_run_dir`) and recorded in each checkpoint's manifest. Runs of older
versions left it empty: their checkpoints have no run id either."""
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


def _rng_name(process: int) -> str:
    return f"rng-{process}.safetensors"


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        while block := handle.read(1 << 24):
            digest.update(block)
    return digest.hexdigest()


def unique_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with each storage once (tied weights under their first name), on the CPU."""
    weights, seen = {}, set()
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            weights[name] = tensor.detach().to("cpu").contiguous()
    return weights


def save_checkpoint(
    accelerator: Accelerator, state: Mapping[str, Any] | None, directory: str | Path, step: int, keep_last: int
) -> Path:
    """Save the training state atomically as ``directory/checkpoint-<step>`` and delete all but the last `keep_last`.

    `state` is the trainer's state (`Trainer.state_dict`), on the main process (None elsewhere): its ``model``
    weights (`unique_weights`) go to ``model.safetensors``, the rest to ``training_state.safetensors``. Every process
    must call this (each saves its random number generator states). The main process writes the checkpoint whole
    (`write_directory`): every process writes its pieces into the temporary folder, then the main process writes the
    manifest, and the folder is put in place.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got keep_last={keep_last}")
    directory = Path(directory)
    final = directory / f"{CHECKPOINT_PREFIX}{step:08d}"
    if not accelerator.is_main_process:
        with writing(final, "checkpoint"):
            _write_pieces(accelerator, None, _shared_folder(accelerator, None))
        accelerator.wait_for_everyone()  # the pieces are written: the main process writes the manifest
        accelerator.wait_for_everyone()  # the checkpoint is in place
        return final

    def write(temporary: Path) -> None:
        _write_pieces(accelerator, state, _shared_folder(accelerator, temporary))
        accelerator.wait_for_everyone()
        _write_manifest(temporary, directory, step, accelerator.num_processes)

    remove_leftovers(directory)  # of a run killed while saving (one writer: the run directory's lock)
    for incomplete in directory.glob(f"{_LEGACY_TEMPORARY_PREFIX}*"):
        shutil.rmtree(incomplete)
    # A checkpoint of this step already there (a damaged one set aside on resuming) is replaced: never the case in
    # practice.
    write_directory(final, write, replaceable=lambda folder: True, what="checkpoint")
    for old in list_checkpoints(directory)[:-keep_last]:
        shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def _shared_folder(accelerator: Accelerator, folder: Path | None) -> Path:
    """The main process's `folder`, on every process (each writes its pieces there)."""
    if accelerator.num_processes == 1:
        return folder
    shared = [folder]
    broadcast_object_list(shared, from_process=0)
    return shared[0]


def _write_pieces(accelerator: Accelerator, state: Mapping[str, Any] | None, temporary: Path) -> None:
    """Each process's pieces of a checkpoint: the main process's weights and training state, every one's generators."""
    temporary.mkdir(parents=True, exist_ok=True)
    if accelerator.is_main_process:
        save_file(state["model"], str(temporary / _WEIGHTS_NAME))
        save_state({name: part for name, part in state.items() if name != "model"}, temporary / _STATE_NAME)
    save_state(rng_state(), temporary / _rng_name(accelerator.process_index))


def _write_manifest(temporary: Path, directory: Path, step: int, num_processes: int) -> None:
    """The manifest, written last: the size and SHA-256 of every piece, the step and the run id."""
    names = [_WEIGHTS_NAME, _STATE_NAME, *(_rng_name(i) for i in range(num_processes))]
    files = {name: {"bytes": (temporary / name).stat().st_size, "sha256": _sha256(temporary / name)} for name in names}
    manifest = {
        "format": _FORMAT,
        "step": step,
        "run_id": read_run_id(directory),
        "num_processes": num_processes,
        "files": files,
    }
    (temporary / _MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def check_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check that every piece of a checkpoint is there and intact (size and SHA-256 as in its manifest).

    Returns:
        The manifest.

    Raises:
        CheckpointError: Naming the checkpoint, the piece and what is wrong with it.
    """
    path = Path(path)
    manifest_file = path / _MANIFEST_NAME
    _check_links(path)
    if not manifest_file.is_file():
        if any(path.glob("*.pkl")) or (path / "optimizer.bin").is_file():
            raise CheckpointError(
                f"{path} was written by an older version with pickle, which can run code when loaded: it is not "
                f"resumed (its model.safetensors can still be averaged and exported)"
            )
        raise CheckpointError(f"{path} is incomplete: it has no {_MANIFEST_NAME}")
    manifest = read_manifest(path)
    files = manifest["files"]
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"{path} is incomplete: {name} is missing")
        if file.stat().st_size != expected["bytes"] or _sha256(file) != expected["sha256"]:
            raise CheckpointError(f"{path} is damaged: {name} differs from what was saved (size or SHA-256)")
    return manifest


def read_run_id(directory: str | Path) -> str | None:
    """The id of the run whose checkpoints folder is `directory` (in ``<run>/`` `RUN_MARKER`); None for a run of an
    older version, which wrote none, or a folder outside a run (whose checkpoints are not matched to any run)."""
    file = Path(directory).parent / RUN_MARKER
    if not file.is_file():
        return None
    run_id = file.read_text(encoding="utf-8").strip()
    if not run_id:
        return None
    if not re.fullmatch(r"[0-9a-f]{32}", run_id):
        raise CheckpointError(f"{file} is damaged: not a run id; restore it or start a new run")
    return run_id


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The manifest of a checkpoint, checked against the checkpoint and its run, before any file it lists is opened.

    Raises:
        CheckpointError: If it is not JSON, lists other files than the checkpoint's pieces (a path leading out of the
            folder among them), its step is not the folder's (a renamed checkpoint), or its run id is not the run's
            (a checkpoint of another run).
    """
    path = Path(path)
    manifest_file = path / _MANIFEST_NAME
    try:
        manifest = read_json(manifest_file, "checkpoint manifest", inside=path)
        files, num_processes, step = manifest["files"], manifest["num_processes"], manifest["step"]
        if not isinstance(files, dict) or not isinstance(num_processes, int) or not isinstance(step, int):
            raise TypeError("files, num_processes and step must be an object and integers")
        if not all(isinstance(entry, dict) and {"bytes", "sha256"} <= entry.keys() for entry in files.values()):
            raise TypeError("each file must have its bytes and sha256")
    except (ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"{manifest_file} is damaged: {error}") from error
    required = {_WEIGHTS_NAME, _STATE_NAME, *(_rng_name(i) for i in range(max(num_processes, 0)))}
    if num_processes < 1 or set(files) != required:
        strange = sorted(set(files) - required)
        raise CheckpointError(
            f"{manifest_file} is damaged or crafted: it must list exactly the pieces of a checkpoint "
            f"({', '.join(sorted(required))}); "
            + (f"it lists {strange}, which are not" if strange else f"it lists {sorted(files)}")
        )
    named = checkpoint_step(path)
    if step != named:
        raise CheckpointError(
            f"{path} holds the checkpoint of step {step} (its {_MANIFEST_NAME}), not of step {named}: a checkpoint "
            f"renamed is not resumed or averaged; give it back its name {CHECKPOINT_PREFIX}{step:08d}"
        )
    run_id, expected_run = manifest.get("run_id"), read_run_id(path.parent)
    in_a_run = (path.parent.parent / RUN_MARKER).is_file()  # loose checkpoints (no run around them): nothing to match
    if in_a_run and run_id != expected_run:
        raise CheckpointError(
            f"{path} was written by another run (run id {run_id}) than the run of {path.parent} (run id "
            f"{expected_run}, in {path.parent.parent / RUN_MARKER}): a checkpoint copied from another run is not resumed or "
            f"averaged; average it in its own run"
        )
    return manifest


def find_resumable_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in `directory` (None if it holds none at all).

    A newer checkpoint with a missing or damaged piece is skipped with a warning. If every checkpoint is damaged, a
    `CheckpointError` lists what is wrong with each, rather than silently starting over.
    """
    checkpoints = list_checkpoints(directory)
    problems = []
    for path in reversed(checkpoints):
        try:
            check_checkpoint(path)
        except CheckpointError as error:
            logger.warning(f"{error}; falling back to the previous checkpoint")
            problems.append(str(error))
            continue
        return path
    if checkpoints:
        raise CheckpointError(f"no complete checkpoint to resume from in {directory}: {'; '.join(problems)}")
    return None


def read_training_state(path: str | Path) -> dict[str, Any]:
    """The optimizer, scheduler, progress and loss-scale states a checkpoint holds, as saved."""
    return load_state(Path(path) / _STATE_NAME)


def load_checkpoint(
    accelerator: Accelerator, path: str | Path, load_state_dict: Callable[[dict[str, Any]], None]
) -> None:
    """Restore a trainer from a checkpoint that `check_checkpoint` passed: `load_state_dict` (`Trainer.
    load_state_dict`) receives its state, the ``model`` weights and the training state as saved; then this process's
    random number generators are restored.

    Raises:
        CheckpointError: If it was written by a different number of processes, or its state does not load.
    """
    path = Path(path)
    manifest = read_manifest(path)
    if manifest["num_processes"] != accelerator.num_processes:
        raise CheckpointError(
            f"{path} was written by {manifest['num_processes']} process(es), this run has "
            f"{accelerator.num_processes}: resume with as many, or the data order and random numbers would differ"
        )
    state = {"model": load_checkpoint_weights(path), **read_training_state(path)}
    try:
        load_state_dict(state)
    except WeightsMismatch as error:
        raise CheckpointError(f"{path / _WEIGHTS_NAME} does not fit this run: {error}") from error
    except (KeyError, ValueError, TypeError) as error:  # the optimizer's, the schedule's, the progress's
        raise CheckpointError(f"{path / _STATE_NAME} does not fit this run: {error}") from error
    set_rng_state(load_state(path / _rng_name(accelerator.process_index)))


def load_checkpoint_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model weights of a checkpoint directory (or a ``.safetensors`` file), with wrapper prefixes removed.

    Weights tied together are stored once, under one of their names; `load_weights` fills in the others.
    """
    path = Path(path)
    file = path / _WEIGHTS_NAME if path.is_dir() else path
    _check_links(path if path.is_dir() else path.parent)
    if file.is_symlink():
        raise CheckpointError(f"{file} is a symbolic link: the weights of a checkpoint are read from the file itself")
    if not file.is_file():
        raise FileNotFoundError(f"no model weights at {file}")
    if path.is_dir() and (path / _MANIFEST_NAME).is_file():
        expected = read_manifest(path)["files"][_WEIGHTS_NAME]
        if _sha256(file) != expected["sha256"]:
            raise CheckpointError(f"{file} is damaged: it differs from what was saved (SHA-256)")
    weights = {}
    for name, tensor in load_file(file).items():
        for prefix in _WRAPPER_PREFIXES:
            name = name.removeprefix(prefix)
        weights[name] = tensor
    return weights


def _check_links(folder: Path) -> None:
    """A checkpoint holding a link out of itself is refused (`check_links_inside`), as a `CheckpointError`."""
    try:
        check_links_inside(folder, "checkpoint")
    except ValueError as error:
        raise CheckpointError(str(error)) from error


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
            if tensor.shape != total[name].shape or tensor.dtype != dtypes[name]:
                raise ValueError(
                    f"parameter {name} has shape {tuple(tensor.shape)} ({tensor.dtype}) in {path} "
                    f"but {tuple(total[name].shape)} ({dtypes[name]}) in {first}"
                )
            total[name] += tensor.to(torch.float64)
    return {name: (tensor / len(paths)).to(dtypes[name]) for name, tensor in total.items()}


class WeightsMismatch(ValueError):
    """Weights that do not fit a model: a name, shape or dtype of another model (`load_weights`)."""


@torch.no_grad()
def load_weights(model: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy `weights` into `model`; parameters tied together need to be given under one of their names only.

    Raises:
        WeightsMismatch: A ValueError, if a weight has no parameter of that name, a parameter (or tied group) has
            no weight, or a weight's shape or dtype is not its parameter's.
    """
    groups: dict[int, list[str]] = defaultdict(list)  # the names of each storage: tied parameters share one
    state = model.state_dict()
    for name, tensor in state.items():
        groups[tensor.data_ptr()].append(name)
    unexpected = sorted(weights.keys() - state.keys())
    missing = [names for names in groups.values() if not any(name in weights for name in names)]
    if unexpected or missing:
        raise WeightsMismatch(f"weights do not fit the model: unexpected {unexpected[:5]}, missing {missing[:5]}")
    for name, tensor in weights.items():  # checked before any is copied: copy_ would cast a dtype silently
        if tensor.shape != state[name].shape or tensor.dtype != state[name].dtype:
            raise WeightsMismatch(
                f"weights do not fit the model: {name} is {tensor.dtype} of shape {tuple(tensor.shape)}, the model's "
                f"is {state[name].dtype} of shape {tuple(state[name].shape)}"
            )
    for name, tensor in weights.items():
        state[name].copy_(tensor)
