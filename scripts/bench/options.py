"""The options the benchmarks' commands share, declared once: the parser with ``--threads`` and ``--output``,
Multi30k's test files as defaults, and the checks of counts and files (one line naming the option, exit 1)."""

from __future__ import annotations

import argparse
from pathlib import Path

from vanilla_transformer.data import DATA_DIR_VARIABLE, CorpusSpec, shared_data_dir, split_files

MULTI30K = shared_data_dir("multi30k")  # in $VANILLA_TRANSFORMER_DATA, if set


def parser(doc: str, threads: int | None = 2, output: str | None = "also write the figures to this JSON file"):
    """A benchmark's parser, described by the first paragraph of its docstring `doc`, with ``--threads`` (torch's
    CPU threads, default `threads`) and ``--output`` (a results file; `output`: its help); None: without it."""
    made = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    if threads is not None:
        made.add_argument("--threads", type=int, default=threads, help="torch CPU threads (default: %(default)s)")
    if output is not None:
        made.add_argument("--output", type=Path, help=output)
    return made


def multi30k_test() -> tuple[Path | None, Path | None]:
    """Multi30k's 2016 test files (English, German), the defaults of ``--source`` and ``--reference``, if set."""
    return split_files(CorpusSpec("text", data_dir=str(MULTI30K)), "test_2016_flickr") if MULTI30K else (None, None)


def check(args: argparse.Namespace, least: dict[str, int] | None = None, files: tuple[str, ...] = ()) -> None:
    """Each option of `least` (``--rounds``: 1) at least its number (every number of a list option), and each of
    `files` an existing file (None: where the default, Multi30k's, comes from); else one line naming the option, and
    exit 1."""
    value = lambda flag: getattr(args, flag.lstrip("-").replace("-", "_"))  # noqa: E731
    for flag, minimum in (least or {}).items():
        if (min(value(flag), default=minimum) if isinstance(value(flag), list) else value(flag)) < minimum:
            raise SystemExit(f"{flag} must be at least {minimum}, got {value(flag)}")
    for flag in files:
        if value(flag) is None:
            raise SystemExit(f"pass {flag}, or set {DATA_DIR_VARIABLE} to the folder holding multi30k/")
        if not Path(value(flag)).is_file():
            raise SystemExit(f"{flag}={value(flag)} is not a file")
