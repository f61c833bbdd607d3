"""What this program wrote into a folder: a manifest of its files, so that ``--force`` and a rewrite delete only those.

A folder that a command writes whole and may later replace (an export of ``export-ctranslate2`` or ``export-onnx``,
the maps of ``attention``) gets a manifest, ``.vanilla-transformer-written.json``, the last file written into it:
what wrote it (`kind`) and the size and SHA-256 of every file. Replacing such a folder is allowed only when it holds
nothing else: every file listed with the size and hash it had when written, every folder one that holds a listed
file, no link (`first_foreign`). A file the user added or changed, a link, or a folder without a manifest is named
and the folder is left as it is. Telling a folder by the names of the files in it (``model.bin``, ``onnx/``) is not
enough: a user's folder may hold a file of that name. Nor is the manifest alone, which anyone can write: a file
qualifies only if it also carries one of the names the command writes (`names`, patterns such as ``onnx/*.onnx``
that the command's own code declares), so a manifest listing a user's files with their true hashes makes none of
them deletable.

This module is at the bottom of the package: it imports nothing from it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

MANIFEST = ".vanilla-transformer-written.json"
"""The manifest's file name, at the top of the folder it describes."""

_CHUNK = 1 << 20


def file_digest(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes, read in chunks, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _entries(folder: Path) -> list[tuple[str, Path]]:
    """Every entry under `folder` (files, folders, links; links not followed), by its relative POSIX path, sorted."""
    found = []
    for directory, folders, files in os.walk(folder):
        for name in folders + files:
            path = Path(directory, name)
            found.append((path.relative_to(folder).as_posix(), path))
    return sorted(found)


def writes(relative: str, names: Sequence[str]) -> bool:
    """Whether the file at `relative` (a POSIX path inside the folder) carries one of the names `names` (patterns of
    `fnmatch`, matched against the whole relative path) that a command writes."""
    return any(fnmatch.fnmatchcase(relative, pattern) for pattern in names)


def record_written(folder: str | os.PathLike[str], kind: str, names: Sequence[str]) -> Path:
    """Write the manifest of `folder`: every file in it now, with its size and SHA-256, as written by `kind` (a
    command's name, such as ``"export-onnx"``), each of one of the `names` that command writes (else a ValueError:
    the command's list of its names is out of date). Call it last, once the folder holds everything it will hold."""
    folder = Path(folder)
    files = {}
    for relative, path in _entries(folder):
        if path.is_symlink():
            raise ValueError(f"{path} is a link: a folder this program writes holds none")
        if path.is_file() and relative != MANIFEST and not writes(relative, names):
            raise ValueError(f"{kind} wrote {relative}, which is not among the names it declares ({list(names)})")
        if path.is_file() and relative != MANIFEST:
            files[relative] = {"size": path.stat().st_size, "sha256": file_digest(path)}
    manifest = folder / MANIFEST
    manifest.write_text(json.dumps({"kind": kind, "files": files}, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def _read_manifest(folder: Path) -> dict | str:
    """The manifest of `folder`, or why there is none to trust."""
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        return f"no {MANIFEST} (the list of the files this program wrote there)"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        return f"a {MANIFEST} that cannot be read ({error})"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(entry, dict) and isinstance(entry.get("size"), int) and isinstance(entry.get("sha256"), str)
        for entry in files.values()
    ):
        return f"a {MANIFEST} that is not a list of files"
    return manifest


def first_foreign(folder: str | os.PathLike[str], kind: str, names: Sequence[str]) -> str | None:
    """None if `folder` holds only what `kind` wrote there (see the module): files of its manifest, unchanged, each of
    one of the `names` that `kind` writes; else the first thing that says otherwise, as a phrase naming it:
    ``"notes.md, which export-onnx did not write"``."""
    folder = Path(folder)
    manifest = _read_manifest(folder)
    if isinstance(manifest, str):
        entries = [relative for relative, _ in _entries(folder) if relative != MANIFEST]
        first = f"{entries[0]}, which {kind} did not write (the folder has {manifest})" if entries else None
        return first or f"{manifest}"
    if manifest.get("kind") != kind:
        return f"the files of {manifest.get('kind')!r} ({MANIFEST}), not of {kind}"
    files = manifest["files"]
    parents = {parent.as_posix() for name in files for parent in Path(name).parents}
    for relative, path in _entries(folder):
        if relative == MANIFEST:
            continue
        if path.is_symlink():
            return f"{relative}, a link, which {kind} did not write"
        if path.is_dir():
            if relative not in parents:
                return f"{relative}/, a folder {kind} did not write"
            continue
        entry = files.get(relative)
        if entry is None or not path.is_file():
            return f"{relative}, which {kind} did not write"
        if not writes(relative, names):
            return f"{relative}, which {kind} did not write: no file of that name is one it writes, whatever {MANIFEST} lists"
        if path.stat().st_size != entry["size"] or file_digest(path) != entry["sha256"]:
            return f"{relative}, changed since {kind} wrote it"
    return None


def written_by(kind: str, names: Sequence[str]) -> Callable[[Path], bool]:
    """Whether a folder holds only what `kind` wrote (`first_foreign` is None): the ``replaceable`` of
    `atomic.write_directory` and `atomic.check_output_dir` for a folder that `kind` replaces."""
    return lambda folder: first_foreign(folder, kind, names) is None


def check_replaceable(folder: str | os.PathLike[str], kind: str, what: str, names: Sequence[str]) -> None:
    """Refuse to replace a non-empty `folder` that holds anything `kind` did not write, naming the first such file (a
    ValueError); an empty or missing folder passes."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir() or not any(folder.iterdir()):
        return
    foreign = first_foreign(folder, kind, names)
    if foreign is not None:
        raise ValueError(
            f"{what}={folder} holds {foreign}: a folder that was not written by this program is not replaced; "
            f"choose a new or empty folder, or move your files out"
        )


__all__ = [
    "MANIFEST",
    "check_replaceable",
    "file_digest",
    "first_foreign",
    "record_written",
    "writes",
    "written_by",
]
