"""What a command reads: one record of every file it opens, and one reader for the files this program did not write.

*The record* (`note_read`, `check_not_read`): every file a command opens for reading is noted here by device and
inode, with the option that named it: the files of a model folder and of an export, the input and the reference, the
file behind standard input when it is a regular file (``< x.en``). Every output is checked against the record before
its first byte is written (`vanilla_transformer.atomic` does it for each file and folder it writes), so an output
that is what the command reads (``--output config.json`` of ``--model``, a hard link to the input, the file behind
standard input) is refused in one line, whatever its spelling. ``vanilla-transformer <command>`` starts each command
with an empty record (`forget_reads`).

*The reader* (`open_checked`, `read_bytes`, `read_json`, `parse_json`): a file this program did not write (a user's
corpus or config, a model folder's files, a CTranslate2 ``model.bin``, a compile cache) is judged before it is read:
it must be a regular file, its size on disk at most the reader's limit, and, inside a folder, not a link out of the
folder (`check_links_inside`, the folder's rule). Its text must be UTF-8, its JSON parse; each failure is one
ValueError naming the file, and the line where there is one: a lone surrogate (``"\\ud83d"``, which no encoder
takes) and nesting too deep for the parser are refused as parse errors are.

This module is at the bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO

STDIN_NAME = "standard input"

_READ: dict[tuple[int, int], tuple[str, str]] = {}
"""(device, inode) of each file read -> (how it was named, its path or `STDIN_NAME`)."""


def forget_reads() -> None:
    """Start a new record: what the commands before this one read is not this one's."""
    _READ.clear()


def _identity(status: os.stat_result) -> tuple[int, int]:
    return status.st_dev, status.st_ino


FOLDER_DEPTH = 3
"""How deep `note_read` notes the files of a folder: a model directory's (``onnx/``, ``js/``) are within it."""


def note_read(path: str | os.PathLike[str] | None, what: str) -> None:
    """Note that the command reads `path` (named by `what`, ``"--input=x.en"``): a regular file, or every regular file
    of a folder (to `FOLDER_DEPTH` folders deep, links not followed). ``-`` notes standard input when it is a regular
    file; a stream, a path that does not exist (a Hub id) or None notes nothing."""
    if path is None:
        return
    if str(path) == "-":
        note_stdin()
        return
    root = Path(path)
    try:
        status = root.stat()
    except OSError:
        return
    if stat.S_ISREG(status.st_mode):
        _READ.setdefault(_identity(status), (what, str(root)))
    elif stat.S_ISDIR(status.st_mode):
        for directory, folders, files in os.walk(root):
            if len(Path(directory).relative_to(root).parts) >= FOLDER_DEPTH:
                folders.clear()  # a model folder is shallow: a folder given by mistake (~) is not walked whole
            for name in files:
                file = Path(directory, name)
                try:
                    status = file.lstat()
                except OSError:
                    continue
                if stat.S_ISREG(status.st_mode):
                    _READ.setdefault(_identity(status), (f"{what} (its {file.relative_to(root)})", str(file)))


def note_stdin() -> None:
    """Note the file behind standard input, if it is a regular file (``< x.en``): not a terminal nor a pipe."""
    try:
        status = os.fstat(sys.stdin.fileno())
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's stand-in, a closed stream)
        return
    if stat.S_ISREG(status.st_mode):
        _READ.setdefault(_identity(status), (STDIN_NAME, STDIN_NAME))


def _still_read(identity: tuple[int, int], path: str) -> bool:
    """Whether the file noted as read at `path` is still there (its inode not freed and given to another file)."""
    try:
        status = os.fstat(sys.stdin.fileno()) if path == STDIN_NAME else os.stat(path)
    except (AttributeError, OSError, ValueError):
        return False
    return _identity(status) == identity


def read_as(path: str | os.PathLike[str]) -> str | None:
    """How the record names the file at `path` (following links) if the command reads it, else None."""
    try:
        identity = _identity(os.stat(path))
    except OSError:
        return None
    noted = _READ.get(identity)
    return noted[0] if noted is not None and _still_read(identity, noted[1]) else None


def check_not_read(path: str | os.PathLike[str], what: str) -> None:
    """Refuse an output `path` (named by `what`) that is, or is a folder holding, a file the command reads: a
    ValueError naming both. Called before the output's first byte is written."""
    target = Path(path)
    name = read_as(target) if not target.is_dir() else None
    if name is None and target.is_dir() and not target.is_symlink():
        inside = target.resolve()
        for identity, (noted, file) in list(_READ.items()):
            if file != STDIN_NAME and inside in Path(file).resolve().parents and _still_read(identity, file):
                name = noted
                break
    if name is not None:
        relation = "holds a file of" if target.is_dir() else "is"
        raise ValueError(
            f"{what}={path} {relation} {name}, which this command reads: writing it would replace what is read; "
            f"name another {what.split('=')[0]}"
        )


# --------------------------------------------------------------------------- the reader

JSON_LIMIT = 256 << 20
"""The largest JSON file `read_json` reads (256 MiB): a config, a tokenizer or a vocabulary is far smaller."""


def check_links_inside(folder: str | os.PathLike[str], what: str = "folder") -> None:
    """Refuse a folder (a model directory, a checkpoint, a run directory, a tokenizer folder) holding a symbolic link
    to something outside it, at any depth: what it names is not what was shipped, and writing there would reach
    outside. A ValueError naming the link and where it leads."""
    root = Path(folder)
    if not root.is_dir():
        return
    for directory, folders, files in os.walk(root):
        for name in folders + files:
            path = Path(directory, name)
            if path.is_symlink():
                check_inside(path, root, what)


def check_inside(path: str | os.PathLike[str], folder: str | os.PathLike[str], what: str = "folder") -> None:
    """Refuse `path` if it, or a link on the way to it, leads out of `folder` (the folder's rule on links)."""
    path, inside = Path(path), Path(folder).resolve()
    target = path.resolve()
    if target == inside or inside in target.parents:
        return
    steps = [path, *path.parents]
    steps = steps[: steps.index(Path(folder)) + 1] if Path(folder) in steps else steps[:1]
    link = next((p for p in steps if p.is_symlink()), None)
    shown = f"{link} is a symbolic link to {os.readlink(link)}" if link is not None else f"{path} leads to {target}"
    raise ValueError(
        f"{shown}, outside the {what} {folder}: links out of a {what} are not followed; put the file itself in its "
        f"place"
    )


class FileRefused(ValueError):
    """A file the reader refuses before reading it: the message names the file; `reason` says why, as a phrase
    (``"it is a symbolic link"``), for a caller that words its own message."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def open_checked(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int,
    inside: str | os.PathLike[str] | None = None,
    links: bool = True,
    note: bool = False,
) -> BinaryIO:
    """The file at `path` open for reading in binary, once judged (see the module): a regular file, at most `limit`
    bytes on disk (`what`, the kind of file, is named with the limit), not out of the folder `inside` through a link,
    and no link at all unless `links` (opened with ``O_NOFOLLOW``). Else a `FileRefused` naming the file, before a
    byte is read. `note`: an input of the command, noted in the record (`note_read`); not for a file of the program's
    own state that it reads and then replaces (a cache, a record). FileNotFoundError if it is missing."""
    path = Path(path)
    if inside is not None:
        check_inside(path, inside, what)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | (0 if links else getattr(os, "O_NOFOLLOW", 0))
    flags |= getattr(os, "O_NONBLOCK", 0)  # a FIFO is refused below, not waited on for a writer
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as error:
        reason = "it is a symbolic link" if error.errno == errno.ELOOP else f"it cannot be read ({error.strerror})"
        raise FileRefused(f"{path}: {reason}", reason) from None
    status = os.fstat(descriptor)
    if stat.S_ISREG(status.st_mode) and hasattr(os, "set_blocking"):
        os.set_blocking(descriptor, True)
    stream = os.fdopen(descriptor, "rb")
    reason = None
    if not stat.S_ISREG(status.st_mode):
        reason = "it is not a regular file (a folder, a device or a pipe)"
    elif status.st_size > limit:
        reason = (
            f"it holds {status.st_size:,} bytes, more than the {limit:,} a {what} may hold: it is not one, or it is "
            "damaged; it is not read"
        )
    if reason is not None:
        stream.close()
        raise FileRefused(f"{path}: {reason}", reason)
    if note:
        _READ.setdefault(_identity(status), (f"the {what} {path}", str(path)))
    return stream


def read_bytes(
    path: str | os.PathLike[str],
    what: str,
    *,
    limit: int,
    inside: str | os.PathLike[str] | None = None,
    links: bool = True,
    note: bool = False,
) -> bytes:
    """The bytes of a file this program did not write, judged first (`open_checked`)."""
    with open_checked(path, what, limit=limit, inside=inside, links=links, note=note) as stream:
        return stream.read()


def read_json(
    path: str | os.PathLike[str],
    what: str = "JSON file",
    *,
    limit: int = JSON_LIMIT,
    inside: str | os.PathLike[str] | None = None,
    note: bool = False,
) -> Any:
    """The content of a JSON file this program did not write, judged first (`open_checked`) and parsed
    (`parse_json`): one ValueError naming the file and the line for anything that is not UTF-8 JSON."""
    data = read_bytes(path, what, limit=limit, inside=inside, note=note)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    return parse_json(text, str(path))


def parse_json(text: str | bytes, name: str, line: int | None = None) -> Any:
    """`text` parsed as JSON, or one ValueError naming `name` and the line (`line`: the line of a JSON Lines file
    that `text` is, else the parser's): invalid JSON, nesting too deep for the parser, a string holding a lone
    surrogate (an escaped ``\\ud83d`` without its pair, which no UTF-8 encoder takes)."""
    where = f"{name}:{line}" if line is not None else name
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{name}:{line or error.lineno}: invalid JSON: {error.msg} (column {error.colno})") from None
    except RecursionError:
        raise ValueError(f"{where}: invalid JSON: nested too deep to read") from None
    except ValueError as error:
        raise ValueError(f"{where}: invalid JSON: {error}") from None
    problem = _first_bad_string(value)
    if problem is not None:
        raise ValueError(f"{where}: the string {problem!r} holds a lone surrogate, which is not text: not UTF-8 JSON")
    return value


def _first_bad_string(value: Any) -> str | None:
    """The first string (key or value) of parsed JSON `value` that is not valid Unicode text (a lone surrogate),
    shortened; the walk is iterative, so a deep value cannot exhaust the stack."""
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        strings: Iterable[str] = ()
        if isinstance(item, str):
            strings = (item,)
        elif isinstance(item, dict):
            strings = item.keys()
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        for string in strings:
            try:
                string.encode("utf-8")
            except UnicodeEncodeError:
                return string[:40]
    return None


__all__ = [
    "JSON_LIMIT",
    "STDIN_NAME",
    "FileRefused",
    "check_inside",
    "check_links_inside",
    "check_not_read",
    "forget_reads",
    "note_read",
    "note_stdin",
    "open_checked",
    "parse_json",
    "read_as",
    "read_bytes",
    "read_json",
]
