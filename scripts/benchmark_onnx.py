#!/usr/bin/env python
"""Serving speed on the CPU, side by side in one run: onnxruntime (fp32 and int8) against our PyTorch decoding and
CTranslate2 (fp32 and int8), greedy and beam 4, small and base models; and what int8 costs in BLEU (issue 37).

**Speed.** For each size, a model with random weights (the speed of a step does not depend on the weights) and a
byte-level BPE tokenizer trained on Multi30k's English and German (or on synthetic words without the data) are
exported to ONNX (``export_onnx``, with ``--quantize``) and to CTranslate2 (``export_ctranslate2``). The contestants
decode the same batches of token ids (tokenizing is outside the timing), each at every thread count of ``--threads``
(default 1, 2 and every core where there are more: CTranslate2 and PyTorch's greedy search can be faster on one
thread than on two where onnxruntime gains from two, so one count for all handicaps some engine):

* ``torch``: the package's one beam search on our incremental decoder (``translate_ids``), what ``generate()`` runs;
* ``ort_fp32``, ``ort_int8``: the same search on the onnxruntime step decoder (``load_onnx``);
* ``ct2_fp32``, ``ct2_int8``: CTranslate2's own search in C++, length penalty |Y|^0.6 (not GNMT's) and one length
  limit per batch (the batch's longest source + 50).

The PyTorch and onnxruntime searches are GNMT's, alpha 0.6, each sentence at most its input length + 50 tokens (with
random weights few hypotheses end early: the same work for every engine). Contestants are interleaved
(``bench.interleave``, ``--rounds`` per batch); a throughput is the generated tokens (``</s>`` included) of all
batches over the sum of their medians. Each engine is reported at its best thread count (``ENGINE_tokens_per_s``
and ``ENGINE_threads``; every count under ``by_threads``), the ratios are of the bests, and CTranslate2's CPU
backend is recorded (``ct2_cpu_backend``). ``ort_fp32`` must return ``torch``'s tokens on every batch at every
thread count (recorded).

**Where the time goes** (``--profile``): after the timed rounds, onnxruntime fp32 and int8 decode the batches once
more at their best thread count under cProfile (`inside_onnxruntime`): the share of the time inside onnxruntime's
runs, and the throughput the search would reach were everything around the runs free, against CTranslate2 fp32's.

**Quality** (``--quality-model``): a trained model directory translates ``--quality-source`` with the paper's search
in PyTorch, onnxruntime fp32 and int8, and CTranslate2 fp32 and int8 (``translate_ctranslate2``: the paper's search
run by CTranslate2's, unlike the timed ``ct2_*`` contestants above); BLEU, chrF and exact match against
``--quality-reference``, and how many translations equal PyTorch's.

**The paper's stop rule on CTranslate2** (``--trained NAME MODEL SOURCE REFERENCE``, repeatable; instead of the
sizes): ``translate --ctranslate2``'s search (``search_ctranslate2``) against CTranslate2's own ``translate_batch``,
the same beam, alpha (the model's) and batches, on trained models' test files, fp32 and int8, each ``--threads``,
greedy and beam 4 (``bench.serving.stop_rule_workload``): tokens per second, decoder steps, translations equal to
PyTorch's and BLEU; written to ``docs/results/ct2_stop_rule.json``::

    CT2_USE_MKL=1 python scripts/benchmark_onnx.py --threads 1 2 --rounds 3 \\
        --trained numbers runs/numbers/model runs/numbers/test.en runs/numbers/test.de \\
        --trained multi30k runs/multi30k/model DATA/multi30k/test_2016_flickr.en DATA/multi30k/test_2016_flickr.de \\
        --output docs/results/ct2_stop_rule.json

The results file records each export's and load's seconds (and onnx's and onnxscript's versions beside
``bench.Record``'s, and CTranslate2's CPU backend: its default for the machine, or MKL where ``CT2_USE_MKL=1`` is set,
as docs/serving.md advises where oneDNN's int8 kernels lose BLEU). Run it alone on the machine::

    python scripts/benchmark_onnx.py --output docs/results/onnx_serving.json \\
        --quality-model runs/multi30k/model \\
        --quality-source ../shared/data/multi30k/test_2016_flickr.en \\
        --quality-reference ../shared/data/multi30k/test_2016_flickr.de
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench import Record, interleave, model_config, options
from bench.figures import environment_load, minutes, read_json, table, versions
from bench.serving import (
    LENGTH_PENALTY,
    MAX_LENGTH_OFFSET,
    bench_stop_rule,
    ct2_search,
    ct2_stop_rule_environment,
    ct2_stop_rule_table,
    ct2_translators,
    hypotheses,
    inside_onnxruntime,
    load_onnx,
    translate,
    translate_ctranslate2,
    translate_ids,
)

from vanilla_transformer.data import CorpusSpec, load_corpus
from vanilla_transformer.export.onnx import export_onnx
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.serving.with_ctranslate2 import cpu_backend
from vanilla_transformer.tokenization import train_tokenizer

CONTESTANTS = ("torch", "ort_fp32", "ort_int8", "ct2_fp32", "ct2_int8")


def default_threads() -> list[int]:
    """1 and 2 threads, and every core where the machine has more."""
    cores = os.cpu_count() or 1
    return [1, 2] + ([cores] if cores > 2 else [])


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = options.parser(__doc__, threads=None, output="results file to write (JSON)")
    parser.add_argument("--sizes", nargs="+", default=["small", "base"], help="model presets (default: small base)")
    parser.add_argument("--num-beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument(
        "--threads",
        nargs="+",
        type=int,
        default=default_threads(),
        help="thread counts every engine runs at, each engine reported at its best (default: %(default)s)",
    )
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=6, help="batches per size and search (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="times each batch is decoded (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-pairs", type=int, default=20000, help="Multi30k sentences the tokenizer learns from")
    parser.add_argument("--data-dir", default=options.MULTI30K, help="Multi30k (default: %(default)s)")
    parser.add_argument("--quality-model", help="a trained model directory, for BLEU of int8 against fp32")
    parser.add_argument("--quality-source", type=Path)
    parser.add_argument("--quality-reference", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="after the timed rounds, decode the batches once more with onnxruntime (fp32, int8) at its best thread "
        "count under cProfile: the share of the time inside onnxruntime's runs, and the throughput were the search "
        "around them free",
    )
    parser.add_argument(
        "--trained",
        nargs=4,
        action="append",
        metavar=("NAME", "MODEL", "SOURCE", "REFERENCE"),
        help="instead of the sizes: the paper's stop rule on CTranslate2 against CTranslate2's own on this trained "
        "model's test set (fp32, int8, each --threads, greedy and beam 4; repeatable)",
    )
    args = parser.parse_args(argv)
    if args.quality_model and not (args.quality_source and args.quality_reference):
        parser.error("--quality-model needs --quality-source and --quality-reference")
    return args


def sentences(args: argparse.Namespace) -> tuple[list[str], str]:
    """English source sentences and the tokenizer's training text: Multi30k, or synthetic words without it."""
    data = Path(args.data_dir) if args.data_dir else None
    if data is not None and (data / "train.en").is_file():
        pairs = load_corpus(CorpusSpec("text", data_dir=str(data)), "train")[: args.max_pairs]
        return [source for source, _ in pairs], f"Multi30k en-de train, first {len(pairs)} pairs"
    rng = np.random.default_rng(args.seed)
    words = [f"w{i}" for i in range(3000)]
    lengths = np.clip(np.rint(rng.lognormal(2.6, 0.3, args.max_pairs)), 2, 60).astype(int)
    return [" ".join(rng.choice(words, n)) for n in lengths], "synthetic sentences of log-normal lengths"


def engines(model, tokenizer, folder: Path, threads: Sequence[int]) -> tuple[dict[str, Any], dict[str, float]]:
    """Every contestant's model at each thread count, named ``ENGINE@THREADS`` (ours, its ONNX export in fp32 and
    int8, its CTranslate2 exports in fp32 and int8, `ct2_translators`), and the seconds each export and load took
    (the loads at the first thread count)."""
    started = time.perf_counter()
    export_onnx(model, folder / "onnx", tokenizer=tokenizer, quantize=True)
    seconds = {"export_onnx": time.perf_counter() - started}
    loaded: dict[str, Any] = {}
    for count in threads:
        loaded[contestant("torch", count)] = model
        for name, quantized in (("ort_fp32", False), ("ort_int8", True)):
            started = time.perf_counter()
            loaded[contestant(name, count)] = load_onnx(folder / "onnx", quantized=quantized, threads=count)
            seconds.setdefault(f"load_{name}", time.perf_counter() - started)
        quantizations = {"ct2_fp32": "float32", "ct2_int8": "int8"}
        translators, ct2_seconds = ct2_translators(
            model, folder / f"threads{count}", quantizations, threads=count, tokenizer=tokenizer
        )
        loaded |= {contestant(name, count): translator for name, translator in translators.items()}
        seconds = ct2_seconds | seconds
    return loaded, {name: round(value, 2) for name, value in seconds.items()}


def contestant(engine: str, threads: int) -> str:
    """``ort_fp32@2``: an engine at a thread count."""
    return f"{engine}@{threads}"


def decoders(loaded: dict[str, Any], tokenizer, beams: int) -> dict[str, Callable[[dict], list[list[int]]]]:
    """Each contestant (``ENGINE@THREADS``) as batch -> token ids of each translation, from the first generated token
    to ``</s>``. PyTorch's threads are the process's: set before each of its calls."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    limit = lambda longest: longest + MAX_LENGTH_OFFSET  # noqa: E731  CTranslate2's: one length limit per batch

    def run(name: str) -> Callable[[dict], list[list[int]]]:
        engine, threads = name.split("@")
        if engine.startswith("ct2"):  # CTranslate2's own search: the penalty |Y|^alpha
            return ct2_search(loaded[name], tokens, beams, limit, length_penalty=LENGTH_PENALTY)

        def decode(batch: dict) -> list[list[int]]:
            if engine == "torch":
                torch.set_num_threads(int(threads))
            return hypotheses(
                translate_ids(loaded[name], batch["input_ids"], batch["attention_mask"], num_beams=beams)
            )

        return decode

    return {name: run(name) for name in loaded}


def search_row(timings, names: list[str], batches: int, threads: Sequence[int]) -> dict[str, Any]:
    """One search's figures: every engine's tokens per second at each thread count (``by_threads``), and at its best
    (``ENGINE_tokens_per_s``, with ``ENGINE_threads``), the ratios of the bests, and whether onnxruntime fp32 returned
    PyTorch's tokens on every batch at every thread count."""
    outputs = {name: timings.returned[name][-batches:] for name in names}  # the last round's
    by_threads: dict[str, dict[str, float]] = {}
    row: dict[str, Any] = {}
    for engine in CONTESTANTS:
        figures = {}
        for count in threads:
            name = contestant(engine, count)
            generated = sum(len(ids) for batch in outputs[name] for ids in batch)
            figures[str(count)] = round(generated / timings.total(name), 1)
        by_threads[engine] = figures
        best = max(figures, key=figures.__getitem__)
        row[f"{engine}_tokens_per_s"], row[f"{engine}_threads"] = figures[best], int(best)
    for engine in CONTESTANTS[1:]:
        row[f"{engine}_vs_torch"] = round(row[f"{engine}_tokens_per_s"] / row["torch_tokens_per_s"], 3)
    row["ort_fp32_vs_ct2_fp32"] = round(row["ort_fp32_tokens_per_s"] / row["ct2_fp32_tokens_per_s"], 3)
    reference = outputs[contestant("torch", threads[0])]
    equal = [
        a == b for count in threads for a, b in zip(outputs[contestant("ort_fp32", count)], reference, strict=True)
    ]
    row["ort_fp32_batches_equal_torch"] = f"{sum(equal)}/{len(equal)}"
    row["by_threads"] = by_threads
    return row


def bench_size(size: str, texts: list[str], tokenizer, args: argparse.Namespace) -> dict[str, Any]:
    """Tokens per second of every contestant, for each search, on a random model of `size`."""
    torch.manual_seed(args.seed)
    model = VanillaTransformerForConditionalGeneration(model_config(size, len(tokenizer))).eval()
    rng = np.random.default_rng(args.seed + 1)
    picks = [rng.choice(len(texts), args.batch_size, replace=False) for _ in range(args.batches)]
    batches = [tokenizer([texts[i] for i in pick], padding=True, return_tensors="pt") for pick in picks]
    result: dict[str, Any] = {"parameters": sum(p.numel() for p in model.parameters())}
    with tempfile.TemporaryDirectory(prefix="benchmark-onnx-") as folder:
        loaded, result["seconds"] = engines(model, tokenizer, Path(folder), args.threads)
        for beams in args.num_beams:
            run = decoders(loaded, tokenizer, beams)
            timings = interleave(run, batches, repeats=args.rounds)
            row = search_row(timings, list(run), len(batches), args.threads)
            if args.profile:
                row["inside_onnxruntime"] = {
                    engine: inside_onnxruntime(
                        run[contestant(engine, row[f"{engine}_threads"])], batches, row["ct2_fp32_tokens_per_s"]
                    )
                    for engine in ("ort_fp32", "ort_int8")
                }
            result["greedy" if beams == 1 else f"beam{beams}"] = row
    return result


def bench_quality(args: argparse.Namespace) -> dict[str, Any]:
    """BLEU, chrF and exact match of every engine on a trained model's test set; int8's cost against fp32."""
    from vanilla_transformer.data import read_lines
    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.training import score_translations

    sources, references = read_lines(args.quality_source), read_lines(args.quality_reference)
    model, tokenizer = load_model_dir(args.quality_model)
    search = {"num_beams": 4, "length_penalty": LENGTH_PENALTY, "max_length_offset": MAX_LENGTH_OFFSET}
    with tempfile.TemporaryDirectory(prefix="benchmark-onnx-quality-") as folder:
        loaded, _ = engines(model, tokenizer, Path(folder), args.threads[:1])
        loaded = {name.split("@")[0]: engine for name, engine in loaded.items()}
        translations = {name: translate(loaded[name], tokenizer, sources, **search) for name in CONTESTANTS[:3]}
        ct2 = {"beam_size": 4, "length_penalty": LENGTH_PENALTY, "max_length_offset": MAX_LENGTH_OFFSET}
        for name in CONTESTANTS[3:]:
            translations[name] = translate_ctranslate2(loaded[name], tokenizer, sources, **ct2)
    result: dict[str, Any] = {
        "model": str(args.quality_model),
        "source": str(args.quality_source),
        "reference": str(args.quality_reference),
        "sentences": len(sources),
    }
    for name, texts in translations.items():
        scores = score_translations(texts, references)
        same = sum(a == b for a, b in zip(texts, translations["torch"], strict=True))
        result[name] = {**scores, "equal_to_torch": same}
    for engine in ("ort", "ct2"):
        result[f"{engine}_int8_bleu_minus_fp32"] = round(
            result[f"{engine}_int8"]["bleu"] - result[f"{engine}_fp32"]["bleu"], 2
        )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    record = Record(__file__, argv)
    torch.set_num_threads(args.threads[0])
    if args.trained:
        record.write(bench_stop_rule(args), args.output)
        return 0
    texts, description = sentences(args)
    tokenizer = train_tokenizer(texts, vocab_size=args.vocab_size)
    report: dict[str, Any] = {
        "what": "generated tokens per second (</s> included) of each engine on the same batches of token ids, "
        "interleaved; random weights; torch and ort: the paper's search (GNMT alpha 0.6, input length + 50); "
        "ct2: CTranslate2's (|Y|^0.6, the batch's longest source + 50)",
        "threads": args.threads,
        "best": "each engine at the thread count of its highest throughput (ENGINE_threads); by_threads: all",
        "ct2_use_mkl": os.environ.get("CT2_USE_MKL"),
        "ct2_cpu_backend": cpu_backend(),
        "batch_size": args.batch_size,
        "batches": args.batches,
        "rounds": args.rounds,
        "data": f"{description}; byte-level BPE of {len(tokenizer)} tokens",
        "sizes": {},
    }
    for size in args.sizes:
        report["sizes"][size] = bench_size(size, texts, tokenizer, args)
        print(size, json.dumps(report["sizes"][size], indent=1), flush=True)
    if args.quality_model:
        report["quality"] = bench_quality(args)
        print("quality", json.dumps(report["quality"], indent=1), flush=True)
    report["export_versions"] = {name: importlib.metadata.version(name) for name in ("onnx", "onnxscript")}
    record.write(report, args.output)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


ONNX_SERVING = "onnx_serving.json"
ONNX_COMMAND = (
    "python scripts/benchmark_onnx.py --output docs/results/onnx_serving.json "
    "--quality-model MODEL --quality-source SOURCE --quality-reference REFERENCE"
)
ENGINES = [("torch", "PyTorch"), ("ort_fp32", "onnxruntime fp32"), ("ort_int8", "onnxruntime int8")]
ENGINES += [("ct2_fp32", "CTranslate2 fp32"), ("ct2_int8", "CTranslate2 int8")]


def best(row: dict[str, Any], engine: str) -> str:
    """An engine's tokens per second, with the thread count of its best."""
    return f"{row[f'{engine}_tokens_per_s']:,.0f} ({row[f'{engine}_threads']}t)"


def onnx_serving_table(results: Path) -> str:
    """Tokens per second of each engine on the CPU (scripts/benchmark_onnx.py), each at its best thread count ("(2t)")
    where the run tried several, or, before its first run, the command that measures them."""
    if not (results / ONNX_SERVING).is_file():
        return f"Not measured yet: `{ONNX_COMMAND}`, run alone, writes the results file this table is rendered from."
    run = read_json(results, ONNX_SERVING)
    rows = []
    for size, figures in run["sizes"].items():
        for search in [key for key in figures if key == "greedy" or key.startswith("beam")]:
            row = figures[search]
            rows.append(
                [f"{size} ({figures['parameters'] / 1e6:.0f}M)", search.replace("beam", "beam ")]
                + [best(row, name) for name, _ in ENGINES]
                + [f"{row['ort_fp32_vs_ct2_fp32']:.2f}", row["ort_fp32_batches_equal_torch"]]
            )
    header = ["model", "search", *[label for _, label in ENGINES], "ort fp32 / ct2 fp32", "ort fp32 = PyTorch"]
    return table(header, ["l", "l", "r", "r", "r", "r", "r", "r", "r"], rows)


def onnx_serving_quality(results: Path) -> str:
    """BLEU of each engine on a trained model's test set, and int8's cost (scripts/benchmark_onnx.py)."""
    if not (results / ONNX_SERVING).is_file() or "quality" not in read_json(results, ONNX_SERVING):
        return "Not measured yet (the benchmark's `--quality-model`)."
    quality = read_json(results, ONNX_SERVING)["quality"]
    rows = [
        [
            label,
            f"{quality[name]['bleu']:.2f}",
            f"{quality[name]['chrf']:.2f}",
            f"{quality[name]['exact_match']:.1f}%",
            f"{quality[name]['equal_to_torch']}/{quality['sentences']}",
        ]
        for name, label in ENGINES
    ]
    return table(["engine", "BLEU", "chrF", "exact match", "same text as PyTorch"], ["l", "r", "r", "r", "r"], rows)


ONNX_PROFILE = "onnx_search_profile.json"
PROFILE_COMMAND = (
    "python scripts/benchmark_onnx.py --num-beams 4 --profile --output docs/results/onnx_search_profile.json"
)


def onnx_search_profile(results: Path) -> str:
    """Where onnxruntime's beam search spends its time (``--profile``): the share inside onnxruntime's runs, and the
    throughput were the search around them free, against CTranslate2 fp32 at its best."""
    if not (results / ONNX_PROFILE).is_file():
        return (
            f"Not measured yet: `{PROFILE_COMMAND}`, run alone, writes the results file this table is rendered from."
        )
    run = read_json(results, ONNX_PROFILE)
    rows = []
    for size, figures in run["sizes"].items():
        for search in [key for key in figures if key.startswith("beam")]:
            row = figures[search]
            for engine, label in ENGINES[1:3]:
                split = row["inside_onnxruntime"][engine]
                rows.append(
                    [
                        f"{size} ({figures['parameters'] / 1e6:.0f}M)",
                        search.replace("beam", "beam "),
                        label,
                        best(row, engine),
                        f"{100 * split['share_inside']:.0f}%",
                        f"{split['runs_only_tokens_per_s']:,.0f}",
                        best(row, "ct2_fp32"),
                        f"{split['runs_only_vs_ct2_fp32']:.2f}",
                    ]
                )
    header = ["model", "search", "engine", "tokens/s", "time inside onnxruntime's runs", "runs only: tokens/s"]
    header += ["CTranslate2 fp32", "runs only / CTranslate2 fp32"]
    return table(header, ["l", "l", "l", "r", "r", "r", "r", "r"], rows)


def onnx_serving_environment(results: Path, name: str = ONNX_SERVING) -> str:
    """Where and how the serving benchmark ran (its results file `name`)."""
    if not (results / name).is_file():
        return "not measured yet"
    run = read_json(results, name)
    quality = run.get("quality")
    backend = f", CTranslate2's {run['ct2_cpu_backend']} backend" if "ct2_cpu_backend" in run else ""
    model = (
        f"; BLEU on `{Path(quality['model']).name}`, {quality['sentences']:,} sentences of `{Path(quality['source']).name}`"
        if quality
        else ""
    )
    return (
        f"{run['processor']}, {threads(run)}, batches of {run['batch_size']} sentences "
        f"({run['batches']} batches, {run['rounds']} interleaved rounds; {run['data']}){model}; "
        f"load average {environment_load(run)}, {minutes(run['wall_seconds'])}; "
        f"{versions(run, 'torch', 'onnxruntime', 'ctranslate2')}"
        f" (CT2_USE_MKL={run['ct2_use_mkl'] or 'unset'}{backend})"
    )


TARGET = 1.5
"""Issue 44's target: onnxruntime fp32 at beam 4 at least this many times CTranslate2 fp32, each at its best."""


def onnx_search_ceiling(results: Path) -> str:
    """What the profile says of the target, per size: how fast the graphs alone are against CTranslate2 fp32, and
    what the target then asks of the graphs or of the time around them; int8's gain over fp32 (timed rounds)."""
    if not (results / ONNX_PROFILE).is_file():
        return "not measured yet"
    parts, gains = [], []
    for size, figures in read_json(results, ONNX_PROFILE)["sizes"].items():
        row = figures["beam4"]
        split = row["inside_onnxruntime"]["ort_fp32"]
        ceiling = split["runs_only_vs_ct2_fp32"]
        if ceiling < TARGET:
            ask = (
                f"out of reach by work on the search: the graphs would have to run {TARGET / ceiling:.2f} times faster"
            )
        else:  # at the target the runs' time stays, and the whole time shrinks to tokens / (TARGET x CTranslate2's)
            ask = (
                f"so the target leaves the search around the runs {100 * (1 - TARGET / ceiling):.0f}% of the time, "
                f"where it now takes {100 * (1 - split['share_inside']):.0f}%"
            )
        parts.append(f"at the {size} size the graphs alone reach {ceiling:.2f} times CTranslate2 fp32, {ask}")
        gains.append(f"{row['ort_int8_tokens_per_s'] / row['ort_fp32_tokens_per_s']:.2f} at {size}")
    return "; ".join(parts) + f". onnxruntime int8 over fp32 in the timed rounds: {', '.join(gains)}"


def onnx_search_profile_environment(results: Path) -> str:
    """Where and how the profiled run (`onnx_search_profile`) ran."""
    return onnx_serving_environment(results, ONNX_PROFILE)


def threads(run: dict[str, Any]) -> str:
    """The thread counts tried, each engine at its best."""
    counts = ", ".join(str(count) for count in run["threads"])
    return f"each engine at the best of {counts} threads (Nt: at N threads)"


FIGURES = {
    "ct2-stop-rule-table": ct2_stop_rule_table,
    "ct2-stop-rule-environment": ct2_stop_rule_environment,
    "onnx-serving-table": onnx_serving_table,
    "onnx-serving-quality": onnx_serving_quality,
    "onnx-serving-environment": onnx_serving_environment,
    "onnx-search-profile": onnx_search_profile,
    "onnx-search-profile-environment": onnx_search_profile_environment,
    "onnx-search-ceiling": onnx_search_ceiling,
}


if __name__ == "__main__":
    raise SystemExit(main())
