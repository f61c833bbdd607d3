"""Translation with the paper's beam search.

Section 6.1: "we used beam search with a beam size of 4 and length penalty alpha = 0.6 ... We set the maximum output
length during inference to input length + 50, but terminate early when possible."

The length penalty is the one of GNMT (Wu et al., 2016, equation 14), which the paper cites: a finished hypothesis Y
scores ``log P(Y | X) / lp(Y)`` with ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, where |Y| counts the generated tokens,
``</s>`` included. GNMT's coverage penalty is not used (the paper sets no beta).

``model.generate`` runs this same search when the generation config asks for it (`paper_generation_config`: the
fields ``length_penalty_type="gnmt"`` and ``max_length_offset``), with the incremental decoder of
``generation_vanilla_transformer.py``, which `translate` uses. `beam_search` here is the reference: written
plainly, for any Hugging Face encoder-decoder. It follows the same procedure as Hugging Face and fairseq, so that
at alpha = 0, where both penalties are 1, it returns exactly what
``model.generate(num_beams=k, length_penalty=0.0, early_stopping="never", max_new_tokens=input length + 50)``
returns for each sentence (``tests/test_translate.py`` checks this):

1. Every step extends each of the k live hypotheses of a sentence by every token and keeps the 2k best extensions by
   log-probability, so that k of them still remain live if up to k end here.
2. Of the k best extensions, those that end (``</s>``, or the maximum length) join the sentence's k best finished
   hypotheses, scored with the length penalty. Only the k best may finish, as in fairseq and Hugging Face.
3. The k best extensions that did not end are the live hypotheses of the next step; the decoder's key/value cache
   is reordered to follow them.
4. A sentence is done when it holds k finished hypotheses and no live one can beat the worst of them even at its
   maximum length: log-probabilities only fall as tokens are added, and lp grows with length, so
   ``live log-prob / lp(maximum length)`` bounds any score a live hypothesis can still reach. The search is exact
   in this sense, like tensor2tensor's, and stops as soon as no sentence can change.

The model's encoder runs once per batch; the decoder runs one token per step on the k hypotheses of every sentence
with its key/value cache. Any Hugging Face encoder-decoder (``AutoModelForSeq2SeqLM``) whose cache has
``reorder_cache`` works, not only this package's model.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch.nn import functional as F
from tqdm.auto import tqdm
from transformers import (
    GenerationConfig,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.modeling_outputs import BaseModelOutput

from .cache_vanilla_transformer import cache_field
from .decoding import step_decoder
from .generation_vanilla_transformer import LENGTH_PENALTY_TYPE, Beams
from .generation_vanilla_transformer import MAX_LENGTH_OFFSET as MAX_LENGTH_OFFSET_FIELD
from .generation_vanilla_transformer import beam_search as fast_beam_search

CACHE = cache_field()
"""The argument and output field of a model's generation cache in the installed transformers."""

NUM_BEAMS = 4
"""Beam size of section 6.1."""

LENGTH_PENALTY = 0.6
"""GNMT length penalty alpha of section 6.1."""

MAX_LENGTH_OFFSET = 50
"""Section 6.1: the maximum output length is the input length + 50 tokens."""


def paper_generation_config(
    config: PreTrainedConfig,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
    max_new_tokens: int = 256,
) -> GenerationConfig:
    """The `GenerationConfig` of section 6.1, for ``model.generate`` and ``pipeline``: beam search with `num_beams`,
    GNMT's length penalty with alpha `length_penalty`, at most each sentence's input length + `max_length_offset`
    tokens (and never more than `max_new_tokens`), stopping as soon as no sentence can change; and the model's
    special token ids.

    ``length_penalty_type`` and ``max_length_offset`` are fields of this package's generation code
    (``generation_vanilla_transformer.py``, shipped with saved models); transformers keeps them in
    ``generation_config.json`` and its own loop, where a call falls back to it, ignores them with a warning.
    Settings that cannot work raise a ValueError naming them (`check_search_settings`)."""
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    return GenerationConfig(
        num_beams=num_beams,
        length_penalty=length_penalty,
        early_stopping="never",
        max_new_tokens=max_new_tokens,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        **{LENGTH_PENALTY_TYPE: "gnmt", MAX_LENGTH_OFFSET_FIELD: max_length_offset},
    )


def check_search_settings(*, where: str = "", flag: bool = False, **settings: object) -> None:
    """Raise a ValueError naming the first of `settings` that cannot work, e.g. ``num_beams must be at least 1, got
    num_beams=0``: ``num_beams`` must be an integer of at least 1, ``max_length_offset`` an integer of at least 0
    (``True`` and ``4.0`` are not integers), ``length_penalty`` a finite, non-negative number (NaN, infinity and
    alpha < 0 make GNMT's penalty rank hypotheses backwards or not at all). None values are not checked; `where`
    goes before the message; `flag` names the settings as command-line options (``--num-beams``)."""
    for name, value in settings.items():
        integer = name != "length_penalty"
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
            problem = "must be an integer" if integer else "must be a number"
        elif integer:
            least = 1 if name == "num_beams" else 0
            problem = None if value >= least else ("must be at least 1" if least else "must be non-negative")
        else:
            problem = None if math.isfinite(value) and value >= 0 else "must be finite and non-negative"
        if problem is not None:
            label = "--" + name.replace("_", "-") if flag else name
            raise ValueError(f"{where}{label} {problem}, got {label}={value!r}")


def gnmt_length_penalty(length: torch.Tensor | int, alpha: float) -> torch.Tensor | float:
    """GNMT's length penalty, ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016, eq. 14); 1 for alpha = 0."""
    return ((5 + length) / 6) ** alpha


def _check_search_arguments(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    num_beams: int,
    length_penalty: float,
    max_length_offset: int,
) -> None:
    """Reject what would make `beam_search` return garbage: a NaN penalty, a negative length, left padding."""
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    if input_ids.dim() != 2 or (input_ids.shape[0] > 0 and input_ids.shape[1] == 0):
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}: expected (batch_size, length), length > 0")
    if attention_mask is None:
        return
    if attention_mask.shape != input_ids.shape:
        raise ValueError(
            f"attention_mask has shape {tuple(attention_mask.shape)} but input_ids {tuple(input_ids.shape)}"
        )
    # Positions are absolute: a left-padded sentence would start at a later position and translate differently.
    if (attention_mask[:, 1:] > attention_mask[:, :-1]).any():
        raise ValueError("attention_mask is not right-padded: pad sources on the right (tokenizer padding_side)")


@torch.no_grad()
def beam_search(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
) -> torch.Tensor:
    """The best translation of each source sentence under the GNMT-penalised score (see the module docstring).

    Args:
        model: An encoder-decoder with ``config.decoder_start_token_id``, ``eos_token_id`` and ``pad_token_id``,
            in eval mode (dropout off).
        input_ids: Source token ids ``[batch, source length]``, right-padded.
        attention_mask: 1 for source tokens, 0 for padding; ``None`` when nothing is padded.
        num_beams: k, the number of hypotheses kept per sentence.
        length_penalty: GNMT's alpha; 0 ranks by plain log-probability.
        max_length_offset: Each sentence stops after its own number of source tokens plus this many tokens; no
            more than ``config.max_position_embeddings`` where the model has one.

    Returns:
        ``[batch, 1 + longest output]`` token ids, in the layout of ``model.generate``: the decoder start token,
        the output tokens ending in ``</s>`` (unless the maximum length cut them), then padding.
    """
    _check_search_arguments(input_ids, attention_mask, num_beams, length_penalty, max_length_offset)
    config = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if input_ids.shape[0] == 0:  # no sentences: no translations
        return torch.full((0, 1), config.decoder_start_token_id, dtype=input_ids.dtype, device=input_ids.device)

    max_lengths = _max_output_lengths(config, attention_mask, max_length_offset)
    encoder_outputs, memory_mask = _encode_per_hypothesis(model, input_ids, attention_mask, num_beams)
    beams = _Beams.start(
        input_ids.shape[0], num_beams, config.decoder_start_token_id, config.pad_token_id, input_ids.device
    )
    cache = None
    length = 0  # output tokens generated so far, </s> included
    while not beams.done.all():
        length += 1
        outputs = model(
            encoder_outputs=encoder_outputs,
            attention_mask=memory_mask,
            decoder_input_ids=beams.live[:, :, -1].reshape(-1, 1),
            use_cache=True,
            **{CACHE: cache},
        )
        cache = getattr(outputs, CACHE)
        log_probs = F.log_softmax(outputs.logits[:, -1].float(), dim=-1)  # [B * k, V]
        candidates = beams.best_extensions(log_probs)
        ends = (candidates.tokens == config.eos_token_id) | (length >= max_lengths).unsqueeze(1)
        beams.finish(candidates, ends, gnmt_length_penalty(length, length_penalty), config.pad_token_id)
        source_rows = beams.live_on(candidates, ends)
        cache.reorder_cache(source_rows)
        beams.done |= beams.settled(gnmt_length_penalty(max_lengths, length_penalty)) | (length >= max_lengths)
    return beams.best_finished()


def _max_output_lengths(config: PreTrainedConfig, attention_mask: torch.Tensor, offset: int) -> torch.Tensor:
    """Each sentence's most output tokens ``[B]``: its source length + `offset`, within the model's positions."""
    max_lengths = attention_mask.sum(dim=1) + offset
    position_limit = getattr(config, "max_position_embeddings", None)
    if position_limit is not None:
        max_lengths = max_lengths.clamp(max=position_limit)
    return max_lengths


def _encode_per_hypothesis(
    model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, k: int
) -> tuple[BaseModelOutput, torch.Tensor]:
    """Run the encoder once, and repeat its output and mask for the k hypotheses of each sentence: row ``b * k + j``
    of every decoder tensor is hypothesis j of sentence b."""
    sentence_of_row = torch.arange(input_ids.shape[0], device=input_ids.device).repeat_interleave(k)
    encoder_states = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    encoder_outputs = BaseModelOutput(last_hidden_state=encoder_states.index_select(0, sentence_of_row))
    return encoder_outputs, attention_mask.index_select(0, sentence_of_row)


class _Candidates(NamedTuple):
    """The 2k best extensions of each sentence's live hypotheses, best first."""

    scores: torch.Tensor  # [B, 2k] log P
    beams: torch.Tensor  # [B, 2k] the live hypothesis each extends
    tokens: torch.Tensor  # [B, 2k] the token each adds
    sequences: torch.Tensor  # [B, 2k, 1 + length] the extended hypotheses


@dataclass
class _Beams:
    """The search state of a batch: per sentence, k live hypotheses and the k best finished ones."""

    live: torch.Tensor  # [B, k, 1 + length], starting with the decoder start token
    live_scores: torch.Tensor  # [B, k] log P of the live hypotheses
    finished: torch.Tensor  # [B, k, 1 + length], padded after their end
    finished_scores: torch.Tensor  # [B, k] log P / lp, sorted, best first; -inf where none yet
    finished_lengths: torch.Tensor  # [B, k] output tokens of the finished hypotheses, </s> included
    done: torch.Tensor  # [B] the sentences whose result can no longer change

    @classmethod
    def start(cls, batch_size: int, k: int, start_id: int, pad_id: int, device: torch.device) -> _Beams:
        live_scores = torch.zeros(batch_size, k, device=device)
        live_scores[:, 1:] = -math.inf  # the k hypotheses start identical: extend only the first
        return cls(
            live=torch.full((batch_size, k, 1), start_id, device=device),
            live_scores=live_scores,
            finished=torch.full((batch_size, k, 1), pad_id, device=device),
            finished_scores=torch.full((batch_size, k), -math.inf, device=device),
            finished_lengths=torch.zeros(batch_size, k, dtype=torch.long, device=device),
            done=torch.zeros(batch_size, dtype=torch.bool, device=device),
        )

    def best_extensions(self, log_probs: torch.Tensor) -> _Candidates:
        """1. The 2k best extensions of the live hypotheses, given the next token's `log_probs` ``[B * k, V]``."""
        batch_size, k, length = self.live.shape
        vocab_size = log_probs.shape[-1]
        scores = (self.live_scores.unsqueeze(-1) + log_probs.view(batch_size, k, vocab_size)).view(batch_size, -1)
        candidate_scores, flat_index = scores.topk(2 * k)
        candidate_beams, candidate_tokens = flat_index // vocab_size, flat_index % vocab_size
        sequences = torch.cat(
            (
                self.live.gather(1, candidate_beams.unsqueeze(-1).expand(-1, -1, length)),
                candidate_tokens.unsqueeze(-1),
            ),
            dim=-1,
        )
        return _Candidates(candidate_scores, candidate_beams, candidate_tokens, sequences)

    def finish(self, candidates: _Candidates, ends: torch.Tensor, penalty: float, pad_id: int) -> None:
        """2. The extensions among the k best that `ends` join the k best finished hypotheses, scored
        ``log P / penalty``."""
        _, k, length = self.live.shape  # the step's length: the new hypotheses hold 1 + length tokens
        may_finish = ends & ~self.done.unsqueeze(1)
        may_finish[:, k:] = False
        new_scores = (candidates.scores / penalty).masked_fill(~may_finish, -math.inf)
        self.finished_scores, best = torch.cat((self.finished_scores, new_scores), dim=1).topk(k)
        padded_finished = F.pad(self.finished, (0, 1), value=pad_id)
        self.finished = torch.cat((padded_finished, candidates.sequences), dim=1).gather(
            1, best.unsqueeze(-1).expand(-1, -1, length + 1)
        )
        new_lengths = torch.full_like(candidates.tokens, length)
        self.finished_lengths = torch.cat((self.finished_lengths, new_lengths), dim=1).gather(1, best)

    def live_on(self, candidates: _Candidates, ends: torch.Tensor) -> torch.Tensor:
        """3. The k best extensions that did not end become the live hypotheses. Returns the decoder rows they
        extend, ``[B * k]``, for the cache to follow."""
        batch_size, k, length = self.live.shape
        self.live_scores, keep = candidates.scores.masked_fill(ends, -math.inf).topk(k)
        self.live = candidates.sequences.gather(1, keep.unsqueeze(-1).expand(-1, -1, length + 1))
        sentence_offsets = k * torch.arange(batch_size, device=keep.device).unsqueeze(1)
        return (candidates.beams.gather(1, keep) + sentence_offsets).flatten()

    def settled(self, max_length_penalty: torch.Tensor) -> torch.Tensor:
        """4. The sentences that hold k finished hypotheses of which no live one can beat the worst, at any length it
        may still reach: its log P only falls, and its penalty is at most `max_length_penalty`, lp(maximum length)."""
        best_reachable = self.live_scores[:, 0] / max_length_penalty
        worst_finished = self.finished_scores[:, -1]
        return (worst_finished > -math.inf) & (best_reachable <= worst_finished)

    def best_finished(self) -> torch.Tensor:
        """The best finished hypothesis of each sentence, ``[B, 1 + longest]``."""
        output_length = 1 + int(self.finished_lengths[:, 0].max())
        return self.finished[:, 0, :output_length]


@torch.no_grad()
def translate_ids(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
    observer: Callable[[int, Beams], None] | None = None,
) -> torch.Tensor:
    """The best translation of each source sentence under the GNMT-penalised score (see the module docstring): the
    one beam search, ``generation_vanilla_transformer.beam_search``, on the model's step decoder
    (``decoding.step_decoder``: this package's incremental decoder, or one forward pass per step of any other).

    Args:
        model: An encoder-decoder with ``config.decoder_start_token_id``, ``eos_token_id`` and ``pad_token_id``,
            in eval mode (dropout off).
        input_ids: Source token ids ``[batch, source length]``, right-padded.
        attention_mask: 1 for source tokens, 0 for padding; ``None`` when nothing is padded.
        num_beams: k, the number of hypotheses kept per sentence.
        length_penalty: GNMT's alpha; 0 ranks by plain log-probability.
        max_length_offset: Each sentence stops after its own number of source tokens plus this many tokens; no
            more than ``config.max_position_embeddings`` where the model has one.
        observer: Called after every step with the search state (see ``beam_search``); `trace_beam_search` uses it.

    Returns:
        ``[batch, 1 + longest output]`` token ids, in the layout of ``model.generate``: the decoder start token,
        the output tokens ending in ``</s>`` (unless the maximum length cut them), then padding.
    """
    _check_search_arguments(input_ids, attention_mask, num_beams, length_penalty, max_length_offset)
    config = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if input_ids.shape[0] == 0:  # no sentences: no translations
        return torch.full((0, 1), config.decoder_start_token_id, dtype=input_ids.dtype, device=input_ids.device)
    max_lengths = _max_output_lengths(config, attention_mask, max_length_offset)
    decoder = step_decoder(model, input_ids, attention_mask, num_beams, int(max_lengths.max()))
    fill = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    return fast_beam_search(
        decoder,
        num_beams,
        config.decoder_start_token_id,
        config.eos_token_id,
        fill,
        max_lengths,
        length_penalty=length_penalty,
        penalty_type="gnmt",
        early_stopping="never",
        observer=observer,
    )


def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
    batch_size: int = 32,
    show_progress: bool = False,
) -> list[str]:
    """Translate sentences with the paper's beam search, in batches of similar length, on the model's device.

    Every model runs the same search (`translate_ids`): this package's model on its fast incremental decoder,
    other encoder-decoders one forward pass per step (``decoding.step_decoder``).

    Defaults are the paper's: beam 4, GNMT length penalty alpha = 0.6, at most input length + 50 output tokens.
    The model is put in eval mode for the call and given back in the mode it came in.

    Args:
        model: The translation model.
        tokenizer: Its tokenizer; it must append ``</s>`` to sources, as the training data did.
        sentences: Source sentences.
        num_beams, length_penalty, max_length_offset: See `translate_ids`.
        batch_size: Sentences per batch (each takes `num_beams` rows in the decoder).
        show_progress: Show a progress bar over batches.

    Returns:
        The translations, detokenized, in the order of `sentences`.

    Raises:
        ValueError: Before translating anything: a bad search setting (`check_search_settings`), a long sentence.
    """
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got batch_size={batch_size}")
    encoded = tokenizer(list(sentences))["input_ids"] if sentences else []
    _check_source_lengths(encoded, getattr(model.config, "max_position_embeddings", None))
    # Longest first: similar lengths share a batch (little padding), and memory problems show at once.
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]), reverse=True)
    translations: list[str] = [""] * len(encoded)
    search = dict(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    with _eval_mode(model):
        starts = range(0, len(order), batch_size)
        for start in tqdm(starts, desc="translating", disable=not show_progress):
            indices = order[start : start + batch_size]
            batch = _right_padded(tokenizer, [encoded[i] for i in indices], model.device)
            output = translate_ids(model, batch["input_ids"], batch["attention_mask"], **search)
            for i, text in zip(indices, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True):
                translations[i] = text
    return translations


class BeamStep(NamedTuple):
    """The search for one sentence after `step` generated tokens."""

    step: int
    live: list[tuple[list[int], float]]
    """The live hypotheses, best first: token ids from the decoder start token, and log P."""
    finished: list[tuple[list[int], float, float]]
    """Every hypothesis that has joined the k best finished ones so far (also those pushed out since), best score
    first: token ids, log P, and GNMT's score log P / lp(|Y|) (log P is recovered as score * lp, to rounding)."""


class BeamTrace(NamedTuple):
    """The whole search for one sentence (`trace_beam_search`)."""

    steps: list[BeamStep]
    best: list[int]
    """The winning hypothesis: token ids from the decoder start token."""
    text: str
    """Its text: what `translate` returns for the sentence."""


def trace_beam_search(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentence: str,
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
) -> BeamTrace:
    """`translate` of one sentence, step by step: the live and finished hypotheses after every step, for showing
    how the search proceeds. The same search as `translate`, so `text` is its translation."""
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    encoded = tokenizer([sentence])["input_ids"]
    _check_source_lengths(encoded, getattr(model.config, "max_position_embeddings", None))
    steps: list[BeamStep] = []
    finished: list[tuple[list[int], float, float]] = []

    def observe(length: int, beams: Beams) -> None:
        live, kept = beams.hypotheses(0, length)
        for tokens, score in kept:
            if len(tokens) == 1 + length:  # joined at this step
                finished.append((tokens, score * gnmt_length_penalty(length, length_penalty), score))
        finished.sort(key=lambda hypothesis: -hypothesis[2])
        steps.append(BeamStep(length, live, list(finished)))

    with _eval_mode(model):
        batch = _right_padded(tokenizer, encoded, model.device)
        output = translate_ids(
            model,
            batch["input_ids"],
            batch["attention_mask"],
            num_beams=num_beams,
            length_penalty=length_penalty,
            max_length_offset=max_length_offset,
            observer=observe,
        )
    return BeamTrace(steps, output[0].tolist(), tokenizer.decode(output[0], skip_special_tokens=True))


@contextmanager
def _eval_mode(model: PreTrainedModel) -> Iterator[None]:
    """Dropout off for the block; the model given back in the mode it came in."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def _right_padded(tokenizer: PreTrainedTokenizerBase, encoded: Sequence[Sequence[int]], device) -> dict:
    """A batch of token id lists, right-padded (positions are absolute), on `device`."""
    return tokenizer.pad({"input_ids": list(encoded)}, padding_side="right", return_tensors="pt").to(device)


def _check_source_lengths(encoded: Sequence[Sequence[int]], limit: int | None) -> None:
    """Name the first sentence longer than the model's positions, before any is translated."""
    for number, ids in enumerate(encoded, start=1):
        if limit is not None and len(ids) > limit:
            raise ValueError(
                f"sentence {number} has {len(ids):,} tokens, more than the model's max_position_embeddings={limit}: "
                f"split or shorten it"
            )


__all__ = [
    "LENGTH_PENALTY",
    "MAX_LENGTH_OFFSET",
    "NUM_BEAMS",
    "BeamStep",
    "BeamTrace",
    "beam_search",
    "check_search_settings",
    "gnmt_length_penalty",
    "paper_generation_config",
    "trace_beam_search",
    "translate",
    "translate_ids",
]
