"""generate() of a model whose decoder computes something other than its plain weights (a PEFT adapter, a forward
hook) equals decoding it by forward passes: the fast decoder, which copies the plain weights, must not serve it."""

import pytest
import torch
from copy_task import generate, greedy_by_forward_passes

peft = pytest.importorskip("peft")


def with_lora(model, seed: int = 0):
    """A LoRA adapter (r 8) on q_proj and v_proj, its B matrices random (not zero), so that it changes outputs."""
    import copy

    torch.manual_seed(seed)
    config = peft.LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return peft.get_peft_model(copy.deepcopy(model), config).eval()


def beam_by_transformers_loop(model, batch):
    """transformers' own beam search, each step a full forward pass (no cache)."""
    return generate(model, batch, num_beams=4, use_cache=False, return_dict_in_generate=True).sequences


def test_generate_of_a_lora_model_is_the_adapted_model(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    adapted = with_lora(model)
    expected = greedy_by_forward_passes(adapted, copy_batch)
    assert not torch.equal(expected, greedy_by_forward_passes(model, copy_batch))  # the adapter matters
    decoder_steps.clear()
    assert torch.equal(generate(adapted, copy_batch), expected)
    assert torch.equal(generate(adapted.get_base_model(), copy_batch, use_cache=False), expected)
    assert torch.equal(generate(adapted, copy_batch, num_beams=4), beam_by_transformers_loop(adapted, copy_batch))
    assert not decoder_steps, "the fast decoder served a model with an adapter"
    merged = adapted.merge_and_unload()
    assert torch.equal(generate(merged, copy_batch), expected)
    assert decoder_steps, "a merged (plain) model should take the fast decoder"


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
