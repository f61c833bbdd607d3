"""The two ONNX graphs of a model, as transformers.js and Optimum lay out an encoder-decoder: the encoder, and the
decoder step with its cache ("merged": the first step and the cached steps in one graph).

The graphs are traced (``torch.onnx.export(..., dynamo=True)``) from the model's own modules: its embeddings,
projections, LayerNorms and feed-forward layers are called as they are, and attention is the model's
``eager_attention_forward`` with explicit masks, so that the graph holds no transformers cache object. What the
modules compute beyond their weights (a PEFT adapter not merged, a hook) would not be traced faithfully: the
exporter refuses such a model, by the package's one refusal of adapters and hooks
(``decoder_vanilla_transformer.unsupported_modules(model, traced=True)``).

The merged decoder's inputs and outputs are named as Optimum names them, and it branches as Optimum's does (one
``If`` node, traced from ``torch.cond``): on the first step (``use_cache_branch`` false, every cache empty) the
encoder keys and values are projected from ``encoder_hidden_states``; on the cached steps they are the cached ones
(``past_key_values.{i}.encoder.*``), as transformers.js passes them back.
"""

from __future__ import annotations

import torch
from torch import nn

from ..modeling_vanilla_transformer import eager_attention_forward


def _heads(x: torch.Tensor, attention) -> torch.Tensor:
    """``[B, T, d]`` -> ``[B, H, T, d_k]``, the sizes named (T may be 0: the encoder states of a cached step)."""
    return x.view(x.shape[0], x.shape[1], attention.num_heads, attention.head_dim).transpose(1, 2)


def _attend(attention, query, key, value, mask) -> torch.Tensor:
    """Scaled dot-product attention of the model's `attention` module, projected out: ``[B, Tq, d]``."""
    return _attend_with_weights(attention, query, key, value, mask)[0]


def _attend_with_weights(attention, query, key, value, mask) -> tuple[torch.Tensor, torch.Tensor]:
    """`_attend`, and the attention weights ``[B, H, Tq, Tk]``."""
    output, weights = eager_attention_forward(attention, query, key, value, mask, attention.scaling)
    return attention.out_proj(output.reshape(output.shape[0], output.shape[1], -1)), weights


def _padding_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``[B, S]`` (1 = token) -> additive ``[B, 1, 1, S]``."""
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class EncoderGraph(nn.Module):
    """``(input_ids, attention_mask) -> last_hidden_state``: the model's encoder, its layers called as they are."""

    def __init__(self, model):
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        encoder = self.encoder
        x = encoder.embed_tokens(input_ids) * encoder.embed_scale
        x = x + encoder.embed_positions.pe[: input_ids.shape[1]].to(x.dtype)
        mask = _padding_mask(attention_mask, x.dtype)
        for layer in encoder.layers:
            attention = layer.self_attn
            query, key, value = (
                _heads(p(x), attention) for p in (attention.q_proj, attention.k_proj, attention.v_proj)
            )
            x = layer.self_attn_layer_norm(x + _attend(attention, query, key, value, mask))
            x = layer.final_layer_norm(x + layer.fc2(layer.activation_fn(layer.fc1(x))))
        return x


def _cached(encoder_hidden_states: torch.Tensor, *memory: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The cached steps' branch: the encoder keys and values of the first step, as they came."""
    return tuple(tensor.clone() for tensor in memory)


class DecoderGraph(nn.Module):
    """One decoder pass over `input_ids` ``[B, T]`` after the cached tokens: logits ``[B, T, V]``, each layer's
    cache (``serving.with_onnxruntime.CACHE_KINDS``) with the new tokens' keys and values added, and each layer's
    cross-attention weights ``[B, H, T, S]`` (``cross_attentions.{i}``, the name transformers.js reads where a
    Whisper export gives them; it ignores them otherwise): the page's attention view."""

    def __init__(self, model):
        super().__init__()
        self.decoder, self.lm_head = model.get_decoder(), model.get_output_embeddings()

    def forward(self, input_ids, encoder_attention_mask, encoder_hidden_states, use_cache_branch, *past):
        decoder = self.decoder
        length, cached = input_ids.shape[1], past[0].shape[2]
        x = decoder.embed_tokens(input_ids) * decoder.embed_scale
        x = x + decoder.embed_positions.pe[cached : cached + length].to(x.dtype)
        # Query i (position cached + i) sees the keys of positions 0 .. cached + i.
        keys = torch.arange(cached + length, device=x.device)
        queries = torch.arange(length, device=x.device) + cached
        causal = (keys[None, :] > queries[:, None]).to(x.dtype)[None, None] * torch.finfo(x.dtype).min
        memory_mask = _padding_mask(encoder_attention_mask, x.dtype)
        cached_memory = [
            tensor for index in range(len(decoder.layers)) for tensor in past[4 * index + 2 : 4 * index + 4]
        ]
        memory = torch.cond(
            use_cache_branch[0], _cached, self._project_memory, (encoder_hidden_states, *cached_memory)
        )
        presents, attentions = [], []
        for index, layer in enumerate(decoder.layers):
            past_key, past_value = past[4 * index : 4 * index + 2]
            memory_key, memory_value = memory[2 * index : 2 * index + 2]
            attention = layer.self_attn
            query = _heads(attention.q_proj(x), attention)
            key = torch.cat((past_key, _heads(attention.k_proj(x), attention)), dim=2)
            value = torch.cat((past_value, _heads(attention.v_proj(x), attention)), dim=2)
            x = layer.self_attn_layer_norm(x + _attend(attention, query, key, value, causal))
            cross = layer.encoder_attn
            query = _heads(cross.q_proj(x), cross)
            attended, weights = _attend_with_weights(cross, query, memory_key, memory_value, memory_mask)
            x = layer.encoder_attn_layer_norm(x + attended)
            attentions.append(weights)
            x = layer.final_layer_norm(x + layer.fc2(layer.activation_fn(layer.fc1(x))))
            presents += [key, value, memory_key, memory_value]
        return (self.lm_head(x), *presents, *attentions)

    def _project_memory(self, encoder_hidden_states: torch.Tensor, *cached: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The first step's branch: every layer's encoder keys and values, from the encoder states."""
        projected = []
        for layer in self.decoder.layers:
            cross = layer.encoder_attn
            projected += [
                _heads(cross.k_proj(encoder_hidden_states), cross).contiguous(),
                _heads(cross.v_proj(encoder_hidden_states), cross).contiguous(),
            ]
        return tuple(projected)


__all__ = ["DecoderGraph", "EncoderGraph"]
