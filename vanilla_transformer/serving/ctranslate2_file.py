"""A CTranslate2 ``model.bin`` judged before CTranslate2 reads it: a damaged file (cut short, empty, random bytes)
is one line naming it, not CTranslate2's traceback (or its attempt to allocate what a random length asks for).

The file is read through the package's reader of files it did not write (`vanilla_transformer.reading`: a regular
file, no larger than this machine's memory, not a link out of its folder), and its layout is walked as CTranslate2
writes it (``ctranslate2.specs.model_spec.ModelSpec._serialize``, binary version 6): the version, the spec's name and
revision, then each variable's name, shape, type and byte count (the bytes themselves skipped, not read), then the
aliases; every count must fit what is left of the file, and the file must end where the layout does.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import BinaryIO

from ..reading import open_checked

MODEL_FILE = "model.bin"
"""CTranslate2's weights file in its model folder."""

WALKED_VERSION = 6
"""The binary version whose layout `check_model_bin` walks; older ones (which CTranslate2 still reads) are checked
for their version alone."""

ITEM_BYTES = (4, 1, 2, 4, 2, 2)
"""Bytes of one item of each CTranslate2 type id: float32, int8, int16, int32, float16, bfloat16."""

FIX = "the file is damaged: export the model again with vanilla-transformer export-ctranslate2"


class _Damaged(Exception):
    """Why the layout does not hold."""


def _memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 1 << 40


def check_model_bin(folder: str | os.PathLike[str], newest_version: int = WALKED_VERSION) -> None:
    """Refuse a CTranslate2 folder whose ``model.bin`` is missing, is not a regular file, is larger than this
    machine's memory, leads out of the folder through a link, or does not hold CTranslate2's layout: one ValueError
    (FileNotFoundError if missing) naming the file and what is wrong. `newest_version`: the newest binary version the
    installed CTranslate2 reads (a newer one is refused as CTranslate2 would)."""
    path = Path(folder) / MODEL_FILE
    with open_checked(path, "CTranslate2 model", limit=_memory(), inside=folder, note=True) as stream:
        size = os.fstat(stream.fileno()).st_size
        try:
            _walk(stream, size, newest_version)
        except _Damaged as error:
            raise ValueError(f"{path} is not a complete CTranslate2 model ({error}): {FIX}") from None


def _walk(stream: BinaryIO, size: int, newest_version: int) -> None:
    def take(count: int) -> bytes:
        data = stream.read(count)
        if len(data) < count:
            raise _Damaged(f"cut short at byte {stream.tell():,} of {size:,}")
        return data

    def number(form: str) -> int:
        return struct.unpack("<" + form, take(struct.calcsize(form)))[0]

    def string() -> str:
        length = number("H")
        data = take(length)
        if length == 0 or data[-1:] != b"\0":
            raise _Damaged(f"a name that does not end at byte {stream.tell():,}")
        try:
            return data[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise _Damaged(f"a name that is not text at byte {stream.tell() - length:,}") from None

    version = number("I")
    if not 1 <= version <= max(newest_version, WALKED_VERSION):
        raise _Damaged(f"binary version {version:,}, where CTranslate2 writes 1 to {newest_version}")
    if version != WALKED_VERSION:
        return
    string()  # the spec's name
    number("I")  # its revision
    for _ in range(number("I")):
        name = string()
        shape = [number("I") for _ in range(number("B"))]
        kind = number("B")
        if kind >= len(ITEM_BYTES):
            raise _Damaged(f"{name}: an unknown type id {kind}")
        count = number("I")
        if count != math.prod(shape) * ITEM_BYTES[kind]:
            raise _Damaged(f"{name}: {count:,} bytes for a shape of {shape}")
        if stream.tell() + count > size:
            raise _Damaged(f"{name}: cut short, {count:,} bytes declared, {size - stream.tell():,} left")
        stream.seek(count, os.SEEK_CUR)
    for _ in range(number("I")):
        string()
        string()
    if stream.tell() != size:
        raise _Damaged(f"{size - stream.tell():,} bytes after the end of its layout")


__all__ = ["MODEL_FILE", "check_model_bin"]
