"""scripts/gpu_check.sh and scripts/gpu_multi30k.sh, the GPU commands of issue 55, run at their tiny size on the CPU
so that they cannot rot before a GPU is lent: every step runs, and every results file they promise is written, with
the figures the GPU run reads, in no more files than the device tool brings back."""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import benchmark_decoding
import pytest

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = Path(os.environ.get("VANILLA_TRANSFORMER_DATA", ROOT.parent / "shared" / "data")) / "multi30k"


def run_script(name: str, tmp_path: Path, **environment) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / name
    environment = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(tmp_path / "no-wheels"), **environment}
    completed = subprocess.run(
        ["bash", str(ROOT / "scripts" / f"{name}.sh"), "--tiny", str(out)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    return completed, out


def test_the_gpu_check_runs_at_tiny_size_and_writes_every_results_file(tmp_path):
    completed, out = run_script("gpu_check", tmp_path)
    summary = (out / "summary.txt").read_text()
    assert completed.returncode == 0, summary + completed.stderr[-3000:]
    assert [line.split(":")[0] for line in summary.splitlines()] == [
        "environment",
        "cuda_tests",
        "training_base",
        "training_compiled",
        "training_big",
        "decoding_batch4",
        "decoding_batch8",
        "failed steps",
    ]
    assert len(list(out.iterdir())) <= 8  # the device tool brings back at most 8 files
    with tarfile.open(out / "logs.tgz") as logs:
        assert {"./cuda_tests.log", "./training_base.log", "./training_compiled.log"} <= set(logs.getnames())
        tests_log = logs.extractfile("./cuda_tests.log").read().decode()
        compiled_log = logs.extractfile("./training_compiled.log").read().decode()
    # The CUDA tests: the attention backends' and the micro-batch plan's files whole, and the tests that CUDA's
    # absence skips elsewhere (fp16's loss scaling) by name; here, on the CPU, those are skipped and the rest pass.
    command = tests_log.splitlines()[0].split()
    assert {"tests/test_sdpa_backends.py", "tests/test_micro_batches.py"} <= set(command)
    assert "tests/test_precision.py::test_fp16_on_cuda_skips_overflowing_steps_without_counting_them" in command
    for name in ("test_micro_batches.py::test_one_micro_batch_takes_the_same_step_as_four",
                 "test_micro_batches.py::test_tokens_in_memory_reads_the_gpus_free_memory",
                 "test_sdpa_backends.py::test_training_attention_runs_without_cudnn_on_cuda_and_restores_torchs_switches",
                 "test_sdpa_backends.py::test_decoding_runs_under_the_same_backends[4]"):  # fmt: skip
        assert f"PASSED tests/{name}" in tests_log, name
    for file, reason in (("test_sdpa_backends.py", "needs CUDA"), ("test_precision.py", "fp16 with loss scaling")):
        assert re.search(rf"SKIPPED \[1\] tests/{file}:\d+: {reason}", tests_log), file
    recorded = json.loads((out / "environment.json").read_text())
    assert recorded["versions"]["torch"] and recorded["cuda_available"] is False

    # Training: train's default (marked, with what it resolved to), the same in fixed micro-batches, plain PyTorch and
    # the Trainer at its best (cuDNN's attention off) at the base size; ours compiled three ways against the default;
    # the default and plain PyTorch at big. Every row has its MFU.
    kinds = {"training_base": ["ours", "ours", "torch", "trainer"], "training_big": ["ours", "torch"]}
    kinds["training_compiled"] = ["ours", "ours", "ours", "ours"]
    for name, expected in kinds.items():
        training = json.loads((out / f"{name}.json").read_text())
        rows = training["contestants"]
        assert [row["kind"] for row in rows.values()] == expected, name
        assert training["settings"]["grad_accum"] == 2 and training["data"]["synthetic"]
        assert rows["ours:default"]["default"] is True and rows["ours:default"]["resolved"]["mixed_precision"] == "no"
        for row in rows.values():
            assert 0 < row["tokens_per_step"] < row["padded_tokens_per_step"]  # real tokens, not padding
            assert row["model_flops_per_second"] > 0 and 0 < row["mfu"]
        assert training["versions"]["torch"]
    base = json.loads((out / "training_base.json").read_text())
    assert base["contestants"]["ours:default,micro=fixed"]["micro"] == "fixed"
    assert base["trainer_best"].endswith("cudnn=off") and base["default_vs_torch_best"] > 0
    assert base["default_vs_trainer_best"] > 0
    # Ours compiled by inductor (here too, on the CPU): SDPA, eager attention, cuDNN's attention alone (on CUDA; its
    # ragged path asked for). Each row counts its recompilations and graph breaks, and each worker's log, written
    # under TORCH_LOGS=recompiles,graph_breaks, is in the step's log.
    compiled = json.loads((out / "training_compiled.json").read_text())["contestants"]
    variants = {name: row for name, row in compiled.items() if name != "ours:default"}
    assert [(row["compile"], row["attn"], row.get("cudnn")) for row in variants.values()] == [
        ("inductor", "sdpa", None), ("inductor", "eager", None), ("inductor", "sdpa", "only"),
    ]  # fmt: skip
    assert all(row["warmup_compilations"] > 0 for row in variants.values())  # inductor ran
    assert compiled["ours:default"]["torch_logs"] == {"recompiles": 0, "graph_breaks": 0}  # eager: nothing to log
    for row in variants.values():
        assert set(row["torch_logs"]) == {"recompiles", "graph_breaks"}
    assert compiled_log.count("its worker's log (TORCH_LOGS=recompiles,graph_breaks)") == 4
    # The compiled run's profile: each contestant's steps seen by torch's profiler and by Python's, on the CPU no
    # device time; the linear layers' matrix products are among the operators, the backward pass among the functions.
    for row in compiled.values():
        profile = row["profile"]
        assert profile["steps"] == 2 and profile["wall_seconds"] > 0 and profile["device_busy_share"] is None
        if row["compile"] == "no":  # (compiled, inductor's fused kernels take the matrix products' place)
            assert {"aten::mm", "aten::addmm"} & {op["name"] for op in profile["top_host"]}
        assert any("run_backward" in function["function"] for function in profile["top_python"])

    for batch in (4, 8):
        decoding = json.loads((out / f"decoding_batch{batch}.json").read_text())
        assert decoding["warmup"] == 1 and decoding["batch_size"] == batch
        assert decoding["contestants"] == ["generate", "marian", "torch"]
        for search in ("greedy", "beam4"):
            row = decoding["sizes"]["tiny"][search]
            assert row["generate_batches_equal_marian"] == "1/1" and row["generate_vs_marian"] > 0
    # The decoding figure renders these files (this benchmark's layout) as it renders the older runs' layout.
    figure = benchmark_decoding.decoding_gpu_table(out, ("decoding_batch4.json", "decoding_batch8.json"))
    row = json.loads((out / "decoding_batch8.json").read_text())["sizes"]["tiny"]["beam4"]
    assert f"| tiny | 8 | beam 4 | **{row['generate_vs_marian']:.2f}x** |" in figure and figure.count("| tiny |") == 4


@pytest.mark.skipif(not (MULTI30K / "train.en").is_file(), reason="needs the Multi30k files")
def test_the_multi30k_command_trains_keeps_by_validation_and_writes_a_committable_run(tmp_path):
    """gpu_multi30k.sh at its tiny size on the first pairs of Multi30k (read in place, not copied into the
    repository): the run's results, metrics and settings, run.json, the summary and the log, nothing else."""
    corpus = tmp_path / "multi30k"
    corpus.mkdir()
    for split, lines in (("train", 300), ("valid", 20), ("test_2016_flickr", 20)):
        for language in ("en", "de"):
            text = (MULTI30K / f"{split}.{language}").read_text(encoding="utf-8").splitlines()[:lines]
            (corpus / f"{split}.{language}").write_text("\n".join(text) + "\n", encoding="utf-8")
    completed, out = run_script("gpu_multi30k", tmp_path, MULTI30K=str(corpus))
    assert completed.returncode == 0, completed.stderr[-3000:]
    files = {"results.json", "metrics.jsonl", "training_config.json", "run.json", "summary.txt", "logs.tgz"}
    assert {path.name for path in out.iterdir()} == files
    results = json.loads((out / "results.json").read_text())
    assert results["step"] == 6 and results["selected"] in ("averaged", "last")  # kept by validation BLEU
    assert {"valid_bleu_averaged", "valid_bleu_last", "test_bleu", "test_chrf"} <= set(results)  # scored on test2016
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [row["step"] for row in metrics if "valid_bleu" in row] == [3, 6]  # validated during training
    run = json.loads((out / "run.json").read_text())
    assert run["exit_status"] == 0 and run["command"].startswith("vanilla-transformer train --preset multi30k")
    assert run["versions"]["torch"]


def test_the_multi30k_command_names_missing_data_in_one_line(tmp_path):
    completed, _ = run_script("gpu_multi30k", tmp_path, MULTI30K=str(tmp_path / "nowhere"))
    assert completed.returncode == 1
    assert completed.stderr.strip().count("\n") == 0 and "MULTI30K" in completed.stderr


def test_the_gpu_check_keeps_to_its_budget(tmp_path):
    """Each step's limit is cut to what GPU_CHECK_SECONDS leaves: with no time left, a step is recorded as not run
    (and failed), and the check still ends with its summary and its logs."""
    completed, out = run_script("gpu_check", tmp_path, GPU_CHECK_SECONDS="12")
    lines = (out / "summary.txt").read_text().splitlines()
    not_run = [line.split(":")[0] for line in lines if "not run" in line]
    assert not_run[-3:] == ["training_big", "decoding_batch4", "decoding_batch8"]
    assert completed.returncode == len([line for line in lines[:-1] if "exit 0" not in line]) >= 5
    assert (out / "logs.tgz").is_file() and lines[-1] == f"failed steps: {completed.returncode}"
