"""Attention maps: heatmaps of the encoder self-attention, decoder self-attention and cross-attention of a model.

::

    figures = plot_attention(model, tokenizer, "three hundred and twelve", output_dir="attention")
    [figure.path.name for figure in figures]  # encoder_self_layer1.png, ..., cross_layer6.png

Each PNG shows one layer of one kind of attention, one panel per head: row i of a panel is the distribution of
query token i's attention over the key tokens (it sums to 1). The decoder rows are labelled with the token the model
predicts at that position, so the cross-attention panels read "to produce this target token, the decoder looked at
these source tokens". Tokens are shown as text: byte-level BPE symbols are decoded, and a leading space is shown as
``▁``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tokenizers import decoders
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .atomic import replace_file
from .constants import ATTENTION_KINDS as KINDS  # the kinds of attention plotted, with their titles
from .extras import import_optional

AXIS_LABELS = {  # kind: (x, y), the axes' labels of its maps
    "encoder_self": ("source token (key)", "source token (query)"),
    "decoder_self": ("decoder input (key)", "predicted token (query)"),
    "cross": ("source token (key)", "predicted token (query)"),
}


@dataclass(frozen=True)
class Attention:
    """The attention weights of one sentence pair, per layer: ``[layers, heads, queries, keys]`` arrays."""

    source_tokens: list[str]
    """The source tokens, as displayed, ``</s>`` included."""
    decoder_input_tokens: list[str]
    """The decoder inputs: the start token, then the target shifted right."""
    output_tokens: list[str]
    """The target tokens predicted at each decoder position, ``</s>`` included."""
    encoder_self: np.ndarray
    decoder_self: np.ndarray
    cross: np.ndarray


@dataclass(frozen=True)
class AttentionFigure:
    """One PNG written by `plot_attention`: one layer of one kind of attention."""

    path: Path
    kind: str
    """A key of `KINDS`."""
    layer: int
    """The layer, counted from 1."""
    weights: np.ndarray
    """The weights plotted, ``[heads, queries, keys]``."""
    query_tokens: list[str]
    """Row labels."""
    key_tokens: list[str]
    """Column labels."""
    num_panels: int
    """Heatmap panels in the figure, one per head."""
    grid: tuple[int, int]
    """Rows and columns of panels."""
    size_px: tuple[int, int]
    """Width and height of the image, in pixels."""


def target_labels(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, target: str) -> torch.Tensor:
    """`target`'s token ids with the end token, ``[1, T]``, T at most the model's positions. A translation that ran to
    the position limit without an end token (a search stopped there) fits once the end token the tokenizer adds is
    dropped; a longer target is refused, as the decoder cannot read it."""
    labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"].to(model.device)
    limit = model.config.max_position_embeddings
    if labels.shape[1] == limit + 1 and labels[0, -1].item() == tokenizer.eos_token_id:
        labels = labels[:, :limit]
    if labels.shape[1] > limit:
        raise ValueError(
            f"target is {labels.shape[1]} tokens with its end token, more than the model's "
            f"{limit} positions (max_position_embeddings)"
        )
    return labels


def compute_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    source: str,
    target: str | None = None,
    *,
    max_new_tokens: int = 64,
) -> Attention:
    """The attention weights of `model` on `source` and its translation `target`.

    Without `target`, the model's greedy translation (at most `max_new_tokens` tokens) is used. The model runs in eval
    mode with the "eager" attention, the only one that returns weights; its attention implementation and training
    mode are restored afterwards.

    Raises:
        ValueError: If `source` or `target` is empty or blank.
    """
    if not source.strip():
        raise ValueError(f"source must be a non-blank sentence, got source={source!r}")
    if target is not None and not target.strip():
        raise ValueError(f"target must be a non-blank sentence or None, got target={target!r}")
    previous_implementation, was_training = model.config._attn_implementation, model.training
    model.set_attn_implementation("eager")
    model.eval()
    try:
        with torch.no_grad():
            inputs = tokenizer(source, return_tensors="pt").to(model.device)
            if target is None:
                generated = model.generate(**inputs, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)
                labels = generated[:, 1:]  # without the decoder start token
            else:
                labels = target_labels(model, tokenizer, target)
            decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)
            outputs = model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
    finally:
        model.set_attn_implementation(previous_implementation)
        model.train(was_training)

    def stacked(per_layer: Sequence[torch.Tensor]) -> np.ndarray:
        return torch.stack([layer[0] for layer in per_layer]).float().cpu().numpy()  # [layers, heads, queries, keys]

    return Attention(
        source_tokens=display_tokens(tokenizer, inputs["input_ids"][0].tolist()),
        decoder_input_tokens=display_tokens(tokenizer, decoder_input_ids[0].tolist()),
        output_tokens=display_tokens(tokenizer, labels[0].tolist()),
        encoder_self=stacked(outputs.encoder_attentions),
        decoder_self=stacked(outputs.decoder_attentions),
        cross=stacked(outputs.cross_attentions),
    )


def plot_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    source: str,
    target: str | None = None,
    *,
    output_dir: str | os.PathLike[str],
    layers: Sequence[int] | None = None,
    kinds: Sequence[str] = tuple(KINDS),
    max_new_tokens: int = 64,
    dpi: int = 100,
) -> list[AttentionFigure]:
    """Write PNG heatmaps of the attention of `model` on a sentence pair, one file per layer and kind.

    Args:
        model: An encoder-decoder model such as `VanillaTransformerForConditionalGeneration`.
        tokenizer: Its tokenizer.
        source: The source sentence.
        target: Its translation; ``None`` plots the model's own greedy translation.
        output_dir: Directory of the PNG files ``{kind}_layer{layer}.png``, created if needed.
        layers: Layers to plot, counted from 1; by default all.
        kinds: Kinds of attention to plot, keys of `KINDS`; by default all three.
        max_new_tokens: Length limit of the greedy translation.
        dpi: Resolution of the images.

    Returns:
        One `AttentionFigure` per file, in the order: kinds, then layers.

    Raises:
        ValueError: If `source` or `target` is blank, or a layer or kind does not exist.
    """
    unknown_kinds = [kind for kind in kinds if kind not in KINDS]
    if unknown_kinds:
        raise ValueError(f"kinds must be among {list(KINDS)}, got kinds={list(kinds)}")
    num_layers = {
        "encoder_self": model.config.encoder_layers,
        "decoder_self": model.config.decoder_layers,
        "cross": model.config.decoder_layers,
    }
    for layer in layers or ():
        if not all(1 <= layer <= num_layers[kind] for kind in kinds):
            raise ValueError(
                f"layers are counted from 1; the model has {model.config.encoder_layers} encoder and "
                f"{model.config.decoder_layers} decoder layers, got layers={list(layers)}"
            )
    layers = list(dict.fromkeys(layers)) if layers else None  # a layer named twice is one file, drawn once
    kinds = list(dict.fromkeys(kinds))
    attention = compute_attention(model, tokenizer, source, target, max_new_tokens=max_new_tokens)
    axes_tokens = {  # kind: (query tokens, key tokens)
        "encoder_self": (attention.source_tokens, attention.source_tokens),
        "decoder_self": (attention.output_tokens, attention.decoder_input_tokens),
        "cross": (attention.output_tokens, attention.source_tokens),
    }
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    figures = []
    for kind in kinds:
        query_tokens, key_tokens = axes_tokens[kind]
        for layer in layers or range(1, num_layers[kind] + 1):
            weights = getattr(attention, kind)[layer - 1]
            path = output_dir / f"{kind}_layer{layer}.png"
            figures.append(_plot_heads(weights, query_tokens, key_tokens, kind, layer, path, dpi))
    return figures


def _plot_heads(
    weights: np.ndarray,
    query_tokens: list[str],
    key_tokens: list[str],
    kind: str,
    layer: int,
    path: Path,
    dpi: int,
) -> AttentionFigure:
    """One figure, one panel per head, saved to `path`."""
    num_heads = weights.shape[0]
    columns = min(num_heads, 4)
    rows = math.ceil(num_heads / columns)
    panel_width = max(2.5, 0.22 * len(key_tokens) + 1.2)
    panel_height = max(2.5, 0.22 * len(query_tokens) + 1.0)
    Figure = import_optional("matplotlib.figure", "plots", "drawing attention maps").Figure
    figure = Figure(figsize=(columns * panel_width + 1.0, rows * panel_height + 0.6), dpi=dpi, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    font_size = 8 if max(len(query_tokens), len(key_tokens)) <= 30 else 6
    x_label, y_label = AXIS_LABELS[kind]
    for head, ax in enumerate(axes):
        if head >= num_heads:
            ax.remove()
            continue
        image = draw_attention_map(ax, weights[head], query_tokens, key_tokens, font_size=font_size)
        ax.set_title(f"head {head + 1}", fontsize=font_size + 1)
        if head // columns == rows - 1 or head + columns >= num_heads:
            ax.set_xlabel(x_label, fontsize=font_size)
        if head % columns == 0:
            ax.set_ylabel(y_label, fontsize=font_size)
    figure.colorbar(image, ax=[ax for ax in axes[:num_heads]], shrink=0.8, label="attention weight")
    figure.suptitle(f"{KINDS[kind]}, layer {layer}")
    replace_file(path, lambda temporary: figure.savefig(temporary, format="png"), what="attention map")
    width, height = figure.canvas.get_width_height()
    return AttentionFigure(
        path=path,
        kind=kind,
        layer=layer,
        weights=weights,
        query_tokens=query_tokens,
        key_tokens=key_tokens,
        num_panels=sum(1 for ax in figure.axes if ax.images),
        grid=(rows, columns),
        size_px=(width, height),
    )


def draw_attention_map(
    ax,
    weights: np.ndarray,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    font_size: float = 8,
    cmap: str = "viridis",
    aspect: str = "auto",
):
    """One head's map ``weights [queries, keys]`` on the matplotlib axes `ax`, weights 0 to 1, one cell per pair:
    the query tokens label the rows, the key tokens the columns. A token of one character (``-``, ``,``) is written
    larger, and as a column label upright where the others are turned a quarter, so that punctuation reads as
    itself. Returns the image (for a colour bar)."""
    image = ax.imshow(weights, vmin=0.0, vmax=1.0, cmap=cmap, aspect=aspect, interpolation="nearest")
    ax.set_xticks(range(len(key_tokens)), key_tokens, fontsize=font_size, rotation=90)
    ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=font_size)
    for label in (*ax.get_xticklabels(), *ax.get_yticklabels()):
        if len(label.get_text()) == 1:
            label.set(rotation=0, fontsize=font_size + 4)
    return image


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-symbol map, which byte-level BPE uses to show every byte as a printable symbol."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_values, symbols = list(printable), list(printable)
    for byte in range(256):
        if byte not in printable:
            byte_values.append(byte)
            symbols.append(256 + len(symbols) - len(printable))
    return {chr(symbol): byte for byte, symbol in zip(byte_values, symbols, strict=True)}


_BYTE_DECODER = _byte_decoder()


def display_tokens(tokenizer: PreTrainedTokenizerBase, token_ids: Sequence[int]) -> list[str]:
    """Tokens as readable text, for axis labels.

    With a byte-level BPE tokenizer, each token's symbols are decoded to the bytes they stand for and then to text,
    so ``"Ġhundred"`` shows as ``"▁hundred"`` (a leading space as ``▁``) and ``"Ã¼"`` as ``"ü"``; a token holding part
    of a multi-byte character shows its bytes escaped (``"\\xc3"``). Special tokens and the tokens of other
    tokenizers are shown as they are. Control characters are escaped.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    byte_level = backend is not None and isinstance(backend.decoder, decoders.ByteLevel)
    special = set(tokenizer.all_special_tokens)
    shown = []
    for token in tokenizer.convert_ids_to_tokens(list(token_ids)):
        if byte_level and token not in special and all(symbol in _BYTE_DECODER for symbol in token):
            token = bytes(_BYTE_DECODER[symbol] for symbol in token).decode("utf-8", errors="backslashreplace")
        token = token.replace(" ", "▁")
        shown.append("".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in token))
    return shown


__all__ = [
    "AXIS_LABELS",
    "KINDS",
    "Attention",
    "AttentionFigure",
    "compute_attention",
    "display_tokens",
    "draw_attention_map",
    "plot_attention",
]
