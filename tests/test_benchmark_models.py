"""The benchmark of a trained model directory at tiny size: LoRA against full fine-tuning (scripts/benchmark_lora.py)
runs, writes its results file with the record's environment, and its published figures render from what it wrote.
No timing is asserted. (bf16 against fp32 decoding is the decoding benchmark's, tests/test_benchmark_decoding.py.)"""

import json

import pytest


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
