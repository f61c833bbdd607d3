"""Render every published figure of README.md, docs/*.md and the model card from its results file in docs/results.

A figure sits between markers, ``<!-- figure: NAME -->`` ... ``<!-- /figure -->``: a table on lines of its own, or a
few words inside a sentence. This script rewrites what lies between the markers from the JSON the program or
benchmark wrote, so no figure is typed by hand and none can drift from its file. The figures are the benchmarks'
own: each module of `MODULES` (a benchmark, the length-penalty sweep, or ``run_figures`` for the training runs that
no benchmark writes) names those it publishes in its ``FIGURES``, and this script only collects them.

    python scripts/render_figures.py            # rewrite the figures in place
    python scripts/render_figures.py --check    # exit 1, naming each figure that differs from its file

``tests/test_published_figures.py`` runs the check.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

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
    """Render the figures under `root` (rewriting them unless `check`); return ``FILE: figure NAME`` per drift."""
    results, drifted, used = root / "docs" / "results", [], set()
    for path in pages(root):
        text = path.read_text(encoding="utf-8")
        used.update(match["name"] for match in MARKER.finditer(text))
        new, names = render_text(text, results, str(path.relative_to(root)))
        drifted += [f"{path.relative_to(root)}: figure {name}" for name in names]
        if names and not check:
            path.write_text(new, encoding="utf-8")
    unused = sorted(set(FIGURES) - used)
    if unused:
        raise SystemExit(f"figures published nowhere: {', '.join(unused)}")
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
        print(f"{line} {'differs from its results file' if args.check else 'rendered'}", file=sys.stderr)
    return 1 if drifted and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
