"""The demo's attention and beam views inline in a notebook: objects that Jupyter displays as HTML.

::

    from vanilla_transformer.demo import show_attention, show_beam
    show_attention(model, tokenizer, "The house is small.", layer=6)           # all heads of layer 6
    show_beam(model, tokenizer, "The house is small.", length_penalty=0.6)
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..serving.search import LENGTH_PENALTY, NUM_BEAMS
from ..visualization import KINDS
from .core import Translation, translate_with_attention
from .render import attention_html, beam_html


@dataclass(frozen=True, eq=False)
class AttentionView:
    """One layer's attention maps of a translated sentence; `translation.attention` holds every layer's weights."""

    translation: Translation
    layer: int
    head: int | None
    kinds: tuple[str, ...]

    def _repr_html_(self) -> str:
        return attention_html(self.translation.attention, self.layer, self.head, self.kinds)


@dataclass(frozen=True, eq=False)
class BeamView:
    """A sentence's beam search step by step; `translation.trace` holds the steps."""

    translation: Translation
    tokenizer: PreTrainedTokenizerBase

    def _repr_html_(self) -> str:
        return beam_html(self.translation.trace, self.tokenizer, self.translation.length_penalty)


def show_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    layer: int = 1,
    head: int | None = None,
    kinds: tuple[str, ...] = tuple(KINDS),
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
) -> AttentionView:
    """Translate `sentence` with the paper's beam search and show the model's attention on it: `layer` (counted
    from 1), one `head` or with None all heads, for each of `kinds` (keys of ``visualization.KINDS``)."""
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown:
        raise ValueError(f"kinds must be among {list(KINDS)}, got kinds={list(kinds)}")
    layers = max(model.config.encoder_layers, model.config.decoder_layers)
    if not 1 <= layer <= layers:
        raise ValueError(f"layer is counted from 1 and the model has {layers} layers, got layer={layer}")
    translation = translate_with_attention(
        model, tokenizer, sentence, num_beams=num_beams, length_penalty=length_penalty
    )
    return AttentionView(translation, layer, head, tuple(kinds))


def show_beam(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
) -> BeamView:
    """Translate `sentence` and show its beam search step by step, and why the winner wins."""
    translation = translate_with_attention(
        model, tokenizer, sentence, num_beams=num_beams, length_penalty=length_penalty
    )
    return BeamView(translation, tokenizer)


__all__ = ["AttentionView", "BeamView", "show_attention", "show_beam"]
