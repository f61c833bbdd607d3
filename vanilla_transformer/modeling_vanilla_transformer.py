"""The Transformer of Vaswani et al. (2017), "Attention Is All You Need", as a Hugging Face model.

The file follows the paper's section 3, bottom-up:

    3.5  Positional Encoding               SinusoidalPositionalEncoding
    3.2  Attention                         eager_attention_forward, VanillaTransformerAttention
    3.3  Position-wise Feed-Forward        fc1 / fc2 inside each layer (`_ff_block`)
    3.1  Encoder and Decoder Stacks        VanillaTransformerEncoderLayer / DecoderLayer, Encoder / Decoder
    3.4  Embeddings and Softmax            `shared` embedding, tied to the encoder, decoder and `lm_head`

Parameter names follow MarianMT (``model.shared``, ``model.encoder.layers.N.self_attn.q_proj``, ``fc1``,
``self_attn_layer_norm``, ``encoder_attn``, ``final_layer_norm``, ``lm_head``), so a checkpoint of this model loads
into a `MarianMTModel` of the same shape; only the positional table differs (Marian's sinusoid puts all sines
before all cosines, the paper interleaves them) and Marian's zero ``final_logits_bias`` is absent here.

This file imports only torch, transformers and its own configuration file: `save_pretrained` copies both files
next to the weights, so the model loads with ``trust_remote_code=True`` where this package is not installed.
"""

import math
from collections.abc import Callable
from contextlib import nullcontext

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
        if isinstance(offset, torch.Tensor):
            # A StaticCache reports its length as a tensor: index (no data-dependent branch) so that compiled
            # decoding traces as one graph; the length check is skipped there.
            return self.pe[torch.arange(seq_len, device=self.pe.device) + offset]
        if offset + seq_len > self.num_positions:
            raise ValueError(
                f"sequence length {offset + seq_len} (positions {offset}..{offset + seq_len - 1}) exceeds "
                f"max_position_embeddings={self.num_positions}"
            )
        return self.pe[offset : offset + seq_len]  # [T, d_model], broadcast over the batch


# --------------------------------------------------------------------------------------------------------------------
# Training without computing padding
# Every sublayer but attention is position-wise: the projections, the feed-forward network, the residual additions
# and the LayerNorms act on each position separately, so they can run on the [N, d] real tokens of a padded batch.
# --------------------------------------------------------------------------------------------------------------------


PACKING_THRESHOLDS: dict[str, float] = {"cpu": 0.1}
"""``pack_tokens="auto"``: the device types on which packing pays, each with the share of padding above which it does.
On the CPU, under 10% padding (length-bucketed batches) gathering and scattering the tokens cost about what they
save. A device type not listed (CUDA, until a GPU run measures it: there the gathers and scatters are extra kernel
launches) never packs."""


def packing_threshold(pack_tokens: bool | str, device_type: str) -> float | None:
    """The share of padding above which a training batch on `device_type` is packed; None: never packed.
    `pack_tokens` is the configuration's: True packs any padded batch, False none, "auto" by `PACKING_THRESHOLDS`."""
    if pack_tokens == "auto":
        return PACKING_THRESHOLDS.get(device_type)
    return 0.0 if pack_tokens else None


class _Packing:
    """The real-token positions of a padded ``[B, T]`` batch: `pack` gathers them, `unpack` scatters them back.

    Used in training, where randomly batched sentences are 30-50% padding: the position-wise sublayers then work on
    the N real tokens only, and attention, which needs the ``[B, T]`` layout, unpacks its projections. Hidden states
    and logits at padded positions are zero instead of computed (they are masked out of attention and the loss).
    Loss and gradients are unchanged; in evaluation every position is computed, as in other implementations.
    Whether a batch is packed is ``config.pack_tokens`` (`packing_threshold`).
    """

    def __init__(self, keep: torch.Tensor):
        self.batch_size, self.length = keep.shape
        self.index = keep.flatten().nonzero().squeeze(1)  # [N], real positions in the flattened [B * T]
        self.right_padded = bool((keep[:, 1:] <= keep[:, :-1]).all())  # every row: tokens, then padding

    @staticmethod
    def wanted(module: nn.Module, padding_mask: torch.Tensor | None) -> bool:
        """Whether to pack a batch with this 2D padding mask (1 = token): in training, by `packing_threshold`;
        never while compiling, nor where the layers are compiled one by one (regional compilation): the number of real
        tokens would be a data-dependent shape."""
        if not module.training or padding_mask is None or padding_mask.dim() != 2 or torch.compiler.is_compiling():
            return False
        if not all(isinstance(layer, _PostNormLayer) for layer in getattr(module, "layers", ())):
            return False  # a layer wrapped by the compiler (regional compilation) is no longer one of ours
        threshold = packing_threshold(getattr(module.config, "pack_tokens", "auto"), padding_mask.device.type)
        if threshold is None:
            return False  # (decided without reading the mask: no host-device sync)
        padded = padding_mask.numel() - padding_mask.bool().sum()
        return bool(padded > threshold * padding_mask.numel())

    @classmethod
    def of(cls, module: nn.Module, padding_mask: torch.Tensor | None) -> "_Packing | None":
        return cls(padding_mask.bool()) if cls.wanted(module, padding_mask) else None

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(0, 1).index_select(0, self.index)  # [B, T, ...] -> [N, ...]

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        padded = x.new_zeros(self.batch_size * self.length, *x.shape[1:])
        return padded.index_copy_(0, self.index, x).unflatten(0, (self.batch_size, self.length))  # -> [B, T, ...]


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
    """The formula written out; `attention_mask` is additive (0 or the dtype's minimum) or boolean (True = keep)."""
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

    The backend ("eager", "sdpa", ...) is chosen by ``config._attn_implementation`` through transformers' attention
    interface. ``is_causal`` is set explicitly on every instance: the SDPA path treats a module without it as causal.
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

    def _split_heads(self, x: torch.Tensor, packing: _Packing | None = None) -> torch.Tensor:
        if packing is not None:
            x = packing.unpack(x)  # [N, d] real tokens -> [B, T, d]
        return x.view(*x.shape[:-1], -1, self.head_dim).transpose(1, 2)  # [B, T, d] -> [B, H, T, d_k]

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        packing: _Packing | None = None,
        memory_packing: _Packing | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`hidden_states` and `key_value_states` are ``[B, T, d]``, or ``[N, d]`` real tokens given their packing."""
        is_cross = key_value_states is not None
        query = self._split_heads(self.q_proj(hidden_states), packing)  # [B, H, Tq, d_k]

        layer_cache = cache
        if isinstance(cache, EncoderDecoderCache):
            layer_cache = cache.cross_attention_cache if is_cross else cache.self_attention_cache
        if is_cross and layer_cache is not None and cache.is_updated.get(self.layer_idx):
            # The encoder output does not change while decoding: its keys and values are projected once.
            key, value = layer_cache.layers[self.layer_idx].keys, layer_cache.layers[self.layer_idx].values
        else:
            source, source_packing = (key_value_states, memory_packing) if is_cross else (hidden_states, packing)
            key = self._split_heads(self.k_proj(source), source_packing)  # [B, H, Tk, d_k]
            value = self._split_heads(self.v_proj(source), source_packing)  # [B, H, Tk, d_k]
            if layer_cache is not None:
                key, value = layer_cache.update(key, value, self.layer_idx)
                if is_cross:
                    cache.is_updated[self.layer_idx] = True

        implementation = self.config._attn_implementation
        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        # SDPA runs under the model's choice of its backends on this device (`SDPA_BACKENDS`: on CUDA, not cuDNN's);
        # any other implementation is the user's explicit choice, and is left alone.
        with attention_backends(query.device) if implementation == "sdpa" else nullcontext():
            output, weights = attention(
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
        if packing is not None:
            output = packing.pack(output)  # -> [N, d_model]
        return self.out_proj(output), weights


# --------------------------------------------------------------------------------------------------------------------
# 3.1 Encoder and Decoder Stacks, with 3.3 Position-wise Feed-Forward Networks
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

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        packing: _Packing | None = None,
        **kwargs,
    ) -> torch.Tensor:
        x = hidden_states if packing is None else packing.pack(hidden_states)  # [B, S, d], or [N, d] real tokens
        x = self.self_attn_layer_norm(x + self._sa_block(x, attention_mask, packing=packing, **kwargs))
        x = self.final_layer_norm(x + self._ff_block(x))
        return x if packing is None else packing.unpack(x)


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
        packing: _Packing | None = None,
        memory_packing: _Packing | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """With `memory_packing`, `encoder_hidden_states` holds the ``[N_source, d]`` real source tokens."""
        kwargs.update(packing=packing, memory_packing=memory_packing)
        x = hidden_states if packing is None else packing.pack(hidden_states)  # [B, T, d], or [N, d] real tokens
        x = self.self_attn_layer_norm(x + self._sa_block(x, attention_mask, cache, **kwargs))
        if encoder_hidden_states is not None:  # without an encoder output (decoder used alone) there is no memory
            x = self.encoder_attn_layer_norm(
                x + self._mha_block(x, encoder_hidden_states, encoder_attention_mask, cache, **kwargs)
            )
        x = self.final_layer_norm(x + self._ff_block(x))
        return x if packing is None else packing.unpack(x)


# --------------------------------------------------------------------------------------------------------------------
# Pretrained-model plumbing: initialisation, input checks
# --------------------------------------------------------------------------------------------------------------------


class VanillaTransformerPreTrainedModel(PreTrainedModel):
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


def _check_token_ids(ids: torch.Tensor | None, name: str, vocab_size: int, ignore_index: int | None = None) -> None:
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


def _check_not_empty(embeds: torch.Tensor, name: str) -> None:
    """A batch of no sentences, or of sentences of no tokens, has nothing to attend to."""
    if embeds.dim() != 3 or embeds.shape[0] == 0 or embeds.shape[1] == 0:
        shape = tuple(embeds.shape[:-1])
        raise ValueError(f"{name} has shape {shape}: expected (batch_size, length) with at least one row and token")


def _check_padding_mask(mask: torch.Tensor | None, name: str, batch_size: int, length: int) -> None:
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


class _TransformerStack(VanillaTransformerPreTrainedModel):
    """3.4: token embeddings times sqrt(d_model), plus positional encodings, then dropout (section 5.4)."""

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
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"pass exactly one of {name} and its inputs_embeds")
        if inputs_embeds is None:
            _check_token_ids(input_ids, name, self.embed_tokens.num_embeddings)
            inputs_embeds = self.embed_tokens(input_ids)
        _check_not_empty(inputs_embeds, name)
        positions = self.embed_positions(inputs_embeds.shape[1], offset)  # [T, d_model]
        return self.dropout(inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype))


class VanillaTransformerEncoder(_TransformerStack):
    """N layers of self-attention and feed-forward, over the source sentence."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerEncoderLayer,
        "attentions": VanillaTransformerAttention,
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaTransformerEncoderLayer(config, i) for i in range(config.encoder_layers))
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        hidden_states = self.embed(input_ids, inputs_embeds, "input_ids")  # [B, S, d_model]
        _check_padding_mask(attention_mask, "attention_mask", *hidden_states.shape[:2])
        mask = create_bidirectional_mask(
            config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask
        )
        packing = _Packing.of(self, attention_mask)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, packing=packing, **kwargs)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaTransformerDecoder(_TransformerStack):
    """N layers of masked self-attention, encoder-decoder attention and feed-forward, over the target prefix."""

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(VanillaTransformerAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.layers = nn.ModuleList(VanillaTransformerDecoderLayer(config, i) for i in range(config.decoder_layers))
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
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
        """`cache` (``past_key_values`` before transformers 5.24) holds the keys and values of the past tokens."""
        cache = generation_cache(cache, past_key_values, kwargs)
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embed(input_ids, inputs_embeds, "decoder_input_ids", offset=past_length)  # [B, T, d]
        batch_size, length = hidden_states.shape[:2]
        _check_padding_mask(attention_mask, "decoder_attention_mask", batch_size, past_length + length)
        if encoder_hidden_states is not None:
            _check_padding_mask(encoder_attention_mask, "attention_mask", batch_size, encoder_hidden_states.shape[1])

        packing = _Packing.of(self, attention_mask)  # None in eval mode and while compiling
        if packing is not None and past_length > 0:  # (test after: past_length is a tensor under a StaticCache)
            packing = None
        if packing is not None and packing.right_padded:
            # Causal attention already hides each row's trailing padding from its real tokens, and padded positions
            # are not computed: no padding mask is needed, and SDPA keeps its mask-free causal kernel.
            attention_mask = None
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        # (config, inputs_embeds, attention_mask, cache): the cache's argument is `cache` from transformers 5.24 on
        causal_mask = create_causal_mask(self.config, hidden_states, attention_mask, self_cache)
        memory_mask = create_bidirectional_mask(
            config=self.config,
            inputs_embeds=hidden_states,
            attention_mask=encoder_attention_mask,
            encoder_hidden_states=encoder_hidden_states,
        )
        memory_packing = _Packing.of(self, encoder_attention_mask) if encoder_hidden_states is not None else None
        if memory_packing is not None:
            encoder_hidden_states = memory_packing.pack(encoder_hidden_states)  # [N_source, d]
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                causal_mask,
                encoder_hidden_states,  # positional, for reentrant gradient checkpointing
                encoder_attention_mask=memory_mask,
                cache=cache,
                packing=packing,
                memory_packing=memory_packing,
                **kwargs,
            )
        return _with_cache(BaseModelOutputWithPastAndCrossAttentions, cache, last_hidden_state=hidden_states)


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
        """`cache` (``past_key_values`` before transformers 5.24): the decoder's keys and values of past tokens."""
        cache = generation_cache(cache, past_key_values, kwargs)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(
                last_hidden_state=encoder_outputs[0],
                hidden_states=encoder_outputs[1] if len(encoder_outputs) > 1 else None,
                attentions=encoder_outputs[2] if len(encoder_outputs) > 2 else None,
            )
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
        return _with_cache(
            Seq2SeqModelOutput,
            _cache_of(decoder_outputs),
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


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

    def generate(self, inputs: torch.Tensor | None = None, generation_config=None, *args, **kwargs):
        """transformers' ``generate()``, after the search's memory check (`check_generate_memory`): a ``num_beams``
        the memory cannot hold is refused with one ValueError naming it, before transformers repeats the encoder's
        inputs and outputs for each beam."""
        check_generate_memory(self, inputs, generation_config, kwargs, MAX_LENGTH_OFFSET)
        return super().generate(inputs, generation_config, *args, **kwargs)

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

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
        if labels is not None:
            _check_token_ids(labels, "labels", self.config.vocab_size, ignore_index=-100)
            if decoder_input_ids is not None and decoder_input_ids.shape[:2] != labels.shape[:2]:
                raise ValueError(
                    f"labels has shape {tuple(labels.shape)} but decoder_input_ids has shape "
                    f"{tuple(decoder_input_ids.shape)}: they must have the same (batch, length)"
                )
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
            if decoder_attention_mask is None and self.training:
                # Positions after a row's last scored label only give logits the loss ignores: padding, to pack. Not
                # packed, they need no mask: causal attention hides them from the real tokens (SDPA keeps its
                # mask-free causal kernel), and the loss ignores their logits.
                scored = labels != -100
                trailing = scored.flip(1).cummax(1).values.flip(1)  # [B, T], True up to the last label
                decoder_attention_mask = trailing if _Packing.wanted(self, trailing) else None

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
        packing = None
        if decoder_attention_mask is not None and decoder_attention_mask.dim() == 2:
            packing = _Packing.of(self, decoder_attention_mask[:, -hidden_states.shape[1] :])
        loss = None
        if packing is None:
            logits = self.lm_head(hidden_states)  # [B, T, vocab_size]
            if labels is not None:
                loss = token_cross_entropy(logits, labels.to(logits.device), num_items_in_batch)
        else:
            # Only the real target positions are projected to the vocabulary and scored.
            packed_logits = self.lm_head(packing.pack(hidden_states))  # [N, vocab_size]
            logits = packing.unpack(packed_logits)
            if labels is not None:
                packed_labels = packing.pack(labels.to(logits.device))
                loss = token_cross_entropy(packed_logits[None], packed_labels[None], num_items_in_batch)

        return _with_cache(
            Seq2SeqLMOutput,
            _cache_of(outputs),
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


def _with_cache(output_class: type, cache: Cache | None, **fields):
    """An output holding the cache in the field generation reads it from (``cache`` from transformers 5.24 on)."""
    return output_class(**fields, **{cache_field(output_class): cache})


def _cache_of(outputs) -> Cache | None:
    return getattr(outputs, cache_field(type(outputs)))


def token_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    num_items_in_batch: int | torch.Tensor | None = None,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy per target token, ignoring -100; summed and divided by `num_items_in_batch` when given."""
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


__all__ = [
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "PACKING_THRESHOLDS",
    "packing_threshold",
    "shift_tokens_right",
    "sinusoidal_table",
]
