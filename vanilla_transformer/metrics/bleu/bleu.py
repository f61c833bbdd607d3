"""`evaluate` module for sacreBLEU's corpus BLEU, shipped with vanilla-transformer.

Load it with ``vanilla_transformer.metrics.load_bleu_metric()``. It delegates
to :func:`vanilla_transformer.metrics.compute_bleu`.
"""

import datasets
import evaluate

from vanilla_transformer.metrics import compute_bleu

_CITATION = """\
@inproceedings{post-2018-call,
    title = "A Call for Clarity in Reporting {BLEU} Scores",
    author = "Post, Matt",
    booktitle = "Proceedings of the Third Conference on Machine Translation: Research Papers",
    year = "2018",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W18-6319",
    pages = "186--191",
}
"""

_DESCRIPTION = """\
Corpus-level BLEU computed by sacreBLEU on detokenized text, with one reference
per prediction. The result includes sacreBLEU's signature, which records the
settings (tokenizer, case, smoothing, version) and should be reported with the
score.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): detokenized system outputs.
    references (list of str): one detokenized reference per prediction.
    tokenize (str): sacreBLEU tokenizer, default "13a".
    lowercase (bool): score case-insensitively, default False.
Returns:
    score (float): BLEU, 0 to 100.
    signature (str): sacreBLEU signature, e.g. "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0".
    counts, totals, precisions (lists): matching and total n-grams, and precisions, for n = 1..4.
    bp (float): brevity penalty.
    sys_len, ref_len (int): hypothesis and reference lengths in tokens.
Examples:
    >>> bleu = evaluate.load("path/to/vanilla_transformer/metrics/bleu")
    >>> round(bleu.compute(predictions=["Das Haus ist klein."], references=["Das Haus ist klein."])["score"], 2)
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Bleu(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W18-6319"],
        )

    def _compute(self, predictions, references, tokenize="13a", lowercase=False):
        return compute_bleu(predictions, references, tokenize=tokenize, lowercase=lowercase)
