"""scripts/benchmark_packing.py end to end at a tiny size: both jobs on both capabilities, the contestants the
packing they claim (no timing is asserted), and the figures rendered from the results file."""

import json
import random

import benchmark_packing

WORDS = "a red blue green dog cat bird man woman child runs sits eats sees the small big old".split()


def test_the_benchmark_times_packing_on_and_off_in_both_jobs(tmp_path):
    rng = random.Random(0)
    corpus = tmp_path / "multi30k"
    corpus.mkdir()
    lengths = [rng.randint(2, 14) for _ in range(400)]
    for language in ("en", "de"):
        lines = [" ".join(rng.choice(WORDS) for _ in range(length)) for length in lengths]
        (corpus / f"train.{language}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "packing_cpu.json"
    options = ["--model-size", "tiny", "--vocab-size", "300", "--max-tokens", "400", "--batches", "2"]
    options += ["--rounds", "1", "--data-dir", str(corpus), "--output", str(output)]
    assert benchmark_packing.main(options) == 0
    run = json.loads(output.read_text(encoding="utf-8"))
    assert set(run["capabilities"]) == {"native", "avx2"}
    assert run["capabilities"]["avx2"]["aten_capability"] == "AVX2"
    for measured in run["capabilities"].values():
        assert set(measured["jobs"]) == {"train", "seq2seq_trainer"}
        for job in measured["jobs"].values():
            assert job["packed"]["off"] is False and job["speedup"] > 0 and job["batches"] == 2
        assert measured["jobs"]["seq2seq_trainer"]["packed"]["on"] is True  # (the worker checks both jobs)
        # Random batches are padded far more than token batches.
        assert measured["jobs"]["seq2seq_trainer"]["mean_padding"] > measured["jobs"]["train"]["mean_padding"]
    table = benchmark_packing.packing_table(tmp_path)
    assert len(table.splitlines()) == 2 + 4 and "AVX2 (emulated on this CPU)" in table
    assert "tiny model" in benchmark_packing.packing_environment(tmp_path)
