"""Decoding is right on every supported transformers release, and never silently wrong on another.

transformers 5.24 renamed the generation cache from ``past_key_values`` to ``cache``: a model that ignored the new
name decoded each step from its last token alone. CI runs these tests on the oldest and the newest supported
transformers. Independent expectations: a greedy loop of full forward passes (no cache, written here), and MarianMT,
transformers' own implementation of the same network, given the same weights.
"""

import inspect

import pytest
import torch
import transformers
from copy_task import MAX_NEW_TOKENS, generate, greedy_by_forward_passes, sentences
from transformers import GenerationMixin

import vanilla_transformer.generation_vanilla_transformer as fast
from vanilla_transformer.cache_vanilla_transformer import UnsupportedCacheError, cache_field
from vanilla_transformer.export.marian import vanilla_to_marian
from vanilla_transformer.serving.search import translate


def test_the_copy_model_copies(copy_model, copy_batch):
    """The reference itself is sound: the copy model's greedy output, decoded, is mostly its input."""
    model, tokenizer = copy_model
    output = greedy_by_forward_passes(model, copy_batch)
    texts = tokenizer.batch_decode(output, skip_special_tokens=True)
    assert sum(t == s for t, s in zip(texts, sentences(12, seed=11), strict=True)) >= 9


def test_greedy_generate_equals_forward_passes(copy_model, copy_batch, decoder_steps):
    model, _ = copy_model
    expected = greedy_by_forward_passes(model, copy_batch)
    for use_cache in (True, False):
        decoder_steps.clear()
        assert torch.equal(generate(model, copy_batch, use_cache=use_cache), expected), use_cache
        assert decoder_steps, "the fast decoder did not run"
    # transformers' own loop (asking for a dict output hands the call to it), with its cache
    loop = generate(model, copy_batch, return_dict_in_generate=True).sequences
    assert torch.equal(loop, expected)


@pytest.mark.parametrize("settings", [dict(num_beams=1), dict(num_beams=4), dict(do_sample=True, top_k=5)])
def test_generate_equals_a_marian_twin(copy_model, copy_batch, settings, decoder_steps):
    """The same weights in MarianMTModel generate the same tokens, on the installed transformers; sampling (which
    transformers' loop serves) with the same seed too."""
    model, _ = copy_model
    marian = vanilla_to_marian(model)
    torch.manual_seed(0)
    expected = generate(marian, copy_batch, **settings)
    decoder_steps.clear()
    torch.manual_seed(0)
    assert torch.equal(generate(model, copy_batch, **settings), expected)
    assert bool(decoder_steps) == (not settings.get("do_sample")), "the fast decoder ran where it should not or not"


def test_translate_and_pipeline_equal_the_forward_passes(copy_model):
    from vanilla_transformer.pipeline_vanilla_transformer import TranslationPipeline

    model, tokenizer = copy_model
    sources = sentences(6, seed=12)
    batch = tokenizer(sources, padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(greedy_by_forward_passes(model, batch), skip_special_tokens=True)
    assert translate(model, tokenizer, sources, num_beams=1, length_penalty=0.0, max_length_offset=50) == expected
    translator = TranslationPipeline(model=model, tokenizer=tokenizer)  # what pipeline("translation") builds
    outputs = translator(sources, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    assert [o["translation_text"] for o in outputs] == expected


def test_a_cache_under_an_unknown_name_stops_generation(copy_model, copy_batch, monkeypatch):
    """A transformers that hands the cache over under a new name (simulated: `kv_cache`) gets a clear error naming
    its version and the tested range, never tokens computed without the past."""
    model, _ = copy_model
    prepare = GenerationMixin.prepare_inputs_for_generation

    def renamed(self, *args, **kwargs):
        inputs = prepare(self, *args, **kwargs)
        inputs["kv_cache"] = inputs.pop(cache_field())
        return inputs

    monkeypatch.setattr(GenerationMixin, "prepare_inputs_for_generation", renamed)
    with pytest.raises(UnsupportedCacheError, match=rf"kv_cache.*transformers {transformers.__version__}.*5\.23"):
        generate(model, copy_batch, return_dict_in_generate=True)
    with pytest.raises(UnsupportedCacheError, match="not a transformers Cache"):
        model(**copy_batch, decoder_input_ids=copy_batch["input_ids"][:, :1], **{cache_field(): ((1, 2),)})


def test_the_overridden_decoding_methods_match_this_transformers():
    """`FastGenerationMixin` overrides transformers' private `_sample` and `_beam_search`: their signatures must be
    the ones it was written for, on every supported transformers (CI runs this on the oldest and the newest)."""
    assert fast.hook_signatures_match() == {"_sample": True, "_beam_search": True}
    for name, (_, expected) in fast._HOOKS.items():
        assert tuple(inspect.signature(getattr(GenerationMixin, name)).parameters)[: len(expected)] == expected


def test_unknown_decoding_method_signatures_leave_generation_to_transformers(
    copy_model,
    copy_batch,
    monkeypatch,
    decoder_steps,
):
    model, _ = copy_model
    expected = generate(model, copy_batch, num_beams=4)
    assert decoder_steps
    monkeypatch.setattr(fast, "_HOOKS_MATCH", {"_sample": False, "_beam_search": False})
    decoder_steps.clear()
    assert torch.equal(generate(model, copy_batch, num_beams=4), expected)
    assert torch.equal(generate(model, copy_batch), greedy_by_forward_passes(model, copy_batch))
    assert not decoder_steps


def test_per_row_decoder_start_tokens_are_honoured(copy_model, copy_batch, decoder_steps):
    """One start token per row, different between rows: each row decodes from its own."""
    model, _ = copy_model
    rows = copy_batch["input_ids"].shape[0]
    start = torch.full((rows, 1), model.config.decoder_start_token_id)
    start[::2] = copy_batch["input_ids"][::2, :1]  # every other row starts from its first source token
    expected = greedy_by_forward_passes(model, copy_batch, start=start)
    decoder_steps.clear()
    assert torch.equal(generate(model, copy_batch, decoder_input_ids=start), expected)
    # the same start everywhere is still the fast decoder's
    decoder_steps.clear()
    generate(model, copy_batch, decoder_input_ids=torch.full((rows, 1), model.config.decoder_start_token_id))
    assert decoder_steps
