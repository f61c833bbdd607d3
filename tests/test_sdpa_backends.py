"""The SDPA backends of the model's own attention (issue 55): on CUDA, flash, memory-efficient or math attention, never
cuDNN's, which rebuilds its execution graph for every new shape. Checked on the CPU by letting the CPU take CUDA's
list (`SDPA_BACKENDS`) and reading torch's backend switches inside the attention calls themselves; on a GPU, by
profiling a training step and a decoding call over batches of varying lengths."""

import pytest
import torch
from torch.nn import functional as F
from torch.profiler import profile
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from vanilla_transformer import decoder_vanilla_transformer as decoder_module
from vanilla_transformer import modeling_vanilla_transformer as modeling

SWITCHES = {
    "flash": torch.backends.cuda.flash_sdp_enabled,
    "efficient": torch.backends.cuda.mem_efficient_sdp_enabled,
    "math": torch.backends.cuda.math_sdp_enabled,
    "cudnn": torch.backends.cuda.cudnn_sdp_enabled,
}


def switches() -> dict[str, bool]:
    return {name: read() for name, read in SWITCHES.items()}


@pytest.fixture
def cpu_as_cuda(monkeypatch):
    """The CPU takes CUDA's backend list, so that the model's CUDA path runs here; torch's switches restored after."""
    before = switches()
    monkeypatch.setitem(decoder_module.SDPA_BACKENDS, "cpu", decoder_module.SDPA_BACKENDS["cuda"])
    yield
    torch.backends.cuda.enable_flash_sdp(before["flash"])
    torch.backends.cuda.enable_mem_efficient_sdp(before["efficient"])
    torch.backends.cuda.enable_math_sdp(before["math"])
    torch.backends.cuda.enable_cudnn_sdp(before["cudnn"])


@pytest.fixture
def seen(monkeypatch):
    """torch's backend switches inside every call of the attention functions, by implementation."""
    calls: dict[str, list[dict[str, bool]]] = {"sdpa": [], "eager": [], "functional": []}

    def spy(name, function):
        def wrapped(*args, **kwargs):
            calls[name].append(switches())
            return function(*args, **kwargs)

        return wrapped

    monkeypatch.setitem(
        ALL_ATTENTION_FUNCTIONS._global_mapping, "sdpa", spy("sdpa", ALL_ATTENTION_FUNCTIONS._global_mapping["sdpa"])
    )
    monkeypatch.setattr(modeling, "eager_attention_forward", spy("eager", modeling.eager_attention_forward))
    monkeypatch.setattr(F, "scaled_dot_product_attention", spy("functional", F.scaled_dot_product_attention))
    return calls


def padded_batch(length: int, vocab_size: int = 40) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(length)
    input_ids = torch.randint(4, vocab_size, (3, length), generator=generator)
    labels = torch.randint(4, vocab_size, (3, length - 1), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, length // 2 :], attention_mask[1, length // 2 :] = 0, 0
    labels[1, length // 2 :] = -100
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


CHOSEN = {"flash": True, "efficient": True, "math": True, "cudnn": False}


def test_training_attention_runs_without_cudnn_on_cuda_and_restores_torchs_switches(
    make_tiny_model, cpu_as_cuda, seen
):
    """Every SDPA call of a training forward and backward runs under flash, memory-efficient and math only; torch's
    switches are as before once the model returns; an explicit eager attention is left alone."""
    model = make_tiny_model(0, vocab_size=40).train()
    assert switches()["cudnn"]  # torch's default
    for length in (5, 9):
        model(**padded_batch(length)).loss.backward()
    assert len(seen["sdpa"]) == 2 * 3 * 2  # 2 batches x (encoder self, decoder self, cross) x 2 layers
    assert all(inside == CHOSEN for inside in seen["sdpa"])
    assert switches()["cudnn"]  # restored
    model.set_attn_implementation("eager")
    model(**padded_batch(7)).loss.backward()
    assert seen["eager"] and all(inside["cudnn"] for inside in seen["eager"])


def test_a_backend_the_user_switched_off_stays_off(make_tiny_model, cpu_as_cuda, seen):
    torch.backends.cuda.enable_flash_sdp(False)
    make_tiny_model(0, vocab_size=40).train()(**padded_batch(6)).loss.backward()
    assert seen["sdpa"] and all(inside == {**CHOSEN, "flash": False} for inside in seen["sdpa"])
    assert not switches()["flash"] and switches()["cudnn"]


def test_no_backend_left_leaves_torchs_choice(cpu_as_cuda):
    """Where the user switched off every backend of the list (keeping cuDNN's alone, say), the model adds no context."""
    for disable in (torch.backends.cuda.enable_flash_sdp, torch.backends.cuda.enable_mem_efficient_sdp):
        disable(False)
    assert decoder_module.sdpa_backends("cpu") == (torch.nn.attention.SDPBackend.MATH,)
    torch.backends.cuda.enable_math_sdp(False)
    assert decoder_module.sdpa_backends("cpu") is None
    assert decoder_module.sdpa_backends("mps") is None  # a device type not listed: torch's choice


@pytest.mark.parametrize("num_beams", [1, 4])
def test_decoding_runs_under_the_same_backends(make_tiny_model, cpu_as_cuda, seen, num_beams):
    """``generate()``: the encoder through the model's attention, each step of the incremental decoder calling SDPA
    itself; every call under the chosen backends."""
    model = make_tiny_model(0, vocab_size=40)
    batch = padded_batch(6)
    model.generate(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], num_beams=num_beams, max_new_tokens=4
    )
    assert seen["sdpa"] and len(seen["functional"]) > len(seen["sdpa"])  # the decoder's own calls too
    assert all(inside == CHOSEN for inside in seen["sdpa"] + seen["functional"])
    assert switches()["cudnn"]


def test_compiled_attention_traces_the_backend_choice_without_a_graph_break(make_tiny_model, monkeypatch):
    """Under torch.compile (one graph: ``fullgraph=True``) the compiled attention runs the backends of the list: with
    the math kernel alone listed, the CPU's flash kernel, which it takes otherwise, is absent from forward and
    backward."""
    model = make_tiny_model(0, vocab_size=40).train()
    attention = model.model.encoder.layers[0].self_attn
    hidden = torch.randn(3, 6, model.config.d_model, requires_grad=True)

    def kernels() -> set[str]:
        torch._dynamo.reset()
        compiled = torch.compile(attention, fullgraph=True, backend="aot_eager", dynamic=True)
        compiled(hidden)[0].sum().backward()  # compiles
        with profile() as profiled:
            compiled(hidden)[0].sum().backward()
        return {event.name for event in profiled.events()}

    try:
        assert any("flash_attention" in name for name in kernels())  # torch's own choice on the CPU
        monkeypatch.setitem(decoder_module.SDPA_BACKENDS, "cpu", ("MATH",))
        math_only = kernels()
        assert not any("flash_attention" in name for name in math_only)
        assert any("_softmax" in name for name in math_only)
    finally:
        torch._dynamo.reset()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_training_step_and_decoding_over_varying_lengths_run_no_cudnn_attention(make_tiny_model):
    """On a GPU: a profiled training step over batches of varying lengths (bf16 autocast) and a beam search run
    flash or memory-efficient attention, and no cuDNN attention operator."""
    model = make_tiny_model(0, vocab_size=40).cuda().train()
    with profile() as profiled:
        for length in (5, 9, 13, 17):
            batch = {name: tensor.cuda() for name, tensor in padded_batch(length).items()}
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(**batch).loss
            loss.backward()
        model.eval()
        batch = padded_batch(11)
        model.generate(input_ids=batch["input_ids"].cuda(), attention_mask=batch["attention_mask"].cuda(), num_beams=4)
        torch.cuda.synchronize()
    names = {event.name for event in profiled.events()}
    assert not any("cudnn_attention" in name for name in names), sorted(n for n in names if "attention" in n)
    assert any("flash_attention" in name or "efficient_attention" in name for name in names)
