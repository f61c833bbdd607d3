"""LoRA against full fine-tuning: time per training step, trainable parameters, and generate() speed with an adapter.

Two copies of one saved model train side by side on the same batches of the built-in numbers task, on a fixed
number of CPU threads: ``full`` (every weight trainable) and ``lora`` (a LoRA adapter, `add_lora`, the rest frozen).
Each step is the model's loss, its backward pass and an Adam step (`bench.train_step`: the package's Adam, the
paper's betas) over the trainable parameters. The contestants run interleaved (`bench.interleave`: A, B on one
batch, B, A on the next), the first ``--warmup`` batches are not timed, and the median time per step is reported, so
that load from other processes slows both alike: read the ratios, not the absolute figures.

Then ``generate()`` (greedy and beam ``--num-beams``) of the same sentences, interleaved the same way: ``plain``
(the model without adapter), ``adapter`` (the trained LoRA model, a peft ``PeftModel``), ``merged`` (its
``merge_and_unload()``) and ``marian_adapter`` (the same network as a ``MarianMTModel``, `vanilla_to_marian`, with
the same adapter: what a user of transformers' own model would run), in generated tokens per second. All four run
transformers' search semantics (the |Y|^alpha length penalty, ``max_new_tokens``), which MarianMT shares; the
adapter's, the merged model's and the Marian twin's translations must be the same.

Usage (the model of ``vanilla-transformer train``; ``--json`` writes the figures with the command, the wall time,
the load average before and after, and the package versions, and the same is printed)::

    python scripts/benchmark_lora.py --model runs/numbers/model --threads 2 --json docs/results/lora.json
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from bench import Record, adam, interleave, options, train_step
from bench.figures import read_json, table, versions
from bench.serving import translate
from transformers import DataCollatorForSeq2Seq, GenerationConfig

from vanilla_transformer.data import make_numbers_task, tokenize_pairs
from vanilla_transformer.export.marian import marian_permutation, vanilla_to_marian
from vanilla_transformer.extras import import_optional
from vanilla_transformer.metrics import exact_match
from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.training.lora import add_lora

NUMBERS = {  # option: (default, help), each a number of at least 1 (--warmup: 0)
    "threads": (2, "torch CPU threads"),
    "steps": (60, "timed training steps of each"),
    "warmup": (5, "untimed first steps"),
    "batch-size": (64, "sentence pairs per step"),
    "lora-r": (8, "LoRA rank"),
    "lora-alpha": (16, "LoRA alpha"),
    "learning-rate": (1e-4, "Adam's rate, full fine-tuning"),
    "lora-learning-rate": (1e-3, "Adam's rate, the adapter"),
    "score-sentences": (300, "held-out pairs scored after training"),
    "generate-batches": (8, "batches to translate"),
    "generate-batch-size": (32, "sentences each"),
    "num-beams": (4, "beam size of the beam run"),
}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = options.parser(__doc__, threads=None, output=None)
    parser.add_argument("--model", default="runs/numbers/model", help="model directory (default: %(default)s)")
    parser.add_argument("--json", type=Path, required=True, help="write the results to this JSON file")
    parser.add_argument(
        "--lora-target-modules", default="q_proj,v_proj", help="comma-separated (default: %(default)s)"
    )
    parser.add_argument("--device", default="cpu", help="default: %(default)s")
    for name, (default, text) in NUMBERS.items():
        parser.add_argument(f"--{name}", type=type(default), default=default, help=f"{text} (default: %(default)s)")
    args = parser.parse_args(argv)
    counts = [name for name, (default, _) in NUMBERS.items() if isinstance(default, int)]
    options.check(args, {f"--{name}": 0 if name == "warmup" else 1 for name in counts})
    args.targets = [name.strip() for name in args.lora_target_modules.split(",")]
    return args


def sentence_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """`count` pairs of the numbers task (numbers of 1..99,999, as `vanilla-transformer train` draws them)."""
    return make_numbers_task(count, 0, 0, seed=seed).train


def training_batches(tokenizer, model, pairs: Sequence[tuple[str, str]], batch_size: int, device) -> list[dict]:
    """Padded batches of `pairs` tokenized as training tokenizes them (`tokenize_pairs`), with labels and the decoder
    inputs the Trainer's collator makes; the last pairs short of a whole batch are left out."""
    collator, examples = DataCollatorForSeq2Seq(tokenizer, model=model), tokenize_pairs(pairs, tokenizer)
    return [
        {key: value.to(device) for key, value in collator(examples[start : start + batch_size]).items()}
        for start in range(0, len(examples) - batch_size + 1, batch_size)
    ]


def trainable_parameters(model: torch.nn.Module) -> dict[str, int]:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return {"trainable": trainable, "total": sum(p.numel() for p in model.parameters())}


def summarize(seconds: Sequence[float]) -> dict[str, float]:
    return {
        "median_s": statistics.median(seconds),
        "mean_s": statistics.fmean(seconds),
        "min_s": min(seconds),
        "max_s": max(seconds),
        "count": len(seconds),
    }


def benchmark_training(args: argparse.Namespace, base, tokenizer, pairs) -> tuple[dict, dict[str, torch.nn.Module]]:
    """Time per step of full and LoRA fine-tuning on the same batches of `pairs`; the figures and the two models."""
    full = copy.deepcopy(base)
    lora = add_lora(
        copy.deepcopy(base), r=args.lora_r, alpha=args.lora_alpha, dropout=0.0, target_modules=args.targets
    )
    for model in (full, lora):
        model.to(args.device)
    batches = training_batches(tokenizer, full, pairs, args.batch_size, args.device)
    losses: dict[str, list[float]] = {"full": [], "lora": []}
    rates = {"full": args.learning_rate, "lora": args.lora_learning_rate}
    # `bench.train_step`: loss, backward, the package's Adam, which leaves the frozen parameters alone.
    steps = {
        name: train_step(model, adam(model, rates[name], "auto")) for name, model in (("full", full), ("lora", lora))
    }
    # Each contestant steps through the batches in turn: the warm-up steps train on the first --warmup of them.
    feeds = {name: iter(batches) for name in steps}
    contestants = {name: (lambda _, n=name: losses[n].append(steps[n](next(feeds[n])).item())) for name in steps}
    timings = interleave(contestants, range(len(batches) - args.warmup), warmup=args.warmup)
    figures = {name: summarize(timings.samples(name)) for name in steps}
    result = {
        "batches": len(batches),
        "batch_size": args.batch_size,
        "target_tokens_per_batch": statistics.fmean(int((b["labels"] != -100).sum()) for b in batches),
        "seconds_per_step": figures,
        "lora_over_full_median": figures["lora"]["median_s"] / figures["full"]["median_s"],
        "parameters": {"full": trainable_parameters(full), "lora": trainable_parameters(lora)},
        "learning_rate": rates,
        "final_loss": {name: values[-1] for name, values in losses.items()},
    }
    return result, {"full": full.eval(), "lora": lora.eval()}


def score_models(args: argparse.Namespace, models: dict[str, torch.nn.Module], tokenizer, pairs) -> dict[str, Any]:
    """Exact match (%) of each model on held-out pairs (none of them among the fine-tuning pairs `pairs`), with the
    paper's search (`translate`, beam 4, GNMT's penalty 0.6)."""
    seen = {source for source, _ in pairs}
    held_out = [pair for pair in sentence_pairs(4 * args.score_sentences, seed=3) if pair[0] not in seen]
    held_out = held_out[: args.score_sentences]
    sources, references = [s for s, _ in held_out], [t for _, t in held_out]
    scores = {name: exact_match(translate(model, tokenizer, sources), references) for name, model in models.items()}
    return {"sentences": len(held_out), "search": "beam 4, GNMT alpha 0.6", "exact_match": scores}


def marian_with_adapter(lora, targets: Sequence[str], r: int, alpha: int):
    """The LoRA model's base as a `MarianMTModel` with the same adapter: Marian orders the model dimension
    differently (`marian_permutation`), so each LoRA matrix that reads the residual stream (A of q/k/v_proj, fc1)
    is permuted along it, and each that writes it (B of out_proj, fc2) along its rows."""
    peft = import_optional("peft", "peft", "scripts/benchmark_lora.py")
    base = copy.deepcopy(lora).unload()
    marian = vanilla_to_marian(base)
    config = peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets))
    marian = peft.get_peft_model(marian, config)
    inverse = torch.argsort(marian_permutation(base.config.d_model))
    ours = {name: p for name, p in lora.named_parameters() if ".lora_" in name}
    with torch.no_grad():
        for name, parameter in marian.named_parameters():
            if ".lora_" not in name:
                continue
            weight = ours[name]
            if ".lora_A." in name and not name.split(".lora_A.")[0].endswith(("out_proj", "fc2")):
                weight = weight[:, inverse]
            elif ".lora_B." in name and name.split(".lora_B.")[0].endswith(("out_proj", "fc2")):
                weight = weight[inverse]
            parameter.copy_(weight)
    return marian.eval()


def benchmark_generate(args: argparse.Namespace, base, lora, tokenizer) -> dict[str, Any]:
    """generate() of the plain model, the adapter model, the merged model and the Marian twin with the same
    adapter, greedy and beam, interleaved."""
    merged = copy.deepcopy(lora).merge_and_unload().eval()
    marian = marian_with_adapter(lora, args.targets, args.lora_r, args.lora_alpha).to(args.device)
    models = {"plain": base.eval(), "adapter": lora.eval(), "merged": merged, "marian_adapter": marian}
    for model in models.values():  # transformers' search semantics for all: the paper's fields off
        # A peft model's generate() reads its base model's config, not the wrapper's attribute.
        (model.get_base_model() if hasattr(model, "get_base_model") else model).generation_config = GenerationConfig(
            decoder_start_token_id=base.config.decoder_start_token_id,
            eos_token_id=base.config.eos_token_id,
            pad_token_id=base.config.pad_token_id,
        )
    sources = [s for s, _ in sentence_pairs(args.generate_batches * args.generate_batch_size, seed=2)]
    batches = [
        tokenizer(sources[i : i + args.generate_batch_size], padding=True, return_tensors="pt").to(args.device)
        for i in range(0, len(sources), args.generate_batch_size)
    ]
    results: dict[str, Any] = {}
    for label, num_beams in (("greedy", 1), (f"beam{args.num_beams}", args.num_beams)):
        search = {"num_beams": num_beams, "do_sample": False, "max_new_tokens": 64}
        contestants = {
            name: torch.no_grad()(lambda batch, model=model, search=search: model.generate(**batch, **search))
            for name, model in models.items()
        }
        timings = interleave(contestants, batches)  # warm-up: the first batch, once more before the rounds
        seconds, outputs = {name: timings.samples(name) for name in models}, timings.returned
        pad = tokenizer.pad_token_id
        tokens = {name: sum(int((out[:, 1:] != pad).sum()) for out in outputs[name]) for name in models}
        results[label] = {
            name: {"tokens_per_s": tokens[name] / sum(seconds[name]), **summarize(seconds[name])} for name in models
        }
        for other in ("merged", "marian_adapter"):
            same = all(torch.equal(a, b) for a, b in zip(outputs["adapter"], outputs[other], strict=True))
            results[label][f"adapter_equals_{other.removesuffix('_adapter')}"] = same
        results[label]["adapter_over_marian"] = (
            results[label]["adapter"]["tokens_per_s"] / results[label]["marian_adapter"]["tokens_per_s"]
        )
    results["sentences"] = len(sources)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    record = Record(__file__, None if argv is None else list(argv))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    base, tokenizer = load_model_dir(args.model, args.device)
    pairs = sentence_pairs((args.steps + args.warmup) * args.batch_size, seed=1)  # the fine-tuning pairs
    training, tuned = benchmark_training(args, base, tokenizer, pairs)
    training["score"] = score_models(args, {"base": base, **tuned}, tokenizer, pairs)
    generation = benchmark_generate(args, base, tuned["lora"], tokenizer)
    results = {
        "threads": args.threads,
        "device": args.device,
        "model": str(args.model),
        "lora": {"r": args.lora_r, "alpha": args.lora_alpha, "target_modules": args.lora_target_modules},
        "training": training,
        "generate": generation,
    }
    print(json.dumps(record.write(results, args.json), indent=1))
    print(f"wrote {args.json}")
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def lora_table(results: Path) -> str:
    """LoRA against full fine-tuning (scripts/benchmark_lora.py): parameters, step time, the score reached."""
    run = read_json(results, "lora.json")
    training = run["training"]
    params, steps, score = training["parameters"], training["seconds_per_step"], training["score"]
    share = params["lora"]["trainable"] / params["full"]["trainable"]
    rates = training["learning_rate"]
    rows = [
        ["trainable parameters", f"{params['full']['trainable']:,}", f"{params['lora']['trainable']:,} ({share:.1%})"],
        ["Adam's learning rate", f"{rates['full']:g}", f"{rates['lora']:g}"],
        ["training step, median", f"{1000 * steps['full']['median_s']:.1f} ms",
         f"{1000 * steps['lora']['median_s']:.1f} ms ({training['lora_over_full_median']:.2f}x)"],
        [f"exact match on {score['sentences']} held-out pairs after {training['batches']} steps "
         f"(the base model: {score['exact_match']['base']:.1f}%)",
         f"{score['exact_match']['full']:.1f}%", f"{score['exact_match']['lora']:.1f}%"],
    ]  # fmt: skip
    return table(["", "full fine-tuning", "LoRA"], ["l", "r", "r"], rows)


def lora_generate_table(results: Path) -> str:
    """generate() with the adapter: ours (unmerged, merged) against MarianMT with the same adapter."""
    generate = read_json(results, "lora.json")["generate"]
    rows = []
    for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
        figures = generate[key]
        speeds = [f"{figures[name]['tokens_per_s']:,.0f}" for name in ("plain", "adapter", "merged", "marian_adapter")]
        same = "yes" if figures["adapter_equals_merged"] and figures["adapter_equals_marian"] else "**no**"
        rows.append([search, *speeds, f"{figures['adapter_over_marian']:.2f}x", same])
    header = ["search", "plain", "with the adapter", "merged", "MarianMT with the adapter", "adapter: ours / Marian"]
    return table([*header, "same tokens"], ["l", "r", "r", "r", "r", "r", "l"], rows)


def lora_environment(results: Path) -> str:
    run = read_json(results, "lora.json")
    return (
        f"{versions(run, 'transformers', 'peft')}, {run['threads']} threads, 1-minute load "
        f"{run['load_average_start'][0]:.1f} before and {run['load_average_end'][0]:.1f} after"
    )


FIGURES = {"lora-table": lora_table, "lora-generate-table": lora_generate_table, "lora-environment": lora_environment}


if __name__ == "__main__":
    raise SystemExit(main())
