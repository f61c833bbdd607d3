"""Render every published figure of README.md, docs/*.md and the model card from its results file in docs/results.

A figure sits between markers, ``<!-- figure: NAME -->`` ... ``<!-- /figure -->``: a table on lines of its own, or a
few words inside a sentence. This script rewrites what lies between the markers from the JSON the program or
benchmark wrote, so no figure is typed by hand and none can drift from its file.

    python scripts/render_figures.py            # rewrite the figures in place
    python scripts/render_figures.py --check    # exit 1, naming each figure that differs from its file

``tests/test_published_figures.py`` runs the check.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path

from bench import environment_of

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- figure: (?P<name>[a-z0-9-]+) -->(?P<body>.*?)<!-- /figure -->", re.DOTALL)
MULTI30K_RUNS = [  # (folder, label), in the order of the table
    ("en-de-seed1", "English → German, seed 1 (recipe)"),
    ("en-de-seed2", "English → German, seed 2 (recipe)"),
    ("en-de-seed3", "English → German, seed 3 (recipe)"),
    ("de-en-seed1", "German → English, seed 1 (recipe)"),
    ("de-en-seed2", "German → English, seed 2 (recipe)"),
    ("en-de-10min-seed1", "English → German, 10 minutes, seed 1"),
    ("en-de-dropout0.1-seed1", "selection run: English → German, P_drop 0.1, 54 min, α 0.6"),
    ("en-de-avx2-seed1", "English → German, seed 1, on a CPU without native bf16 (AVX2): fp32"),
    ("de-en-avx2-seed1", "German → English, seed 1, on a CPU without native bf16 (AVX2): fp32"),
]


def read_json(results: Path, name: str) -> dict | list:
    return json.loads((results / name).read_text(encoding="utf-8"))


def read_jsonl(results: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (results / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def table(header: list[str], align: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; `align` holds ``"l"`` or ``"r"`` per column."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---:" if a == "r" else "---" for a in align) + " |"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def minutes(seconds: float) -> str:
    whole, rest = divmod(round(seconds), 60)
    return f"{whole} min {rest} s" if whole else f"{rest} s"


def load(pair: list[list[float]] | tuple) -> str:
    """The 1-minute load averages at the start and end of a measurement."""
    return f"{pair[0][0]:.1f} → {pair[1][0]:.1f}"


def environment_load(run: dict) -> str:
    """The load averages of a results file of any schema (`bench.environment_of`)."""
    environment = environment_of(run)
    return load((environment["load_average_start"], environment["load_average_end"]))


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


# Figures: name -> function of the results folder that returns the Markdown between the markers.
# --------------------------------------------------------------------------------------------------------------------


def numbers_table(results: Path) -> str:
    """The default job (``vanilla-transformer train``): docs/results/numbers, written by the run."""
    run = read_json(results, "numbers/results.json")
    rows = read_jsonl(results, "numbers/metrics.jsonl")
    valid = {row["step"]: row["valid_exact_match"] for row in rows if "valid_exact_match" in row}
    steps = sorted(valid)[-4:]
    names, scores = "test exact match / chrF", f"{run['test_exact_match']:.1f}% / {run['test_chrf']:.2f}"
    if "test_bleu" in run:  # left out where no reference holds a 4-gram (0 by construction on number words)
        names, scores = f"{names} / sacreBLEU", f"{scores} / {run['test_bleu']:.2f}"
    by_magnitude = run.get("test_exact_match_by_magnitude", {})
    magnitude_rows = [
        [
            f"test exact match, numbers {' / '.join(by_magnitude)}",
            " / ".join(f"{v:.1f}" for v in by_magnitude.values()),
        ]
    ]
    return table(
        ["measure", "value"],
        ["l", "l"],
        [
            ["wall time of `train()` (tokenizer, data, training, averaging, test)", minutes(run["seconds"])],
            [f"of which {run['step']:,} training steps", minutes(60 * run["train_minutes"])],
            [names, scores],
            *(magnitude_rows if by_magnitude else []),
            [
                f"validation exact match at steps {' / '.join(map(str, steps))}",
                " / ".join(f"{valid[step]:.1f}" for step in steps) + "%",
            ],
            [
                "throughput (non-padding source+target tokens, 1 thread)",
                f"{run['train_tokens_per_second']:,.0f} tokens/s",
            ],
            ["padding share (token-bucketed batches)", f"{run['padding_share']:.2%}"],
        ],
    )


def processor(environment: dict) -> str:
    """The processor as a run recorded it: its name and the features that decide CPU figures (AVX-512, native bf16)."""
    name = environment.get("processor") or "processor not recorded"
    features = environment.get("processor_features")
    return name if features is None else f"{name} ({', '.join(features) or 'no AVX2'})"


def numbers_environment(results: Path) -> str:
    """Where the default job's figures were measured, as the run recorded it."""
    environment = read_json(results, "numbers/results.json")["environment"]
    versions = environment["versions"]
    return (
        f"`{environment['command']}`, {processor(environment)}, "
        f"{environment['machine']}, transformers {versions['transformers']}, "
        f"torch {versions['torch']}, 1-minute load {environment['load_average_start'][0]:.1f} before and "
        f"{environment['load_average_end'][0]:.1f} after"
    )


def multi30k_run(results: Path, folder: str) -> tuple[dict, dict | None, dict]:
    """A Multi30k run's results, its results before rescoring (or None) and its run.json."""
    base = results / "multi30k" / folder
    first = base / "results-before-rescoring.json"
    return (
        read_json(base, "results.json"),
        read_json(base, first.name) if first.is_file() else None,
        read_json(base, "run.json"),
    )


def multi30k_table(results: Path) -> str:
    """Every finished Multi30k run of docs/results/multi30k."""
    rows = []
    for folder, label in MULTI30K_RUNS:
        run, first, about = multi30k_run(results, folder)
        command = about["command"].removeprefix("vanilla-transformer train --preset multi30k")
        option = re.sub(r"\s*--output-dir \S+", "", command).strip()  # where the run was written says nothing
        seconds = minutes(first["seconds"]) + f" + {minutes(run['seconds'])}" if first else minutes(run["seconds"])
        speed = (first or run)["train_tokens_per_second"]
        averaged, last = f"{run['valid_bleu_averaged']:.2f}", f"{run['valid_bleu_last']:.2f}"
        averaged, last = (f"**{averaged}**", last) if run["selected"] == "averaged" else (averaged, f"**{last}**")
        rows.append(
            [
                label,
                f"`{option}`" if option else "—",
                seconds,
                f"{run['step']:,} / {run['epochs']:.1f}",
                f"{speed:,.0f} ({'fp32' if run['mixed_precision'] == 'no' else run['mixed_precision']})",
                f"{averaged} / {last}",
                f"**{run['test_bleu']:.2f}**",
                f"{run['test_bleu_last']:.2f}",
                f"{run['test_chrf']:.2f}",
                f"{first['test_bleu']:.2f}" if first else "—",
            ]
        )
    return table(
        [
            "run",
            "command (`vanilla-transformer train --preset multi30k` ...)",
            "time in `train()` (+ rescoring)",
            "steps / epochs",
            "tokens/s (precision)",
            "validation BLEU: average of the last 5 / last (bold: kept)",
            "**test BLEU** (selected model)",
            "test BLEU, last checkpoint",
            "test chrF",
            "test BLEU before rescoring",
        ],
        ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r"],
        rows,
    )


def recipe_runs(results: Path, direction: str) -> list[dict]:
    """The results of the full-length recipe runs (``<direction>-seed<N>``) of a direction, by seed."""
    folders = sorted(path.parent.name for path in (results / "multi30k").glob(f"{direction}-seed*/results.json"))
    return [multi30k_run(results, folder)[0] for folder in folders]


def multi30k_seeds(results: Path) -> str:
    """Test BLEU over the seeds of each direction: the values, their mean and spread."""
    parts = []
    for direction, label in (("en-de", "English → German"), ("de-en", "German → English")):
        bleu = [run["test_bleu"] for run in recipe_runs(results, direction)]
        values = ", ".join(f"{value:.2f}" for value in bleu)
        parts.append(
            f"{label} over {len(bleu)} seeds: {values} test BLEU (mean {sum(bleu) / len(bleu):.2f}, "
            f"spread {max(bleu) - min(bleu):.2f})"
        )
    return "; ".join(parts)


def valid_losses(results: Path, folder: str) -> dict[int, float]:
    rows = read_jsonl(results, f"multi30k/{folder}/metrics.jsonl")
    return {row["step"]: row["valid_loss"] for row in rows if "valid_loss" in row}


def dropout_selection(results: Path) -> str:
    """P_drop 0.1 against the recipe's 0.2: validation loss late in training, and validation BLEU (both at α 0.6)."""
    low, recipe = valid_losses(results, "en-de-dropout0.1-seed1"), valid_losses(results, "en-de-seed1")
    low_bleu = read_json(results, "multi30k/en-de-dropout0.1-seed1/results.json")["valid_bleu_averaged"]
    recipe_bleu = read_json(results, "multi30k/en-de-seed1/results-before-rescoring.json")["valid_bleu_averaged"]
    return (
        f"With P_drop 0.1 (54 minutes) validation loss stopped improving ({low[4000]:.2f} at step 4,000, "
        f"{low[6000]:.2f} at 6,000); with P_drop 0.2 it kept falling ({recipe[4000]:.2f} and {recipe[6000]:.2f}) and "
        f"validation BLEU was {recipe_bleu:.2f} against {low_bleu:.2f}"
    )


def length_ratio(results: Path) -> str:
    """How much shorter than the references the first models translated the validation set at section 6.1's α."""
    runs = read_json(results, "multi30k/length-penalty-sweep.json")["runs"].values()
    short = [1 - run["scores"]["0.6"]["length_ratio"] for run in runs]
    return f"{min(short):.0%} to {max(short):.0%} shorter"


def final_losses(results: Path) -> str:
    """The last validation losses of the seed-1 runs of both directions."""
    parts = []
    for folder, label, verb in (
        ("en-de-seed1", "English → German", "was still falling"),
        ("de-en-seed1", "German → English", "had flattened"),
    ):
        losses = valid_losses(results, folder)
        last, before = sorted(losses)[-1], sorted(losses)[-2]
        parts.append(
            f"{label} validation loss {verb} ({losses[before]:.3f} at step {before:,}, {losses[last]:.3f} at {last:,})"
        )
    return " and ".join(parts)


def multi30k_summary(results: Path) -> str:
    """The headline: test BLEU of the recipe's runs, per direction, with the default job."""
    numbers = read_json(results, "numbers/results.json")
    rows = [
        [
            "`vanilla-transformer train` (number words, English → German, 1.5M parameters)",
            minutes(numbers["seconds"]),
            f"exact match {numbers['test_exact_match']:.1f}%, chrF {numbers['test_chrf']:.2f}",
        ]
    ]
    for direction, label in (("en-de", "English → German"), ("de-en", "German → English")):
        bleu = [run["test_bleu"] for run in recipe_runs(results, direction)]
        config = read_json(results, f"multi30k/{direction}-seed1/training_config.json")
        rows.append(
            [
                f"`train --preset multi30k` (Multi30k {label}, 6.0M parameters), {len(bleu)} seeds",
                f"{config['max_train_minutes']:g} minutes of training",
                f"sacreBLEU {' / '.join(f'{value:.2f}' for value in bleu)} (mean {sum(bleu) / len(bleu):.2f})",
            ]
        )
    return table(["job (2-core CPU)", "time", "test score"], ["l", "l", "l"], rows)


def length_penalty_table(results: Path) -> str:
    """Mean validation BLEU of the Multi30k models at each α (scripts/sweep_length_penalty.py)."""
    sweep = read_json(results, "multi30k/length-penalty-sweep.json")
    alphas = list(sweep["mean_bleu"])
    longest = [
        max(run["scores"][alpha]["longest_translation_words"] for run in sweep["runs"].values()) for alpha in alphas
    ]
    references = {run["direction"]: run["longest_reference_words"] for run in sweep["runs"].values()}
    reference = ", ".join(f"{words} {direction}" for direction, words in sorted(references.items()))
    return table(
        ["α", *alphas],
        ["l"] + ["r"] * len(alphas),
        [
            ["mean validation BLEU", *(f"{sweep['mean_bleu'][alpha]:.2f}" for alpha in alphas)],
            [f"longest translation, words (longest reference: {reference})", *map(str, longest)],
        ],
    )


def selection_stopped(results: Path) -> str:
    """The stopped selection run's last validation BLEU and loss, against the recipe's run at the same step."""
    rows = read_jsonl(results, "multi30k/en-de-dropout0.3-lr0.6-stopped/metrics.jsonl")
    stopped = max((row for row in rows if "valid_bleu" in row), key=lambda row: row["step"])
    recipe = {row["step"]: row for row in read_jsonl(results, "multi30k/en-de-seed1/metrics.jsonl")}[stopped["step"]]
    return (
        f"at step {stopped['step']:,} it had validation BLEU {stopped['valid_bleu']:.2f} and loss "
        f"{stopped['valid_loss']:.2f} against the recipe's {recipe['valid_bleu']:.2f} and {recipe['valid_loss']:.2f}"
    )


def precision_figures(results: Path) -> str:
    """bf16 training against fp32 (scripts/benchmark_precision.py)."""
    run = read_json(results, "precision_multi30k.json")
    return (
        f"fp32 with SDPA attention {run['fp32_tokens_per_s']:,.0f} tokens/s; bf16 autocast with SDPA "
        f"{run['bf16_sdpa_tokens_per_s']:,.0f} ({run['speedup_bf16_sdpa']:.2f}×); bf16 autocast with eager attention "
        f"{run['bf16_tokens_per_s']:,.0f} ({run['speedup']:.2f}×); test BLEU after {run['steps']} steps "
        f"{run['fp32_bleu']:.2f}, {run['bf16_sdpa_bleu']:.2f} and {run['bf16_bleu']:.2f} "
        f"({run['test_sentences']} sentences)"
    )


def data_table(results: Path) -> str:
    """The data pipeline's benchmark (scripts/benchmark_data.py)."""
    rows = []
    for name, code in (
        ("data_benchmark_450000_before.json", "before (c355ac2, no cache: every run is cold)"),
        ("data_benchmark_450000.json", "now"),
        ("data_benchmark_4500000.json", "now"),
    ):
        run = read_json(results, name)
        warm = run["warm_start_s"]
        rows.append(
            [
                f"{run['pairs']:,}",
                code,
                f"{run['prepare_s']:.0f} s",
                f"{warm:.1f} s" if warm is not None else f"{run['prepare_s']:.0f} s",
                f"{run['peak_rss_mb']:,} MB",
                environment_load(run),
            ]
        )
    return table(
        ["pairs", "code", "cold: to first step", "warm: to first step", "peak RSS", "load"],
        ["r", "l", "r", "r", "r", "l"],
        rows,
    )


def decoding_cpu_table(results: Path) -> str:
    """generate() against MarianMT and CTranslate2 on the CPU (scripts/benchmark.py --sections generate)."""
    rows = []
    for report in read_json(results, "decoding_benchmark.json"):
        for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
            row = report["generate"][key]
            rows.append(
                [
                    report["settings"]["size"],
                    str(report["threads"]),
                    search,
                    f"**{row['speedup']:.2f}x**",
                    f"{row['ct2_fp32_vs_ours']:.2f}x",
                    f"{row['ct2_int8_vs_ours']:.2f}x",
                    yes(row["outputs_equal_marian"]),
                    yes(row["ct2_fp32_outputs_equal_ours"]),
                    environment_load(report),
                ]
            )
    return table(
        [
            "size",
            "threads",
            "search",
            "ours / MarianMT",
            "CTranslate2 fp32 / ours",
            "CTranslate2 int8 / ours",
            "same tokens as MarianMT",
            "as CT2 fp32",
            "load",
        ],
        ["l", "r", "l", "r", "r", "r", "l", "l", "l"],
        rows,
    )


def decoding_cpu_versions(results: Path) -> str:
    versions = environment_of(read_json(results, "decoding_benchmark.json")[0])["versions"]
    return f"transformers {versions['transformers']}, torch {versions['torch']}"


def decoding_gpu_table(results: Path) -> str:
    """generate() against MarianMT on a GPU, batches of 16 and 128."""
    rows = []
    for name in ("decoding_benchmark_cuda_bf16.json", "decoding_benchmark_cuda_bf16_batch128.json"):
        for report in read_json(results, name):
            for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
                row = report["generate"][key]
                rows.append(
                    [
                        report["settings"]["size"],
                        str(row["batch_size"]),
                        search,
                        f"**{row['speedup']:.2f}x**",
                        f"{row['ours_tokens_per_s']:,.0f}",
                        f"{row['marian_tokens_per_s']:,.0f}",
                        yes(row["outputs_equal_marian"]),
                    ]
                )
    return table(
        [
            "size",
            "batch",
            "search",
            "ours / MarianMT",
            "ours, tokens/s",
            "MarianMT, tokens/s",
            "same tokens as MarianMT",
        ],
        ["l", "r", "l", "r", "r", "r", "l"],
        rows,
    )


def gpu_device(results: Path) -> str:
    report = read_json(results, "decoding_benchmark_cuda_bf16.json")[0]
    return f"{report['device']}, torch {environment_of(report)['versions']['torch']}, {report['settings']['dtype']}"


def gpu_training(results: Path) -> str:
    """The training-step ratios the GPU run measured beside decoding."""
    reports = {
        report["settings"]["size"]: report["train"]
        for report in read_json(results, "decoding_benchmark_cuda_bf16.json")
    }
    random = " and ".join(f"{reports[size]['random']['speedup']:.2f}x {size}" for size in ("small", "base"))
    bucketed = " and ".join(f"{reports[size]['bucketed']['speedup']:.2f}x" for size in ("small", "base"))
    return f"{random} on random batches, {bucketed} token-bucketed"


def op_counts(results: Path) -> str:
    """Operators (kernels) a training step and a decoding step launch, ours against MarianMT (scripts/count_ops.py)."""
    counts = read_json(results, "op_counts.json")
    rows = [
        [f"training step ({counts['training_batch']['pairs']} pairs)", name, f"{report['kernels']:,.0f}",
         f"{report['operators']:,.0f}"]
        for name, report in counts["training_step"].items()
    ]  # fmt: skip
    for search, reports in counts["decoding_step"].items():
        rows += [
            [f"decoding step, {search} ({counts['decoding_batch']} sentences)", name, f"{report['kernels']:,.0f}",
             f"{report['operators']:,.0f}"]
            for name, report in reports.items()
        ]  # fmt: skip
    return table(["step", "contestant", "kernels", "operators (views included)"], ["l", "l", "r", "r"], rows)


def op_counts_setup(results: Path) -> str:
    counts = read_json(results, "op_counts.json")
    versions = counts["environment"]["versions"]
    return (
        f"the `{counts['size']}` configuration ({counts['layers']} + {counts['layers']} layers, "
        f"{counts['vocab_size']:,}-token vocabulary), a training batch of {counts['training_batch']['real_tokens']:,} "
        f"real tokens in {counts['training_batch']['padded_tokens']:,} padded positions; torch {versions['torch']}, "
        f"transformers {versions['transformers']}"
    )


def decoding_dtype(results: Path) -> str:
    """bf16 against fp32 decoding of the trained Multi30k model (scripts/benchmark_decoding_dtype.py)."""
    run = read_json(results, "decoding_dtype_multi30k.json")
    return (
        f"bf16 ran **{run['speedup']:.2f}x** faster than fp32 ({run['bf16_tokens_per_s']:,.0f} against "
        f"{run['fp32_tokens_per_s']:,.0f} tokens/s), with BLEU {run['bf16_bleu']:.2f} against {run['fp32_bleu']:.2f} "
        f"({run['same_translations']:,} of the {run['sentences']:,} translations identical)"
    )


def decoding_bf16_marian(results: Path) -> str:
    run = read_json(results, "decoding_benchmark_bf16.json")
    ratios = " / ".join(f"{run['generate'][key]['speedup']:.2f}x" for key in ("greedy", "beam4"))
    return f"{ratios} MarianMT, greedy / beam 4 (load {environment_of(run)['load_average_start'][0]:.1f})"


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
        [
            "training step, median",
            f"{1000 * steps['full']['median_s']:.1f} ms",
            f"{1000 * steps['lora']['median_s']:.1f} ms ({training['lora_over_full_median']:.2f}x)",
        ],
        [
            f"exact match on {score['sentences']} held-out pairs after {training['batches']} steps "
            f"(the base model: {score['exact_match']['base']:.1f}%)",
            f"{score['exact_match']['full']:.1f}%",
            f"{score['exact_match']['lora']:.1f}%",
        ],
    ]
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
    versions = run["versions"]
    return (
        f"transformers {versions['transformers']}, peft {versions['peft']}, {run['threads']} threads, 1-minute load "
        f"{run['load_average_start'][0]:.1f} before and {run['load_average_end'][0]:.1f} after"
    )


def demo_latency(results: Path) -> str:
    """Seconds per sentence of the demo's Translate (scripts/benchmark_demo.py)."""
    run = read_json(results, "demo_latency.json")
    versions = run["versions"]
    rows = [
        [
            f"{run['sentences']} sentences of `{Path(run['source']).name}`, {run['threads']} threads",
            f"{run['median_seconds']:.3f} s",
            f"{run['p90_seconds']:.3f} s",
            f"{run['max_seconds']:.3f} s",
            f"{run['load_average_start'][0]:.1f}",
            f"torch {versions['torch']}, transformers {versions['transformers']}",
        ]
    ]
    header = ["input", "median", "90th percentile", "slowest", "load before", "versions"]
    return table(header, ["l", "r", "r", "r", "r", "l"], rows)


ONNX_SERVING = "onnx_serving.json"
ONNX_COMMAND = (
    "CT2_USE_MKL=1 python scripts/benchmark_onnx.py --threads 4 --output docs/results/onnx_serving.json "
    "--quality-model MODEL --quality-source SOURCE --quality-reference REFERENCE"
)
ENGINES = [("torch", "PyTorch"), ("ort_fp32", "onnxruntime fp32"), ("ort_int8", "onnxruntime int8")]
ENGINES += [("ct2_fp32", "CTranslate2 fp32"), ("ct2_int8", "CTranslate2 int8")]


def onnx_serving_table(results: Path) -> str:
    """Tokens per second of each engine on the CPU (scripts/benchmark_onnx.py), or, before its first run, the
    command that measures them."""
    if not (results / ONNX_SERVING).is_file():
        return f"Not measured yet: `{ONNX_COMMAND}`, run alone, writes the results file this table is rendered from."
    run = read_json(results, ONNX_SERVING)
    rows = []
    for size, figures in run["sizes"].items():
        for search in [key for key in figures if key == "greedy" or key.startswith("beam")]:
            row = figures[search]
            rows.append(
                [f"{size} ({figures['parameters'] / 1e6:.0f}M)", search.replace("beam", "beam ")]
                + [f"{row[f'{name}_tokens_per_s']:,.0f}" for name, _ in ENGINES]
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


def onnx_serving_environment(results: Path) -> str:
    """Where and how the serving benchmark ran."""
    if not (results / ONNX_SERVING).is_file():
        return "not measured yet"
    run = read_json(results, ONNX_SERVING)
    versions = run["versions"]
    quality = run.get("quality")
    model = (
        f"; BLEU on `{Path(quality['model']).name}`, {quality['sentences']:,} sentences of `{Path(quality['source']).name}`"
        if quality
        else ""
    )
    return (
        f"{run['processor']}, {run['threads']} threads, batches of {run['batch_size']} sentences "
        f"({run['batches']} batches, {run['rounds']} interleaved rounds; {run['data']}){model}; "
        f"load average {load((run['load_average_start'], run['load_average_end']))}, {minutes(run['wall_seconds'])}; "
        f"torch {versions['torch']}, onnxruntime {versions['onnxruntime']}, ctranslate2 {versions['ctranslate2']}"
        f" (CT2_USE_MKL={run['ct2_use_mkl'] or 'unset'})"
    )


def transformers_common(results: Path) -> str:
    """The counts of transformers' own common model tests per tested release (.ci/transformers_tests)."""
    parts = []
    for path in sorted((results / "transformers_common").glob("*.json")):
        run = json.loads(path.read_text(encoding="utf-8"))
        parts.append(
            f"on {run['transformers']}: {run['passed']} passed, {run['skipped']} skipped, {run['failed']} failed "
            f"({run['subtests_passed']:,} subtests passed)"
        )
    return "; ".join(parts)


def _contestant(spec: str) -> str:
    """``ours:precision=no,compile=inductor,adam=fused,attn=sdpa`` as "ours: fp32, inductor, fused Adam, SDPA"."""
    kind, _, settings = spec.partition(":")
    values = dict(item.split("=") for item in settings.split(","))
    words = ["fp32" if values["precision"] == "no" else values["precision"]]
    words.append("compiled (inductor)" if values["compile"] == "inductor" else "eager")
    if "adam" in values:
        words.append({"default": "Adam", "foreach": "foreach Adam", "fused": "fused Adam"}[values["adam"]])
    else:
        words.append({"adamw_torch_fused": "fused AdamW", "adamw_torch": "AdamW"}[values["optim"]])
    words.append({"sdpa": "SDPA", "eager": "eager attention"}[values["attn"]])
    return f"{'ours' if kind == 'ours' else 'MarianMT + Seq2SeqTrainer'}: {', '.join(words)}"


def training_table(results: Path) -> str:
    """Our training step against MarianMT with Seq2SeqTrainer (scripts/benchmark_training.py)."""
    run = read_json(results, "training_vs_trainer.json")
    rows = []
    for spec, figures in run["contestants"].items():
        spread = figures["round_tokens_per_second"]
        best = " (best)" if spec in (run["ours_best"], run["trainer_best"]) else ""
        rows.append([
            _contestant(spec) + best,
            f"{figures['tokens_per_second']:,.0f}",
            f"{spread['median']:,.0f} [{spread['min']:,.0f}–{spread['max']:,.0f}]",
            f"{figures['vs_baseline']:.2f}x",
            f"{figures['vs_trainer_best']:.2f}x",
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
    )


def training_environment(results: Path) -> str:
    """Where the training benchmark ran, and what it left out."""
    run = read_json(results, "training_vs_trainer.json")
    settings, versions = run["settings"], run["versions"]
    flags = [flag for flag, present in run["cpu"]["flags"].items() if present]
    return (
        f"{run['cpu']['model']} ({', '.join(flags)}; no native bf16), {settings['threads']} threads, "
        f"{settings['rounds']} rounds of {settings['steps_per_round']} steps per contestant after "
        f"{settings['warmup_steps']} warm-up steps, {minutes(run['wall_seconds'])} in all, 1-minute load "
        f"{load((run['load_average_start'], run['load_average_end']))}; torch {versions['torch']}, transformers "
        f"{versions['transformers']}, accelerate {versions['accelerate']}; {len(run['skipped'])} bf16 contestants "
        f"left out (emulated bf16)"
    )


FIGURES: dict[str, Callable[[Path], str]] = {
    "numbers-table": numbers_table,
    "numbers-environment": numbers_environment,
    "results-summary": multi30k_summary,
    "multi30k-table": multi30k_table,
    "length-penalty-table": length_penalty_table,
    "selection-stopped": selection_stopped,
    "multi30k-seeds": multi30k_seeds,
    "dropout-selection": dropout_selection,
    "length-ratio": length_ratio,
    "final-losses": final_losses,
    "precision": precision_figures,
    "data-table": data_table,
    "decoding-cpu-table": decoding_cpu_table,
    "decoding-cpu-versions": decoding_cpu_versions,
    "decoding-gpu-table": decoding_gpu_table,
    "gpu-device": gpu_device,
    "gpu-training": gpu_training,
    "op-counts": op_counts,
    "op-counts-setup": op_counts_setup,
    "decoding-dtype": decoding_dtype,
    "decoding-bf16-marian": decoding_bf16_marian,
    "lora-table": lora_table,
    "lora-generate-table": lora_generate_table,
    "demo-latency": demo_latency,
    "onnx-serving-table": onnx_serving_table,
    "onnx-serving-quality": onnx_serving_quality,
    "onnx-serving-environment": onnx_serving_environment,
    "lora-environment": lora_environment,
    "transformers-common": transformers_common,
    "training-table": training_table,
    "training-environment": training_environment,
    "training-summary": training_summary,
}


def pages(root: Path) -> list[Path]:
    """The files whose figures are rendered: README.md, docs/*.md and the model card's template (the repository's
    model_card.md and the copy the wheel ships, which must stay identical)."""
    card = [root / "model_card.md", root / "vanilla_transformer" / "export" / "model_card.md"]
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), *card]


def render_text(text: str, results: Path, where: str) -> tuple[str, list[str]]:
    """`text` with every figure rendered, and the names of those that changed."""
    drifted = []

    def replace(match: re.Match) -> str:
        name, body = match["name"], match["body"]
        if name not in FIGURES:
            raise SystemExit(f"{where}: unknown figure {name!r}; known: {', '.join(FIGURES)}")
        rendered = FIGURES[name](results)
        new = f"\n{rendered}\n" if body.startswith("\n") else rendered  # a block keeps its lines, inline its place
        if new != body:
            drifted.append(name)
        return f"<!-- figure: {name} -->{new}<!-- /figure -->"

    return MARKER.sub(replace, text), drifted


def render(root: Path, check: bool) -> list[str]:
    """Render the figures under `root` (rewriting them unless `check`); return ``FILE: figure NAME`` per drift."""
    results, drifted, used = root / "docs" / "results", [], set()
    for path in pages(root):
        text = path.read_text(encoding="utf-8")
        used.update(match["name"] for match in MARKER.finditer(text))
        new, names = render_text(text, results, str(path.relative_to(root)))
        drifted += [f"{path.relative_to(root)}: figure {name}" for name in names]
        if names and not check:
            path.write_text(new, encoding="utf-8")
    unused = sorted(set(FIGURES) - used)
    if unused:
        raise SystemExit(f"figures published nowhere: {', '.join(unused)}")
    return drifted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 if a figure differs from its file"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the repository (default: this one)")
    args = parser.parse_args(argv)
    drifted = render(args.root, args.check)
    for line in drifted:
        print(f"{line} {'differs from its results file' if args.check else 'rendered'}", file=sys.stderr)
    return 1 if drifted and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
