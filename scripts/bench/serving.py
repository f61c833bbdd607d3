"""The package's serving code that the benchmarks time and score, imported in this one place: the paper's search
(`translate`, `translate_ids` and their defaults), the onnxruntime step decoder (`load_onnx`) and CTranslate2
(`load_translator`, `translate_ctranslate2`); a model's CTranslate2 exports, loaded (`ct2_translators`); the tokens of each translation (`hypotheses`);
and
CTranslate2's search as a contestant on batches of token ids (`ct2_search`)."""

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from vanilla_transformer.export.ctranslate2 import export_ctranslate2
from vanilla_transformer.serving.search import LENGTH_PENALTY, MAX_LENGTH_OFFSET, translate, translate_ids
from vanilla_transformer.serving.with_ctranslate2 import load_translator, translate_ctranslate2
from vanilla_transformer.serving.with_onnxruntime import load_onnx
from vanilla_transformer.tokenization import EOS_ID, PAD_ID


def hypotheses(sequences: torch.Tensor) -> list[list[int]]:
    """The generated tokens of each row of `generate()`'s (or `translate_ids`') output: after the decoder start, up
    to and including the first ``</s>`` (a row without one: its tokens, padding left out)."""
    rows = sequences[:, 1:].tolist()
    return [row[: row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t != PAD_ID] for row in rows]


def ct2_translators(
    model, folder: Path, quantizations: dict[str, str], device: str = "cpu", threads: int = 0, **vocabulary
) -> tuple[dict[str, Any], dict[str, float]]:
    """`model` exported to CTranslate2 in ``folder/NAME`` for each of `quantizations` (name -> ``float32``,
    ``int8``, ...; `vocabulary`: the ``tokenizer`` or ``vocabulary`` of `export_ctranslate2`), each loaded on
    `device` with `threads`; the translators and the seconds of each export and load. On CUDA, one that cannot load
    (a build this machine's driver or libraries cannot run) is left out, with a line on stderr."""
    translators, seconds = {}, {}
    for name, quantization in quantizations.items():
        started = time.perf_counter()
        path = export_ctranslate2(model, folder / name, quantization=quantization, **vocabulary)
        seconds[f"export_{name}"] = time.perf_counter() - started
        started = time.perf_counter()
        try:
            translators[name] = load_translator(path, device=device, compute_type=quantization, threads=threads)
        except (RuntimeError, ValueError) as error:
            if device != "cuda":
                raise
            print(f"CTranslate2 {name} left out: {error}", file=sys.stderr)
        seconds[f"load_{name}"] = time.perf_counter() - started
    return translators, seconds


def ct2_search(
    translator, tokens: Sequence[str], beams: int, max_length: Callable[[int], int], **options
) -> Callable[[dict], list[list[int]]]:
    """CTranslate2's own search as a contestant: a batch of token ids (``input_ids``, ``attention_mask``) -> the ids
    of each translation, ``</s>`` included. `tokens` names every id; `max_length` maps the batch's longest source to
    ``max_decoding_length``; `options` go to ``translate_batch``."""
    index = {token: i for i, token in enumerate(tokens)}

    def run(batch: dict) -> list[list[int]]:
        rows = [
            [tokens[i] for i in ids[mask.bool()].tolist()]
            for ids, mask in zip(batch["input_ids"].cpu(), batch["attention_mask"].cpu(), strict=True)
        ]
        longest = max(map(len, rows))
        results = translator.translate_batch(
            rows, beam_size=beams, max_decoding_length=max_length(longest), return_end_token=True, **options
        )
        return [[index[token] for token in result.hypotheses[0]] for result in results]

    return run


__all__ = [
    "LENGTH_PENALTY",
    "MAX_LENGTH_OFFSET",
    "ct2_search",
    "ct2_translators",
    "hypotheses",
    "load_onnx",
    "load_translator",
    "translate",
    "translate_ctranslate2",
    "translate_ids",
]
