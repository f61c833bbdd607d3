"""The paper's recipe checked where it acts, not as configuration values: residual dropout (section 5.4), Adam's
betas and epsilon (5.3) and label smoothing (5.4) as `train` uses them, attention biases (3.2.2), and the parameter
counts of Table 3. Each check is also run on a deliberately broken variant, which it must reject."""

import pytest
import torch
from tiny_model import tiny_config
from torch import nn
from torch.nn import functional as F
from training_helpers import tiny_run

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import TokenCorpus
from vanilla_transformer.modeling_vanilla_transformer import (
    VanillaTransformerDecoderLayer,
    VanillaTransformerEncoderLayer,
    _PostNormLayer,
    _TransformerStack,
)
from vanilla_transformer.training import train
from vanilla_transformer.training.tracking import read_metrics

# --------------------------------------------------------------------------------------------------------------------
# 5.4 Residual dropout
# --------------------------------------------------------------------------------------------------------------------

P_DROP = 0.5


def dropout_model() -> VanillaTransformerForConditionalGeneration:
    """A tiny model with P_drop = 0.5 (no attention or activation dropout) and random LayerNorm parameters."""
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(30, dropout=P_DROP))
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.normal_(1.0, 0.5)
                module.bias.normal_(0.0, 0.5)
    return model.train()


SOURCE, TARGET = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])


def outputs_when_everything_is_dropped(model, monkeypatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder and decoder outputs when every dropout of rate P_drop drops all of its input."""
    with monkeypatch.context() as patch:
        patch.setattr(nn.Dropout, "forward", lambda self, x: torch.zeros_like(x) if self.p == P_DROP else x)
        encoder = model.model.encoder(input_ids=SOURCE).last_hidden_state
        decoder = model.model.decoder(input_ids=TARGET, encoder_hidden_states=encoder).last_hidden_state
    return encoder, decoder


def expected_when_everything_is_dropped(model) -> tuple[torch.Tensor, torch.Tensor]:
    """By hand. The embedding + position sums are dropped: each stack starts from zeros. Every sublayer output is
    dropped before the residual addition, so each sublayer leaves only its LayerNorm: x <- LayerNorm(x + 0)."""
    encoder = torch.zeros(1, SOURCE.shape[1], model.config.d_model)
    for layer in model.model.encoder.layers:
        encoder = layer.final_layer_norm(layer.self_attn_layer_norm(encoder))
    decoder = torch.zeros(1, TARGET.shape[1], model.config.d_model)
    for layer in model.model.decoder.layers:
        decoder = layer.final_layer_norm(layer.encoder_attn_layer_norm(layer.self_attn_layer_norm(decoder)))
    return encoder, decoder


def dropout_is_where_the_paper_puts_it(model, monkeypatch) -> bool:
    """Any dropout missing from a sublayer output or an embedding sum lets that term through, and the outputs
    differ from the hand computation (a dropout after the residual addition would too)."""
    outputs = outputs_when_everything_is_dropped(model, monkeypatch)
    expected = expected_when_everything_is_dropped(model)
    return all(torch.allclose(output, want, atol=1e-5) for output, want in zip(outputs, expected, strict=True))


def test_dropout_is_on_every_sublayer_output_and_on_the_embedding_sums(monkeypatch):
    model = dropout_model()
    assert dropout_is_where_the_paper_puts_it(model, monkeypatch)
    # And the real dropout is live in training mode, off in eval mode.
    train_logits = model(input_ids=SOURCE, decoder_input_ids=TARGET).logits
    assert not torch.equal(train_logits, model.eval()(input_ids=SOURCE, decoder_input_ids=TARGET).logits)


def ff_block_without_dropout(self, x):
    return self.fc2(self.activation_dropout(self.activation_fn(self.fc1(x))))


def embed_without_dropout(self, input_ids, inputs_embeds, name, offset=0):
    inputs_embeds = self.embed_tokens(input_ids)
    positions = self.embed_positions(inputs_embeds.shape[1], offset)
    return inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype)


def sa_block_without_dropout(self, x, mask, **kwargs):
    return self.self_attn(x, attention_mask=mask, **kwargs)[0]


def mha_block_without_dropout(self, x, memory, memory_mask, cache, **kwargs):
    return self.encoder_attn(x, attention_mask=memory_mask, key_value_states=memory, cache=cache, **kwargs)[0]


def dropout_after_the_residual_addition(self, x, mask, **kwargs):
    """What a wrong placement computes: LayerNorm(Dropout(x + Sublayer(x))) instead of LayerNorm(x + Dropout(...))."""
    return self.dropout(x + self.self_attn(x, attention_mask=mask, **kwargs)[0]) - x


@pytest.mark.parametrize(
    "owner, name, broken",
    [(_PostNormLayer, "_ff_block", ff_block_without_dropout),
     (_TransformerStack, "embed", embed_without_dropout),
     (VanillaTransformerEncoderLayer, "_sa_block", sa_block_without_dropout),
     (VanillaTransformerDecoderLayer, "_mha_block", mha_block_without_dropout),
     (VanillaTransformerEncoderLayer, "_sa_block", dropout_after_the_residual_addition)],
)  # fmt: skip
def test_a_missing_or_misplaced_dropout_fails_the_check(monkeypatch, owner, name, broken):
    """A copy of the model with one dropout removed (FFN output, embedding sum, self-attention and cross-attention
    outputs) or moved after the residual addition must fail the check above."""
    model = dropout_model()
    monkeypatch.setattr(owner, name, broken)
    assert not dropout_is_where_the_paper_puts_it(model, monkeypatch)


# --------------------------------------------------------------------------------------------------------------------
# 5.3 Adam and 5.4 label smoothing, as `train` applies them
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory) -> dict:
    """A tiny `train` run of 3 steps, recording every optimizer step (parameters before and after, gradients,
    learning rate), the first training batch and the logits the model gave for it."""
    record = {"steps": [], "batches": [], "logits": []}

    class RecordingAdam(torch.optim.Adam):
        def step(self, closure=None):
            params = [p for group in self.param_groups for p in group["params"]]
            before = [p.detach().clone() for p in params]
            grads = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params]
            lr = self.param_groups[0]["lr"]
            result = super().step(closure)
            record["steps"].append((before, grads, lr, [p.detach().clone() for p in params]))
            return result

    collate, forward = TokenCorpus.collate, VanillaTransformerForConditionalGeneration.forward

    def recording_collate(self, indices, pad_token_id):  # training batches come from the token cache
        batch = collate(self, indices, pad_token_id)
        record["batches"].append(batch)
        return batch

    def recording_forward(self, *args, **kwargs):
        outputs = forward(self, *args, **kwargs)
        if self.training:
            record["logits"].append(outputs.logits.detach().clone())
        return outputs

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch.optim, "Adam", RecordingAdam)
        patch.setattr(TokenCorpus, "collate", recording_collate)
        patch.setattr(VanillaTransformerForConditionalGeneration, "forward", recording_forward)
        output_dir = tmp_path_factory.mktemp("recorded")
        train(tiny_run(output_dir, "--max-steps", "3", "--grad-accum", "1", "--eval-every", "100"))
    record["metrics"] = [row for row in read_metrics(output_dir / "metrics.jsonl") if "train_loss" in row]
    return record


def adam_by_hand(steps, beta1: float, beta2: float, eps: float) -> list[list[torch.Tensor]]:
    """The parameters after each step of Adam (Kingma & Ba, algorithm 1), in float64, from the recorded gradients."""
    first, second, after = None, None, []
    for t, (before, grads, lr, _) in enumerate(steps, start=1):
        grads = [g.double() for g in grads]
        first = [beta1 * m + (1 - beta1) * g for m, g in zip(first or [0.0] * len(grads), grads, strict=True)]
        second = [beta2 * v + (1 - beta2) * g * g for v, g in zip(second or [0.0] * len(grads), grads, strict=True)]
        after.append([
            p.double() - lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps)
            for p, m, v in zip(before, first, second, strict=True)
        ])  # fmt: skip
    return after


def largest_difference(steps, expected) -> float:
    return max(
        (want - got.double()).abs().max().item()
        for (_, _, _, after), want_step in zip(steps, expected, strict=True)
        for got, want in zip(after, want_step, strict=True)
    )


def test_train_steps_with_adam_of_the_paper(recorded_run):
    """Section 5.3: beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, checked on the parameter updates `train` made, against
    a hand-written Adam; Adam's defaults (0.9, 0.999, 1e-8) must not fit them."""
    steps = recorded_run["steps"]
    assert len(steps) == 3
    assert largest_difference(steps, adam_by_hand(steps, 0.9, 0.98, 1e-9)) < 1e-6
    assert largest_difference(steps, adam_by_hand(steps, 0.9, 0.999, 1e-8)) > 1e-4
    # Some gradients are as small as 1e-10 here, so epsilon's tenfold neighbours are told apart too.
    assert largest_difference(steps, adam_by_hand(steps, 0.9, 0.98, 1e-8)) > 1e-4
    assert largest_difference(steps, adam_by_hand(steps, 0.9, 0.98, 1e-10)) > 1e-4
    assert largest_difference(steps, adam_by_hand(steps, 0.8, 0.98, 1e-9)) > 1e-4


def test_train_minimizes_the_label_smoothed_cross_entropy(recorded_run):
    """Section 5.4, epsilon_ls = 0.1: the logged loss of step 1 is the smoothed cross-entropy of the first batch,
    computed here by hand: the target distribution puts 1 - eps on the reference token and eps spread evenly over
    the vocabulary; the loss is its cross-entropy with the model's distribution, averaged over target tokens."""
    batch, logits = recorded_run["batches"][0], recorded_run["logits"][0]
    labels = batch["labels"]
    scored = labels != -100
    log_probs = F.log_softmax(logits.double(), dim=-1)[scored]  # [N, V]
    reference = labels[scored]
    vocab_size, eps = log_probs.shape[-1], 0.1
    target = torch.full_like(log_probs, eps / vocab_size)
    target[torch.arange(len(reference)), reference] += 1 - eps
    smoothed = -(target * log_probs).sum(-1).mean().item()
    unsmoothed = -log_probs[torch.arange(len(reference)), reference].mean().item()
    logged = recorded_run["metrics"][0]["train_loss"]
    assert recorded_run["metrics"][0]["step"] == 1
    assert logged == pytest.approx(smoothed, rel=1e-5)
    assert logged != pytest.approx(unsmoothed, rel=1e-4)  # near-uniform predictions: close, but told apart


# --------------------------------------------------------------------------------------------------------------------
# 3.2.2 Attention projections, and Table 3's parameter counts
# --------------------------------------------------------------------------------------------------------------------


def count_by_formula(vocab_size, d, d_ff, encoder_layers, decoder_layers, attention_bias=True) -> int:
    """Parameters of the paper's model: a shared embedding (tied to the output projection, no output bias); per
    attention 4 d x d projections (plus 4 d biases); per FFN W1, b1, W2, b2; per LayerNorm a gain and a bias; no
    positional parameters (sinusoids are computed) and no final LayerNorm."""
    attention = 4 * d * d + (4 * d if attention_bias else 0)
    ffn = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    return vocab_size * d + encoder_layers * encoder_layer + decoder_layers * decoder_layer


def parameter_count(config) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in VanillaTransformerForConditionalGeneration(config).parameters())


@pytest.mark.parametrize("preset, millions", [("base", 63.1), ("big", 214.2)])
def test_parameter_counts_of_table_3(preset, millions):
    """Table 3 lists 65M and 213M with the paper's vocabulary; with a 37,000-token vocabulary the formula gives
    63.1M and 214.2M (the paper's count of the big model came from its own vocabulary and rounding)."""
    config = VanillaTransformerConfig.from_preset(preset, vocab_size=37_000)
    expected = count_by_formula(37_000, config.d_model, config.encoder_ffn_dim, 6, 6)
    assert parameter_count(config) == expected
    assert round(expected / 1e6, 1) == millions
    no_bias = VanillaTransformerConfig.from_preset(preset, vocab_size=37_000, attention_bias=False)
    assert parameter_count(no_bias) == count_by_formula(
        37_000, config.d_model, config.encoder_ffn_dim, 6, 6, attention_bias=False
    )


def test_attention_without_biases_is_the_papers_equation(tmp_path):
    """With attention_bias=False, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) and Concat(heads) W^O have no
    affine terms: zero queries, keys and values give zero; with biases (the default, as in Marian) they do not."""
    outputs = {}
    for bias in (False, True):
        torch.manual_seed(0)
        model = VanillaTransformerForConditionalGeneration(tiny_config(30, attention_bias=bias)).eval()
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("proj.bias"):
                    parameter.normal_()
        attention = model.model.encoder.layers[0].self_attn
        outputs[bias] = attention(torch.zeros(1, 4, 32))[0].abs().max().item()
        names = [name for name, _ in model.named_parameters() if "proj.bias" in name]
        assert len(names) == (0 if not bias else 4 * (2 + 2 * 2))  # 2 encoder layers x 1 + 2 decoder layers x 2
    assert outputs[False] == 0 and outputs[True] > 0
    model.config.attention_bias = False  # a saved model without biases loads without them, and computes the same
    without = VanillaTransformerForConditionalGeneration(model.config).eval()
    without.save_pretrained(tmp_path)
    loaded, info = VanillaTransformerForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)
    assert not loaded.config.attention_bias and not info["missing_keys"] and not info["unexpected_keys"]
    ids = torch.tensor([[5, 6, 3]])
    torch.testing.assert_close(
        loaded(input_ids=ids, decoder_input_ids=ids).logits, without(input_ids=ids, decoder_input_ids=ids).logits
    )
    assert VanillaTransformerConfig().attention_bias and VanillaTransformerConfig.from_preset("big").attention_bias


def test_a_model_without_attention_biases_exports_to_marian_exactly():
    """MarianMT's projections always have biases: the export gives it zero ones, which compute the same."""
    from vanilla_transformer.export.marian import vanilla_to_marian

    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(tiny_config(30, attention_bias=False)).eval()
    marian = vanilla_to_marian(model)
    inputs = {
        "input_ids": torch.tensor([[5, 6, 7, 3], [8, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]]),
    }
    inputs["decoder_input_ids"] = torch.tensor([[2, 9, 10], [2, 11, 12]])
    with torch.no_grad():
        torch.testing.assert_close(marian(**inputs).logits, model(**inputs).logits, atol=1e-5, rtol=0)
