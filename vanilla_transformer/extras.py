"""The optional parts of the package and the pip extras that bring them.

The core install (``pip install vanilla-transformer``) loads, generates and translates; it needs torch, transformers,
tokenizers, safetensors and accelerate only. Training and evaluation, plots and serving each need an extra::

    pip install "vanilla-transformer[train]"    # datasets, evaluate, sacrebleu, num2words, sacremoses
    pip install "vanilla-transformer[plots]"    # matplotlib: attention maps, training curves
    pip install "vanilla-transformer[serve]"    # ctranslate2
    pip install "vanilla-transformer[onnx]"     # onnx, onnxruntime, onnxscript: ONNX export, serving, the web page
    pip install "vanilla-transformer[marian]"   # sentencepiece: MarianMT (OPUS-MT) tokenizers, for import-marian
    pip install "vanilla-transformer[peft]"     # peft: fine-tuning with adapters (LoRA)
    pip install "vanilla-transformer[demo]"     # gradio: the browser demo and its Hub Space
    pip install "vanilla-transformer[all]"
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("datasets", "evaluate", "sacrebleu", "num2words", "sacremoses"),
    "plots": ("matplotlib",),
    "serve": ("ctranslate2",),
    "onnx": ("onnx", "onnxruntime", "onnxscript"),
    "marian": ("sentencepiece",),
    "peft": ("peft",),
    "demo": ("gradio",),
}
"""The importable modules each extra installs; pyproject.toml's ``[project.optional-dependencies]`` lists them."""


class MissingExtraError(ImportError):
    """An optional dependency is not installed; the message names the extra that installs it."""


def missing_modules(extra: str) -> list[str]:
    """The modules of `extra` that cannot be imported here."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def install_hint(extra: str) -> str:
    return f'pip install "vanilla-transformer[{extra}]"'


def require(extra: str, feature: str) -> None:
    """Raise `MissingExtraError` naming `feature` and the install command if a module of `extra` is missing."""
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(
            f"{feature} needs the '{extra}' extra ({', '.join(missing)} not installed): {install_hint(extra)}"
        )


def import_optional(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module`, which `extra` installs; if it is missing, raise `MissingExtraError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != module.split(".")[0]:
            raise
        raise MissingExtraError(
            f"{feature} needs {module.split('.')[0]}, from the '{extra}' extra: {install_hint(extra)}"
        ) from error
