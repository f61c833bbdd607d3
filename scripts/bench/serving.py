"""The package's serving code that the benchmarks time and score, imported in this one place: the paper's search
(`translate`, `translate_ids` and their defaults), the onnxruntime step decoder (`load_onnx`) and CTranslate2
(`load_translator`, `translate_ctranslate2`)."""

from vanilla_transformer.export.ctranslate2 import load_translator, translate_ctranslate2
from vanilla_transformer.export.onnx import load_onnx
from vanilla_transformer.translation import LENGTH_PENALTY, MAX_LENGTH_OFFSET, translate, translate_ids

__all__ = [
    "LENGTH_PENALTY",
    "MAX_LENGTH_OFFSET",
    "load_onnx",
    "load_translator",
    "translate",
    "translate_ctranslate2",
    "translate_ids",
]
