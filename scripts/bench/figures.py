"""What the benchmarks' figure functions share: reading a results folder, and writing Markdown tables and numbers.

Each benchmark module names its figures in ``FIGURES`` (figure name -> function of the results folder that returns
the Markdown between the page's markers); ``scripts/render_figures.py`` collects them.
"""

from __future__ import annotations

import json
from pathlib import Path

from .record import environment_of


def read_json(results: Path, name: str) -> dict | list:
    return json.loads((results / name).read_text(encoding="utf-8"))


def read_jsonl(results: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (results / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; `align` holds ``"l"`` or ``"r"`` per column."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def minutes(seconds: float) -> str:
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min {rest} s" if whole else f"{rest} s"


def environment_load(run: dict) -> str:
    """The 1-minute load averages at the start and end of a results file's run, of any schema (`environment_of`)."""
    environment = environment_of(run)
    return f"{environment['load_average_start'][0]:.1f} → {environment['load_average_end'][0]:.1f}"


def versions(run: dict, *names: str) -> str:
    """``torch 2.13.0, transformers 5.24.0``: the versions of the packages `names` a results file recorded, of any
    schema (`environment_of`)."""
    recorded = environment_of(run)["versions"]
    return ", ".join(f"{name} {recorded[name]}" for name in names)


def processor(run: dict) -> str:
    """The processor a results file recorded, and whether it has native bf16; "not recorded" for older files."""
    features = run.get("processor_features")
    if features is None:
        return "not recorded"
    return f"{run.get('processor', '?')}, {'AVX-512 BF16' if 'avx512_bf16' in features else 'no native bf16'}"


def yes(flag: bool) -> str:
    return "yes" if flag else "no"
