"""The one results record: what a benchmark's results file holds beside its figures, written one way."""

from __future__ import annotations

import json
import os
import shlex
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from vanilla_transformer.environment import run_environment


class Record:
    """Started when a benchmark starts (the load average and the clock); `result` and `write` add the command, the
    wall time, the load at the end, the processor, the GPUs and the package versions to the figures.

    Args:
        script: The script's file (``__file__``), which names it in the command when `argv` is given.
        argv: The options `main` was called with; None to record the process's own command line.
        timed: False for figures that do not depend on time or load (operator counts): the start, the wall time
            and the load averages are left out, so that a rerun writes the same file.
    """

    def __init__(
        self, script: str | os.PathLike | None = None, argv: list[str] | None = None, timed: bool = True
    ) -> None:
        self.timed = timed
        self.load_average_start = os.getloadavg()
        self.clock = time.perf_counter()
        self.started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.command = (
            shlex.join(["python", f"scripts/{Path(script).name}", *argv]) if script and argv is not None else None
        )

    def result(self, figures: dict[str, Any]) -> dict[str, Any]:
        """`figures`, then the run's environment (`vanilla_transformer.environment.run_environment`)."""
        environment = run_environment(self.load_average_start)
        if self.command is not None:
            environment["command"] = self.command
        clock = {"started": self.started, "wall_seconds": time.perf_counter() - self.clock}
        clash = set(figures) & {*clock, *environment}
        if clash:
            raise ValueError(f"figures named like the record's own fields: {sorted(clash)}")
        if not self.timed:
            clock = {}
            environment = {k: v for k, v in environment.items() if not k.startswith("load_average")}
        return {**figures, **clock, **environment}

    def write(self, figures: dict[str, Any], path: str | os.PathLike | None) -> dict[str, Any]:
        """The `result`, written to `path` as JSON when one is given."""
        result = self.result(figures)
        if path is not None:
            write_json(result, path)
        return result


def write_json(result: Any, path: str | os.PathLike) -> None:
    """`result` as indented JSON (values JSON lacks written as their text), its folder made if needed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")


def environment_of(result: dict[str, Any]) -> dict[str, Any]:
    """The load averages (start, end) and package versions of a results file, in `Record`'s schema, from any
    committed one: older files named the load averages ``loadavg_start``/``loadavg_end`` or
    ``load_average_before``/``load_average_after`` (or only the latter), put torch's and transformers'
    versions at the top, or the whole environment under ``environment``."""
    result = {**result.get("environment", {}), **result} if isinstance(result.get("environment"), dict) else result
    first = lambda *keys: next((result[key] for key in keys if key in result), None)  # noqa: E731
    start = first("load_average_start", "loadavg_start", "load_average_before")
    end = first("load_average_end", "loadavg_end", "load_average_after")
    versions = dict(result.get("versions") or {})
    for name in ("torch", "transformers"):
        if name not in versions and isinstance(result.get(name), str):
            versions[name] = result[name]
    return {"load_average_start": start, "load_average_end": end, "versions": versions}
