"""HTML and images for the demo's views, shared by the browser app and the notebook helpers.

An attention map is an HTML table, one cell per (query, key) pair shaded by its weight, with the tokens as row and
column headers. The table carries its data: ``data-kind``, ``data-layer`` and ``data-head`` (counted from 1),
``data-shape`` (``[queries, keys]``) and ``data-weights`` (the rows as JSON), so that a reader or a test can check
what is drawn against the model.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

import numpy as np
from transformers import PreTrainedTokenizerBase

from ..generation_vanilla_transformer import gnmt_length_penalty
from ..serving.search import BeamTrace
from ..visualization import KINDS, Attention, display_tokens

STYLE = """<style>
.vt-maps {display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; font-family: system-ui, sans-serif;}
.vt-map {border-collapse: collapse; font-size: 14px; font-family: system-ui, sans-serif;}
.vt-map td {width: 32px !important; height: 32px !important; padding: 0 !important; border: 1px solid #fff !important;}
.vt-scale {display: flex; align-items: center; gap: 6px; font-size: 13px; font-family: system-ui, sans-serif;}
.vt-scale .vt-bar {width: 240px; height: 16px; border: 1px solid #999;}
.vt-map th {font-weight: normal; padding: 0 3px !important; white-space: nowrap; border: none !important;}
.vt-map thead th {writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;}
.vt-map tbody th {text-align: right;}
.vt-map caption {font-weight: bold; padding: 4px; text-align: left;}
.vt-beam {border-collapse: collapse; font-family: system-ui, sans-serif; font-size: 13px;}
.vt-beam td, .vt-beam th {border: 1px solid #ccc; padding: 2px 6px; text-align: left;}
.vt-beam .vt-winner {background: #d8f3dc; font-weight: bold;}
</style>"""
"""The CSS of the tables; system fonts only (the demo works offline)."""

AXES = {  # kind: (query tokens, key tokens) fields of Attention
    "encoder_self": ("source_tokens", "source_tokens"),
    "decoder_self": ("output_tokens", "decoder_input_tokens"),
    "cross": ("output_tokens", "source_tokens"),
}

CAPTIONS = {
    "encoder_self": "Encoder self-attention (source × source)",
    "decoder_self": "Decoder masked self-attention (target × decoder input): nothing above the diagonal",
    "cross": "Encoder–decoder attention (target × source): the alignment",
}


def shade(weight: float) -> str:
    """White (0) to dark blue (1), as a CSS colour; the text colour flips to white on dark cells."""
    weight = min(max(float(weight), 0.0), 1.0)
    red, green, blue = (round(255 + (end - 255) * weight) for end in (8, 48, 107))
    return f"rgb({red},{green},{blue})"


def colour_scale_html(steps: int = 10) -> str:
    """The maps' colour scale: a bar from weight 0 to 1 in the shades of `shade`, with its ends and middle named."""
    stops = ", ".join(shade(i / steps) for i in range(steps + 1))
    return (
        f'<div class="vt-scale" data-low="{shade(0)}" data-high="{shade(1)}"><span>attention weight: 0</span>'
        f'<div class="vt-bar" style="background: linear-gradient(to right, {stops})"></div>'
        f"<span>1</span></div>"
    )


def attention_map_html(
    weights: np.ndarray, query_tokens: Sequence[str], key_tokens: Sequence[str], *, kind: str, layer: int, head: int
) -> str:
    """One head's map ``weights [queries, keys]`` as a table; rows are queries (what attends), columns keys."""
    if weights.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(f"weights {weights.shape} do not match {len(query_tokens)} × {len(key_tokens)} tokens")
    header = "".join(f"<th>{html.escape(token)}</th>" for token in key_tokens)
    rows = []
    for token, row in zip(query_tokens, weights, strict=True):
        cells = "".join(f'<td style="background:{shade(w)}" title="{w:.3f}"></td>' for w in row)
        rows.append(f"<tr><th>{html.escape(token)}</th>{cells}</tr>")
    data = json.dumps([[round(float(w), 4) for w in row] for row in weights])
    return (
        f'<table class="vt-map" data-kind="{kind}" data-layer="{layer}" data-head="{head}" '
        f'data-shape="{json.dumps(list(weights.shape))}" data-weights="{html.escape(data)}">'
        f"<caption>{html.escape(CAPTIONS[kind])}, layer {layer}, head {head}</caption>"
        f"<thead><tr><th></th>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def attention_html(
    attention: Attention, layer: int, head: int | None = None, kinds: Sequence[str] = tuple(KINDS)
) -> str:
    """The maps of one layer (counted from 1) for each kind: one head, or with `head` None all heads side by side."""
    parts = []
    for kind in kinds:
        weights = getattr(attention, kind)  # [layers, heads, queries, keys]
        if not 1 <= layer <= weights.shape[0]:
            parts.append(f"<p>{html.escape(KINDS[kind])}: the model has {weights.shape[0]} layers.</p>")
            continue
        heads = range(1, weights.shape[1] + 1) if head is None else [head]
        query_field, key_field = AXES[kind]
        maps = []
        for number in heads:
            if not 1 <= number <= weights.shape[1]:
                maps.append(f"<p>{html.escape(KINDS[kind])}: the model has {weights.shape[1]} heads.</p>")
                continue
            maps.append(
                attention_map_html(
                    weights[layer - 1, number - 1],
                    getattr(attention, query_field),
                    getattr(attention, key_field),
                    kind=kind,
                    layer=layer,
                    head=number,
                )
            )
        parts.append(f'<div class="vt-maps" data-kind="{kind}">{"".join(maps)}</div>')
    return f'{STYLE}{colour_scale_html()}<div class="vt-maps">{"".join(parts)}</div>'


def beam_html(trace: BeamTrace, tokenizer: PreTrainedTokenizerBase, length_penalty: float) -> str:
    """The search step by step: after each step, the live hypotheses (log P) and the finished ones so far (log P,
    lp(|Y|), score), the winner marked; then which hypothesis wins and whether the length penalty decided it."""

    def shown(tokens: Sequence[int]) -> str:
        return html.escape(" ".join(display_tokens(tokenizer, tokens[1:])))  # without the decoder start token

    rows = []
    for step in trace.steps:
        live = "<br>".join(f"{shown(tokens)} <i>({log_prob:.3f})</i>" for tokens, log_prob in step.live)
        finished = "<br>".join(
            f'<span class="{"vt-winner" if tokens == trace.best else ""}">{shown(tokens)}</span> '
            f"<i>(log P {log_prob:.3f} / lp {gnmt_length_penalty(len(tokens) - 1, length_penalty):.3f} = "
            f"{score:.3f})</i>"
            for tokens, log_prob, score in step.finished
        )
        rows.append(f'<tr data-step="{step.step}"><td>{step.step}</td><td>{live}</td><td>{finished}</td></tr>')
    return (
        f'{STYLE}<p class="vt-verdict">{html.escape(beam_verdict(trace, tokenizer, length_penalty))}</p>'
        '<table class="vt-beam"><thead><tr><th>step</th><th>live hypotheses (log P), best first</th>'
        "<th>finished hypotheses (GNMT score = log P / lp), best first</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def beam_verdict(trace: BeamTrace, tokenizer: PreTrainedTokenizerBase, length_penalty: float) -> str:
    """Why the winner wins: the best GNMT score among the finished hypotheses, and whether ranking by log P alone
    (no length penalty) would have chosen another."""
    finished = trace.steps[-1].finished
    if not finished:
        return f"The search stopped at the maximum length with no finished hypothesis; the output is {trace.text!r}."
    tokens, log_prob, score = finished[0]
    verdict = (
        f"After {len(trace.steps)} steps, {trace.text!r} wins with the best score log P / lp = {log_prob:.3f} / "
        f"{gnmt_length_penalty(len(tokens) - 1, length_penalty):.3f} = {score:.3f}, lp(|Y|) = ((5 + |Y|) / 6)^α, "
        f"α = {length_penalty:g}."
    )
    by_log_prob = max(finished, key=lambda hypothesis: hypothesis[1])
    if by_log_prob[0] != tokens:
        other = tokenizer.decode(by_log_prob[0], skip_special_tokens=True)
        verdict += (
            f" The length penalty decided it: {other!r} ({len(by_log_prob[0]) - 1} tokens) has the higher log P, "
            f"{by_log_prob[1]:.3f}, but the penalty favours the longer output."
            if len(by_log_prob[0]) < len(tokens)
            else f" The length penalty decided it: {other!r} has the higher log P, {by_log_prob[1]:.3f}."
        )
    else:
        verdict += " It also has the highest log P: the length penalty did not change the winner."
    return verdict


def heatmap_image(values: np.ndarray, *, signed: bool = False, scale: int = 1) -> np.ndarray:
    """An RGB image ``[rows * scale, columns * scale, 3]`` (uint8) of `values`: with `signed`, blue for -1, white
    for 0 and red for +1 (values divided by the largest magnitude); otherwise white (minimum) to dark blue
    (maximum)."""
    values = np.asarray(values, dtype=np.float64)
    if signed:
        extent = np.abs(values).max() or 1.0
        t = values / extent  # [-1, 1]
        low, high = np.array([33, 102, 172]), np.array([178, 24, 43])
        end = np.where(t[..., None] < 0, low, high)
        image = 255 + (end - 255) * np.abs(t)[..., None]
    else:
        span = values.max() - values.min() or 1.0
        t = (values - values.min()) / span
        image = 255 + (np.array([8, 48, 107]) - 255) * t[..., None]
    image = np.rint(image).astype(np.uint8)
    return image.repeat(scale, axis=0).repeat(scale, axis=1)


__all__ = ["STYLE", "attention_html", "attention_map_html", "beam_html", "beam_verdict", "heatmap_image", "shade"]
