"""MarianMT interop, both ways: OPUS-MT checkpoints in, plain ``MarianMTModel`` directories out.

Our parameter names are MarianMT's, and the two networks are the same post-norm Transformer (sqrt(d_model)-scaled
shared embeddings, fixed sinusoidal positions, no LayerNorm on the embeddings or after the stacks). What differs is the
layout of the positional table:

* the paper interleaves sines and cosines, ``PE[pos, 2i] = sin(...)``, ``PE[pos, 2i + 1] = cos(...)``;
* Marian puts all sines first, then all cosines: ``PE[pos, i] = sin(...)``, ``PE[pos, ceil(d/2) + i] = cos(...)``.

The two tables are the same columns in another order, so one fixed permutation of the model dimension carries one
model into the other: permute every vector of the residual stream (embedding rows, the rows written by ``out_proj`` and
``fc2``, the columns read by ``q/k/v_proj``, ``fc1`` and ``lm_head``, the LayerNorm weights and biases). LayerNorm,
residual additions and the positional sum commute with a permutation, and the inner spaces of attention heads and of the
feed-forward network are left as they are, so the permuted network computes the same function in the other layout.

`import_marian` converts a MarianMT directory (or Hub id) into this package's format; `export_marian` writes a model of
this package as a MarianMT directory that loads without remote code. Both check what they cannot carry and refuse it.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import pickle
from collections.abc import Mapping
from pathlib import Path

import huggingface_hub.errors
import torch
from transformers import AutoConfig, AutoTokenizer, GenerationConfig, MarianConfig, MarianMTModel

from ..atomic import check_output_dir, write_directory
from ..configuration_vanilla_transformer import ACTIVATIONS, VanillaTransformerConfig
from ..library_errors import load_failure
from ..model_checks import check_declared_sizes, safetensors_header
from ..model_dir import LOAD_FIX, check_model_dir, load_model, save_model_dir
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, sinusoidal_table

logger = logging.getLogger(__name__)

_STRICT_DATACLASS_ERROR = getattr(huggingface_hub.errors, "StrictDataclassError", ValueError)
"""What huggingface_hub's strict dataclasses (transformers' configurations, since 5.x) raise for a field of the wrong
type: not a ValueError; ValueError itself on a version without them."""

# Fields that both configurations hold under the same name and meaning, copied as they are.
SHARED_FIELDS = (
    "vocab_size",
    "d_model",
    "encoder_layers",
    "decoder_layers",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "activation_function",
    "dropout",
    "attention_dropout",
    "activation_dropout",
    "max_position_embeddings",
    "scale_embedding",
    "tie_word_embeddings",
    "pad_token_id",
    "bos_token_id",
    "eos_token_id",
    "decoder_start_token_id",
)

# Flags of older BART-era Marian configs (still in many OPUS-MT config.json files) for architectures that are not the
# paper's, with the value that would need something we do not have, and the reason given when refusing.
_REFUSED_FLAGS = {
    "normalize_before": (True, "pre-norm layers (normalize_before=True); this model is post-norm"),
    "normalize_embedding": (True, "a LayerNorm on the embeddings (normalize_embedding=True)"),
    "add_final_layer_norm": (True, "a LayerNorm after each stack (add_final_layer_norm=True)"),
    "static_position_embeddings": (False, "learned positions (static_position_embeddings=False)"),
    "add_bias_logits": (True, "a bias on the output logits (add_bias_logits=True)"),
}

# Parameter name endings by the axis that lies in the residual stream (the model dimension).
_READS_RESIDUAL = ("q_proj.weight", "k_proj.weight", "v_proj.weight", "fc1.weight", "embed_tokens.weight")
_READS_RESIDUAL += ("shared.weight", "lm_head.weight")  # [*, d_model]: permute axis 1
_WRITES_RESIDUAL = ("out_proj.weight", "out_proj.bias", "fc2.weight", "fc2.bias", "layer_norm.weight")
_WRITES_RESIDUAL += ("layer_norm.bias",)  # [d_model, ...]: permute axis 0
_INNER = ("q_proj.bias", "k_proj.bias", "v_proj.bias", "fc1.bias")  # head or FFN space: unchanged


class MarianConversionError(ValueError):
    """A model that the conversion cannot carry exactly; the message names the reason."""


# --------------------------------------------------------------------------------------------------------------------
# The permutation
# --------------------------------------------------------------------------------------------------------------------


def marian_permutation(d_model: int) -> torch.Tensor:
    """Indices ``perm`` with ``paper_table[:, i] == marian_table[:, perm[i]]``: the paper's dimension i is Marian's
    dimension ``perm[i]``. Even i (a sine of frequency i/2) comes from Marian's sine block, odd i (a cosine) from its
    cosine block, which starts at ``ceil(d_model / 2)``."""
    sines = (d_model + 1) // 2
    perm = torch.empty(d_model, dtype=torch.long)
    perm[0::2] = torch.arange(sines)
    perm[1::2] = sines + torch.arange(d_model // 2)
    return perm


def marian_table(num_positions: int, d_model: int) -> torch.Tensor:
    """Marian's sinusoidal table (all sines, then all cosines), from the paper's table by the inverse permutation."""
    return sinusoidal_table(num_positions, d_model)[:, torch.argsort(marian_permutation(d_model))]


def permute_state_dict(state: Mapping[str, torch.Tensor], perm: torch.Tensor) -> dict[str, torch.Tensor]:
    """Reindex the model dimension of every parameter with `perm` (`marian_permutation` to import, its inverse
    ``argsort`` to export). Names must be MarianMT's; anything else is refused rather than copied unpermuted."""
    permuted = {}
    for name, tensor in state.items():
        if name.endswith(_READS_RESIDUAL):
            permuted[name] = tensor[:, perm].clone()
        elif name.endswith(_WRITES_RESIDUAL):
            permuted[name] = tensor[perm].clone()
        elif name.endswith(_INNER):
            permuted[name] = tensor.clone()
        else:
            raise MarianConversionError(f"parameter {name!r} has no known place in the Marian/paper architecture")
    return permuted


# --------------------------------------------------------------------------------------------------------------------
# Marian -> this package
# --------------------------------------------------------------------------------------------------------------------


def check_marian_config(config) -> None:
    """Refuse a Marian configuration whose model this architecture cannot compute exactly."""
    if config.model_type != "marian":
        raise MarianConversionError(f"model_type={config.model_type!r}: only MarianMT (model_type='marian') converts")
    if not getattr(config, "share_encoder_decoder_embeddings", True):
        raise MarianConversionError(
            "separate source and target vocabularies (share_encoder_decoder_embeddings=False): this model has one "
            "vocabulary shared by encoder and decoder"
        )
    for flag, (refused, reason) in _REFUSED_FLAGS.items():
        if getattr(config, flag, not refused) == refused:
            raise MarianConversionError(f"the Marian model has {reason}, which this architecture does not have")
    if config.activation_function not in ACTIVATIONS:
        raise MarianConversionError(
            f"activation_function={config.activation_function!r} is not one of this model's {ACTIVATIONS}"
        )


def check_marian_weights(marian: MarianMTModel, loading_info: Mapping[str, list[str]]) -> None:
    """Refuse weights the conversion would drop or invent: extra modules, missing weights (initialised at random by
    from_pretrained), a non-zero final_logits_bias, learned positions."""
    missing = [
        name for name in loading_info["missing_keys"] if name not in MarianMTModel._keys_to_ignore_on_load_missing
    ]
    if missing:
        raise MarianConversionError(f"the checkpoint lacks weights {sorted(missing)[:3]}: they would be random")
    unexpected_keys = loading_info["unexpected_keys"]
    if unexpected_keys:
        raise MarianConversionError(
            f"the checkpoint holds parameters MarianMTModel does not use, e.g. {sorted(unexpected_keys)[:3]} "
            "(a LayerNorm on embeddings or after the stacks?): converting would drop them"
        )
    bias = marian.final_logits_bias
    if bias.count_nonzero():
        raise MarianConversionError(
            f"final_logits_bias is not zero (max |bias| = {bias.abs().max().item():.3g}): this model has no output bias"
        )
    config = marian.config
    expected = marian_table(config.max_position_embeddings, config.d_model)
    for stack in ("encoder", "decoder"):
        table = getattr(marian.model, stack).embed_positions.weight
        if not torch.allclose(table.float(), expected.to(table.dtype).float(), atol=1e-6, rtol=0):
            raise MarianConversionError(
                f"model.{stack}.embed_positions.weight is not Marian's sinusoidal table (learned positions?): this "
                "model computes fixed sinusoidal positions"
            )


def _read_marian_config(src: str | os.PathLike) -> MarianConfig:
    """The Marian configuration of `src`, its fields checked first by this package's configuration (the one check
    translate's config.json meets: ``"d_model": "32"`` is one line naming the file and the field), then by MarianConfig
    (whose refusal, a multi-line report of huggingface_hub's strict dataclasses, is put on one line)."""
    source = f"{src}/config.json"
    try:
        values, _ = MarianConfig.get_config_dict(src)
        VanillaTransformerConfig(**{name: values[name] for name in SHARED_FIELDS if name in values})
        return AutoConfig.from_pretrained(src, trust_remote_code=False)
    except (ValueError, TypeError, _STRICT_DATACLASS_ERROR) as error:
        reason = " ".join(str(error).split())
        raise MarianConversionError(f"{source} does not describe a model ({reason}): {LOAD_FIX}") from error


def vanilla_config_from_marian(config: MarianConfig) -> VanillaTransformerConfig:
    """Our configuration of the same network (``init_std``, which only initialises new weights, keeps our default)."""
    return VanillaTransformerConfig(**{name: getattr(config, name) for name in SHARED_FIELDS})


def marian_to_vanilla(marian: MarianMTModel) -> VanillaTransformerForConditionalGeneration:
    """The same network as a model of this package (weights permuted); call `check_marian_weights` first."""
    config = vanilla_config_from_marian(marian.config)
    state = {
        name: tensor
        for name, tensor in marian.state_dict().items()
        if name != "final_logits_bias" and not name.endswith("embed_positions.weight")
    }
    if not config.tie_word_embeddings:  # untied, Marian's encoder, decoder and lm_head each have their own matrix
        state.pop("model.shared.weight", None)  # and `shared` is unused
    model = VanillaTransformerForConditionalGeneration(config)
    model.load_state_dict(permute_state_dict(state, marian_permutation(config.d_model)), strict=True)
    return model.to(marian.dtype).eval()


MARIAN_TABLE_ROWS = 4096
"""The most rows of Marian's sinusoidal positions that `import_marian` has MarianMTModel build when its checkpoint
stores none: MarianMTModel fills its table one number at a time in Python (a minute for 10^7 positions), and the
table is only compared with Marian's and dropped; the imported model computes its own, for every declared position."""


def _positions_to_build(src: str | os.PathLike, positions: int) -> dict[str, int]:
    """``max_position_embeddings`` for loading `src` with MarianMTModel: its declared `positions`, unless its weights
    file stores no positional table and they are more than `MARIAN_TABLE_ROWS`."""
    weights = Path(src, "model.safetensors")
    stored = weights.is_file() and any("embed_positions" in name for name in safetensors_header(weights))
    return {} if stored or positions <= MARIAN_TABLE_ROWS else {"max_position_embeddings": MARIAN_TABLE_ROWS}


def import_marian(
    src: str | os.PathLike, dst: str | os.PathLike, *, with_tokenizer: bool = True
) -> VanillaTransformerForConditionalGeneration:
    """Convert a MarianMT model (local directory or Hub id) into a model directory of this package.

    `dst` receives the permuted weights with ``config.json`` (Marian's activation, sizes and token ids), Marian's
    generation settings as they are (``forced_eos_token_id``, ``bad_words_ids``, beams, ...), and the tokenizer
    (`MarianTokenizer` with its SentencePiece models, which needs ``sentencepiece``), loadable with ``AutoTokenizer``.

    Args:
        src: A directory written by ``MarianMTModel.save_pretrained`` or a Hub id such as
            ``"Helsinki-NLP/opus-mt-en-de"``.
        dst: The directory to write; it must not exist or be empty.
        with_tokenizer: False to convert a model saved without its tokenizer.

    Raises:
        MarianConversionError: If the model has something this architecture cannot compute (the message says what):
            separate vocabularies, pre-norm, a LayerNorm on embeddings or after the stacks, learned positions, a
            non-zero final_logits_bias, an activation we lack.
    """
    check_output_dir(dst, "dst")  # before any work
    marian_config = _read_marian_config(src)
    check_marian_config(marian_config)
    positions = marian_config.max_position_embeddings
    check_declared_sizes(vanilla_config_from_marian(marian_config), f"{src}: config.json")  # before any allocation
    tokenizer = _load_tokenizer(src) if with_tokenizer else None
    try:
        marian, info = MarianMTModel.from_pretrained(
            src, output_loading_info=True, trust_remote_code=False, **_positions_to_build(src, positions)
        )
    except (RuntimeError, MemoryError, pickle.UnpicklingError) as error:
        failure = load_failure(str(src), error)  # memory, a refused pickle: named with their file
        if failure is None:
            raise
        raise failure from error
    check_marian_weights(marian, info)
    marian.config.max_position_embeddings = positions  # the model's own positions: computed, never stored
    model = marian_to_vanilla(marian)
    # generation_config.json, or for older OPUS-MT directories the settings in config.json (num_beams, max_length,
    # bad_words_ids, ...), as from_pretrained gathered them.
    model.generation_config = copy.deepcopy(marian.generation_config)
    forced = model.generation_config.forced_eos_token_id
    if forced is not None:
        logger.info(
            "generation_config keeps Marian's forced_eos_token_id=%s: generate() ends a hypothesis cut by the maximum "
            "length with that token, as MarianMTModel does",
            forced,
        )
    write_directory(dst, lambda directory: save_model_dir(model, tokenizer, directory), what="dst")
    return model


# --------------------------------------------------------------------------------------------------------------------
# This package -> Marian
# --------------------------------------------------------------------------------------------------------------------


def marian_config_from_vanilla(
    config: VanillaTransformerConfig, generation_config: GenerationConfig | None = None
) -> MarianConfig:
    """The MarianConfig of the same network. Every token id is set explicitly: MarianConfig's defaults (pad 58100,
    eos 0, ``forced_eos_token_id=0``) would otherwise change what generate() does."""
    forced = generation_config.forced_eos_token_id if generation_config is not None else None
    return MarianConfig(
        **{name: getattr(config, name) for name in SHARED_FIELDS},
        decoder_vocab_size=config.vocab_size,
        share_encoder_decoder_embeddings=True,
        init_std=config.init_std if config.init_std is not None else 0.02,
        forced_eos_token_id=forced,
    )


def vanilla_to_marian(
    model: VanillaTransformerForConditionalGeneration, generation_config: GenerationConfig | None = None
) -> MarianMTModel:
    """The same network as a `MarianMTModel`: weights permuted to Marian's layout, a zero final_logits_bias."""
    config = model.config
    state = dict(model.state_dict())
    if not config.tie_word_embeddings:
        # Untied, MarianMTModel too gives encoder, decoder and lm_head each its own matrix; its `shared` is unused.
        state["model.shared.weight"] = state["model.encoder.embed_tokens.weight"]
    if not getattr(config, "attention_bias", True):  # MarianMT's projections have biases: zero ones compute the same
        for name in [name for name in state if name.endswith("_proj.weight")]:
            state[name.removesuffix("weight") + "bias"] = state[name].new_zeros(state[name].shape[0])
    marian = MarianMTModel(marian_config_from_vanilla(config, generation_config))
    state = permute_state_dict(state, torch.argsort(marian_permutation(config.d_model)))
    missing, unexpected = marian.load_state_dict(state, strict=False)
    ignored = {"final_logits_bias", "model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight"}
    if unexpected or set(missing) - ignored:
        raise MarianConversionError(f"weights do not fit MarianMTModel: missing {missing}, unexpected {unexpected}")
    with torch.no_grad():
        marian.final_logits_bias.zero_()
    if generation_config is not None:
        marian.generation_config = generation_config
    return marian.to(model.dtype).eval()


def export_marian(src: str | os.PathLike, dst: str | os.PathLike, *, with_tokenizer: bool = True) -> MarianMTModel:
    """Write a model directory of this package as a plain MarianMT directory.

    `dst` loads with ``MarianMTModel.from_pretrained`` (no remote code) and computes the same logits. It holds the
    permuted weights, a zero ``final_logits_bias``, the model's own activation and token ids, its generation settings,
    and its tokenizer as it is (a ``PreTrainedTokenizerFast`` for models trained here).

    Args:
        src: A directory written by this package (``save_pretrained``, `import_marian`, training's export).
        dst: The directory to write; it must not exist or be empty.
        with_tokenizer: False to convert a model saved without its tokenizer.
    """
    check_output_dir(dst, "dst")  # before any work
    check_model_dir(src)
    config = AutoConfig.from_pretrained(src, trust_remote_code=False)
    if not isinstance(config, VanillaTransformerConfig):
        raise MarianConversionError(f"{src} holds model_type={config.model_type!r}, not a vanilla_transformer model")
    tokenizer = _load_tokenizer(src) if with_tokenizer else None
    model = load_model(src)  # every weight from the file, no code from the folder
    marian = vanilla_to_marian(model, copy.deepcopy(model.generation_config))
    _warn_unless_ctranslate2_compatible(marian)

    def write(directory: Path) -> None:
        marian.save_pretrained(directory)
        if tokenizer is not None:
            save_tokenizer_for_any_transformers(tokenizer, directory)

    write_directory(dst, write, what="dst")
    return marian


def _warn_unless_ctranslate2_compatible(marian: MarianMTModel) -> None:
    """CTranslate2's stock converter (ct2-transformers-converter) reproduces a MarianMTModel only in Marian's own
    conventions: it starts the decoder from a zero vector instead of the start token's embedding, drops the last
    vocabulary entry (Marian's ``<pad>``), and gives the decoder the encoder's head count."""
    config = marian.config
    start = config.decoder_start_token_id
    reasons = []
    if start != config.vocab_size - 1 or marian.model.decoder.embed_tokens.weight[start].count_nonzero():
        reasons.append(
            f"the decoder starts from token {start} (vocab_size={config.vocab_size}), not from the last token with a "
            "zero embedding (Marian's <pad>)"
        )
    if config.encoder_attention_heads != config.decoder_attention_heads:
        reasons.append(
            f"encoder_attention_heads={config.encoder_attention_heads} differs from "
            f"decoder_attention_heads={config.decoder_attention_heads}"
        )
    if reasons:
        logger.warning(
            "CTranslate2's ct2-transformers-converter will not reproduce this model: %s. Use vanilla-transformer's "
            "own CTranslate2 export instead.",
            "; ".join(reasons),
        )


# --------------------------------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------------------------------


def _load_tokenizer(src: str | os.PathLike):
    hint = "pass with_tokenizer=False (--no-tokenizer) to convert the model alone"
    if Path(src).is_dir() and not (Path(src) / "tokenizer_config.json").is_file():
        raise MarianConversionError(f"no tokenizer in {src} (no tokenizer_config.json); {hint}")
    try:
        return AutoTokenizer.from_pretrained(src, trust_remote_code=False)
    except Exception as error:  # a damaged file fails in transformers or tokenizers as any exception
        raise MarianConversionError(
            f"cannot load the tokenizer of {src}, its tokenizer.json or tokenizer_config.json ({type(error).__name__}: "
            f"{error}); a MarianTokenizer needs "
            f"`pip install sentencepiece`; a damaged tokenizer file: {LOAD_FIX}; {hint}"
        ) from error


def save_tokenizer_for_any_transformers(tokenizer, directory: Path) -> None:
    """Save `tokenizer`; a fast one is named ``PreTrainedTokenizerFast``, which transformers 4 (as Optimum and other
    tools install it) knows as well as 5, where ``TokenizersBackend``, the name 5 writes, does not exist in 4."""
    tokenizer.save_pretrained(directory)
    path = directory / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))  # written just now, by save_pretrained
    if settings.get("tokenizer_class") == "TokenizersBackend":
        settings["tokenizer_class"] = "PreTrainedTokenizerFast"
        path.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")


__all__ = [
    "MarianConversionError",
    "check_marian_config",
    "export_marian",
    "import_marian",
    "marian_permutation",
    "marian_table",
    "marian_to_vanilla",
    "permute_state_dict",
    "save_tokenizer_for_any_transformers",
    "vanilla_to_marian",
]
