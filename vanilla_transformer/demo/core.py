"""What the demo's views compute, without gradio: the checked sentence, the beam's hypotheses with their scores,
the attention maps of a translation, and the sinusoidal positions of section 3.5."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..modeling_vanilla_transformer import sinusoidal_table
from ..translation import (
    LENGTH_PENALTY,
    MAX_LENGTH_OFFSET,
    NUM_BEAMS,
    check_search_settings,
    gnmt_length_penalty,
    paper_generation_config,
)
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
    """The beam's finished hypotheses, best score first; the first is the translation."""
    attention: Attention
    """The model's attention on the source and the best hypothesis."""
    seconds: float
    """Wall time of the search, the scoring and the attention maps."""

    @property
    def text(self) -> str:
        return self.hypotheses[0].text


def check_sentence(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, sentence: str) -> torch.Tensor:
    """The token ids ``[1, length]`` of `sentence`, refused before any decoding when it is blank or longer than
    the model's positions.

    Raises:
        ValueError: A message for the page: what is wrong and what to do.
    """
    if not isinstance(sentence, str) or not sentence.strip():
        raise ValueError("Enter a sentence to translate: the text box is empty.")
    input_ids = tokenizer(sentence.strip(), return_tensors="pt")["input_ids"]
    limit = model.config.max_position_embeddings
    if input_ids.shape[1] > limit:
        raise ValueError(
            f"The sentence has {input_ids.shape[1]:,} tokens, more than the model's {limit:,} positions "
            f"(max_position_embeddings): shorten it or split it into sentences."
        )
    return input_ids


@torch.no_grad()
def beam_hypotheses(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
) -> list[Hypothesis]:
    """The `num_beams` finished hypotheses of the paper's beam search (``model.generate`` with
    `paper_generation_config`), best first, each scored by the model in one teacher-forced pass."""
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    input_ids = check_sentence(model, tokenizer, sentence).to(model.device)
    config = model.config
    generation_config = paper_generation_config(
        config,
        num_beams=num_beams,
        length_penalty=length_penalty,
        max_length_offset=max_length_offset,
        max_new_tokens=min(input_ids.shape[1] + max_length_offset, config.max_position_embeddings),
    )
    generation_config.num_return_sequences = num_beams
    was_training = model.training
    model.eval()
    try:
        sequences = model.generate(input_ids=input_ids, generation_config=generation_config)  # [k, 1 + T]
        rows = sequences.shape[0]
        logits = model(input_ids=input_ids.expand(rows, -1), decoder_input_ids=sequences[:, :-1]).logits
    finally:
        model.train(was_training)
    outputs = sequences[:, 1:]  # [k, T], without the start token
    token_log_probs = F.log_softmax(logits.float(), dim=-1).gather(-1, outputs.unsqueeze(-1)).squeeze(-1)  # [k, T]
    hypotheses = []
    for row, log_probs in zip(outputs.tolist(), token_log_probs, strict=True):
        length = row.index(config.eos_token_id) + 1 if config.eos_token_id in row else len(row)
        log_prob = float(log_probs[:length].sum())
        hypotheses.append(
            Hypothesis(
                text=tokenizer.decode(row[:length], skip_special_tokens=True),
                tokens=display_tokens(tokenizer, row[:length]),
                log_prob=log_prob,
                score=log_prob / gnmt_length_penalty(length, length_penalty),
            )
        )
    return hypotheses


def translate_with_attention(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
) -> Translation:
    """The beam's hypotheses of `sentence` and the model's attention maps (``output_attentions``) on the best."""
    start = time.perf_counter()
    hypotheses = beam_hypotheses(model, tokenizer, sentence, num_beams=num_beams, length_penalty=length_penalty)
    target = hypotheses[0].text
    # An empty translation (</s> alone) has no text to align: the maps then show the model's greedy output.
    attention = compute_attention(model, tokenizer, sentence.strip(), target if target.strip() else None)
    return Translation(sentence.strip(), hypotheses, attention, time.perf_counter() - start)


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
    "beam_hypotheses",
    "check_sentence",
    "positions",
    "translate_with_attention",
]
