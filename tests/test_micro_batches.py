"""Fewer, larger micro-batches where the GPU's memory holds them (issue 55 part 3): ``--fill-gpu-memory``,
set by the wmt14 presets, plans the step from the device's free memory, and the step's loss and gradients do not
depend on how its pairs are cut into micro-batches."""

from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState

from vanilla_transformer.training import step as step_module
from vanilla_transformer.training.config import TrainingConfig
from vanilla_transformer.training.step import (
    accumulate_gradients,
    activation_bytes_per_token,
    micro_batch_plan,
    tokens_in_memory,
)


def test_presets_take_the_whole_step_as_one_micro_batch_where_memory_holds_it():
    base = TrainingConfig.from_preset("wmt14-base")
    assert base.optimization.fill_gpu_memory and TrainingConfig.from_preset("wmt14-big").optimization.fill_gpu_memory
    assert micro_batch_plan(base, 1) == (12_500, 4)  # memory unknown (off CUDA): at most --max-tokens
    assert micro_batch_plan(base, 1, 120_000) == (50_000, 1)  # one H200
    assert micro_batch_plan(base, 1, 30_000) == (25_000, 2)
    assert micro_batch_plan(base, 1, 5_000) == (12_500, 4)  # never fewer tokens than --max-tokens
    assert micro_batch_plan(base, 8, 120_000) == (6_250, 1)  # each process's share
    assert micro_batch_plan(base.replace(fill_gpu_memory=False), 1, 120_000) == (12_500, 4)
    assert micro_batch_plan(base.replace(grad_accum=4), 1, 120_000) == (12_500, 4)  # --grad-accum wins


def test_tokens_in_memory_reads_the_gpus_free_memory(monkeypatch, make_tiny_model):
    """On (mocked) CUDA: free memory times `MEMORY_SHARE`, less 16 bytes a parameter, over the estimate per token;
    None off CUDA."""
    model = make_tiny_model(0, vocab_size=40)
    free = 10**9
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 2 * free))
    cuda = SimpleNamespace(device=torch.device("cuda"), num_processes=1)
    per_token = activation_bytes_per_token(model.config, False, 64)
    expected = int((free * step_module.MEMORY_SHARE - 16 * model.num_parameters()) // per_token)
    assert tokens_in_memory(cuda, model, 64) == expected > 0
    model.set_attn_implementation("eager")  # eager attention keeps its scores: fewer tokens fit
    assert tokens_in_memory(cuda, model, 64) < expected
    assert tokens_in_memory(SimpleNamespace(device=torch.device("cpu"), num_processes=1), model, 64) is None


def test_the_base_estimate_covers_the_measured_peak():
    """The estimate must not say that a micro-batch fits that did not: the H200's 6.6 GiB peak at 12,500 tokens of
    the base model (bf16, SDPA) is below what it plans for those tokens."""
    from vanilla_transformer import VanillaTransformerConfig

    config = VanillaTransformerConfig.from_preset("base", vocab_size=37_000)
    assert 12_500 * activation_bytes_per_token(config, False, 256) > 6.6 * 2**30


@pytest.fixture
def cpu_accelerator():
    AcceleratorState._reset_state(reset_partial_state=True)
    yield Accelerator(cpu=True)
    AcceleratorState._reset_state(reset_partial_state=True)


def _pairs(count: int, vocab_size: int = 40) -> list[tuple[list[int], list[int]]]:
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(2, 9, (count, 2), generator=generator)
    return [
        (torch.randint(4, vocab_size, (int(s),), generator=generator).tolist(),
         torch.randint(4, vocab_size, (int(t),), generator=generator).tolist())
        for s, t in lengths
    ]  # fmt: skip


def _collate(pairs) -> dict[str, torch.Tensor]:
    width = [max(len(pair[side]) for pair in pairs) for side in (0, 1)]
    input_ids = torch.tensor([s + [0] * (width[0] - len(s)) for s, _ in pairs])
    labels = torch.tensor([t + [-100] * (width[1] - len(t)) for _, t in pairs])
    return dict(input_ids=input_ids, attention_mask=(input_ids != 0).long(), labels=labels)


def test_one_micro_batch_takes_the_same_step_as_four(make_tiny_model, cpu_accelerator):
    """The same 16 pairs as 1 micro-batch and as 4: the step's loss and every gradient agree to float32 rounding
    (the loss is the sum over the step's target tokens divided by their count, whatever the cut)."""
    pairs = _pairs(16)
    steps = {}
    for count in (1, 4):
        model = make_tiny_model(0, vocab_size=40)
        micro_batches = [_collate(pairs[start : start + 16 // count]) for start in range(0, 16, 16 // count)]
        stats = accumulate_gradients(cpu_accelerator, model, micro_batches, 0.1)
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        steps[count] = (stats["loss"] / stats["target_tokens"], gradients)
    torch.testing.assert_close(steps[1][0], steps[4][0])
    assert steps[1][1].keys() == steps[4][1].keys() and len(steps[1][1]) > 10
    for name, gradient in steps[4][1].items():
        torch.testing.assert_close(steps[1][1][name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_a_resumed_run_cuts_its_batches_as_the_run_did_whatever_memory_is_free_now(tmp_path, monkeypatch):
    """With ``--fill-gpu-memory`` the plan follows the device's free memory (`tokens_in_memory`, mocked here: 800
    tokens when the run starts, unknown when it resumes). The checkpoint's position counts batches of the run's
    plan, so the resumed run must keep it: killed at step 6 and resumed from step 3, it ends with the weights of the
    uninterrupted run, where a run cut by the other plan ends elsewhere."""
    from training_helpers import same_weights, tiny_run

    from vanilla_transformer.training import checkpoints, train
    from vanilla_transformer.training import trainer as trainer_module
    from vanilla_transformer.training.checkpoints import load_checkpoint_weights

    options = ("--tokens-per-step", "1600", "--fill-gpu-memory")
    memory = {"tokens": 800}
    monkeypatch.setattr(trainer_module, "tokens_in_memory", lambda *_: memory["tokens"])
    train(tiny_run(tmp_path / "whole", *options))  # 2 x 800 tokens a step throughout

    save_file = checkpoints.save_file

    def killed_at_step_6(tensors, filename, **kwargs):
        if "00000006" in filename:
            raise KeyboardInterrupt
        return save_file(tensors, filename, **kwargs)

    with monkeypatch.context() as killing:
        killing.setattr(checkpoints, "save_file", killed_at_step_6)
        with pytest.raises(KeyboardInterrupt):
            train(tiny_run(tmp_path / "resumed", *options))
    memory["tokens"] = None  # resumed where the free memory is not known: this device alone would take 4 x 400
    train(tiny_run(tmp_path / "resumed", *options, "--resume"))
    final = [
        load_checkpoint_weights(tmp_path / run / "checkpoints" / "checkpoint-00000008") for run in ("whole", "resumed")
    ]
    assert same_weights(*final)
    train(tiny_run(tmp_path / "other-plan", *options))  # 4 x 400 from the start: the plan matters
    other = load_checkpoint_weights(tmp_path / "other-plan" / "checkpoints" / "checkpoint-00000008")
    assert not same_weights(final[0], other)
