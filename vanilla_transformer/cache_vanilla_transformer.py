"""The generation cache under the name the installed transformers gives it.

transformers 5.24 renamed the cache from ``past_key_values`` to ``cache``: in the model's arguments, in the fields of
its outputs, in ``ALL_CACHE_NAMES``. A model that ignored the new name decoded each step from its last token alone,
silently. The model takes both names (`generation_cache`) and returns the cache in the field the installed
transformers' output classes declare (`cache_field`: it asks the dataclass, not the version string). A cache handed
over under any other name, or one that is not a ``transformers.Cache``, raises `UnsupportedCacheError`, naming the
installed version and the tested range (`TESTED_TRANSFORMERS`), rather than decoding without its past.

This file imports only transformers: it is copied next to a saved model with the modeling file, which imports it,
and runs as remote code.
"""

from __future__ import annotations

import warnings

import transformers
from transformers.cache_utils import Cache
from transformers.modeling_outputs import Seq2SeqLMOutput

TESTED_TRANSFORMERS = ("5.23", "5.24")
"""The transformers minor releases this code is tested with (CI runs the oldest and the newest)."""

CACHE_NAMES = ("cache", "past_key_values")
"""The names transformers has given the generation cache: ``cache`` from 5.24, ``past_key_values`` before."""


class UnsupportedCacheError(RuntimeError):
    """transformers handed the model a cache this code does not know how to use: decoding without it would be
    silently wrong (each step would see only its last token), so it stops instead."""

    def __init__(self, problem: str):
        low, high = TESTED_TRANSFORMERS
        super().__init__(
            f"{problem}. This model's code is tested with transformers {low} to {high}, and this is "
            f"transformers {transformers.__version__}: install a tested version (pip install "
            f"'transformers>={low},<{_next_minor(high)}'), or update the model's code."
        )


def _next_minor(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


def cache_field(output_class: type = Seq2SeqLMOutput) -> str:
    """The field of transformers' model outputs that carries the generation cache, as the installed transformers
    names it: generation reads the cache back from there."""
    names = getattr(output_class, "__dataclass_fields__", {})
    field = next((name for name in CACHE_NAMES if name in names), None)
    if field is None:
        raise UnsupportedCacheError(f"{output_class.__name__} has no field named {' or '.join(CACHE_NAMES)}")
    return field


def generation_cache(cache, past_key_values, kwargs: dict):
    """The decoder's cache, under whichever of transformers' names (`CACHE_NAMES`) it came.

    Raises `UnsupportedCacheError` for a cache under any other name among the model arguments `kwargs`, or one that
    is not a ``transformers.Cache``: the model never decodes without the past it was handed."""
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise ValueError("cache and past_key_values were both given: pass the generation cache once, as `cache`")
    if past_key_values is not None and cache_field() == "cache":
        # as transformers' own models say it (its `deprecate_kwarg`)
        warnings.warn(
            "`past_key_values` is deprecated in this transformers: pass the generation cache as `cache` instead",
            FutureWarning,
            stacklevel=3,
        )
    cache = cache if cache is not None else past_key_values
    unknown = sorted(name for name, value in kwargs.items() if isinstance(value, Cache))
    if unknown:
        raise UnsupportedCacheError(f"the model was handed a generation cache as {', '.join(unknown)}")
    if cache is not None and not isinstance(cache, Cache):
        raise UnsupportedCacheError(f"the generation cache is a {type(cache).__name__}, not a transformers Cache")
    return cache


__all__ = ["CACHE_NAMES", "TESTED_TRANSFORMERS", "UnsupportedCacheError", "cache_field", "generation_cache"]
