"""scripts/gpu_check.sh, the GPU check of issue 36, run at its tiny size on the CPU so that it cannot rot before a
GPU is lent: every step runs, and every results file it promises is written, with the figures the GPU run reads,
in no more files than the device tool brings back."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_check_runs_at_tiny_size_and_writes_every_results_file(tmp_path):
    out = tmp_path / "check"
    environment = {**os.environ, "PYTHON": sys.executable, "GPU_WHEELS": str(tmp_path / "no-wheels")}
    completed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--tiny", str(out)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    summary = (out / "summary.txt").read_text()
    assert completed.returncode == 0, summary + completed.stderr[-3000:]
    assert [line.split(":")[0] for line in summary.splitlines()] == [
        "environment",
        "cuda_tests",
        "training_eager",
        "decoding_batch4",
        "decoding_batch8",
        "training_compiled",
        "failed steps",
    ]
    assert len(list(out.iterdir())) <= 8  # the device tool brings back at most 8 files
    with tarfile.open(out / "logs.tgz") as logs:
        assert {"./cuda_tests.log", "./training_eager.log", "./training_compiled.log"} <= set(logs.getnames())
    recorded = json.loads((out / "environment.json").read_text())
    assert recorded["versions"]["torch"] and recorded["cuda_available"] is False

    for name in ("training_eager", "training_compiled"):
        training = json.loads((out / f"{name}.json").read_text())
        assert training["settings"]["grad_accum"] == 2 and training["data"]["synthetic"]
        for row in training["contestants"].values():
            assert 0 < row["tokens_per_step"] < row["padded_tokens_per_step"]  # real tokens, not padding
            assert row["model_flops_per_second"] > 0 and 0 < row["mfu"]
        assert training["ratio"] > 0 and training["versions"]["torch"]
    # The eager run's profile: each contestant's steps seen by torch's profiler and by Python's, on the CPU no
    # device time; the linear layers' matrix products are among the operators, the backward pass among the functions.
    for row in json.loads((out / "training_eager.json").read_text())["contestants"].values():
        profile = row["profile"]
        assert profile["steps"] == 2 and profile["wall_seconds"] > 0 and profile["device_busy_share"] is None
        assert {"aten::mm", "aten::addmm"} & {op["name"] for op in profile["top_host"]}
        assert any("run_backward" in function["function"] for function in profile["top_python"])

    for batch in (4, 8):
        decoding = json.loads((out / f"decoding_batch{batch}.json").read_text())
        for search in ("greedy", "beam4"):
            row = decoding["generate"][search]
            assert row["batch_size"] == batch and row["outputs_equal_marian"]
