"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a first-class Hugging Face model.

Importing the package registers the model with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks the
classes for remote-code sharing, so `save_pretrained` writes an ``auto_map`` and copies the two code files.

The import itself is light (no torch, no transformers), so that ``vanilla-transformer --help`` answers at once: the
classes below load when first used, and the registration (`register_auto_classes`) runs as soon as transformers is
imported, or at once where it already is; so it is done before any Auto class can be called.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "PRESETS": "configuration_vanilla_transformer",
    "VanillaTransformerConfig": "configuration_vanilla_transformer",
    "VanillaTransformerPreTrainedModel": "modeling_vanilla_transformer",
    "VanillaTransformerModel": "modeling_vanilla_transformer",
    "VanillaTransformerForConditionalGeneration": "modeling_vanilla_transformer",
    "shift_tokens_right": "modeling_vanilla_transformer",
    "sinusoidal_table": "modeling_vanilla_transformer",
}


def register_auto_classes() -> None:
    """Register the model with transformers' Auto classes and mark it for remote-code sharing (again: no change)."""
    from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

    from .configuration_vanilla_transformer import VanillaTransformerConfig
    from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel

    AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
    AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
    AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)

    VanillaTransformerConfig.register_for_auto_class()
    VanillaTransformerModel.register_for_auto_class("AutoModel")
    VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


class _Registration(importlib.abc.MetaPathFinder):
    """Finds transformers and the two model modules as Python would, and has their loaders call
    `register_auto_classes` once transformers has run and no model module is half imported (one of them importing
    transformers first must finish before the registration imports it).

    Why a finder, and not a plainer way (issue 57): the registration needs the model's classes, so it imports
    transformers and torch, many times the cost of the package's own import; yet ``import vanilla_transformer`` then
    ``AutoConfig.for_model("vanilla_transformer")`` must work, while ``--help`` (which imports this package) must
    import neither (tests/faults/test_startup.py, which also runs five import orders). Registering at import breaks
    the second; a light import of transformers' registry alone still imports transformers (and registering a model
    class still imports torch); transformers has no public hook that runs code when an Auto class is first used (no
    entry points, no lazy registration by name). Only code that runs when transformers is imported keeps both, and
    Python's one public way to run it is an import hook: this finder, which uses importlib's public API only
    (`find_spec`, the loader's ``exec_module``) and removes itself once the registration is done."""

    def __init__(self) -> None:
        self.loading: set[str] = set()
        self.finding = False

    @staticmethod
    def watched(fullname: str) -> bool:
        """transformers, and every module of this package: any of them may import transformers half way through its
        own import (generation_vanilla_transformer does, and the modeling file imports it back), so the registration
        waits until the outermost one has finished (issue 64: `from vanilla_transformer.generation_vanilla_transformer
        import beam_search` in a fresh interpreter was a circular ImportError)."""
        return fullname == "transformers" or fullname.startswith(f"{__name__}.")

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if not self.watched(fullname) or self.finding:
            return None
        self.finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.finding = False
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def run_then_register(module) -> None:
            self.loading.add(fullname)
            try:
                run(module)
            finally:
                self.loading.discard(fullname)
            self.register_when_ready()

        spec.loader.exec_module = run_then_register
        return spec

    def register_when_ready(self) -> None:
        if "transformers" in sys.modules and not self.loading and self in sys.meta_path:
            sys.meta_path.remove(self)
            register_auto_classes()


if "transformers" in sys.modules:
    register_auto_classes()
elif not any(isinstance(finder, _Registration) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Registration())


__all__ = [
    "PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "register_auto_classes",
    "shift_tokens_right",
    "sinusoidal_table",
]
