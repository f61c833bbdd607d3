"""scripts/bench: the interleaved timer's order, warm-up and device synchronisation; the results record; reading
back every committed results file's environment. No timing is asserted."""

import importlib.metadata
import json
from pathlib import Path

import bench
import pytest
import torch

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
        ("decoding_benchmark_bf16.json", "loadavg_start", "loadavg_end"),
        ("data_benchmark_450000_before.json", "load_average_before", "load_average_after"),
        ("lora.json", "load_average_start", "load_average_end"),
        ("training_vs_trainer.json", "load_average_start", "load_average_end"),
    ],
)
def test_every_committed_schema_reads_back_as_the_records(name, start, end):
    result = json.loads((RESULTS / name).read_text())
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
