"""Time the README's worked examples as a new user runs them, and write docs/results/readme_examples.json, from which
the README's and docs/finetuning.md's sentence on their time is rendered (`FIGURES`).

    flock /tmp/vt-timing.lock python scripts/time_examples.py   # alone on the machine: about 10 minutes on 2 cores

The examples run one after the other in a fresh scratch folder, as written in the README (`EXAMPLES`; the test
checks that the README holds each command word for word): the default job, which writes ``runs/numbers/model``,
then the fine-tuning example on that model. Recorded per command: its wall time, the CPU time of its processes, its
exit status; for the fine-tuning, the figures of its ``training_summary.json`` (steps, epochs, exact match, chrF).
Beside them the load before and after, the processor and the package versions (`bench.record.Record`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.figures import minutes, read_json
from bench.record import Record
from bench.timing import run_timed

from vanilla_transformer.model_summary import SUMMARY_FILE

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "results" / "readme_examples.json"
EXAMPLES = {
    "train": "vanilla-transformer train",
    "finetune": "vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/finetuned "
    "--max-steps 300 --eval-steps 100",
}
"""The README's commands, in the order a user runs them (the fine-tuning reads the default job's model)."""
SUMMARIZED = ("finetune",)
"""The commands whose output folder (``--output-dir``) holds a run summary (`SUMMARY_FILE`) with figures to record."""
SUMMARY_FIELDS = ("steps", "epochs", "train_hours", "exact_match", "chrf")


def option_value(command: str, option: str) -> str:
    """The value given to `option` in `command` (``--output-dir DIR``)."""
    words = shlex.split(command)
    return words[words.index(option) + 1]


def time_example(command: str, folder: Path) -> dict[str, Any]:
    """Run `command` in `folder` with this interpreter's environment's commands first on PATH; its wall and CPU
    time, peak memory and exit status (`bench.timing.run_timed`)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    completed, timed = run_timed(shlex.split(command), folder, env)
    if completed.returncode:
        print(completed.stdout[-2000:] + completed.stderr[-4000:], file=sys.stderr)
    return {"command": command, **timed}


def summary_figures(path: Path) -> dict[str, Any]:
    """The figures of a run's summary file that the record keeps (`SUMMARY_FIELDS`), or none where it is absent."""
    if not path.is_file():
        return {}
    summary = json.loads(path.read_text(encoding="utf-8"))
    return {name: summary[name] for name in SUMMARY_FIELDS if name in summary}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the results file (default: %(default)s)")
    options = parser.parse_args(argv)
    record = Record(__file__, argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="readme-examples-") as scratch:
        for name, command in EXAMPLES.items():
            timed = time_example(command, Path(scratch))
            if name in SUMMARIZED:
                output_dir = Path(scratch) / option_value(command, "--output-dir")
                timed["summary"] = summary_figures(output_dir / SUMMARY_FILE)
            runs.append({"name": name, **timed})
            print(f"{command}: {timed['wall_seconds']:.0f} s, exit status {timed['exit_status']}", flush=True)
            if timed["exit_status"]:
                break  # the next example needs this one's output
    record.write({"runs": runs}, options.output)
    return 0 if all(run["exit_status"] == 0 for run in runs) and len(runs) == len(EXAMPLES) else 1


def finetune_example_time(results: Path) -> str:
    """The docs' sentence: the fine-tuning example's wall time and scores, after the default job's, where and at
    what load they were measured."""
    timed = read_json(results, "readme_examples.json")
    runs = {run["name"]: run for run in timed["runs"]}
    failed = next((run for run in timed["runs"] if run["exit_status"]), None)
    if failed is not None or "finetune" not in runs:
        status = f"`{failed['command']}` exited {failed['exit_status']}" if failed else "it did not run"
        return f"the fine-tuning example failed when timed ({status})"
    train, finetune = runs["train"], runs["finetune"]
    summary = finetune.get("summary") or {}
    held_out = max(int(option_value(finetune["command"], "--numbers")) // 10, 1)  # --numbers N evaluates on N/10
    scores = (
        f", exact match {summary['exact_match']:.1f}% on its {held_out:,} held-out pairs"
        if "exact_match" in summary
        else ""
    )
    load = f"1-minute load {timed['load_average_start'][0]:.1f} before and {timed['load_average_end'][0]:.1f} after"
    return (
        f"the fine-tuning example took {minutes(finetune['wall_seconds'])}{scores}, after "
        f"{minutes(train['wall_seconds'])} for `vanilla-transformer train`, on {timed['processor']} "
        f"({timed['machine']}), {load} ([results](docs/results/readme_examples.json))"
    )


def finetune_example_time_in_docs(results: Path) -> str:
    """`finetune_example_time` with its link from a page under docs/."""
    return finetune_example_time(results).replace("](docs/results/", "](results/")


FIGURES = {"finetune-example-time": finetune_example_time, "finetune-example-time-docs": finetune_example_time_in_docs}


if __name__ == "__main__":
    sys.exit(main())
