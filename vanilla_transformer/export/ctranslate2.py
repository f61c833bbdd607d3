"""Export to CTranslate2, a C++ inference engine for Transformer translation models; serving the folder is
``serving.with_ctranslate2``.

CTranslate2 runs the same encoder-decoder (post-norm, ReLU FFN, sqrt(d_model)-scaled shared embeddings) with fused
kernels, optional int8 weights and a beam search written in C++; on a CPU it decodes several times faster than
`generate()`. The conversion goes through CTranslate2's own converter API:

* `VanillaTransformerLoader` fills a `ctranslate2.specs.TransformerSpec` from our modules. It is registered with
  `ctranslate2.converters.TransformersConverter` for our configuration class, so a saved model directory converts
  like any Transformers model, and an in-memory model converts through the same loader.
* Our positional table is written into the spec explicitly: CTranslate2's built-in sinusoid puts all sines before
  all cosines (like Marian), the paper interleaves them.

>>> export_ctranslate2("runs/base", "runs/base-ct2", quantization="int8")

``ctranslate2`` is an optional dependency (``pip install vanilla-transformer[serve]``), imported when used.
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..atomic import write_directory
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..constants import QUANTIZATIONS
from ..model_dir import check_model_dir
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..serving.with_ctranslate2 import cpu_backend, import_ctranslate2
from ..written import record_written, written_by
from . import check_export_dir

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


ONEDNN_INT8_WARNING = (
    "CTranslate2 runs int8 on this CPU with oneDNN's kernels, which lost 2 to 19 BLEU against float32 on an AMD "
    "EPYC (Zen 4); MKL's int8 kernels are exact. Set CT2_USE_MKL=1 in the environment before ctranslate2 is "
    "imported (the translating process, not only this export) to use them."
)


def _loader_class():
    """Our loader, defined on first use (it subclasses CTranslate2's BART loader) and registered for our config."""
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import_ctranslate2()
    from ctranslate2.converters import transformers as ct2_transformers
    from ctranslate2.specs import transformer_spec

    class VanillaTransformerLoader(ct2_transformers.BartLoader):
        """Fills a CTranslate2 `TransformerSpec` from a `VanillaTransformerForConditionalGeneration`.

        Our parameter names follow BART/Marian, so BART's layer-by-layer mapping applies as it is; what differs is
        the architecture flags (post-norm, no LayerNorm after the embeddings) and the positional table.
        """

        @property
        def architecture_name(self) -> str:
            return "AutoModelForSeq2SeqLM"  # the Auto class our package registers; `get_model_class` makes it exact

        def get_model_class(self, config, model_class):
            return VanillaTransformerForConditionalGeneration

        def get_model_spec(self, model: VanillaTransformerForConditionalGeneration):
            config: VanillaTransformerConfig = model.config
            if config.encoder_attention_heads != config.decoder_attention_heads:
                raise ValueError(
                    "CTranslate2 needs one head count for encoder and decoder, got "
                    f"encoder_attention_heads={config.encoder_attention_heads} and "
                    f"decoder_attention_heads={config.decoder_attention_heads}"
                )
            if config.activation_function not in ct2_transformers._SUPPORTED_ACTIVATIONS:
                raise ValueError(f"CTranslate2 has no activation_function={config.activation_function!r}")
            spec = transformer_spec.TransformerSpec.from_config(
                (config.encoder_layers, config.decoder_layers),
                config.encoder_attention_heads,
                pre_norm=False,  # the paper's LayerNorm(x + Sublayer(x))
                activation=ct2_transformers._SUPPORTED_ACTIVATIONS[config.activation_function],
                layernorm_embedding=False,
            )
            self.set_encoder(spec.encoder, model.model.encoder)
            self.set_decoder(spec.decoder, model.model.decoder)
            self.set_linear(spec.decoder.projection, model.lm_head)
            return spec

        def set_position_encodings(self, spec, module):
            # Our interleaved sin/cos table, exactly as the model adds it (CTranslate2's default layout differs).
            spec.encodings = module.pe

        def get_vocabulary(self, model, tokenizer) -> list[str]:
            tokens = super().get_vocabulary(model, tokenizer)
            # A vocabulary rounded up past the tokenizer's size gets placeholder tokens for the unused ids.
            tokens += [f"<unused{i}>" for i in range(len(tokens), model.config.vocab_size)]
            return tokens

        def set_config(self, config, model, tokenizer):
            super().set_config(config, model, tokenizer)
            config.layer_norm_epsilon = model.model.encoder.layers[0].final_layer_norm.eps
            config.add_source_bos = False  # our tokenizer already ends every source with </s> and adds no <s>
            config.add_source_eos = False

    ct2_transformers.register_loader("VanillaTransformerConfig")(VanillaTransformerLoader)
    _LOADER = VanillaTransformerLoader
    return _LOADER


_LOADER = None


class _Vocabulary:
    """The minimal tokenizer the loader reads: token strings by id and the special tokens (for unnamed vocabularies)."""

    def __init__(self, tokens: Sequence[str], config: VanillaTransformerConfig):
        self.tokens = list(tokens)
        self.bos_token = self.tokens[config.bos_token_id]
        self.eos_token = self.tokens[config.eos_token_id]
        self.unk_token = "<unk>" if "<unk>" in self.tokens else self.eos_token

    def get_vocab(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}

    def convert_ids_to_tokens(self, index: int) -> str:
        return self.tokens[index]


CTRANSLATE2_KIND = "export-ctranslate2"
"""What `export_ctranslate2` records as the writer of its folder (`written.record_written`)."""

CTRANSLATE2_FILES = ("model.bin", "config.json", "*_vocabulary.json", "*_vocabulary.txt")
"""The names of the files CTranslate2's converter writes: what ``--force`` may delete, with the manifest's word."""


def model_spec(
    model: VanillaTransformerForConditionalGeneration, tokenizer=None, vocabulary: Sequence[str] | None = None
):
    """The CTranslate2 `TransformerSpec` of an in-memory model, with the tokenizer's vocabulary or `vocabulary`."""
    if (tokenizer is None) == (vocabulary is None):
        raise ValueError("pass exactly one of tokenizer and vocabulary")
    if vocabulary is not None:
        if len(vocabulary) != model.config.vocab_size:
            raise ValueError(
                f"vocabulary has {len(vocabulary)} tokens, the model has vocab_size={model.config.vocab_size}"
            )
        tokenizer = _Vocabulary(vocabulary, model.config)
    devices = {parameter.device.type for parameter in model.parameters()}
    if "meta" in devices:
        raise ValueError("the model's weights are on the meta device (not loaded): load them before exporting")
    # A float32 copy in CPU memory: CTranslate2 quantizes the spec's tensors in place, `quantization` picks the
    # stored type, and its writer reads each tensor's bytes from host memory at the tensor's address (a CUDA
    # tensor's address there crashed the process: the H200 run of 2026-11-27).
    model = copy.deepcopy(model).to(device="cpu", dtype=torch.float32)
    with torch.no_grad():
        return _loader_class()()(model, tokenizer)


def export_ctranslate2(
    model: str | os.PathLike | VanillaTransformerForConditionalGeneration,
    output_dir: str | os.PathLike,
    *,
    quantization: str | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    vocabulary: Sequence[str] | None = None,
    force: bool = False,
) -> Path:
    """Convert a model to a CTranslate2 model directory.

    Args:
        model: A saved model directory (with its tokenizer, as `save_pretrained` writes them), converted by
            `ctranslate2.converters.TransformersConverter`; or an in-memory model, with `tokenizer` or `vocabulary`.
        output_dir: The CTranslate2 model directory to write.
        quantization: Stored weight type, one of :data:`QUANTIZATIONS` (``"int8"`` for fast CPU inference), or
            ``None`` for float32.
        tokenizer: For an in-memory model: the tokenizer whose vocabulary the model uses.
        vocabulary: For an in-memory model without tokenizer: the token string of every id.
        force: Replace `output_dir` if it holds only what an export of this program wrote there, by the manifest
            each export writes (`written.first_foreign`): never the model converted, nor a folder holding it or inside
            it, nor a folder holding any other file (a user's folder that merely holds a ``model.bin``).

    The directory is written as a whole (`vanilla_transformer.atomic.write_directory`): a killed export leaves
    the old directory or the new one.

    Returns:
        `output_dir`.

    Raises:
        ValueError: If `output_dir` exists and is not empty without `force`, or is not a CTranslate2 model, or is the
            model's own directory (or holds it, or lies inside it).
    """
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r}; choose one of {QUANTIZATIONS} or None")
    if quantization is not None and quantization.startswith("int8") and cpu_backend() == "onednn":
        warnings.warn(ONEDNN_INT8_WARNING, stacklevel=2)
    ct2 = import_ctranslate2()
    _loader_class()
    if isinstance(model, (str, os.PathLike)):
        if tokenizer is not None or vocabulary is not None:
            raise ValueError(
                "a saved model directory is converted with its own tokenizer: pass neither tokenizer nor vocabulary"
            )
        check_export_dir(
            Path(output_dir),
            force,
            CTRANSLATE2_KIND,
            "a CTranslate2 model",
            names=CTRANSLATE2_FILES,
            source=Path(model),
        )
        check_model_dir(model)
        converter = ct2.converters.TransformersConverter(str(model))
    else:
        spec = model_spec(model, tokenizer, vocabulary)

        class _SpecConverter(ct2.converters.Converter):
            def _load(self):
                return spec

        converter = _SpecConverter()
    output_dir = Path(output_dir)
    check_export_dir(output_dir, force, CTRANSLATE2_KIND, "a CTranslate2 model", names=CTRANSLATE2_FILES)

    def write(folder: Path) -> None:
        converter.convert(str(folder), quantization=quantization, force=True)
        record_written(folder, CTRANSLATE2_KIND, CTRANSLATE2_FILES)

    replaceable = written_by(CTRANSLATE2_KIND, CTRANSLATE2_FILES)
    write_directory(output_dir, write, replaceable=replaceable, what="output_dir")
    return output_dir


__all__ = [
    "CTRANSLATE2_FILES",
    "CTRANSLATE2_KIND",
    "ONEDNN_INT8_WARNING",
    "QUANTIZATIONS",
    "export_ctranslate2",
    "model_spec",
]
