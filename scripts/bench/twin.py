"""MarianMT of the same weights: the contestant a user would pick instead of this package."""

from __future__ import annotations

import copy

from vanilla_transformer.export.marian import vanilla_to_marian


def marian_twin(model):
    """A `MarianMTModel` computing the same function as `model` (`vanilla_to_marian`: Marian's layout of the model
    dimension, Marian's own positional table, a zero ``final_logits_bias``), with `model`'s generation settings,
    attention implementation, device, dtype and training mode."""
    twin = vanilla_to_marian(model, copy.deepcopy(model.generation_config))
    twin.set_attn_implementation(model.config._attn_implementation)
    return twin.to(model.device).train(model.training)
