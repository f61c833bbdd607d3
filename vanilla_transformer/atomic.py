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

The one rule for every file and folder a command writes:

* *Checked before any work* (`check_output_file`, `check_output_dir`): its folder exists (or can be made) and is
  writable, a file is not a folder, a folder is new, empty or replaceable, and neither is a symbolic link. A command
  calls these on each of its outputs before it reads a model or trains, so that the work is never lost at the end.
* *Never written through a link*: a link where an output goes is refused (never followed, never replaced), naming it;
  a tarball's or a colleague's link to a file elsewhere cannot make a command overwrite that file. Only a link to a
  stream (``/dev/stdout``, a pipe) is written to, as a stream.
* *Written whole* (`write_file`, `replace_file`, `write_directory`): a temporary beside the target, renamed over it.
* *Errors of the system* (no space, no permission, a read-only file system) are one line naming the file or folder
  (`WriteError`), and leave no temporary behind.

* *Never what the command reads*: every output is checked, before its first byte is written, against the record
  of the files the command reads (`vanilla_transformer.reading`: the model folder's files, an export's, the input,
  the file behind standard input), by device and inode.

Reading follows the same rule for links (`check_links_inside`, of `vanilla_transformer.reading`): a model directory,
checkpoint, run directory or tokenizer folder holding a link to something outside itself is refused, naming the link.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno as errno_codes
import os
import re
import shutil
import stat
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from .reading import STDIN_NAME, check_links_inside, check_not_read, note_read

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
    check_output_dir(target, what, replaceable=replaceable)
    before = _entries(target)  # what the folder held when it was judged: anything else is not ours to delete
    temporary = parent / f".{name}{_INCOMPLETE}{os.getpid()}"
    try:
        with writing(target, what):
            parent.mkdir(parents=True, exist_ok=True)
            if temporary.exists():  # left by a killed process that had our process id
                shutil.rmtree(temporary)
            temporary.mkdir()
            _pause("started")
            result = write(temporary)
            follow_umask(temporary)
            _pause("written")
            _put_in_place(temporary, target, before, what)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    return result


def write_file(path: str | os.PathLike[str], text: str | bytes, *, what: str = "file") -> Path:
    """Write `text` (str as UTF-8, or bytes) to `path` whole (`replace_file`). A pipe, a terminal or another file that
    is not a regular one (``/dev/stdout``, also through its link) is written to directly, as a stream."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    path = Path(path)
    if is_standard_output(path):  # written where standard output goes, not reopened (which would empty the file)
        check_not_read(path, what)
        with writing(path, what):
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        return path
    if is_stream(path):
        with writing(path, what), open(path, "wb") as stream:
            stream.write(data)
        return path
    return replace_file(path, lambda temporary: temporary.write_bytes(data), what=what)


def replace_file(path: str | os.PathLike[str], write: Callable[[Path], object], *, what: str = "file") -> Path:
    """Call ``write(temporary)`` to write a temporary file beside `path`, then rename it over `path`: a killed process
    leaves the old file or the new one, never a cut or empty one. A link at `path` is refused, never followed
    (`check_output_file`); an error of the system is a `WriteError` naming `path`, and the temporary is removed."""
    path = Path(path)
    check_output_file(path, what)
    temporary = path.with_name(f".{path.name}{_INCOMPLETE}{os.getpid()}")
    try:
        with writing(path, what):
            write(temporary)
            os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def follow_umask(path: str | os.PathLike[str]) -> None:
    """Give the file at `path`, or every file in the folder at `path`, the mode the umask gives a new file (0644 under
    the usual 022). safetensors writes its files through a temporary of mode 0600, so without this the weights
    alone of a model directory or checkpoint were unreadable to the group that can read everything beside them."""
    root = Path(path)
    mode = 0o666 & ~_umask()
    files = [root] if not root.is_dir() else [file for file in root.rglob("*") if not file.is_dir()]
    for file in files:
        if not file.is_symlink() and stat.S_IMODE(file.stat().st_mode) != mode:
            os.chmod(file, mode)


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (another thread may be creating files)."""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        with open("/proc/self/status", encoding="ascii") as status:
            return int(next(line for line in status if line.startswith("Umask:")).split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


STANDARD_OUTPUT_NAMES = ("/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
"""The names of standard output: written to as standard output (`is_standard_output`), whatever file is behind it."""


def is_standard_output(path: str | os.PathLike[str]) -> bool:
    """Whether `path` names this process's standard output (``/dev/stdout``, ``/dev/fd/1``) and is the file behind it:
    a regular file there (``> out.de``) is written through standard output, not refused as a link nor reopened."""
    if os.path.abspath(path) not in STANDARD_OUTPUT_NAMES:
        return False
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (AttributeError, OSError, ValueError):  # no descriptor behind sys.stdout (a test's stand-in)
        return False


def is_stream(path: Path) -> bool:
    """Whether `path` is (or links to) a pipe, terminal, socket or other file that is not regular nor a folder: written
    as a stream, not replaced."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _link_refusal(path: Path, what: str) -> ValueError:
    return ValueError(
        f"{what}={path} is a symbolic link (to {os.readlink(path)}): this program never writes through a link; "
        "remove the link or name another path"
    )


def check_output_file(path: str | os.PathLike[str] | None, what: str = "file") -> None:
    """Refuse, before any work, a file that could not be written: its folder is missing, not a folder or not
    writable, the path is a folder, a file without write permission, or a symbolic link (never written through; a link
    to a stream such as ``/dev/stdout`` is written as a stream). A ValueError or OSError naming `what` and `path`."""
    if path is None:
        return
    file = Path(path)
    if is_stream(file) or is_standard_output(file):
        check_not_read(file, what)
        return
    if file.is_symlink():
        raise _link_refusal(file, what)
    if file.is_dir():
        raise IsADirectoryError(f"{what}={path} is a directory: name a file to write")
    folder = file.parent
    if not folder.is_dir():
        raise FileNotFoundError(f"{what}={path}: the folder {folder} does not exist: create it first")
    if not os.access(folder, os.W_OK | os.X_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise PermissionError(f"{what}={path} cannot be written: no permission")
    check_not_read(file, what)


def check_not_an_input(
    output: str | os.PathLike[str] | None,
    what: str,
    inputs: Mapping[str, str | os.PathLike[str] | Iterable[str | os.PathLike[str]] | None],
    *,
    outputs: Mapping[str, str | os.PathLike[str] | None] | None = None,
) -> None:
    """Refuse, before any work, an output that names one of the command's inputs however it is spelled (``./name``, a
    link to it, a hard link: `os.path.samefile`, and the resolved paths), or a folder holding one, or a file the
    command reads (`vanilla_transformer.reading`: the inputs are noted there first, a folder's files all, and
    standard input, ``-``, when a regular file is behind it): writing it would replace what is read. `inputs` maps
    each input's option (``"--input"``, ``"--model"``) to its path, a list of paths or None; `outputs`, the command's
    other outputs (not noted as read), which `output` must not be either. A ValueError naming both options and
    paths."""
    for option, values in inputs.items():
        paths = [values] if values is None or isinstance(values, (str, os.PathLike)) else list(values)
        for value in paths:
            note_read(value, STDIN_NAME if str(value) == "-" else f"the input {option}={value}")
    if output is None or str(output) == "-":
        return
    check_not_read(output, what)
    if is_stream(Path(output)):
        return
    target = Path(os.path.abspath(output))
    resolved = target.resolve()
    for option, values in {**inputs, **(outputs or {})}.items():
        paths = [values] if values is None or isinstance(values, (str, os.PathLike)) else list(values)
        for value in paths:
            if value is None or str(value) == "-" or is_stream(Path(value)):
                continue
            source = Path(os.path.abspath(value))
            same = source.exists() and target.exists() and os.path.samefile(source, target)
            held = source.resolve() == resolved or resolved in source.resolve().parents
            if same or held or target == source or target in source.parents:
                relation = "is" if same or source.resolve() == resolved or target == source else "holds"
                raise ValueError(
                    f"{what}={output} {relation} the input {option}={value}: writing it would replace what is read; "
                    f"name another {what}"
                )


def check_output_dir(
    target: str | os.PathLike[str], what: str = "folder", *, replaceable: Callable[[Path], bool] | None = None
) -> None:
    """Refuse, before any work, a folder that `write_directory` could not write: a link, a file, a non-empty folder
    that `replaceable` does not accept (None: none), or a place whose nearest existing folder is not writable."""
    target = Path(target)
    if target.is_symlink():
        raise _link_refusal(target, what)
    if target.exists() and not target.is_dir():
        raise ValueError(f"{what}={target} exists and is not a folder: it is not replaced")
    check_not_read(target, what)
    if target.is_dir() and any(target.iterdir()) and not (replaceable is not None and replaceable(target)):
        raise ValueError(
            f"{what}={target} is a folder that is not empty and was not written by this program: it is not "
            f"replaced; choose a new or empty folder"
        )
    check_writable_place(target.parent, what, target)


def check_writable_place(folder: Path, what: str, target: Path) -> None:
    """Refuse `target` if `folder` (made if missing) could not be written: its nearest existing ancestor is a file or
    not writable."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise NotADirectoryError(f"{what}={target}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise PermissionError(f"{what}={target} cannot be written: no permission in {existing}")


WRITE_ERRORS = {
    errno_codes.ENOSPC: ": free some space or write elsewhere",
    errno_codes.EDQUOT: ": free some space or write elsewhere",
    errno_codes.EFBIG: ": the file is too large for this file system; write elsewhere",
    errno_codes.EROFS: ": the file system is read-only; write elsewhere",
    errno_codes.EACCES: ": no permission; write elsewhere",
    errno_codes.EPERM: ": no permission; write elsewhere",
    errno_codes.EIO: ": the disk failed; write elsewhere",
}
"""The errors of the system that `writing` names with the file, and what to do about each."""


class WriteError(OSError):
    """An error of the system while writing (no space, no permission, a read-only file system), naming the file or
    folder: the one line a command prints."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def os_error(error: BaseException) -> OSError | None:
    """The error of the system behind `error`: an OSError in its chain, or one that a library (safetensors' Rust
    ``SafetensorError``: ``... (os error 28)``) reports in its message only."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError):
            return seen
        match = re.search(r"\(os error (\d+)\)", str(seen))
        if match:
            code = int(match.group(1))
            return OSError(code, os.strerror(code))
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def writing(path: str | os.PathLike[str], what: str = "file") -> Iterator[None]:
    """Turn an error of the system raised while writing `path` into a `WriteError` naming it (``--output=out.de
    cannot be written: No space left on device``); other errors pass as they are."""
    try:
        yield
    except WriteError:
        raise
    except Exception as error:
        system = os_error(error)
        if system is None or system.errno not in WRITE_ERRORS:
            raise
        label = f"{what}={path}" if what not in ("file", "folder") else str(path)
        reason = f"{os.strerror(system.errno)}{WRITE_ERRORS[system.errno]}"
        raise WriteError(system.errno, f"{label} cannot be written: {reason}") from error


def _put_in_place(temporary: Path, target: Path, before: dict[str, tuple[int, int] | None], what: str) -> None:
    """Make `temporary` the folder at `target` in one step; delete the folder it replaced, unless something appeared
    or changed in it since it was judged (`before`): then the old folder is put back as it is, and a ValueError names
    what appeared (the new one, back at `temporary`, is the caller's to remove)."""
    if not target.exists():
        os.rename(temporary, target)
        return
    if _exchange(temporary, target):
        _pause("exchanged")
        _keep_what_appeared(temporary, target, before, what, lambda: _exchange(temporary, target))
        _remove_partially(temporary)
        return
    aside = target.parent / f".{target.name}{_REPLACED}{os.getpid()}"
    os.rename(target, aside)
    _pause("set-aside")
    os.rename(temporary, target)
    _pause("exchanged")

    def put_back() -> None:
        os.rename(target, temporary)
        os.rename(aside, target)

    _keep_what_appeared(aside, target, before, what, put_back)
    _remove_partially(aside)


def _entries(folder: Path) -> dict[str, tuple[int, int] | None]:
    """Every entry under `folder` by relative path: a file's (size, modification time), None for a folder or link."""
    if not folder.is_dir() or folder.is_symlink():
        return {}
    found: dict[str, tuple[int, int] | None] = {}
    for directory, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(directory, name)
            status = path.lstat()
            found[path.relative_to(folder).as_posix()] = (
                (status.st_size, status.st_mtime_ns) if stat.S_ISREG(status.st_mode) else None
            )
    return found


def _keep_what_appeared(
    old: Path, target: Path, before: dict[str, tuple[int, int] | None], what: str, put_back: Callable[[], object]
) -> None:
    """Refuse to delete the replaced folder `old` if an entry appeared or changed in it since `before` (a file the
    user saved there while the command wrote): `put_back` the old folder in `target`'s place, and name the entry."""
    now = _entries(old)
    appeared = next((name for name, entry in sorted(now.items()) if name not in before or before[name] != entry), None)
    if appeared is None:
        return
    put_back()
    raise ValueError(
        f"{what}={target}: {appeared} appeared in it (or changed) while this command wrote the folder's new content: "
        f"the folder is left as it was, with it, and nothing was replaced; move it out and run the command again"
    )


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


def remove_leftovers(folder: str | os.PathLike[str]) -> None:
    """Undo what writers of folders in `folder` (`write_directory`) left there when killed part way, whatever folder
    they wrote (`_recover` of each): for a folder whose writes are not all of one name, as the checkpoints of a run."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    pattern = re.compile(rf"^\.(.+)({re.escape(_INCOMPLETE)}|{re.escape(_REPLACED)})\d+$")
    for name in sorted({match.group(1) for path in folder.iterdir() if (match := pattern.match(path.name))}):
        _recover(folder / name)


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


__all__ = [
    "PAUSE_ENV",
    "PAUSE_POINTS",
    "STANDARD_OUTPUT_NAMES",
    "WriteError",
    "check_links_inside",
    "check_not_an_input",
    "check_output_dir",
    "check_output_file",
    "check_writable_place",
    "follow_umask",
    "is_standard_output",
    "is_stream",
    "os_error",
    "remove_leftovers",
    "replace_file",
    "write_directory",
    "write_file",
    "writing",
]
