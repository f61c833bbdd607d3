"""Data pipeline benchmark: how long until the first optimizer step, and how much memory, as the corpus grows.

Builds a synthetic corpus of ``--pairs`` pairs in a temporary directory: the lines of the shared Multi30k training
set, over and over, each with a counter appended (so WMT14's 4.5M pairs, with shorter sentences than WMT's). Then
runs the real training command on it twice, as a user would, and stops each run once its first optimizer step is
logged:

* cold: nothing cached; the tokenizer is trained (37k BPE, as ``wmt14-base``), the corpus cleaned and tokenized;
* warm: a rerun into a new run directory; tokenizer and tokenized corpus come from the data cache, and so does the
  compile cache where the run compiles (``train``'s ``compile-<key>.bin``).

``--warm-runs K`` reruns warm K times and reports the median run. ``--compare-checkout DIR`` also runs the package of
``DIR`` (another version of the repository) warm, on the same caches, K times interleaved with this checkout's runs
(this, DIR, this, DIR, ...): the ``compare`` figures give each side's median and their ratio, measured side by side.

Each run's time to its first step is split in two phases: ``compile_s``, the wall time of the first step's
compilation as the run logs it (``compile_seconds`` in ``metrics.jsonl``; 0 when the run does not compile), and
``data_s``, the rest (start-up, data, model). The runs share an empty folder of their own for torch's compiler
caches (``TORCHINDUCTOR_CACHE_DIR``), so that the cold run compiles from nothing whatever earlier runs left on the
machine, and the warm run finds what the cold run left, as a rerun on the same machine does.

The model is the ``multi30k`` preset's (N=3, d_model=256) with the data settings of ``wmt14-base`` (37k vocabulary,
pairs up to 256 tokens), at 1,024 tokens per step, so that the step itself is cheap (with a 37k vocabulary the
logits of a 4,096-token step and their gradients alone take over 1 GB) and the data pipeline is what is measured. Prints::

    DATA pairs=N prepare_s=... warm_start_s=... peak_rss_mb=... padding=...
    PHASES cold: data_s=... compile_s=...; warm: data_s=... compile_s=...

``peak_rss_mb`` is the largest peak resident size (``VmHWM``) of any process of either run; ``padding`` the share
of padding in an epoch's batches, as the run logs it. The JSON file also has each run's CPU seconds (user + system,
which depend less than the wall time on what else the machine runs) and its timestamped log lines. With ``--output`` the figures also go to a JSON file, with the
machine, its load averages and the package versions (`bench.Record`). ``--checkout DIR`` runs the package found in ``DIR`` instead (another version of the
repository, e.g. one extracted with ``git archive``), cold only: how the "before" figure was taken.

Usage::

    python scripts/benchmark_data.py --pairs 450000 --output docs/results/data_benchmark_450000.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import Record, options
from bench.figures import environment_load, processor, read_json, table, yes

from vanilla_transformer.data import DATA_DIR_VARIABLE
from vanilla_transformer.training.run_dir import RunLayout

RUN_OPTIONS = [
    "--preset", "multi30k", "--dataset", "text", "--valid-split", "valid", "--test-split", "test",
    "--vocab-size", "37000", "--max-length", "256", "--max-tokens", "1024", "--log-every", "1",
    "--num-threads", "2",
]  # fmt: skip


def write_corpus(directory: Path, pairs: int, source: Path) -> None:
    """``train.{en,de}`` of `pairs` pairs (Multi30k lines plus a counter), ``valid``/``test`` of 100 pairs each."""
    block = 100_000  # lines written at a time: WMT14's 4.5M never sit in memory at once
    for lang in ("en", "de"):
        rows = (source / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        with open(directory / f"train.{lang}", "w", encoding="utf-8") as out:
            for start in range(0, pairs, block):
                out.write("".join(f"{rows[i % len(rows)]} {i}\n" for i in range(start, min(start + block, pairs))))
        for split, stored in (("valid", "valid"), ("test", "test_2016_flickr")):
            kept = (source / f"{stored}.{lang}").read_text(encoding="utf-8").splitlines()[:100]
            (directory / f"{split}.{lang}").write_text("".join(line + "\n" for line in kept), encoding="utf-8")


def _peak_rss_kb(pid: int) -> int:
    """``VmHWM``, the peak resident set size of a process, in kB (0 once it is gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) if match else 0


def run_to_first_step(command: list[str], env: dict[str, str], metrics: Path, log: Path) -> dict[str, float]:
    """Start `command`, stop it once `metrics` logs a training step; its seconds, peak RSS and padding share."""
    import psutil

    started = time.perf_counter()
    with open(log, "w") as log_file:
        # Started outside the repository: `python -m` puts the working directory first on sys.path, which would
        # import this checkout's package over the one of --checkout.
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT, cwd=log.parent)
        peak_kb, seconds, cpu_seconds = 0, None, 0.0
        while process.poll() is None:
            try:
                processes = [psutil.Process(process.pid)]
                processes += processes[0].children(recursive=True)
                peak_kb = max([peak_kb, *(_peak_rss_kb(p.pid) for p in processes)])
                cpu_seconds = sum(sum(p.cpu_times()[:2]) for p in processes)
            except psutil.NoSuchProcess:
                continue
            if metrics.is_file() and '"train_loss"' in metrics.read_text():
                seconds = time.perf_counter() - started
                break
            time.sleep(0.1)
        process.terminate()
        process.wait()
    text = log.read_text()
    if seconds is None:
        raise RuntimeError(f"{' '.join(command)} ended before its first step:\n{text[-3000:]}")
    padding = re.findall(r"([\d.]+)% padding", text)
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "peak_rss_mb": peak_kb / 1024,
        "padding": float(padding[-1]) / 100 if padding else None,
        **phases(seconds, metrics),
        "log": [line[:200] for line in text.splitlines() if re.match(r"\d\d:\d\d:\d\d ", line)],
    }


def median_run(runs: list[dict]) -> dict:
    """The run of median time to the first step (the slower of the middle two of an even count)."""
    return sorted(runs, key=lambda run: run["seconds"])[len(runs) // 2]


def phases(seconds: float, metrics: Path) -> dict[str, float]:
    """The time to the first step split into ``compile_s`` (the first step's compilation, as the run logged it in
    `metrics`) and ``data_s`` (the rest)."""
    compile_seconds = 0.0
    for line in metrics.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
        if "train_loss" in row:
            compile_seconds = float(row.get("compile_seconds", 0.0))
            break
    return {"compile_s": round(compile_seconds, 1), "data_s": round(seconds - compile_seconds, 1)}


def run_all(args: argparse.Namespace) -> dict[str, dict]:
    """Write the corpus and run the training command on it: cold, then the warm reruns (this checkout's, and
    interleaved with them those of ``--compare-checkout``); each run's figures by name (``cold``, ``warm-this-0``,
    ``warm-compared-0``, ...)."""
    with tempfile.TemporaryDirectory(prefix="benchmark-data-") as temporary:
        work = Path(temporary)
        (work / "corpus").mkdir()
        write_corpus(work / "corpus", args.pairs, args.multi30k)
        env = {**os.environ, "VANILLA_TRANSFORMER_CACHE": str(work / "cache"), "TOKENIZERS_PARALLELISM": "true"}
        env["TORCHINDUCTOR_CACHE_DIR"] = str(work / "torch-compiler")
        if args.checkout is not None:
            env["PYTHONPATH"] = str(args.checkout.resolve())
        sides = {"this": env}
        if args.compare_checkout is not None:
            sides["compared"] = {**env, "PYTHONPATH": str(args.compare_checkout.resolve())}
        plan = [("cold", "this")] + [(f"warm-{side}-{i}", side) for i in range(warm_runs(args)) for side in sides]
        runs = {}
        for name, side in plan:
            run_dir = work / f"run-{name}"
            command = [sys.executable, "-m", "vanilla_transformer", "train", *RUN_OPTIONS]
            command += ["--data-dir", str(work / "corpus"), "--output-dir", str(run_dir)]
            runs[name] = run_to_first_step(command, sides[side], RunLayout(run_dir).metrics, work / f"{name}.log")
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                (args.logs / f"{name}.log").write_text((work / f"{name}.log").read_text())
        runs["cold"]["disk_mb"] = {name: round(folder_bytes(work / name) / 2**20, 1) for name in ("corpus", "cache")}
    return runs


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under `folder`: the corpus as written, or the data cache (tokenizer, tokenized corpus,
    compile cache) as the runs left it."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


def warm_runs(args: argparse.Namespace) -> int:
    """The warm reruns of this checkout: ``--warm-runs``, none with ``--checkout`` (cold only)."""
    return args.warm_runs if args.checkout is None else 0


def summarize(args: argparse.Namespace, runs: dict[str, dict]) -> dict:
    """The results file's figures from the runs of `run_all`: the cold run, the median warm run, the comparison."""
    figures, warm = {"cold": runs["cold"]}, warm_runs(args)
    if warm:
        figures["warm"] = median_run([runs[f"warm-this-{i}"] for i in range(warm)])
    result = {
        "pairs": args.pairs,
        "prepare_s": round(figures["cold"]["seconds"], 1),
        "warm_start_s": round(figures["warm"]["seconds"], 1) if "warm" in figures else None,
        "peak_rss_mb": round(max(run["peak_rss_mb"] for run in figures.values())),
        "disk_mb": figures["cold"].get("disk_mb"),
        "padding": figures["cold"]["padding"],
        "phases": {name: {key: run[key] for key in ("data_s", "compile_s")} for name, run in figures.items()},
        "runs": figures,
        "checkout": str(args.checkout) if args.checkout else None,
        "warm_runs": warm,
        "warm_starts_s": [round(runs[f"warm-this-{i}"]["seconds"], 2) for i in range(warm)],
    }
    if args.compare_checkout is not None:
        compared = median_run([runs[f"warm-compared-{i}"] for i in range(args.warm_runs)])
        result["compare"] = {
            "checkout": str(args.compare_checkout),
            "warm_start_s": round(compared["seconds"], 1),
            "warm_starts_s": [round(runs[f"warm-compared-{i}"]["seconds"], 2) for i in range(args.warm_runs)],
            "phases": {key: compared[key] for key in ("data_s", "compile_s")},
            "this_vs_compared": round(figures["warm"]["seconds"] / compared["seconds"], 3),
        }
        print(f"COMPARE warm: this {result['warm_start_s']} s, {args.compare_checkout} {compared['seconds']:.1f} s")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__, threads=None)
    parser.add_argument("--pairs", type=int, required=True, help="training pairs of the synthetic corpus")
    parser.add_argument(
        "--multi30k",
        type=Path,
        default=options.MULTI30K,
        help="directory of the Multi30k files (default: $VANILLA_TRANSFORMER_DATA/multi30k)",
    )
    parser.add_argument("--checkout", type=Path, help="run the package of this directory instead, cold only")
    parser.add_argument("--warm-runs", type=int, default=3, help="warm reruns; the median is reported (default: 3)")
    parser.add_argument(
        "--compare-checkout",
        type=Path,
        help="also run the package of this directory warm, interleaved with this one's",
    )
    parser.add_argument("--logs", type=Path, help="copy the runs' logs into this directory")
    args = parser.parse_args(argv)
    options.check(args, {"--warm-runs": 1})
    if args.compare_checkout is not None and args.checkout is not None:
        raise SystemExit("--compare-checkout compares warm runs; --checkout runs cold only: pass one of them")
    if args.multi30k is None:
        raise SystemExit(f"pass --multi30k, or set {DATA_DIR_VARIABLE} to the folder holding multi30k/")
    if not (args.multi30k / "train.en").is_file():
        raise SystemExit(f"--multi30k={args.multi30k} has no train.en")
    record = Record(__file__, argv)
    runs = run_all(args)
    result = summarize(args, runs)
    print(
        f"DATA pairs={args.pairs} prepare_s={result['prepare_s']} warm_start_s={result['warm_start_s']} "
        f"peak_rss_mb={result['peak_rss_mb']} padding={result['padding']}"
    )
    print(
        "PHASES "
        + "; ".join(f"{name}: data_s={p['data_s']} compile_s={p['compile_s']}" for name, p in result["phases"].items())
    )
    record.write(result, args.output)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def data_table(results: Path) -> str:
    """The data pipeline's benchmark (scripts/benchmark_data.py): each run's time to its first step, and of it the
    first step's compilation where the run compiled (files written before the compile phase was measured apart
    have no ``phases``: their runs did not compile); the processor where the file names it."""
    rows = []
    for name, code in (
        ("data_benchmark_450000_before.json", "before (c355ac2, no cache: every run is cold)"),
        ("data_benchmark_450000.json", "data cache (uncompiled)"),
        ("data_benchmark_4500000.json", "data cache, compiled layer by layer with the compile cache"),
    ):
        run = read_json(results, name)
        phases = run.get("phases") or {}
        warm = run["prepare_s"] if run["warm_start_s"] is None else run["warm_start_s"]  # before: every run is cold
        rows.append([f"{run['pairs']:,}", code, yes(any(phase["compile_s"] for phase in phases.values())),
                     first_step(run["prepare_s"], phases.get("cold")), first_step(warm, phases.get("warm")),
                     f"{run['peak_rss_mb']:,} MB", processor(run), environment_load(run)])  # fmt: skip
    header = ["pairs", "code", "compiled", "cold: to first step", "warm: to first step", "peak RSS", "CPU", "load"]
    return table(header, ["r", "l", "l", "r", "r", "r", "l", "l"], rows)


def first_step(seconds: float, phase: dict | None) -> str:
    """A run's time to its first step, with the compilation's share where the run compiled."""
    text = f"{seconds:.1f} s" if seconds < 100 else f"{seconds:.0f} s"
    return f"{text} (compiling {phase['compile_s']:.1f} s)" if phase and phase["compile_s"] else text


def compile_phase(results: Path) -> str:
    """The compile phase at WMT14's size (data_benchmark_4500000.json): cold and warm, each split into data and
    compilation."""
    run = read_json(results, "data_benchmark_4500000.json")
    phases = run["phases"]
    return (
        f"{run['pairs']:,} pairs, on {processor(run)}: cold {run['prepare_s']:.0f} s to the first step, of which "
        f"{phases['cold']['compile_s']:.1f} s compiling; warm {run['warm_start_s']:.1f} s, of which "
        f"{phases['warm']['compile_s']:.1f} s compiling and {phases['warm']['data_s']:.1f} s start-up, data and model"
    )


def warm_starts(side: dict) -> str:
    """One side of a ``--compare-checkout`` run: its warm starts and their median."""
    values = ", ".join(f"{value:.1f}" for value in side["warm_starts_s"])
    return f"{values} s (median {side['warm_start_s']:.1f} s)"


def preload_trial(results: Path) -> str:
    """Issue 47's trial of importing the compiler beside the data (data_benchmark_4500000_preload.json): the warm
    starts of the code with it and of the code without it (``--compare-checkout``), interleaved, and their medians."""
    run = read_json(results, "data_benchmark_4500000_preload.json")
    return (
        f"warm starts with the compiler imported beside the data {warm_starts(run)}, without it "
        f"{warm_starts(run['compare'])}, on {processor(run)}"
    )


def isa_probe_trial(results: Path) -> str:
    """Issue 47's vector-ISA probe in a thread (data_benchmark_4500000_isa_probe.json, ``--compare-checkout`` of the
    code before it): the warm starts of each, interleaved, their medians and ratio."""
    run = read_json(results, "data_benchmark_4500000_isa_probe.json")
    return (
        f"warm starts with the probe in its thread {warm_starts(run)}, without it {warm_starts(run['compare'])}: "
        f"{run['compare']['this_vs_compared']:.2f}x the time, on {processor(run)}, load {environment_load(run)}"
    )


def wmt14_data_sizes(results: Path) -> str:
    """The data pipeline's sizes at WMT14's count (data_benchmark_4500000.json): memory, time, and the disk the corpus
    and the cache take where the file records them."""
    run = read_json(results, "data_benchmark_4500000.json")
    disk = run.get("disk_mb")
    sizes = (
        f"the corpus {disk['corpus']:,.0f} MB on disk and the data cache {disk['cache']:,.0f} MB"
        if disk
        else "the corpus's and the cache's disk sizes are not in that file (benchmark_data.py records them since)"
    )
    return (
        f"peak memory {run['peak_rss_mb']:,} MB, {run['prepare_s'] / 60:.0f} minutes to the first step on "
        f"{processor(run)} ({environment_load(run)} load) the first time, {run['warm_start_s']:.1f} s from the cache; "
        f"{sizes} ([{run['pairs']:,} pairs](results/data_benchmark_4500000.json)){projected_sizes(results, run)}"
    )


def projected_sizes(results: Path, run: dict) -> str:
    """The disk sizes projected from the synthetic corpus's bytes a line (Multi30k's short captions) to
    newstest2014's (`measure_lines.py`, newstest2014_lines.json), the tokenized cache in proportion; empty where the
    benchmark recorded no disk sizes."""
    disk = run.get("disk_mb")
    if not disk:
        return ""
    synthetic = disk["corpus"] * 2**20 / (2 * run["pairs"])
    reference = read_json(results, "newstest2014_lines.json")["bytes_per_line"]
    scale = reference / synthetic
    return (
        f". Its lines average {synthetic:.0f} bytes; newstest2014's average {reference:.0f} "
        f"([lines](results/newstest2014_lines.json)), so at WMT14's own sentence lengths expect about "
        f"{disk['corpus'] * scale:,.0f} MB and {disk['cache'] * scale:,.0f} MB (projected, in proportion to the bytes)"
    )


FIGURES = {
    "wmt14-data-sizes": wmt14_data_sizes,
    "compile-phase": compile_phase,
    "isa-probe-trial": isa_probe_trial,
    "preload-trial": preload_trial,
    "data-table": data_table,
}


if __name__ == "__main__":
    sys.exit(main())
