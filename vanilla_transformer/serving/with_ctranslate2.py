"""Serving with CTranslate2: a CTranslate2 model folder (``export.ctranslate2.export_ctranslate2``) loaded as a
`ctranslate2.Translator`, and translating with its own beam search, written in C++.

    translate_ctranslate2("runs/base-ct2", tokenizer, ["A man rides a bike."], beam_size=4)

CTranslate2's search divides a hypothesis's score by ``length ** length_penalty``, not by GNMT's penalty, so its
translations can differ from the package's search (``serving.search``) where the two penalties rank differently.

``ctranslate2`` is an optional dependency (``pip install vanilla-transformer[serve]``), imported when used.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..atomic import check_links_inside

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


def is_ctranslate2_dir(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds a CTranslate2 model (``model.bin``) and no Hugging Face model: what `--force` may
    replace."""
    directory = Path(directory)
    return (directory / "model.bin").is_file() and not any(
        (directory / name).is_file() for name in ("model.safetensors", "pytorch_model.bin", "tokenizer_config.json")
    )


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
    beam_size: int = 4,
    max_decoding_length: int = 256,
    length_penalty: float = 1.0,
    batch_size: int = 32,
    device: str = "cpu",
    compute_type: str = "default",
    threads: int = 0,
) -> list[str]:
    """Translate `sentences` with an exported model: tokenize, decode with CTranslate2's beam search, detokenize.

    Args:
        model_dir: A directory written by :func:`export_ctranslate2`, or a loaded `ctranslate2.Translator`.
        tokenizer: The model's tokenizer (it appends ``</s>`` to each source, as in training).
        sentences: Source sentences.
        beam_size: 1 for greedy decoding.
        max_decoding_length: Most tokens generated per sentence, ``</s>`` excluded.
        length_penalty: Beam scores are divided by ``length ** length_penalty``.
        batch_size: Sentences per CTranslate2 batch.
        device, compute_type, threads: Passed to `ctranslate2.Translator` when `model_dir` is a path.

    Returns:
        One translation per sentence, special tokens removed.
    """
    translator = model_dir
    if isinstance(model_dir, (str, os.PathLike)):
        translator = load_translator(model_dir, device=device, compute_type=compute_type, threads=threads)
    if not sentences:
        return []
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(list(sentences))["input_ids"]]
    results = translator.translate_batch(
        sources,
        beam_size=beam_size,
        max_batch_size=batch_size,
        max_decoding_length=max_decoding_length,
        length_penalty=length_penalty,
    )
    outputs = []
    for result in results:
        ids = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
        outputs.append(tokenizer.decode(ids, skip_special_tokens=True))
    return outputs


__all__ = [
    "cpu_backend",
    "import_ctranslate2",
    "is_ctranslate2_dir",
    "load_translator",
    "translate_ctranslate2",
]
