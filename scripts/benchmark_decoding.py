#!/usr/bin/env python
"""Decoding speed, side by side in one run: every engine on the same batches, and what each costs in BLEU.

**Speed** (``--sizes``). For each size, a model with random weights (a step's speed does not depend on them, and
few hypotheses end early: the same work for every engine) decodes the same batches of Multi30k's English sources
(synthetic words without the data) in a byte-level BPE trained on them, tokenized before the timing. Every
contestant runs at every thread count of ``--threads``, interleaved (`bench.interleave`, ``--rounds`` per batch),
and is reported at its best (``NAME_tokens_per_s``, ``NAME_threads``; ``by_threads``: all), so that none is held to
another's best setting. A throughput is the generated tokens (``</s>`` included) of all batches over the sum of
their medians. The contestants (``--contestants``, `ENGINES`):

* ``torch`` (``torch_bf16``: the model cast to bfloat16): the package's one beam search on our incremental decoder
  (``translate_ids``, what ``translate`` runs): GNMT's penalty, alpha 0.6, each sentence at most its input + 50;
* ``ort_fp32``, ``ort_int8``: the same search on the onnxruntime step decoder (``export_onnx``, ``load_onnx``);
  ``ort_fp32`` must return ``torch``'s tokens on every batch (``ort_fp32_batches_equal_torch``);
* ``generate``, ``marian`` (and ``_bf16``): transformers' ``generate()`` on our model and on MarianMT built as the
  same network with the same weights (`bench.marian_twin`), with the same options (transformers' search, one limit
  per batch: its longest source + 50); both must return the same tokens (``generate_batches_equal_marian``);
* ``ct2_fp32``, ``ct2_int8`` (``ct2_bf16``, ``ct2_int8_bf16`` on CUDA): CTranslate2's own search in C++, its
  penalty |Y|^0.6 and one limit per batch.

``--profile``: onnxruntime's contestants decode the batches once more under cProfile (`inside_onnxruntime`).

**Quality** (``--quality-model``): a trained model translates ``--quality-source`` with the paper's search (beam 4)
on every contestant that runs it (PyTorch, onnxruntime, and CTranslate2 through ``translate_ctranslate2``), the
whole file per call, ``--rounds`` interleaved calls at the first thread count: tokens per second (the output tokens
of ``torch``'s translations, the same work for all), BLEU, chrF, exact match, and the translations equal to PyTorch's.

**The paper's stop rule on CTranslate2** (``--trained``, instead of the sizes): `bench.serving.stop_rule_workload`.

Run each alone on the machine; the results file records the command, load, versions and CTranslate2's backend::

    python scripts/benchmark_decoding.py --output docs/results/decoding_cpu.json --quality-model MODEL
    python scripts/benchmark_decoding.py --num-beams 4 --profile --output docs/results/onnx_search_profile.json
    python scripts/benchmark_decoding.py --device cuda --contestants generate_bf16 marian_bf16 torch_bf16 \\
        --sizes base --threads 1 --batch-size 128 --warmup 2 --output decoding_cuda.json
    CT2_USE_MKL=1 python scripts/benchmark_decoding.py --threads 1 2 --rounds 3 --output docs/results/ct2_stop_rule.json \\
        --trained NAME MODEL SOURCE REFERENCE
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench import Record, interleave, marian_twin, model_config, options, source_sentences
from bench.figures import environment_load, minutes, processor, read_json, table, versions, yes
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

from vanilla_transformer.data import read_lines
from vanilla_transformer.export.onnx import export_onnx
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.serving.with_ctranslate2 import cpu_backend
from vanilla_transformer.tokenization import train_tokenizer

ENGINES: dict[str, tuple[str, Any]] = {  # contestant -> (engine, its dtype or quantization)
    "torch": ("torch", torch.float32), "torch_bf16": ("torch", torch.bfloat16),
    "generate": ("generate", torch.float32), "generate_bf16": ("generate", torch.bfloat16),
    "marian": ("marian", torch.float32), "marian_bf16": ("marian", torch.bfloat16),
    "ort_fp32": ("ort", False), "ort_int8": ("ort", True),
    "ct2_fp32": ("ct2", "float32"), "ct2_int8": ("ct2", "int8"),
    "ct2_bf16": ("ct2", "bfloat16"), "ct2_int8_bf16": ("ct2", "int8_bfloat16"),
}  # fmt: skip
CPU_CONTESTANTS = ["torch", "torch_bf16", "ort_fp32", "ort_int8", "ct2_fp32", "ct2_int8", "generate", "marian"]
PAIRS = {("generate", "marian"): True, ("generate_bf16", "marian_bf16"): True, ("ort_fp32", "torch"): True,
         ("ort_fp32", "ct2_fp32"): False, ("torch_bf16", "torch"): False}  # fmt: skip
"""(a, b): ``a_vs_b``, a's throughput over b's, where both ran; True: a must also return b's tokens
(``a_batches_equal_b``)."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = options.parser(__doc__, threads=None, output="results file to write (JSON)")
    parser.add_argument("--sizes", nargs="+", default=["small", "base"], help="model presets (default: small base)")
    parser.add_argument("--contestants", nargs="+", choices=ENGINES, default=CPU_CONTESTANTS, metavar="NAME",
                        help=f"of {', '.join(ENGINES)} (default: %(default)s)")  # fmt: skip
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    cores = os.cpu_count() or 1
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2] + ([cores] if cores > 2 else []),
                        help="thread counts every contestant runs at, each reported at its best (default: %(default)s)")  # fmt: skip
    parser.add_argument("--num-beams", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--batches", type=int, default=4, help="batches per size and search (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="timed calls per batch (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls of each contestant (default: 1)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="the BPE's, and the model's even where the BPE "
                        "learns fewer tokens (default: %(default)s)")  # fmt: skip
    parser.add_argument("--max-pairs", type=int, default=20000, help="Multi30k sentences the tokenizer learns from")
    parser.add_argument("--data-dir", default=options.MULTI30K, help="Multi30k (default: %(default)s)")
    parser.add_argument("--quality-model", help="a trained model directory: every engine's speed and BLEU on it")
    source, reference = options.multi30k_test()
    parser.add_argument("--quality-source", type=Path, default=source, help="(default: Multi30k's 2016 test)")
    parser.add_argument("--quality-reference", type=Path, default=reference, help="(default: Multi30k's 2016 test)")
    parser.add_argument("--profile", action="store_true", help="split onnxruntime's time under cProfile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trained", nargs=4, action="append", metavar=("NAME", "MODEL", "SOURCE", "REFERENCE"),
                        help="instead of the sizes: the paper's stop rule on CTranslate2 against CTranslate2's own "
                        "on this trained model's test set (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    options.check(args, {"--batch-size": 1, "--batches": 1, "--rounds": 1, "--warmup": 0, "--vocab-size": 260},
                  ("--quality-source", "--quality-reference") if args.quality_model else ())  # fmt: skip
    if args.device == "cuda" and "ort" in {ENGINES[name][0] for name in args.contestants}:
        raise SystemExit("--contestants: onnxruntime's (ort_*) run on the CPU only; leave them out with --device cuda")
    for engine, package, extra in (("ct2", "ctranslate2", "serve"), ("ort", "onnxruntime", "onnx")):
        if engine in {ENGINES[name][0] for name in args.contestants} and importlib.util.find_spec(package) is None:
            raise SystemExit(f"--contestants: {package} is not installed (pip install 'vanilla-transformer[{extra}]')")
    return args


def contestant(name: str, threads: int) -> str:
    """``ort_fp32@2``: a contestant at a thread count."""
    return f"{name}@{threads}"


def engines(
    model, tokenizer, folder: Path, names: list[str], device: str, threads: Sequence[int]
) -> tuple[dict, dict]:
    """Every contestant of `names` at each of `threads` (``NAME@THREADS``): our model (cast for bf16), its
    MarianMT twin, its ONNX export in fp32 and int8, its CTranslate2 exports (`ct2_translators`; on CUDA one that
    cannot load is left out); and the seconds each export and load took (the loads at the first thread count)."""
    seconds, loaded, models = {}, {}, {}
    for name in names:
        engine, dtype = ENGINES[name]
        if engine in ("torch", "generate", "marian"):
            models[name] = (marian_twin(model) if engine == "marian" else copy.deepcopy(model)).eval().to(dtype)
    if any(ENGINES[name][0] == "ort" for name in names):
        started = time.perf_counter()
        export_onnx(model, folder / "onnx", tokenizer=tokenizer, quantize=True)
        seconds["export_onnx"] = time.perf_counter() - started
    for count in threads:
        loaded |= {contestant(name, count): engine for name, engine in models.items()}
        for name in [name for name in names if ENGINES[name][0] == "ort"]:
            started = time.perf_counter()
            loaded[contestant(name, count)] = load_onnx(folder / "onnx", quantized=ENGINES[name][1], threads=count)
            seconds.setdefault(f"load_{name}", time.perf_counter() - started)
        quantizations = {name: ENGINES[name][1] for name in names if ENGINES[name][0] == "ct2"}
        if quantizations:
            translators, ct2_seconds = ct2_translators(
                model, folder / f"threads{count}", quantizations, device, threads=count, tokenizer=tokenizer
            )
            loaded |= {contestant(name, count): translator for name, translator in translators.items()}
            seconds = ct2_seconds | seconds
    return loaded, {name: round(value, 2) for name, value in seconds.items()}


def decoder(name: str, engine, beams: int, tokens: list[str]) -> Callable[[dict], list[list[int]]]:
    """Contestant ``NAME@THREADS`` as a batch of token ids -> the token ids of each translation, from the first
    generated token to ``</s>``. Its threads are set before each of its calls (CTranslate2's: at its load)."""
    kind, threads = ENGINES[name.split("@")[0]][0], int(name.split("@")[1])
    if kind == "ct2":  # CTranslate2's own search: the penalty |Y|^alpha, one length limit per batch
        return ct2_search(engine, tokens, beams, lambda longest: longest + MAX_LENGTH_OFFSET,
                          length_penalty=LENGTH_PENALTY)  # fmt: skip

    @torch.inference_mode()
    def decode(batch: dict) -> list[list[int]]:
        torch.set_num_threads(threads)
        if kind in ("generate", "marian"):
            limit = int(batch["attention_mask"].sum(1).max()) + MAX_LENGTH_OFFSET
            return hypotheses(engine.generate(**batch, max_new_tokens=limit, num_beams=beams, do_sample=False))
        return hypotheses(translate_ids(engine, batch["input_ids"], batch["attention_mask"], num_beams=beams))

    return decode


def search_row(timings, names: list[str], batches: int, threads: Sequence[int]) -> dict[str, Any]:
    """One search's figures: each contestant's tokens per second at every thread count (``by_threads``) and at its
    best (``NAME_tokens_per_s``, ``NAME_threads``), the ratios of `PAIRS` and the same-token checks (on every batch,
    at every thread count, against the other's tokens at the first)."""
    outputs = {name: timings.returned[name][-batches:] for name in timings.returned}  # the last round's
    row: dict[str, Any] = {"by_threads": {}}
    for name in names:
        figures = {}
        for count in threads:
            generated = sum(len(ids) for batch in outputs[contestant(name, count)] for ids in batch)
            figures[str(count)] = round(generated / timings.total(contestant(name, count)), 1)
        best = max(figures, key=figures.__getitem__)
        row["by_threads"][name] = figures
        row[f"{name}_tokens_per_s"], row[f"{name}_threads"] = figures[best], int(best)
    for (a, b), same in PAIRS.items():
        if a in names and b in names:
            row[f"{a}_vs_{b}"] = round(row[f"{a}_tokens_per_s"] / row[f"{b}_tokens_per_s"], 3)
            if same:
                theirs = outputs[contestant(b, threads[0])]
                equal = [x == y for n in threads for x, y in zip(outputs[contestant(a, n)], theirs, strict=True)]
                row[f"{a}_batches_equal_{b}"] = f"{sum(equal)}/{len(equal)}"
    return row


def bench_size(size: str, texts: list[str], tokenizer, args: argparse.Namespace) -> dict[str, Any]:
    """Tokens per second of every contestant, for each search, on a random model of `size`."""
    torch.manual_seed(args.seed)
    vocabulary = max(len(tokenizer), args.vocab_size)  # the output layer's size; unused ids as CTranslate2 names them
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    tokens += [f"<unused{i}>" for i in range(len(tokens), vocabulary)]
    model = VanillaTransformerForConditionalGeneration(model_config(size, vocabulary)).eval().to(args.device)
    rng = np.random.default_rng(args.seed + 1)
    picks = [rng.choice(len(texts), args.batch_size, replace=False) for _ in range(args.batches)]
    batches = [
        tokenizer([texts[i] for i in pick], padding=True, return_tensors="pt").to(args.device) for pick in picks
    ]
    result: dict[str, Any] = {"parameters": sum(p.numel() for p in model.parameters())}
    with tempfile.TemporaryDirectory(prefix="benchmark-decoding-") as folder:
        loaded, result["seconds"] = engines(
            model, tokenizer, Path(folder), args.contestants, args.device, args.threads
        )
        names = [name for name in args.contestants if contestant(name, args.threads[0]) in loaded]
        for beams in args.num_beams:
            run = {name: decoder(name, engine, beams, tokens) for name, engine in loaded.items()}
            timings = interleave(run, batches, repeats=args.rounds, warmup=args.warmup, device=args.device)
            row = search_row(timings, names, len(batches), args.threads)
            if args.profile and "ct2_fp32" in names:
                for name in [name for name in names if ENGINES[name][0] == "ort"]:
                    decode = run[contestant(name, row[f"{name}_threads"])]
                    row.setdefault("inside_onnxruntime", {})[name] = inside_onnxruntime(
                        decode, batches, row["ct2_fp32_tokens_per_s"]
                    )
            result["greedy" if beams == 1 else f"beam{beams}"] = row
    return result


def bench_quality(args: argparse.Namespace) -> dict[str, Any]:
    """Every contestant that runs the paper's search, on a trained model's test set: tokens per second, BLEU, chrF,
    exact match and translations equal to PyTorch's; int8's BLEU against fp32's."""
    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.training import score_translations

    sources, references = read_lines(args.quality_source), read_lines(args.quality_reference)
    model, tokenizer = load_model_dir(args.quality_model)
    search = {"length_penalty": LENGTH_PENALTY, "max_length_offset": MAX_LENGTH_OFFSET}
    names = [name for name in args.contestants if ENGINES[name][0] in ("torch", "ort", "ct2")]
    with tempfile.TemporaryDirectory(prefix="benchmark-decoding-quality-") as folder:
        loaded, _ = engines(model, tokenizer, Path(folder), names, "cpu", args.threads[:1])

        def run(name: str) -> Callable[[Any], list[str]]:
            engine = loaded[contestant(name, args.threads[0])]
            if ENGINES[name][0] == "ct2":
                return lambda _: translate_ctranslate2(engine, tokenizer, sources, beam_size=4, **search)
            return lambda _: translate(engine, tokenizer, sources, num_beams=4, **search)

        torch.set_num_threads(args.threads[0])
        timings = interleave({name: run(name) for name in names}, [None], repeats=args.rounds, warmup=0)
    translations = {name: timings.returned[name][-1] for name in names}
    work = translations.get("torch", translations[names[0]])  # the same work for every contestant
    tokens = sum(len(ids) for ids in tokenizer(work)["input_ids"])
    result: dict[str, Any] = {"model": str(args.quality_model), "source": str(args.quality_source)}
    result |= {"reference": str(args.quality_reference), "sentences": len(sources), "threads": args.threads[0]}
    for name, texts in translations.items():
        result[name] = {
            **score_translations(texts, references),
            "tokens_per_s": round(tokens / timings.total(name), 1),
        }
        result[name]["equal_to_torch"] = sum(a == b for a, b in zip(texts, work, strict=True))
    for engine in ("ort", "ct2"):
        if {f"{engine}_int8", f"{engine}_fp32"} <= set(names):
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
    texts, description = source_sentences(args.data_dir, args.max_pairs, args.seed)
    tokenizer = train_tokenizer(texts, vocab_size=args.vocab_size)
    report: dict[str, Any] = {
        "what": "generated tokens per second (</s> included) of each contestant on the same batches of token ids, "
        "interleaved; random weights; torch and ort: the paper's search (GNMT alpha 0.6, input length + 50); "
        "generate and marian: transformers' generate(), the batch's longest source + 50; ct2: CTranslate2's "
        "(|Y|^0.6, the batch's longest source + 50)",
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "contestants": args.contestants,
        "threads": args.threads,
        "best": "each contestant at the thread count of its highest throughput (NAME_threads); by_threads: all",
        "ct2_use_mkl": os.environ.get("CT2_USE_MKL"),
        "ct2_cpu_backend": cpu_backend() if importlib.util.find_spec("ctranslate2") else None,
        **{name: getattr(args, name) for name in ("batch_size", "batches", "rounds", "warmup")},
        "data": f"{description}; byte-level BPE of {len(tokenizer)} tokens",
        "sizes": {},
    }
    for size in args.sizes:
        report["sizes"][size] = bench_size(size, texts, tokenizer, args)
        print(size, json.dumps(report["sizes"][size], indent=1), flush=True)
    if args.quality_model:
        report["quality"] = bench_quality(args)
        print("quality", json.dumps(report["quality"], indent=1), flush=True)
    record.write(report, args.output)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers

DECODING_CPU, ONNX_PROFILE = "decoding_cpu.json", "onnx_search_profile.json"
LABELS = {"torch": "PyTorch", "torch_bf16": "PyTorch bf16", "ort_fp32": "onnxruntime fp32",
          "ort_int8": "onnxruntime int8", "ct2_fp32": "CTranslate2 fp32", "ct2_int8": "CTranslate2 int8"}  # fmt: skip


def best(row: dict[str, Any], name: str) -> str:
    """A contestant's tokens per second, with the thread count of its best."""
    return f"{row[f'{name}_tokens_per_s']:,.0f} ({row[f'{name}_threads']}t)"


def rows_of(run: dict[str, Any], cells: Callable[[dict], list[str]]) -> list[list[str]]:
    """A row per size and search of a speed run: the model, the search, then ``cells(row)``."""
    return [[f"{size} ({figures['parameters'] / 1e6:.0f}M)", search.replace("beam", "beam "), *cells(figures[search])]
            for size, figures in run["sizes"].items() for search in figures
            if search == "greedy" or search.startswith("beam")]  # fmt: skip


def decoding_cpu_table(results: Path) -> str:
    """Our decoding against MarianMT's generate(), bf16 and CTranslate2 on the CPU, each at its best thread count."""
    rows = rows_of(read_json(results, DECODING_CPU), lambda row: [
        f"**{row['generate_vs_marian']:.2f}x**", row["generate_batches_equal_marian"], best(row, "torch"),
        f"{row['torch_bf16_vs_torch']:.2f}x", *(f"{row[f'{name}_tokens_per_s'] / row['torch_tokens_per_s']:.2f}x"
                                                for name in ("ct2_fp32", "ct2_int8")),
    ])  # fmt: skip
    header = ["model", "search", "generate(): ours / MarianMT", "batches with MarianMT's tokens",
              "translate: tokens/s", "bf16 / fp32", "CTranslate2 fp32 / ours", "CTranslate2 int8 / ours"]  # fmt: skip
    return table(header, ["l", "l", "r", "r", "r", "r", "r", "r"], rows)


def onnx_serving_table(results: Path) -> str:
    """Tokens per second of each engine on the CPU, each at its best thread count ("(2t)")."""
    engines = ["torch", "ort_fp32", "ort_int8", "ct2_fp32", "ct2_int8"]
    rows = rows_of(read_json(results, DECODING_CPU), lambda row: [best(row, name) for name in engines] + [
        f"{row['ort_fp32_vs_ct2_fp32']:.2f}", row["ort_fp32_batches_equal_torch"]])  # fmt: skip
    header = ["model", "search", *[LABELS[name] for name in engines], "ort fp32 / ct2 fp32", "ort fp32 = PyTorch"]
    return table(header, ["l", "l", "r", "r", "r", "r", "r", "r", "r"], rows)


def onnx_serving_quality(results: Path) -> str:
    """Speed and BLEU of each engine with the paper's search on a trained model's test set (``--quality-model``)."""
    quality = read_json(results, DECODING_CPU)["quality"]
    rows = [[label, f"{quality[name]['tokens_per_s']:,.0f}", f"{quality[name]['bleu']:.2f}",
             f"{quality[name]['chrf']:.2f}", f"{quality[name]['exact_match']:.1f}%",
             f"{quality[name]['equal_to_torch']}/{quality['sentences']}"]
            for name, label in LABELS.items() if name in quality]  # fmt: skip
    header = ["engine", "tokens/s", "BLEU", "chrF", "exact match", "same text as PyTorch"]
    return table(header, ["l", "r", "r", "r", "r", "r"], rows)


def decoding_dtype(results: Path) -> str:
    """bf16 against fp32 decoding of the trained model, the paper's search (``--quality-model``)."""
    quality = read_json(results, DECODING_CPU)["quality"]
    fp32, bf16 = quality["torch"], quality["torch_bf16"]
    return (
        f"bf16 decoded at **{bf16['tokens_per_s'] / fp32['tokens_per_s']:.2f}x** fp32's speed "
        f"({bf16['tokens_per_s']:,.0f} against {fp32['tokens_per_s']:,.0f} tokens/s), with BLEU {bf16['bleu']:.2f} "
        f"against {fp32['bleu']:.2f} ({bf16['equal_to_torch']:,} of the {quality['sentences']:,} translations "
        f"identical)"
    )


def onnx_search_profile(results: Path) -> str:
    """Where onnxruntime's beam search spends its time (``--profile``): the share inside onnxruntime's runs, and the
    throughput were the search around them free, against CTranslate2 fp32 at its best."""
    rows = []
    for size, figures in read_json(results, ONNX_PROFILE)["sizes"].items():
        for search in [key for key in figures if key.startswith("beam")]:
            row = figures[search]
            for name in ("ort_fp32", "ort_int8"):
                split = row["inside_onnxruntime"][name]
                rows.append([f"{size} ({figures['parameters'] / 1e6:.0f}M)", search.replace("beam", "beam "),
                             LABELS[name], best(row, name), f"{100 * split['share_inside']:.0f}%",
                             f"{split['runs_only_tokens_per_s']:,.0f}", best(row, "ct2_fp32"),
                             f"{split['runs_only_vs_ct2_fp32']:.2f}"])  # fmt: skip
    header = ["model", "search", "engine", "tokens/s", "time inside onnxruntime's runs", "runs only: tokens/s"]
    header += ["CTranslate2 fp32", "runs only / CTranslate2 fp32"]
    return table(header, ["l", "l", "l", "r", "r", "r", "r", "r"], rows)


def onnx_serving_environment(results: Path, name: str = DECODING_CPU) -> str:
    """Where and how a speed run (its results file `name`) ran."""
    run = read_json(results, name)
    quality = run.get("quality")
    model = (f"; quality on `{quality['model']}`, {quality['sentences']:,} sentences of "
             f"`{Path(quality['source']).name}` at {quality['threads']} thread(s)" if quality else "")  # fmt: skip
    return (
        f"{processor(run)}, each engine at the best of {', '.join(map(str, run['threads']))} threads (Nt: at N), "
        f"batches of {run['batch_size']} sentences ({run['batches']} batches, {run['rounds']} interleaved rounds; "
        f"{run['data']}){model}; load average {environment_load(run)}, {minutes(run['wall_seconds'])}; "
        f"{versions(run, 'torch', 'onnxruntime', 'ctranslate2')} (CT2_USE_MKL={run['ct2_use_mkl'] or 'unset'}, "
        f"CTranslate2's {run['ct2_cpu_backend']} backend)"
    )


TARGET = 1.5
"""Issue 44's target: onnxruntime fp32 at beam 4 at least this many times CTranslate2 fp32, each at its best."""


def onnx_search_ceiling(results: Path) -> str:
    """What the profile says of the target, per size: how fast the graphs alone are against CTranslate2 fp32, and
    what the target then asks of the graphs or of the time around them; int8's gain over fp32 (timed rounds)."""
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
            ask = (f"so the target leaves the search around the runs {100 * (1 - TARGET / ceiling):.0f}% of the time, "
                   f"where it now takes {100 * (1 - split['share_inside']):.0f}%")  # fmt: skip
        parts.append(f"at the {size} size the graphs alone reach {ceiling:.2f} times CTranslate2 fp32, {ask}")
        gains.append(f"{row['ort_int8_tokens_per_s'] / row['ort_fp32_tokens_per_s']:.2f} at {size}")
    return "; ".join(parts) + f". onnxruntime int8 over fp32 in the timed rounds: {', '.join(gains)}"


def decoding_gpu_table(results: Path, names=("decoding_benchmark_cuda_bf16.json",
                                              "decoding_benchmark_cuda_bf16_batch128.json")) -> str:  # fmt: skip
    """generate() against MarianMT on a GPU, a row per file, size and search (`gpu_rows`)."""
    files = [read_json(results, name) for name in names]  # each a report, or a list of one per size
    rows = [row for f in files for report in ([f] if isinstance(f, dict) else f) for row in gpu_rows(report)]
    header = ["size", "batch", "search", "ours / MarianMT", "ours, tokens/s", "MarianMT, tokens/s",
              "= MarianMT's tokens"]  # fmt: skip
    return table(header, ["l", "r", "l", "r", "r", "r", "l"], rows)


H200 = ("gpu/2026-11-27-h200/decoding_batch16.json", "gpu/2026-11-27-h200/decoding_batch128.json")


def gpu_rows(report: dict[str, Any]) -> list[list[str]]:
    """A GPU run's rows: this benchmark's (``sizes``; generate() and MarianMT in bf16 where they ran so), or its
    predecessor's of the runs of 2026-11-25 and 2026-11-27 (a report per size, ``generate`` per search)."""
    searches = (("greedy", "greedy"), ("beam4", "beam 4"))
    if "sizes" in report:
        a, b = ("generate_bf16", "marian_bf16") if "generate_bf16" in report["contestants"] else ("generate", "marian")
        return [[size, str(report["batch_size"]), label, f"**{row[f'{a}_vs_{b}']:.2f}x**",
                 f"{row[f'{a}_tokens_per_s']:,.0f}", f"{row[f'{b}_tokens_per_s']:,.0f}", row[f"{a}_batches_equal_{b}"]]
                for size, figures in report["sizes"].items() for key, label in searches for row in [figures[key]]]  # fmt: skip
    return [[report["settings"]["size"], str(row["batch_size"]), label, f"**{row['speedup']:.2f}x**",
             f"{row['ours_tokens_per_s']:,.0f}", f"{row['marian_tokens_per_s']:,.0f}", yes(row["outputs_equal_marian"])]
            for key, label in searches for row in [report["generate"][key]]]  # fmt: skip


def gpu_device(results: Path) -> str:
    report = read_json(results, "decoding_benchmark_cuda_bf16.json")[0]
    return f"{report['device']}, {versions(report, 'torch')}, {report['settings']['dtype']}"


def gpu_training(results: Path) -> str:
    """The training-step ratios the first GPU run measured beside decoding."""
    reports = {report["settings"]["size"]: report["train"]
               for report in read_json(results, "decoding_benchmark_cuda_bf16.json")}  # fmt: skip
    random = " and ".join(f"{reports[size]['random']['speedup']:.2f}x {size}" for size in ("small", "base"))
    bucketed = " and ".join(f"{reports[size]['bucketed']['speedup']:.2f}x" for size in ("small", "base"))
    return f"{random} on random batches, {bucketed} token-bucketed"


FIGURES = {
    "decoding-cpu-table": decoding_cpu_table,
    "decoding-cpu-versions": lambda results: versions(read_json(results, DECODING_CPU), "transformers", "torch"),
    "decoding-dtype": decoding_dtype,
    "onnx-serving-table": onnx_serving_table,
    "onnx-serving-quality": onnx_serving_quality,
    "onnx-serving-environment": onnx_serving_environment,
    "onnx-search-profile": onnx_search_profile,
    "onnx-search-profile-environment": lambda results: onnx_serving_environment(results, ONNX_PROFILE),
    "onnx-search-ceiling": onnx_search_ceiling,
    "decoding-gpu-table": decoding_gpu_table,
    "decoding-h200-table": partial(decoding_gpu_table, names=H200),  # the H200 of 2026-11-27, base, bf16
    "gpu-device": gpu_device,
    "gpu-training": gpu_training,
    "ct2-stop-rule-table": ct2_stop_rule_table,
    "ct2-stop-rule-environment": ct2_stop_rule_environment,
}


if __name__ == "__main__":
    raise SystemExit(main())
