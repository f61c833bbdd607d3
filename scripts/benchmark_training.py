"""Our training step against MarianMT with `Seq2SeqTrainer`, each at its best settings, in one interleaved run.

What a user would pick instead of ``vanilla-transformer train``: the same architecture as a `MarianMTModel`
(`bench.marian_twin`: the same initial weights) trained by transformers' `Seq2SeqTrainer` at its best settings
(``bf16``, ``torch_compile``, ``train_sampling_strategy="group_by_length"``, fused AdamW), against our `Trainer` (built
as ``train`` builds it: each contestant is a set of ``train`` options) at its best settings, each also in fp32 eager
as the baseline. The model is ``--model-size`` (a ``PRESETS`` name, default ``multi30k``: N=3, d_model=256), the data
Multi30k en->de train (``--data-dir``), at about ``--max-tokens`` (4,096: the multi30k preset's) padded tokens per
step on both sides: ours by `TokenBatchSampler`, the Trainer's by a batch size B chosen from the data so that its
length-grouped batches hold as many padded tokens on average (`trainer_batch_size`).

Method: the coordinator builds the tokenizer and the token ids once (`build_data`), so that all train on the same
ids. Each contestant runs in a worker process of its own (`bench.processes`: Accelerate keeps one process-wide
state), driven by the kit's interleaved timer (`bench.interleave`): ``--warmup-steps`` steps each (compilation
included, reported apart), then ``--rounds`` rounds of ``--steps-per-round`` steps per contestant, in an order that
reverses every round. The Trainer runs its own loop (``trainer.train()``, its data loading included), paused by a
callback every command's steps. Throughput: non-padding tokens (source + target) over seconds, summed over rounds;
the per-round median, min and max show the noise. "Best" for each side is its fastest contestant. bf16 contestants
are left out by default where the CPU emulates bf16 (`preflight.slow_bf16`); naming them in ``--contestants`` runs
them anyway. Ratios are what to read: absolute figures describe this machine at that moment only.

Contestants (``--contestants``, a comma or space separated list): ``KIND:key=value,...``, the kinds and keys of
`SPEC_KEYS` (keys left out take the first value). Prints a table and one line::

    TRAINING ours_best=... trainer_best=... ratio=...

Usage::

    python scripts/benchmark_training.py --threads 2 --output docs/results/training_vs_trainer.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench import (
    Record,
    StepProfile,
    interleave,
    marian_twin,
    matmul_rate,
    profile_lines,
    synchronize,
    synthetic_pairs,
    training_flops,
)
from bench.figures import environment_load, minutes, read_json, table
from bench.processes import Channel, Worker, build_trainer, prepare_data

from vanilla_transformer.data import IGNORE_INDEX

PRECISION = {
    "precision": {"no": "fp32", "bf16": "bf16"},
    "compile": {"no": "eager", "inductor": "compiled (inductor)"},
}
ATTENTION = {"attn": {"sdpa": "SDPA", "eager": "eager attention"}}
OURS_COMPILE = {"compile": {**PRECISION["compile"], "whole": "compiled (inductor), the whole model at once"}}
"""Ours also compiles the whole model as one graph (``whole``), as before regional compilation was the default."""
SPEC_KEYS: dict[str, dict[str, dict[str, str]]] = {
    "ours": {
        **PRECISION,
        **OURS_COMPILE,
        "adam": {"default": "Adam", "foreach": "foreach Adam", "fused": "fused Adam"},
        **ATTENTION,
    },
    "trainer": {**PRECISION, "optim": {"adamw_torch_fused": "fused AdamW", "adamw_torch": "AdamW"}, **ATTENTION},
}
"""The settings of each kind of contestant, and their values (the first is the default) with their words in the
published table."""

PRESET_CONTESTANT = "ours:precision=bf16,compile=inductor,adam=fused,attn=eager"
"""What ``train --preset multi30k`` runs on a CPU with native bf16: bf16 autocast, eager attention, compiled layer by
layer (its Adam is torch's default on the CPU; fused Adam measures the same there)."""
WHOLE_CONTESTANT = "ours:precision=bf16,compile=whole,adam=fused,attn=eager"
"""The same, with the whole model compiled as one graph: what layer-by-layer compilation is weighed against."""

DEFAULT_CONTESTANTS = (
    "ours:precision=no,compile=no,adam=default",
    "ours:precision=no,compile=no,adam=fused",
    "ours:precision=no,compile=inductor,adam=fused",
    "ours:precision=bf16,compile=inductor,adam=fused",
    PRESET_CONTESTANT,  # the multi30k preset's choices on a CPU with native bf16 (layer-by-layer compilation)
    WHOLE_CONTESTANT,
    "trainer:precision=no,compile=no",
    "trainer:precision=no,compile=inductor",
    "trainer:precision=bf16,compile=inductor",
)
"""Each side's fp32 eager baseline and its candidates for best (bf16 ones skipped where bf16 is emulated)."""

SETTINGS = ("model_size", "vocab_size", "max_tokens", "rounds", "steps_per_round", "warmup_steps", "threads")
SETTINGS += ("max_pairs", "data_dir", "seed", "device", "grad_accum", "preset", "profile_steps")
"""The options the results file records."""


# Contestants


@dataclass(frozen=True)
class Spec:
    """One contestant: its kind (``ours`` or ``trainer``) and its settings, every key of `SPEC_KEYS` filled in."""

    kind: str
    settings: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, text: str) -> Spec:
        kind, _, rest = text.strip().partition(":")
        if kind not in SPEC_KEYS:
            raise ValueError(f"contestant {text!r}: the kind must be one of {sorted(SPEC_KEYS)}")
        keys, given = SPEC_KEYS[kind], {}
        for item in filter(None, rest.split(",")):
            key, equals, value = item.partition("=")
            if not equals or key not in keys or value not in keys[key]:
                choices = "; ".join(f"{name}={'|'.join(values)}" for name, values in keys.items())
                raise ValueError(f"contestant {text!r}: bad setting {item!r}; {kind} takes {choices}")
            given[key] = value
        return cls(kind, tuple((key, given.get(key, next(iter(values)))) for key, values in keys.items()))

    def __getitem__(self, key: str) -> str:
        return dict(self.settings)[key]

    @property
    def name(self) -> str:
        return f"{self.kind}:" + ",".join(f"{key}={value}" for key, value in self.settings)

    @property
    def is_baseline(self) -> bool:
        """fp32, eager, and the other settings at their defaults: the side's reference."""
        return all(value == next(iter(SPEC_KEYS[self.kind][key])) for key, value in self.settings)


def parse_contestants(text: str) -> list[Spec]:
    """Contestants from a comma or space separated list: a word with ``:`` starts one, ``key=value`` words extend it."""
    specs: list[str] = []
    for word in filter(None, re.split(r"[,\s]+", text)):
        if ":" in word or word in SPEC_KEYS:
            specs.append(word if ":" in word else word + ":")
        elif "=" in word and specs:
            specs[-1] += ("" if specs[-1].endswith(":") else ",") + word
        else:
            raise ValueError(f"--contestants: {word!r} is neither KIND:key=value nor key=value after one")
    parsed = [Spec.parse(spec) for spec in specs]
    names = [spec.name for spec in parsed]
    if len(set(names)) < len(names) or not parsed:
        raise ValueError(f"--contestants must name distinct contestants, got {names}")
    return parsed


# Data, built once by the coordinator


SYNTHETIC_LENGTHS = ((3.200, 0.511), (3.117, 0.525))
"""Log-normal fits (log-mean, log-std) of WMT14 En-De sentence lengths in tokens, source and target (newstest2014's
words times 1.35, a 37k BPE's typical tokens per word, plus ``</s>``): means of 28 and 26 tokens."""


def build_data(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """The tokenizer and token cache of Multi30k's training pairs as `train` builds them (`bench.prepare_data`: a
    BPE of ``--vocab-size``), and the same ids for the Trainer (``folder/examples.json``). With ``--synthetic-pairs``,
    that many pairs of random ids with WMT14's lengths (`SYNTHETIC_LENGTHS`) instead, for a machine without the
    corpus (a GPU machine): a step's speed depends on the lengths, not on the words; the tokenizer then serves for
    padding only."""
    from vanilla_transformer.data.cache import save_token_cache
    from vanilla_transformer.tokenization import train_tokenizer

    if args.synthetic_pairs:
        pairs = synthetic_pairs(args.synthetic_pairs, args.vocab_size, SYNTHETIC_LENGTHS, longest=256, seed=args.seed)
        examples = [{"input_ids": source, "labels": target} for source, target in pairs]
        tokenizer = train_tokenizer(["a few words for the special tokens"], 300)
        tokenizer.save_pretrained(folder / "tokenizer")
        save_token_cache(examples, args.vocab_size, folder / "tokens")
        built = {"max_length": 256, "synthetic": True}
    else:
        options = ["--preset", "multi30k", "--vocab-size", str(args.vocab_size)]
        options += ["--data-dir", args.data_dir] if args.data_dir else []  # else $VANILLA_TRANSFORMER_DATA
        config, _, tokenizer, examples = prepare_data(options, folder, args.max_pairs)
        built = {"max_length": config.data.max_length}
    (folder / "examples.json").write_text(json.dumps(examples), encoding="utf-8")
    return {"pairs": len(examples), "tokenizer_size": len(tokenizer), **built}


def trainer_batch_size(lengths: list[tuple[int, int]], max_tokens: int, seed: int) -> dict[str, Any]:
    """The Trainer's batch size B whose length-grouped batches hold, on average, as many padded tokens (source +
    target) as our `TokenBatchSampler` batches of `max_tokens`; both means, computed on the data."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from vanilla_transformer.data import TokenBatchSampler

    source, target = (np.array(side) for side in zip(*lengths, strict=True))
    ours = [
        len(batch) * (source[batch].max() + target[batch].max())
        for batch in TokenBatchSampler(lengths, max_tokens, seed=seed).epoch_batches(0)
    ]
    ours_mean = float(np.mean(ours))

    def trainer_mean(batch_size: int) -> float:
        generator = torch.Generator().manual_seed(seed)
        order = np.array(get_length_grouped_indices(source.tolist(), batch_size, generator=generator))
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        return float(np.mean([len(b) * (source[b].max() + target[b].max()) for b in batches]))

    guess = max(1, round(ours_mean / float(np.mean(source + target))))
    candidates = range(max(1, guess // 2), guess + 1)
    chosen = min(candidates, key=lambda size: abs(trainer_mean(size) - ours_mean))
    return {"batch_size": chosen, "ours_padded_per_step": ours_mean, "trainer_padded_per_step": trainer_mean(chosen)}


# Workers: one contestant each, driven over stdin/stdout


class Tally:
    """What a worker counts over a command's steps: non-padding and padded tokens, model FLOPs, the seconds spent
    building our batches, the graphs compiled meanwhile and the peak memory. The steps' time is the coordinator's
    timer's (`bench.interleave`): a worker answers once its steps are done."""

    def __init__(self, device: torch.device, config) -> None:
        self.device, self.config = device, config
        self.reset()

    def reset(self, profile: bool = False) -> None:
        """Count afresh; with `profile`, under torch's profiler until `report` (`bench.StepProfile`)."""
        from vanilla_transformer.training.step import compile_count

        self.profile = StepProfile(self.device) if profile else None
        self.steps, self.data_seconds = 0, 0.0
        self.tokens = torch.zeros((), dtype=torch.float64, device=self.device)
        self.positions, self.flops = 0, 0.0
        self.compiled_before = compile_count()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def add(self, batches: list[dict], tokens: torch.Tensor, steps: int = 1) -> None:
        """A step's micro-batches (or, with ``steps=0``, one of them): their non-padding `tokens`, padded positions
        and model FLOPs (`bench.training_flops` of the model's `config`)."""
        self.tokens += tokens.detach().double()
        self.positions += sum(batch["input_ids"].numel() + batch["labels"].numel() for batch in batches)
        self.flops += sum(training_flops(self.config, batch) for batch in batches)
        self.steps += steps

    def report(self) -> dict[str, Any]:
        """The figures since `reset`, the device synchronised first: the answer comes once the work is done."""
        from vanilla_transformer.training.step import compile_count

        tokens = float(self.tokens.item())
        synchronize(self.device)
        after = compile_count()
        compiled = after - self.compiled_before if after is not None and self.compiled_before is not None else None
        return {
            "steps": self.steps,
            "tokens": tokens,
            "positions": self.positions,
            "data_seconds": self.data_seconds,
            "compilations": compiled,
            "flops": self.flops,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None,
            "profile": self.profile.summary(self.steps) if self.profile else None,
        }


def initial_model(args: argparse.Namespace, spec: Spec):
    """Our model of ``--model-size`` with the seed's initial weights (the same in every worker)."""
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    config = VanillaTransformerConfig.from_preset(args.model_size, vocab_size=args.vocab_size)
    torch.manual_seed(args.seed)
    model = VanillaTransformerForConditionalGeneration(config)
    model.set_attn_implementation(spec["attn"])
    return model


def ours_config(args: argparse.Namespace, spec: Spec):
    """Our contestant as ``train`` options: ``--preset`` (default: multi30k), with the benchmark's model, vocabulary,
    micro-batches and seed, and the contestant's precision, compilation, Adam and attention."""
    from vanilla_transformer.training import parse_args

    options = ["--preset", args.preset or "multi30k", "--model", args.model_size, "--vocab-size", str(args.vocab_size)]
    options += ["--max-tokens", str(args.max_tokens), "--grad-accum", str(args.grad_accum), "--seed", str(args.seed)]
    backend = {"whole": "inductor"}.get(spec["compile"], spec["compile"])
    options += ["--mixed-precision", spec["precision"], "--dynamo-backend", backend]
    options += ["--attn-implementation", spec["attn"]]
    adam = {"default": "auto"}.get(spec["adam"], spec["adam"])  # auto: torch's default on the CPU, fused on CUDA
    return parse_args([*options, "--adam-implementation", adam])


def ours_worker(args: argparse.Namespace, spec: Spec, channel: Channel) -> None:
    """Our `Trainer`, built from ``train`` options (`ours_config`) as `train` builds it, on its own batches of the
    token cache (`Trainer.batches`), timed step by step (`Trainer.train_step`)."""
    from vanilla_transformer.training.step import to_device

    if spec["compile"] == "whole":  # as `accelerate launch` without --dynamo_use_regional_compilation sets it
        os.environ["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "false"
    config, model = ours_config(args, spec), initial_model(args, spec)
    trainer = build_trainer(config, args.data, model, cpu=args.device == "cpu")
    accelerator = trainer.accelerator
    batches, meter = trainer.batches(), Tally(accelerator.device, trainer.unwrapped.config)
    channel.send(event="ready", device=str(accelerator.device))
    while (command := channel.receive())["command"] != "stop":
        meter.reset(profile=command.get("profile", False))
        for _ in range(command["steps"]):
            started = time.perf_counter()
            micro_batches = [to_device(next(batches), accelerator.device) for _ in range(trainer.grad_accum)]
            meter.data_seconds += time.perf_counter() - started
            taken = trainer.train_step(micro_batches)
            meter.add(micro_batches, taken.stats["tokens"] if taken is not None else torch.zeros(()))
        channel.send(event="done", **meter.report())


def trainer_worker(args: argparse.Namespace, spec: Spec, channel: Channel) -> None:
    """MarianMT (our initial weights) in `Seq2SeqTrainer`'s own loop, paused by a callback every command's steps."""
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback

    examples = json.loads((args.data / "examples.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(args.data / "tokenizer")
    model = marian_twin(initial_model(args, spec))
    device = torch.device(args.device)
    meter = Tally(device, model.config)

    class CountingTrainer(Seq2SeqTrainer):
        """Counts the non-padding tokens of every batch the Trainer's loop trains on."""

        def training_step(self, model, inputs, *rest, **options):
            meter.add([inputs], inputs["attention_mask"].sum() + (inputs["labels"] != IGNORE_INDEX).sum(), steps=0)
            return super().training_step(model, inputs, *rest, **options)

    class Pause(TrainerCallback):
        """Reports every ``steps`` optimizer steps, then waits for the next command (stop ends training)."""

        def __init__(self) -> None:
            self.remaining = channel.receive().get("steps", 0)  # the warm-up

        def on_step_end(self, arguments, state, control, **kwargs):
            meter.steps += 1  # an optimizer step: --grad-accum micro-batches
            self.remaining -= 1
            if self.remaining > 0:
                return control
            channel.send(event="done", **meter.report())
            command = channel.receive()
            if command["command"] == "stop":
                control.should_training_stop = True
            else:
                self.remaining = command["steps"]
                meter.reset(profile=command.get("profile", False))
            return control

    trainer = CountingTrainer(
        model=model,
        args=trainer_arguments(args, spec, device),
        train_dataset=examples,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=IGNORE_INDEX),
        processing_class=tokenizer,
    )
    channel.send(event="ready", device=str(device))
    trainer.add_callback(Pause())  # blocks until the warm-up command
    meter.reset()
    trainer.train()


def trainer_arguments(args: argparse.Namespace, spec: Spec, device: torch.device):
    """The Trainer's best settings for a translation model of this size, as its documentation recommends them, with
    the paper's Adam (our training settings' betas and epsilon)."""
    from transformers import Seq2SeqTrainingArguments

    from vanilla_transformer.training.config import OptimizationConfig

    adam = OptimizationConfig()
    return Seq2SeqTrainingArguments(
        output_dir=str(args.data / f"trainer-{os.getpid()}"),
        bf16=spec["precision"] == "bf16",
        torch_compile=spec["compile"] != "no",
        **({"torch_compile_backend": spec["compile"]} if spec["compile"] != "no" else {}),
        train_sampling_strategy="group_by_length",
        per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum,
        label_smoothing_factor=0.1,
        optim=spec["optim"],
        adam_beta1=adam.adam_beta1,
        adam_beta2=adam.adam_beta2,
        adam_epsilon=adam.adam_eps,
        weight_decay=0.0,
        learning_rate=1.25e-3,  # the multi30k preset's peak
        lr_scheduler_type="inverse_sqrt",
        warmup_steps=500,
        max_steps=10**9,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        dataloader_num_workers=0,
        use_cpu=device.type == "cpu",
        disable_tqdm=True,
        seed=1,
    )


def worker_main(args: argparse.Namespace) -> int:
    channel = Channel()
    torch.set_num_threads(args.threads)
    spec = Spec.parse(args.worker)
    (ours_worker if spec.kind == "ours" else trainer_worker)(args, spec, channel)
    return 0


# The coordinator


def start_worker(index: int, spec: Spec, args: argparse.Namespace, data: Path, batch_size: int) -> Worker:
    """A contestant's process (`bench.Worker`), its stderr in ``data/worker-INDEX.log``."""
    options = ["--worker", spec.name, "--data", str(data), "--model-size", args.model_size, "--seed", str(args.seed)]
    options += ["--vocab-size", str(args.vocab_size), "--max-tokens", str(args.max_tokens)]
    options += ["--batch-size", str(batch_size), "--device", args.device, "--grad-accum", str(args.grad_accum)]
    options += ["--preset", args.preset] if args.preset else []
    return Worker(__file__, options, args.threads, data / f"worker-{index}.log", spec.name)


def run_contestants(args, specs: list[Spec], data: Path, batch_size: int) -> tuple[dict[str, Any], list]:
    """Start the workers, then the kit's interleaved timer: each warmed up alone, then the rounds; each one's
    figures (the seconds of each command by the timer, the rest as its worker counted them) and the order run."""
    workers = {spec.name: start_worker(index, spec, args, data, batch_size) for index, spec in enumerate(specs)}
    results: dict[str, Any] = {}
    try:
        for name, worker in workers.items():
            results[name] = {"device": worker.receive()["device"]}

        def progress(index: int, _) -> None:
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)

        print(f"warm-up: {args.warmup_steps} steps per contestant ...", file=sys.stderr, flush=True)
        timings = interleave(
            {name: (lambda steps, w=worker: w.ask(command="run", steps=steps)) for name, worker in workers.items()},
            [args.steps_per_round] * args.rounds,
            warmup_item=args.warmup_steps,
            progress=progress,
        )
        if args.profile_steps:  # after the timed rounds, so that the profiler's cost touches no figure
            for name, worker in workers.items():
                results[name]["profile"] = worker.ask(command="run", steps=args.profile_steps, profile=True)["profile"]
                print("\n".join(profile_lines(name, results[name]["profile"])), file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.stop()
    for name in workers:  # the time of each command, by the timer; the rest, as its worker counted it
        warmup = {**timings.warmup_returned[name], "seconds": timings.warmup_seconds[name]}
        rounds = [
            {**row, "seconds": timings.seconds[name][index][0]} for index, row in enumerate(timings.returned[name])
        ]
        results[name].update(warmup=warmup, rounds=rounds)
    return results, timings.order


def summarise(spec: Spec, figures: dict[str, Any]) -> dict[str, Any]:
    """A contestant's throughput over all rounds, its per-round spread, tokens per step, and warm-up."""
    rounds = figures["rounds"]
    total = {key: sum(r[key] for r in rounds) for key in ("steps", "seconds", "tokens", "positions", "data_seconds")}
    per_round = [r["tokens"] / r["seconds"] for r in rounds]
    return {
        "kind": spec.kind,
        **dict(spec.settings),
        "device": figures["device"],
        "tokens_per_second": total["tokens"] / total["seconds"],
        "round_tokens_per_second": {
            "median": statistics.median(per_round),
            "min": min(per_round),
            "max": max(per_round),
            "all": per_round,
        },
        "tokens_per_step": total["tokens"] / total["steps"],
        "padded_tokens_per_step": total["positions"] / total["steps"],
        "steps": total["steps"],
        "seconds": total["seconds"],
        "data_seconds": total["data_seconds"] if spec.kind == "ours" else None,
        "compilations_measured": sum(r["compilations"] or 0 for r in rounds),  # recompilations: see warmup_steps
        "warmup_seconds": figures["warmup"]["seconds"],
        "warmup_compilations": figures["warmup"]["compilations"],
        "model_flops_per_second": sum(r["flops"] for r in rounds) / total["seconds"],
        "peak_memory_bytes": max((r["peak_memory_bytes"] or 0 for r in rounds), default=0) or None,
        "profile": figures.get("profile"),
    }


def add_mfu(summaries: dict[str, dict[str, Any]], device: torch.device) -> dict[str, float]:
    """Each contestant's model-FLOPs utilisation: its model FLOP/s over the device's matmul rate in its precision
    (bf16 or fp32; `bench.matmul_rate`, measured here once the workers are gone); the rates measured."""
    dtypes = {"bf16": torch.bfloat16, "no": torch.float32}
    rates = {p: matmul_rate(device, dtypes[p]) for p in sorted({row["precision"] for row in summaries.values()})}
    for row in summaries.values():
        row["matmul_flops_per_second"] = rates[row["precision"]]
        row["mfu"] = row["model_flops_per_second"] / rates[row["precision"]]
    return rates


def compare(summaries: dict[str, dict[str, Any]], specs: list[Spec]) -> dict[str, Any]:
    """Each side's best (fastest) contestant, the ratios to each side's fp32 eager baseline and to the Trainer's
    best, and ours_best / trainer_best."""
    best: dict[str, str | None] = {}
    for kind in SPEC_KEYS:
        names = [spec.name for spec in specs if spec.kind == kind and spec.name in summaries]
        best[kind] = max(names, key=lambda n: summaries[n]["tokens_per_second"]) if names else None
    baselines = {spec.kind: spec.name for spec in specs if spec.is_baseline and spec.name in summaries}
    trainer_best = summaries[best["trainer"]]["tokens_per_second"] if best["trainer"] else None
    for spec in specs:
        if spec.name not in summaries:
            continue
        row, baseline = summaries[spec.name], baselines.get(spec.kind)
        row["vs_baseline"] = row["tokens_per_second"] / summaries[baseline]["tokens_per_second"] if baseline else None
        row["vs_trainer_best"] = row["tokens_per_second"] / trainer_best if trainer_best else None
    ours_best = summaries[best["ours"]]["tokens_per_second"] if best["ours"] else None
    return {
        "ours_best": best["ours"],
        "trainer_best": best["trainer"],
        "baselines": baselines,
        "ours_best_tokens_per_second": ours_best,
        "trainer_best_tokens_per_second": trainer_best,
        "ratio": ours_best / trainer_best if ours_best and trainer_best else None,
    }


def cpu_summary() -> dict[str, Any]:
    """The processor's model and the flags that decide CPU training speed (`environment.cpu_flags`)."""
    from vanilla_transformer.environment import cpu_flags, cpu_name
    from vanilla_transformer.training.preflight import NATIVE_BF16_FLAGS

    flags = cpu_flags()
    wanted = ("avx2", "fma", "avx512f", "avx512_vnni", *NATIVE_BF16_FLAGS, "amx_tile")
    return {"model": cpu_name(), "flags": None if flags is None else {flag: flag in flags for flag in wanted}}


def select_contestants(args: argparse.Namespace) -> tuple[list[Spec], dict[str, str]]:
    """The contestants to run, and those left out with the reason: bf16 on a CPU that emulates it
    (`preflight.slow_bf16`), unless named."""
    from vanilla_transformer.environment import cpu_flags
    from vanilla_transformer.training.preflight import slow_bf16

    specs = parse_contestants(args.contestants or " ".join(DEFAULT_CONTESTANTS))
    if args.contestants:
        return specs, {}
    device = args.device if args.device != "auto" else "cuda" if torch.cuda.is_available() else "cpu"
    skipped = {spec.name: reason for spec in specs if (reason := slow_bf16(device, spec["precision"], cpu_flags()))}
    return [spec for spec in specs if spec.name not in skipped], skipped


def coordinator_main(args: argparse.Namespace) -> int:
    from vanilla_transformer.data import example_lengths

    record = Record()
    specs, skipped = select_contestants(args)
    for name, reason in skipped.items():
        print(f"skipped {name}: {reason}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="benchmark-training-") as folder:
        data = Path(folder)
        built = build_data(args, data)
        if built["tokenizer_size"] > args.vocab_size:
            raise ValueError(
                f"the tokenizer has {built['tokenizer_size']} tokens, over --vocab-size={args.vocab_size}"
            )
        examples = json.loads((data / "examples.json").read_text(encoding="utf-8"))
        batching = trainer_batch_size(example_lengths(examples), args.max_tokens, args.seed)
        print(f"data: {built['pairs']:,} pairs; Trainer batch size {batching['batch_size']}", file=sys.stderr)
        figures, order = run_contestants(args, specs, data, batching["batch_size"])
    summaries = {spec.name: summarise(spec, figures[spec.name]) for spec in specs}
    for name, row in summaries.items():
        if row["compile"] != "no" and row["warmup_compilations"] == 0:
            print(f"warning: {name} asked to compile but compiled no graph during warm-up", file=sys.stderr)
    add_mfu(summaries, torch.device(args.device))
    comparison = compare(summaries, specs)
    result = {
        **comparison,
        "contestants": summaries,
        "skipped": skipped,
        "order": order,
        "settings": {key: getattr(args, key) for key in SETTINGS},
        "data": {**built, **batching},
        "cpu": cpu_summary(),
    }
    print(contestants_table(record.write(result, args.output)))  # the published table, of this run
    print(
        f"TRAINING ours_best={comparison['ours_best']} trainer_best={comparison['trainer_best']} "
        + (f"ratio={comparison['ratio']:.3f}" if comparison["ratio"] is not None else "ratio=- (a side has none)")
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vanilla_transformer.configuration_vanilla_transformer import PRESETS
    from vanilla_transformer.data import shared_data_dir

    data = shared_data_dir("multi30k")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contestants", help=f"comma/space separated (default: {shlex.join(DEFAULT_CONTESTANTS)})")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (default: %(default)s)")
    parser.add_argument("--steps-per-round", type=int, default=5, help="steps per contestant and round (K)")
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps before measuring, compilation included")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads of every worker (default: 2)")
    parser.add_argument("--data-dir", default=data and str(data), help="Multi30k's files (default: %(default)s)")
    parser.add_argument("--max-pairs", type=int, default=None, help="use only the first N training pairs")
    parser.add_argument("--model-size", choices=sorted(PRESETS), help="a model preset (default: multi30k)")
    parser.add_argument("--vocab-size", type=int, help="BPE vocabulary (default: 8000)")
    parser.add_argument("--max-tokens", type=int, help="padded tokens per micro-batch (default: 4096)")
    parser.add_argument("--grad-accum", type=int, help="micro-batches per optimizer step (default: 1)")
    parser.add_argument(
        "--preset",
        help="a training preset whose model, vocabulary and tokens per step (on one process) set the three above "
        "where not given, e.g. wmt14-base: base, 37,000, 4 micro-batches of 12,500",
    )
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="default: cuda if present")
    parser.add_argument("--synthetic-pairs", type=int, help="random pairs of WMT14's lengths instead of Multi30k")
    parser.add_argument("--seed", type=int, default=0, help="initial weights and batch order")
    parser.add_argument(
        "--profile-steps",
        type=int,
        default=0,
        help="after the timed rounds, this many more steps of each contestant under torch's profiler: where the "
        "host's and the device's time went (default: none)",
    )
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one contestant
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)  # internal: the coordinator's data folder
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)  # internal: the Trainer's batch size
    return parser


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the model size, vocabulary and micro-batches from ``--preset`` (`micro_batch_plan` on one process) or
    the defaults, and ``--device auto``."""
    defaults = {"model_size": "multi30k", "vocab_size": 8000, "max_tokens": 4096, "grad_accum": 1}
    if args.preset:
        from vanilla_transformer.training import parse_args
        from vanilla_transformer.training.config import micro_batch_plan

        config = parse_args(["--preset", args.preset])
        max_tokens, grad_accum = micro_batch_plan(config, 1)
        defaults = {"model_size": config.model.preset, "vocab_size": config.model.vocab_size}
        defaults |= {"max_tokens": max_tokens, "grad_accum": grad_accum}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    return args


def main(argv: list[str] | None = None) -> int:
    args = resolve(build_parser().parse_args(argv))
    for name in ("rounds", "steps_per_round", "warmup_steps", "threads", "max_tokens", "grad_accum"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.worker:
        return worker_main(args)
    return coordinator_main(args)


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def contestant_label(name: str) -> str:
    """``ours:precision=no,compile=inductor,adam=fused,attn=sdpa`` as "ours: fp32, compiled (inductor), fused Adam,
    SDPA", in the words of `SPEC_KEYS`."""
    kind, _, settings = name.partition(":")
    words = [SPEC_KEYS[kind][key][value] for key, value in (item.split("=") for item in settings.split(","))]
    return f"{'ours' if kind == 'ours' else 'MarianMT + Seq2SeqTrainer'}: {', '.join(words)}"


def training_table(results: Path) -> str:
    """Our training step against MarianMT with Seq2SeqTrainer (scripts/benchmark_training.py)."""
    return contestants_table(read_json(results, "training_vs_trainer.json"))


def contestants_table(run: dict) -> str:
    """The contestants of a run: real tokens/s, their spread over rounds, the ratios, tokens per step, warm-up."""

    def ratio(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    rows = []
    for spec, figures in run["contestants"].items():
        spread = figures["round_tokens_per_second"]
        best = " (best)" if spec in (run["ours_best"], run["trainer_best"]) else ""
        rows.append([
            contestant_label(spec) + best,
            f"{figures['tokens_per_second']:,.0f}",
            f"{spread['median']:,.0f} [{spread['min']:,.0f}–{spread['max']:,.0f}]",
            ratio(figures["vs_baseline"]),
            ratio(figures["vs_trainer_best"]),
            f"{figures['tokens_per_step']:,.0f} / {figures['padded_tokens_per_step']:,.0f}",
            f"{figures['warmup_seconds']:.0f} s ({figures['warmup_compilations']})",
        ])  # fmt: skip
    header = ["contestant", "real tokens/s", "per round: median [min–max]", "vs its fp32 eager",
              "vs the Trainer's best", "real / padded tokens per step", "warm-up (graphs compiled)"]  # fmt: skip
    return table(header, ["l", "r", "r", "r", "r", "r", "r"], rows)


def training_summary(results: Path) -> str:
    """The training benchmark's findings: the ratio, padding, the step per padded token, the levers."""
    run = read_json(results, "training_vs_trainer.json")
    contestants = run["contestants"]
    ours, trainer = contestants[run["ours_best"]], contestants[run["trainer_best"]]

    def padding(figures: dict) -> float:
        return 1 - figures["tokens_per_step"] / figures["padded_tokens_per_step"]

    def per_padded(figures: dict) -> float:
        return figures["tokens_per_second"] / figures["tokens_per_step"] * figures["padded_tokens_per_step"]

    levers = {
        "compiled": [f for spec, f in contestants.items() if "compile=inductor" in spec and "precision=no" in spec],
        "fused": [f for spec, f in contestants.items() if spec.startswith("ours:") and "adam=fused" in spec
                  and "compile=no" in spec],
    }  # fmt: skip
    compiled = ", ".join(f"{figures['vs_baseline']:.2f}x" for figures in levers["compiled"])
    fused = ", ".join(f"{figures['vs_baseline']:.2f}x" for figures in levers["fused"])
    data_share = ours["data_seconds"] / ours["seconds"]
    return (
        f"ours {run['ratio']:.2f}x the Trainer's best in real tokens/s; padding {padding(ours):.1%} of our padded "
        f"tokens and {padding(trainer):.1%} of the Trainer's; per padded token, ours "
        f"{per_padded(ours) / per_padded(trainer):.2f}x; compiled against eager in fp32: {compiled} (ours, the "
        f"Trainer); fused Adam against the default: {fused}; building our batches: {data_share:.1%} of the step time"
        + preset_summary(contestants)
    )


def preset_summary(contestants: dict) -> str:
    """What the ``multi30k`` preset's own choices gave (`PRESET_CONTESTANT`), against the Trainer's best and against
    compiling the whole model; nothing where the run left them out (emulated bf16)."""
    preset, whole = contestants.get(PRESET_CONTESTANT), contestants.get(WHOLE_CONTESTANT)
    if preset is None:
        return ""
    text = (
        f"; the multi30k preset's choices (bf16, eager attention, compiled layer by layer): "
        f"{preset['tokens_per_second']:,.0f} tokens/s, {preset['vs_trainer_best']:.2f}x the Trainer's best"
    )
    if whole is not None:
        text += f", {preset['tokens_per_second'] / whole['tokens_per_second']:.2f}x the whole model compiled at once"
    return text


def training_environment(results: Path) -> str:
    """Where the training benchmark ran, and what it left out."""
    from vanilla_transformer.training.preflight import NATIVE_BF16_FLAGS

    run = read_json(results, "training_vs_trainer.json")
    settings, versions = run["settings"], run["versions"]
    flags = [flag for flag, present in run["cpu"]["flags"].items() if present]
    native = "native bf16" if set(flags) & set(NATIVE_BF16_FLAGS) else "no native bf16"
    skipped = len(run["skipped"])
    return (
        f"{run['cpu']['model']} ({', '.join(flags)}; {native}), {settings['threads']} threads, "
        f"{settings['rounds']} rounds of {settings['steps_per_round']} steps per contestant after "
        f"{settings['warmup_steps']} warm-up steps, {minutes(run['wall_seconds'])} in all, 1-minute load "
        f"{environment_load(run)}; torch {versions['torch']}, transformers "
        f"{versions['transformers']}, accelerate {versions['accelerate']}; "
        + (f"{skipped} bf16 contestants left out (emulated bf16)" if skipped else "no contestant left out")
    )


H200_CHECK = "gpu/2026-11-27-h200"
"""The one GPU run of the current training step: scripts/gpu_check.sh and its reruns on an H200 (check.json)."""


def gpu_training_table(results: Path) -> str:
    """Our training step against MarianMT with Seq2SeqTrainer on the H200, both eager in bf16."""
    return contestants_table(read_json(results / H200_CHECK, "training_eager.json"))


def gpu_training_summary(results: Path) -> str:
    """MFU, peak memory and the GPU's utilisation of the H200 run: what says the step waits on the host."""
    run = read_json(results / H200_CHECK, "training_eager.json")
    check = read_json(results / H200_CHECK, "check.json")
    busy = [sample["utilisation_percent"] for sample in check["utilisation_samples"] if sample["memory_mib"] > 1024]
    rows = [
        f"{contestant_label(spec).split(':')[0]} MFU {figures['mfu']:.2%}, peak memory "
        f"{figures['peak_memory_bytes'] / 2**30:.1f} GiB"
        for spec, figures in run["contestants"].items()
    ]
    rate = next(iter(run["contestants"].values()))["matmul_flops_per_second"]
    return (
        f"{'; '.join(rows)} (against the H200's measured bf16 matmul rate, {rate / 1e12:,.0f} TFLOP/s); GPU "
        f"utilisation {min(busy)}–{max(busy)}% in nvidia-smi's 1-second samples while our worker held its model "
        f"({len(busy)} samples: building it, the warm-up, the timed steps); {environment_load(run)} load, torch {run['versions']['torch']}, transformers "
        f"{run['versions']['transformers']}"
    )


FIGURES = {
    "training-table": training_table,
    "training-environment": training_environment,
    "training-summary": training_summary,
    "gpu-training-table": gpu_training_table,
    "gpu-training-summary": gpu_training_summary,
}


if __name__ == "__main__":
    sys.exit(main())
