"""Mixed precision as the user set it: ``--mixed-precision``, else ``accelerate launch --mixed_precision`` (which
sets ACCELERATE_MIXED_PRECISION), else the accelerate config file; bf16 on CPU; fp16 with loss scaling on CUDA.

The precision is observed where it happens: the dtype of the outputs of the model's linear layers during training
forward passes (a global forward hook), under whatever autocast the run set up."""

import json
import logging
import math

import pytest
import torch
from accelerate.state import AcceleratorState
from tiny_model import TINY
from training_helpers import launch

from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training import run as run_module
from vanilla_transformer.training import trainer as trainer_module
from vanilla_transformer.training.checkpoints import load_checkpoint_weights, read_training_state
from vanilla_transformer.training.schedule import noam_learning_rate
from vanilla_transformer.training.tracking import read_metrics

SHORT = [*TINY, "--max-steps", "2", "--save-every", "1", "--eval-every", "100", "--num-test", "2"]


@pytest.fixture
def linear_dtypes():
    """The dtypes of linear-layer outputs in training mode, for the duration of a test; a fresh Accelerate state
    (it is a process-wide singleton that keeps the first run's precision)."""
    seen: set[torch.dtype] = set()

    def hook(module, inputs, output):
        if isinstance(module, torch.nn.Linear) and module.training:
            seen.add(output.dtype)

    AcceleratorState._reset_state(reset_partial_state=True)
    handle = torch.nn.modules.module.register_module_forward_hook(hook)
    yield seen
    handle.remove()
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_flag_trains_in_bf16_on_cpu_with_fp32_weights(tmp_path, linear_dtypes):
    results = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "bf16"), "--mixed-precision", "bf16"]))
    assert linear_dtypes == {torch.bfloat16} and results["mixed_precision"] == "bf16"
    first = load_checkpoint_weights(tmp_path / "bf16" / "checkpoints" / "checkpoint-00000001")
    second = load_checkpoint_weights(tmp_path / "bf16" / "checkpoints" / "checkpoint-00000002")
    assert all(weight.dtype == torch.float32 and torch.isfinite(weight).all() for weight in second.values())
    assert any(not torch.equal(first[name], second[name]) for name in first)  # the bf16 step changed the weights
    linear_dtypes.clear()
    AcceleratorState._reset_state(reset_partial_state=True)
    train(parse_args([*SHORT, "--output-dir", str(tmp_path / "fp32")]))
    assert linear_dtypes == {torch.float32}
    # The same function in both precisions: the first step's loss agrees to bf16's precision.
    bf16_loss, fp32_loss = (
        next(row["train_loss"] for row in read_metrics(tmp_path / run / "metrics.jsonl") if "train_loss" in row)
        for run in ("bf16", "fp32")
    )
    assert math.isfinite(bf16_loss) and bf16_loss == pytest.approx(fp32_loss, rel=2e-2)


def test_launchers_precision_applies_unless_the_flag_is_given(tmp_path, linear_dtypes, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate launch --mixed_precision bf16` sets
    assert train(parse_args([*SHORT, "--output-dir", str(tmp_path / "env")]))["mixed_precision"] == "bf16"
    assert linear_dtypes == {torch.bfloat16}
    linear_dtypes.clear()
    AcceleratorState._reset_state(reset_partial_state=True)
    flagged = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "flag"), "--mixed-precision", "no"]))
    assert flagged["mixed_precision"] == "no" and linear_dtypes == {torch.float32}


def test_accelerate_config_file_sets_the_precision(tmp_path):
    config_file = tmp_path / "accelerate.yaml"
    config_file.write_text(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: 'NO'\nmixed_precision: bf16\nnum_machines: 1\n"
        "num_processes: 1\nuse_cpu: true\n"
    )
    completed = launch(
        tmp_path / "run", *SHORT, processes=1, launcher=["--config_file", str(config_file)],
        PROBE_DTYPES=str(tmp_path / "dtypes"),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads((tmp_path / "dtypes.0").read_text()) == ["torch.bfloat16"]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["mixed_precision"] == "bf16"


def test_fp16_on_cpu_trains_under_fp16_autocast_with_a_loss_scaler(tmp_path, linear_dtypes):
    """``--mixed-precision fp16`` on a CPU does what it says (issue 65, cause 6): the training forward passes run
    under fp16 autocast (their linear layers output float16), the loss is scaled by torch's GradScaler (its initial
    scale, 2**16, saved with the checkpoint), the weights stay float32 and differ from an fp32 run's. Accelerate gives
    fp16 both on accelerator devices only: the old code trained in fp32, its weights equal to the fp32 run's byte for
    byte, while the log and results.json said fp16."""
    results = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "fp16"), "--mixed-precision", "fp16"]))
    assert results["mixed_precision"] == "fp16" and linear_dtypes == {torch.float16}
    checkpoint = tmp_path / "fp16" / "checkpoints" / "checkpoint-00000002"
    scaler = read_training_state(checkpoint)["scaler"]
    assert scaler is not None and float(scaler["scale"]) == 2.0**16  # no overflow in two steps: the initial scale
    fp16 = load_checkpoint_weights(checkpoint)
    assert all(weight.dtype == torch.float32 and torch.isfinite(weight).all() for weight in fp16.values())
    linear_dtypes.clear()
    AcceleratorState._reset_state(reset_partial_state=True)
    train(parse_args([*SHORT, "--output-dir", str(tmp_path / "fp32")]))
    assert linear_dtypes == {torch.float32}
    fp32 = load_checkpoint_weights(tmp_path / "fp32" / "checkpoints" / "checkpoint-00000002")
    assert any(not torch.equal(fp16[name], fp32[name]) for name in fp32)
    # The same function in both precisions: the first step's loss agrees to fp16's precision.
    fp16_loss, fp32_loss = (
        next(row["train_loss"] for row in read_metrics(tmp_path / run / "metrics.jsonl") if "train_loss" in row)
        for run in ("fp16", "fp32")
    )
    assert math.isfinite(fp16_loss) and fp16_loss == pytest.approx(fp32_loss, rel=1e-2)


@pytest.mark.parametrize("adam", ["fused", "for-loop"])
def test_fp16_overflowing_step_is_skipped_and_not_counted_whatever_adams_kernels(
    tmp_path, linear_dtypes, monkeypatch, adam
):
    """The CUDA test below, on the CPU: Accelerate gives fp16 a loss scaler on CUDA only, so the run's Accelerator
    gets torch's CPU `GradScaler` as CUDA's would be set up. With fused Adam (``--adam-implementation auto`` on
    CUDA) the scaler hands the optimizer its inf check instead of skipping the call, and the overflowing step was
    counted: 2 steps in 2 accumulations, the schedule advanced."""
    real_start = run_module.start_accelerator

    def with_loss_scaling(config, start_step=0):
        accelerator = real_start(config, start_step)
        accelerator.scaler, accelerator.native_amp = torch.amp.GradScaler("cpu"), True
        return accelerator

    monkeypatch.setattr(run_module, "start_accelerator", with_loss_scaling)
    real = trainer_module.accumulate_gradients
    calls = []

    def overflow_once(accelerator, model, micro_batches, label_smoothing, loss_function):
        stats = real(accelerator, model, micro_batches, label_smoothing, loss_function)
        calls.append(accelerator.scaler.get_scale())
        if len(calls) == 1:
            next(model.parameters()).grad.fill_(math.inf)
        return stats

    monkeypatch.setattr(trainer_module, "accumulate_gradients", overflow_once)
    options = ["--mixed-precision", "fp16", "--adam-implementation", adam]
    results = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "fp16"), *options]))
    assert results["step"] == 2 and len(calls) == 3
    assert calls[1] == calls[0] / 2  # the overflow halved the scale
    rows = [row for row in read_metrics(tmp_path / "fp16" / "metrics.jsonl") if "train_loss" in row]
    assert [row["step"] for row in rows] == [1, 2]
    # The schedule did not advance on the skipped step: steps 1 and 2 took equation (3)'s rates of steps 1 and 2.
    config = parse_args(SHORT)
    d_model, warmup, scale = config.model.d_model, config.optimization.warmup_steps, config.optimization.lr_scale
    expected = [noam_learning_rate(step, d_model, warmup, scale) for step in (1, 2)]
    assert [row["learning_rate"] for row in rows] == pytest.approx(expected)
    weights = load_checkpoint_weights(tmp_path / "fp16" / "checkpoints" / "checkpoint-00000002")
    assert all(torch.isfinite(weight).all() for weight in weights.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="fp16 with loss scaling needs CUDA")
def test_fp16_on_cuda_skips_overflowing_steps_without_counting_them(tmp_path, linear_dtypes, monkeypatch):
    """The first step's gradients are made infinite: the loss scaler must skip it, and the run must still take
    all its steps, logged once each."""
    real = trainer_module.accumulate_gradients
    calls = []

    def overflow_once(accelerator, model, micro_batches, label_smoothing, loss_function):
        stats = real(accelerator, model, micro_batches, label_smoothing, loss_function)
        calls.append(1)
        if len(calls) == 1:
            next(model.parameters()).grad.fill_(math.inf)
        return stats

    monkeypatch.setattr(trainer_module, "accumulate_gradients", overflow_once)
    results = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "fp16"), "--mixed-precision", "fp16"]))
    assert linear_dtypes == {torch.float16} and results["mixed_precision"] == "fp16"
    assert results["step"] == 2 and len(calls) == 3
    rows = [row for row in read_metrics(tmp_path / "fp16" / "metrics.jsonl") if "train_loss" in row]
    assert [row["step"] for row in rows] == [1, 2]
    weights = load_checkpoint_weights(tmp_path / "fp16" / "checkpoints" / "checkpoint-00000002")
    assert all(torch.isfinite(weight).all() for weight in weights.values())


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_attn_implementation_flag_picks_the_attention_that_training_runs(
    tmp_path, linear_dtypes, monkeypatch, implementation
):
    """--attn-implementation eager (the multi30k preset's, with bf16) runs the eager attention in the training
    forward passes, on bf16 queries; sdpa runs transformers' SDPA function instead. Observed in the attention
    functions themselves."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from vanilla_transformer import modeling_vanilla_transformer as modeling

    calls: dict[str, set[torch.dtype]] = {"eager": set(), "sdpa": set()}

    def spy(name, function):
        def wrapped(module, query, *args, **kwargs):
            if module.training:
                calls[name].add(query.dtype)
            return function(module, query, *args, **kwargs)

        return wrapped

    monkeypatch.setattr(modeling, "eager_attention_forward", spy("eager", modeling.eager_attention_forward))
    monkeypatch.setitem(
        ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", spy("sdpa", ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"])
    )
    options = ["--mixed-precision", "bf16", "--attn-implementation", implementation]
    train(parse_args([*SHORT, *options, "--output-dir", str(tmp_path)]))
    other = "sdpa" if implementation == "eager" else "eager"
    assert calls[implementation] == {torch.bfloat16} and not calls[other]
    assert torch.bfloat16 in linear_dtypes
    config = json.loads((tmp_path / "model" / "config.json").read_text(encoding="utf-8"))
    assert "eager" not in json.dumps(config)  # a training setting: the exported model keeps transformers' default


def test_bad_attn_implementation_is_rejected_naming_the_option():
    with pytest.raises(ValueError, match=r"--attn-implementation must be eager, sdpa or auto, got .*'flash'"):
        parse_args([*SHORT, "--attn-implementation", "flash"])


def test_a_bf16_run_on_a_cpu_without_native_bf16_warns_in_its_log(tmp_path, monkeypatch, caplog, linear_dtypes):
    """`train` names the slow case (`preflight.slow_bf16`) at the start of the run, with the CPU's flags given."""
    monkeypatch.setattr("vanilla_transformer.training.run.cpu_flags", lambda: {"avx2"})
    with caplog.at_level(logging.WARNING):
        train(parse_args([*SHORT, "--output-dir", str(tmp_path / "bf16"), "--mixed-precision", "bf16"]))
    assert any(
        "without native bf16 instructions" in message and "pass --mixed-precision auto (or no)" in message
        for message in (record.getMessage() for record in caplog.records)
    )
    caplog.clear()
    AcceleratorState._reset_state(reset_partial_state=True)
    monkeypatch.setattr("vanilla_transformer.training.run.cpu_flags", lambda: {"avx2", "avx512_bf16"})
    with caplog.at_level(logging.WARNING):
        train(parse_args([*SHORT, "--output-dir", str(tmp_path / "native"), "--mixed-precision", "bf16"]))
    assert not any("without native bf16 instructions" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(("flags", "expected"), [({"avx2"}, torch.float32), ({"avx2", "avx512_bf16"}, torch.bfloat16)])
def test_auto_precision_trains_in_bf16_only_where_the_cpu_computes_it_natively(
    tmp_path, linear_dtypes, monkeypatch, flags, expected
):
    """``--mixed-precision auto`` (the multi30k preset's) reads the CPU's flags: bf16 where native, else fp32."""
    monkeypatch.setattr("vanilla_transformer.training.run.cpu_flags", lambda: flags)
    results = train(parse_args([*SHORT, "--output-dir", str(tmp_path / "auto"), "--mixed-precision", "auto"]))
    assert linear_dtypes == {expected}
    assert results["mixed_precision"] == {torch.float32: "no", torch.bfloat16: "bf16"}[expected]
