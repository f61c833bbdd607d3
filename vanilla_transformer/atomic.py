"""Write a folder as a whole: a process killed at any moment leaves the old folder whole or the new one whole.

    write_directory("runs/numbers/model", lambda tmp: save_model_dir(model, tokenizer, tmp), replaceable=is_model_dir)

The new folder is written under a hidden temporary name beside the target (``.<name>.incomplete-<pid>``), then takes
the target's place in one step: ``rename`` when there is no target, else Linux's ``renameat2(RENAME_EXCHANGE)``,
which swaps the two folders atomically; the old folder, now under the temporary name, is deleted last. Where the
exchange is not available, the old folder is first renamed aside (``.<name>.replaced-<pid>``) and put back by the next
`write_directory` if the process died between the two renames.

A target that exists and is not empty is replaced only if `replaceable` says it is something this program wrote (a
model directory, a CTranslate2 export): a user's folder is never deleted. What a killed writer left (the hidden
temporaries) is removed by the next write to the same target, and nothing else.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

PAUSE_ENV = "VANILLA_TRANSFORMER_TEST_PAUSE_AT"
"""For tests only: the name of a point of `write_directory` (see `PAUSE_POINTS`) at which the process announces
itself on stderr and sleeps, so that a test can kill it there."""

PAUSE_POINTS = ("started", "written", "set-aside", "exchanged", "removing")
"""Where a test can stop `write_directory`: the temporary folder made; the new folder complete; (fallback only) the old
folder renamed aside; the folders exchanged; the old folder half deleted."""

_INCOMPLETE = ".incomplete-"
_REPLACED = ".replaced-"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100

T = TypeVar("T")


def write_directory(
    target: str | os.PathLike[str],
    write: Callable[[Path], T],
    *,
    replaceable: Callable[[Path], bool] | None = None,
    what: str = "folder",
) -> T:
    """Call ``write(temporary)`` to fill a new folder, then put it in the place of `target` in one step.

    Args:
        target: The folder to write; its parent is created if needed.
        write: Fills the empty folder it is given (and must write nowhere else); its return value is returned.
        replaceable: Whether an existing, non-empty `target` may be replaced (it is what this program writes);
            None: never.
        what: How errors name `target` (for example ``"--output"``).

    Raises:
        ValueError: If `target` is a file or a link, or a non-empty folder that `replaceable` refuses; nothing is
            written then.
    """
    target = Path(target)
    parent, name = target.parent, target.name
    if not name or name in (".", ".."):
        raise ValueError(f"{what}={target} does not name a folder")
    _recover(target)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ValueError(f"{what}={target} exists and is not a folder: it is not replaced")
    if target.is_dir() and any(target.iterdir()) and not (replaceable is not None and replaceable(target)):
        raise ValueError(
            f"{what}={target} is a folder that is not empty and was not written by this program: it is not "
            f"replaced; choose a new or empty folder"
        )
    parent.mkdir(parents=True, exist_ok=True)
    temporary = parent / f".{name}{_INCOMPLETE}{os.getpid()}"
    if temporary.exists():  # left by a killed process that had our process id
        shutil.rmtree(temporary)
    temporary.mkdir()
    try:
        _pause("started")
        result = write(temporary)
        _pause("written")
        _put_in_place(temporary, target)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return result


def write_file(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8) to `path` through a temporary file beside it, renamed over it when complete: a killed
    process leaves the old file or the new one, never a cut or empty one. A pipe, a terminal or another file that is
    not a regular one (``/dev/stdout``) is written to directly; a link to a regular file replaces the file it names."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return path
    path = path.resolve() if path.is_symlink() else path
    temporary = path.with_name(f".{path.name}{_INCOMPLETE}{os.getpid()}")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def _put_in_place(temporary: Path, target: Path) -> None:
    """Make `temporary` the folder at `target` in one step; delete the folder it replaced."""
    if not target.exists():
        os.rename(temporary, target)
        return
    if _exchange(temporary, target):
        _pause("exchanged")
        _remove_partially(temporary)
        return
    aside = target.parent / f".{target.name}{_REPLACED}{os.getpid()}"
    os.rename(target, aside)
    _pause("set-aside")
    os.rename(temporary, target)
    _pause("exchanged")
    _remove_partially(aside)


def _remove_partially(folder: Path) -> None:
    """Delete `folder`; a test can stop this half way (`PAUSE_POINTS`)."""
    if os.environ.get(PAUSE_ENV) == "removing":
        files = sorted(path for path in folder.rglob("*") if path.is_file())
        for file in files[: len(files) // 2]:
            file.unlink()
        _pause("removing")
    shutil.rmtree(folder)


def _exchange(first: Path, second: Path) -> bool:
    """Swap two folders atomically with ``renameat2(RENAME_EXCHANGE)``; False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library older than glibc 2.28
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE)
    if result == 0:
        return True
    error = ctypes.get_errno()
    if error in (22, 38, 95):  # EINVAL, ENOSYS, EOPNOTSUPP: this file system cannot exchange
        return False
    raise OSError(error, f"cannot exchange {first} and {second}: {os.strerror(error)}")


def _recover(target: Path) -> None:
    """Undo what a writer of `target` killed part way left: put back an old folder set aside (fallback path) if the
    target is missing, and delete the hidden temporaries. Only names of the exact patterns above are touched."""
    parent = target.parent
    if not parent.is_dir():
        return
    pattern = re.compile(rf"^\.{re.escape(target.name)}({re.escape(_INCOMPLETE)}|{re.escape(_REPLACED)})\d+$")
    leftovers = sorted(path for path in parent.iterdir() if pattern.match(path.name) and path.is_dir())
    for path in leftovers:
        if _alive(path):  # another writer at work: its folders are its own
            continue
        if _REPLACED in path.name and not target.exists():
            os.rename(path, target)
        else:
            shutil.rmtree(path)


def _alive(path: Path) -> bool:
    """Whether the process whose id ends the name of `path` is running (then its temporary is not ours to delete)."""
    pid = int(path.name.rsplit("-", 1)[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _pause(point: str) -> None:
    if os.environ.get(PAUSE_ENV) == point:
        print(f"{PAUSE_ENV}: paused at {point}", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)


__all__ = ["PAUSE_ENV", "PAUSE_POINTS", "write_directory", "write_file"]
