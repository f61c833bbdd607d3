"""The run directory: what lies where in it (`RunLayout`, the one place that names its files and folders), which
folders hold a run this program created, and what ``--resume`` and ``--overwrite`` may do with them.

Users' folders are not ours to delete. A folder counts as a run directory when it holds ``training_config.json``
(written once a run has started: its data read, its settings checked) or the marker file `RUN_MARKER` (written when
`train` creates or claims an empty folder). ``--overwrite`` deletes only the files and folders a run writes, and only
after the new run's data and model settings have passed their checks; a non-empty folder holding no run is refused,
with or without ``--overwrite``. A run that failed before it started left only its marker and what it wrote: the
same folder can be used again at once, without ``--overwrite``.

Nothing read back from the folder is trusted: the names built from a saved ``training_config.json`` (its languages
name the test files) must be plain file names, so ``--overwrite`` deletes only inside the run directory; a damaged
file is named with its fix. Each run writes a run id into its marker (`RUN_MARKER`) when it starts, which its
checkpoints record (see `vanilla_transformer.training.checkpoints`): a checkpoint copied in from another run is
refused.

A run directory has one writer: `lock_run_dir` takes an exclusive ``flock`` on the folder itself, which the operating
system drops when the process ends, however it ends, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # not on Windows: no lock there
    fcntl = None

from accelerate import Accelerator

from ..atomic import check_links_inside, check_writable_place, write_file
from .checkpoints import RUN_MARKER, checkpoint_step, find_resumable_checkpoint, list_checkpoints, read_run_id
from .config import OPTIONS, CheckpointConfig, DataConfig, TrainingConfig

logger = logging.getLogger(__name__)

DAMAGED_PREFIX = "damaged-"
"""Checkpoints that could not be resumed from are renamed ``damaged-checkpoint-<step>`` (kept, never deleted)."""


@dataclass(frozen=True)
class RunLayout:
    """What lies where in a run directory (``--output-dir``): the one place that names its files and folders, the
    names runs of every version wrote, so that an older run resumes, averages and loads as it was."""

    root: Path
    """The run directory: ``--output-dir`` (`CheckpointConfig.output_dir`)."""

    tracker_project = "vanilla-transformer"
    """The project name of ``--report-to``'s trackers: the folder of their logs in the run directory."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))  # given as the option's string

    @property
    def marker(self) -> Path:
        """`RUN_MARKER`: the folder holds a run of this program, and the run's id."""
        return self.root / RUN_MARKER

    @property
    def settings(self) -> Path:
        """``training_config.json``, the run's settings (`TrainingConfig.save`): written once the run has started."""
        return self.root / "training_config.json"

    @property
    def tokenizer(self) -> Path:
        return self.root / "tokenizer"

    @property
    def checkpoints(self) -> Path:
        """The folder of ``checkpoint-<step>`` folders (`vanilla_transformer.training.checkpoints`)."""
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        """``metrics.jsonl``, the log of training, validation and results rows (`JsonlTracker`)."""
        return self.root / "metrics.jsonl"

    @property
    def metrics_plot(self) -> Path:
        return self.root / "metrics.png"

    @property
    def model(self) -> Path:
        """The final (averaged) model, a Hugging Face model directory."""
        return self.root / "model"

    @property
    def results(self) -> Path:
        return self.root / "results.json"

    def test_files(self, src_lang: str, tgt_lang: str) -> dict[str, Path]:
        """The test set and its translations: ``sources`` (``test.<src_lang>``), ``references`` and ``hypotheses``
        (``test.hyp.<tgt_lang>``)."""
        return {
            "sources": self.root / f"test.{src_lang}",
            "references": self.root / f"test.{tgt_lang}",
            "hypotheses": self.root / f"test.hyp.{tgt_lang}",
        }

    def average(self, count: int) -> Path:
        """``average-<count>``, where ``vanilla-transformer average`` writes the average of `count` checkpoints."""
        return self.root / f"average-{count}"

    def averages(self) -> list[Path]:
        """The ``average-<count>`` folders there."""
        found = self.root.glob("average-*") if self.root.is_dir() else []
        return sorted(path for path in found if path.is_dir() and path.name[8:].isdigit())

    def outputs(self, data: DataConfig, source: str | Path = "the settings") -> list[str]:
        """The names of what `train` (and `average_run`) write here for a run on `data` (the ``average-<count>``
        folders aside), with the temporaries of older versions (``*.tmp``): each a plain file name.

        Raises:
            ValueError: If a name built from the settings (``src_lang``, ``tgt_lang``) is not one plain file name
                (holds a path separator, is ``..``, ...), naming `source`: deleting it could reach outside the run
                directory.
        """
        for field in ("src_lang", "tgt_lang"):
            value = getattr(data, field)
            if not isinstance(value, str) or not _is_plain_name(f"test.{value}") or not value:
                raise ValueError(
                    f"{source}: {field}={value!r} is not a language code (a plain name without / or ..): nothing is "
                    f"deleted or written with it"
                )
        marker, metrics, tests = self.marker.name, self.metrics.name, self.test_files(data.src_lang, data.tgt_lang)
        names = [marker, marker + ".tmp", self.settings.name, self.tokenizer.name, self.checkpoints.name, metrics]
        names += [metrics + ".tmp", self.metrics_plot.name, self.model.name, self.results.name, self.tracker_project]
        return names + [path.name for path in tests.values()]


def _is_plain_name(name: str) -> bool:
    """Whether `name` names an entry of a folder itself: one path component, not ``.`` or ``..``."""
    return name not in ("", ".", "..") and not any(character in name for character in "/\\\0")


class RunLock:
    """An exclusive ``flock`` on a run directory, held by this process until `release` (or its end)."""

    def __init__(self, run_dir: Path, descriptor: int | None, created: bool):
        self.run_dir, self.descriptor, self.created = run_dir, descriptor, created

    def release(self) -> None:
        """Drop the lock; remove the folder if taking the lock created it and nothing was written there since."""
        if self.descriptor is not None:
            os.close(self.descriptor)  # closing the descriptor drops its flock
            self.descriptor = None
        if self.created and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
            self.run_dir.rmdir()


def lock_run_dir(layout: RunLayout) -> RunLock:
    """Take the run directory ``--output-dir`` for this run: no other ``train`` may write there until it ends.

    The folder is created if missing (and removed again by `RunLock.release` if the run wrote nothing into it). Of
    the processes of one launch, the first (``RANK`` 0) takes the lock, for all of them.

    Raises:
        ValueError: If another process holds the folder, naming it; or if ``--output-dir`` is a file.
    """
    run_dir = layout.root
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--output-dir={run_dir} is a file, not a directory")
    if fcntl is None or os.environ.get("RANK", "0") != "0":
        return RunLock(run_dir, None, created=False)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise ValueError(
            f"--output-dir={run_dir} is in use: another train process is writing to it. Wait for it to end, or "
            f"choose another --output-dir"
        ) from None
    return RunLock(run_dir, descriptor, created)


def may_change_on_resume(option: str) -> bool:
    """Whether a resumed run may change setting `option` (``preset`` may not)."""
    return option in OPTIONS and OPTIONS[option][1].metadata["may_change_on_resume"]


def load_saved_config(saved: Path, **overrides: Any) -> TrainingConfig:
    """The ``training_config.json`` of a run directory, with `overrides` (`TrainingConfig.load`), its file names
    checked (`RunLayout.outputs`).

    Raises:
        ValueError: If it is damaged (not JSON, unknown fields, a value out of its range) or names a path outside the
            run directory, naming the file, the field and the fix.
    """
    try:
        config = TrainingConfig.load(saved, **overrides)
    except (ValueError, TypeError) as error:
        named = str(error).startswith(f"{saved}: ")  # a value out of its range, named with the file and the field
        raise ValueError(
            f"{error if named else f'{saved} is damaged ({error})'}: restore it, or move the run directory aside and "
            "start a new run"
        ) from error
    RunLayout(saved.parent).outputs(config.data, saved)
    return config


def inspect_run_dir(config: TrainingConfig) -> Path | None:
    """Check the run directory ``--output-dir`` against ``--resume`` and ``--overwrite``, before anything is written.

    Returns:
        The checkpoint to resume from, if any: the newest complete one (see `find_resumable_checkpoint`).

    Raises:
        ValueError: If the folder holds a run and neither ``--resume`` nor ``--overwrite`` is given, if it is not
            empty and holds no run, or if a resumed run's settings differ where they must not.
    """
    checkpointing = config.checkpointing
    layout, output_dir = RunLayout(checkpointing.output_dir), checkpointing.output_dir
    run_dir, saved = layout.root, layout.settings
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--output-dir={output_dir} is a file, not a directory")
    outputs = layout.outputs(config.data, "the settings")
    check_run_dir_links(run_dir, outputs)
    check_writable_place(run_dir, "--output-dir", run_dir)
    if saved.is_file():
        if checkpointing.overwrite:
            load_saved_config(saved)  # what --overwrite will delete: inside the run directory only
            return None
        if not checkpointing.resume:
            raise ValueError(
                f"--output-dir={output_dir} already holds a run: pass --resume to continue it, --overwrite to start it "
                f"over, or choose another --output-dir"
            )
        changeable = {option: value for option, value in config.options().items() if may_change_on_resume(option)}
        previous = load_saved_config(saved, **changeable)  # a saved thread count this machine lacks: changed here
        check_run_dir_links(run_dir, layout.outputs(previous.data, saved))
        config.check_resumable_from(previous)
        return find_resumable_checkpoint(layout.checkpoints)
    if run_dir.is_dir() and not layout.marker.is_file() and any(run_dir.iterdir()):
        raise ValueError(
            f"--output-dir={output_dir} is not empty and holds no run of this program: choose a new or empty "
            f"directory (--overwrite deletes only runs this program created)"
        )
    return None


class RunFinished(Exception):
    """``train --resume`` on a run that has nothing left to train: its message says so, in one line."""


def finished_run(config: TrainingConfig) -> str | None:
    """With ``--resume`` (and without ``--finish-again``): the line saying that the run in ``--output-dir`` has
    nothing left to train, if it wrote its ``results.json`` at the step of its last checkpoint, which reached
    ``--max-steps`` (or the ``--max-train-minutes`` budget, as now given); None otherwise, or for a damaged
    ``results.json`` (the run then resumes and writes it again). Reads only.

    Raises:
        ValueError: If a name the run writes is a link out of the run directory (`check_run_dir_links`), or a setting
            that must not change on resume differs from the run's (`TrainingConfig.check_resumable_from`).
    """
    checkpointing = config.checkpointing
    if not checkpointing.resume or checkpointing.finish_again:
        return None
    layout = RunLayout(checkpointing.output_dir)
    if not layout.settings.is_file():
        return None
    check_run_dir_links(layout.root, layout.outputs(config.data))  # nothing read through a link out of the run
    config.check_resumable_from(load_saved_config(layout.settings))  # a setting that must not change: refused first
    checkpoints = list_checkpoints(layout.checkpoints)
    try:
        results = json.loads(layout.results.read_text(encoding="utf-8"))
        step, minutes = int(results["step"]), float(results.get("train_minutes") or 0.0)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not checkpoints or checkpoint_step(checkpoints[-1]) != step:
        return None
    optimization = config.optimization
    budget = optimization.max_train_minutes
    if step < optimization.max_steps and (budget is None or minutes < budget):
        return None
    reached = (
        f"--max-steps={optimization.max_steps}"
        if step >= optimization.max_steps
        else (f"--max-train-minutes={budget:g}")
    )
    return (
        f"{layout.root} is a finished run (step {step}, {reached} reached; results in {layout.results}): nothing to "
        f"train, nothing rewritten. A larger --max-steps trains on; --finish-again averages and tests it again"
    )


def check_run_dir_links(run_dir: Path, names: list[str]) -> None:
    """Before any work: refuse a run directory where a name the run writes or reads (`RunLayout.outputs`, and the
    folders ``checkpoints``, ``tokenizer``, ``model`` at any depth) is a symbolic link to something outside it, naming
    it; a run folder from a tarball or a colleague must not make ``train --resume`` overwrite files elsewhere. Links
    are never written through (`vanilla_transformer.atomic`)."""
    if not run_dir.is_dir():
        return
    for name in names:
        path = run_dir / name
        if path.is_symlink():
            raise ValueError(
                f"{path} is a symbolic link (to {os.readlink(path)}): a run directory's outputs are never written "
                f"through links; remove the link (or copy the file in its place) and rerun"
            )
        if path.is_dir():
            check_links_inside(path, "run directory's folder")


def prepare_run_dir(
    accelerator: Accelerator, checkpointing: CheckpointConfig, data: DataConfig, resume_from: Path | None
) -> None:
    """Make the run directory ready, once the new run's data and settings have passed their checks.

    On the main process: with ``--overwrite``, delete the outputs of the run there; in a folder whose run never
    started, delete what it left (a tokenizer trained for other settings must not be reused); when resuming, set
    aside the checkpoints newer than `resume_from` (damaged ones, see `find_resumable_checkpoint`). Then create the
    folder and its marker. Every process must call this.
    """
    layout = RunLayout(checkpointing.output_dir)
    if accelerator.is_main_process:
        saved = layout.settings
        if saved.is_file() and checkpointing.overwrite:
            _delete_outputs(layout, load_saved_config(saved).data)
        elif not saved.is_file() and layout.marker.is_file():
            _delete_outputs(layout, data)
        if resume_from is not None:
            for checkpoint in list_checkpoints(layout.checkpoints):
                if checkpoint_step(checkpoint) > checkpoint_step(resume_from):
                    aside = checkpoint.with_name(DAMAGED_PREFIX + checkpoint.name)
                    logger.warning(f"setting aside {checkpoint}, which cannot be resumed from, as {aside}")
                    if aside.exists():  # set aside at an earlier resume: the newer copy replaces it
                        shutil.rmtree(aside)
                    os.replace(checkpoint, aside)
        layout.root.mkdir(parents=True, exist_ok=True)
        marker = layout.marker
        if resume_from is not None or (checkpointing.resume and read_run_id(layout.checkpoints)):
            marker.touch()  # the same run goes on: its id stays
        else:
            write_file(marker, uuid.uuid4().hex + "\n")  # a new run: a new id, which its checkpoints record
    accelerator.wait_for_everyone()


def mark_run_started(accelerator: Accelerator, config: TrainingConfig) -> None:
    """Write ``training_config.json`` (atomically): from now on the folder holds a run, to resume or overwrite."""
    if accelerator.is_main_process:
        kept = config.replace(finish_again=False)  # a request of this command, not a setting of the run
        kept.save(RunLayout(config.checkpointing.output_dir).settings)  # whole: atomic.write_file
    accelerator.wait_for_everyone()


def _delete_outputs(layout: RunLayout, data: DataConfig) -> None:
    """Delete what a run on `data` writes in its run directory, and nothing else (what else is there is listed)."""
    run_dir = layout.root
    names = set(layout.outputs(data, layout.settings)) | {path.name for path in layout.averages()}
    for name in sorted(names):
        path = run_dir / name
        if path.parent.resolve() != run_dir.resolve():  # never reached: RunLayout.outputs checked each name
            raise ValueError(f"refusing to delete {path}: it is not in the run directory {run_dir}")
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    others = sorted(path.name for path in run_dir.iterdir())
    if others:
        logger.warning(f"--overwrite kept what the run did not write in {run_dir}: {', '.join(others[:10])}")


__all__ = [
    "DAMAGED_PREFIX",
    "RUN_MARKER",
    "RunFinished",
    "RunLayout",
    "RunLock",
    "check_run_dir_links",
    "finished_run",
    "inspect_run_dir",
    "load_saved_config",
    "lock_run_dir",
    "mark_run_started",
    "prepare_run_dir",
]
