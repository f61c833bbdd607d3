"""A package's names imported when first used (PEP 562's module ``__getattr__``): the package loads its light modules
without its heavy ones, so that every command's ``--help`` answers without torch, transformers or accelerate.

    __getattr__, __dir__ = lazy_exports(__name__, {"Trainer": ("trainer", "Trainer")}, globals())
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, str]], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package `package`, whose `exports` map each name to its module (relative
    to the package) and its name there; a name, once imported, is kept in the package's `namespace` (its
    ``globals()``), so it is looked up only once."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = exports[name]
        value = getattr(importlib.import_module(f".{module}", package), attribute)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
