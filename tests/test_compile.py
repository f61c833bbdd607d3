"""Compiled training (issue 27): torch.compile through Accelerate's dynamo plugin.

Compilation is observed where it happens: torch's own count of compiled graphs (`compile_count`) during the run's
steps, and the results a compiled run reports. The numerics are checked against the eager run of the same settings;
the checkpoints of a compiled run against what an eager run loads, and the other way round.
"""

import logging
import os
import re

import pytest
import torch
from accelerate.state import AcceleratorState
from accelerate.utils import compile_regions
from safetensors import safe_open
from tiny_model import TINY, new_tiny_model

from vanilla_transformer import modeling_vanilla_transformer as modeling
from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training import step as step_module
from vanilla_transformer.training import trainer as trainer_module
from vanilla_transformer.training.checkpoints import load_checkpoint_weights
from vanilla_transformer.training.tracking import read_metrics

# No dropout: inductor draws its dropout masks with its own generator, so only a dropout-free run can equal eager.
SHORT = [*TINY, "--dropout", "0", "--max-steps", "4", "--save-every", "2", "--eval-every", "100", "--num-test", "2"]


@pytest.fixture(autouse=True)
def fresh_state(monkeypatch, tmp_path):
    """A fresh Accelerate state (a process-wide singleton that keeps the first run's dynamo settings), torch.compile's
    caches emptied (its recompilation limit counts across tests), no dynamo setting from the environment (a leaked
    ``ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=false`` compiles the whole model as one graph: see conftest's
    `environment_restored`), and caches of this test's own: the data cache, where a run saves its compile cache that
    a later run of the same settings would load, and torch's."""
    for name in ("BACKEND", "USE_DYNAMIC", "MODE", "USE_REGIONAL_COMPILATION"):
        monkeypatch.delenv(f"ACCELERATE_DYNAMO_{name}", raising=False)
    monkeypatch.setenv("VANILLA_TRANSFORMER_CACHE", str(tmp_path / "own-data-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "own-torch-cache"))
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.compiler.reset()
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.compiler.reset()


def _run(tmp_path, name, *options):
    AcceleratorState._reset_state(reset_partial_state=True)
    return train(parse_args([*SHORT, "--output-dir", str(tmp_path / name), *options]))


def _losses(run_dir):
    return [row["train_loss"] for row in read_metrics(run_dir / "metrics.jsonl") if "train_loss" in row]


def test_inductor_run_equals_the_eager_run_and_saves_plain_weights(tmp_path):
    compiled = _run(tmp_path, "inductor", "--dynamo-backend", "inductor")
    eager = _run(tmp_path, "eager")
    assert compiled["dynamo_backend"] == "inductor" and eager["dynamo_backend"] is None
    assert compiled["compilations"] >= 2  # the model and the loss, at least
    assert 0 < compiled["compile_seconds"] <= 60 * compiled["train_minutes"]  # counted in the training time
    # The same function: every step's loss agrees to float32 rounding (inductor reorders sums: 1e-4 relative).
    assert len(_losses(tmp_path / "inductor")) == 4
    assert _losses(tmp_path / "inductor") == pytest.approx(_losses(tmp_path / "eager"), rel=1e-4)
    # Checkpoints hold the model's own names, never the compile wrapper's _orig_mod.
    with safe_open(
        str(tmp_path / "inductor" / "checkpoints" / "checkpoint-00000004" / "model.safetensors"), "pt"
    ) as f:
        names = list(f.keys())
    assert names and not any("_orig_mod" in name for name in names)
    compiled_weights = load_checkpoint_weights(tmp_path / "inductor" / "checkpoints" / "checkpoint-00000004")
    eager_weights = load_checkpoint_weights(tmp_path / "eager" / "checkpoints" / "checkpoint-00000004")
    assert compiled_weights.keys() == eager_weights.keys()  # (their values differ: Adam amplifies rounding where a
    # gradient is near zero, by up to the learning rate)


@pytest.mark.parametrize(("first", "then"), [("eager", "no"), ("no", "eager")])
def test_resuming_across_compiled_and_eager_equals_an_uninterrupted_run(tmp_path, first, then, monkeypatch):
    """Dynamo's "eager" backend wraps the model as `torch.compile` does (the ``_orig_mod`` wrapper) and runs the
    same kernels, so the resumed run must equal the uninterrupted one exactly. A compiled graph never packs tokens
    (``pack_tokens``), the eager model does on a padded CPU batch: packing is off here, so both run the same path."""
    monkeypatch.setattr(modeling, "PACKING_THRESHOLDS", {})
    _run(tmp_path, "whole")
    half = _run(tmp_path, "split", "--max-steps", "2", "--dynamo-backend", first)
    assert half["dynamo_backend"] == (None if first == "no" else first)
    resumed = _run(tmp_path, "split", "--resume", "--dynamo-backend", then)
    assert resumed["dynamo_backend"] == (None if then == "no" else then) and resumed["step"] == 4
    split = load_checkpoint_weights(tmp_path / "split" / "checkpoints" / "checkpoint-00000004")
    whole = load_checkpoint_weights(tmp_path / "whole" / "checkpoints" / "checkpoint-00000004")
    for name, weight in whole.items():
        assert torch.equal(split[name], weight), name


def _record_shapes(monkeypatch):
    shapes = set()
    real = trainer_module.accumulate_gradients

    def recording(accelerator, model, micro_batches, *args):
        shapes.update((tuple(b["input_ids"].shape), tuple(b["labels"].shape)) for b in micro_batches)
        return real(accelerator, model, micro_batches, *args)

    monkeypatch.setattr(trainer_module, "accumulate_gradients", recording)
    return shapes


def test_launchers_backend_applies_and_new_batch_shapes_do_not_recompile(tmp_path, monkeypatch):
    """``accelerate launch --dynamo_backend eager`` sets ACCELERATE_DYNAMO_BACKEND; without the flag, train
    compiles with it, for any batch shape. A run that asks for static shapes is the broken copy: it recompiles."""
    shapes = _record_shapes(monkeypatch)
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    results = _run(tmp_path, "launched", "--max-steps", "8")
    assert results["dynamo_backend"] == "eager"
    assert len(shapes) >= 5  # the token batches vary in sentences and length
    # Regional compilation: each layer class and the loss; the only later graphs are those of a batch without padding
    # (transformers builds no padding mask for it, a layer's other variant)
    assert results["compilations"] >= 3 and results["recompilations"] <= 4
    shapes.clear()
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "false")
    static = _run(tmp_path, "static", "--max-steps", "3")  # each new shape compiles model and loss again: >= 6
    assert len(shapes) == 3 and static["compilations"] > results["compilations"]
    rows = [row for row in read_metrics(tmp_path / "launched" / "metrics.jsonl") if "compilations" in row]
    assert rows and rows[-1]["compilations"] == results["compilations"]  # in the run's log too


def test_the_flag_overrides_the_launcher_and_bad_backends_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "EAGER")
    results = _run(tmp_path, "flag", "--max-steps", "2", "--dynamo-backend", "no")
    assert results["dynamo_backend"] is None and "compilations" not in results
    with pytest.raises(ValueError, match=r"--dynamo-backend must be one of .*inductor.*--dynamo-backend='indcutor'"):
        parse_args([*SHORT, "--dynamo-backend", "indcutor"])


def test_compile_count_counts_graphs_where_torch_compiles():
    """The private counter `compile_count` reads, checked on this torch: it rises by one graph per function compiled,
    and not for calls of a compiled function that need no new graph."""
    before = step_module.compile_count()
    assert before is not None
    function = torch.compile(lambda x: torch.sin(x) * 2, backend="eager", dynamic=True)
    function(torch.randn(3))
    assert step_module.compile_count() == before + 1
    function(torch.randn(5))
    assert step_module.compile_count() == before + 1


def test_a_rerun_loads_the_compile_cache_and_recompiles_nothing(tmp_path, monkeypatch, caplog):
    """The compile phase: a bf16 run compiles its layers one by one (regional compilation, autocast outside the
    graphs), logs the phase and saves torch's cache artifacts with the data cache. A rerun of the same settings and
    batches, with torch's own caches empty, loads them: every inductor graph comes from the cache (no FX-graph cache
    miss), AOTAutograd's too (no bypass; a miss only for a graph the first run could not keep), and its steps compile
    what the first run's did, no more.

    Each graph is traced once: every graph a run compiles, AOTAutograd looks up once. (A trace that torch throws away
    and restarts, as when it makes a float of the model an input of the graph, then a constant, looks up a graph that
    it never keeps: a miss in every run, cold or warm, for a region traced twice.) A graph with nothing to compute
    is not kept (AOTAutograd's choice): the rerun misses those, and nothing else."""
    from torch._dynamo.utils import counters

    caplog.set_level(logging.INFO)
    counters.clear()
    options = ["--dynamo-backend", "inductor", "--mixed-precision", "bf16", "--max-steps", "3"]
    options += ["--data-cache-dir", str(tmp_path / "cache")]
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-first"))
    first = _run(tmp_path, "first", *options)
    (saved,) = (tmp_path / "cache").glob("compile-*.bin")
    aot = counters["aot_autograd"]
    assert aot["autograd_cache_hit"] + aot["autograd_cache_miss"] == first["compilations"] > 0
    unkept = aot["autograd_cache_miss"] - aot["autograd_cache_saved"]
    assert "regional" in caplog.text and f"compile cache {saved}: absent, saved" in caplog.text
    torch._dynamo.reset()
    counters.clear()
    caplog.clear()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-second"))  # only our cache carries over
    second = _run(tmp_path, "second", *options)
    assert f"compile cache {saved}: loaded, saved" in caplog.text
    recompiled = first["recompilations"]  # (a batch without padding: a layer's graph without a mask; see above)
    assert re.search(rf"compiling the model: [\d.]+ s; recompiled {recompiled} times", caplog.text)
    assert second["recompilations"] == recompiled and second["compilations"] == first["compilations"]
    assert counters["inductor"]["fxgraph_cache_hit"] > 0 and counters["inductor"]["fxgraph_cache_miss"] == 0
    aot = counters["aot_autograd"]
    assert aot["autograd_cache_hit"] + aot["autograd_cache_miss"] == second["compilations"]
    assert aot["autograd_cache_miss"] == unkept and aot["autograd_cache_bypass"] == 0


def test_layers_compiled_apart_take_whole_batches():
    """A padded training batch is packed (`pack_tokens`: padded positions not computed, left zero) by the eager model,
    never by layers compiled one by one, as in a whole-model graph; the real positions agree."""
    model = new_tiny_model().train()  # no dropout
    pad = model.config.pad_token_id
    ids = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 6, 2, pad, pad, pad]])
    mask = (ids != pad).long()
    packed = model.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    assert torch.all(packed[1, 3:] == 0)  # the eager model packed the batch
    regional = compile_regions(model, backend="eager", dynamic=True)
    assert isinstance(regional.model.encoder.layers[0], torch._dynamo.eval_frame.OptimizedModule)
    whole = regional.model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    assert whole[1, 3:].abs().sum() > 0  # computed: not packed
    assert torch.allclose(whole[mask.bool()], packed[mask.bool()], atol=1e-5)


def test_only_the_repeated_layers_are_compiled_and_they_compute_the_same():
    """Of what regional compilation wraps, `compile_layers_only` leaves compiled the encoder and decoder layers, each
    layer of both stacks, and nothing else (embeddings, dropout, norms and output projection run eagerly); the model
    computes what the eager model does."""
    model = new_tiny_model().train()  # no dropout
    regional = compile_regions(model, backend="eager", dynamic=True)
    kept = step_module.compile_layers_only(regional)
    compiled = {name for name, module in regional.named_modules() if isinstance(module, torch._dynamo.OptimizedModule)}
    stacks = {"encoder": model.model.encoder, "decoder": model.model.decoder}
    layers = {f"model.{name}.layers.{i}" for name, stack in stacks.items() for i in range(len(stack.layers))}
    assert compiled == layers and kept == len(layers)
    ids = torch.tensor([[5, 6, 7, 8, 9, 2], [5, 6, 7, 8, 2, 3]])  # no padding: the eager model packs nothing
    labels = torch.tensor([[5, 6, 2], [7, 8, 2]])
    expected = model(input_ids=ids, labels=labels).logits
    assert torch.allclose(regional(input_ids=ids, labels=labels).logits, expected, atol=1e-5)


def test_a_compiled_run_compiles_each_layer_class_and_the_loss_only(tmp_path):
    """A compiled run's first step compiles three graphs: the encoder layer, the decoder layer (one graph per class,
    for all its layers: two of each here) and the loss; no graph for the embeddings, dropout or output projection,
    and none per decoder layer (a key-value cache in the training step made each decoder layer guard on its index)."""
    results = _run(tmp_path, "layers", "--dynamo-backend", "eager", "--max-steps", "1", "--layers", "2")
    assert results["compilations"] == 3 and results["recompilations"] == 0


PROBE_SCRIPT = """
import json, sys, threading
import torch
from accelerate import Accelerator
from torch._inductor import cpu_vec_isa
from vanilla_transformer.training.step import VectorISAProbe

threads = []
original = cpu_vec_isa.VecISA._probe_load
def recorded(self, path):
    threads.append(threading.current_thread().name)
    return original(self, path)
cpu_vec_isa.VecISA._probe_load = recorded
if sys.argv[1] == "probe":
    probe = VectorISAProbe.start(Accelerator(cpu=True, dynamo_backend="inductor"))
    assert probe is not None
    probe.wait()
compiled = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend="inductor")
assert torch.equal(compiled(torch.arange(-4.0, 4.0)), torch.relu(torch.arange(-4.0, 4.0)) * 2 + 1)
print(json.dumps(threads))
"""


@pytest.mark.parametrize("started", ["probe", "none"])
def test_the_vector_isa_probe_answers_before_the_compiler_asks(tmp_path, started):
    """Inductor checks, in child processes, which vector instruction sets its C++ kernels may use before its first
    CPU graph (over a second of each warm start here). `VectorISAProbe` runs that check in a thread from the
    Trainer's start: the compiler then finds the answer, and checks nothing on the main thread. Without the probe,
    the same compilation checks on the main thread (so the test sees the check where it happens)."""
    import json
    import subprocess
    import sys

    environment = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    environment.pop("TORCHINDUCTOR_VEC_ISA_OK", None)  # which would skip the check altogether
    completed = subprocess.run(
        [sys.executable, "-c", PROBE_SCRIPT, started], capture_output=True, text=True, env=environment, timeout=600
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    threads = json.loads(completed.stdout.strip().splitlines()[-1])
    if started == "probe":
        assert threads and set(threads) == {"inductor-vector-isa-probe"}
    else:
        assert "MainThread" in threads


def test_no_probe_where_nothing_compiles_on_the_cpu():
    from accelerate import Accelerator

    assert step_module.VectorISAProbe.start(Accelerator(cpu=True)) is None
