"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a first-class Hugging Face model.

Importing the package registers the model with AutoConfig, AutoModel and AutoModelForSeq2SeqLM, and marks the
classes for remote-code sharing, so `save_pretrained` writes an ``auto_map`` and copies the two code files.
"""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
    shift_tokens_right,
    sinusoidal_table,
)

AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, exist_ok=True)

VanillaTransformerConfig.register_for_auto_class()
VanillaTransformerModel.register_for_auto_class("AutoModel")
VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "shift_tokens_right",
    "sinusoidal_table",
]
