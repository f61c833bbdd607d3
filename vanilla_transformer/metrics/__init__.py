"""Translation metrics: sacreBLEU's BLEU and chrF, and exact match.

Training and evaluation code call :func:`compute_bleu`, :func:`compute_chrf`
and :func:`exact_match` directly. The same BLEU and chrF are also shipped as
`evaluate` modules inside this package, for code written against
``evaluate.load``; they load offline, unlike ``evaluate.load("sacrebleu")``,
which fetches its module from the Hub:

>>> bleu = load_bleu_metric()
>>> round(bleu.compute(predictions=["Das Haus ist klein."], references=["Das Haus ist klein."])["score"], 2)
100.0

Every score is on sacreBLEU's 0 to 100 scale. BLEU and chrF are corpus-level,
cased, with one reference per hypothesis, and come with sacreBLEU's signature
(for BLEU ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:...``),
which should be reported next to the score.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sacrebleu.metrics import BLEU, CHRF
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

if TYPE_CHECKING:  # imported where a module is loaded: `evaluate` brings in `datasets`, pandas and pyarrow
    import evaluate

BLEU_METRIC_PATH = Path(__file__).resolve().parent / "bleu"
"""Directory of the `evaluate` BLEU module."""

CHRF_METRIC_PATH = Path(__file__).resolve().parent / "chrf"
"""Directory of the `evaluate` chrF module."""


def compute_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, tokenize: str = "13a", lowercase: bool = False
) -> dict[str, Any]:
    """Corpus BLEU of detokenized hypotheses against one reference each.

    Args:
        hypotheses: System outputs.
        references: One reference per hypothesis.
        tokenize: sacreBLEU tokenizer; ``"13a"`` is the WMT standard.
        lowercase: Score case-insensitively.

    Returns:
        ``score``, ``signature``, the n-gram ``counts``, ``totals`` and
        ``precisions``, the brevity penalty ``bp``, and ``sys_len``/``ref_len``.
    """
    _check_lengths(hypotheses, references)
    bleu = BLEU(tokenize=tokenize, lowercase=lowercase)
    result = bleu.corpus_score(list(hypotheses), [list(references)])
    return {"score": result.score, "signature": str(bleu.get_signature()), **bleu_figures(result)}


def bleu_figures(result: Any) -> dict[str, Any]:
    """What a corpus BLEU is made of, from a sacreBLEU ``BLEUScore``: the n-gram ``counts``, ``totals`` and
    ``precisions``, the brevity penalty ``bp``, and ``sys_len``/``ref_len`` in tokens."""
    return {
        "counts": result.counts,
        "totals": result.totals,
        "precisions": result.precisions,
        "bp": result.bp,
        "sys_len": result.sys_len,
        "ref_len": result.ref_len,
    }


def compute_chrf(
    hypotheses: Sequence[str], references: Sequence[str], *, word_order: int = 0, lowercase: bool = False
) -> dict[str, Any]:
    """Corpus chrF of hypotheses against one reference each.

    Args:
        hypotheses: System outputs.
        references: One reference per hypothesis.
        word_order: Word n-gram order; 0 gives chrF, 2 gives chrF++.
        lowercase: Score case-insensitively.

    Returns:
        ``score``, ``signature``, ``char_order``, ``word_order`` and ``beta``.
    """
    _check_lengths(hypotheses, references)
    chrf = CHRF(word_order=word_order, lowercase=lowercase)
    result = chrf.corpus_score(list(hypotheses), [list(references)])
    return {
        "score": result.score,
        "signature": str(chrf.get_signature()),
        "char_order": result.char_order,
        "word_order": result.word_order,
        "beta": result.beta,
    }


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Percentage (0 to 100) of hypotheses identical to their reference, compared as they are."""
    _check_lengths(hypotheses, references)
    return 100.0 * sum(hyp == ref for hyp, ref in zip(hypotheses, references, strict=True)) / len(hypotheses)


def bleu_applies(references: Sequence[str]) -> bool:
    """Whether BLEU can be above 0 on `references`: some reference holds 4 tokens (sacreBLEU's 13a tokenization).
    Without one, as on number words (``dreihunderteinundzwanzig``), there is no 4-gram and BLEU is 0 by
    construction, whatever the translations."""
    tokenize = Tokenizer13a()
    return any(len(tokenize(reference).split()) >= 4 for reference in references)


def selection_metric(references: Sequence[str]) -> str:
    """The score to choose models by on `references`: ``bleu`` where it applies (`bleu_applies`), else
    ``exact_match``."""
    return "bleu" if bleu_applies(references) else "exact_match"


def load_bleu_metric(**kwargs: Any) -> evaluate.EvaluationModule:
    """The shipped BLEU module, ``evaluate.load(BLEU_METRIC_PATH, **kwargs)``; works offline."""
    import evaluate

    return evaluate.load(str(BLEU_METRIC_PATH), **kwargs)


def load_chrf_metric(**kwargs: Any) -> evaluate.EvaluationModule:
    """The shipped chrF module, ``evaluate.load(CHRF_METRIC_PATH, **kwargs)``; works offline."""
    import evaluate

    return evaluate.load(str(CHRF_METRIC_PATH), **kwargs)


def _check_lengths(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(
            f"need one reference per hypothesis, got len(hypotheses)={len(hypotheses)} "
            f"and len(references)={len(references)}"
        )
    if not hypotheses:
        raise ValueError("hypotheses and references are empty")
