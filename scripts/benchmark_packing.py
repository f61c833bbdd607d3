"""Packing (``config.pack_tokens``: the position-wise sublayers of a padded training batch run on its real tokens
only) on against off, in the jobs where it can run: eager CPU training in fp32, interleaved in one run.

Jobs, each on the same pairs (Multi30k's training pairs, tokenized as ``train --preset multi30k`` tokenizes them: the
CPU's training job) and the same model (``--model-size``, default ``multi30k``: N=3,
d_model=256):

* ``train``: ``vanilla-transformer train``'s step (`teacher_forced_logits`, then the label-smoothed
  `token_cross_entropy`, Adam) on its `TokenBatchSampler` batches of ``--max-tokens``;
* ``seq2seq_trainer``: `Seq2SeqTrainer`'s step (the model's own loss from ``labels``, Adam) on its default
  batches: pairs drawn at random, padded to the longest (``DataCollatorForSeq2Seq``), as many pairs per batch as
  hold the token batches' real tokens on average.

Contestants: the same weights twice, ``pack_tokens=False`` and ``True`` (``"auto"`` packs a CPU batch over 10%
padding: the share of batches it would pack is recorded), timed step by step in an order reversed every round
(`bench.interleave`). Each CPU capability runs in a process of its own: ``native`` (this CPU as torch, MKL and
oneDNN find it) and ``avx2``, an AVX2 machine emulated on the same CPU by ``ATEN_CPU_CAPABILITY=avx2``,
``MKL_ENABLE_INSTRUCTIONS=AVX2`` and ``ONEDNN_MAX_CPU_ISA=AVX2`` (the vector width and instructions of an AVX2 CPU,
not its caches or clock). Prints one line per job and capability::

    PACKING avx2 seq2seq_trainer padding=0.38 off=... on=... speedup=1.xx

Usage::

    flock /tmp/vt-timing.lock python scripts/benchmark_packing.py --output docs/results/packing_cpu.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from bench import Record, adam, collate, interleave, model_config, options, train_step
from bench.figures import environment_load, minutes, read_json, table, versions

CAPABILITIES: dict[str, dict[str, str]] = {
    "native": {},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"},
}
"""The environment of each capability's worker process: ATen's kernels, MKL's matrix products and oneDNN's."""

JOBS = ("train", "seq2seq_trainer")


# Data, built once by the coordinator


def build_examples(args: argparse.Namespace, folder: Path) -> dict:
    """The token ids of the training pairs (``folder/examples.json``), and what they are, for the results file."""
    from bench.processes import prepare_data

    train_options = ["--preset", "multi30k", "--vocab-size", str(args.vocab_size)]
    train_options += ["--data-dir", args.data_dir] if args.data_dir else []
    _, _, _, examples = prepare_data(train_options, folder, args.max_pairs)
    data = f"Multi30k en-de train, {len(examples):,} pairs, a {args.vocab_size:,}-token BPE"
    (folder / "examples.json").write_text(json.dumps(examples), encoding="utf-8")
    return {"data": data, "pairs": len(examples)}


def token_batches(examples: list[dict], max_tokens: int, seed: int) -> list[list[int]]:
    from vanilla_transformer.data import TokenBatchSampler, example_lengths

    return TokenBatchSampler(example_lengths(examples), max_tokens, seed=seed).epoch_batches(0)


def random_batches(examples: list[dict], real_tokens: float, count: int, seed: int) -> list[list[int]]:
    """`count` batches of pairs drawn at random (the Trainer's `RandomSampler`), each of as many pairs as hold
    `real_tokens` source + target tokens on average."""
    mean = np.mean([len(example["input_ids"]) + len(example["labels"]) for example in examples])
    size = max(1, round(real_tokens / mean))
    order = np.random.default_rng(seed).permutation(len(examples))
    return [order[start : start + size].tolist() for start in range(0, size * count, size)]


def padding_share(batch: dict[str, torch.Tensor]) -> float:
    real = batch["attention_mask"].sum() + (batch["labels"] != -100).sum()
    return 1.0 - float(real) / (batch["input_ids"].numel() + batch["labels"].numel())


# The worker: one capability, both jobs


def train_command_step(model: torch.nn.Module, label_smoothing: float = 0.1):
    """``vanilla-transformer train``'s step, as `training.step.accumulate_gradients` takes it on one process."""
    from vanilla_transformer.modeling_vanilla_transformer import token_cross_entropy
    from vanilla_transformer.training.step import teacher_forced_logits

    optimizer = adam(model)
    model.train()

    def step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        labels = batch["labels"]
        loss = token_cross_entropy(
            teacher_forced_logits(model, batch), labels, (labels != -100).sum(), label_smoothing=label_smoothing
        )
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def packed_a_batch(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> bool:
    """Whether `model` packed `batch` in training: its encoder's output is zero, not computed, at every padded
    source position."""
    with torch.no_grad():
        hidden = model.train()(**batch).encoder_last_hidden_state
    padded = batch["attention_mask"] == 0
    return bool(padded.any() and torch.all(hidden[padded] == 0))


def time_job(job: str, batches: list[dict], args: argparse.Namespace) -> dict:
    from vanilla_transformer.modeling_vanilla_transformer import (
        PACKING_THRESHOLDS,
        VanillaTransformerForConditionalGeneration,
    )

    torch.manual_seed(args.seed)
    config = model_config(args.model_size, args.vocab_size, pack_tokens=False)
    config._attn_implementation = "sdpa"
    models = {"off": VanillaTransformerForConditionalGeneration(config)}
    models["on"] = copy.deepcopy(models["off"])
    models["on"].config.pack_tokens = True
    packed = {name: packed_a_batch(model, batches[0]) for name, model in models.items()}
    if packed != {"off": False, "on": bool(padding_share(batches[0]) > 0)}:
        raise SystemExit(f"{job}: packing ran {packed}, not as configured")  # the contestants are what they say
    make_step = train_command_step if job == "train" else lambda model: train_step(model)
    steps = {name: make_step(model) for name, model in models.items()}
    timings = interleave(steps, batches, repeats=args.rounds, warmup=1)
    real = [float(b["attention_mask"].sum() + (b["labels"] != -100).sum()) for b in batches]
    shares = [padding_share(batch) for batch in batches]
    per_step = {name: statistics.median(timings.samples(name)) for name in steps}
    return {
        "batches": len(batches),
        "rounds": args.rounds,
        "mean_padding": statistics.mean(shares),
        "auto_packs_share": float(np.mean([share > PACKING_THRESHOLDS["cpu"] for share in shares])),
        "mean_pairs_per_batch": statistics.mean(len(b["input_ids"]) for b in batches),
        "mean_real_tokens": statistics.mean(real),
        "median_step_seconds": per_step,
        "real_tokens_per_second": {name: sum(real) / timings.total(name) for name, _ in per_step.items()},
        "speedup": timings.total("off") / timings.total("on"),
        "packed": packed,
    }


def worker_main(args: argparse.Namespace) -> int:
    torch.set_num_threads(args.threads)
    examples = json.loads((args.data / "examples.json").read_text(encoding="utf-8"))
    by_tokens = token_batches(examples, args.max_tokens, args.seed)[: args.batches]
    by_tokens = [collate([(examples[i]["input_ids"], examples[i]["labels"]) for i in batch]) for batch in by_tokens]
    real = statistics.mean(float(b["attention_mask"].sum() + (b["labels"] != -100).sum()) for b in by_tokens)
    at_random = random_batches(examples, real, args.batches, args.seed)
    at_random = [collate([(examples[i]["input_ids"], examples[i]["labels"]) for i in batch]) for batch in at_random]
    result = {
        "aten_capability": torch.backends.cpu.get_cpu_capability(),
        "environment": CAPABILITIES[args.worker],
        "jobs": {"train": time_job("train", by_tokens, args), "seq2seq_trainer": time_job("seq2seq", at_random, args)},
    }
    print(json.dumps(result))
    return 0


# The coordinator


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    options.check(args, {"--rounds": 1, "--batches": 1, "--threads": 1})
    if args.worker:
        return worker_main(args)
    record = Record(__file__, argv if argv is not None else sys.argv[1:])
    results = {}
    with tempfile.TemporaryDirectory(prefix="benchmark-packing-") as folder:
        built = build_examples(args, Path(folder))
        forwarded = [f"--{key.replace('_', '-')}={getattr(args, key)}" for key in FORWARDED]
        for capability in args.capabilities:
            command = [sys.executable, __file__, "--worker", capability, "--data", folder, *forwarded]
            env = {**os.environ, **CAPABILITIES[capability]}
            done = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True)
            results[capability] = json.loads(done.stdout.strip().splitlines()[-1])
            for job, row in results[capability]["jobs"].items():
                print(
                    f"PACKING {capability} {job} padding={row['mean_padding']:.2f} "
                    f"off={row['median_step_seconds']['off']:.3f}s on={row['median_step_seconds']['on']:.3f}s "
                    f"speedup={row['speedup']:.3f}"
                )
    settings = {key: getattr(args, key) for key in FORWARDED}
    record.write({**built, "settings": settings, "capabilities": results}, args.output)
    return 0


FORWARDED = ("model_size", "vocab_size", "max_tokens", "batches", "rounds", "threads", "seed")


def build_parser() -> argparse.ArgumentParser:
    parser = options.parser(__doc__)
    parser.add_argument("--model-size", default="multi30k", help="a model preset (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="BPE vocabulary (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per token batch (default: 4096)")
    parser.add_argument("--batches", type=int, default=6, help="batches of each job (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=2, help="passes over the batches (default: %(default)s)")
    parser.add_argument("--capabilities", nargs="+", choices=sorted(CAPABILITIES), default=list(CAPABILITIES))
    parser.add_argument("--data-dir", default=options.MULTI30K and str(options.MULTI30K), help="Multi30k's files")
    parser.add_argument("--max-pairs", type=int, default=None, help="use only the first N training pairs")
    parser.add_argument("--seed", type=int, default=0, help="initial weights and batch order")
    parser.add_argument("--worker", choices=sorted(CAPABILITIES), help=argparse.SUPPRESS)  # internal
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)  # internal: the coordinator's folder
    return parser


# Figures: name -> function of the results folder that returns the Markdown between a page's markers

JOB_NAMES = {
    "train": "`vanilla-transformer train`, token batches",
    "seq2seq_trainer": "`Seq2SeqTrainer`, random batches",
}


def capability_name(run: dict, capability: str) -> str:
    """``AVX512 (this CPU, native bf16)`` or ``AVX2 (emulated on this CPU)``: the ATen capability the worker ran."""
    measured = run["capabilities"][capability]["aten_capability"]
    if capability != "native":
        return f"{measured} (emulated on this CPU)"
    native_bf16 = bool({"avx512_bf16", "amx_bf16"} & set(run.get("processor_features") or ()))
    return f"{measured} (this CPU{', native bf16' if native_bf16 else ''})"


def packing_table(results: Path) -> str:
    run = read_json(results, "packing_cpu.json")
    rows = []
    for capability, measured in run["capabilities"].items():
        for job, row in measured["jobs"].items():
            seconds = row["median_step_seconds"]
            rows.append(
                [
                    capability_name(run, capability),
                    JOB_NAMES[job],
                    f"{row['mean_padding']:.1%}",
                    f"{row['auto_packs_share']:.0%}",
                    f"{seconds['off']:.2f} s",
                    f"{seconds['on']:.2f} s",
                    f"{row['speedup']:.2f}x",
                ]
            )
    header = ["CPU", "job", "padding", "`auto` packs", "step, off", "step, on", "on / off"]
    return table(header, ["l", "l", "r", "r", "r", "r", "r"], rows)


def packing_environment(results: Path) -> str:
    run = read_json(results, "packing_cpu.json")
    settings = run["settings"]
    return (
        f"{run['processor']}, {settings['threads']} thread, the {settings['model_size']} model (fp32, eager, SDPA "
        f"attention) on {run['data']}; {settings['batches']} batches of each job, {settings['rounds']} rounds; "
        f"{minutes(run['wall_seconds'])} in all, 1-minute load {environment_load(run)} (the 2 cores shared with "
        f"other work); {versions(run, 'torch', 'transformers')}"
    )


FIGURES = {"packing-table": packing_table, "packing-environment": packing_environment}


if __name__ == "__main__":
    sys.exit(main())
