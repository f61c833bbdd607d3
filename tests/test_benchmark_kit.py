"""scripts/bench: the interleaved timer's order, warm-up and device synchronisation; the results record; reading
back every committed results file's environment; the workloads (FLOPs, batches, the training step); the figures'
collection. No timing is asserted."""

import importlib
import importlib.metadata
import json
from pathlib import Path

import bench
import pytest
import render_figures
import torch

from vanilla_transformer import VanillaTransformerForConditionalGeneration

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def logging_contestants(log, names=("a", "b", "c")):
    return {name: (lambda item, n=name: log.append((n, item)) or f"{n}{item}") for name in names}


def test_contestants_warm_up_one_after_another_then_alternate_every_round():
    log = []
    timings = bench.interleave(logging_contestants(log), ["x", "y"], repeats=2, warmup=2, warmup_item="w")
    warmup = [("a", "w"), ("a", "w"), ("b", "w"), ("b", "w"), ("c", "w"), ("c", "w")]
    rounds = [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"], ["c", "b", "a"]]
    items = ["x", "y", "x", "y"]
    assert log == warmup + [(name, item) for order, item in zip(rounds, items, strict=True) for name in order]
    assert timings.order == rounds
    assert timings.warmup_returned == {"a": "aw", "b": "bw", "c": "cw"} and set(timings.warmup_seconds) == set("abc")
    assert timings.returned["b"] == ["bx", "by", "bx", "by"]  # every timed call, warm-up left out
    assert [len(per_item) for per_item in timings.seconds["a"]] == [2, 2]  # per item, one per repeat
    assert len(timings.medians("a")) == 2 and timings.total("a") == pytest.approx(sum(timings.medians("a")))
    assert len(timings.samples("c")) == 4


def test_no_warm_up_calls_each_contestant_exactly_once_per_item():
    """A training step must not run more steps than the others (benchmark_precision compares BLEU after them)."""
    log = []
    bench.interleave(logging_contestants(log, "ab"), range(3), warmup=0)
    assert sorted(log) == [(name, item) for name in "ab" for item in range(3)]
    assert log[:2] == [("a", 0), ("b", 0)] and log[2:4] == [("b", 1), ("a", 1)]


def test_progress_sees_the_time_of_the_items_reached_so_far():
    """benchmark_precision prints tokens/s every 50 steps from `total`, while the later steps have no time yet."""
    seen = []

    def progress(round_index, timings):
        seen.append(
            (len(timings.medians("a")), timings.total("a") == pytest.approx(sum(sum(s) for s in timings.seconds["a"])))
        )

    bench.interleave(logging_contestants([], "ab"), range(3), warmup=0, progress=progress)
    assert seen == [(1, True), (2, True), (3, True)]


def test_a_cuda_device_is_synchronised_around_every_timed_call(monkeypatch):
    events = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))
    contestants = {"a": lambda item: events.append("call")}
    bench.interleave(contestants, [1, 2], warmup=1, device="cuda")
    # The warm-up as a whole, then each timed call: its queued kernels belong to its time.
    assert events == ["sync", "call", "sync"] + ["sync", "call", "sync"] * 2
    events.clear()
    bench.interleave(contestants, [1, 2], warmup=1, device="cpu")
    assert events == ["call"] * 3


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="repeats"):
        bench.interleave({"a": print}, [1], repeats=0)
    with pytest.raises(ValueError, match="at least one item"):
        bench.interleave({"a": print}, [])


def test_the_record_names_the_torch_build_as_torch_reports_it(monkeypatch):
    """Issue 36: a CUDA wheel's metadata says 2.14.1 where torch.__version__ says 2.14.1+cu130."""
    real = importlib.metadata.version
    monkeypatch.setattr(torch, "__version__", "2.14.1+cu130")
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "2.14.1" if name == "torch" else real(name))
    result = bench.Record().result({"figure": 1})
    assert result["versions"]["torch"] == "2.14.1+cu130"
    assert result["versions"]["transformers"] == real("transformers")


def test_the_record_writes_the_figures_with_the_command_load_and_machine(tmp_path):
    record = bench.Record("scripts/benchmark_x.py", ["--steps", "3"])
    written = record.write({"speedup": 1.5}, tmp_path / "out" / "result.json")
    assert json.loads((tmp_path / "out" / "result.json").read_text()) == written
    assert written["speedup"] == 1.5 and written["command"] == "python scripts/benchmark_x.py --steps 3"
    assert len(written["load_average_start"]) == len(written["load_average_end"]) == 3
    assert written["wall_seconds"] >= 0 and written["processor"] and written["gpus"] == []
    with pytest.raises(ValueError, match="versions"):
        record.result({"versions": {}})  # a figure may not hide the record's own fields


@pytest.mark.parametrize(
    "name, start, end",
    [
        ("decoding_benchmark_cuda_bf16.json", "loadavg_start", "loadavg_end"),
        ("data_benchmark_450000_before.json", "load_average_before", "load_average_after"),
        ("lora.json", "load_average_start", "load_average_end"),
        ("training_vs_trainer.json", "load_average_start", "load_average_end"),
    ],
)
def test_every_committed_schema_reads_back_as_the_records(name, start, end):
    result = json.loads((RESULTS / name).read_text())
    result = result[0] if isinstance(result, list) else result  # a report per model size
    environment = bench.environment_of(result)
    assert (environment["load_average_start"], environment["load_average_end"]) == (result[start], result[end])
    torch_version = (result.get("versions") or {}).get("torch") or result.get("torch")  # the data benchmark's: none
    assert environment["versions"].get("torch") == torch_version


def test_the_record_names_the_cpu_features_that_decide_cpu_figures(tmp_path, monkeypatch):
    """The same model name ("AMD EPYC") covers AVX2-only processors and processors with native bf16: the record
    keeps which, read from the flags of /proc/cpuinfo, and None where they cannot be read."""
    from vanilla_transformer import environment

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16 fma\n")
    real = environment.cpu_flags
    monkeypatch.setattr(environment, "cpu_flags", lambda: real(cpuinfo))
    assert environment.run_environment()["processor_features"] == ["avx2", "avx512_bf16", "avx512f"]
    cpuinfo.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 fma\n")
    assert environment.run_environment()["processor_features"] == ["avx2"]
    monkeypatch.setattr(environment, "cpu_flags", lambda: None)
    assert environment.run_environment()["processor_features"] is None


def test_forward_flops_counts_every_linear_layer_once_per_token():
    config = bench.model_config("tiny", vocab_size=60)
    model = VanillaTransformerForConditionalGeneration(config)
    linear = {
        name: m.in_features * m.out_features for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }
    encoder = sum(v for k, v in linear.items() if k.startswith("model.encoder"))
    decoder = sum(v for k, v in linear.items() if k.startswith("model.decoder"))
    source, target, d = 5, 3, config.d_model
    attention = config.encoder_layers * 2 * source * source * d + config.decoder_layers * (
        target * (target + 1) * d + 2 * target * source * d
    )
    # Cross-attention keys and values project source tokens; every other decoder linear projects target tokens.
    cross_kv = config.decoder_layers * 2 * d * d
    expected = 2 * (
        source * encoder + target * (decoder - cross_kv) + source * cross_kv + target * linear["lm_head"] + attention
    )
    assert bench.forward_flops(config, [source], [target]) == expected
    assert bench.training_flops(config, bench.collate([([4] * source, [4] * target)])) == 3 * expected


def test_the_decoding_sources_are_multi30k_s_where_present_else_synthetic(tmp_path):
    """`bench.source_sentences`: the first sources of a Multi30k folder as they are, or synthetic sentences of
    varied lengths (2 to 60 words) where the folder is absent."""
    (tmp_path / "train.en").write_text("".join(f"sentence {i}\n" for i in range(10)), encoding="utf-8")
    (tmp_path / "train.de").write_text("".join(f"Satz {i}\n" for i in range(10)), encoding="utf-8")
    texts, description = bench.source_sentences(str(tmp_path), 4)
    assert texts == [f"sentence {i}" for i in range(4)] and description.startswith("Multi30k")
    texts, description = bench.source_sentences(str(tmp_path / "absent"), 500)
    lengths = [len(text.split()) for text in texts]
    assert len(texts) == 500 and "synthetic" in description and 2 <= min(lengths) < max(lengths) <= 60


def test_the_training_step_takes_the_packages_adam_with_the_papers_settings():
    """`bench.adam` is `build_adam` of the training settings' defaults (section 5.3: beta2 0.98, epsilon 1e-9), at
    the rate asked; `bench.train_step` takes one step of it and leaves no gradient behind."""
    from vanilla_transformer.training.config import OptimizationConfig

    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(bench.model_config("tiny", vocab_size=60, dropout=0.0))
    optimizer = bench.adam(model, learning_rate=0.01, kernels="fused")
    defaults, group = OptimizationConfig(), optimizer.param_groups[0]
    assert group["betas"] == (defaults.adam_beta1, defaults.adam_beta2) == (0.9, 0.98)
    assert group["eps"] == defaults.adam_eps == 1e-9 and group["lr"] == 0.01 and group["fused"]
    batch = bench.collate([([4, 5, 6, 3], [7, 8, 3]), ([9, 3], [10, 11, 12, 3])])
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    step = bench.train_step(model, optimizer)
    loss = step(batch)
    assert loss.ndim == 0 and model.training
    assert all(p.grad is None for p in model.parameters())
    assert not torch.equal(before["model.shared.weight"], model.model.shared.weight)
    assert step(batch).item() < loss.item()  # the same batch again, after a step on it


def test_a_record_of_counts_leaves_out_time_and_load(tmp_path):
    """Counts (scripts/count_ops.py) do not depend on the clock or the load: their record leaves both out, so that a
    rerun writes the same file; the versions are still read back (`environment_of`), as from the older schema that
    nested them under ``environment``."""
    first = bench.Record("scripts/count_ops.py", ["--size", "tiny"], timed=False).write({"n": 1}, tmp_path / "a.json")
    second = bench.Record("scripts/count_ops.py", ["--size", "tiny"], timed=False).write({"n": 1}, tmp_path / "b.json")
    assert (tmp_path / "a.json").read_text() == (tmp_path / "b.json").read_text()
    assert not {"started", "wall_seconds", "load_average_start", "load_average_end"} & first.keys()
    assert bench.environment_of(second)["versions"]["torch"] == torch.__version__
    committed = json.loads((RESULTS / "op_counts.json").read_text())  # the flat layout the record writes today
    assert bench.environment_of(committed)["versions"] == committed["versions"]
    older = {"environment": {"versions": {"torch": "2.4.0"}}}  # the older schema, nested under "environment"
    assert bench.environment_of(older)["versions"] == {"torch": "2.4.0"}


def test_the_matmul_rate_is_timed_by_the_one_timer(monkeypatch):
    calls = []
    real = bench.timing.interleave
    monkeypatch.setattr(bench.timing, "interleave", lambda *a, **k: calls.append(k) or real(*a, **k))
    assert bench.matmul_rate(torch.device("cpu"), torch.float32, repeats=2) > 0
    assert calls == [{"repeats": 2, "device": torch.device("cpu")}]


def test_every_figure_belongs_to_one_benchmark_module():
    """render_figures only collects: each figure is its module's, and two modules may not name the same one."""
    owners = {name: module.__name__ for module in render_figures.MODULES for name in module.FIGURES}
    assert set(owners) == set(render_figures.FIGURES)
    assert owners["training-table"] == "benchmark_training" and owners["op-counts"] == "count_ops"
    assert owners["decoding-cpu-table"] == "benchmark_decoding" and owners["multi30k-table"] == "run_figures"
    twin = type("twin", (), {"__name__": "twin", "FIGURES": {"op-counts": str}})
    with pytest.raises(SystemExit, match="twin names figures another module names: op-counts"):
        render_figures.collect((*render_figures.MODULES, twin))


def test_data_benchmark_reports_the_median_warm_run_and_the_ratio_to_the_compared_checkout():
    """scripts/benchmark_data.py: the warm figure is the run of median time of this checkout's reruns, the compared
    checkout's likewise from its own, and the ratio is of those two medians (not of means, not of the first runs)."""
    import argparse

    import benchmark_data

    def run(seconds, compile_s):
        return {"seconds": seconds, "peak_rss_mb": 100.0, "padding": 0.01, "compile_s": compile_s,
                "data_s": seconds - compile_s}  # fmt: skip

    runs = {"cold": run(300.0, 40.0)}
    runs |= {f"warm-this-{i}": run(s, 4.0) for i, s in enumerate((9.0, 12.0, 8.0))}
    runs |= {f"warm-compared-{i}": run(s, 4.5) for i, s in enumerate((11.0, 10.0, 30.0))}
    args = argparse.Namespace(pairs=10, checkout=None, warm_runs=3, compare_checkout=benchmark_data.Path("old"))
    result = benchmark_data.summarize(args, runs)
    assert result["warm_start_s"] == 9.0 and result["warm_starts_s"] == [9.0, 12.0, 8.0]
    assert result["phases"]["warm"] == {"data_s": 5.0, "compile_s": 4.0}
    assert result["compare"]["warm_start_s"] == 11.0 and result["compare"]["this_vs_compared"] == round(9 / 11, 3)
    assert benchmark_data.median_run([run(2.0, 0), run(1.0, 0)])["seconds"] == 2.0


def test_the_wmt14_disk_sizes_are_measured_and_projected_by_the_bytes_a_line(tmp_path):
    """The synthetic corpus's bytes a line come from its measured size and pair count; the projection scales the
    corpus and the cache by the reference's bytes a line, counted by measure_lines.py, and says it is projected."""
    import benchmark_data
    import measure_lines

    text = tmp_path / "news.en"
    text.write_bytes(b"a b c\n" + "äö\n".encode() * 2)  # 6 + 5 + 5 bytes, 3 lines
    assert measure_lines.line_bytes(text) == {"lines": 3, "bytes": 16}
    text.write_bytes((b"x" * 99 + b"\n") * 4)  # 100 bytes a line
    measure_lines.main([str(text), "--output", str(tmp_path / "newstest2014_lines.json")])
    assert json.loads((tmp_path / "newstest2014_lines.json").read_text())["bytes_per_line"] == 100.0
    run = {"pairs": 2**22, "disk_mb": {"corpus": 400.0, "cache": 100.0}}  # 400 MiB over 2 * 2**22 lines: 50 bytes
    text = benchmark_data.projected_sizes(tmp_path, run)
    assert "lines average 50 bytes; newstest2014's average 100" in text
    assert "about 800 MB and 200 MB (projected" in text
    assert benchmark_data.projected_sizes(tmp_path, {"pairs": 1}) == ""


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [
        ("benchmark_demo", ["--model", "m", "--source", "{tmp}/s.en", "--repeats", "0"], "--repeats must be at least 1, got 0"),
        ("benchmark_lora", ["--json", "{tmp}/r.json", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
        ("benchmark_decoding", ["--quality-model", "m", "--quality-source", "{tmp}/s.en", "--quality-reference",
         "{tmp}/none.de"], "--quality-reference={tmp}/none.de is not a file"),
        ("benchmark_decoding", ["--rounds", "0"], "--rounds must be at least 1, got 0"),
    ],
)  # fmt: skip
def test_the_benchmarks_refuse_a_bad_option_in_one_line_naming_it(tmp_path, script, argv, says):
    """The kit's option checks (`bench.options.check`): a count below its least or a missing file ends the command
    with one line naming the option (exit 1, as the package's commands), before any model is loaded."""
    (tmp_path / "s.en").write_text("a sentence\n", encoding="utf-8")
    module = importlib.import_module(script)
    with pytest.raises(SystemExit) as refused:
        module.main([word.replace("{tmp}", str(tmp_path)) for word in argv])
    assert str(refused.value) == says.replace("{tmp}", str(tmp_path))
