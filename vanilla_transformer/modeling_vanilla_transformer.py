"""The Transformer of Vaswani et al. (2017), "Attention Is All You Need", as a Hugging Face model.

The file follows the paper's section 3, bottom-up; each unit is its formula:

    3.5    Positional Encoding             sinusoidal_table, SinusoidalPositionalEncoding
    3.2.1  Scaled Dot-Product Attention    eager_attention_forward (or SDPA, through transformers' attention interface)
    3.2.2  Multi-Head Attention            VanillaTransformerAttention
    3.2.3  The masks                       source_mask, target_masks
    3.3    Position-wise Feed-Forward      `_ff_block` in each layer
    3.1    Encoder and Decoder layers      VanillaTransformerEncoderLayer, VanillaTransformerDecoderLayer
    3.4    Embeddings; 3.1 the stacks      `embed` in each stack; VanillaTransformerEncoder, VanillaTransformerDecoder
    3.4    Softmax, weights shared         VanillaTransformerModel, VanillaTransformerForConditionalGeneration

After the model comes what the paper does not have, each piece named for what it is and reached by one call: teacher
forcing and the loss; transformers' contract (the output capture behind ``output_hidden_states`` and
``output_attentions``, the generation cache, the attention backends); the training speed path that runs the
position-wise sublayers on the real tokens only (`packed_layers`, which the stacks apply around their layers); and
the input checks.

Section 5.4's label smoothing is training's, not the model's: the model's own loss (``labels=``) is the plain
cross-entropy of transformers' models, and `token_cross_entropy` takes ``label_smoothing``, which
``vanilla-transformer train`` sets to 0.1 (``accumulate_gradients`` in ``vanilla_transformer/training/step.py``;
``--label-smoothing`` in ``training/config.py``); ``Seq2SeqTrainer`` smooths with ``label_smoothing_factor=0.1``.

Parameter names follow MarianMT (``model.shared``, ``model.encoder.layers.N.self_attn.q_proj``, ``fc1``,
``self_attn_layer_norm``, ``encoder_attn``, ``final_layer_norm``, ``lm_head``), so a checkpoint of this model loads
into a `MarianMTModel` of the same shape; only the positional table differs (Marian's sinusoid puts all sines
before all cosines, the paper interleaves them) and Marian's zero ``final_logits_bias`` is absent here.

This file, ``modeling_vanilla_transformer.py``, imports torch, transformers and four files of its own, which import
only torch, transformers and each other: ``configuration_vanilla_transformer.py`` (the configuration),
``cache_vanilla_transformer.py`` (the generation cache under either of transformers' names),
``generation_vanilla_transformer.py`` (``generate()``'s searches, the paper's beam search among them) and
``decoder_vanilla_transformer.py`` (their incremental decoder, the SDPA backends, the memory check).
``save_pretrained`` copies these five ``.py`` files (this one and its four) next to the weights, so that the model
loads with ``trust_remote_code=True`` where this package is not installed; a model directory the package writes
(``vanilla_transformer.model_dir.save_model_dir``) carries a sixth, ``pipeline_vanilla_transformer.py``, the
translation pipelines.
"""

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.nn import functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, can_return_tuple
from transformers.utils.generic import merge_with_config_defaults
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .cache_vanilla_transformer import cache_field, generation_cache
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .decoder_vanilla_transformer import attention_backends, check_generate_memory
from .generation_vanilla_transformer import MAX_LENGTH_OFFSET, FastGenerationMixin

# --------------------------------------------------------------------------------------------------------------------
# 3.5 Positional Encoding
# "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))"
# --------------------------------------------------------------------------------------------------------------------


def sinusoidal_table(num_positions: int, d_model: int) -> torch.Tensor:
    """The paper's positional encodings, sines in even and cosines in odd dimensions: ``[num_positions, d_model]``."""
    position = torch.arange(num_positions, dtype=torch.float64).unsqueeze(1)  # [P, 1]
    inv_freq = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # [ceil(d/2)]
    angles = position * inv_freq  # [P, ceil(d/2)]
    table = torch.zeros(num_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed (not learned) positional encodings, kept as a non-persistent buffer: computed, never saved."""

    def __init__(self, num_positions: int, d_model: int):
        super().__init__()
        self.num_positions, self.d_model = num_positions, d_model
        self.register_buffer("pe", sinusoidal_table(num_positions, d_model), persistent=False)

    def forward(self, seq_len: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """Positions ``offset .. offset + seq_len - 1``: ``[T, d_model]``, broadcast over the batch."""
        if isinstance(offset, torch.Tensor):
            # A StaticCache reports its length as a tensor: index (no data-dependent branch) so that compiled
            # decoding traces as one graph; the length check is skipped there.
            return self.pe[torch.arange(seq_len, device=self.pe.device) + offset]
        if offset + seq_len > self.num_positions:
            raise ValueError(
                f"sequence length {offset + seq_len} (positions {offset}..{offset + seq_len - 1}) exceeds "
                f"max_position_embeddings={self.num_positions}"
            )
        return self.pe[offset : offset + seq_len]


# --------------------------------------------------------------------------------------------------------------------
# 3.2.1 Scaled Dot-Product Attention
# "Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V"
# --------------------------------------------------------------------------------------------------------------------


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The formula written out. `attention_mask` (`source_mask`, `target_masks`) is added to the scores: 0 where a
    query may attend, the dtype's minimum (the paper's -inf) where it may not; a boolean one (True = keep) is
    turned into that first."""
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # [B, H, Tq, Tk]
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            attention_mask = torch.where(attention_mask, 0.0, torch.finfo(scores.dtype).min).to(scores.dtype)
        scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # [B, Tq, H, d_k]
    return output, weights


# --------------------------------------------------------------------------------------------------------------------
# 3.2.2 Multi-Head Attention
# "MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O where head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)"
# --------------------------------------------------------------------------------------------------------------------


class VanillaTransformerAttention(nn.Module):
    """Multi-head attention. Self-attention when `key_value_states` is None, else encoder-decoder attention.

    The scaled dot-product attention runs on the backend ``config._attn_implementation`` names ("eager": the
    function above; "sdpa": torch's kernel), through transformers' attention interface (`attention_function`).
    ``is_causal`` is set explicitly on every instance: the SDPA path treats a module without it as causal.
    """

    def __init__(
        self, config: VanillaTransformerConfig, num_heads: int, is_causal: bool, layer_idx: int | None = None
    ):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads  # d_k = d_v = d_model / h
        self.scaling = self.head_dim**-0.5
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        self.dropout = config.attention_dropout
        bias = getattr(config, "attention_bias", True)  # configurations saved before the option have biases
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.k_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.v_proj = nn.Linear(config.d_model, config.d_model, bias=bias)
        self.out_proj = nn.Linear(config.d_model, config.d_model, bias=bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(*x.shape[:-1], -1, self.head_dim).transpose(1, 2)  # [B, T, d] -> [B, H, T, d_k]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`hidden_states` ``[B, Tq, d]``; `key_value_states` the encoder output ``[B, Tk, d]``, or None."""
        query = self.split_heads(self.q_proj(hidden_states))  # [B, H, Tq, d_k]
        source = hidden_states if key_value_states is None else key_value_states
        if cache is None:
            key = self.split_heads(self.k_proj(source))  # [B, H, Tk, d_k]
            value = self.split_heads(self.v_proj(source))  # [B, H, Tk, d_k]
        else:  # generation: the keys and values of the past tokens too
            key, value = cached_keys_and_values(self, source, key_value_states is not None, cache)
        output, weights = attention_function(self.config)(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )
        output = output.reshape(*output.shape[:2], -1)  # [B, Tq, H, d_k] -> [B, Tq, d_model] (Concat)
        return self.out_proj(output), weights


# --------------------------------------------------------------------------------------------------------------------
# 3.2.3 Applications of Attention: the masks
# "We need to prevent leftward information flow in the decoder to preserve the auto-regressive property. We implement
# this inside of scaled dot-product attention by masking out (setting to -inf) all values in the input of the softmax
# which correspond to illegal connections."
# Two connections are illegal: to a padding position, in every attention, and to a later position, in the decoder's
# self-attention. transformers builds the masks from these two rules (its `padding_mask_function` and
# `causal_mask_function`: key <= query) in the form the attention backend takes: for "eager" a [B, 1, Tq, Tk] tensor
# of 0 and the dtype's minimum, which `eager_attention_forward` adds to the scores; for "sdpa" a boolean one (True =
# keep), or None where nothing is masked, the decoder's causal rule then going to SDPA as its `is_causal`.
# --------------------------------------------------------------------------------------------------------------------


def source_mask(config, embeds: torch.Tensor, padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The encoder self-attention's mask: every source position, but padding (`padding_mask` ``[B, S]``, 1 = token)."""
    check_padding_mask(padding_mask, "attention_mask", *embeds.shape[:2])
    return create_bidirectional_mask(config=config, inputs_embeds=embeds, attention_mask=padding_mask)


def target_masks(
    config,
    embeds: torch.Tensor,
    padding_mask: torch.Tensor | None,
    cache: Cache | None,
    memory: torch.Tensor | None,
    memory_padding_mask: torch.Tensor | None,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The decoder's masks: for its self-attention, the positions up to each query's own (with the `cache`'s past
    ones) but padding (`padding_mask`, ``[B, past + T]``); for the attention over the encoder output `memory`, every
    source position but padding (`memory_padding_mask`, ``[B, S]``)."""
    batch_size, length = embeds.shape[:2]
    past = cache.get_seq_length() if cache is not None else 0
    check_padding_mask(padding_mask, "decoder_attention_mask", batch_size, past + length)
    if memory is not None:
        check_padding_mask(memory_padding_mask, "attention_mask", batch_size, memory.shape[1])
    self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
    # (config, inputs_embeds, attention_mask, cache): the cache's argument is `cache` from transformers 5.24 on
    causal = create_causal_mask(config, embeds, padding_mask, self_cache)
    cross = create_bidirectional_mask(
        config=config, inputs_embeds=embeds, attention_mask=memory_padding_mask, encoder_hidden_states=memory
    )
    return causal, cross


# --------------------------------------------------------------------------------------------------------------------
# 3.1 Encoder and Decoder Stacks: the layers, with 3.3 Position-wise Feed-Forward Networks
# "the output of each sub-layer is LayerNorm(x + Sublayer(x))"
# 5.4 Residual Dropout: "We apply dropout to the output of each sub-layer, before it is added to the sub-layer input"
# "FFN(x) = max(0, x W_1 + b_1) W_2 + b_2"
# --------------------------------------------------------------------------------------------------------------------


class _PostNormLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: the position-wise FFN and the residual dropout.

    Why post-norm: it is the paper's arrangement, ``x = LayerNorm(x + Dropout(Sublayer(x)))``, and every layer
    output is normalised, so no extra LayerNorm follows the stacks. Later work (pre-norm, as in the Annotated
    Transformer or fairseq's ``normalize_before``) trains deeper stacks with less warmup, but it is a different
    model; here the paper's recipe (warmup 4000, Adam beta2 0.98) keeps post-norm stable at 6 layers.
    """

    def __init__(self, config: VanillaTransformerConfig, ffn_dim: int):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.final_layer_norm = nn.LayerNorm(config.d_model)
        self.activation_fn = ACT2FN[config.activation_function]
        self.dropout = nn.Dropout(config.dropout)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.fc2(self.activation_dropout(self.activation_fn(self.fc1(x)))))


class VanillaTransformerEncoderLayer(_PostNormLayer):
    """Self-attention, then the feed-forward network, each wrapped as LayerNorm(x + Dropout(Sublayer(x)))."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config, config.encoder_ffn_dim)
        self.self_attn = VanillaTransformerAttention(config, config.encoder_attention_heads, is_causal=False)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)

    def _sa_block(self, x: torch.Tensor, mask: torch.Tensor | None, **kwargs) -> torch.Tensor:
        return self.dropout(self.self_attn(x, attention_mask=mask, **kwargs)[0])

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
        x = self.self_attn_layer_norm(hidden_states + self._sa_block(hidden_states, attention_mask, **kwargs))
        return self.final_layer_norm(x + self._ff_block(x))  # [B, S, d_model]


class VanillaTransformerDecoderLayer(_PostNormLayer):
    """Masked self-attention, attention over the encoder output, then the feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config, config.decoder_ffn_dim)
        heads = config.decoder_attention_heads
        self.self_attn = VanillaTransformerAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model)
        self.encoder_attn = VanillaTransformerAttention(config, heads, is_causal=False, layer_idx=layer_idx)
        self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model)

    def _sa_block(self, x, mask, cache, **kwargs) -> torch.Tensor:
        return self.dropout(self.self_attn(x, attention_mask=mask, cache=cache, **kwargs)[0])

    def _mha_block(self, x, memory, memory_mask, cache, **kwargs) -> torch.Tensor:
        out = self.encoder_attn(x, attention_mask=memory_mask, key_value_states=memory, cache=cache, **kwargs)[0]
        return self.dropout(out)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        **kwargs,
    ) -> torch.Tensor:
        x = self.self_attn_layer_norm(hidden_states + self._sa_block(hidden_states, attention_mask, cache, **kwargs))
        if encoder_hidden_states is not None:  # without an encoder output (decoder used alone) there is no memory
            memory, memory_mask = encoder_hidden_states, encoder_attention_mask
            x = self.encoder_attn_layer_norm(x + self._mha_block(x, memory, memory_mask, cache, **kwargs))
        return self.final_layer_norm(x + self._ff_block(x))  # [B, T, d_model]


# --------------------------------------------------------------------------------------------------------------------
# 3.4 Embeddings, and 3.1 the stacks
# "we multiply those weights by sqrt(d_model)"; 3.5: "We add 'positional encodings' to the input embeddings at the
# bottoms of the encoder and decoder stacks"; 5.4: "we apply dropout to the sums of the embeddings and the positional
# encodings in both the encoder and decoder stacks"
# --------------------------------------------------------------------------------------------------------------------


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    """The model classes' base: transformers' settings, and the initialisation (which the paper does not state)."""

    config: VanillaTransformerConfig
    base_model_prefix = "model"
    supports_gradient_checkpointing = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    _supports_attention_backend = True
    _can_compile_fullgraph = True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Xavier-uniform linear layers (tensor2tensor/fairseq) unless `init_std` is set; N(0, d_model^-0.5)
        embeddings, so that after the sqrt(d_model) scaling of section 3.4 tokens and positions have equal scale."""
        config = self.config
        if isinstance(module, nn.Linear):
            if config.init_std is None:
                init.xavier_uniform_(module.weight)
            else:
                init.normal_(module.weight, mean=0.0, std=config.init_std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=config.d_model**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEncoding):
            init.copy_(module.pe, sinusoidal_table(module.num_positions, module.d_model))


class _TransformerStack(VanillaTransformerPreTrainedModel):
    """What both stacks start with (3.4, 3.5, 5.4): ``Dropout(Embedding(x) * sqrt(d_model) + PE)``."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = SinusoidalPositionalEncoding(config.max_position_embeddings, config.d_model)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = nn.Dropout(config.dropout)

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def embed(self, input_ids, inputs_embeds, name: str, offset: int = 0) -> torch.Tensor:
        """The token ids `input_ids` (named `name` in errors), or their `inputs_embeds`, from position `offset` on."""
        tokens = checked_token_embeddings(self.embed_tokens, input_ids, inputs_embeds, name)  # [B, T, d_model]
        positions = self.embed_positions(tokens.shape[1], offset)  # [T, d_model]
        return self.dropout(tokens * self.embed_scale + positions.to(tokens.dtype))


class VanillaTransformerEncoder(_TransformerStack):
    """N layers of self-attention and feed-forward, over the source sentence.

    (Its forward also returns every layer's output and attention weights when asked: `record_outputs`, below.)"""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaTransformerEncoderLayer(config, i) for i in range(config.encoder_layers))
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        """`input_ids` and their padding `attention_mask` (1 = token): ``[B, S]``."""
        x = self.embed(input_ids, inputs_embeds, "input_ids")  # [B, S, d_model]
        mask = source_mask(self.config, x, attention_mask)
        with packed_layers(self, packing_of(self, attention_mask, x)):  # (training speed only)
            for layer in self.layers:
                x = layer(x, mask, **kwargs)
        return BaseModelOutput(last_hidden_state=x)


class VanillaTransformerDecoder(_TransformerStack):
    """N layers of masked self-attention, encoder-decoder attention and feed-forward, over the target prefix.

    (Its forward also returns every layer's output and attention weights when asked: `record_outputs`, below.)"""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaTransformerDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """`input_ids` ``[B, T]``, the encoder output `encoder_hidden_states` ``[B, S, d_model]`` and the two
        padding masks; `cache` (``past_key_values`` before transformers 5.24): the past tokens' keys and values."""
        cache = decoder_cache(self.config, cache, past_key_values, use_cache, kwargs)
        past = cache.get_seq_length() if cache is not None else 0
        x = self.embed(input_ids, inputs_embeds, "decoder_input_ids", offset=past)  # [B, T, d_model]
        packing, memory_packing, attention_mask = decoder_packing(  # (training speed only)
            self, x, attention_mask, encoder_hidden_states, encoder_attention_mask
        )
        masks = target_masks(self.config, x, attention_mask, cache, encoder_hidden_states, encoder_attention_mask)
        self_mask, memory_mask = masks
        memory = encoder_hidden_states  # positional below, for reentrant gradient checkpointing
        with packed_layers(self, packing, memory_packing):
            for layer in self.layers:
                x = layer(x, self_mask, memory, encoder_attention_mask=memory_mask, cache=cache, **kwargs)
        return with_cache(BaseModelOutputWithPastAndCrossAttentions, cache, last_hidden_state=x)


# --------------------------------------------------------------------------------------------------------------------
# The encoder-decoder, and 3.4 Embeddings and Softmax
# "we share the same weight matrix between the two embedding layers and the pre-softmax linear transformation"
# --------------------------------------------------------------------------------------------------------------------


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The bare encoder-decoder, returning the decoder's last hidden states (no output projection)."""

    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        # With tie_word_embeddings=False the encoder, the decoder and lm_head each keep their own matrix.
        tied = config.tie_word_embeddings
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id) if tied else None
        self.encoder = VanillaTransformerEncoder(config)
        self.decoder = VanillaTransformerDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        if self.config.tie_word_embeddings:
            self.shared = self.decoder.embed_tokens = value
        elif self.decoder.embed_tokens.num_embeddings != value.num_embeddings:
            # Untied, resizing the vocabulary must resize the decoder's own embedding too.
            self.decoder.embed_tokens = self._get_resized_embeddings(self.decoder.embed_tokens, value.num_embeddings)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """`cache` (``past_key_values`` before transformers 5.24): the decoder's keys and values of past tokens;
        `encoder_outputs`: the encoder's, when already computed (generation computes them once)."""
        cache = generation_cache(cache, past_key_values, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        encoder_outputs = as_encoder_output(encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return model_output(encoder_outputs, decoder_outputs)


class VanillaTransformerForConditionalGeneration(
    VanillaTransformerPreTrainedModel, FastGenerationMixin, GenerationMixin
):
    """The Transformer with its output projection ("pre-softmax linear transformation"), for translation.

    ``generate()`` runs greedy and beam search with the incremental decoder of ``generation_vanilla_transformer.py``
    (`FastGenerationMixin`), and the paper's beam search (GNMT length penalty, input length + 50) when the generation
    config asks for it; calls that decoder does not serve go to transformers' own loop.
    """

    _tied_weights_keys = {
        "lm_head.weight": "model.shared.weight",
        "model.encoder.embed_tokens.weight": "model.shared.weight",
        "model.decoder.embed_tokens.weight": "model.shared.weight",
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        r"""
        cache: the decoder's keys and values of past tokens (transformers' generation passes it; before
            transformers 5.24 as `past_key_values`, which is still accepted).
        labels: target token ids ``[B, T]``; -100 marks positions to ignore. When given without
            `decoder_input_ids`, the decoder inputs are the labels shifted right behind `decoder_start_token_id`.
        num_items_in_batch: number of non-ignored label tokens across a whole (accumulated, multi-process) batch.
            When given, the loss is the summed cross-entropy divided by it, so gradient accumulation does not
            change the per-token normalisation (the Trainer passes it).
        """
        cache = generation_cache(cache, past_key_values, kwargs)
        if labels is not None:  # training: teacher forcing, no cache
            check_labels(labels, decoder_input_ids, self.config.vocab_size)
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
            if decoder_attention_mask is None:  # (training speed only: the positions `packing_of` may skip)
                decoder_attention_mask = scored_positions(self.model.decoder, labels)
        outputs: Seq2SeqModelOutput = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # [B, T, d_model]
        packing = packing_of(self.model.decoder, decoder_attention_mask, hidden_states)
        with packed_modules(packing, [self.lm_head]):  # (training speed only)
            logits = self.lm_head(hidden_states)  # [B, T, vocab_size], before the softmax
        loss = None if labels is None else token_cross_entropy(logits, labels.to(logits.device), num_items_in_batch)
        return lm_output(outputs, loss, logits)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, *args, **kwargs):
        """transformers' ``generate()``, after the search's memory check (`check_generate_memory`): a ``num_beams``
        the memory cannot hold is refused with one ValueError naming it, before transformers repeats the encoder's
        inputs and outputs for each beam."""
        check_generate_memory(self, inputs, generation_config, kwargs, MAX_LENGTH_OFFSET)
        return super().generate(inputs, generation_config, *args, **kwargs)

    def _reorder_cache(self, cache: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search: make the cache follow the surviving beams, reordering only the self-attention cache.

        The cross-attention keys and values of all beams of a sentence are equal (its encoder output, repeated per
        beam), and beam search reorders beams within a sentence only: reordering them would copy identical rows.
        """
        if isinstance(cache, EncoderDecoderCache):
            cache.self_attention_cache.reorder_cache(beam_idx)
        else:
            cache.reorder_cache(beam_idx)
        return cache


# --------------------------------------------------------------------------------------------------------------------
# Training: teacher forcing and the loss
# --------------------------------------------------------------------------------------------------------------------


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int | None, decoder_start_token_id: int | None):
    """Decoder inputs from labels (teacher forcing): ``[start, y_1, ..., y_{n-1}]``, with -100 replaced by pad."""
    if decoder_start_token_id is None:
        raise ValueError("decoder_start_token_id=None: set config.decoder_start_token_id to shift labels right")
    if pad_token_id is None:
        raise ValueError("pad_token_id=None: set config.pad_token_id to shift labels right")
    shifted = labels.new_empty(labels.shape)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill_(shifted == -100, pad_token_id)


def token_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy per target token, ignoring -100; summed and divided by `num_items_in_batch` when given.
    `label_smoothing`: section 5.4's epsilon_ls (``vanilla-transformer train`` passes 0.1; the model's own loss 0)."""
    reduction = "mean" if num_items_in_batch is None else "sum"
    loss = F.cross_entropy(
        logits.flatten(0, 1).float(),  # [B*T, V]
        labels.flatten(),  # [B*T]
        ignore_index=-100,
        reduction=reduction,
        label_smoothing=label_smoothing,
    )
    if num_items_in_batch is not None:
        loss = loss / num_items_in_batch
    return loss


# --------------------------------------------------------------------------------------------------------------------
# transformers' contract, not the paper's: output capture, outputs, the generation cache, the attention backends
# --------------------------------------------------------------------------------------------------------------------


def record_outputs(stack: type[PreTrainedModel], **recorders) -> None:
    """Make `stack`'s forward return the outputs of the modules `recorders` names when asked (``output_hidden_states``,
    ``output_attentions``, in the call or the configuration), as transformers' models do: transformers'
    `capture_outputs` records them with hooks, and `merge_with_config_defaults` fills the flags from the config."""
    stack._can_record_outputs = recorders
    stack.forward = merge_with_config_defaults(capture_outputs(stack.forward))


record_outputs(
    VanillaTransformerEncoder, hidden_states=VanillaTransformerEncoderLayer, attentions=VanillaTransformerAttention
)
record_outputs(
    VanillaTransformerDecoder,
    hidden_states=VanillaTransformerDecoderLayer,
    attentions=OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
    cross_attentions=OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
)


def as_encoder_output(encoder_outputs: tuple | BaseModelOutput) -> BaseModelOutput:
    """The encoder's outputs as a `BaseModelOutput`, given one or a tuple (``return_dict=False``)."""
    if isinstance(encoder_outputs, BaseModelOutput):
        return encoder_outputs
    return BaseModelOutput(
        last_hidden_state=encoder_outputs[0],
        hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
        attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
    )


def model_output(encoder_outputs: BaseModelOutput, decoder_outputs) -> Seq2SeqModelOutput:
    """The encoder-decoder's output: the decoder's, with the encoder's fields and the decoder's cache."""
    return with_cache(
        Seq2SeqModelOutput,
        cache_of(decoder_outputs),
        last_hidden_state=decoder_outputs.last_hidden_state,
        decoder_hidden_states=decoder_outputs.hidden_states,
        decoder_attentions=decoder_outputs.attentions,
        cross_attentions=decoder_outputs.cross_attentions,
        encoder_last_hidden_state=encoder_outputs.last_hidden_state,
        encoder_hidden_states=encoder_outputs.hidden_states,
        encoder_attentions=encoder_outputs.attentions,
    )


def lm_output(outputs: Seq2SeqModelOutput, loss: torch.Tensor | None, logits: torch.Tensor) -> Seq2SeqLMOutput:
    """The translation model's output: the loss and logits, with the encoder-decoder's other fields and cache."""
    return with_cache(
        Seq2SeqLMOutput,
        cache_of(outputs),
        loss=loss,
        logits=logits,
        decoder_hidden_states=outputs.decoder_hidden_states,
        decoder_attentions=outputs.decoder_attentions,
        cross_attentions=outputs.cross_attentions,
        encoder_last_hidden_state=outputs.encoder_last_hidden_state,
        encoder_hidden_states=outputs.encoder_hidden_states,
        encoder_attentions=outputs.encoder_attentions,
    )


def with_cache(output_class: type, cache: Cache | None, **fields):
    """An output holding the cache in the field generation reads it from (``cache`` from transformers 5.24 on)."""
    return output_class(**fields, **{cache_field(output_class): cache})


def cache_of(outputs) -> Cache | None:
    return getattr(outputs, cache_field(type(outputs)))


def decoder_cache(config, cache: Cache | None, past_key_values: Cache | None, use_cache: bool | None, kwargs: dict):
    """The decoder's generation cache (`generation_cache`: under either of transformers' names); a new, empty one
    with `use_cache` and none given."""
    cache = generation_cache(cache, past_key_values, kwargs)
    if use_cache and cache is None:
        cache = EncoderDecoderCache(DynamicCache(config=config), DynamicCache(config=config))
    return cache


def cached_keys_and_values(
    attention: VanillaTransformerAttention, source: torch.Tensor, is_cross: bool, cache: Cache
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generation: `attention`'s keys and values ``[B, H, Tk, d_k]`` of the past tokens and of `source`'s, stored
    in `cache` (an `EncoderDecoderCache`: self-attention's grow by `source` at every step; the encoder output does
    not change while decoding, so cross-attention's are projected once)."""
    layer = attention.layer_idx
    layer_cache = cache
    if isinstance(cache, EncoderDecoderCache):
        layer_cache = cache.cross_attention_cache if is_cross else cache.self_attention_cache
    if is_cross and cache.is_updated.get(layer):
        return layer_cache.layers[layer].keys, layer_cache.layers[layer].values
    key, value = attention.split_heads(attention.k_proj(source)), attention.split_heads(attention.v_proj(source))
    key, value = layer_cache.update(key, value, layer)
    if is_cross:
        cache.is_updated[layer] = True
    return key, value


def attention_function(config) -> Callable:
    """The scaled dot-product attention of ``config._attn_implementation``, from transformers' attention interface
    (`eager_attention_forward` for "eager"). SDPA runs under the model's choice of its backends on the query's
    device (`attention_backends`: on CUDA, not cuDNN's); any other implementation is the user's explicit choice,
    and is left alone."""
    implementation = config._attn_implementation
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    if implementation != "sdpa":
        return attention

    def sdpa_on_chosen_backends(module, query, *args, **kwargs):
        with attention_backends(query.device):
            return attention(module, query, *args, **kwargs)

    return sdpa_on_chosen_backends


# --------------------------------------------------------------------------------------------------------------------
# Training speed: the position-wise sublayers on the real tokens only
# Every sublayer but attention is position-wise: the projections, the feed-forward network, the residual additions
# and the LayerNorms act on each position separately, so they can run on the [N, d] real tokens of a padded batch.
# --------------------------------------------------------------------------------------------------------------------


PACKING_THRESHOLDS: dict[str, float] = {"cpu": 0.1}
"""``pack_tokens="auto"``: the device types on which packing pays, each with the share of padding above which it does.
On the CPU (fp32, eager), Seq2SeqTrainer's random batches, half padding, train markedly faster packed, and
length-bucketed token batches, under 1% padding, gain nothing (scripts/benchmark_packing.py, its figures in
docs/performance.md). A device type not listed (CUDA, until a GPU run measures it: there the gathers and scatters
are extra kernel launches) never packs."""


def packing_threshold(pack_tokens: bool | str, device_type: str) -> float | None:
    """The share of padding above which a training batch on `device_type` is packed; None: never packed.
    `pack_tokens` is the configuration's: True packs any padded batch, False none, "auto" by `PACKING_THRESHOLDS`."""
    if pack_tokens == "auto":
        return PACKING_THRESHOLDS.get(device_type)
    return 0.0 if pack_tokens else None


class TokenPacking:
    """The real-token positions of a padded ``[B, T]`` batch: `pack` gathers them, `unpack` scatters them back.

    Hidden states and logits at padded positions are zero instead of computed (they are masked out of attention and
    the loss): loss and gradients are unchanged. In evaluation every position is computed, as in other
    implementations.
    """

    def __init__(self, keep: torch.Tensor):
        self.batch_size, self.length = keep.shape
        self.index = keep.flatten().nonzero().squeeze(1)  # [N], real positions in the flattened [B * T]
        self.right_padded = bool((keep[:, 1:] <= keep[:, :-1]).all())  # every row: tokens, then padding

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1).index_select(0, self.index)  # [B, T, ...] -> [N, ...]

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(self.batch_size * self.length, *x.shape[1:])
        return padded.index_copy_(0, self.index, x).unflatten(0, (self.batch_size, self.length))  # -> [B, T, ...]


def packs(module: nn.Module, padding_mask: torch.Tensor | None) -> bool:
    """Whether `module` (a stack) packs a batch with this 2D padding mask (1 = token): in training, by
    `packing_threshold`; never while compiling, nor where the layers are compiled one by one (regional compilation):
    the number of real tokens would be a data-dependent shape; nor under gradient checkpointing, whose recomputation
    runs the layers again after `packed_layers` has left them."""
    if not module.training or padding_mask is None or padding_mask.dim() != 2 or torch.compiler.is_compiling():
        return False
    layers = getattr(module, "layers", ())
    if not all(isinstance(layer, _PostNormLayer) and not layer.gradient_checkpointing for layer in layers):
        return False  # a layer wrapped by the compiler (regional compilation) is no longer one of ours
    threshold = packing_threshold(getattr(module.config, "pack_tokens", "auto"), padding_mask.device.type)
    if threshold is None:
        return False  # (decided without reading the mask: no host-device sync)
    padded = padding_mask.numel() - padding_mask.bool().sum()
    return bool(padded > threshold * padding_mask.numel())


def packing_of(stack: nn.Module, padding_mask: torch.Tensor | None, embeds: torch.Tensor | None):
    """The packing of the ``[B, T]`` positions of `embeds` by their `padding_mask`, where `stack` `packs` them; None
    where not, or where the mask is not ``[B, T]`` (a decoder continuing from cached positions, or a wrong shape,
    which the masks' checks report)."""
    if embeds is None or padding_mask is None or tuple(padding_mask.shape) != tuple(embeds.shape[:2]):
        return None
    return TokenPacking(padding_mask.bool()) if packs(stack, padding_mask) else None


def decoder_packing(decoder, embeds, padding_mask, memory, memory_padding_mask):
    """The `decoder`'s packings (`packing_of`) of its target positions and of the source positions of the encoder
    output `memory`, and the padding mask its self-attention then needs: none where every row's padding trails its
    tokens, as causality hides it from them (and SDPA keeps its mask-free causal kernel)."""
    packing = packing_of(decoder, padding_mask, embeds)
    memory_packing = packing_of(decoder, memory_padding_mask, memory)
    return packing, memory_packing, None if packing is not None and packing.right_padded else padding_mask


def scored_positions(decoder: nn.Module, labels: torch.Tensor) -> torch.Tensor | None:
    """In training with `labels` and no decoder mask: the positions up to each row's last scored label, where the
    `decoder` packs them (after those, the positions only give logits the loss ignores); else None, as no mask is
    needed: causal attention hides those positions from the real tokens (SDPA keeps its mask-free causal kernel)."""
    if not decoder.training:
        return None
    scored = labels != -100
    trailing = scored.flip(1).cummax(1).values.flip(1)  # [B, T], True up to the last label
    return trailing if packs(decoder, trailing) else None


@contextmanager
def packed_modules(packing: TokenPacking | None, modules: list[nn.Module]) -> Iterator[None]:
    """Inside it, each of `modules` (position-wise: a linear layer) computes its ``[B, T, ...]`` input's real
    positions only, and returns them scattered back into ``[B, T, ...]``."""
    with _hooks(packing, [(module, True, True) for module in modules]):
        yield


@contextmanager
def packed_layers(stack: nn.Module, packing: TokenPacking | None, memory_packing: TokenPacking | None = None):
    """Inside it, the layers of `stack` run on the ``[N, d]`` real tokens of `packing`: each layer packs its input and
    unpacks its output; in each attention the query, key and value projections are unpacked into the ``[B, T, d]``
    layout attention needs, and its output packed again for the output projection. With `memory_packing` (the
    source's), the keys and values of the attention over the encoder output are projected from its real tokens.
    Hooks on the modules do it (removed as it exits): the layers' code is the paper's, whether packed or not."""
    hooks = []  # (module, packs its first input, unpacks its output)
    for layer in stack.layers if packing is not None else ():
        hooks.append((layer, True, True))
        for attention in (layer.self_attn, getattr(layer, "encoder_attn", None)):
            if attention is None:
                continue
            hooks += [(attention.q_proj, False, True), (attention.out_proj, True, False)]
            if attention is layer.self_attn:
                hooks += [(attention.k_proj, False, True), (attention.v_proj, False, True)]
    memory_hooks = []
    for layer in stack.layers if memory_packing is not None else ():
        memory_hooks += [(layer.encoder_attn.k_proj, True, True), (layer.encoder_attn.v_proj, True, True)]
    with _hooks(packing, hooks), _hooks(memory_packing, memory_hooks):
        yield


@contextmanager
def _hooks(packing: TokenPacking | None, targets: list[tuple[nn.Module, bool, bool]]) -> Iterator[None]:
    """Forward hooks that pack the first input and/or unpack the output of each target ``(module, pack, unpack)``;
    the unpacking hooks run before any other (transformers' output capture records the unpacked outputs)."""
    if packing is None or not targets:
        yield
        return
    handles = []
    for module, pack, unpack in targets:
        if pack:
            handles.append(module.register_forward_pre_hook(lambda _, args: (packing.pack(args[0]), *args[1:])))
        if unpack:
            handles.append(module.register_forward_hook(lambda *call: packing.unpack(call[2]), prepend=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# --------------------------------------------------------------------------------------------------------------------
# Input checks: a clear ValueError naming the argument, before any computation
# --------------------------------------------------------------------------------------------------------------------


def checked_token_embeddings(embeddings: nn.Embedding, input_ids, inputs_embeds, name: str) -> torch.Tensor:
    """The embeddings ``[B, T, d_model]`` of the token ids `input_ids` (named `name`), or `inputs_embeds` as given;
    exactly one of the two, of at least one row and token, ids inside the vocabulary."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(f"pass exactly one of {name} and its inputs_embeds")
    if inputs_embeds is None:
        check_token_ids(input_ids, name, embeddings.num_embeddings)
        inputs_embeds = embeddings(input_ids)
    if inputs_embeds.dim() != 3 or inputs_embeds.shape[0] == 0 or inputs_embeds.shape[1] == 0:
        shape = tuple(inputs_embeds.shape[:-1])  # nothing to attend to
        raise ValueError(f"{name} has shape {shape}: expected (batch_size, length) with at least one row and token")
    return inputs_embeds


def check_token_ids(ids: torch.Tensor | None, name: str, vocab_size: int, ignore_index: int | None = None) -> None:
    if ids is None or ids.numel() == 0 or torch.compiler.is_compiling():
        return
    if ignore_index is not None:
        ids = ids[ids != ignore_index]
        if ids.numel() == 0:
            return
    low, high = (bound.item() for bound in torch.aminmax(ids))  # one pass over the ids
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contains token id {bad}, outside [0, vocab_size={vocab_size})")


def check_labels(labels: torch.Tensor, decoder_input_ids: torch.Tensor | None, vocab_size: int) -> None:
    check_token_ids(labels, "labels", vocab_size, ignore_index=-100)
    if decoder_input_ids is not None and decoder_input_ids.shape[:2] != labels.shape[:2]:
        raise ValueError(
            f"labels has shape {tuple(labels.shape)} but decoder_input_ids has shape "
            f"{tuple(decoder_input_ids.shape)}: they must have the same (batch, length)"
        )


def check_padding_mask(mask: torch.Tensor | None, name: str, batch_size: int, length: int) -> None:
    """A 2D padding mask must be [batch, length]; 4D masks are the caller's own and pass through as they are."""
    if mask is None or mask.dim() == 4:
        return
    if mask.dim() != 2:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}: expected a 2D padding mask (batch_size, length) = "
            f"{(batch_size, length)}, or a 4D attention mask"
        )
    if tuple(mask.shape) != (batch_size, length):
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}, expected (batch_size, length) = {(batch_size, length)}"
        )


__all__ = [
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "PACKING_THRESHOLDS",
    "packing_threshold",
    "shift_tokens_right",
    "sinusoidal_table",
]
