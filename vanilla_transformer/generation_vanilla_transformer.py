"""The package's one beam search (and greedy search), on a `StepDecoder`; and the hooks that run them behind
``model.generate()`` on the fast incremental decoder.

Section 6.1: "we used beam search with a beam size of 4 and length penalty alpha = 0.6 ... We set the maximum output
length during inference to input length + 50, but terminate early when possible." The length penalty is GNMT's
(Wu et al., 2016): a finished hypothesis Y scores ``log P(Y | X) / ((5 + |Y|) / 6) ** alpha``.

transformers' own beam search divides by ``|Y| ** alpha`` and has one maximum length per batch. Two generation
config fields, which transformers keeps as they are (`vanilla_transformer.serving.search.paper_generation_config`
writes both), select the paper's search:

* ``length_penalty_type="gnmt"``: GNMT's ``((5 + |Y|) / 6) ** length_penalty`` in place of ``|Y| ** length_penalty``;
* ``max_length_offset=50``: each sentence stops after its own source length + 50 tokens (and never after the
  batch's ``max_length``).

With ``early_stopping="never"`` the search stops exactly: once no live hypothesis, even at its maximum length, can
beat the worst of the k finished ones.

How ``generate()`` gets here: transformers prepares a call (configuration, encoder, stopping criteria, logits
processors) and then calls the model's ``_sample`` (greedy) or ``_beam_search`` method; `FastGenerationMixin`
overrides both. A call the fast decoder serves exactly (greedy or beam search, no logits processor, the default
stopping criteria, no streamer, only the output sequences asked for, no static cache or ``compile_config``, ...) runs
here; any other falls back to transformers' loop, which then ignores the two fields above (with a warning when they
are set). At the same settings
both give the same tokens: the search is transformers' step for step (the 2k best extensions, of which those among
the k best that end finish, the k best others live on; the same early-stopping rules), only computed with less
overhead. The tests check both against transformers and against a plain search written for reading.

The searches need only a `StepDecoder` (one step's logits, selecting rows): the incremental decoder here, and for
any other encoder-decoder the adapter ``vanilla_transformer.serving.step_decoders``, on which ``translate()`` runs
`beam_search`.

``_sample`` and ``_beam_search`` are private to transformers, and may change in any release: the override serves
calls only where their signatures are the ones it was written for (`hook_signatures_match`), and passes every other
call through untouched. It also leaves to transformers' loop any model whose decoder computes something its plain
weights do not (a forward hook, a PEFT method other than plain LoRA, which it folds into the weights:
`decoder_vanilla_transformer.incremental_decoder_problem`, the rule the package's search follows too).

The generation cache's name: ``cache_vanilla_transformer.py``; the decoder, and why it is faster:
``decoder_vanilla_transformer.py``.

This file imports only torch and transformers: it is copied next to a saved model with the modeling file, which
imports it, and runs as remote code.
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol

import torch
from torch.nn import functional as F
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from .cache_vanilla_transformer import cache_field
from .decoder_vanilla_transformer import (
    DecoderWeights,
    IncrementalDecoder,
    check_search_memory,
    incremental_decoder_problem,
)

LENGTH_PENALTY_TYPE = "length_penalty_type"
"""Generation config field: ``"gnmt"`` for ``((5 + |Y|) / 6) ** alpha``; absent or ``"length"``: ``|Y| ** alpha``."""

MAX_LENGTH_OFFSET = "max_length_offset"
"""Generation config field: each sentence generates at most its source length + this many tokens."""

MASKED = -1.0e9
"""transformers' beam search marks impossible hypotheses with this score; the same here keeps ties the same."""


def length_penalty_of(generation_config) -> str:
    kind = getattr(generation_config, LENGTH_PENALTY_TYPE, None) or "length"
    if kind not in ("length", "gnmt"):
        raise ValueError(f"generation config {LENGTH_PENALTY_TYPE}={kind!r}: choose 'length' or 'gnmt'")
    return kind


def gnmt_length_penalty(length, alpha: float):
    """GNMT's length penalty, ``lp(Y) = ((5 + |Y|) / 6) ** alpha`` (Wu et al., 2016, eq. 14); 1 for alpha = 0.
    `length` is an int or a tensor."""
    return ((5 + length) / 6) ** alpha


def _penalty(length, alpha: float, kind: str):
    """The denominator of a finished hypothesis's score: ``|Y| ** alpha``, or GNMT's `gnmt_length_penalty`."""
    return gnmt_length_penalty(length, alpha) if kind == "gnmt" else length**alpha


def output_limits(source_lengths: torch.Tensor, offset: int | None, limit: int) -> torch.Tensor:
    """Each sentence's most generated tokens ``[B]``: `limit`, and its source length + `offset` where given."""
    limits = torch.full_like(source_lengths, limit)
    return limits if offset is None else torch.minimum(limits, source_lengths + offset)


# --------------------------------------------------------------------------------------------------------------------
# The searches
# --------------------------------------------------------------------------------------------------------------------


def _top(scores: torch.Tensor, n: int, chunk: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    """``scores.topk(n)`` over the last dimension, several times faster for a vocabulary-sized one on CPU.

    The n largest values lie in the n chunks with the largest maxima (a chunk holding one of them has a maximum at
    least as large as the n-th value, and at most n chunks do), so the top n of those n * chunk values are exact.
    """
    rows, size = scores.shape
    if size < 8 * n * chunk:
        return scores.topk(n)
    full = size // chunk * chunk
    maxima = scores[:, :full].view(rows, -1, chunk).amax(-1)  # [rows, size / chunk]
    if full < size:
        maxima = torch.cat((maxima, scores[:, full:].amax(-1, keepdim=True)), dim=1)
    starts = maxima.topk(n).indices * chunk  # [rows, n]
    index = (starts.unsqueeze(-1) + torch.arange(chunk, device=scores.device)).view(rows, -1)  # [rows, n * chunk]
    values = scores.gather(1, index.clamp(max=size - 1)).masked_fill_(index >= size, -math.inf)
    values, best = values.topk(n)
    return values, index.gather(1, best)


class StepDecoder(Protocol):
    """What the searches need of a decoder: rows are hypotheses, `beams` consecutive rows per sentence. Implemented by
    `IncrementalDecoder` and, for any Hugging Face encoder-decoder,
    ``vanilla_transformer.serving.step_decoders.CachedStepDecoder``."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` of the next token after `tokens` ``[rows]``, the last token of each hypothesis."""

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep the rows `rows` (in this order; each a row of the same sentence, or of a kept one), and, when given,
        only the `sentences` (indices among the current ones)."""


@torch.no_grad()
def greedy_search(
    decoder: StepDecoder, start_id: int, eos_ids: torch.Tensor, pad_id: int, max_lengths: torch.Tensor
) -> torch.Tensor:
    """transformers' greedy search: the most probable token at each step; a row ends at ``</s>`` or at its own
    maximum length (`max_lengths`, in generated tokens), and is padded after that. Returns ``[rows, 1 + steps]``."""
    rows, device = max_lengths.shape[0], eos_ids.device
    output = torch.full((rows, 1 + int(max_lengths.max())), pad_id, dtype=torch.long, device=device)
    output[:, 0] = start_id
    index = torch.arange(rows, device=device)  # the output row of each decoder row
    tokens, finished = output[:, 0], torch.zeros(rows, dtype=torch.bool, device=device)
    length = 0
    while True:
        length += 1
        tokens = decoder.step(tokens).float().max(dim=-1).indices.masked_fill_(finished, pad_id)
        output[index, length] = tokens
        ended = tokens == eos_ids[0] if eos_ids.numel() == 1 else torch.isin(tokens, eos_ids)
        finished |= ended | (max_lengths <= length)
        count = int(finished.sum())
        if count == finished.numel():
            return output[:, : 1 + length]
        if 4 * count >= finished.numel():  # a quarter of the rows is done: stop computing them
            keep = (~finished).nonzero().squeeze(1)
            decoder.select(keep, keep)
            index, tokens, finished, max_lengths = index[keep], tokens[keep], finished[keep], max_lengths[keep]


@torch.no_grad()
def beam_search(
    decoder: StepDecoder,
    num_beams: int,
    start_id: int,
    eos_id: int,
    fill_id: int,
    max_lengths: torch.Tensor,
    *,
    length_penalty: float,
    penalty_type: str = "length",
    early_stopping: bool | str = False,
    num_return_sequences: int = 1,
    observer: Callable[[int, Beams], None] | None = None,
) -> torch.Tensor:
    """transformers' beam search (``_beam_search``), with each sentence's own maximum length and a choice of length
    penalty (``|Y| ** alpha`` or GNMT's), dropping each sentence from the batch once its result cannot change.

    Every step extends the k live hypotheses of a sentence by every token and keeps the 2k best extensions; those
    among the k best that end (``</s>``, or the maximum length) join the k best finished hypotheses, scored
    ``log P / penalty(|Y|)``; the k best others live on. A sentence is done when it holds k finished hypotheses and
    its best live one cannot beat the worst of them, judged at the current length, or with ``early_stopping="never"``
    (and alpha > 0) at its maximum length, which is exact; or with ``early_stopping=True`` as soon as it holds k.

    `observer`, when given, is called after every step with the number of tokens generated and the `Beams` of the
    sentences still searched (those done at this step included), for a trace of the search.

    Returns ``[sentences * num_return_sequences, 1 + longest]``: the best hypotheses of each sentence, best first,
    with `fill_id` after their end.
    """
    k, device = num_beams, max_lengths.device
    sentences, width = max_lengths.shape[0], 1 + int(max_lengths.max())
    result = torch.full((sentences, num_return_sequences, width), fill_id, dtype=torch.long, device=device)
    result_lengths = torch.zeros(sentences, num_return_sequences, dtype=torch.long, device=device)
    beams = Beams.start(max_lengths, k, width, start_id, fill_id)
    length = 0
    while beams.index.numel():
        length += 1
        tokens = beams.live[:, :, length - 1].reshape(-1)
        log_probs = F.log_softmax(decoder.step(tokens).float(), dim=-1)  # [B * k, V]
        candidates = beams.best_extensions(log_probs)
        ends = (candidates.tokens == eos_id) | (beams.max_lengths <= length).unsqueeze(1)
        beams.finish(candidates, ends, length, _penalty(length, length_penalty, penalty_type))
        rows = beams.live_on(candidates, ends, length)
        done = beams.settled(length, length_penalty, penalty_type, early_stopping)
        if observer is not None:
            observer(length, beams)
        if bool(done.any()):
            result[beams.index[done]] = beams.finished[done, :num_return_sequences]
            result_lengths[beams.index[done]] = beams.finished_lengths[done, :num_return_sequences]
            going = (~done).nonzero().squeeze(1)
            decoder.select(rows.view(-1, k)[going].flatten(), going)
            beams = beams.select(going)
        else:
            decoder.select(rows)
    return result.flatten(0, 1)[:, : 1 + int(result_lengths.max())]


class _Candidates(NamedTuple):
    """The 2k best extensions of each sentence's live hypotheses, ``[B, 2k]`` each, best first."""

    scores: torch.Tensor  # log P
    beams: torch.Tensor  # the live hypothesis each extends
    tokens: torch.Tensor  # the token each adds


@dataclass
class Beams:
    """The state of the sentences still searched: k live hypotheses each, and the k best finished ones.

    Hypotheses are ``[B, k, width]`` token ids, `fill_id` after their current length."""

    index: torch.Tensor  # [B] the output sentence of each
    max_lengths: torch.Tensor  # [B] their most generated tokens
    live: torch.Tensor  # [B, k, width]
    live_scores: torch.Tensor  # [B, k] log P
    finished: torch.Tensor  # [B, k, width]
    finished_scores: torch.Tensor  # [B, k] log P / penalty, sorted, best first; MASKED where none yet
    finished_lengths: torch.Tensor  # [B, k] generated tokens, </s> included
    is_finished: torch.Tensor  # [B, k] False where none yet

    @classmethod
    def start(cls, max_lengths: torch.Tensor, k: int, width: int, start_id: int, fill_id: int) -> Beams:
        sentences, device = max_lengths.shape[0], max_lengths.device
        live = torch.full((sentences, k, width), fill_id, dtype=torch.long, device=device)
        live[:, :, 0] = start_id
        live_scores = torch.zeros(sentences, k, device=device)
        live_scores[:, 1:] = MASKED  # the k hypotheses start identical: extend only the first
        return cls(
            index=torch.arange(sentences, device=device),
            max_lengths=max_lengths,
            live=live,
            live_scores=live_scores,
            finished=live.clone(),
            finished_scores=torch.full((sentences, k), MASKED, device=device),
            finished_lengths=torch.zeros(sentences, k, dtype=torch.long, device=device),
            is_finished=torch.zeros(sentences, k, dtype=torch.bool, device=device),
        )

    def best_extensions(self, log_probs: torch.Tensor) -> _Candidates:
        """The 2k best extensions, given the next token's `log_probs` ``[B * k, V]``: they are among the 2k best of
        each hypothesis."""
        count, k = self.live_scores.shape
        n = min(2 * k, log_probs.shape[-1])  # fewer where the vocabulary is smaller than 2k
        row_scores, row_tokens = _top(log_probs, n)
        row_scores = (row_scores.view(count, k, n) + self.live_scores.unsqueeze(-1)).view(count, -1)
        scores, flat = row_scores.topk(2 * k)
        return _Candidates(scores, flat // n, row_tokens.view(count, -1).gather(1, flat))

    def finish(self, candidates: _Candidates, ends: torch.Tensor, length: int, penalty) -> None:
        """Those among the k best extensions that `ends` join the finished hypotheses, scored ``log P / penalty``.
        Runs before `live_on`, which replaces the hypotheses they extend."""
        count, k, width = self.live.shape
        ending = ends[:, :k]
        new_scores = candidates.scores[:, :k] / penalty
        new_scores = new_scores + (~ending).float() * MASKED
        new = self.live.gather(1, candidates.beams[:, :k].unsqueeze(-1).expand(-1, -1, width))
        new[:, :, length] = candidates.tokens[:, :k]
        self.finished_scores, best = torch.cat((self.finished_scores, new_scores), dim=1).topk(k)
        self.finished = torch.cat((self.finished, new), dim=1).gather(1, best.unsqueeze(-1).expand(-1, -1, width))
        new_lengths = self.finished_lengths.new_full((count, k), length)
        self.finished_lengths = torch.cat((self.finished_lengths, new_lengths), dim=1).gather(1, best)
        self.is_finished = torch.cat((self.is_finished, ending), dim=1).gather(1, best)

    def live_on(self, candidates: _Candidates, ends: torch.Tensor, length: int) -> torch.Tensor:
        """The k best extensions that do not end become the live hypotheses. Returns the decoder rows they extend,
        ``[B * k]``, for the cache to follow."""
        count, k, width = self.live.shape
        self.live_scores, keep = (candidates.scores + ends.float() * MASKED).topk(k)
        parents = candidates.beams.gather(1, keep)
        self.live = self.live.gather(1, parents.unsqueeze(-1).expand(-1, -1, width))
        self.live[:, :, length] = candidates.tokens.gather(1, keep)
        return (parents + k * torch.arange(count, device=parents.device).unsqueeze(1)).flatten()

    def settled(self, length: int, length_penalty: float, penalty_type: str, early_stopping: bool | str):
        """The sentences whose result can no longer change: ``[B]``, see `beam_search`."""
        full = self.is_finished.all(1)
        bound = self.max_lengths if early_stopping == "never" and length_penalty > 0 else length
        best_possible = self.live_scores[:, 0] / _penalty(bound, length_penalty, penalty_type)
        done = (full & (best_possible <= self.finished_scores.min(1).values)) | (self.max_lengths <= length)
        if early_stopping is True:
            done |= full
        return done

    def select(self, sentences: torch.Tensor) -> Beams:
        """The state of `sentences` alone."""
        return Beams(*(getattr(self, field.name)[sentences] for field in fields(self)))


# --------------------------------------------------------------------------------------------------------------------
# generate(): the model's decoding hooks
# --------------------------------------------------------------------------------------------------------------------

_MODEL_KWARGS = {"attention_mask", "encoder_outputs", "use_cache", cache_field()}
"""What transformers passes to a decoding method of a plain call, its cache under the name it gives it (see
`cache_field`): anything else goes to its own loop."""


def _unserved(model, input_ids, logits_processor, stopping_criteria, config, synced_gpus, streamer, kwargs) -> str:
    """Why the fast decoder cannot serve this call exactly (``""`` when it can)."""
    beams = config.num_beams or 1
    cache = kwargs.get(cache_field())
    checks = (
        (config.do_sample, "sampling"),
        (
            len(logits_processor) > 0,
            "logits processors (" + ", ".join(type(p).__name__ for p in logits_processor) + ")",
        ),
        (
            any(not isinstance(c, (MaxLengthCriteria, EosTokenCriteria)) for c in stopping_criteria),
            "stopping criteria other than max_length and eos_token_id",
        ),
        (streamer is not None, "a streamer"),
        (bool(synced_gpus), "synced_gpus"),
        (
            config.return_dict_in_generate
            or config.output_scores
            or config.output_logits
            or config.output_attentions
            or config.output_hidden_states,
            "outputs besides the sequences",
        ),
        (config.num_return_sequences > max(1, beams), "num_return_sequences > num_beams"),
        (input_ids.shape[1] != 1, "a decoder prompt (decoder_input_ids)"),
        (bool((input_ids != input_ids[:1]).any()), "decoder start tokens that differ between rows"),
        (not set(kwargs) <= _MODEL_KWARGS, "model arguments " + ", ".join(sorted(set(kwargs) - _MODEL_KWARGS))),
        (cache is not None and not isinstance(cache, Cache), f"a cache of type {type(cache).__name__}"),
        # transformers' static cache or compiled decoding (CUDA graphs), asked for: it runs, never silently ignored
        (config.cache_implementation not in (None, "dynamic"), f"cache_implementation {config.cache_implementation}"),
        (config.compile_config is not None, "a compile_config"),
        (type(getattr(cache, "self_attention_cache", cache)) not in (DynamicCache, type(None)), "a static cache"),
        (isinstance(cache, Cache) and cache.get_seq_length() > 0, "a filled cache"),
        (kwargs.get("encoder_outputs") is None, "no encoder output"),
        (config._eos_token_tensor is None, "no eos_token_id"),
        (beams > 1 and config._eos_token_tensor.numel() != 1, "several eos_token_id with beam search"),
        (
            getattr(config, MAX_LENGTH_OFFSET, None) is None
            and config.max_length - 1 > model.config.max_position_embeddings,
            f"max_length beyond max_position_embeddings={model.config.max_position_embeddings}",
        ),
    )
    reason = next((reason for failed, reason in checks if failed), "")
    return reason or incremental_decoder_problem(model)


def _max_lengths(model, config, attention_mask, memory: torch.Tensor) -> torch.Tensor:
    """Each sentence's most generated tokens: ``max_length - 1``, and its source length + ``max_length_offset``."""
    offset = getattr(config, MAX_LENGTH_OFFSET, None)
    if offset is not None and (not isinstance(offset, int) or offset < 0):
        raise ValueError(f"generation config {MAX_LENGTH_OFFSET}={offset!r}: expected a non-negative integer")
    sources = attention_mask.sum(1) if attention_mask is not None else torch.tensor([memory.shape[1]] * len(memory))
    limit = min(config.max_length - 1, model.config.max_position_embeddings)
    return output_limits(sources.to(memory.device), offset, limit)


def fast_generate(model, config, kwargs) -> torch.Tensor:
    """Greedy or beam search with the fast decoder, for a call that `_unserved` accepts."""
    beams = config.num_beams or 1
    memory = kwargs["encoder_outputs"].last_hidden_state[::beams]  # transformers repeated it for each beam
    attention_mask = kwargs.get("attention_mask")
    attention_mask = attention_mask[::beams] if attention_mask is not None else None
    max_lengths = _max_lengths(model, config, attention_mask, memory)
    check_search_memory(model.config, *memory.shape[:2], beams, int(max_lengths.max()), memory.device)
    decoder = IncrementalDecoder(DecoderWeights.of(model), memory, attention_mask, beams, int(max_lengths.max()))
    start = int(config._decoder_start_token_tensor.flatten()[0])
    eos = config._eos_token_tensor.flatten().to(memory.device)
    if beams == 1:
        pad = config._pad_token_tensor
        return greedy_search(decoder, start, eos, int(pad) if pad is not None else int(eos[0]), max_lengths)
    pad = config._pad_token_tensor
    fill = int(pad) if pad is not None else int(eos[0])
    if length_penalty_of(config) == "length" and fill == 0:
        # transformers pads beam search output with </s> when pad_token_id is 0 (its `pad or eos`): the same here.
        # The paper's search pads with pad_token_id.
        fill = int(eos[0])
    return beam_search(
        decoder,
        beams,
        start,
        int(eos[0]),
        fill,
        max_lengths,
        length_penalty=config.length_penalty,
        penalty_type=length_penalty_of(config),
        early_stopping=config.early_stopping,
        num_return_sequences=config.num_return_sequences,
    )


def _warn_fallback(config, reason: str, search: str) -> None:
    ignored = [
        f"{name}={getattr(config, name)!r}"
        for name in (LENGTH_PENALTY_TYPE, MAX_LENGTH_OFFSET)
        if getattr(config, name, None) not in (None, "length")
    ]
    if ignored:
        warnings.warn(
            f"generate(): the fast decoder does not serve {reason}, so transformers' own {search} runs, and it "
            f"ignores {' and '.join(ignored)} (|Y| ** alpha and one max_length per batch instead)",
            stacklevel=5,
        )


_HOOKS = {
    "_sample": (
        "greedy search or sampling",
        ("self", "input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus", "streamer"),
    ),
    "_beam_search": (
        "beam search",
        ("self", "input_ids", "logits_processor", "stopping_criteria", "generation_config", "synced_gpus"),
    ),
}
"""The decoding methods of transformers' `GenerationMixin` that `FastGenerationMixin` overrides (private ones: no
public hook hands a model the whole search), the search each runs, and the arguments before ``**model_kwargs``
they were written for."""


def hook_signatures_match() -> dict[str, bool]:
    """For each overridden method, whether the installed transformers' takes exactly the arguments of `_HOOKS`.
    Where it does not, `FastGenerationMixin` passes its calls through untouched (tested for each supported
    transformers in ``tests/test_fast_generation.py``)."""
    matches = {}
    for name, (_, expected) in _HOOKS.items():
        parameters = list(
            inspect.signature(getattr(GenerationMixin, name, None) or (lambda: None)).parameters.values()
        )
        names = tuple(p.name for p in parameters[:-1])
        matches[name] = names == expected and parameters[-1].kind is inspect.Parameter.VAR_KEYWORD
    return matches


_HOOKS_MATCH = hook_signatures_match()


class FastGenerationMixin:
    """Routes greedy and beam search of ``generate()`` to the fast decoder, and the calls it cannot serve exactly
    to transformers' own ``_sample`` and ``_beam_search`` (see the module docstring)."""

    def _sample(self, *args, **kwargs):
        return self._fast_or_transformers("_sample", args, kwargs)

    def _beam_search(self, *args, **kwargs):
        return self._fast_or_transformers("_beam_search", args, kwargs)

    def _fast_or_transformers(self, method: str, args: tuple, kwargs: dict):
        """The fast decoder where it serves the call exactly; else transformers' `method`, called as it was."""
        transformers_search = getattr(super(), method)
        if not _HOOKS_MATCH[method]:
            return transformers_search(*args, **kwargs)
        call = inspect.signature(getattr(GenerationMixin, method)).bind(self, *args, **kwargs).arguments
        reason = _unserved(
            self,
            call["input_ids"],
            call["logits_processor"],
            call["stopping_criteria"],
            call["generation_config"],
            call.get("synced_gpus", False),
            call.get("streamer"),
            call.get("model_kwargs", {}),
        )
        if not reason:
            return fast_generate(self, call["generation_config"], call.get("model_kwargs", {}))
        _warn_fallback(call["generation_config"], reason, _HOOKS[method][0])
        return transformers_search(*args, **kwargs)


__all__ = [
    "Beams",
    "FastGenerationMixin",
    "StepDecoder",
    "beam_search",
    "fast_generate",
    "greedy_search",
    "gnmt_length_penalty",
    "hook_signatures_match",
    "output_limits",
]
