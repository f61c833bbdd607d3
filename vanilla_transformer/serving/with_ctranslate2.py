"""Serving with CTranslate2: a CTranslate2 model folder (``export.ctranslate2.export_ctranslate2``) loaded as a
`ctranslate2.Translator`, and translating with the paper's search run by CTranslate2's C++ beam search.

    translate_ctranslate2("runs/base-ct2", tokenizer, ["A man rides a bike."], beam_size=4)

CTranslate2's own search ranks finished hypotheses by ``log P / |Y| ** alpha`` (|Y| without ``</s>``), stops once
``round(k * patience)`` hypotheses have finished, live ones still able to win or not, and has one length limit per
call: on the numbers task it stopped 3 of 500 test sentences short (``...vierhundertvier`` for 93,444), the better
hypothesis finishing one step after its fourth finished one. `search_ctranslate2` runs it without its stop rule and
length penalty and decides in Python, as the package's search does (``serving.search``): the same translations,
up to the floating-point rounding of CTranslate2's kernels (and int8's weights) against PyTorch's.

``ctranslate2`` is an optional dependency (``pip install vanilla-transformer[serve]``), imported when used.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..generation_vanilla_transformer import gnmt_length_penalty
from ..reading import check_links_inside, note_read, read_json
from .ctranslate2_file import check_model_bin
from .search import (
    LENGTH_PENALTY,
    MAX_LENGTH_OFFSET,
    NUM_BEAMS,
    check_search_settings,
    encode_sources,
    with_content,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def cpu_backend() -> str:
    """The CPU backend CTranslate2 picks for its matrix products: ``"mkl"`` or ``"onednn"``.

    Its rule: ``CT2_USE_MKL`` when set (read when ctranslate2 is imported), else MKL on Intel CPUs, oneDNN on others.
    """
    flag = os.environ.get("CT2_USE_MKL")
    if flag is not None and flag.strip():
        return "mkl" if flag.strip().lower() in ("1", "true", "on", "yes") else "onednn"
    vendor = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            vendor = next((line.split(":")[1].strip() for line in cpuinfo if line.startswith("vendor_id")), "")
    except OSError:  # not Linux: read the platform's own description
        import platform

        vendor = "GenuineIntel" if "intel" in platform.processor().lower() else ""
    return "mkl" if vendor == "GenuineIntel" else "onednn"


def import_ctranslate2():
    """The ``ctranslate2`` module, or an ImportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError(
            "CTranslate2 is not installed: pip install ctranslate2 (or vanilla-transformer[serve])"
        ) from error
    return ctranslate2


COMPUTE_TYPES = {"fp32": "default", "bf16": "bfloat16", "fp16": "float16"}
"""CTranslate2's compute type for each ``--dtype``: bf16 and fp16 are its bfloat16 and float16; fp32, the default,
keeps the export's own type (float32, or the int8 an ``export-ctranslate2 --quantization int8`` stored)."""


def compute_type_of(dtype: str, device: str) -> str:
    """CTranslate2's compute type for ``--dtype`` `dtype` on `device` (`COMPUTE_TYPES`), or a ValueError naming the
    option where CTranslate2 does not compute that type there (bfloat16 and float16 need a GPU: on a CPU it computes
    float32, int16 and int8), before any model is read."""
    compute_type = COMPUTE_TYPES[dtype]
    if compute_type == "default":
        return compute_type
    supported = import_ctranslate2().get_supported_compute_types(device)
    if compute_type not in supported:
        raise ValueError(
            f"--dtype {dtype}: CTranslate2 does not compute {compute_type} on {device} here (it computes "
            f"{', '.join(sorted(supported))}); pass --dtype fp32, which decodes in the export's own type"
        )
    return compute_type


def load_translator(
    model_dir: str | os.PathLike, *, device: str = "cpu", compute_type: str = "default", threads: int = 0
):
    """A `ctranslate2.Translator`; ``threads`` sets its intra-op threads (0: CTranslate2's default), at most this
    machine's CPUs (`check_threads`). A folder holding a link out of itself is refused (`check_links_inside`), and
    so is a damaged ``model.bin`` (`check_model_bin`), before CTranslate2 reads anything."""
    check_threads(threads)
    check_links_inside(model_dir, "CTranslate2 folder")
    ct2 = import_ctranslate2()
    from ctranslate2.specs.model_spec import CURRENT_BINARY_VERSION

    note_read(model_dir, f"the CTranslate2 folder {model_dir}")  # an output must not replace it (`reading`)
    check_model_bin(model_dir, CURRENT_BINARY_VERSION)
    return ct2.Translator(str(model_dir), device=device, compute_type=compute_type, intra_threads=threads)


def check_threads(threads: int) -> None:
    """Raise a ValueError unless `threads` is an integer from 0 (CTranslate2's default) to this machine's CPU count:
    CTranslate2 starts every thread it is asked for, and a million of them crashed the process (signal 11)."""
    cpus = os.cpu_count() or 1
    if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= cpus:
        raise ValueError(f"threads={threads!r}: CTranslate2 takes 0 (its default) to this machine's {cpus} CPUs")


VOCABULARY_FILES = ("shared_vocabulary.json", "target_vocabulary.json")
"""Where a CTranslate2 folder keeps its tokens by id, as its converter writes them (one list for both sides, else
the target side's; the export shares one vocabulary)."""


def check_tokenizer(model_dir: str | os.PathLike, tokenizer: PreTrainedTokenizerBase) -> None:
    """Raise a ValueError unless `tokenizer` maps ids to the tokens of the CTranslate2 folder's vocabulary, which the
    export took from the model's tokenizer: CTranslate2 reads tokens, so another tokenizer's would be translated as
    other words, garbage without an error. Ids past the tokenizer's (a vocabulary rounded up) are not compared."""
    folder = Path(model_dir)
    path = next((folder / name for name in VOCABULARY_FILES if (folder / name).is_file()), None)
    if path is None:
        raise ValueError(f"{folder} holds no {' or '.join(VOCABULARY_FILES)}: not a CTranslate2 export")
    try:
        exported = read_json(path, "CTranslate2 vocabulary", inside=folder, note=True)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read as a JSON list of tokens: {error}") from error
    size = len(tokenizer)
    if not isinstance(exported, list) or len(exported) < size:
        count = len(exported) if isinstance(exported, list) else "no"
        raise ValueError(
            f"the tokenizer is not the one of the CTranslate2 export {folder}: it has {size:,} tokens, the export "
            f"{count} in {path.name} (give --model the folder the export was made from)"
        )
    tokens = tokenizer.convert_ids_to_tokens(list(range(size)))
    mismatch = next((i for i in range(size) if tokens[i] != exported[i]), None)
    if mismatch is not None:
        raise ValueError(
            f"the tokenizer is not the one of the CTranslate2 export {folder}: token {mismatch} is "
            f"{tokens[mismatch]!r} there and {exported[mismatch]!r} in {path.name} (give --model the folder the "
            f"export was made from)"
        )


def check_num_beams(num_beams: int, vocabulary_size: int) -> None:
    """Raise a ValueError naming ``--num-beams`` when it is more than the vocabulary size: CTranslate2's beam search
    takes its first candidates from one hypothesis's vocabulary, and sizes its lists by the beam (10**9 beams
    ended in CTranslate2's own error, about an option this package sets)."""
    if num_beams > vocabulary_size:
        raise ValueError(
            f"--num-beams {num_beams:,} is more than the CTranslate2 path searches: at most the vocabulary size, "
            f"{vocabulary_size:,}"
        )


def translate_ctranslate2(
    model_dir,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    *,
    beam_size: int = NUM_BEAMS,
    length_penalty: float = LENGTH_PENALTY,
    max_length_offset: int = MAX_LENGTH_OFFSET,
    max_decoding_length: int | None = None,
    batch_size: int = 32,
    device: str = "cpu",
    compute_type: str = "default",
    threads: int = 0,
    report: SearchReport | None = None,
) -> list[str]:
    """Translate `sentences` with an exported model and the paper's search (`search_ctranslate2`): tokenize, search
    on CTranslate2, detokenize. The defaults are section 6.1's, as for `serving.search.translate`.

    Args:
        model_dir: A directory written by :func:`export_ctranslate2`, or a loaded `ctranslate2.Translator`.
        tokenizer: The model's tokenizer (it appends ``</s>`` to each source, as in training).
        sentences: Source sentences.
        beam_size: k; 1 is a beam of one, as ``translate(num_beams=1)``.
        length_penalty: GNMT's alpha; 0 ranks by plain log-probability.
        max_length_offset: Each sentence generates at most its number of source tokens plus this many tokens.
        max_decoding_length: And never more than this many (the model's ``max_position_embeddings``); ``None``: no
            other limit.
        batch_size: Sentences per CTranslate2 batch.
        device, compute_type, threads: Passed to `ctranslate2.Translator` when `model_dir` is a path.
        report: Filled with what the search did (`SearchReport`).

    Returns:
        One translation per sentence, special tokens removed; "" for an empty line, as on the PyTorch path.

    Raises:
        ValueError: Before translating anything: a bad search setting, more beams than the vocabulary has tokens,
            a tokenizer that is not the export's (`check_tokenizer`, when `model_dir` is a path), a sentence longer
            than `max_decoding_length` tokens (the model's positions, refused as the PyTorch path refuses it).
    """
    search = dict(num_beams=beam_size, length_penalty=length_penalty, max_length_offset=max_length_offset)
    check_search_settings(required=True, **search)
    check_num_beams(beam_size, len(tokenizer))
    translator = model_dir
    if isinstance(model_dir, (str, os.PathLike)):
        check_tokenizer(model_dir, tokenizer)
        translator = load_translator(model_dir, device=device, compute_type=compute_type, threads=threads)
    # The PyTorch path's encoding: the same sentences refused as longer than the model's positions, and an empty
    # line translated as "" (`with_content`).
    encoded = encode_sources(tokenizer, sentences, max_decoding_length)
    searched = with_content(tokenizer, sentences, encoded)
    sources = [tokenizer.convert_ids_to_tokens(encoded[i]) for i in searched]
    limits = [len(source) + max_length_offset for source in sources]
    if max_decoding_length is not None:
        limits = [min(limit, max_decoding_length) for limit in limits]
    outputs = search_ctranslate2(
        translator,
        sources,
        limits,
        num_beams=beam_size,
        length_penalty=length_penalty,
        end_token=tokenizer.eos_token,
        batch_size=batch_size,
        report=report,
    )
    translations = [""] * len(encoded)
    for i, tokens in zip(searched, outputs, strict=True):
        translations[i] = tokenizer.decode(tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True)
    return translations


@dataclass
class SearchReport:
    """What `search_ctranslate2` did, for a benchmark or a test: the sentences it searched in each round (the first,
    then the re-searches of those its proof did not settle) and the decoder steps it took."""

    searched: list[int] = field(default_factory=list)
    """Sentences searched in each round: ``[all, re-searched once, twice, ...]``."""
    sampled: int = 0
    """Sentences decoded greedily (`sample_lengths`), then searched before the others to learn their lengths."""
    beam_steps: int = 0
    """Sentence-steps of beam search: each search's sentences times the length it ran to."""
    greedy_steps: int = 0
    """Sentence-steps of the greedy sample (each to its own end)."""

    @property
    def re_searched(self) -> int:
        """Searches after the first: sentences its proof could not settle where they were first searched."""
        return sum(self.searched[1:])


SAMPLE_SIZE = 32
"""`sample_lengths` decodes at most this many sentences greedily, and `search_ctranslate2` searches them first, to
learn how long to search the others."""


def search_ctranslate2(
    translator,
    sources: Sequence[Sequence[str]],
    max_lengths: Sequence[int],
    *,
    num_beams: int,
    length_penalty: float,
    end_token: str,
    batch_size: int = 32,
    report: SearchReport | None = None,
) -> list[list[str]]:
    """The package's beam search (``generation_vanilla_transformer.beam_search``, ``early_stopping="never"``) run by
    CTranslate2: for each source, the hypothesis of the best score ``log P / gnmt_length_penalty(|Y|, alpha)``,
    |Y| counting ``</s>``, of at most its own `max_lengths` tokens. Returns its tokens, ``</s>`` included where
    it ended with one (not where its length limit cut it).

    CTranslate2 extends hypotheses as the package does: at each step the 2k best extensions of the k live
    hypotheses, of which those among the k best that end in ``</s>`` finish and the k best others live on. So up to
    any length it finishes the same hypotheses. Its own search ranks them by ``log P / |Y| ** alpha``, stops after
    ``round(k * patience)`` finished ones and has one length limit per call; here it is asked instead for the
    plain log P of every hypothesis it finishes, never to stop early, up to a length m (one call per m), and its
    answer is proven from those scores (`settle`):

    * at m, the k best candidates of the last step are returned too: the live hypotheses are those not ending in
      ``</s>`` (or, where all k ended, hypotheses below the worst of them). Every hypothesis that would finish later
      extends one of them, and log-probabilities are at most 0, so none can score more than the best live log P
      divided by GNMT's penalty at the sentence's own limit. Where the best finished score reaches that, it is the
      package's answer (the package's search, which stops exactly, ends on it whether it stops before m or after);
    * at the sentence's own limit every candidate of the last step finishes, as in the package's search;
    * an unsettled sentence is searched again, batched with the others, from the start (CTranslate2 cannot resume),
      to the length at which its best live log P, falling at the pace it fell so far, could no longer win (at least
      one more step, at most its limit; twice the length where nothing has finished yet).

    The first m is learnt from a sample (`sample_lengths`): at most `SAMPLE_SIZE` sentences, decoded greedily, are
    searched first from their greedy length, and every other sentence from the lengths at which the sampled ones of
    its source length were settled (`predict_length`): their best length and the steps the proof needed past it. A good m is the length at which the best hypothesis finishes: on the default
    job's model, where the proof held there for 500 of 500 test sentences, the search takes fewer beam steps than
    CTranslate2's own stop rule (see docs/serving.md for the steps and the times).
    """
    report = report if report is not None else SearchReport()
    limits = [int(limit) for limit in max_lengths]
    outputs: list[list[str] | None] = [None] * len(sources)
    if not sources:
        return []
    search = dict(num_beams=num_beams, length_penalty=length_penalty, end_token=end_token, batch_size=batch_size)
    greedy = sample_lengths(translator, sources, limits, end_token, batch_size, report)
    # With one beam the best hypothesis is the only candidate at its own length: one step more shows the live one.
    extra = 1 if num_beams == 1 else 0
    settled = search_rounds(
        translator,
        sources,
        limits,
        {i: min(limits[i], n + extra) for i, n in greedy.items()},
        outputs,
        report,
        **search,
    )
    rest = {i: predict_length(sources, i, settled, limits[i]) for i in range(len(sources)) if i not in greedy}
    search_rounds(translator, sources, limits, rest, outputs, report, **search)
    return outputs


def search_rounds(
    translator, sources, limits: list[int], lengths: dict[int, int], outputs: list, report: SearchReport, **search
) -> dict[int, int]:
    """Search the sentences of `lengths` (index -> first length) to their first lengths, one call per length, then
    those `settle` leaves open again, longer, until every one is settled; their answers go to `outputs`. Returns the
    length at which each was settled."""
    num_beams, alpha, end_token, batch_size = (search[name] for name in ("num_beams", "length_penalty", "end_token",
                                                                        "batch_size"))  # fmt: skip
    lengths, settled, pending, rounds = dict(lengths), {}, sorted(lengths), 0
    while pending:
        if len(report.searched) <= rounds:
            report.searched.append(0)
        report.searched[rounds] += len(pending)
        groups: dict[int, list[int]] = {}
        for i in pending:
            groups.setdefault(lengths[i], []).append(i)
        pending, rounds = [], rounds + 1
        for length, members in sorted(groups.items()):
            results = translator.translate_batch(
                [list(sources[i]) for i in members],
                **exhaustive_search(num_beams, length, end_token),
                max_batch_size=batch_size,
            )
            report.beam_steps += length * len(members)
            for i, result in zip(members, results, strict=True):
                outputs[i], lengths[i] = settle(result, length, limits[i], alpha, end_token)
                if outputs[i] is None:
                    pending.append(i)
                else:
                    settled[i] = length
    return settled


def proof_lengths(
    translator,
    sources,
    max_lengths: Sequence[int],
    *,
    num_beams: int,
    length_penalty: float,
    end_token: str,
    batch_size: int = 32,
) -> list[int]:
    """For each source, the shortest length m at which `settle` proves its answer from a search to m, found by
    bisection (every answer is proven at its limit; each probe is one call per length, batched): the steps that
    `search_ctranslate2` would take if it knew every sentence's length in advance, the least any search that
    predicts lengths and cannot resume can take (past it the proof holds at every length: the best live log P only
    falls, the best finished score only rises). A profile of the search (``scripts/benchmark_decoding.py --trained``),
    not a way to translate: finding them takes several searches."""
    limits = [int(limit) for limit in max_lengths]
    unproven, proven = [0] * len(sources), list(limits)
    while probes := {i: (unproven[i] + proven[i]) // 2 for i in range(len(sources)) if proven[i] - unproven[i] > 1}:
        groups: dict[int, list[int]] = {}
        for i, length in probes.items():
            groups.setdefault(length, []).append(i)
        for length, members in groups.items():
            results = translator.translate_batch(
                [list(sources[i]) for i in members],
                **exhaustive_search(num_beams, length, end_token),
                max_batch_size=batch_size,
            )
            for i, result in zip(members, results, strict=True):
                answer, _ = settle(result, length, limits[i], length_penalty, end_token)
                if answer is None:
                    unproven[i] = length
                else:
                    proven[i] = length
    return proven


def sample_lengths(
    translator, sources, limits: list[int], end_token: str, batch_size: int, report: SearchReport
) -> dict[int, int]:
    """The sample (index -> greedy translation's length) from which `search_ctranslate2` learns how long to search:
    at most `SAMPLE_SIZE` sentences spread over the source lengths, decoded greedily (to the longest limit: each
    ends at its own ``</s>``)."""
    by_length = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    count = min(len(sources), SAMPLE_SIZE)
    sample = sorted({by_length[(2 * j + 1) * len(sources) // (2 * count)] for j in range(count)})
    greedy = translator.translate_batch(
        [list(sources[i]) for i in sample],
        beam_size=1,
        max_decoding_length=max(limits[i] for i in sample),
        min_decoding_length=0,
        end_token=end_token,
        return_end_token=True,
        max_batch_size=batch_size,
    )
    known = {i: len(result.hypotheses[0]) for i, result in zip(sample, greedy, strict=True)}
    report.sampled, report.greedy_steps = len(sample), sum(known.values())
    return known


def predict_length(sources, i: int, settled: dict[int, int], limit: int) -> int:
    """The length sentence `i` is first searched to: the lengths at which the sampled sentences of the nearest
    source length were settled (`settled`: their best length, and the steps the proof needed past it), scaled by
    the ratio of the source lengths; their upper median (a search too short costs a second one, a step too long
    costs a step). At least 1, at most `limit`."""
    source = len(sources[i])
    distance = min(abs(len(sources[j]) - source) for j in settled)
    near = [j for j in settled if abs(len(sources[j]) - source) == distance]
    guess = statistics.median_high(round(settled[j] * source / len(sources[j])) for j in near)
    return min(limit, max(1, guess))


def exhaustive_search(num_beams: int, length: int, end_token: str) -> dict:
    """`translate_batch` options for the search of `search_ctranslate2` up to `length` tokens: plain log P
    (``length_penalty=0``), ``</s>`` allowed from the first step, and every hypothesis it finishes returned, which
    also keeps it from stopping early (it stops once the best candidate has ended and ``num_hypotheses`` have
    finished, and at most k finish per step)."""
    count = num_beams * length + 1
    return dict(
        beam_size=num_beams,
        # With beam_size=1 CTranslate2 decodes greedily; a prefix bias (no effect without a target prefix) makes it
        # run its beam search with one beam, the package's search at k = 1.
        prefix_bias_beta=0.5 if num_beams == 1 else 0.0,
        num_hypotheses=count,
        patience=count / num_beams,
        length_penalty=0.0,
        max_decoding_length=length,
        min_decoding_length=0,
        end_token=end_token,
        return_end_token=True,
        return_scores=True,
    )


def settle(result, length: int, limit: int, alpha: float, end_token: str) -> tuple[list[str] | None, int]:
    """The best hypothesis of a search to `length` (see `search_ctranslate2`) and 0; or, where a longer one could
    still beat it, None and the length to search to next. The hypotheses of exactly `length` tokens are the k best
    candidates of the last step: finished where they end in `end_token` or where `length` is the sentence's
    `limit`, else live."""
    ranked = [
        (score / gnmt_length_penalty(len(tokens), alpha), score, tokens)
        for tokens, score in zip(result.hypotheses, result.scores, strict=True)
    ]
    finished = [hypothesis for hypothesis in ranked if length == limit or hypothesis[2][-1:] == [end_token]]
    best = max(finished, key=lambda hypothesis: hypothesis[0], default=None)
    if length == limit:
        return best[2], 0
    last = [(score, tokens) for _, score, tokens in ranked if len(tokens) == length]
    longer = min(limit, length + max(1, length // 4))
    if best is None or not last:  # nothing finished yet: a quarter longer
        return None, longer
    live = [score for score, tokens in last if tokens[-1] != end_token]
    # All k best candidates of the last step ended: every live hypothesis scores below the worst of them.
    bound = max(live) if live else min(score for score, _ in last)
    target = best[0] * gnmt_length_penalty(limit, alpha)  # the log P below which no live hypothesis can win
    if bound <= target:
        return best[2], 0
    if not live:  # one step more shows the live hypotheses' log P (always so with one beam)
        return None, length + 1
    if bound > best[1]:  # a live hypothesis is likelier than any finished one: the best has not finished yet
        return None, longer
    # The best live log P fell from 0 to `bound` in `length` steps: at that pace it reaches `target` at this length.
    estimate = math.ceil(length * target / bound) if bound < 0 else limit
    return None, min(limit, max(length + 1, estimate))


__all__ = [
    "COMPUTE_TYPES",
    "SAMPLE_SIZE",
    "VOCABULARY_FILES",
    "cpu_backend",
    "import_ctranslate2",
    "load_translator",
    "SearchReport",
    "check_num_beams",
    "check_threads",
    "check_tokenizer",
    "compute_type_of",
    "exhaustive_search",
    "predict_length",
    "proof_lengths",
    "sample_lengths",
    "search_rounds",
    "search_ctranslate2",
    "settle",
    "translate_ctranslate2",
]
