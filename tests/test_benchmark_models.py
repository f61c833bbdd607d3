"""The benchmarks of a trained model directory at tiny size: LoRA against full fine-tuning (scripts/benchmark_lora.py)
and bf16 against fp32 decoding (scripts/benchmark_decoding_dtype.py). Each runs, writes its results file with the
record's environment, and its published figures render from what it wrote. No timing is asserted."""

import json

import pytest
from tiny_model import SPLITS


def test_the_lora_benchmark_writes_what_its_figures_render(tiny_model_dir, tmp_path):
    pytest.importorskip("peft", reason="the peft extra is not installed")
    import benchmark_lora

    output = tmp_path / "results" / "lora.json"
    arguments = ["--model", str(tiny_model_dir), "--json", str(output), "--threads", "1", "--steps", "3"]
    arguments += ["--warmup", "1", "--batch-size", "8", "--score-sentences", "4", "--generate-batches", "2"]
    arguments += ["--generate-batch-size", "3", "--num-beams", "2"]
    assert benchmark_lora.main(arguments) == 0
    run = json.loads(output.read_text())
    training = run["training"]
    assert training["seconds_per_step"]["full"]["count"] == training["seconds_per_step"]["lora"]["count"] == 3
    parameters = training["parameters"]
    assert 0 < parameters["lora"]["trainable"] < parameters["full"]["trainable"] == parameters["full"]["total"]
    assert training["score"]["sentences"] == 4 and set(training["score"]["exact_match"]) == {"base", "full", "lora"}
    for search in ("greedy", "beam2"):
        assert run["generate"][search]["adapter_equals_merged"]  # merging an adapter changes no output
    assert {"command", "load_average_start", "versions"} <= run.keys()
    assert f"{parameters['lora']['trainable']:,}" in benchmark_lora.lora_table(output.parent)
    assert run["versions"]["peft"] in benchmark_lora.lora_environment(output.parent)


def test_the_decoding_dtype_benchmark_writes_what_its_figure_renders(tiny_model_dir, tmp_path):
    import benchmark_decoding_dtype

    source, reference = tmp_path / "test.en", tmp_path / "test.de"
    source.write_text("".join(s + "\n" for s, _ in SPLITS.valid[:5]), encoding="utf-8")
    reference.write_text("".join(t + "\n" for _, t in SPLITS.valid[:5]), encoding="utf-8")
    output = tmp_path / "results" / "decoding_dtype_multi30k.json"
    arguments = ["--model", str(tiny_model_dir), "--source", str(source), "--reference", str(reference)]
    arguments += ["--threads", "1", "--repeats", "1", "--output", str(output)]
    assert benchmark_decoding_dtype.main(arguments) == 0
    run = json.loads(output.read_text())
    assert run["sentences"] == 5 and 0 <= run["same_translations"] <= 5
    assert run["fp32_tokens_per_s"] > 0 and run["bf16_tokens_per_s"] > 0 and run["versions"]["torch"]
    figure = benchmark_decoding_dtype.decoding_dtype(output.parent)
    assert f"({run['same_translations']:,} of the 5 translations identical)" in figure
