"""The pictures of the docs, drawn from committed results as the tables are, and checked the same way.

A module that publishes PNGs names them in ``PICTURES`` (path under docs/ -> function of the results folder that
returns a `Picture`); ``scripts/render_figures.py`` collects them with the tables. A `Picture` holds what is drawn
(``data``: plain JSON values read from the committed files, or computed from them) and the function that draws it.

What the check compares: each PNG carries, in a PNG text chunk (`KEY`), the SHA-256 of the picture's data and of
its drawing code's source (`Picture.fingerprint`); ``render_figures.py --check`` computes it again from the committed
files and fails on a PNG whose fingerprint differs or that has none. So a PNG drawn from another run, one drawn by
other code, and one the renderer did not draw at all (a screenshot, a copy of a run's ``metrics.png``) all fail.
Pixels are not compared there: the same figure drawn by another matplotlib release, or with other fonts, differs
in its antialiasing and text, and CI installs the newest release; a hash of pixels or bytes would fail on a fresh
install with nothing wrong. Where the matplotlib that drew a PNG (the ``Software`` chunk) is installed,
tests/test_published_figures.py redraws every picture and compares the pixels, so a fingerprint cannot pass for
a picture that it does not describe.

Drawing is made deterministic: matplotlib's default style (not the user's matplotlibrc), the Agg canvas, the
figure's own size and dpi, and no metadata but the ``Software`` and fingerprint chunks.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vanilla_transformer.atomic import replace_file
from vanilla_transformer.extras import import_optional

KEY = "vt-picture"
"""The PNG text chunk that holds a picture's fingerprint."""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass(frozen=True)
class Picture:
    """One PNG of the docs: `draw` makes its figure (a ``matplotlib.figure.Figure``) from `data`.

    Args:
        data: Everything the picture shows, as plain JSON values (numbers, strings, lists, dicts).
        draw: The function of `data` that builds the figure; its source is part of the fingerprint.
        code: Further functions whose source decides what `draw` draws (a shared panel's), fingerprinted too.
    """

    data: Any
    draw: Callable[[Any], Any]
    code: tuple[Callable, ...] = ()

    def fingerprint(self) -> str:
        """SHA-256 of the data (canonical JSON: sorted keys, no spaces) and of the drawing functions' source."""
        digest = hashlib.sha256(json.dumps(self.data, sort_keys=True, separators=(",", ":"), allow_nan=False).encode())
        for function in (self.draw, *self.code):
            digest.update(b"\0" + inspect.getsource(function).replace("\r\n", "\n").encode())
        return digest.hexdigest()

    def save(self, path: Path) -> None:
        """Draw the picture in matplotlib's default style and write it to `path` (atomically), fingerprinted."""
        matplotlib = import_optional("matplotlib", "plots", "drawing the docs' pictures")
        from matplotlib import style
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        with style.context("default"):
            figure = self.draw(self.data)
            FigureCanvasAgg(figure)
            metadata = {"Software": f"matplotlib {matplotlib.__version__}", KEY: self.fingerprint()}
            replace_file(path, lambda temporary: figure.savefig(temporary, format="png", metadata=metadata))


def png_text(path: Path) -> dict[str, str]:
    """The text chunks (tEXt, zTXt, iTXt) of the PNG file `path`, read without an imaging library; {} for a file that
    is missing or not a PNG."""
    if not path.is_file():
        return {}
    data = path.read_bytes()
    if not data.startswith(PNG_SIGNATURE):
        return {}
    text, offset = {}, len(PNG_SIGNATURE)
    while offset + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[offset : offset + 8])
        body = data[offset + 8 : offset + 8 + length]
        offset += 12 + length  # length, type, body, CRC
        if kind == b"tEXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = value.decode("latin-1")
        elif kind == b"zTXt":
            key, _, value = body.partition(b"\0")
            text[key.decode("latin-1")] = zlib.decompress(value[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, _, rest = body.partition(b"\0")
            compressed, rest = rest[0], rest[2:]
            _language, _, rest = rest.partition(b"\0")
            _translated, _, value = rest.partition(b"\0")
            text[key.decode("latin-1")] = (zlib.decompress(value) if compressed else value).decode("utf-8")
        elif kind == b"IEND":
            break
    return text


def fingerprint_of(path: Path) -> str | None:
    """The fingerprint a PNG was drawn with, or None (not drawn by `Picture.save`, or no such file)."""
    return png_text(path).get(KEY)
