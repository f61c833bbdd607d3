"""Render every published figure of README.md, docs/*.md and the model card from its results file in docs/results.

A figure sits between markers, ``<!-- figure: NAME -->`` ... ``<!-- /figure -->``: a table on lines of its own, or a
few words inside a sentence. This script rewrites what lies between the markers from the JSON the program or
benchmark wrote, so no figure is typed by hand and none can drift from its file. The figures are the benchmarks'
own: each module of `MODULES` (a benchmark, the length-penalty sweep, or ``run_figures`` for the training runs that
no benchmark writes) names those it publishes in its ``FIGURES``, and this script only collects them.

The pictures too: every PNG under docs/ is drawn here, by a module's ``PICTURES`` (its path under docs/ -> function
of the results folder that returns a `bench.pictures.Picture`), from the committed data. Each PNG carries the
fingerprint of the data and code it was drawn from; the check computes it again and fails on a PNG drawn from other
data or by other code, and on one it does not draw (`bench.pictures` says why fingerprints and not pixels).

    python scripts/render_figures.py            # rewrite the figures in place
    python scripts/render_figures.py --check    # exit 1, naming each figure that differs from its file

``tests/test_published_figures.py`` runs the check (drawing needs matplotlib, the ``plots`` extra; checking does not).
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from bench.pictures import Picture, fingerprint_of

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- figure: (?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figure -->", re.DOTALL)
MODULES: tuple[ModuleType, ...] = tuple(
    importlib.import_module(path.stem)
    for path in sorted(Path(__file__).resolve().parent.glob("*.py"))
    if "\nFIGURES = {" in path.read_text(encoding="utf-8")
)
"""The modules beside this one that name the figures they publish (``FIGURES = {...}``): every benchmark, the
length-penalty sweep and ``run_figures``."""


def collect(modules: tuple[ModuleType, ...] = MODULES) -> dict[str, Callable[[Path], str]]:
    """Every module's figures (name -> function of the results folder), each name owned by one module."""
    figures: dict[str, Callable[[Path], str]] = {}
    for module in modules:
        clash = set(figures) & set(module.FIGURES)
        if clash:
            raise SystemExit(f"{module.__name__} names figures another module names: {', '.join(sorted(clash))}")
        figures.update(module.FIGURES)
    return figures


FIGURES = collect()


def collect_pictures(modules: tuple[ModuleType, ...] = MODULES) -> dict[str, Callable[[Path], Picture]]:
    """Every module's pictures (path under docs/ -> function of the results folder), each path owned by one."""
    pictures: dict[str, Callable[[Path], Picture]] = {}
    for module in modules:
        named = getattr(module, "PICTURES", {})
        clash = set(pictures) & set(named)
        if clash:
            raise SystemExit(f"{module.__name__} names pictures another module names: {', '.join(sorted(clash))}")
        pictures.update(named)
    return pictures


PICTURES = collect_pictures()


def pages(root: Path) -> list[Path]:
    """The files whose figures are rendered: README.md, docs/*.md and the model card's template (the repository's
    model_card.md and the copy the wheel ships, which must stay identical)."""
    card = [root / "model_card.md", root / "vanilla_transformer" / "export" / "model_card.md"]
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *card]


def render_text(text: str, results: Path, where: str) -> tuple[str, list[str]]:
    """`text` with every figure rendered, and the names of those that changed."""
    drifted = []

    def replace(match: re.Match) -> str:
        name, body = match["name"], match["body"]
        if name not in FIGURES:
            raise SystemExit(f"{where}: unknown figure {name!r}; known: {', '.join(FIGURES)}")
        rendered = FIGURES[name](results)
        new = f"\n{rendered}\n" if body.startswith("\n") else rendered  # a block keeps its lines, inline its place
        if new != body:
            drifted.append(name)
        return f"<!-- figure: {name} -->{new}<!-- /figure -->"

    return MARKER.sub(replace, text), drifted


def render(root: Path, check: bool) -> list[str]:
    """Render the figures and pictures under `root` (rewriting them unless `check`); return ``FILE: figure NAME``
    per drifted figure and ``FILE: picture`` per drifted picture."""
    results, drifted, used = root / "docs" / "results", [], set()
    shown = ""
    for path in pages(root):
        text = path.read_text(encoding="utf-8")
        shown += text
        used.update(match["name"] for match in MARKER.finditer(text))
        new, names = render_text(text, results, str(path.relative_to(root)))
        drifted += [f"{path.relative_to(root)}: figure {name}" for name in names]
        if names and not check:
            path.write_text(new, encoding="utf-8")
    unused = sorted(set(FIGURES) - used)
    if unused:
        raise SystemExit(f"figures published nowhere: {', '.join(unused)}")
    return drifted + render_pictures(root, check, shown)


def render_pictures(root: Path, check: bool, shown: str) -> list[str]:
    """Draw every picture whose PNG under docs/ lacks its fingerprint (unless `check`); return ``FILE: picture``
    for each. A PNG under docs/ that no module draws, and a picture no page shows (`shown`), stop the renderer."""
    docs = root / "docs"
    strays = sorted({path.relative_to(docs).as_posix() for path in docs.rglob("*.png")} - set(PICTURES))
    if strays:
        raise SystemExit(f"PNGs under docs/ that no module's PICTURES draws: {', '.join(strays)}")
    hidden = sorted(name for name in PICTURES if f"]({name})" not in shown)
    if hidden:
        raise SystemExit(f"pictures shown on no page: {', '.join(hidden)}")
    drifted = []
    for name, make in PICTURES.items():
        picture, path = make(docs / "results"), docs / name
        if fingerprint_of(path) != picture.fingerprint():
            drifted.append(f"docs/{name}: picture")
            if not check:
                picture.save(path)
    return drifted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a figure differs from its file"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    drifted = render(args.root, args.check)
    for line in drifted:
        drift = "was drawn from other data or code" if line.endswith(": picture") else "differs from its results file"
        print(f"{line} {drift if args.check else 'rendered'}", file=sys.stderr)
    return 1 if drifted and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
