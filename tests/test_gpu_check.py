"""scripts/gpu_check.sh, the GPU check of issue 36, run at its tiny size on the CPU so that it cannot rot before a
GPU is lent: every step runs, and every results file it promises is written, with the figures the GPU run reads."""

import json
import os
import subprocess
import sys
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
        "training",
        "decoding_batch4",
        "decoding_batch8",
        "failed steps",
    ]
    recorded = json.loads((out / "environment.json").read_text())
    assert recorded["versions"]["torch"] and recorded["cuda_available"] is False

    training = json.loads((out / "training.json").read_text())
    assert training["settings"]["grad_accum"] == 2 and training["data"]["synthetic"]
    for row in training["contestants"].values():
        assert 0 < row["tokens_per_step"] < row["padded_tokens_per_step"]  # real tokens, not padding
        assert row["model_flops_per_second"] > 0 and 0 < row["mfu"]
    assert training["ratio"] > 0 and training["versions"]["torch"]

    for batch in (4, 8):
        decoding = json.loads((out / f"decoding_batch{batch}.json").read_text())
        for search in ("greedy", "beam4"):
            row = decoding["generate"][search]
            assert row["batch_size"] == batch and row["outputs_equal_marian"]
