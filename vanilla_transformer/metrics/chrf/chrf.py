"""`evaluate` module for sacreBLEU's corpus chrF, shipped with vanilla-transformer.

Load it with ``vanilla_transformer.metrics.load_chrf_metric()``. It delegates
to :func:`vanilla_transformer.metrics.compute_chrf`.
"""

import datasets
import evaluate

from vanilla_transformer.metrics import compute_chrf

_CITATION = """\
@inproceedings{popovic-2015-chrf,
    title = "chr{F}: character n-gram {F}-score for automatic {MT} evaluation",
    author = "Popovi{\\'c}, Maja",
    booktitle = "Proceedings of the Tenth Workshop on Statistical Machine Translation",
    year = "2015",
    publisher = "Association for Computational Linguistics",
    url = "https://aclanthology.org/W15-3049",
    pages = "392--395",
}
"""

_DESCRIPTION = """\
Corpus-level chrF (character n-gram F-score; chrF++ with word_order=2) computed
by sacreBLEU, with one reference per prediction. The result includes
sacreBLEU's signature, which should be reported with the score.
"""

_KWARGS_DESCRIPTION = """
Args:
    predictions (list of str): system outputs.
    references (list of str): one reference per prediction.
    word_order (int): word n-gram order, 0 for chrF (default), 2 for chrF++.
    lowercase (bool): score case-insensitively, default False.
Returns:
    score (float): chrF, 0 to 100.
    signature (str): sacreBLEU signature, e.g. "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0".
    char_order, word_order, beta (int): the n-gram orders and the recall weight.
Examples:
    >>> chrf = evaluate.load("path/to/vanilla_transformer/metrics/chrf")
    >>> round(chrf.compute(predictions=["Das Haus ist klein."], references=["Das Haus ist klein."])["score"], 2)
    100.0
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class Chrf(evaluate.Metric):
    def _info(self) -> evaluate.MetricInfo:
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
            codebase_urls=["https://github.com/mjpost/sacrebleu"],
            reference_urls=["https://aclanthology.org/W15-3049"],
        )

    def _compute(self, predictions, references, word_order=0, lowercase=False):
        return compute_chrf(predictions, references, word_order=word_order, lowercase=lowercase)
