"""What the demo's views compute, without gradio: the checked sentence, the beam's hypotheses with their scores,
the attention maps of a translation, and the sinusoidal positions of section 3.5."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..modeling_vanilla_transformer import sinusoidal_table
from ..serving.search import LENGTH_PENALTY, NUM_BEAMS, BeamTrace, trace_beam_search
from ..visualization import Attention, compute_attention, display_tokens


@dataclass(frozen=True)
class Hypothesis:
    """One finished hypothesis of the beam: its text, its output tokens (``</s>`` included) and its scores."""

    text: str
    tokens: list[str]
    log_prob: float
    """log P(Y | X), summed over the output tokens."""
    score: float
    """GNMT's score, ``log_prob / lp(|Y|)``, which ranks the beam's hypotheses."""


@dataclass(frozen=True, eq=False)  # hashed by identity: gradio's State tells a new translation from the last
class Translation:
    """A sentence's translation as the Translate and Attention views show it."""

    source: str
    hypotheses: list[Hypothesis]
    """The beam's k best finished hypotheses, best score first; the first is the translation."""
    trace: BeamTrace
    """The search, step by step."""
    attention: Attention
    """The model's attention on the source and the best hypothesis."""
    length_penalty: float
    """The search's alpha."""
    seconds: float
    """Wall time of the search and the attention maps."""

    @property
    def text(self) -> str:
        """The best hypothesis: what `translate` returns."""
        return self.trace.text


def check_sentence(sentence: str | None) -> str:
    """`sentence` without surrounding blanks; a ValueError for the page if nothing is left. (`trace_beam_search`
    refuses a sentence longer than the model's positions, naming both lengths, before decoding.)"""
    if sentence is None or not sentence.strip():
        raise ValueError("Enter a sentence to translate: the text box is empty.")
    return sentence.strip()


def hypotheses(trace: BeamTrace, tokenizer: PreTrainedTokenizerBase, count: int) -> list[Hypothesis]:
    """The `count` best finished hypotheses of a traced search, best GNMT score first (the winner first)."""
    return [
        Hypothesis(
            text=tokenizer.decode(tokens, skip_special_tokens=True),
            tokens=display_tokens(tokenizer, tokens[1:]),  # without the decoder start token
            log_prob=log_prob,
            score=score,
        )
        for tokens, log_prob, score in trace.steps[-1].finished[:count]
    ]


def translate_with_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
) -> Translation:
    """The paper's beam search on `sentence`, traced step by step (`trace_beam_search`), and the model's attention
    maps (``output_attentions``, `compute_attention`) on its translation.

    Raises:
        ValueError: Before decoding: a blank or too long sentence, a bad search setting; the message is for the page.
    """
    start = time.perf_counter()
    sentence = check_sentence(sentence)
    trace = trace_beam_search(model, tokenizer, sentence, num_beams=num_beams, length_penalty=length_penalty)
    # An empty translation (</s> alone) has no text to align: the maps then show the model's greedy output.
    attention = compute_attention(model, tokenizer, sentence, trace.text if trace.text.strip() else None)
    best = hypotheses(trace, tokenizer, num_beams)
    return Translation(sentence, best, trace, attention, length_penalty, time.perf_counter() - start)


@dataclass(frozen=True)
class Positions:
    """Section 3.5's encodings for a model: ``encoding [positions, d_model]``, ``similarity [positions, positions]``
    (the dot products PE(p) . PE(q), which depend only on p - q)."""

    encoding: np.ndarray
    similarity: np.ndarray


def positions(model: PreTrainedModel, num_positions: int | None = None) -> Positions:
    """The model's own sinusoidal table (``sinusoidal_table``) for its ``d_model``, and its dot products."""
    config = model.config
    count = min(num_positions or config.max_position_embeddings, config.max_position_embeddings)
    table = sinusoidal_table(count, config.d_model)  # [P, d_model]
    return Positions(encoding=table.numpy(), similarity=(table @ table.T).numpy())


__all__ = [
    "Hypothesis",
    "Positions",
    "Translation",
    "hypotheses",
    "check_sentence",
    "positions",
    "translate_with_attention",
]
