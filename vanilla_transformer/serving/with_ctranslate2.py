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
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..atomic import check_links_inside
from ..generation_vanilla_transformer import gnmt_length_penalty
from .search import LENGTH_PENALTY, MAX_LENGTH_OFFSET, NUM_BEAMS, check_search_settings

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


def load_translator(
    model_dir: str | os.PathLike, *, device: str = "cpu", compute_type: str = "default", threads: int = 0
):
    """A `ctranslate2.Translator`; ``threads`` sets its intra-op threads (0: CTranslate2's default). A folder holding a
    link out of itself is refused (`check_links_inside`)."""
    check_links_inside(model_dir, "CTranslate2 folder")
    ct2 = import_ctranslate2()
    return ct2.Translator(str(model_dir), device=device, compute_type=compute_type, intra_threads=threads)


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

    Returns:
        One translation per sentence, special tokens removed.
    """
    search = dict(num_beams=beam_size, length_penalty=length_penalty, max_length_offset=max_length_offset)
    check_search_settings(required=True, **search)
    translator = model_dir
    if isinstance(model_dir, (str, os.PathLike)):
        translator = load_translator(model_dir, device=device, compute_type=compute_type, threads=threads)
    if not sentences:
        return []
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(list(sentences))["input_ids"]]
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
    )
    return [tokenizer.decode(tokenizer.convert_tokens_to_ids(tokens), skip_special_tokens=True) for tokens in outputs]


PROBE_MARGIN = 2
"""`search_ctranslate2` first searches each sentence up to its greedy translation's length + this many tokens."""


def search_ctranslate2(
    translator,
    sources: Sequence[Sequence[str]],
    max_lengths: Sequence[int],
    *,
    num_beams: int,
    length_penalty: float,
    end_token: str,
    batch_size: int = 32,
) -> list[list[str]]:
    """The package's beam search (``generation_vanilla_transformer.beam_search``, ``early_stopping="never"``) run by
    CTranslate2: for each source, the hypothesis of the best score ``log P / gnmt_length_penalty(|Y|, alpha)``,
    |Y| counting ``</s>``, of at most its own `max_lengths` tokens. Returns its tokens, ``</s>`` included where
    it ended with one (not where its length limit cut it).

    CTranslate2 extends hypotheses as the package does: at each step the 2k best extensions of the k live
    hypotheses, of which those among the k best that end in ``</s>`` finish and the k best others live on. So up to
    any length it finishes the same hypotheses. Its own search ranks them by ``log P / |Y| ** alpha``, stops after
    ``round(k * patience)`` finished ones and has one length limit per call; here it is asked instead for the
    plain log P of every hypothesis it finishes, never to stop early, up to a length m, and

    * a sentence is settled at m when its best live hypothesis there (CTranslate2 returns the k best candidates of
      its last step) cannot beat the best finished one even at the sentence's own limit:
      ``L / lp(limit) <= best``. Whatever finishes later scores at most that, so the best is the package's;
    * at the sentence's own limit every candidate of the last step finishes, as in the package's search;
    * an unsettled sentence is searched again, from the start (CTranslate2 cannot resume), to the length at which
      its best live log P, falling at the pace it fell so far, could no longer win (at least one more step, at most
      its limit; twice the length where nothing has finished yet).

    The first m is the sentence's greedy translation's length (one greedy pass over all sentences) + `PROBE_MARGIN`.
    Every sentence of a call runs to its m, past the point where the package's search would drop it, and some are
    searched twice: on the numbers task the beam steps were 0.8 to 1.3 times the package's search's, plus the
    greedy pass (see docs/serving.md).
    """
    limits = [int(limit) for limit in max_lengths]
    outputs: list[list[str] | None] = [None] * len(sources)
    lengths = _first_lengths(translator, sources, limits, end_token, batch_size)
    pending = list(range(len(sources)))
    while pending:
        groups: dict[int, list[int]] = {}
        for i in pending:
            groups.setdefault(lengths[i], []).append(i)
        pending = []
        for length, members in sorted(groups.items()):
            results = translator.translate_batch(
                [list(sources[i]) for i in members],
                **_exhaustive_search(num_beams, length, end_token),
                max_batch_size=batch_size,
            )
            for i, result in zip(members, results, strict=True):
                outputs[i], lengths[i] = _settle(result, length, limits[i], length_penalty, end_token)
                if outputs[i] is None:
                    pending.append(i)
    return outputs


def _first_lengths(translator, sources, limits: list[int], end_token: str, batch_size: int) -> list[int]:
    """The length each sentence is first searched to: its greedy translation's + `PROBE_MARGIN`, at most its limit
    (greedy decoding to the longest limit gives each sentence the tokens of its own, cut later)."""
    if not sources:
        return []
    greedy = translator.translate_batch(
        [list(source) for source in sources],
        beam_size=1,
        max_decoding_length=max(limits),
        min_decoding_length=0,
        end_token=end_token,
        return_end_token=True,
        max_batch_size=batch_size,
    )
    return [min(limit, len(result.hypotheses[0]) + PROBE_MARGIN) for result, limit in zip(greedy, limits, strict=True)]


def _exhaustive_search(num_beams: int, length: int, end_token: str) -> dict:
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


def _settle(result, length: int, limit: int, alpha: float, end_token: str) -> tuple[list[str] | None, int]:
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
    if best is None or not last:
        return None, min(limit, 2 * length)
    live = [score for score, tokens in last if tokens[-1] != end_token]
    # All k best candidates of the last step ended: every live hypothesis scores below the worst of them.
    bound = max(live) if live else min(score for score, _ in last)
    target = best[0] * gnmt_length_penalty(limit, alpha)  # the log P below which no live hypothesis can win
    if bound <= target:
        return best[2], 0
    # The best live log P fell from 0 to `bound` in `length` steps: at that pace it reaches `target` at this length.
    estimate = math.ceil(length * target / bound) if bound < 0 else limit
    return None, min(limit, max(length + 1, estimate))


__all__ = [
    "cpu_backend",
    "import_ctranslate2",
    "load_translator",
    "search_ctranslate2",
    "translate_ctranslate2",
]
