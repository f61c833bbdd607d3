"""Attention maps: the weights plotted are the model's (softmax rows, causal decoder), the PNGs are valid with one
panel per head, tokens are readable, and the model's attention implementation is restored."""

import re

import matplotlib.image
import numpy as np
import pytest
import torch
from tiny_model import SPLITS, load_script, new_tiny_model, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.visualization import compute_attention, display_tokens, plot_attention
from vanilla_transformer.written import MANIFEST

SOURCE, TARGET = SPLITS.valid[0]  # "four hundred and seventy-nine", "vierhundertneunundsiebzig"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model_dir(tiny_model_dir)


def expected_tokens(tokenizer, ids):
    """For ASCII text, byte-level BPE symbols are the characters themselves, with "Ġ" for a space."""
    return [token.replace("Ġ", "▁") for token in tokenizer.convert_ids_to_tokens(ids)]


def test_plots_every_layer_and_kind_with_one_panel_per_head(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    model.train()
    assert model.config._attn_implementation == "sdpa"

    figures = plot_attention(model, tokenizer, SOURCE, TARGET, output_dir=tmp_path / "maps")

    assert model.config._attn_implementation == "sdpa" and model.training  # restored
    model.eval()
    layers = model.config.encoder_layers
    assert [(figure.kind, figure.layer) for figure in figures] == [
        (kind, layer) for kind in ("encoder_self", "decoder_self", "cross") for layer in range(1, layers + 1)
    ]
    assert sorted(path.name for path in (tmp_path / "maps").iterdir()) == sorted(f.path.name for f in figures)

    source_ids = tokenizer(SOURCE)["input_ids"]
    labels = tokenizer(text_target=TARGET)["input_ids"]
    decoder_inputs = [tokenizer.bos_token_id, *labels[:-1]]
    source_tokens = expected_tokens(tokenizer, source_ids)
    assert "".join(source_tokens).replace("▁", " ") == SOURCE + "</s>"
    axes = {  # kind: (rows, columns)
        "encoder_self": (source_tokens, source_tokens),
        "decoder_self": (expected_tokens(tokenizer, labels), expected_tokens(tokenizer, decoder_inputs)),
        "cross": (expected_tokens(tokenizer, labels), source_tokens),
    }

    heads = model.config.encoder_attention_heads
    for figure in figures:
        assert (figure.query_tokens, figure.key_tokens) == axes[figure.kind]
        assert figure.weights.shape == (heads, len(figure.query_tokens), len(figure.key_tokens))
        np.testing.assert_allclose(figure.weights.sum(axis=-1), 1.0, atol=1e-5)  # softmax over the keys
        if figure.kind == "decoder_self":  # a position never attends to later ones
            assert np.all(np.triu(figure.weights, k=1) == 0)
        assert (figure.num_panels, figure.grid) == (heads, (1, heads))

        data = figure.path.read_bytes()
        assert data[:8] == PNG_MAGIC
        image = matplotlib.image.imread(figure.path)
        assert image.shape[:2] == figure.size_px[::-1] and image.shape[2] in (3, 4)
        assert image[..., :3].std() > 0.05  # not blank

    # The plotted weights are the model's own, for the last layer of cross-attention.
    with torch.no_grad():
        model.set_attn_implementation("eager")
        outputs = model(
            input_ids=torch.tensor([source_ids]),
            decoder_input_ids=torch.tensor([decoder_inputs]),
            output_attentions=True,
        )
        model.set_attn_implementation("sdpa")
    np.testing.assert_allclose(figures[-1].weights, outputs.cross_attentions[-1][0].numpy(), atol=1e-6)


def test_plots_the_greedy_translation_without_a_target(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    generated = model.generate(**tokenizer(SOURCE, return_tensors="pt"), num_beams=1, max_new_tokens=24)[0, 1:]

    figures = plot_attention(
        model, tokenizer, SOURCE, output_dir=tmp_path, kinds=["cross"], layers=[2], max_new_tokens=24
    )

    assert [figure.path.name for figure in figures] == ["cross_layer2.png"]
    assert figures[0].query_tokens == expected_tokens(tokenizer, generated.tolist())


def test_panel_grid_for_heads_not_a_multiple_of_four(model_and_tokenizer, tmp_path):
    _, tokenizer = model_and_tokenizer
    torch.manual_seed(0)
    config = tiny_config(len(tokenizer), d_model=24, encoder_attention_heads=6, decoder_attention_heads=6)
    model = VanillaTransformerForConditionalGeneration(config).eval()

    (figure,) = plot_attention(model, tokenizer, SOURCE, TARGET, output_dir=tmp_path, kinds=["cross"], layers=[1])

    assert (figure.num_panels, figure.grid) == (6, (2, 4))
    assert matplotlib.image.imread(figure.path).shape[:2] == figure.size_px[::-1]


def test_display_tokens_decodes_bytes(model_and_tokenizer):
    _, tokenizer = model_and_tokenizer
    text = "fünf € zwölf"  # "€" (3 bytes) never occurs in the training data, so its bytes stay separate tokens
    ids = tokenizer(text)["input_ids"]

    shown = display_tokens(tokenizer, ids)

    assert shown[-1] == "</s>"
    euro = shown.index("\\xe2")
    assert shown[euro : euro + 3] == ["\\xe2", "\\x82", "\\xac"]
    assert any("ü" in token for token in shown)  # "ü", frequent in the training data, is merged into tokens
    assert not any("Ġ" in token or "Ã" in token for token in shown)

    def to_bytes(token):  # undo the display: "▁" is a space, "\\xNN" a byte
        escaped = token.replace("▁", " ").encode()
        return re.sub(rb"\\x([0-9a-f]{2})", lambda match: bytes.fromhex(match.group(1).decode()), escaped)

    assert b"".join(to_bytes(token) for token in shown[:-1]).decode() == text


def test_bad_inputs_raise(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match="source must be a non-blank sentence, got source='  '"):
        plot_attention(model, tokenizer, "  ", output_dir=tmp_path)
    with pytest.raises(ValueError, match=r"got layers=\[3\]"):
        plot_attention(model, tokenizer, SOURCE, output_dir=tmp_path, layers=[3])
    with pytest.raises(ValueError, match=r"got kinds=\['self'\]"):
        plot_attention(model, tokenizer, SOURCE, output_dir=tmp_path, kinds=["self"])
    assert not any(tmp_path.iterdir())


def test_script_writes_the_chosen_maps(tiny_model_dir, tmp_path):
    exit_code = load_script("attention").main(
        [str(tiny_model_dir), SOURCE, "--target", TARGET, "--layers", "1", "--output-dir", str(tmp_path)]
    )
    assert exit_code == 0
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        MANIFEST,  # the list of what the command wrote there: what it may replace when run again
        "cross_layer1.png",
        "decoder_self_layer1.png",
        "encoder_self_layer1.png",
    ]
    assert all(path.read_bytes()[:8] == PNG_MAGIC for path in tmp_path.glob("*.png"))


def test_a_translation_cut_at_the_position_limit_is_drawn(model_and_tokenizer):
    """A search that ran to the model's last position has no end token: its text, tokenized again, is one token over
    the limit with the end token the tokenizer adds, which is dropped (the demo's maps used to stop with the model's
    "exceeds max_position_embeddings"); a target that cannot fit is refused by name."""
    trained, tokenizer = model_and_tokenizer
    target = " ".join([TARGET] * 3)
    length = len(tokenizer(text_target=target)["input_ids"])  # the end token included
    assert len(tokenizer(SOURCE)["input_ids"]) < length  # the source fits
    model = new_tiny_model(vocab_size=trained.config.vocab_size, max_position_embeddings=length - 1)
    attention = compute_attention(model, tokenizer, SOURCE, target)
    assert len(attention.output_tokens) == length - 1
    assert attention.cross.shape[-2] == length - 1  # one row per decoder position
    with pytest.raises(ValueError, match=r"more than the model's .* positions \(max_position_embeddings\)"):
        compute_attention(model, tokenizer, SOURCE, f"{target} {TARGET}")


def test_a_layer_named_twice_is_drawn_and_counted_once(tiny_model_dir, tmp_path, caplog):
    """Issue 67: ``--layers 1 1 1`` drew each map three times over and logged 'wrote 9 files' for the 3 it wrote."""
    caplog.set_level("INFO")
    output = tmp_path / "maps"
    exit_code = load_script("attention").main(
        [str(tiny_model_dir), SOURCE, "--target", TARGET, "--layers", "1", "1", "1", "--output-dir", str(output)]
    )
    assert exit_code == 0
    pngs = sorted(path.name for path in output.glob("*.png"))
    assert len(pngs) == 3 and f"wrote 3 files to {output}" in caplog.messages, caplog.messages
