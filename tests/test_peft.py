"""generate() of a model whose decoder computes something other than its plain weights (a PEFT adapter, a forward
hook) equals decoding it by forward passes: the fast decoder folds a plain LoRA adapter into the weights it copies,
and leaves anything else to transformers' loop."""

import copy

import pytest
import torch
from copy_task import generate, greedy_by_forward_passes

peft = pytest.importorskip("peft")


def with_lora(model, seed: int = 0):
    """A LoRA adapter (r 8) on q_proj and v_proj, its B matrices random (not zero), so that it changes outputs."""
    torch.manual_seed(seed)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(copy.deepcopy(model), config).eval()


def beam_by_transformers_loop(model, batch):
    """transformers' own beam search, each step a full forward pass (no cache)."""
    return generate(model, batch, num_beams=4, use_cache=False, return_dict_in_generate=True).sequences


def test_generate_of_a_lora_model_is_the_adapted_model(copy_model, copy_batch, decoder_steps):
    """A plain LoRA adapter is folded into the fast decoder's prepared weights (W + scaling * B A): the fast decoder
    serves the call, with the adapted model's tokens."""
    model, _ = copy_model
    adapted = with_lora(model)
    expected = greedy_by_forward_passes(adapted, copy_batch)
    assert not torch.equal(expected, greedy_by_forward_passes(model, copy_batch))  # the adapter matters
    decoder_steps.clear()
    assert torch.equal(generate(adapted, copy_batch), expected)
    assert decoder_steps, "the fast decoder did not serve a plain LoRA model"
    assert torch.equal(generate(adapted.get_base_model(), copy_batch, use_cache=False), expected)
    assert torch.equal(generate(adapted, copy_batch, num_beams=4), beam_by_transformers_loop(adapted, copy_batch))
    with adapted.disable_adapter():  # the base model's tokens, from weights prepared anew
        assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(model, copy_batch))
    merged = adapted.merge_and_unload()
    assert torch.equal(generate(merged, copy_batch), expected)


def test_the_fast_decoder_follows_the_active_adapter_and_its_updates(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    adapted = with_lora(model, seed=1)
    torch.manual_seed(2)
    second = peft.LoraConfig(r=4, lora_alpha=32, target_modules=["k_proj", "fc1"], init_lora_weights=False)
    adapted.add_adapter("second", second)
    for name in ("second", "default", "second"):
        adapted.set_adapter(name)
        adapted.eval()
        assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch)), name
    with torch.no_grad():  # in place, as an optimizer step updates an adapter
        for module in adapted.modules():
            if isinstance(module, peft.tuners.lora.LoraLayer) and "second" in module.lora_B:
                module.lora_B["second"].weight.mul_(-2.0)
    assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch))
    assert decoder_steps


def test_a_lora_variant_goes_to_transformers_loop(copy_model, copy_batch, decoder_steps):
    """DoRA rescales W + B A by a learned magnitude per output: not the plain form the decoder folds in."""
    model, _ = copy_model
    torch.manual_seed(3)
    config = peft.LoraConfig(r=8, target_modules=["q_proj", "v_proj"], use_dora=True, init_lora_weights=False)
    adapted = peft.get_peft_model(copy.deepcopy(model), config).eval()
    decoder_steps.clear()
    assert torch.equal(generate(adapted, copy_batch), greedy_by_forward_passes(adapted, copy_batch))
    assert not decoder_steps


def test_generate_with_a_forward_hook_is_the_hooked_model(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    fc2 = model.get_decoder().layers[0].fc2
    handle = fc2.register_forward_hook(lambda module, args, output: 1.5 * output)
    try:
        expected = greedy_by_forward_passes(model, copy_batch)
        decoder_steps.clear()
        assert torch.equal(generate(model, copy_batch), expected)
        assert torch.equal(generate(model, copy_batch, num_beams=4), beam_by_transformers_loop(model, copy_batch))
        assert not decoder_steps
    finally:
        handle.remove()
    assert not torch.equal(greedy_by_forward_passes(model, copy_batch), expected)  # the hook mattered
    decoder_steps.clear()
    assert torch.equal(generate(model, copy_batch), greedy_by_forward_passes(model, copy_batch))
    assert decoder_steps, "without the hook, the plain model takes the fast decoder again"
