"""Our training step against MarianMT in `Seq2SeqTrainer` and against plain PyTorch, each at its best settings, in
one interleaved run.

Workload: the model ``--model-size`` (default ``multi30k``: N=3, d_model=256) or ``--preset``'s (``wmt14-base``: base,
37,000 tokens, 4 micro-batches of 12,500 padded tokens), on Multi30k en->de train (``--data-dir``) or on
``--synthetic-pairs`` of WMT14's lengths, the token ids built once (`build_data`). Ours and plain PyTorch take the
same `TokenBatchSampler` batches (plain PyTorch cut as ``ours:default`` planned them, when it runs); the Trainer a batch size whose length-grouped batches hold as many padded tokens
on average (`trainer_batch_size`).

Contestants: the kit's (`bench.contestants`), each in a process of its own, named by ``--contestants`` as
``KIND:key=value,...``: ``ours`` (our `Trainer` built from ``train`` options; ``ours:default`` is ``train``'s
default as-is, with ``--preset`` and no ``--max-tokens`` or ``--grad-accum`` its micro-batches too: the plan ``train``
makes from the GPU's memory), ``trainer`` (MarianMT of the same weights in `Seq2SeqTrainer`) and ``torch`` (plain PyTorch), each
side also in fp32 eager as its baseline; bf16 ones left out where the CPU emulates bf16, unless named.

Loop: the kit's interleaved timer: ``--warmup-steps`` steps each (compilation included, reported apart), then
``--rounds`` rounds of ``--steps-per-round`` steps per contestant in an order reversed every round, then
``--profile-steps`` under the profiler. Record: real (non-padding) source + target tokens per second, its spread over
rounds, MFU against the device's measured matmul rate, the ratios. Figures: ``FIGURES``. Ratios are what to read:
absolute figures describe this machine at that moment only. Prints a table and one line::

    TRAINING ours_best=... trainer_best=... ratio=...

Usage::

    python scripts/benchmark_training.py --threads 2 --output docs/results/training_vs_trainer.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench import Record, options, synthetic_pairs
from bench.contestants import Spec, add_mfu, compare, label, parse_contestants, summarise, worker_main
from bench.figures import environment_load, minutes, read_json, table, versions
from bench.processes import prepare_data, run_contestants

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
    "torch:precision=no,compile=no",
    "torch:precision=bf16,compile=inductor",
    "ours:default",
)
"""Each side's fp32 eager baseline and its candidates for best (bf16 ones skipped where bf16 is emulated), and
``train``'s default as-is."""

SETTINGS = ("model_size", "vocab_size", "max_tokens", "rounds", "steps_per_round", "warmup_steps", "threads")
SETTINGS += ("max_pairs", "data_dir", "seed", "device", "grad_accum", "preset", "planned", "profile_steps")
"""The options the results file records."""


# Data, built once by the coordinator


SYNTHETIC_LENGTHS = ((3.200, 0.511), (3.117, 0.525))
"""Log-normal fits (log-mean, log-std) of WMT14 En-De sentence lengths in tokens, source and target (newstest2014's
words times 1.35, a 37k BPE's typical tokens per word, plus ``</s>``): means of 28 and 26 tokens."""


def build_data(args: argparse.Namespace, folder: Path) -> tuple[dict[str, Any], list[dict]]:
    """The tokenizer and token cache of Multi30k's training pairs as `train` builds them (`bench.prepare_data`: a
    BPE of ``--vocab-size``), and the same ids for the Trainer (``folder/examples.json``). With ``--synthetic-pairs``,
    that many pairs of random ids with WMT14's lengths (`SYNTHETIC_LENGTHS`) instead, for a machine without the
    corpus (a GPU machine): a step's speed depends on the lengths, not on the words; the tokenizer then serves for
    padding only. Returns what was built, for the results file, and the examples."""
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
        train_options = ["--preset", "multi30k", "--vocab-size", str(args.vocab_size)]
        train_options += ["--data-dir", args.data_dir] if args.data_dir else []  # else $VANILLA_TRANSFORMER_DATA
        config, _, tokenizer, examples = prepare_data(train_options, folder, args.max_pairs)
        built = {"max_length": config.data.max_length}
    if len(tokenizer) > args.vocab_size:
        raise SystemExit(f"--vocab-size={args.vocab_size} is below the tokenizer's {len(tokenizer)} tokens")
    (folder / "examples.json").write_text(json.dumps(examples), encoding="utf-8")
    return {"pairs": len(examples), "tokenizer_size": len(tokenizer), **built}, examples


def trainer_batch_size(lengths: list[tuple[int, int]], max_tokens: int, seed: int) -> dict[str, Any]:
    """The Trainer's batch size B whose length-grouped batches hold, on average, as many padded tokens (source +
    target) as our `TokenBatchSampler` batches of `max_tokens`; both means, computed on the data."""
    from transformers.trainer_pt_utils import get_length_grouped_indices

    from vanilla_transformer.data import TokenBatchSampler

    source, target = (np.array(side) for side in zip(*lengths, strict=True))

    def padded(batches) -> float:  # the mean padded source + target tokens of batches of example indices
        return float(np.mean([len(batch) * (source[batch].max() + target[batch].max()) for batch in batches]))

    def trainer_mean(batch_size: int) -> float:
        generator = torch.Generator().manual_seed(seed)
        order = np.array(get_length_grouped_indices(source.tolist(), batch_size, generator=generator))
        return padded(order[start : start + batch_size] for start in range(0, len(order), batch_size))

    ours_mean = padded(TokenBatchSampler(lengths, max_tokens, seed=seed).epoch_batches(0))
    guess = max(1, round(ours_mean / float(np.mean(source + target))))
    candidates = range(max(1, guess // 2), guess + 1)
    chosen = min(candidates, key=lambda size: abs(trainer_mean(size) - ours_mean))
    return {"batch_size": chosen, "ours_padded_per_step": ours_mean, "trainer_padded_per_step": trainer_mean(chosen)}


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

    try:
        specs = parse_contestants(args.contestants or " ".join(DEFAULT_CONTESTANTS))
    except ValueError as error:
        raise SystemExit(f"benchmark_training.py: --contestants: {error}") from None
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
        built, examples = build_data(args, data)
        batching = trainer_batch_size(example_lengths(examples), args.max_tokens, args.seed)
        print(f"data: {built['pairs']:,} pairs; Trainer batch size {batching['batch_size']}", file=sys.stderr)
        figures, order = run_contestants(__file__, args, specs, data, batching["batch_size"])
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
        + (f"torch_best={comparison['torch_best']} " if "torch_best" in comparison else "")
        + (f"ratio={comparison['ratio']:.3f}" if comparison["ratio"] is not None else "ratio=- (a side has none)")
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    from vanilla_transformer.configuration_vanilla_transformer import PRESETS

    parser = options.parser(__doc__)
    parser.add_argument("--contestants", help=f"comma/space separated (default: {shlex.join(DEFAULT_CONTESTANTS)})")
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds (default: %(default)s)")
    parser.add_argument("--steps-per-round", type=int, default=5, help="steps per contestant and round (K)")
    parser.add_argument("--warmup-steps", type=int, default=10, help="steps before measuring, compilation included")
    parser.add_argument(
        "--data-dir",
        default=options.MULTI30K and str(options.MULTI30K),
        help="Multi30k's files (default: %(default)s)",
    )
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
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one contestant
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)  # internal: the coordinator's data folder
    parser.add_argument("--batch-size", type=int, help=argparse.SUPPRESS)  # internal: the Trainer's batch size
    parser.add_argument("--planned", action="store_true", help=argparse.SUPPRESS)  # internal: see `resolve`
    parser.add_argument("--default-plan", type=int, nargs=2, help=argparse.SUPPRESS)  # internal: for plain PyTorch
    return parser


def resolve(args: argparse.Namespace) -> argparse.Namespace:
    """Fill the model size, vocabulary and micro-batches from ``--preset`` (`micro_batch_plan` on one process) or
    the defaults, and ``--device auto``. ``planned``: micro-batches not given with a preset, so that ``ours:default``
    takes the plan ``train`` makes on the device (from the GPU's memory with ``--fill-gpu-memory``)."""
    args.planned = args.planned or bool(args.preset and args.max_tokens is None and args.grad_accum is None)
    defaults = {"model_size": "multi30k", "vocab_size": 8000, "max_tokens": 4096, "grad_accum": 1}
    if args.preset:
        from vanilla_transformer.training import parse_args
        from vanilla_transformer.training.step import micro_batch_plan

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
    counts = ("--rounds", "--steps-per-round", "--warmup-steps", "--threads", "--max-tokens", "--grad-accum")
    options.check(args, dict.fromkeys(counts, 1))
    return worker_main(args) if args.worker else coordinator_main(args)


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def training_table(results: Path, name: str = "training_vs_trainer.json") -> str:
    """Our training step against MarianMT with Seq2SeqTrainer (scripts/benchmark_training.py), as the committed
    results file `name` has it (the H200's: `H200_CHECK`)."""
    return contestants_table(read_json(results, name))


def contestants_table(run: dict) -> str:
    """The contestants of a run: real tokens/s, their spread over rounds, the ratios, tokens per step, warm-up."""

    def ratio(value: float | None) -> str:
        return f"{value:.2f}x" if value is not None else "-"

    rows = []
    for spec, figures in run["contestants"].items():
        spread = figures["round_tokens_per_second"]
        best = " (best)" if spec in (run["ours_best"], run["trainer_best"], run.get("torch_best")) else ""
        rows.append([
            label(spec, figures) + best,
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
    """The training benchmark's findings: the ratio, padding, the step per padded token, the levers, and what the
    ``multi30k`` preset's own choices gave (`PRESET_CONTESTANT`) against the Trainer's best and the whole model
    compiled at once (`WHOLE_CONTESTANT`)."""
    run = read_json(results, "training_vs_trainer.json")
    contestants = run["contestants"]
    ours, trainer = contestants[run["ours_best"]], contestants[run["trainer_best"]]

    def padding(figures: dict) -> float:
        return 1 - figures["tokens_per_step"] / figures["padded_tokens_per_step"]

    def per_padded(figures: dict) -> float:
        return figures["tokens_per_second"] / figures["tokens_per_step"] * figures["padded_tokens_per_step"]

    levers = {
        "compiled": [f for spec, f in contestants.items() if "compile=inductor" in spec and "precision=no" in spec
                     and not spec.startswith("torch:")],
        "fused": [f for spec, f in contestants.items() if spec.startswith("ours:") and "adam=fused" in spec
                  and "compile=no" in spec],
    }  # fmt: skip
    compiled = ", ".join(f"{figures['vs_baseline']:.2f}x" for figures in levers["compiled"])
    fused = ", ".join(f"{figures['vs_baseline']:.2f}x" for figures in levers["fused"])
    data_share = ours["data_seconds"] / ours["seconds"]
    preset, whole = contestants[PRESET_CONTESTANT], contestants[WHOLE_CONTESTANT]  # the committed run has both
    return (
        f"ours {run['ratio']:.2f}x the Trainer's best in real tokens/s; padding {padding(ours):.1%} of our padded "
        f"tokens and {padding(trainer):.1%} of the Trainer's; per padded token, ours "
        f"{per_padded(ours) / per_padded(trainer):.2f}x; compiled against eager in fp32: {compiled} (ours, the "
        f"Trainer); fused Adam against the default: {fused}; building our batches: {data_share:.1%} of the step "
        f"time; the multi30k preset's choices (bf16, eager attention, compiled layer by layer): "
        f"{preset['tokens_per_second']:,.0f} tokens/s, {preset['vs_trainer_best']:.2f}x the Trainer's best, "
        f"{preset['tokens_per_second'] / whole['tokens_per_second']:.2f}x the whole model compiled at once"
    )


def training_environment(results: Path) -> str:
    """Where the training benchmark ran, and what it left out."""
    from vanilla_transformer.training.preflight import NATIVE_BF16_FLAGS

    run = read_json(results, "training_vs_trainer.json")
    settings = run["settings"]
    flags = [flag for flag, present in run["cpu"]["flags"].items() if present]
    native = "native bf16" if set(flags) & set(NATIVE_BF16_FLAGS) else "no native bf16"
    skipped = len(run["skipped"])
    return (
        f"{run['cpu']['model']} ({', '.join(flags)}; {native}), {settings['threads']} threads, "
        f"{settings['rounds']} rounds of {settings['steps_per_round']} steps per contestant after "
        f"{settings['warmup_steps']} warm-up steps, {minutes(run['wall_seconds'])} in all, 1-minute load "
        f"{environment_load(run)}; {versions(run, 'torch', 'transformers', 'accelerate')}; "
        + (f"{skipped} bf16 contestants left out (emulated bf16)" if skipped else "no contestant left out")
    )


H200_CHECK = "gpu/2026-11-27-h200"
"""The one GPU run of the current training step: scripts/gpu_check.sh and its reruns on an H200 (check.json)."""


def gpu_training_summary(results: Path) -> str:
    """MFU, peak memory and the GPU's utilisation of the H200 run: what says the step waits on the host."""
    run = read_json(results / H200_CHECK, "training_eager.json")
    check = read_json(results / H200_CHECK, "check.json")
    busy = [sample["utilisation_percent"] for sample in check["utilisation_samples"] if sample["memory_mib"] > 1024]
    rows = [
        f"{label(spec).split(':')[0]} MFU {figures['mfu']:.2%}, peak memory "
        f"{figures['peak_memory_bytes'] / 2**30:.1f} GiB"
        for spec, figures in run["contestants"].items()
    ]
    rate = next(iter(run["contestants"].values()))["matmul_flops_per_second"]
    return (
        f"{'; '.join(rows)} (against the H200's measured bf16 matmul rate, {rate / 1e12:,.0f} TFLOP/s); GPU "
        f"utilisation {min(busy)}–{max(busy)}% in nvidia-smi's 1-second samples while our worker held its model "
        f"({len(busy)} samples: building it, the warm-up, the timed steps); {environment_load(run)} load, "
        f"{versions(run, 'torch', 'transformers')}"
    )


PAPER = "paper_wmt14.json"
"""What the paper states of its WMT14 runs (steps, tokens, step time, hours on 8 P100s), for the plan's other side."""


def wmt14_plan(results: Path, preset: str = "wmt14-base") -> str:
    """The plan of `preset`: the paper's figures beside ours, each cell marked stated (the paper), set (the preset),
    measured or projected, with the file it comes from. Ours: the one committed GPU measurement of the preset's step
    (`H200_CHECK`); the hours are projected from it, and 8 GPUs were never measured together."""
    from vanilla_transformer.training.presets import TRAINING_PRESETS

    paper = read_json(results, PAPER)["presets"][preset]
    run = read_json(results / H200_CHECK, "training_eager.json")
    ours = run["contestants"][run["ours_best"]]
    steps, tokens = TRAINING_PRESETS[preset]["max_steps"], TRAINING_PRESETS[preset]["tokens_per_step"]
    seconds = ours["tokens_per_step"] / ours["tokens_per_second"]
    hours = steps * seconds / 3600
    paper_rate = paper["tokens_per_step"] / paper["seconds_per_step"] / 8
    measured = f"measured, [{H200_CHECK}/training_eager.json](results/{H200_CHECK}/training_eager.json)"
    projected = f"projected from {H200_CHECK}/training_eager.json"
    stated, from_paper = f"stated, [{PAPER}](results/{PAPER})", f"projected from {PAPER}"
    chosen = f"{ours['precision']}, {'eager' if ours['compile'] == 'no' else 'compiled'}, {ours['attn'].upper()}"
    gpu = run["gpus"][0] if run.get("gpus") else "one GPU"
    rows = [
        ["steps", f"{paper['steps']:,}", stated, f"{steps:,}", "set by the preset (training/presets.py)"],
        ["tokens per step", f"≈{paper['tokens_per_step']:,} (25,000 + 25,000)", stated,
         f"{tokens:,} padded; {ours['tokens_per_step']:,.0f} real of {ours['padded_tokens_per_step']:,.0f} padded",
         f"set by the preset; real/padded {measured}"],
        ["tokens/s per GPU", f"≈{paper_rate:,.0f} (P100)", f"{from_paper}: tokens per step / 0.4 s / 8",
         f"{ours['tokens_per_second']:,.0f} real ({gpu}; {chosen}; {versions(run, 'torch')}; {run['started'][:10]})",
         measured],
        ["seconds per step", f"{paper['seconds_per_step']} (8 GPUs)", stated, f"{seconds:.2f} (1 GPU)",
         f"{projected}: real tokens per step / tokens/s"],
        ["hours on 1 GPU", f"{8 * paper['hours_on_8']:,}", f"{from_paper}: 8 × its hours on 8, not stated",
         f"{hours:,.1f}", f"{projected}: steps × seconds per step"],
        ["hours on 8 GPUs", f"{paper['hours_on_8']:,}", stated, f"{hours / 8:,.1f}",
         f"{projected}: if each of 8 GPUs kept one GPU's rate (8 GPUs not measured together)"],
    ]  # fmt: skip
    header = ["", "the paper (8 P100)", "the paper's: how known", f"ours ({gpu})", "ours: how known"]
    return table(header, ["l", "r", "l", "r", "l"], rows)


FIGURES = {
    "wmt14-plan": wmt14_plan,
    "training-table": training_table,
    "training-environment": training_environment,
    "training-summary": training_summary,
    "gpu-training-table": partial(training_table, name=f"{H200_CHECK}/training_eager.json"),  # both eager, bf16
    "gpu-training-summary": gpu_training_summary,
}


if __name__ == "__main__":
    sys.exit(main())
