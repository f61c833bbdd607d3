"""The serving benchmark (scripts/benchmark_onnx.py) at tiny size, and the figures rendered from what it writes."""

import json
import time

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("ctranslate2", reason="the serve extra (ctranslate2) is not installed")
import benchmark_onnx
from bench.serving import CT2_STOP_RULE
from tiny_model import SPLITS


def test_the_benchmark_writes_every_engine_and_the_figures_render_from_it(tmp_path, tiny_model_dir):
    sources, references = zip(*SPLITS.valid[:6], strict=True)
    (tmp_path / "test.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "test.de").write_text("".join(s + "\n" for s in references))
    output = tmp_path / "results" / benchmark_onnx.ONNX_SERVING
    arguments = ["--sizes", "tiny", "--threads", "1", "2", "--batch-size", "3", "--batches", "2", "--rounds", "1"]
    arguments += ["--vocab-size", "300", "--max-pairs", "300", "--data-dir", str(tmp_path / "no-data")]
    arguments += ["--quality-model", str(tiny_model_dir), "--output", str(output), "--profile"]
    arguments += ["--quality-source", str(tmp_path / "test.en"), "--quality-reference", str(tmp_path / "test.de")]
    assert benchmark_onnx.main(arguments) == 0
    run = json.loads(output.read_text())
    for search in ("greedy", "beam4"):
        row = run["sizes"]["tiny"][search]
        assert all(row[f"{name}_tokens_per_s"] > 0 for name in benchmark_onnx.CONTESTANTS)
        assert row["ort_fp32_batches_equal_torch"] == "4/4"  # the same search on two engines: the same tokens
        for name in benchmark_onnx.CONTESTANTS:  # every engine at each thread count, and reported at its best
            figures = row["by_threads"][name]
            assert figures.keys() == {"1", "2"} and all(value > 0 for value in figures.values())
            assert row[f"{name}_tokens_per_s"] == max(figures.values()) == figures[str(row[f"{name}_threads"])]
        assert row["ort_fp32_vs_ct2_fp32"] == pytest.approx(
            row["ort_fp32_tokens_per_s"] / row["ct2_fp32_tokens_per_s"], abs=1e-3
        )
        for name in ("ort_fp32", "ort_int8"):  # --profile: the same batches decoded once more, split
            split = row["inside_onnxruntime"][name]
            assert 0 < split["onnxruntime_seconds"] < split["seconds"] and split["runs"] > 0
            assert split["share_inside"] == pytest.approx(split["onnxruntime_seconds"] / split["seconds"], abs=1e-3)
            assert split["runs_only_tokens_per_s"] == pytest.approx(
                split["tokens"] / split["onnxruntime_seconds"], rel=0.01
            )
    quality = run["quality"]
    assert quality["ort_fp32"]["equal_to_torch"] == quality["sentences"] == 6
    assert {"command", "wall_seconds", "load_average_start", "processor", "versions"} <= run.keys()
    assert {"onnxruntime", "ctranslate2", "torch"} <= run["versions"].keys()
    assert run["sizes"]["tiny"]["seconds"]["load_ort_fp32"] > 0
    assert run["threads"] == [1, 2] and run["ct2_cpu_backend"] in ("mkl", "onednn")
    figures = benchmark_onnx.onnx_serving_table(output.parent)
    beam = run["sizes"]["tiny"]["beam4"]
    assert f"{beam['ort_fp32_tokens_per_s']:,.0f} ({beam['ort_fp32_threads']}t)" in figures
    assert "tiny" in figures and "beam 4" in figures
    assert f"{quality['ort_int8']['bleu']:.2f}" in benchmark_onnx.onnx_serving_quality(output.parent)
    environment = benchmark_onnx.onnx_serving_environment(output.parent)
    assert run["versions"]["onnxruntime"] in environment and "best of 1, 2 threads" in environment
    assert run["ct2_cpu_backend"] in environment
    assert benchmark_onnx.onnx_serving_table(tmp_path).startswith("Not measured yet")
    (output.parent / benchmark_onnx.ONNX_PROFILE).write_text(output.read_text())
    profile = benchmark_onnx.onnx_search_profile(output.parent)
    split = beam["inside_onnxruntime"]["ort_fp32"]
    assert f"{100 * split['share_inside']:.0f}%" in profile and f"{split['runs_only_tokens_per_s']:,.0f}" in profile
    assert "greedy" not in profile and benchmark_onnx.onnx_search_profile(tmp_path).startswith("Not measured yet")


def test_the_profile_counts_onnxruntime_runs_and_not_the_python_around_them():
    import onnxruntime

    from vanilla_transformer.serving.with_onnxruntime import reorder_graph

    session = onnxruntime.InferenceSession(reorder_graph(1), providers=["CPUExecutionProvider"])
    cache = np.zeros((2, 1, 1, 1), dtype=np.float32)

    def decode(batch):  # 0.2 s of Python, then two runs of a graph that takes microseconds
        time.sleep(0.2)
        for _ in range(2):
            session.run(None, {"rows": np.array([0, 1]), "cache.0": cache})
        return [[1, 2, 3]]

    split = benchmark_onnx.inside_onnxruntime(decode, [{}], ct2_tokens_per_s=100.0)
    assert split["runs"] == 2 and split["tokens"] == 3 and split["seconds"] >= 0.2
    assert split["share_inside"] < 0.1  # the sleep is outside onnxruntime
    assert split["runs_only_tokens_per_s"] == pytest.approx(3 / split["onnxruntime_seconds"], rel=0.05)
    assert benchmark_onnx.inside_onnxruntime(lambda batch: [[1]], [{}], 100.0)["runs_only_tokens_per_s"] is None


@pytest.mark.parametrize(("ceiling", "says"), [(1.2, "run 1.25 times faster"), (2.0, "25% of the time, where it now")])
def test_the_ceiling_figure_says_what_the_target_asks(tmp_path, ceiling, says):
    split = {"runs_only_vs_ct2_fp32": ceiling, "share_inside": 0.8}
    row = {"inside_onnxruntime": {"ort_fp32": split}, "ort_fp32_tokens_per_s": 100.0, "ort_int8_tokens_per_s": 130.0}
    (tmp_path / benchmark_onnx.ONNX_PROFILE).write_text(json.dumps({"sizes": {"small": {"beam4": row}}}))
    text = benchmark_onnx.onnx_search_ceiling(tmp_path)
    assert f"reach {ceiling:.2f} times" in text and says in text and "1.30 at small" in text
    if ceiling > 1.5:
        assert "takes 20%" in text


def test_the_stop_rule_run_compares_the_paper_s_rule_with_ctranslate2_s_own(tmp_path, tiny_model_dir):
    """``--trained``: on a trained model's test file, the paper's stop rule on CTranslate2 and CTranslate2's own,
    fp32 and int8, at each thread count, greedy and beam 4, beside the oracle (each sentence searched once to its
    shortest proof): tokens per second, steps, translations equal to PyTorch's (the paper's rule and the oracle: all,
    at fp32) and BLEU; the table renders each at its best thread count."""
    sources, references = zip(*SPLITS.valid[:8], strict=True)
    (tmp_path / "test.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "test.de").write_text("".join(s + "\n" for s in references))
    output = tmp_path / "results" / CT2_STOP_RULE
    arguments = ["--threads", "1", "2", "--rounds", "1", "--output", str(output)]
    arguments += ["--trained", "tiny", str(tiny_model_dir), str(tmp_path / "test.en"), str(tmp_path / "test.de")]
    assert benchmark_onnx.main(arguments) == 0
    run = json.loads(output.read_text())
    workload = run["workloads"]["tiny"]
    assert workload["sentences"] == 8 and workload["alpha"] > 0
    for search in ("greedy", "beam4"):
        assert set(workload[search]) == {
            "torch_bleu",
            "torch_chrf",
            "torch_steps",
            "fp32@1",
            "fp32@2",
            "int8@1",
            "int8@2",
        }
        for setting in ("fp32@1", "fp32@2"):
            row = workload[search][setting]
            assert row["paper_equal_torch"] == 8 and row["paper_tokens_per_s"] > 0 and row["own_tokens_per_s"] > 0
            assert row["paper_vs_own"] == pytest.approx(row["paper_tokens_per_s"] / row["own_tokens_per_s"], abs=1e-3)
            assert row["paper_steps"]["beam"] > 0 and row["paper_steps"]["rounds"][0] == 8 and row["own_steps"] > 0
            # The oracle searches each sentence once, to its shortest proof: the same answers, no more steps.
            assert row["oracle_equal_torch"] == 8 and 0 < row["oracle_steps"] <= row["paper_steps"]["beam"]
            assert row["oracle_vs_own"] == pytest.approx(
                row["oracle_tokens_per_s"] / row["own_tokens_per_s"], abs=1e-3
            )
            assert row["rounds"] >= 1
            assert (
                row["paper_bleu"] == workload[search]["torch_bleu"]
                and row["paper_chrf"] == workload[search]["torch_chrf"]
            )
    figures = benchmark_onnx.ct2_stop_rule_table(output.parent)
    assert "tiny (8)" in figures and "beam 4" in figures and "int8" in figures
    assert run["versions"]["ctranslate2"] in benchmark_onnx.ct2_stop_rule_environment(output.parent)
    assert benchmark_onnx.ct2_stop_rule_table(tmp_path).startswith("Not measured yet")
