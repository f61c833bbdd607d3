"""Configuration of the Transformer of Vaswani et al. (2017), "Attention Is All You Need".

Field names follow BART/Marian (``d_model``, ``encoder_layers``, ``encoder_ffn_dim``, ...) so that tools and
converters written for those models understand ours. The defaults are the paper's base model (Table 3, row "base").

This file imports only ``transformers``: it is copied next to a saved model and loaded as remote code.
"""

import math

from transformers import PreTrainedConfig

# Model sizes by name, in Table 3's columns: N (layers of each stack), d_model, d_ff, h (heads), P_drop. "base" and
# "big" are Table 3's two models of Table 2 (its other rows are ablations). The smaller models of the same architecture
# are each defined here only: those of the training presets of the same name (vanilla_transformer.training, which
# reads this table's names from this file's source), and the benchmarks' sizes (scripts/bench/workloads.py).
SIZES: dict[str, tuple[int, int, int, int, float]] = {
    "base": (6, 512, 2048, 8, 0.1),
    "big": (6, 1024, 4096, 16, 0.3),
    "multi30k": (3, 256, 512, 4, 0.2),  # 6.0M parameters with an 8k vocabulary
    "numbers": (3, 128, 512, 4, 0.1),  # 1.5M parameters with a 500-token vocabulary
    "small": (3, 256, 1024, 4, 0.1),
    "tiny": (2, 32, 64, 4, 0.1),
}

PRESETS: dict[str, dict] = {
    name: dict(
        d_model=d_model,
        encoder_ffn_dim=d_ff,
        decoder_ffn_dim=d_ff,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_layers=layers,
        decoder_layers=layers,
        dropout=dropout,
    )
    for name, (layers, d_model, d_ff, heads, dropout) in SIZES.items()
}
"""The configuration fields of each size of `SIZES` (the same for the encoder and the decoder), as `from_preset`
takes them."""

ACTIVATIONS = ("relu", "gelu", "silu", "swish", "gelu_new", "tanh")

FIELD_RANGES: dict[str, tuple[type, float, float | None]] = {
    **dict.fromkeys(
        (
            "vocab_size",
            "d_model",
            "encoder_layers",
            "decoder_layers",
            "encoder_attention_heads",
            "decoder_attention_heads",
            "encoder_ffn_dim",
            "decoder_ffn_dim",
            "max_position_embeddings",
        ),
        (int, 1, None),
    ),  # fmt: skip
    **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), (float, 0.0, 1.0)),
}
"""The range of each size and rate of the configuration, (kind, lowest, below this), checked whenever one is built:
in code, from a config.json (``"d_model": "32"``, ``64.5`` or ``1e400`` is refused naming the field), from an
imported Marian config. The training settings' ranges (`vanilla_transformer.training.ranges`) agree with these."""


def in_range(value, kind: type, low: float, high: float | None) -> bool:
    """Whether `value` is a number of `kind` (an int for int; a bool is none; a float finite) in ``[low, high)``."""
    if isinstance(value, bool) or not isinstance(value, int if kind is int else (int, float)):
        return False
    return math.isfinite(value) and low <= value and (high is None or value < high)


class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    Configuration of a [`VanillaTransformerModel`]. The defaults build the paper's base model with a 37k shared
    vocabulary (about 63M parameters).

    Args:
        vocab_size: size of the shared source/target vocabulary (the paper: about 37,000 BPE tokens).
        d_model: width of every sublayer output and embedding (the paper's d_model).
        encoder_layers / decoder_layers: N, the number of identical layers in each stack.
        encoder_attention_heads / decoder_attention_heads: h, the number of attention heads.
        encoder_ffn_dim / decoder_ffn_dim: d_ff, the inner width of the position-wise feed-forward networks.
        activation_function: the FFN non-linearity; the paper uses ``"relu"``.
        dropout: P_drop, applied to every sublayer output and to the sums of embeddings and positional encodings.
        attention_dropout: dropout on attention probabilities (0.0 in the paper).
        activation_dropout: dropout after the FFN activation (0.0 in the paper).
        max_position_embeddings: number of positions the sinusoidal table covers; longer inputs are rejected.
        scale_embedding: multiply token embeddings by sqrt(d_model), as section 3.4 says.
        init_std: ``None`` (default) initialises linear layers Xavier-uniform, as tensor2tensor and fairseq trained
            the paper's models; a float initialises them N(0, init_std), as BART and Marian do. Token embeddings
            are always N(0, d_model**-0.5), so that after the sqrt(d_model) scaling they are on the scale of the
            positional encodings.
        tie_word_embeddings: share one matrix between the encoder input, the decoder input and the output
            projection (section 3.4, three-way tying).
        attention_bias: give the query, key, value and output projections of attention a bias. The paper's
            equations (section 3.2.2) and tensor2tensor have none; fairseq and Marian, whose trained models and
            converters this package interoperates with, have them. ``True`` (the default, and the presets') keeps
            MarianMT weights and exports exact; ``False`` is the paper's equations to the letter.
        pack_tokens: how training runs the position-wise sublayers of a padded batch, an implementation choice that
            changes no loss or gradient: ``True`` on its real tokens only (gathered, and scattered back for
            attention), ``False`` on every position, ``"auto"`` (the default) by the device's rule
            (``PACKING_THRESHOLDS`` in the modeling file: on the CPU where over 10% of the batch is padding).
        pad_token_id / bos_token_id / eos_token_id / decoder_start_token_id: special token ids, each ``None`` or in
            ``[0, vocab_size)``; the defaults match the tokenizer trained by `vanilla_transformer.tokenization`
            (``<pad>``=0, ``<s>``=2, ``</s>``=3).

    Example:

    ```python
    >>> from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    >>> config = VanillaTransformerConfig.from_preset("base", vocab_size=37000)
    >>> model = VanillaTransformerForConditionalGeneration(config)
    ```
    """

    model_type = "vanilla_transformer"
    keys_to_ignore_at_inference = ["cache", "past_key_values"]  # the names of transformers >= 5.24 and before
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "encoder_layers",
    }

    vocab_size: int = 37000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    activation_function: str = "relu"
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 1024
    scale_embedding: bool = True
    init_std: float | None = None
    attention_bias: bool = True
    pack_tokens: bool | str = "auto"
    use_cache: bool = True
    is_encoder_decoder: bool = True
    tie_word_embeddings: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 2
    eos_token_id: int | None = 3
    decoder_start_token_id: int | None = 2

    def __post_init__(self, **kwargs):
        self._check()
        super().__post_init__(**kwargs)

    def _check(self) -> None:
        for name, (kind, low, high) in FIELD_RANGES.items():
            value = getattr(self, name)
            if not in_range(value, kind, low, high):
                what = "a positive integer" if kind is int else f"in [{low:g}, {high:g})"
                raise ValueError(f"{name} must be {what}, got {name}={value!r}")
        for heads_name in ("encoder_attention_heads", "decoder_attention_heads"):
            heads = getattr(self, heads_name)
            if not isinstance(heads, int) or heads <= 0 or self.d_model % heads != 0:
                raise ValueError(
                    f"d_model must be divisible by {heads_name}, got d_model={self.d_model} and {heads_name}={heads}"
                )
        if self.activation_function not in ACTIVATIONS:
            raise ValueError(
                f"activation_function must be one of {ACTIVATIONS}, got activation_function={self.activation_function!r}"
            )
        if self.pack_tokens not in (True, False, "auto"):
            raise ValueError(f"pack_tokens must be True, False or 'auto', got pack_tokens={self.pack_tokens!r}")
        if self.init_std is not None and not (in_range(self.init_std, float, 0.0, None) and self.init_std > 0):
            raise ValueError(f"init_std must be None or positive, got init_std={self.init_std!r}")
        self._check_special_token_ids()

    def _check_special_token_ids(self) -> None:
        """Each special token id must be a token of the vocabulary: a negative pad id would make token
        ``vocab_size - 1`` padding, and an end-of-sentence id outside it would never end a generation."""
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            for token_id in value if isinstance(value, (list, tuple)) else [value]:
                if token_id is None:
                    continue
                if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < self.vocab_size:
                    raise ValueError(
                        f"{name} must be None or a token id in [0, vocab_size={self.vocab_size}), got {name}={value!r}"
                    )

    @classmethod
    def from_preset(cls, name: str, **overrides) -> "VanillaTransformerConfig":
        """A model of `PRESETS`: the paper's ``"base"`` or ``"big"`` (Table 3), or a smaller one, with any field
        overridden by keyword."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset name={name!r}; choose one of {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})


__all__ = ["FIELD_RANGES", "VanillaTransformerConfig", "PRESETS", "SIZES", "in_range"]
