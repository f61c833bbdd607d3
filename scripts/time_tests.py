"""Time the test suite's two commands, the default one (the slow integration tests left out) and the full one, and
write docs/results/test_times.json, from which the docs' sentence on the test time is rendered (`FIGURES`).

    flock /tmp/vt-timing.lock python scripts/time_tests.py --choose-slow 300   # alone on the machine
    python scripts/time_tests.py --output /tmp/t.json -- tests/test_layout.py     # a trial on a few tests

With ``--choose-slow SECONDS`` the full command runs first, with pytest's per-test durations (its JUnit XML); the
slowest tests, by their share of the suite's summed test time, go into ``tests/slow_tests.txt`` (the list
``tests/conftest.py`` marks ``slow``) until the rest is the share SECONDS is of the full command's wall time; then
the default command runs with that list, so both times are of the list written.

Each command runs as the README names it (``python -m pytest -q -n auto``, then with ``-m ""``, which runs the
tests marked ``slow`` too); arguments after ``--`` are added to both (a trial on a subset, which the figure then says
it is). Recorded per command: its wall time, the CPU time of its processes (user + system, every pytest-xdist worker
included), the largest resident memory of one of them, the counts of pytest's summary line and its exit status;
beside them the load before and after, the processor and the package versions (`bench.record.Record`).
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path
from typing import Any

from bench.figures import read_json
from bench.record import Record
from bench.timing import run_timed

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "docs" / "results" / "test_times.json"
SLOW_TESTS = ROOT / "tests" / "slow_tests.txt"
COMMANDS = {
    "default": ["python", "-m", "pytest", "-q", "-n", "auto"],
    "full": ["python", "-m", "pytest", "-q", "-n", "auto", "-m", ""],
}
"""The README's two test commands: the default one leaves out the tests marked ``slow`` (pyproject.toml's addopts);
``-m ""`` selects every test."""
_COUNT = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)")


def summary_counts(output: str) -> dict[str, int]:
    """The counts of pytest's last summary line (``1121 passed, 18 skipped, 40 deselected in 312.5s``)."""
    lines = [line for line in output.splitlines() if re.search(r"\b(passed|failed|error|no tests ran)\b", line)]
    counts: dict[str, int] = {}
    for number, word in _COUNT.findall(lines[-1] if lines else ""):
        counts[word.rstrip("s") if word.startswith(("error", "warning")) else word] = int(number)
    return counts


def time_command(argv: list[str], unrecorded: list[str] = ()) -> dict[str, Any]:
    """Run `argv` (and `unrecorded` options, left out of the recorded command) in the repository root; its wall and
    CPU time, peak memory, summary counts and exit status."""
    completed, timed = run_timed([sys.executable, *argv[1:], *unrecorded], ROOT)
    return {"command": shlex.join(argv), **timed, **summary_counts(completed.stdout)}


def durations_of(junit_xml: Path) -> dict[str, float]:
    """Each test function's seconds (setup, call and teardown, its parametrizations summed) in a JUnit XML file of
    pytest, by ``path::function``."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        seconds[f"{module}::{case.get('name', '').split('[', 1)[0]}"] += float(case.get("time") or 0)
    return dict(seconds)


def choose_slow(seconds: dict[str, float], keep_share: float) -> list[str]:
    """The slowest tests, slowest first, until the others hold at most `keep_share` of the summed time."""
    total, chosen = sum(seconds.values()), []
    rest = total
    for name, duration in sorted(seconds.items(), key=lambda item: -item[1]):
        if rest <= keep_share * total:
            break
        chosen.append(name)
        rest -= duration
    return chosen


def write_slow_tests(chosen: list[str], seconds: dict[str, float], note: str, path: Path = SLOW_TESTS) -> None:
    total = sum(seconds.values()) or 1.0
    share = sum(seconds[name] for name in chosen) / total
    lines = [
        "# The tests marked slow (tests/conftest.py), left out of the default test command. Written by",
        f"# scripts/time_tests.py from measured per-test durations ({note}): these {len(chosen)} of",
        f"# {len(seconds)} test functions took {share:.0%} of the suite's summed test time; each line's share follows it.",
        *(f"{name}  # {seconds[name] / total:.2%}" for name in chosen),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the results file (default: %(default)s)")
    parser.add_argument(
        "--choose-slow", type=float, metavar="SECONDS", help="rewrite tests/slow_tests.txt for this default time"
    )
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if options.choose_slow and extra:
        parser.error("--choose-slow chooses from the whole suite's durations: give no tests after --")
    record = Record(__file__, argv)
    runs = {}
    order = ["full", "default"] if options.choose_slow else list(COMMANDS)
    for name in order:
        command = COMMANDS[name] + extra
        with tempfile.TemporaryDirectory() as scratch:
            junit = Path(scratch) / "junit.xml"
            timed = time_command(command, [f"--junitxml={junit}"] if name == "full" and options.choose_slow else [])
            if name == "full" and options.choose_slow:
                seconds = durations_of(junit)
                chosen = choose_slow(seconds, options.choose_slow / timed["wall_seconds"])
                write_slow_tests(chosen, seconds, f"{timed['command']}, {timed['wall_seconds']:.0f} s")
                timed["slow_tests"] = len(chosen)
        runs[name] = {"name": name, **timed}
        print(f"{timed['command']}: {timed['wall_seconds']:.0f} s, exit status {timed['exit_status']}", flush=True)
    ordered = [runs[name] for name in COMMANDS]
    record.write({"runs": ordered, "subset": extra or None}, options.output)
    return 0 if all(run["exit_status"] == 0 for run in ordered) else 1


def _minutes(seconds: float) -> str:
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min {rest:02d} s" if whole else f"{rest} s"


def test_times(results: Path) -> str:
    """The docs' sentence: each command's wall time and counts, where and at what load it was measured."""
    timed = read_json(results, "test_times.json")
    parts = []
    for run in timed["runs"]:
        counts = f"{run.get('passed', 0):,} passed, {run.get('skipped', 0):,} skipped"
        parts.append(f"`{run['command']}` {_minutes(run['wall_seconds'])} ({counts})")
    trial = f" (a trial on `{' '.join(timed['subset'])}` only, not the suite)" if timed.get("subset") else ""
    load = f"1-minute load {timed['load_average_start'][0]:.1f} before and {timed['load_average_end'][0]:.1f} after"
    return f"{' and '.join(parts)}{trial}, on {timed['processor']} ({timed['machine']}), {load}"


FIGURES = {"test-times": test_times}


if __name__ == "__main__":
    sys.exit(main())
