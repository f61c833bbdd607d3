#!/usr/bin/env python
"""Decoding speed of the model against MarianMT of the same architecture, and against CTranslate2.

MarianMT is the same network as ours (`bench.marian_twin`): every comparison runs both on the same weights and the
same batches, interleaved (`bench.interleave`); each batch's median time is kept, and a throughput is the work of
all batches over the sum of their medians. Read the ratios: absolute figures describe this machine at that moment.

One section (``--sections generate``; the training step's speed is `benchmark_training.py`'s, whose contestants
include MarianMT in `Seq2SeqTrainer`):

* ``generate``: greedy and beam-4 `generate()`, generated tokens per second; CTranslate2 (float32 and int8) on the
  same batches when it is installed. Our `generate()` runs the incremental decoder of
  ``generation_vanilla_transformer.py``; MarianMT's runs transformers' loop. Both must return the same tokens.

The data are Multi30k's pairs in a BPE trained on them (``--data-dir``), or synthetic pairs (`bench.load_corpus`).

Usage (one report per size and thread count; ``--json`` writes them, with the run's environment)::

    python scripts/benchmark.py                                  # small model, 2 CPU threads
    python scripts/benchmark.py --device cuda --dtype bf16 --size base --json results.json
    python scripts/benchmark.py --sections generate --size small base --threads 1 2 --json decoding.json
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import bench
import torch
from bench import options
from bench.figures import environment_load, read_json, table, versions, yes
from bench.serving import ct2_search, ct2_translators, hypotheses

from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""fp32; or bf16 generate()."""


@dataclasses.dataclass
class Settings:
    """What to run and how. The defaults are the CPU benchmark of the README."""

    size: str = "small"
    vocab_size: int = 8000
    device: str = "cpu"
    dtype: str = "fp32"
    threads: int | None = 2
    attn_implementation: str = "sdpa"
    num_batches: int = 4
    gen_batch_size: int = 16
    max_new_tokens: int = 40
    num_beams: tuple[int, ...] = (1, 4)
    repeats: int = 3
    warmup: int = 1
    data_dir: str | None = str(options.MULTI30K) if options.MULTI30K else None
    max_pairs: int = 12000
    ctranslate2: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.size not in bench.SIZES:
            raise ValueError(f"size={self.size!r}; choose one of {sorted(bench.SIZES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}; choose one of {sorted(DTYPES)}")
        for name in ("num_batches", "gen_batch_size", "max_new_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {name}={getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be at least 0, got warmup={self.warmup}")

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


# The two models


def build_pair(config: VanillaTransformerConfig, settings: Settings, seed: int | None = None):
    """Our model (initialised with `seed`) and its Marian twin, on the benchmark's device (float32 weights)."""
    torch.manual_seed(settings.seed if seed is None else seed)
    config = copy.deepcopy(config)
    config._attn_implementation = settings.attn_implementation
    ours = VanillaTransformerForConditionalGeneration(config).to(settings.torch_device)
    return ours, bench.marian_twin(ours)


@contextlib.contextmanager
def _threads(count: int | None):
    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# Sections


def bench_generation(config: VanillaTransformerConfig, corpus: bench.Corpus, settings: Settings) -> dict[str, Any]:
    """generate() throughput of both models (and CTranslate2's, if installed), greedy and beam search. Every
    contestant answers the tokens of each translation (`hypotheses`), which are compared."""
    device = settings.torch_device
    ours, marian = build_pair(config, settings)
    for model in (ours, marian):
        model.eval().to(settings.torch_dtype)
    batches = bench.random_batches(corpus, settings.gen_batch_size, settings.num_batches, settings.seed + 1)
    sources = [{key: b[key].to(device) for key in ("input_ids", "attention_mask")} for b in batches]
    translators = ct2_contestants(ours, corpus, settings) if settings.ctranslate2 else {}
    result: dict[str, Any] = {"ctranslate2": sorted(translators) or None, "ct2_use_mkl": os.environ.get("CT2_USE_MKL")}
    for beams in settings.num_beams:
        options = dict(max_new_tokens=settings.max_new_tokens, num_beams=beams, do_sample=False)
        contestants = {
            name: torch.inference_mode()(lambda source, model=model: hypotheses(model.generate(**source, **options)))
            for name, model in (("ours", ours), ("marian", marian))
        }
        for name, translator in translators.items():
            contestants[name] = ct2_search(translator, corpus.tokens, beams, lambda _: settings.max_new_tokens)
        timings = bench.interleave(
            contestants, sources, repeats=settings.repeats, warmup=settings.warmup, device=device
        )
        # What the last repeat returned on every timed batch: its tokens, and their equality (not the warm-up's alone).
        outputs = {name: timings.returned[name][-len(sources) :] for name in contestants}
        equal = [a == b for a, b in zip(outputs["ours"], outputs["marian"], strict=True)]
        row: dict[str, Any] = {
            "outputs_equal_marian": all(equal),
            "batches_equal_marian": f"{sum(equal)}/{len(equal)}",
            "batch_size": settings.gen_batch_size,
        }
        for name in contestants:
            row[f"{name}_tokens_per_s"] = sum(len(h) for batch in outputs[name] for h in batch) / timings.total(name)
        row["speedup"] = row["ours_tokens_per_s"] / row["marian_tokens_per_s"]
        for name in translators:
            row[f"{name}_vs_ours"] = row[f"{name}_tokens_per_s"] / row["ours_tokens_per_s"]
            if "int8" not in name:  # the same precision as ours: fp32 on fp32, bf16 on bf16
                pairs = zip(outputs["ours"], outputs[name], strict=True)
                same = [a == b for mine, theirs in pairs for a, b in zip(mine, theirs, strict=True)]
                row[f"{name}_outputs_equal_ours"] = all(same)
                row[f"{name}_rows_equal_ours"] = f"{sum(same)}/{len(same)}"
        result["greedy" if beams == 1 else f"beam{beams}"] = row
    return result


def ct2_contestants(model, corpus: bench.Corpus, settings: Settings) -> dict[str, Any]:
    """CTranslate2 exports of `model` (float32/int8 on CPU, bf16/int8_bf16 on CUDA; `bench.serving.ct2_translators`),
    or none if unavailable."""
    try:
        import ctranslate2
    except ImportError:
        return {}
    device = settings.torch_device
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return {}
    kinds = {"ct2_fp32": "float32", "ct2_int8": "int8"}
    if device.type == "cuda" and settings.dtype != "fp32":
        kinds = {"ct2_bf16": "bfloat16", "ct2_int8": "int8_bfloat16"}
    folder = Path(tempfile.mkdtemp(prefix="vanilla-ct2-"))
    return ct2_translators(model, folder, kinds, device.type, settings.threads or 0, vocabulary=corpus.tokens)[0]


SECTIONS = ("generate",)


def run(settings: Settings, sections: Sequence[str] = SECTIONS, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark `sections` and return every figure, with a description of the run and its environment
    (`bench.Record`)."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    record = bench.Record()
    with _threads(settings.threads if settings.device == "cpu" else None):
        config = bench.model_config(settings.size, settings.vocab_size)
        corpus = bench.load_corpus(settings.vocab_size, settings.data_dir, settings.max_pairs, settings.seed)
        report: dict[str, Any] = {
            "settings": dataclasses.asdict(settings),
            "device": _device_name(settings.torch_device),
            "threads": torch.get_num_threads() if settings.device == "cpu" else None,
            "data": corpus.description,
            "parameters": _parameter_count(config),
        }
        log(f"# {settings.size} model on {report['device']}, {settings.dtype}; data: {corpus.description}")
        if "generate" in sections:
            start = time.perf_counter()
            report["generate"] = bench_generation(config, corpus, settings)
            log(f"  generate: {time.perf_counter() - start:.0f} s")
        return record.result(report)


def _parameter_count(config: VanillaTransformerConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in VanillaTransformerForConditionalGeneration(config).parameters())


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


# The command


OPTIONS = {  # Settings field -> help; every field is an option (``--vocab-size``), ``ctranslate2`` as --no-ctranslate2
    "size": "model sizes to run, one report each",
    "device": "cpu or cuda",
    "dtype": "fp32, or bf16 generate() (for GPUs)",
    "threads": "torch CPU threads, fixed for each report; one report per size and count",
    "num_batches": "batches per measurement",
    "repeats": "timed runs per batch and contestant",
    "warmup": "untimed generate() calls of each contestant before the timed ones (first calls, allocations)",
    "data_dir": "Multi30k directory; synthetic pairs when absent",
}
CHOICES = {"size": bench.SIZES, "dtype": tuple(DTYPES), "attn_implementation": ("sdpa", "eager")}
TEXT = ("size", "device", "dtype", "attn_implementation", "data_dir")
MANY = ("size", "threads", "num_beams")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The options: one per `Settings` field (several values for `MANY`), ``--sections`` and ``--json``."""
    parser = options.parser(__doc__, threads=None, output=None)
    for field in dataclasses.fields(Settings):
        if field.name == "ctranslate2":
            parser.add_argument("--no-ctranslate2", action="store_true", help="skip CTranslate2 even if installed")
            continue
        many, default = field.name in MANY, field.default
        parser.add_argument(
            "--" + field.name.replace("_", "-"),
            type=str if field.name in TEXT else int,
            nargs="+" if many else None,
            default=list(default) if isinstance(default, tuple) else [default] if many else default,
            choices=CHOICES.get(field.name),
            help=f"{OPTIONS.get(field.name, '')} (default: %(default)s)",
        )
    parser.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    return parser.parse_args(argv)


def settings_for(args: argparse.Namespace, size: str, threads: int) -> Settings:
    values = {field.name: getattr(args, field.name, None) for field in dataclasses.fields(Settings)}
    values = {name: tuple(value) if isinstance(value, list) else value for name, value in values.items()}
    return Settings(**{**values, "size": size, "threads": threads, "ctranslate2": not args.no_ctranslate2})


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reports = []
    for size in args.size:
        for threads in args.threads:
            report = run(settings_for(args, size, threads), args.sections)
            print(json.dumps(report, indent=1, default=str), flush=True)
            reports.append(report)
    if args.json:
        bench.write_json(reports if len(reports) > 1 else reports[0], args.json)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def decoding_rows(reports: list[dict], cells) -> list[list[str]]:
    """A row per report and search (greedy, beam 4): the model size, then ``cells(report, figures, search)``."""
    searches = (("greedy", "greedy"), ("beam4", "beam 4"))
    return [[report["settings"]["size"], *cells(report, report["generate"][key], search)]
            for report in reports for key, search in searches]  # fmt: skip


def decoding_cpu_table(results: Path) -> str:
    """generate() against MarianMT and CTranslate2 on the CPU (scripts/benchmark.py --sections generate)."""
    rows = decoding_rows(read_json(results, "decoding_benchmark.json"), lambda report, row, search: [
        str(report["threads"]), search, f"**{row['speedup']:.2f}x**", f"{row['ct2_fp32_vs_ours']:.2f}x",
        f"{row['ct2_int8_vs_ours']:.2f}x", yes(row["outputs_equal_marian"]), yes(row["ct2_fp32_outputs_equal_ours"]),
        environment_load(report),
    ])  # fmt: skip
    header = ["size", "threads", "search", "ours / MarianMT", "CTranslate2 fp32 / ours",
              "CTranslate2 int8 / ours", "same tokens as MarianMT", "as CT2 fp32", "load"]  # fmt: skip
    return table(header, ["l", "r", "l", "r", "r", "r", "l", "l", "l"], rows)


def decoding_cpu_versions(results: Path) -> str:
    return versions(read_json(results, "decoding_benchmark.json")[0], "transformers", "torch")


def decoding_gpu_table(results: Path, names=("decoding_benchmark_cuda_bf16.json",
                                              "decoding_benchmark_cuda_bf16_batch128.json")) -> str:  # fmt: skip
    """generate() against MarianMT on a GPU, batches of 16 and 128."""
    reports = [report for name in names for report in as_list(read_json(results, name))]
    rows = decoding_rows(reports, lambda _, row, search: [
        str(row["batch_size"]), search, f"**{row['speedup']:.2f}x**", f"{row['ours_tokens_per_s']:,.0f}",
        f"{row['marian_tokens_per_s']:,.0f}", yes(row["outputs_equal_marian"]),
    ])  # fmt: skip
    header = ["size", "batch", "search", "ours / MarianMT", "ours, tokens/s", "MarianMT, tokens/s",
              "same tokens as MarianMT"]  # fmt: skip
    return table(header, ["l", "r", "l", "r", "r", "r", "l"], rows)


def as_list(reports: dict | list) -> list[dict]:
    """A results file's reports: a list of one per size, or the one report of a single size."""
    return reports if isinstance(reports, list) else [reports]


def decoding_h200_table(results: Path) -> str:
    """generate() against MarianMT on the H200 of 2026-11-27 (scripts/gpu_check.sh's reruns), base, bf16."""
    names = ("gpu/2026-11-27-h200/decoding_batch16.json", "gpu/2026-11-27-h200/decoding_batch128.json")
    return decoding_gpu_table(results, names)


def gpu_device(results: Path) -> str:
    report = read_json(results, "decoding_benchmark_cuda_bf16.json")[0]
    return f"{report['device']}, {versions(report, 'torch')}, {report['settings']['dtype']}"


def gpu_training(results: Path) -> str:
    """The training-step ratios the GPU run measured beside decoding."""
    reports = {
        report["settings"]["size"]: report["train"]
        for report in read_json(results, "decoding_benchmark_cuda_bf16.json")
    }
    random = " and ".join(f"{reports[size]['random']['speedup']:.2f}x {size}" for size in ("small", "base"))
    bucketed = " and ".join(f"{reports[size]['bucketed']['speedup']:.2f}x" for size in ("small", "base"))
    return f"{random} on random batches, {bucketed} token-bucketed"


def decoding_bf16_marian(results: Path) -> str:
    run = read_json(results, "decoding_benchmark_bf16.json")
    ratios = " / ".join(f"{run['generate'][key]['speedup']:.2f}x" for key in ("greedy", "beam4"))
    return f"{ratios} MarianMT, greedy / beam 4 (load {bench.environment_of(run)['load_average_start'][0]:.1f})"


FIGURES = {
    "decoding-cpu-table": decoding_cpu_table,
    "decoding-cpu-versions": decoding_cpu_versions,
    "decoding-gpu-table": decoding_gpu_table,
    "decoding-h200-table": decoding_h200_table,
    "gpu-device": gpu_device,
    "gpu-training": gpu_training,
    "decoding-bf16-marian": decoding_bf16_marian,
}


if __name__ == "__main__":
    raise SystemExit(main())
