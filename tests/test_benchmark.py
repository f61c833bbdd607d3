"""Our model against MarianMT, an independent implementation, on the same weights (`bench.marian_twin`, the decoding
benchmark's MarianMT contestant); and the benchmarks' model sizes."""

import bench as kit
import pytest
import torch
from copy_task import sentences

from vanilla_transformer.export.marian import marian_permutation, marian_table, permute_state_dict
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

PAD, BOS, EOS = 0, 2, 3


def tiny_pair(impl="sdpa", dropout=0.0, seed=0):
    torch.manual_seed(seed)
    config = kit.model_config("tiny", vocab_size=60, dropout=dropout, max_position_embeddings=64)
    config._attn_implementation = impl
    ours = VanillaTransformerForConditionalGeneration(config)
    return ours, kit.marian_twin(ours)


def random_labelled_batch(seed=1, vocab=60):
    """Right-padded sources and labels of different lengths (more than 10% padding, so training packs tokens)."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for source_length, target_length in ((9, 7), (4, 6), (7, 2), (2, 5)):
        source = torch.randint(EOS + 1, vocab, (source_length,), generator=g).tolist()
        target = torch.randint(EOS + 1, vocab, (target_length,), generator=g).tolist()
        pairs.append((source[:-1] + [EOS], target[:-1] + [EOS]))
    return kit.collate(pairs)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_marian_twin_computes_the_same_function(impl):
    ours, marian = tiny_pair(impl)
    ours.eval(), marian.eval()
    batch = random_labelled_batch()
    assert marian.model.encoder.embed_positions.weight.equal(marian_table(64, 32))  # Marian's own, not ours
    assert not marian.final_logits_bias.any()
    with torch.no_grad():
        a = ours(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
        b = marian(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"])
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=1e-5)
    # Marian's layout of the model dimension: the paper's dimension i is Marian's perm[i].
    perm = marian_permutation(32)
    torch.testing.assert_close(
        a.encoder_last_hidden_state, b.encoder_last_hidden_state[..., perm], atol=1e-5, rtol=1e-5
    )
    torch.testing.assert_close(a.loss, b.loss)


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_training_step_equals_marian(impl):
    """In training our model skips padding; loss and gradients must still be Marian's, and real-token logits too."""
    ours, marian = tiny_pair(impl)
    ours.train(), marian.train()
    batch = random_labelled_batch()
    a, b = ours(**batch), marian(**batch)
    scored = batch["labels"] != -100
    torch.testing.assert_close(a.logits[scored], b.logits[scored], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.loss, b.loss)
    a.loss.backward()
    b.loss.backward()
    # Marian's gradients, brought back into our layout of the model dimension.
    names = dict(ours.named_parameters())
    gradients = {name: p.grad for name, p in marian.named_parameters() if name in names}
    theirs = permute_state_dict(gradients, marian_permutation(ours.config.d_model))
    for name, parameter in names.items():
        expected = theirs[name]
        # Key biases get no gradient in exact arithmetic (softmax ignores a per-query constant): compare on the
        # scale of the whole layer, not of that (rounding-noise) gradient.
        scale = max(expected.abs().max().item(), theirs[name.replace("bias", "weight")].abs().max().item())
        assert (parameter.grad - expected).abs().max().item() <= 1e-5 * scale + 1e-8, name


def test_training_skips_padding_only_when_it_pays():
    ours, _ = tiny_pair()
    ours.train()
    batch = random_labelled_batch()
    unscored = batch["labels"] == -100
    assert not ours(**batch).logits[unscored].any()  # padded positions were not computed
    ours.eval()
    assert ours(**batch).logits[unscored].abs().sum() > 0  # evaluation computes every position
    ours.train()
    nearly_full = kit.collate([([5] * 11 + [EOS], [6] * 11 + [EOS])] * 3 + [([5] * 10 + [EOS], [6] * 10 + [EOS])])
    # Under 10% padding the gathers would cost what they save: every position is computed.
    assert ours(**nearly_full).logits[nearly_full["labels"] == -100].abs().sum() > 0


@pytest.mark.parametrize("num_beams", [1, 4])
def test_same_generated_tokens_as_marian(num_beams, copy_model):
    model, tokenizer = copy_model
    marian = kit.marian_twin(model).eval()
    source = tokenizer(sentences(12, seed=5), return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=14, num_beams=num_beams, do_sample=False)
    with torch.no_grad():
        ours_out = model.generate(**source, **kwargs)
        marian_out = marian.generate(**source, **kwargs)
    assert ours_out.tolist() == marian_out.tolist()
    assert len({tuple(row) for row in ours_out.tolist()}) > 6  # varied, non-degenerate outputs


def test_benchmark_sizes_are_the_configuration_presets():
    """The sizes the benchmark reports: ``base`` is the paper's base model (Table 3), ``small`` N=3, d_model=256,
    h=4, d_ff=1024; each with the paper's dropout unless overridden."""
    shapes = {
        size: (c.d_model, c.encoder_layers, c.decoder_layers, c.encoder_attention_heads, c.encoder_ffn_dim, c.dropout)
        for size in kit.SIZES
        for c in [kit.model_config(size, vocab_size=100)]
    }
    assert shapes == {
        "tiny": (32, 2, 2, 4, 64, 0.1),
        "small": (256, 3, 3, 4, 1024, 0.1),
        "base": (512, 6, 6, 8, 2048, 0.1),
    }
    assert kit.model_config("tiny", vocab_size=100, dropout=0.0).dropout == 0.0
