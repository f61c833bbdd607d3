"""The package's search API: the paper's beam search settings, their checks, `translate` and its trace.

Section 6.1: "we used beam search with a beam size of 4 and length penalty alpha = 0.6 ... We set the maximum output
length during inference to input length + 50, but terminate early when possible."

The length penalty is the one of GNMT (Wu et al., 2016, equation 14), which the paper cites: a finished hypothesis Y
scores ``log P(Y | X) / lp(Y)`` with ``lp(Y) = ((5 + |Y|) / 6) ** alpha``, where |Y| counts the generated tokens,
``</s>`` included. GNMT's coverage penalty is not used (the paper sets no beta).

There is one beam search, ``generation_vanilla_transformer.beam_search`` (its docstring says how it prunes and when
it stops: exactly, once no live hypothesis can beat the k finished ones even at its maximum length). It runs on a
step decoder (``serving.step_decoders.step_decoder``): this package's fast incremental decoder, an ONNX folder's on
onnxruntime, or one forward pass with the cache per step of any other Hugging Face encoder-decoder (MarianMT, ...).
`translate` and `translate_ids` run it for every model; ``model.generate`` runs it for this package's model with `paper_generation_config`. At alpha = 0, where
both penalties are 1, it returns what transformers' own
``model.generate(num_beams=k, length_penalty=0.0, early_stopping="never", max_new_tokens=input length + 50)``
returns for each sentence; ``tests/beam_oracle.py``, a plain search written for reading, checks it at other alpha.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig, PreTrainedConfig, PreTrainedModel, PreTrainedTokenizerBase

from ..constants import LENGTH_PENALTY, MAX_LENGTH_OFFSET, NUM_BEAMS
from ..decoder_vanilla_transformer import check_search_memory
from ..generation_vanilla_transformer import (
    LENGTH_PENALTY_TYPE,
    MASKED,
    Beams,
    beam_search,
    gnmt_length_penalty,
    output_limits,
)
from ..generation_vanilla_transformer import MAX_LENGTH_OFFSET as MAX_LENGTH_OFFSET_FIELD
from ..library_errors import SettingError
from .step_decoders import step_decoder


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
    Settings that cannot work raise a ValueError naming them (`check_search_settings`). ``num_beams=1`` is greedy
    search: the config then holds no length penalty and no early stopping, which transformers allows for beam search
    only (it would refuse to save the config). The config is validated as transformers validates it when saving, so
    that a run never fails on it after training."""
    check_search_settings(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    beam = dict(length_penalty=length_penalty, early_stopping="never") if num_beams > 1 else {}
    generation_config = GenerationConfig(
        num_beams=num_beams,
        **beam,
        max_new_tokens=max_new_tokens,
        decoder_start_token_id=config.decoder_start_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
        **{LENGTH_PENALTY_TYPE: "gnmt", MAX_LENGTH_OFFSET_FIELD: max_length_offset},
    )
    try:
        generation_config.validate(strict=True)
    except ValueError as error:  # several lines: one
        problems = "; ".join(line.strip("- ") for line in str(error).splitlines() if line.startswith("- "))
        raise ValueError(
            f"num_beams={num_beams} gives a generation config transformers refuses: {problems}"
        ) from error
    return generation_config


def check_generation_settings(*, flag: bool = False, **search: object) -> None:
    """Refuse, before any work, search settings that `check_search_settings` refuses or that would give a generation
    config transformers refuses to save (`paper_generation_config`): what a training run exports at its end."""
    check_search_settings(flag=flag, **search)
    from ..configuration_vanilla_transformer import VanillaTransformerConfig

    given = {name: value for name, value in search.items() if value is not None}
    paper_generation_config(VanillaTransformerConfig(), **given)


def check_search_settings(*, where: str = "", flag: bool = False, required: bool = False, **settings: object) -> None:
    """Raise a ValueError naming the first of `settings` that cannot work, e.g. ``num_beams must be at least 1, got
    num_beams=0``: ``num_beams`` must be an integer of at least 1, ``max_length_offset`` an integer of at least 0
    (``True`` and ``4.0`` are not integers), ``length_penalty`` a finite, non-negative number (NaN, infinity and
    alpha < 0 make GNMT's penalty rank hypotheses backwards or not at all). None values are not checked, unless
    `required` (a search needs every one); `where` goes before the message; `flag` names the settings as command-line
    options (``--num-beams``)."""
    for name, value in settings.items():
        integer = name != "length_penalty"
        if value is None and not required:
            continue
        if value is None:
            problem = "must be given"
        elif isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
            problem = "must be an integer" if integer else "must be a number"
        elif integer:
            least = 1 if name == "num_beams" else 0
            problem = None if value >= least else ("must be at least 1" if least else "must be non-negative")
        else:
            problem = None if math.isfinite(value) and value >= 0 else "must be finite and non-negative"
        if problem is not None:
            label = "--" + name.replace("_", "-") if flag else name
            raise ValueError(f"{where}{label} {problem}, got {label}={value!r}")


def _check_search_arguments(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    num_beams: int,
    length_penalty: float,
    max_length_offset: int,
) -> None:
    """Reject what would make the search return garbage: a NaN penalty, a negative length, left padding."""
    search = dict(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    check_search_settings(required=True, **search)
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


def check_offset_within_positions(config, max_length_offset: int) -> None:
    """Refuse a ``max_length_offset`` beyond the model's positions, which no translation can reach (each stops at
    ``max_position_embeddings``); a number too large for the search's integers: a SettingError naming it."""
    positions = getattr(config, "max_position_embeddings", None)
    if positions is not None and max_length_offset > positions:
        refusal = (
            f"{{0}}={max_length_offset:,} is beyond the model's max_position_embeddings={positions:,}, the longest "
            f"output: pass {{0}} of at most {positions:,}"
        )
        raise SettingError(refusal.format("max_length_offset"), refusal.format("--max-length-offset"))


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
    (``serving.step_decoders.step_decoder``: this package's incremental decoder, or one forward pass per step of any
    other).

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
    check_offset_within_positions(model.config, max_length_offset)
    config = model.config
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if input_ids.shape[0] == 0:  # no sentences: no translations
        return torch.full((0, 1), config.decoder_start_token_id, dtype=input_ids.dtype, device=input_ids.device)
    sources = attention_mask.sum(1)
    limit = getattr(config, "max_position_embeddings", None) or int(sources.max()) + max_length_offset
    max_lengths = output_limits(sources, max_length_offset, limit)
    check_search_memory(config, *input_ids.shape, num_beams, int(max_lengths.max()), input_ids.device)
    decoder = step_decoder(model, input_ids, attention_mask, num_beams, int(max_lengths.max()))
    fill = config.pad_token_id if config.pad_token_id is not None else config.eos_token_id
    return beam_search(
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
    other encoder-decoders one forward pass per step (``serving.step_decoders.step_decoder``).

    Defaults are the paper's: beam 4, GNMT length penalty alpha = 0.6, at most input length + 50 output tokens.
    The model is put in eval mode for the call and given back in the mode it came in.

    Args:
        model: The translation model.
        tokenizer: Its tokenizer; it must append ``</s>`` to sources, as the training data did.
        sentences: Source sentences.
        num_beams, length_penalty, max_length_offset: See `translate_ids`.
        batch_size: Sentences per batch (each takes `num_beams` rows in the decoder).
        show_progress: Show a progress bar over batches (none for no sentences).

    Returns:
        The translations, detokenized, in the order of `sentences`.

    Raises:
        ValueError: Before translating anything: a bad search setting (`check_search_settings`), a long sentence.
    """
    search = dict(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    stream = translate_stream(
        model, tokenizer, sentences, batch_size=batch_size, show_progress=show_progress, **search
    )
    return list(stream)


def translate_stream(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    *,
    num_beams: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
    batch_size: int = 32,
    window: int | None = None,
    show_progress: bool = False,
) -> Iterator[str]:
    """`translate`, yielding each translation in the order of `sentences` as soon as it and those before it are made:
    the sentences are taken `window` at a time (None: all at once, as `translate`), each window in batches of
    similar length, so that a caller writing what it gets keeps the translations of every window finished when it is
    interrupted. Every sentence is encoded and checked before the first is translated.

    Raises:
        ValueError: Before translating anything: a bad search setting (`check_search_settings`), a long sentence, a
            `window` below 1.
    """
    search = dict(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    check_search_settings(required=True, **search)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got batch_size={batch_size}")
    if window is not None and window < 1:
        raise ValueError(f"window must be at least 1, got window={window}")
    encoded = encode_sources(tokenizer, sentences, getattr(model.config, "max_position_embeddings", None))
    searched = set(with_content(tokenizer, sentences, encoded))
    return _translate_windows(
        model, tokenizer, encoded, searched, search, batch_size, window or max(len(encoded), 1), show_progress
    )


def _translate_windows(
    model, tokenizer, encoded, searched: set[int], search, batch_size: int, window: int, show_progress: bool
):
    """The generator of `translate_stream`, once its arguments are checked. A sentence of no tokens (an empty line,
    not in `searched`) is translated as "", unsearched (`with_content`)."""
    windows = [range(first, min(first + window, len(encoded))) for first in range(0, len(encoded), window)]
    batches = sum(-(-sum(1 for i in span if i in searched) // batch_size) for span in windows)
    with _eval_mode(model), tqdm(total=batches, desc="translating", disable=not (show_progress and batches)) as bar:
        for span in windows:
            # Longest first: similar lengths share a batch (little padding), and memory problems show at once.
            order = sorted((i for i in span if i in searched), key=lambda i: len(encoded[i]), reverse=True)
            translations = dict.fromkeys(span, "")
            for start in range(0, len(order), batch_size):
                indices = order[start : start + batch_size]
                batch = _right_padded(tokenizer, [encoded[i] for i in indices], model.device)
                output = translate_ids(model, batch["input_ids"], batch["attention_mask"], **search)
                texts = tokenizer.batch_decode(output, skip_special_tokens=True)
                translations.update(zip(indices, texts, strict=True))
                bar.update()
            yield from (translations[i] for i in span)


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
    how the search proceeds. The same search as `translate`, so `text` is its translation (of an empty or blank line:
    no step, and "")."""
    search = dict(num_beams=num_beams, length_penalty=length_penalty, max_length_offset=max_length_offset)
    check_search_settings(required=True, **search)
    encoded = encode_sources(tokenizer, [sentence], getattr(model.config, "max_position_embeddings", None))
    if not with_content(tokenizer, [sentence], encoded):  # an empty line: no search, as in `translate`
        return BeamTrace([], [model.config.decoder_start_token_id], "")
    steps: list[BeamStep] = []
    finished: list[tuple[list[int], float, float]] = []  # every one so far, across steps

    def observe(length: int, beams: Beams) -> None:
        steps.append(_beam_step(beams, length, length_penalty, finished))

    with _eval_mode(model):
        batch = _right_padded(tokenizer, encoded, model.device)
        output = translate_ids(model, batch["input_ids"], batch["attention_mask"], **search, observer=observe)
    return BeamTrace(steps, output[0].tolist(), tokenizer.decode(output[0], skip_special_tokens=True))


def _beam_step(beams: Beams, length: int, alpha: float, finished: list) -> BeamStep:
    """The `BeamStep` of the one sentence of `beams` after `length` tokens; adds those that finished at this step
    to `finished`."""
    live = [
        (tokens[: 1 + length], log_prob)
        for tokens, log_prob in zip(beams.live[0].tolist(), beams.live_scores[0].tolist(), strict=True)
        if log_prob > MASKED / 2  # a real hypothesis: after a step where several ended, fewer than k may live
    ]
    finished_now = (beams.finished_lengths[0] == length) & beams.is_finished[0]  # joined the k best at this step
    for j in finished_now.nonzero().flatten().tolist():
        score = float(beams.finished_scores[0, j])
        finished.append(
            (beams.finished[0, j, : 1 + length].tolist(), score * gnmt_length_penalty(length, alpha), score)
        )
    finished.sort(key=lambda hypothesis: -hypothesis[2])
    return BeamStep(length, live, list(finished))


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


ENCODE_CHUNK_CHARS = 1 << 16
"""The most characters of sentences the tokenizer encodes at once (one sentence, however long, at least): it holds
some hundred bytes per token, so that a whole input of long lines, encoded at once, would not fit in memory."""


def encode_sources(tokenizer: PreTrainedTokenizerBase, sentences: Sequence[str], limit: int | None) -> list[list[int]]:
    """The token ids of `sentences`, encoded `ENCODE_CHUNK_CHARS` at a time, each checked against the model's
    positions `limit` as it comes (`_check_source_lengths`): a sentence too long is named before the next is
    encoded, and the tokenizer never holds more than a chunk. Every engine's path encodes with it (`translate`,
    ``with_ctranslate2.translate_ctranslate2``), so that they refuse the same sentences."""
    encoded: list[list[int]] = []
    start = 0
    while start < len(sentences):
        end, size = start + 1, len(sentences[start])
        while end < len(sentences) and size + len(sentences[end]) <= ENCODE_CHUNK_CHARS:
            size, end = size + len(sentences[end]), end + 1
        ids = tokenizer(list(sentences[start:end]), verbose=False)["input_ids"]  # too long: named below
        _check_source_lengths(ids, limit, first=start + 1)
        encoded.extend(ids)
        start = end
    return encoded


def with_content(
    tokenizer: PreTrainedTokenizerBase, sentences: Sequence[str], encoded: Sequence[Sequence[int]]
) -> list[int]:
    """The indices of the `sentences` that hold something to translate: not blank, and encoded (`encoded`) with a
    token besides the special ones (the ``</s>`` every source ends with). An empty or blank line's translation is ""
    on every engine, unsearched: the model never saw an empty source in training, and what it makes of a lone
    ``</s>`` (or of a space) translates nothing."""
    special = set(tokenizer.all_special_ids)
    return [
        i
        for i, (sentence, ids) in enumerate(zip(sentences, encoded, strict=True))
        if sentence.strip() and any(token not in special for token in ids)
    ]


def _check_source_lengths(encoded: Sequence[Sequence[int]], limit: int | None, first: int = 1) -> None:
    """Name the first sentence longer than the model's positions, before any is translated; `first` is the number
    of the first of `encoded`."""
    for number, ids in enumerate(encoded, start=first):
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
    "check_generation_settings",
    "check_search_memory",
    "check_search_settings",
    "encode_sources",
    "with_content",
    "paper_generation_config",
    "trace_beam_search",
    "translate",
    "translate_ids",
]
