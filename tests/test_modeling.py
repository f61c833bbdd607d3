"""The model against independent expectations: the paper's formulas, hand-written loops, transformers' conventions."""

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch
from tiny_model import tiny_config
from torch.nn import functional as F
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSeq2SeqLM,
    EncoderDecoderCache,
    GenerationConfig,
    GenerationMixin,
)
from transformers.modeling_outputs import Seq2SeqLMOutput, Seq2SeqModelOutput

from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    shift_tokens_right,
    sinusoidal_table,
)
from vanilla_transformer.cache_vanilla_transformer import CACHE_NAMES, cache_field

PAD, BOS, EOS = 0, 2, 3
GENERATION_FILES = (
    "generation_vanilla_transformer.py",
    "decoder_vanilla_transformer.py",
    "cache_vanilla_transformer.py",
)


def random_batch(batch=3, src_len=7, tgt_len=5, vocab=40, seed=1):
    """Right-padded sources of different lengths (row i has src_len - i real tokens), and decoder inputs."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab, (batch, src_len), generator=g)
    attention_mask = torch.ones(batch, src_len, dtype=torch.long)
    for i in range(batch):
        n = src_len - i
        input_ids[i, n - 1] = EOS
        input_ids[i, n:] = PAD
        attention_mask[i, n:] = 0
    decoder_input_ids = torch.randint(4, vocab, (batch, tgt_len), generator=g)
    decoder_input_ids[:, 0] = BOS
    return input_ids, attention_mask, decoder_input_ids


# --------------------------------------------------------------------------------------------------------------------
# The paper's formulas
# --------------------------------------------------------------------------------------------------------------------


def test_positional_encoding_is_the_papers_interleaved_sinusoid():
    d_model, positions = 10, 50
    table = sinusoidal_table(positions, d_model)
    for pos in range(positions):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_positional_encoding_is_a_computed_buffer_not_saved_and_exact_at_every_position(make_tiny_model):
    model = make_tiny_model()
    assert not any("embed_positions" in key for key in model.state_dict())
    pe = model.model.encoder.embed_positions.pe
    last = model.config.max_position_embeddings - 1
    d = model.config.d_model
    assert pe[last, 0].item() == pytest.approx(math.sin(last), abs=1e-5)
    assert pe[last, d - 1].item() == pytest.approx(math.cos(last / 10000 ** ((d - 2) / d)), abs=1e-5)


def test_embedding_is_scaled_token_plus_position(make_tiny_model):
    model = make_tiny_model()
    encoder = model.model.encoder
    ids = torch.tensor([[5, 6, 7]])
    expected = model.model.shared.weight[ids] * math.sqrt(32) + sinusoidal_table(64, 32)[:3]
    torch.testing.assert_close(encoder.embed(ids, None, "input_ids"), expected)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_multi_head_attention_equals_handwritten_formula(make_tiny_model, impl):
    model = make_tiny_model(attn_implementation=impl)
    attn = model.model.encoder.layers[0].self_attn
    x = torch.randn(2, 5, 32)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    bias = torch.zeros(2, 1, 1, 5).masked_fill(mask[:, None, None, :] == 0, float("-inf"))

    heads = []
    for h in range(4):
        cols = slice(8 * h, 8 * h + 8)
        q = x @ attn.q_proj.weight[cols].T + attn.q_proj.bias[cols]
        k = x @ attn.k_proj.weight[cols].T + attn.k_proj.bias[cols]
        v = x @ attn.v_proj.weight[cols].T + attn.v_proj.bias[cols]
        heads.append(torch.softmax(q @ k.transpose(1, 2) / math.sqrt(8) + bias[:, 0], dim=-1) @ v)
    expected = torch.cat(heads, dim=-1) @ attn.out_proj.weight.T + attn.out_proj.bias

    additive = torch.zeros(2, 1, 5, 5).masked_fill(mask[:, None, None, :] == 0, torch.finfo(torch.float32).min)
    out, _ = attn(x, attention_mask=additive)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_layers_are_post_norm_with_relu_ffn(make_tiny_model):
    """An encoder layer computed by hand: LayerNorm(x + SelfAttn(x)), then LayerNorm(x + FFN(x))."""
    model = make_tiny_model()
    layer = model.model.encoder.layers[0]
    x = torch.randn(2, 4, 32)
    a = layer.self_attn_layer_norm(x + layer.self_attn(x)[0])
    ffn = F.linear(F.relu(F.linear(a, layer.fc1.weight, layer.fc1.bias)), layer.fc2.weight, layer.fc2.bias)
    expected = F.layer_norm(a + ffn, (32,), layer.final_layer_norm.weight, layer.final_layer_norm.bias)
    torch.testing.assert_close(layer(x), expected)


def test_encoder_and_decoder_outputs_are_their_last_layer_outputs_without_extra_norm(make_tiny_model):
    """No LayerNorm after the embeddings or after either stack (post-norm layers end in their own LayerNorm): each
    stack's output is exactly its last layer's output, and the logits are that times the shared embedding."""
    model = make_tiny_model()
    ids, decoder_ids = torch.tensor([[5, 6, 7, EOS]]), torch.tensor([[BOS, 8, 9]])
    x = model.model.encoder.embed(ids, None, "input_ids")
    for layer in model.model.encoder.layers:
        x = layer(x)
    torch.testing.assert_close(model.model.encoder(ids).last_hidden_state, x)
    y = model.model.decoder.embed(decoder_ids, None, "decoder_input_ids")
    for layer in model.model.decoder.layers:
        y = layer(y, None, x)
    outputs = model(input_ids=ids, decoder_input_ids=decoder_ids)
    torch.testing.assert_close(outputs.encoder_last_hidden_state, x)
    torch.testing.assert_close(outputs.logits, y @ model.model.shared.weight.T)


def test_base_preset_matches_the_paper():
    base = VanillaTransformerConfig.from_preset("base")
    big = VanillaTransformerConfig.from_preset("big")
    assert (base.d_model, base.encoder_ffn_dim, base.encoder_attention_heads, base.encoder_layers, base.dropout) == (
        512,
        2048,
        8,
        6,
        0.1,
    )
    assert (big.d_model, big.encoder_ffn_dim, big.encoder_attention_heads, big.encoder_layers, big.dropout) == (
        1024,
        4096,
        16,
        6,
        0.3,
    )
    assert VanillaTransformerConfig().to_dict() == base.to_dict()
    # Parameter counts: tests/test_paper_behaviour.py::test_parameter_counts_of_table_3 (exact, against the formula)


# --------------------------------------------------------------------------------------------------------------------
# Masking, caching, generation
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_decoder_does_not_see_future_tokens(make_tiny_model, impl):
    model = make_tiny_model(attn_implementation=impl)
    input_ids, attention_mask, dec = random_batch()
    changed = dec.clone()
    changed[:, 3] = (changed[:, 3] + 1) % 36 + 4
    a = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    b = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=changed).logits
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_source_padding_leaves_real_tokens_unchanged(make_tiny_model, impl):
    model = make_tiny_model(attn_implementation=impl)
    src = torch.tensor([[5, 9, 11, EOS]])
    padded = torch.tensor([[5, 9, 11, EOS, PAD, PAD, PAD]])
    mask = (padded != PAD).long()
    dec = torch.tensor([[BOS, 7, 8]])
    enc_a = model.model.encoder(src).last_hidden_state
    enc_b = model.model.encoder(padded, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(enc_a, enc_b[:, :4], atol=1e-5, rtol=1e-5)
    logits_a = model(input_ids=src, decoder_input_ids=dec).logits
    logits_b = model(input_ids=padded, attention_mask=mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(logits_a, logits_b, atol=1e-5, rtol=1e-5)


def test_generate_is_unchanged_by_batch_padding(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, _ = random_batch(batch=3, src_len=8)
    batched = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8, num_beams=1)
    for i in range(3):
        n = int(attention_mask[i].sum())
        single = model.generate(input_ids=input_ids[i : i + 1, :n], max_new_tokens=8, num_beams=1)
        assert batched[i, : single.shape[1]].tolist() == single[0].tolist()


def test_all_padding_row_gives_no_nan(make_tiny_model):
    for impl in ("eager", "sdpa"):
        model = make_tiny_model(attn_implementation=impl)
        input_ids, attention_mask, dec = random_batch()
        input_ids[1] = PAD
        attention_mask[1] = 0
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
        assert torch.isfinite(logits).all(), impl


@pytest.mark.parametrize("name", CACHE_NAMES)  # transformers >= 5.24 passes `cache`; earlier, `past_key_values`
@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_cache_matches_full_recompute(make_tiny_model, impl, name):
    model = make_tiny_model(attn_implementation=impl)
    input_ids, attention_mask, dec = random_batch(tgt_len=6)
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
    cache, steps = None, []
    for t in range(dec.shape[1]):
        out = model(
            encoder_outputs=encoder_outputs,
            attention_mask=attention_mask,
            decoder_input_ids=dec[:, t : t + 1],
            use_cache=True,
            **{name: cache},
        )
        cache = getattr(out, cache_field())  # where generation reads it back
        steps.append(out.logits)
    assert isinstance(cache, EncoderDecoderCache)
    assert len(cache.self_attention_cache.layers) == model.config.decoder_layers
    assert cache.get_seq_length() == dec.shape[1]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_generation_continues_from_a_returned_cache(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch(tgt_len=4)
    first = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec[:, :3], use_cache=True)
    second = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=dec[:, 3:],
        use_cache=True,
        **{cache_field(): getattr(first, cache_field())},
    )
    full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    torch.testing.assert_close(second.logits[:, 0], full[:, 3], atol=1e-5, rtol=1e-5)


def handwritten_greedy(model, input_ids, attention_mask, max_new_tokens):
    """Greedy decoding by full recompute at every step, no cache: argmax, stop at EOS, then pad."""
    out = torch.full((input_ids.shape[0], 1), model.config.decoder_start_token_id)
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=out).logits[:, -1]
        nxt = logits.argmax(-1).masked_fill(done, model.config.pad_token_id)
        out = torch.cat([out, nxt[:, None]], dim=1)
        done |= nxt == model.config.eos_token_id
        if done.all():
            break
    return out


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generate_equals_handwritten_loop(make_tiny_model, use_cache):
    torch.manual_seed(0)
    model = make_tiny_model()
    # A slightly trained-looking model: make EOS likely at some point so early stopping is exercised.
    with torch.no_grad():
        model.model.shared.weight[EOS] *= 3
    input_ids, attention_mask, _ = random_batch(batch=4, src_len=9)
    expected = handwritten_greedy(model, input_ids, attention_mask, 12)
    got = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=12,
        num_beams=1,
        do_sample=False,
        use_cache=use_cache,
    )
    assert got.tolist() == expected.tolist()


def test_generate_strategies_run_on_padded_batches(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, _ = random_batch(batch=3, src_len=6)
    kw = dict(input_ids=input_ids, attention_mask=attention_mask)
    beam = model.generate(
        **kw, num_beams=4, length_penalty=0.6, early_stopping=True, max_new_tokens=6, num_return_sequences=2
    )
    assert beam.shape[0] == 6
    sample = model.generate(**kw, do_sample=True, top_k=10, max_new_tokens=6, num_return_sequences=3)
    assert sample.shape[0] == 9
    min_len = model.generate(**kw, min_length=5, max_new_tokens=6)
    assert (min_len[:, 1:5] != EOS).all()
    beam_sample = model.generate(**kw, do_sample=True, num_beams=2, max_new_tokens=4)
    assert beam_sample.shape[0] == 3
    out = model.generate(
        **kw,
        max_new_tokens=4,
        return_dict_in_generate=True,
        output_scores=True,
        output_logits=True,
        output_hidden_states=True,
    )
    assert len(out.scores) == out.sequences.shape[1] - 1 == len(out.logits)
    assert len(out.decoder_hidden_states[0]) == model.config.decoder_layers + 1
    embeds = model.get_input_embeddings()(input_ids)
    from_embeds = model.generate(inputs_embeds=embeds, attention_mask=attention_mask, max_new_tokens=5)
    assert from_embeds.tolist() == model.generate(**kw, max_new_tokens=5).tolist()


def test_assisted_and_prompt_lookup_decoding_match_greedy(make_tiny_model):
    model = make_tiny_model()
    assistant = make_tiny_model(seed=1)
    input_ids, attention_mask, _ = random_batch(batch=1, src_len=6)
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=8)
    greedy = model.generate(**kw).tolist()
    assert model.generate(**kw, assistant_model=assistant).tolist() == greedy
    assert model.generate(**kw, prompt_lookup_num_tokens=2).tolist() == greedy


def test_generate_dict_outputs_include_attentions_with_eager(make_tiny_model):
    model = make_tiny_model(attn_implementation="eager")
    input_ids, attention_mask, _ = random_batch(batch=2, src_len=5)
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=3,
        return_dict_in_generate=True,
        output_attentions=True,
    )
    assert len(out.encoder_attentions) == 2 and out.encoder_attentions[0].shape == (2, 4, 5, 5)
    assert out.cross_attentions[0][0].shape == (2, 4, 1, 5)


# --------------------------------------------------------------------------------------------------------------------
# Attention backends
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2), (torch.float16, 1e-2)])
@pytest.mark.parametrize("side", ["right", "left"])
def test_eager_and_sdpa_agree(make_tiny_model, dtype, tol, side):
    model = make_tiny_model().to(dtype)
    input_ids, attention_mask, dec = random_batch()
    if side == "left":
        lengths = attention_mask.sum(1)
        for i, n in enumerate(lengths.tolist()):
            input_ids[i] = torch.cat([input_ids[i, :n].flip(0) * 0 + PAD, input_ids[i, :n]])[-input_ids.shape[1] :]
            attention_mask[i] = torch.cat([torch.zeros(7 - n), torch.ones(n)]).long()
    outs = {}
    for impl in ("eager", "sdpa"):
        model.set_attn_implementation(impl)
        assert model.config._attn_implementation == impl
        outs[impl] = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits.float()
    torch.testing.assert_close(outs["eager"], outs["sdpa"], atol=tol, rtol=tol)


def test_encoder_and_cross_attention_are_never_causal(make_tiny_model):
    model = make_tiny_model()
    for name, module in model.named_modules():
        if name.endswith("self_attn") or name.endswith("encoder_attn"):
            assert module.is_causal == (name.startswith("model.decoder") and name.endswith("self_attn")), name
    # Behaviourally: with SDPA and no padding mask, the first encoder position must still see the last token.
    ids = torch.tensor([[5, 6, 7, 8]])
    changed = torch.tensor([[5, 6, 7, 9]])
    enc = model.model.encoder
    assert not torch.allclose(enc(ids).last_hidden_state[:, 0], enc(changed).last_hidden_state[:, 0])
    dec = torch.tensor([[BOS, 6, 7]])
    a = model(input_ids=ids, decoder_input_ids=dec).logits
    b = model(input_ids=changed, decoder_input_ids=dec).logits
    assert not torch.allclose(a[:, 0], b[:, 0])  # the first target position attends to every source token


def test_custom_4d_mask_is_used(make_tiny_model):
    model = make_tiny_model(attn_implementation="eager")
    input_ids, _, dec = random_batch(batch=1, src_len=5)
    # A 4D additive mask that hides source token 4 must equal the 2D padding mask that does the same.
    two_d = torch.tensor([[1, 1, 1, 1, 0]])
    four_d = torch.zeros(1, 1, 5, 5).masked_fill(two_d[:, None, None, :] == 0, torch.finfo(torch.float32).min)
    enc = model.model.encoder
    torch.testing.assert_close(
        enc(input_ids, attention_mask=two_d).last_hidden_state, enc(input_ids, attention_mask=four_d).last_hidden_state
    )


# --------------------------------------------------------------------------------------------------------------------
# Outputs and embeddings
# --------------------------------------------------------------------------------------------------------------------


def test_outputs_hidden_states_attentions_and_tuples(make_tiny_model):
    model = make_tiny_model(attn_implementation="eager")
    input_ids, attention_mask, dec = random_batch()
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        decoder_input_ids=dec,
        output_hidden_states=True,
        output_attentions=True,
    )
    assert isinstance(out, Seq2SeqLMOutput)
    assert len(out.encoder_hidden_states) == len(out.decoder_hidden_states) == 3  # layers + 1 (the embeddings)
    torch.testing.assert_close(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    assert out.encoder_attentions[0].shape == (3, 4, 7, 7)
    assert out.decoder_attentions[0].shape == (3, 4, 5, 5)
    assert out.cross_attentions[0].shape == (3, 4, 5, 7)
    # decoder self-attention weights are lower-triangular; each row sums to one
    assert torch.all(out.decoder_attentions[0].triu(1) == 0)
    torch.testing.assert_close(out.cross_attentions[1].sum(-1), torch.ones(3, 4, 5))
    # padded source positions get no cross-attention
    assert torch.all(out.cross_attentions[0][2, :, :, 5:] < 1e-6)

    as_tuple = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec, return_dict=False)
    torch.testing.assert_close(as_tuple[0], out.logits)

    # requested through the config instead of the call
    model.config.output_attentions = True
    model.config.output_hidden_states = True
    by_config = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    assert len(by_config.cross_attentions) == 2 and len(by_config.decoder_hidden_states) == 3


def test_base_model_returns_seq2seq_model_output():
    model = VanillaTransformerModel(tiny_config()).eval()
    input_ids, attention_mask, dec = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    assert isinstance(out, Seq2SeqModelOutput) and out.last_hidden_state.shape == (3, 5, 32)


def test_inputs_embeds_equal_input_ids(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch()
    emb = model.get_input_embeddings()
    a = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    b = model(inputs_embeds=emb(input_ids), attention_mask=attention_mask, decoder_inputs_embeds=emb(dec)).logits
    torch.testing.assert_close(a, b)


def test_batched_equals_single(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch()
    batched = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    for i in range(3):
        single = model(
            input_ids=input_ids[i : i + 1], attention_mask=attention_mask[i : i + 1], decoder_input_ids=dec[i : i + 1]
        )
        torch.testing.assert_close(single.logits, batched[i : i + 1], atol=1e-5, rtol=1e-5)


def test_three_way_tied_embeddings_and_untied_option(make_tiny_model, tmp_path):
    model = make_tiny_model()
    shared = model.model.shared.weight
    assert model.model.encoder.embed_tokens.weight is shared
    assert model.model.decoder.embed_tokens.weight is shared
    assert model.lm_head.weight is shared
    assert model._tied_weights_keys == {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }
    model.save_pretrained(tmp_path)
    loaded = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path)
    s = loaded.model.shared.weight
    assert loaded.model.encoder.embed_tokens.weight is s and loaded.model.decoder.embed_tokens.weight is s
    assert loaded.lm_head.weight.data_ptr() == s.data_ptr()

    untied = make_tiny_model(tie_word_embeddings=False)
    ws = [untied.model.encoder.embed_tokens.weight, untied.model.decoder.embed_tokens.weight, untied.lm_head.weight]
    assert len({w.data_ptr() for w in ws}) == 3
    input_ids, attention_mask, dec = random_batch()
    untied(input_ids=input_ids, attention_mask=attention_mask, labels=dec).loss.backward()
    assert all(p.grad is not None for p in untied.parameters())


def test_untied_checkpoints_and_full_state_dicts_load(make_tiny_model, tmp_path):
    untied = make_tiny_model(tie_word_embeddings=False)
    untied.save_pretrained(tmp_path / "untied")
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path / "untied", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    for name, tensor in untied.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, atol=0, rtol=0)
    assert loaded.lm_head.weight.data_ptr() != loaded.model.encoder.embed_tokens.weight.data_ptr()

    # A checkpoint written by a tool that saves every tied copy separately still loads, and ties.
    from safetensors.torch import save_file

    tied = make_tiny_model()
    tied.config.save_pretrained(tmp_path / "full")
    save_file(
        {k: v.clone().contiguous() for k, v in tied.state_dict().items()}, tmp_path / "full" / "model.safetensors"
    )
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path / "full", output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert loaded.lm_head.weight is loaded.model.shared.weight
    torch.testing.assert_close(loaded.model.shared.weight, tied.model.shared.weight)


@pytest.mark.parametrize("tied", [True, False])
def test_resize_token_embeddings(make_tiny_model, tied):
    model = make_tiny_model(tie_word_embeddings=tied)
    old = model.get_input_embeddings().weight.detach().clone()
    model.resize_token_embeddings(48)
    assert model.config.vocab_size == 48
    assert model.model.encoder.embed_tokens.weight.shape == model.model.decoder.embed_tokens.weight.shape == (48, 32)
    assert model.lm_head.weight.shape == (48, 32)
    torch.testing.assert_close(model.get_input_embeddings().weight[:40], old)
    if tied:
        assert model.lm_head.weight is model.model.shared.weight is model.model.encoder.embed_tokens.weight
    input_ids, attention_mask, dec = random_batch()
    input_ids[0, 0] = 47
    assert model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits.shape[-1] == 48


# --------------------------------------------------------------------------------------------------------------------
# Saving, loading, Auto classes, remote code
# --------------------------------------------------------------------------------------------------------------------


def test_config_defaults_json_roundtrip_and_attribute_map(tmp_path, recwarn):
    config = VanillaTransformerConfig()
    assert not [w for w in recwarn if "vanilla" in str(w.filename) or "config" in str(w.message).lower()]
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (512, 8, 6)
    restored = VanillaTransformerConfig.from_dict(json.loads(config.to_json_string()))
    assert restored.to_dict() == config.to_dict()
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert type(reloaded) is VanillaTransformerConfig
    assert {**reloaded.to_dict(), "_name_or_path": ""} == config.to_dict()
    assert config.model_type == "vanilla_transformer" and config.is_encoder_decoder


def test_save_load_roundtrip_is_exact_in_safetensors_and_torch_formats(make_tiny_model, tmp_path):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch()
    expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    for sub, safe in (("st", True), ("pt", False)):
        path = tmp_path / sub
        model.save_pretrained(path, safe_serialization=safe) if not safe else model.save_pretrained(path)
        if safe:
            assert (path / "model.safetensors").exists()
        else:  # a plain torch.save'd state dict, as older tools write it
            (path / "model.safetensors").unlink(missing_ok=True)
            torch.save(model.state_dict(), path / "pytorch_model.bin")
        loaded, info = AutoModelForSeq2SeqLM.from_pretrained(path, output_loading_info=True)
        assert type(loaded) is VanillaTransformerForConditionalGeneration
        assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
        got = loaded.eval()(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_base_model_weights_load_into_lm_class_and_back(make_tiny_model, tmp_path):
    lm = make_tiny_model()
    lm.model.save_pretrained(tmp_path / "base")
    assert type(AutoModel.from_pretrained(tmp_path / "base")) is VanillaTransformerModel
    lm2, info = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path / "base", output_loading_info=True)
    torch.testing.assert_close(lm2.model.shared.weight, lm.model.shared.weight)
    assert not info["unexpected_keys"] and not [k for k in info["missing_keys"] if k != "lm_head.weight"]
    lm.save_pretrained(tmp_path / "lm")
    base = VanillaTransformerModel.from_pretrained(tmp_path / "lm")
    torch.testing.assert_close(base.encoder.layers[0].fc1.weight, lm.model.encoder.layers[0].fc1.weight)


def test_ignore_mismatched_sizes(make_tiny_model, tmp_path):
    make_tiny_model().save_pretrained(tmp_path)
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, vocab_size=44)
    model, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path, vocab_size=44, ignore_mismatched_sizes=True, output_loading_info=True
    )
    assert model.lm_head.weight.shape == (44, 32) and info["mismatched_keys"]


def test_state_dict_keys_follow_marian(make_tiny_model):
    keys = set(make_tiny_model().state_dict())
    for key in (
        "model.shared.weight",
        "model.encoder.layers.0.self_attn.q_proj.weight",
        "model.encoder.layers.0.self_attn.out_proj.bias",
        "model.encoder.layers.1.self_attn_layer_norm.weight",
        "model.encoder.layers.1.fc1.weight",
        "model.encoder.layers.1.fc2.bias",
        "model.encoder.layers.1.final_layer_norm.weight",
        "model.decoder.layers.1.encoder_attn.k_proj.weight",
        "model.decoder.layers.1.encoder_attn_layer_norm.bias",
        "lm_head.weight",
    ):
        assert key in keys, key
    assert not [k for k in keys if "final_logits_bias" in k or "embed_positions" in k]


def test_remote_code_loads_without_the_package(make_tiny_model, tmp_path):
    model = make_tiny_model()
    model.save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["auto_map"]["AutoModelForSeq2SeqLM"].startswith("modeling_vanilla_transformer.")
    assert config["auto_map"]["AutoConfig"].startswith("configuration_vanilla_transformer.")
    for name in ("modeling_vanilla_transformer.py", "configuration_vanilla_transformer.py", *GENERATION_FILES):
        source = (tmp_path / name).read_text()
        imports = {
            line.split()[1].split(".")[0] for line in source.splitlines() if line.startswith(("import ", "from "))
        }
        assert imports <= set(sys.stdlib_module_names) | {"torch", "transformers", ""}, (name, imports)
    expected = model.generate(input_ids=torch.tensor([[5, 6, 7, EOS]]), max_new_tokens=5).tolist()
    # The paper's beam search (GNMT penalty, input length + offset) runs in the copied generation file.
    paper = dict(num_beams=3, length_penalty=0.6, early_stopping="never", max_new_tokens=30)
    paper.update(length_penalty_type="gnmt", max_length_offset=4, pad_token_id=PAD, eos_token_id=EOS)
    sources = [[5, 6, 7, 8, 9, EOS], [11, 4, EOS, PAD, PAD, PAD]]
    masks = [[1] * 6, [1, 1, 1, 0, 0, 0]]
    paper_output = model.generate(
        input_ids=torch.tensor(sources),
        attention_mask=torch.tensor(masks),
        generation_config=GenerationConfig(**paper),
    ).tolist()
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["vanilla_transformer"] = None  # make the package unimportable, as on a machine without it
        try:
            import vanilla_transformer
        except ImportError:
            pass
        else:
            raise SystemExit("vanilla_transformer is importable")
        import torch
        from transformers import AutoModelForSeq2SeqLM
        model = AutoModelForSeq2SeqLM.from_pretrained({str(tmp_path)!r}, trust_remote_code=True)
        assert "vanilla_transformer" not in type(model).__module__.split(".")[0]
        print(model.generate(input_ids=torch.tensor([[5, 6, 7, 3]]), max_new_tokens=5).tolist())
        from transformers import GenerationConfig
        mixin = next(c for c in type(model).__mro__ if c.__name__ == "FastGenerationMixin")
        assert mixin.__module__.endswith("generation_vanilla_transformer"), mixin.__module__
        config = GenerationConfig(**{paper!r})
        ids, mask = torch.tensor({sources!r}), torch.tensor({masks!r})
        print(model.generate(input_ids=ids, attention_mask=mask, generation_config=config).tolist())
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-2:] == [str(expected), str(paper_output)]
    from vanilla_transformer.serving.search import translate_ids

    reference = translate_ids(
        model, torch.tensor(sources), torch.tensor(masks), num_beams=3, length_penalty=0.6, max_length_offset=4
    )
    assert paper_output == reference.tolist()


def test_builds_on_meta_device_and_init_covers_every_tensor():
    with torch.device("meta"):
        model = VanillaTransformerForConditionalGeneration(tiny_config())
    assert all(p.is_meta for p in model.parameters())
    model = model.to_empty(device="cpu")
    model.initialize_weights()  # re-run the model's own initialisation on the empty tensors
    pe = model.model.decoder.embed_positions.pe
    torch.testing.assert_close(pe, sinusoidal_table(64, 32))
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
    # No plain tensor attributes: every tensor is a parameter or a registered buffer.
    for module in model.modules():
        assert not [k for k, v in vars(module).items() if isinstance(v, torch.Tensor)], type(module).__name__


def test_initialisation_scales(make_tiny_model):
    model = make_tiny_model(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4)
    emb = model.model.shared.weight[4:]
    assert emb.std().item() == pytest.approx(64**-0.5, rel=0.1)
    assert torch.all(model.model.shared.weight[PAD] == 0)
    fc1 = model.model.encoder.layers[0].fc1.weight
    assert fc1.abs().max().item() <= math.sqrt(6 / (64 + 64)) + 1e-6  # Xavier-uniform bound
    assert torch.all(model.model.encoder.layers[0].fc1.bias == 0)


def test_runs_without_special_token_ids(make_tiny_model):
    model = make_tiny_model(pad_token_id=None, bos_token_id=None, eos_token_id=None)
    input_ids, attention_mask, dec = random_batch()
    out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    assert torch.isfinite(out.logits).all()


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def test_loss_is_token_cross_entropy_ignoring_minus_100_and_shifts_labels(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, _ = random_batch()
    labels = torch.randint(4, 40, (3, 5))
    labels[0, 3:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    dec = model.prepare_decoder_input_ids_from_labels(labels)
    assert (
        dec[:, 0].tolist() == [BOS] * 3 and dec[0, 4].item() == PAD and dec[1, 1:].tolist() == labels[1, :-1].tolist()
    )
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    keep = labels != -100
    expected = -torch.log_softmax(logits, -1)[keep].gather(1, labels[keep][:, None]).mean()
    torch.testing.assert_close(out.loss, expected)
    summed = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels, num_items_in_batch=100).loss
    torch.testing.assert_close(summed, expected * keep.sum() / 100)
    assert shift_tokens_right(labels, PAD, BOS).tolist() == dec.tolist()


@pytest.mark.parametrize("reentrant", [True, False])
def test_gradient_checkpointing_gives_the_same_gradients(make_tiny_model, reentrant):
    input_ids, attention_mask, _ = random_batch()
    labels = torch.randint(4, 40, (3, 5))
    grads = []
    for checkpointing in (False, True):
        model = make_tiny_model().train()
        if checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": reentrant})
            if reentrant:
                model.enable_input_require_grads()
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        grads.append({n: p.grad for n, p in model.named_parameters()})
    for name, g in grads[0].items():
        assert g is not None and grads[1][name] is not None, name
        torch.testing.assert_close(grads[1][name], g, atol=1e-5, rtol=1e-4)


def test_dropout_is_on_embeddings_and_sublayers_in_training_only(make_tiny_model):
    model = make_tiny_model(dropout=0.5)
    input_ids, attention_mask, dec = random_batch()
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec)
    model.eval()
    torch.testing.assert_close(model(**kw).logits, model(**kw).logits)
    model.train()
    assert not torch.allclose(model(**kw).logits, model(**kw).logits)
    dropouts = [m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    assert dropouts.count(0.5) == 2 + 2 + 2  # one per stack's embeddings, one per layer (residual dropout)


def test_tiny_model_learns_a_copy_task():
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=16, dropout=0.0)).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(300):
        src = torch.randint(4, 16, (32, 6))
        src[:, -1] = EOS
        loss = model(input_ids=src, labels=src).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if loss.item() < 0.05:
            break
    assert loss.item() < 0.1
    model.eval()
    src = torch.tensor([[7, 12, 5, 9, 4, EOS]])
    assert model.generate(input_ids=src, max_new_tokens=8)[0, 1:7].tolist() == src[0].tolist()


def test_torch_compile_forward_and_generation(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch()
    expected = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits
    compiled = torch.compile(model, backend="eager", fullgraph=False)
    torch.testing.assert_close(
        compiled(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec).logits, expected
    )
    greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4)
    model.forward = torch.compile(model.forward, backend="eager", fullgraph=True)
    assert (
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4).tolist()
        == greedy.tolist()
    )


def test_class_conventions():
    assert GenerationMixin in VanillaTransformerForConditionalGeneration.__bases__
    assert VanillaTransformerForConditionalGeneration.base_model_prefix == "model"
    assert VanillaTransformerForConditionalGeneration.__annotations__.get("config") or any(
        "config" in getattr(c, "__annotations__", {}) for c in VanillaTransformerForConditionalGeneration.__mro__
    )


# --------------------------------------------------------------------------------------------------------------------
# Bad input: a clear ValueError naming the argument and the value
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(d_model=30, encoder_attention_heads=4), "d_model.*30.*encoder_attention_heads=4"),
        (dict(activation_function="swiglu"), "activation_function='swiglu'"),
        (dict(dropout=1.5), "dropout=1.5"),
    ],
)
def test_bad_config_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiny_config(**kwargs)


def test_unknown_preset_raises():
    with pytest.raises(ValueError, match="name='huge'"):
        VanillaTransformerConfig.from_preset("huge")


def test_bad_inputs_raise(make_tiny_model):
    model = make_tiny_model()
    input_ids, attention_mask, dec = random_batch()
    with pytest.raises(ValueError, match="max_position_embeddings=64"):
        model(input_ids=torch.full((1, 65), 5), decoder_input_ids=dec[:1])
    with pytest.raises(ValueError, match="input_ids contains token id 40.*vocab_size=40"):
        model(input_ids=torch.tensor([[5, 40]]), decoder_input_ids=dec[:1])
    with pytest.raises(ValueError, match="decoder_input_ids contains token id -1"):
        model(input_ids=input_ids, decoder_input_ids=torch.tensor([[2, -1]] * 3))
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 6\)"):
        model(input_ids=input_ids, attention_mask=attention_mask[:, :6], decoder_input_ids=dec)
    with pytest.raises(ValueError, match=r"labels has shape \(3, 4\).*decoder_input_ids has shape \(3, 5\)"):
        model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=dec, labels=dec[:, :4])
