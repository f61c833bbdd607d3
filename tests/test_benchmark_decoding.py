"""The decoding benchmark (scripts/benchmark_decoding.py) at tiny size, and the figures rendered from what it writes."""

import json
import time

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("ctranslate2", reason="the serve extra (ctranslate2) is not installed")
import benchmark_decoding
from bench.serving import CT2_STOP_RULE
from tiny_model import SPLITS


def test_the_benchmark_writes_every_contestant_and_the_figures_render_from_it(tmp_path, tiny_model_dir):
    """Every contestant at each thread count, reported at its best; the same search on two engines (onnxruntime and
    PyTorch) and the same network in two libraries (ours and MarianMT, generate()) return the same tokens; the
    profile splits onnxruntime's time; the trained model's quality rows; and every figure renders from the file."""
    sources, references = zip(*SPLITS.valid[:6], strict=True)
    (tmp_path / "test.en").write_text("".join(s + "\n" for s in sources))
    (tmp_path / "test.de").write_text("".join(s + "\n" for s in references))
    output = tmp_path / "results" / benchmark_decoding.DECODING_CPU
    arguments = ["--sizes", "tiny", "--threads", "1", "2", "--batch-size", "3", "--batches", "2", "--rounds", "1"]
    arguments += ["--vocab-size", "300", "--max-pairs", "300", "--data-dir", str(tmp_path / "no-data")]
    arguments += ["--quality-model", str(tiny_model_dir), "--output", str(output), "--profile"]
    arguments += ["--quality-source", str(tmp_path / "test.en"), "--quality-reference", str(tmp_path / "test.de")]
    assert benchmark_decoding.main(arguments) == 0
    run = json.loads(output.read_text())
    contestants = benchmark_decoding.CPU_CONTESTANTS
    assert set(contestants) == {"torch", "torch_bf16", "ort_fp32", "ort_int8", "ct2_fp32", "ct2_int8", "generate",
                                "marian"} and run["contestants"] == contestants  # fmt: skip
    for search in ("greedy", "beam4"):
        row = run["sizes"]["tiny"][search]
        assert row["ort_fp32_batches_equal_torch"] == "4/4"  # the same search on two engines: the same tokens
        assert row["generate_batches_equal_marian"] == "4/4"  # the same network in two libraries
        for name in contestants:  # every contestant at each thread count, and reported at its best
            figures = row["by_threads"][name]
            assert figures.keys() == {"1", "2"} and all(value > 0 for value in figures.values())
            assert row[f"{name}_tokens_per_s"] == max(figures.values()) == figures[str(row[f"{name}_threads"])]
        for a, b in (("ort_fp32", "ct2_fp32"), ("generate", "marian"), ("torch_bf16", "torch")):
            assert row[f"{a}_vs_{b}"] == pytest.approx(row[f"{a}_tokens_per_s"] / row[f"{b}_tokens_per_s"], abs=1e-3)
        for name in ("ort_fp32", "ort_int8"):  # --profile: the same batches decoded once more, split
            split = row["inside_onnxruntime"][name]
            assert 0 < split["onnxruntime_seconds"] < split["seconds"] and split["runs"] > 0
            assert split["share_inside"] == pytest.approx(split["onnxruntime_seconds"] / split["seconds"], abs=1e-3)
            assert split["runs_only_tokens_per_s"] == pytest.approx(
                split["tokens"] / split["onnxruntime_seconds"], rel=0.01
            )
    quality = run["quality"]  # every contestant of the paper's search, none of generate()'s
    assert set(quality) >= {"torch", "torch_bf16", "ort_fp32", "ort_int8", "ct2_fp32", "ct2_int8"}
    assert not {"generate", "marian"} & set(quality)
    assert quality["ort_fp32"]["equal_to_torch"] == quality["torch"]["equal_to_torch"] == quality["sentences"] == 6
    assert all(quality[name]["tokens_per_s"] > 0 for name in ("torch", "torch_bf16", "ct2_int8"))
    assert {"command", "wall_seconds", "load_average_start", "processor", "versions"} <= run.keys()
    assert {"onnxruntime", "ctranslate2", "torch"} <= run["versions"].keys()
    assert run["sizes"]["tiny"]["seconds"]["load_ort_fp32"] > 0
    assert run["threads"] == [1, 2] and run["ct2_cpu_backend"] in ("mkl", "onednn")
    beam = run["sizes"]["tiny"]["beam4"]
    figures = benchmark_decoding.onnx_serving_table(output.parent)
    assert f"{beam['ort_fp32_tokens_per_s']:,.0f} ({beam['ort_fp32_threads']}t)" in figures
    assert "tiny" in figures and "beam 4" in figures
    table = benchmark_decoding.decoding_cpu_table(output.parent)
    assert f"**{beam['generate_vs_marian']:.2f}x**" in table and f"{beam['torch_bf16_vs_torch']:.2f}x" in table
    assert f"{quality['ort_int8']['bleu']:.2f}" in benchmark_decoding.onnx_serving_quality(output.parent)
    dtype = benchmark_decoding.decoding_dtype(output.parent)
    assert f"with BLEU {quality['torch_bf16']['bleu']:.2f}" in dtype and "of the 6 translations" in dtype
    environment = benchmark_decoding.onnx_serving_environment(output.parent)
    assert run["versions"]["onnxruntime"] in environment and "best of 1, 2 threads" in environment
    assert run["ct2_cpu_backend"] in environment
    (output.parent / benchmark_decoding.ONNX_PROFILE).write_text(output.read_text())
    profile = benchmark_decoding.onnx_search_profile(output.parent)
    split = beam["inside_onnxruntime"]["ort_fp32"]
    assert f"{100 * split['share_inside']:.0f}%" in profile and f"{split['runs_only_tokens_per_s']:,.0f}" in profile
    assert "greedy" not in profile


def test_a_gpu_run_takes_the_contestants_it_names_and_refuses_onnxruntime(tmp_path):
    """``--contestants``: only those named run (the GPU script's generate/MarianMT/PyTorch in bf16 here, on the
    CPU); onnxruntime runs on the CPU only, so ``--device cuda`` with an ort contestant is refused in one line."""
    output = tmp_path / "run.json"
    arguments = ["--sizes", "tiny", "--threads", "1", "--batch-size", "2", "--batches", "1", "--rounds", "1"]
    arguments += ["--vocab-size", "300", "--max-pairs", "200", "--data-dir", str(tmp_path / "no-data"), "--num-beams"]
    arguments += ["2", "--contestants", "generate_bf16", "marian_bf16", "torch_bf16", "--output", str(output)]
    assert benchmark_decoding.main(arguments) == 0
    row = json.loads(output.read_text())["sizes"]["tiny"]["beam2"]
    assert set(row["by_threads"]) == {"generate_bf16", "marian_bf16", "torch_bf16"}
    assert row["generate_bf16_batches_equal_marian_bf16"] in ("0/1", "1/1")  # bf16: the libraries' rounding differs
    assert "quality" not in json.loads(output.read_text())
    with pytest.raises(SystemExit, match="--contestants: onnxruntime's"):
        benchmark_decoding.main(["--device", "cuda", "--contestants", "torch", "ort_int8"])


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

    split = benchmark_decoding.inside_onnxruntime(decode, [{}], ct2_tokens_per_s=100.0)
    assert split["runs"] == 2 and split["tokens"] == 3 and split["seconds"] >= 0.2
    assert split["share_inside"] < 0.1  # the sleep is outside onnxruntime
    assert split["runs_only_tokens_per_s"] == pytest.approx(3 / split["onnxruntime_seconds"], rel=0.05)
    assert benchmark_decoding.inside_onnxruntime(lambda batch: [[1]], [{}], 100.0)["runs_only_tokens_per_s"] is None


@pytest.mark.parametrize(("ceiling", "says"), [(1.2, "run 1.25 times faster"), (2.0, "25% of the time, where it now")])
def test_the_ceiling_figure_says_what_the_target_asks(tmp_path, ceiling, says):
    split = {"runs_only_vs_ct2_fp32": ceiling, "share_inside": 0.8}
    row = {"inside_onnxruntime": {"ort_fp32": split}, "ort_fp32_tokens_per_s": 100.0, "ort_int8_tokens_per_s": 130.0}
    (tmp_path / benchmark_decoding.ONNX_PROFILE).write_text(json.dumps({"sizes": {"small": {"beam4": row}}}))
    text = benchmark_decoding.onnx_search_ceiling(tmp_path)
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
    assert benchmark_decoding.main(arguments) == 0
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
    figures = benchmark_decoding.ct2_stop_rule_table(output.parent)
    assert "tiny (8)" in figures and "beam 4" in figures and "int8" in figures
    assert run["versions"]["ctranslate2"] in benchmark_decoding.ct2_stop_rule_environment(output.parent)


def test_a_contestant_whose_engine_is_not_installed_is_refused_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *more: None if name == "ctranslate2" else real(name))
    with pytest.raises(
        SystemExit, match=r"ctranslate2 is not installed \(pip install 'vanilla-transformer\[serve\]'\)"
    ):
        benchmark_decoding.parse_args(["--contestants", "torch", "ct2_int8"])
    assert benchmark_decoding.parse_args(["--contestants", "torch"]).contestants == ["torch"]  # none needs it
