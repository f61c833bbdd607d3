"""The figures of the training runs committed in docs/results, which no benchmark writes: the default job
(docs/results/numbers), the Multi30k runs (docs/results/multi30k) and the counts of transformers' common tests
(docs/results/transformers_common, written by .ci/transformers_tests). ``scripts/render_figures.py`` collects them
with every benchmark's. The pictures of their training curves (``PICTURES``) are drawn from the committed
metrics.jsonl by the function that draws a run's own metrics.png (`metric_curves`, `metrics_figure`)."""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from bench.figures import minutes, read_json, read_jsonl, table, versions
from bench.pictures import Picture

from vanilla_transformer.training.run_dir import RunLayout
from vanilla_transformer.training.tracking import metric_curves, metrics_figure, read_metrics

MULTI30K_RUNS = [  # (folder, label), in the order of the table
    ("en-de-seed1", "English → German, seed 1 (recipe)"),
    ("en-de-seed2", "English → German, seed 2 (recipe)"),
    ("en-de-seed3", "English → German, seed 3 (recipe)"),
    ("en-de-compiled-seed1", "English → German, seed 1, compiled (recipe as shipped since issue 36)"),
    ("de-en-seed1", "German → English, seed 1 (recipe)"),
    ("de-en-seed2", "German → English, seed 2 (recipe)"),
    ("de-en-compiled-seed1", "German → English, seed 1, compiled (recipe as shipped since issue 36)"),
    ("en-de-10min-seed1", "English → German, 10 minutes, seed 1"),
    ("en-de-dropout0.1-seed1", "selection run: English → German, P_drop 0.1, 54 min, α 0.6"),
    ("en-de-vocab4000-seed1", "selection run: English → German, compiled, a 4,000-token vocabulary"),
    ("en-de-ffn1024-seed1", "selection run: English → German, compiled, d_ff 1,024 (the paper's 4 × d_model)"),
    ("en-de-batch2048-seed1", "selection run: English → German, compiled, 2,048 tokens per step"),
    ("en-de-avx2-seed1", "English → German, seed 1, on a CPU without native bf16 (AVX2): fp32"),
    ("de-en-avx2-seed1", "German → English, seed 1, on a CPU without native bf16 (AVX2): fp32"),
]
DIRECTIONS = (("en-de", "English → German"), ("de-en", "German → English"))


def run_file(results: Path, folder: str, name: str = "results") -> Path:
    """A file of a committed run (``docs/results/<folder>``), where `train` writes it: ``results`` (results.json),
    ``metrics`` (metrics.jsonl) or ``settings`` (training_config.json) of `RunLayout`."""
    return getattr(RunLayout(results / folder), name)


def run_json(results: Path, folder: str, name: str = "results") -> dict:
    path = run_file(results, folder, name)
    return read_json(path.parent, path.name)


def logged(results: Path, folder: str, key: str) -> dict[int, float]:
    """What a committed run logged of `key` (``valid_loss``, ``tokens_per_second``, ...) in its metrics, by step."""
    path = run_file(results, folder, "metrics")
    return {row["step"]: row[key] for row in read_jsonl(path.parent, path.name) if key in row}


def numbers_table(results: Path) -> str:
    """The default job (``vanilla-transformer train``): docs/results/numbers, written by the run."""
    run = run_json(results, "numbers")
    valid = logged(results, "numbers", "valid_exact_match")
    steps = sorted(valid)[-4:]
    magnitude = run["test_exact_match_by_magnitude"]  # the numbers task's; no BLEU: no reference has a 4-gram
    rows = [
        ["wall time of `train()` (tokenizer, data, training, averaging, test)", minutes(run["seconds"])],
        [f"of which {run['step']:,} training steps", minutes(60 * run["train_minutes"])],
        ["test exact match / chrF", f"{run['test_exact_match']:.1f}% / {run['test_chrf']:.2f}"],
        [f"test exact match, numbers {' / '.join(magnitude)}", " / ".join(f"{v:.1f}" for v in magnitude.values())],
        [f"validation exact match at steps {' / '.join(map(str, steps))}",
         " / ".join(f"{valid[step]:.1f}" for step in steps) + "%"],
        ["throughput (non-padding source+target tokens, 1 thread)", f"{run['train_tokens_per_second']:,.0f} tokens/s"],
        ["padding share (token-bucketed batches)", f"{run['padding_share']:.2%}"],
    ]  # fmt: skip
    return table(["measure", "value"], ["l", "l"], rows)


def numbers_environment(results: Path) -> str:
    """Where the default job's figures were measured, as the run recorded it: the processor with the features that
    decide CPU figures (AVX-512, native bf16)."""
    environment = run_json(results, "numbers")["environment"]
    processor = f"{environment['processor']} ({', '.join(environment['processor_features']) or 'no AVX2'})"
    return (
        f"`{environment['command']}`, {processor}, "
        f"{environment['machine']}, {versions(environment, 'transformers', 'torch')}, 1-minute load {environment['load_average_start'][0]:.1f} before and "
        f"{environment['load_average_end'][0]:.1f} after"
    )


def multi30k_run(results: Path, folder: str) -> tuple[dict, dict | None, dict]:
    """A Multi30k run's results, its results before rescoring (or None) and its run.json."""
    base = results / "multi30k" / folder
    first = base / "results-before-rescoring.json"
    return (
        run_json(results, f"multi30k/{folder}"),
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
        precision = "fp32" if run["mixed_precision"] == "no" else run["mixed_precision"]
        rows.append([
            label, f"`{option}`" if option else "—", seconds, f"{run['step']:,} / {run['epochs']:.1f}",
            f"{speed:,.0f} ({precision})", f"{averaged} / {last}", f"**{run['test_bleu']:.2f}**",
            f"{run['test_bleu_last']:.2f}", f"{run['test_chrf']:.2f}", f"{first['test_bleu']:.2f}" if first else "—",
        ])  # fmt: skip
    header = ["run", "command (`vanilla-transformer train --preset multi30k` ...)",
              "time in `train()` (+ rescoring)", "steps / epochs", "tokens/s (precision)",
              "validation BLEU: average of the last 5 / last (bold: kept)",
              "**test BLEU** (selected model)", "test BLEU, last checkpoint", "test chrF",
              "test BLEU before rescoring"]  # fmt: skip
    return table(header, ["l", "l", "r", "r", "r", "r", "r", "r", "r", "r"], rows)


def compiled_run(results: Path, folder: str = "en-de-compiled-seed1") -> str:
    """A run of the compiled preset as shipped (issue 47): its steps, throughput and scores."""
    run = run_json(results, f"multi30k/{folder}")
    return (
        f"{run['step']:,} steps in {run['train_minutes']:.0f} minutes at {run['train_tokens_per_second']:,.0f} "
        f"tokens/s ({run['mixed_precision']}, {'compiled' if run.get('dynamo_backend') else 'eager'}), validation "
        f"BLEU {run['valid_bleu_averaged']:.2f} (average of the last {len(run['averaged_checkpoints'])}), test BLEU "
        f"{run['test_bleu']:.2f}"
    )


def recipe_bleu(results: Path, direction: str) -> list[float]:
    """The test BLEU of the full-length recipe runs (``<direction>-seed<N>``) of a direction, by seed."""
    runs = (results / "multi30k").glob(f"{direction}-seed*")
    folders = sorted(path.name for path in runs if run_file(results, f"multi30k/{path.name}").is_file())
    return [multi30k_run(results, folder)[0]["test_bleu"] for folder in folders]


def multi30k_seeds(results: Path) -> str:
    """Test BLEU over the seeds of each direction: the values, their mean and spread."""
    parts = []
    for direction, label in DIRECTIONS:
        bleu = recipe_bleu(results, direction)
        values = ", ".join(f"{value:.2f}" for value in bleu)
        parts.append(
            f"{label} over {len(bleu)} seeds: {values} test BLEU (mean {sum(bleu) / len(bleu):.2f}, "
            f"spread {max(bleu) - min(bleu):.2f})"
        )
    return "; ".join(parts)


def dropout_selection(results: Path) -> str:
    """P_drop 0.1 against the recipe's 0.2: validation loss late in training, and validation BLEU (both at α 0.6)."""
    low, recipe = (
        logged(results, f"multi30k/{run}", "valid_loss") for run in ("en-de-dropout0.1-seed1", "en-de-seed1")
    )
    low_bleu = run_json(results, "multi30k/en-de-dropout0.1-seed1")["valid_bleu_averaged"]
    recipe_bleu = read_json(results, "multi30k/en-de-seed1/results-before-rescoring.json")["valid_bleu_averaged"]
    return (
        f"With P_drop 0.1 (54 minutes) validation loss stopped improving ({low[4000]:.2f} at step 4,000, "
        f"{low[6000]:.2f} at 6,000); with P_drop 0.2 it kept falling ({recipe[4000]:.2f} and {recipe[6000]:.2f}) and "
        f"validation BLEU was {recipe_bleu:.2f} against {low_bleu:.2f}"
    )


def final_losses(results: Path) -> str:
    """The last validation losses of the seed-1 runs of both directions."""
    parts = []
    for folder, label, verb in (
        ("en-de-seed1", "English → German", "was still falling"),
        ("de-en-seed1", "German → English", "had flattened"),
    ):
        losses = logged(results, f"multi30k/{folder}", "valid_loss")
        last, before = sorted(losses)[-1], sorted(losses)[-2]
        parts.append(
            f"{label} validation loss {verb} ({losses[before]:.3f} at step {before:,}, {losses[last]:.3f} at {last:,})"
        )
    return " and ".join(parts)


def multi30k_summary(results: Path) -> str:
    """The headline: test BLEU of the recipe's runs, per direction, with the default job."""
    numbers = run_json(results, "numbers")
    rows = [["`vanilla-transformer train` (number words, English → German, 1.5M parameters)", minutes(numbers["seconds"]),
             f"exact match {numbers['test_exact_match']:.1f}%, chrF {numbers['test_chrf']:.2f}"]]  # fmt: skip
    for direction, label in DIRECTIONS:
        bleu = recipe_bleu(results, direction)
        config = run_json(results, f"multi30k/{direction}-seed1", "settings")
        rows.append([
            f"`train --preset multi30k` (Multi30k {label}, 6.0M parameters), {len(bleu)} seeds",
            f"{config['max_train_minutes']:g} minutes of training",
            f"sacreBLEU {' / '.join(f'{value:.2f}' for value in bleu)} (mean {sum(bleu) / len(bleu):.2f})",
        ])  # fmt: skip
    return table(["job (2-core CPU)", "time", "test score"], ["l", "l", "l"], rows)


def stopped_against(results: Path, stopped_run: str, recipe_run: str) -> str:
    """A stopped run's last validation BLEU and loss, against those of the recipe's run `recipe_run` at that step."""
    keys = ("valid_bleu", "valid_loss")
    stopped, recipe = (
        {key: logged(results, f"multi30k/{run}", key) for key in keys} for run in (stopped_run, recipe_run)
    )
    step = max(stopped["valid_bleu"])
    return (
        f"at step {step:,} it had validation BLEU {stopped['valid_bleu'][step]:.2f} and loss "
        f"{stopped['valid_loss'][step]:.2f} against the recipe's {recipe['valid_bleu'][step]:.2f} and "
        f"{recipe['valid_loss'][step]:.2f}"
    )


def tiny_stopped(results: Path) -> str:
    """The stopped Transformer-Tiny-like run (issue 47): its speed against the 4,000-token run's on the same machine,
    and its last validation BLEU and loss against the compiled preset's run at the same step."""
    speeds = sorted(logged(results, "multi30k/en-de-tiny-stopped", "tokens_per_second").values())
    beside = run_json(results, "multi30k/en-de-vocab4000-seed1")
    against = stopped_against(results, "en-de-tiny-stopped", "en-de-compiled-seed1")
    return (
        f"it trained {speeds[len(speeds) // 2]:,.0f} tokens/s (median of its logs) where the preset with a 4,000-token "
        f"vocabulary trained {beside['train_tokens_per_second']:,.0f} on the same machine, but {against}"
    )


def against_compiled(results: Path, name: str, sides: str) -> str:
    """Validation BLEU of the selection run ``en-de-<name>-seed1`` against the compiled preset's run, at each
    evaluation both made after as many training tokens (the same steps where both take as many tokens per step), and
    each run's steps and final validation BLEU (issue 47); `sides` names the two."""
    runs = {name: f"en-de-{name}-seed1", "compiled": "en-de-compiled-seed1"}
    valid = {key: logged(results, f"multi30k/{folder}", "valid_bleu") for key, folder in runs.items()}
    final = {key: run_json(results, f"multi30k/{folder}") for key, folder in runs.items()}
    ratio = final[name]["tokens_per_step"] / final["compiled"]["tokens_per_step"]  # its steps per compiled step
    steps = sorted(step for step in valid[name] if step * ratio in valid["compiled"])
    pairs = ", ".join(f"{valid[name][step]:.2f} / {valid['compiled'][step * ratio]:.2f}" for step in steps)
    where = f"steps {steps[0]:,} to {steps[-1]:,}"
    if ratio != 1:
        where = f"its {where} against the preset's {steps[0] * ratio:,.0f} to {steps[-1] * ratio:,.0f}, as many tokens"
    return (
        f"validation BLEU at {where} ({sides}): {pairs}; at the end "
        f"{final[name]['valid_bleu_averaged']:.2f} after {final[name]['step']:,} steps against "
        f"{final['compiled']['valid_bleu_averaged']:.2f} after {final['compiled']['step']:,} (average of the last 5)"
    )


def ffn_selection(results: Path) -> str:
    """The run with the paper's d_ff = 4 d_model (1,024) against the compiled preset's (512): validation at equal
    steps, and the checkpoint the preset's rule kept (issue 47)."""
    run = run_json(results, "multi30k/en-de-ffn1024-seed1")
    return (
        against_compiled(results, "ffn1024", "d_ff 1,024 / 512")
        + f"; its last checkpoint scored {run['valid_bleu_last']:.2f}, so the preset's rule kept it "
        f"(selected: {run['selected']}); {run['train_tokens_per_second']:,.0f} tokens/s, test BLEU "
        f"{run['test_bleu']:.2f}"
    )


def batch_selection(results: Path) -> str:
    """The run of 2,048 tokens per step against the compiled preset's 4,096: validation after as many tokens, steps
    and speed in the hour (issue 47)."""
    run = run_json(results, "multi30k/en-de-batch2048-seed1")
    return (
        against_compiled(results, "batch2048", "2,048 / 4,096 tokens per step")
        + f"; {run['train_tokens_per_second']:,.0f} tokens/s, test BLEU {run['test_bleu']:.2f}"
    )


def hour_runs_en_de(results: Path) -> str:
    """The English -> German runs of a whole hour on a CPU with native bf16 (the recipe's seeds, the compiled preset,
    each selection run): how many, and the range of their kept validation BLEU and of their test BLEU (issue 47)."""
    runs = [
        run_json(results, f"multi30k/{folder}")
        for folder, _ in MULTI30K_RUNS
        if folder.startswith("en-de-") and "10min" not in folder and "avx2" not in folder
    ]
    valid = [run["valid_bleu_last" if run["selected"] == "last" else "valid_bleu_averaged"] for run in runs]
    test = [run["test_bleu"] for run in runs]
    return (
        f"{len(runs)} runs of the hour English → German (three seeds of the recipe, the compiled preset, and each "
        f"one-change selection run) kept models of validation BLEU {min(valid):.2f} to {max(valid):.2f} and test BLEU "
        f"{min(test):.2f} to {max(test):.2f}, the best {40 - max(test):.2f} below the target of 40.0"
    )


def transformers_common(results: Path) -> str:
    """The counts of transformers' own common model tests per tested release (.ci/transformers_tests)."""
    parts = []
    for path in sorted((results / "transformers_common").glob("*.json")):
        run = read_json(path.parent, path.name)
        parts.append(
            f"on {run['transformers']}: {run['passed']} passed, {run['skipped']} skipped, {run['failed']} failed "
            f"({run['subtests_passed']:,} subtests passed)"
        )
    return "; ".join(parts)


def metrics_picture(results: Path, folder: str) -> Picture:
    """The training curves of a committed run (``docs/results/<folder>``), drawn from its metrics.jsonl as `train`
    draws its metrics.png."""
    return Picture(metric_curves(read_metrics(run_file(results, folder, "metrics"))), metrics_figure)


PICTURES = {  # path under docs/: its picture
    "numbers_metrics.png": partial(metrics_picture, folder="numbers"),
    "multi30k_en_de_metrics.png": partial(metrics_picture, folder="multi30k/en-de-seed1"),
    "multi30k_de_en_metrics.png": partial(metrics_picture, folder="multi30k/de-en-seed1"),
}

FIGURES = {
    "numbers-table": numbers_table,
    "numbers-environment": numbers_environment,
    "results-summary": multi30k_summary,
    "multi30k-table": multi30k_table,
    "compiled-run": compiled_run,
    "compiled-run-de-en": partial(compiled_run, folder="de-en-compiled-seed1"),
    "selection-stopped": partial(
        stopped_against, stopped_run="en-de-dropout0.3-lr0.6-stopped", recipe_run="en-de-seed1"
    ),
    "tiny-stopped": tiny_stopped,
    "vocabulary-selection": partial(against_compiled, name="vocab4000", sides="4,000 / 8,000 tokens"),
    "ffn-selection": ffn_selection,
    "batch-selection": batch_selection,
    "hour-runs-en-de": hour_runs_en_de,
    "multi30k-seeds": multi30k_seeds,
    "dropout-selection": dropout_selection,
    "final-losses": final_losses,
    "transformers-common": transformers_common,
}
