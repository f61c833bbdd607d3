"""The paper's BLEU: tokenized, compound-split corpus BLEU, the figure of Vaswani et al.'s Table 2 (27.3 base, 28.4
big on newstest2014), as tensor2tensor's ``get_ende_bleu.sh`` and fairseq's ``compound_split_bleu.sh`` compute it:

1. both sides Moses-tokenized (``tokenizer.perl -l de`` with its defaults: sacremoses, its Python port);
2. each hyphen between two non-space characters split off as ``##AT##-##AT##``
   (``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``: "rich-text" becomes "rich ##AT##-##AT## text");
3. corpus BLEU on those tokens, as ``multi-bleu.perl``: one reference, cased, split on whitespace and nothing more,
   no smoothing (BLEU is 0 when some n-gram order has no match).

It is not sacreBLEU's detokenized BLEU (`vanilla_transformer.metrics.compute_bleu`): Moses splits punctuation and
the compound split turns one hyphenated word into three tokens, so the two differ on the same translations, and only
this one compares with the paper's figures.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

from sacrebleu.metrics import BLEU

from . import bleu_figures

COMPOUND_SPLIT = (re.compile(rb"(\S)-(\S)"), rb"\1 ##AT##-##AT## \2")
"""The split of ``get_ende_bleu.sh``, on bytes as Perl's ``-p`` reads them: ``\\S`` is the ASCII non-space there
(a hyphen next to a no-break space is split as Perl splits it), and matches do not overlap ("a-b-c" splits once)."""


def recipe(lang: str) -> str:
    """The recipe's name as outputs and ``results.json`` report it, with the versions that computed it."""
    return (
        f"tokenized BLEU as get_ende_bleu.sh: Moses tokenizer -l {lang} (sacremoses {version('sacremoses')}), "
        f"##AT##-##AT## compound split, multi-bleu corpus BLEU (cased, no smoothing; sacrebleu {version('sacrebleu')}"
        ", tokenize=none)"
    )


@functools.cache
def _moses(lang: str):
    """sacremoses' Moses tokenizer, imported here, when the paper's BLEU is asked for: training and the benchmarks
    import this module, and a machine without sacremoses (a GPU image) still trains and scores sacreBLEU."""
    try:
        import sacremoses
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "the paper's compound-split BLEU needs sacremoses, from the 'train' extra: "
            'pip install "vanilla-transformer[train]"'
        ) from error
    return sacremoses.MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str) -> str:
    """`line` tokenized as ``tokenizer.perl -l lang`` does by default (its XML escaping included, as in the
    reference files of tensor2tensor: it maps characters one to one and changes no match)."""
    return _moses(lang).tokenize(line, return_str=True, escape=True)


def split_compounds(line: str) -> str:
    """`line` with each hyphen between two non-space characters split off as ``##AT##-##AT##`` (`COMPOUND_SPLIT`)."""
    pattern, replacement = COMPOUND_SPLIT
    return pattern.sub(replacement, line.encode("utf-8")).decode("utf-8")


def paper_tokens(line: str, lang: str) -> str:
    """What the paper's BLEU compares of a detokenized `line`: Moses tokens with compounds split."""
    return split_compounds(moses_tokenize(line, lang))


def compute_compound_split_bleu(
    hypotheses: Sequence[str], references: Sequence[str], *, lang: str = "de"
) -> dict[str, Any]:
    """The paper's BLEU of detokenized `hypotheses` against one detokenized reference each, in language `lang`.

    Returns:
        ``score`` (0 to 100), ``recipe`` (`recipe`), the n-gram ``counts``, ``totals`` and ``precisions``, the
        brevity penalty ``bp`` and ``sys_len``/``ref_len``, in tokens after the split.
    """
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(
            f"need one reference per hypothesis and at least one, got {len(hypotheses)} hypotheses and "
            f"{len(references)} references"
        )
    hyp_tokens = [paper_tokens(line, lang) for line in hypotheses]
    ref_tokens = [paper_tokens(line, lang) for line in references]
    result = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyp_tokens, [ref_tokens])
    return {"score": result.score, "recipe": recipe(lang), **bleu_figures(result)}


__all__ = [
    "COMPOUND_SPLIT",
    "compute_compound_split_bleu",
    "moses_tokenize",
    "paper_tokens",
    "recipe",
    "split_compounds",
]
