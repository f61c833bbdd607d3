"""The Multi30k figures in the README and the model card are those of the committed runs in docs/results/multi30k.

Each run folder holds the run's own ``results.json``, ``metrics.jsonl`` and ``training_config.json``, copied from its
run directory, and a ``run.json`` with the command, its wall time and the machine load. The README must quote each
run's test BLEU as written there (the model card those of the recipe's runs, ``role`` "recipe"), and the runs must
be what the README says they are: the ``multi30k`` preset, the whole command within the hour, logged up to the step
they stopped at.

A run trained before the preset's length penalty changed was scored again with the preset's search by resuming it
(``--resume`` takes no training step on a finished run; run.json's ``rescored`` gives the command): its
``results.json`` is the new one, ``results-before-rescoring.json`` the first, and the hour covers both commands.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(path.parent for path in (ROOT / "docs" / "results" / "multi30k").glob("*/results.json"))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_there_are_committed_multi30k_runs():
    assert RUNS


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_committed_multi30k_runs_are_the_published_figures(run):
    results, config, about = (read_json(run / name) for name in ("results.json", "training_config.json", "run.json"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    seconds = results["seconds"]
    if "rescored" in about:
        first = read_json(run / "results-before-rescoring.json")
        assert (first["step"], first["train_minutes"]) == (results["step"], results["train_minutes"])
        assert about["rescored"]["command"].startswith(about["command"]) and "--resume" in about["rescored"]["command"]
        seconds += first["seconds"]
    assert config["preset"] == "multi30k" and config["max_train_minutes"] * 60 <= seconds < 60 * 60
    assert results["train_minutes"] <= config["max_train_minutes"] + 1
    assert max(row["step"] for row in rows) == results["step"]
    assert sum("seconds" in row for row in rows) == 1  # one results row, the figures' run
    assert about["command"].startswith("vanilla-transformer train --preset multi30k")
    bleu = f"{results['test_bleu']:.2f}"
    assert bleu in (ROOT / "README.md").read_text(encoding="utf-8")
    if about["role"] == "recipe":
        assert bleu in (ROOT / "model_card.md").read_text(encoding="utf-8")


STOPPED = sorted(
    path.parent
    for path in (ROOT / "docs" / "results" / "multi30k").glob("*/run.json")
    if read_json(path)["role"] == "stopped"
)


@pytest.mark.parametrize("run", STOPPED, ids=[run.name for run in STOPPED])
def test_stopped_multi30k_runs_are_quoted_from_their_metrics(run):
    """A selection run stopped early has no results.json; the README quotes its last validation BLEU and loss."""
    config, about = read_json(run / "training_config.json"), read_json(run / "run.json")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    last = max((row for row in rows if "valid_bleu" in row), key=lambda row: row["step"])
    assert config["preset"] == "multi30k" and not (run / "results.json").exists()
    assert about["command"].startswith("vanilla-transformer train --preset multi30k")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{last['valid_bleu']:.2f}" in readme and f"{last['valid_loss']:.2f}" in readme


def test_the_multi30k_length_penalty_is_the_one_chosen_on_validation():
    """The preset's alpha is the committed validation sweep's choice: of the alphas whose translations all stay
    within the longest reference (a larger alpha lets some run on towards the length limit), the one with the best
    mean validation BLEU over the trained models, and better than section 6.1's 0.6."""
    from vanilla_transformer.training.options import TrainingConfig

    sweep = read_json(ROOT / "docs" / "results" / "multi30k" / "length-penalty-sweep.json")
    contained = [
        alpha
        for alpha in sweep["mean_bleu"]
        if all(
            run["scores"][alpha]["longest_translation_words"] <= run["longest_reference_words"]
            for run in sweep["runs"].values()
        )
    ]
    chosen = max(contained, key=sweep["mean_bleu"].get)
    assert float(chosen) == TrainingConfig.from_preset("multi30k").length_penalty
    assert sweep["mean_bleu"][chosen] > sweep["mean_bleu"]["0.6"]
    assert all(run["split"] == "valid" for run in sweep["runs"].values())  # chosen on validation, never on test


def minutes_and_seconds(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def test_the_readme_default_job_table_is_its_committed_run():
    """The Quick start table quotes docs/results/numbers: wall time, scores, validation curve, throughput, and the
    transformers release the run recorded."""
    folder = ROOT / "docs" / "results" / "numbers"
    results = read_json(folder / "results.json")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    wall, training = minutes_and_seconds(results["seconds"]), minutes_and_seconds(60 * results["train_minutes"])
    assert f"| {wall} (1,000 training steps: {training}) |" in readme
    scores = f"{results['test_exact_match']:.1f}% / {results['test_chrf']:.2f} / {results['test_bleu']:.2f}"
    assert f"| test exact match / chrF / sacreBLEU | {scores} |" in readme
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    valid = {row["step"]: row["valid_exact_match"] for row in rows if "valid_exact_match" in row}
    curve = " / ".join(f"{valid[step]:.1f}" for step in (250, 500, 750, 1000))
    assert f"| validation exact match at steps 250 / 500 / 750 / 1000 | {curve}% |" in readme
    assert f"| {results['train_tokens_per_second']:,.0f} tokens/s (1 thread) |" in readme
    assert f"with transformers {results['environment']['versions']['transformers']} (" in readme


def decoding_rows(report: dict) -> list[str]:
    """The README's CPU decoding table rows of one report of scripts/benchmark.py (a size and thread count)."""
    settings, rows = report["settings"], []
    load = f"{report['loadavg_start'][0]:.1f} / {report['loadavg_end'][0]:.1f}"
    for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
        row = report["generate"][key]
        cells = [
            settings["size"], str(report["threads"]), search, f"**{row['speedup']:.2f}x**",
            f"{row['ct2_fp32_vs_ours']:.2f}x", f"{row['ct2_int8_vs_ours']:.2f}x",
            "yes" if row["outputs_equal_marian"] else "no", "yes" if row["ct2_fp32_outputs_equal_ours"] else "no", load,
        ]  # fmt: skip
        rows.append(f"| {' | '.join(cells)} |")
    return rows


def test_the_readme_cpu_decoding_table_is_the_committed_benchmark():
    """Every row of the README's CPU decoding table is rendered from docs/results/decoding_benchmark.json, whose
    reports compared the tokens of every timed batch, and which recorded the transformers release it ran on."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    reports = read_json(ROOT / "docs" / "results" / "decoding_benchmark.json")
    for report in reports:
        assert report["settings"]["device"] == "cpu" and "batches_equal_marian" in report["generate"]["greedy"]
        for row in decoding_rows(report):
            assert row in readme, row
    assert f"transformers {reports[0]['transformers']}, torch {reports[0]['torch']}" in readme


@pytest.mark.parametrize("version", ["5.23.0", "5.24.0"])
def test_the_readme_quotes_transformers_common_test_counts_from_their_files(version):
    """The counts of transformers' own common tests, per tested release, are those .ci/transformers_tests wrote."""
    results = read_json(ROOT / "docs" / "results" / "transformers_common" / f"{version}.json")
    assert results["transformers"] == version and results["failed"] == results["errors"] == 0
    assert sum(results["skip_reasons"].values()) == results["skipped"]
    counts = f"{results['passed']} passed, {results['skipped']} skipped, {results['failed']} failed"
    counts += f" ({results['subtests_passed']:,} subtests passed)"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"{version}: {counts}" in readme


@pytest.mark.parametrize("name", ["decoding_benchmark_cuda_bf16.json", "decoding_benchmark_cuda_bf16_batch128.json"])
def test_the_readme_gpu_decoding_rows_are_the_committed_benchmark(name):
    """Each GPU decoding row of the README (size, batch, search, ratio, both rates, token equality) is one
    measurement of the committed benchmark JSON, and the JSON names the GPU the README names."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for report in read_json(ROOT / "docs" / "results" / name):
        assert report["settings"]["device"] == "cuda" and report["device"] in readme
        for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
            row = report["generate"][key]
            cells = [
                report["settings"]["size"], str(row["batch_size"]), search, f"**{row['speedup']:.2f}x**",
                f"{row['ours_tokens_per_s']:,.0f}", f"{row['marian_tokens_per_s']:,.0f}",
                "yes" if row["outputs_equal_marian"] else "no",
            ]  # fmt: skip
            assert f"| {' | '.join(cells)} |" in readme


def test_the_readme_states_the_multi30k_presets_alpha_where_it_names_it():
    from vanilla_transformer.training.options import TrainingConfig

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    alpha = TrainingConfig.from_preset("multi30k").length_penalty
    stated = [float(value) for value in re.findall(r"`multi30k` preset's α is ([0-9.]+)", readme)]
    assert stated and all(value == alpha for value in stated), stated


def lora_rows(results: dict) -> list[str]:
    """The README's LoRA table, rendered from docs/results/lora.json (scripts/benchmark_lora.py)."""
    training, generate = results["training"], results["generate"]
    params, steps = training["parameters"], training["seconds_per_step"]
    share = params["lora"]["trainable"] / params["full"]["trainable"]
    rows = [
        f"| trainable parameters | {params['full']['trainable']:,} | {params['lora']['trainable']:,} ({share:.1%}) |",
        f"| training step, median | {1000 * steps['full']['median_s']:.1f} ms | {1000 * steps['lora']['median_s']:.1f}"
        f" ms ({training['lora_over_full_median']:.2f}x) |",
    ]
    for key, search in (("greedy", "greedy"), ("beam4", "beam 4")):
        speeds = {name: generate[key][name]["tokens_per_s"] for name in ("plain", "adapter", "merged")}
        rows.append(
            f"| `generate()` {search}, tokens/s: plain / with the adapter / merged | {speeds['plain']:,.0f} | "
            f"{speeds['adapter']:,.0f} / {speeds['merged']:,.0f} |"
        )
    return rows


def test_the_readme_lora_table_is_the_committed_benchmark():
    results = read_json(ROOT / "docs" / "results" / "lora.json")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(results["generate"][key]["adapter_equals_merged"] for key in ("greedy", "beam4"))
    for row in lora_rows(results):
        assert row in readme, row
    assert f"transformers {results['versions']['transformers']}, peft {results['versions']['peft']}" in readme
