"""The floor any user can write: the paper's Transformer in plain PyTorch, `torch.nn.Transformer` (post-norm, as
section 3), one embedding shared by both sides and the pre-softmax projection (section 3.4) scaled by sqrt(d_model),
sinusoidal positions (section 3.5; the table is the package's `sinusoidal_table`, the formula written once), padding
masks, the label-smoothed loss (section 5.4) over a step's target tokens, and the package's Adam; bf16 autocast and
``torch.compile`` where asked. No Hugging Face model, no Accelerate."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from vanilla_transformer.data import IGNORE_INDEX
from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_table


class PlainTransformer(nn.Module):
    """`torch.nn.Transformer` with the paper's embeddings; `forward` returns a batch's summed label-smoothed loss."""

    def __init__(self, config, max_positions: int = 1024) -> None:
        super().__init__()
        d, layers = config.d_model, config.encoder_layers
        self.pad_id, self.start_id, self.scale = config.pad_token_id, config.decoder_start_token_id, math.sqrt(d)
        self.embedding = nn.Embedding(config.vocab_size, d)
        nn.init.normal_(self.embedding.weight, std=d**-0.5)
        self.transformer = nn.Transformer(
            d, config.encoder_attention_heads, layers, config.decoder_layers, config.encoder_ffn_dim,
            config.dropout, batch_first=True,
        )  # fmt: skip
        self.dropout = nn.Dropout(config.dropout)
        self.register_buffer("positions", sinusoidal_table(max_positions, d), persistent=False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits: the decoder reads the labels shifted right behind the start token."""
        decoder_ids = torch.cat([torch.full_like(labels[:, :1], self.start_id), labels[:, :-1]], dim=1)
        decoder_ids = decoder_ids.masked_fill(decoder_ids == IGNORE_INDEX, self.pad_id)
        length = labels.shape[1]
        causal = torch.triu(torch.ones(length, length, dtype=torch.bool, device=labels.device), diagonal=1)
        source_padding = attention_mask == 0
        hidden = self.transformer(
            self.embed(input_ids), self.embed(decoder_ids), tgt_mask=causal, src_key_padding_mask=source_padding,
            tgt_key_padding_mask=labels == IGNORE_INDEX, memory_key_padding_mask=source_padding, tgt_is_causal=True,
        )  # fmt: skip
        return F.linear(hidden, self.embedding.weight)

    def forward(self, input_ids, attention_mask, labels, label_smoothing: float = 0.1) -> torch.Tensor:
        logits = self.logits(input_ids, attention_mask, labels)
        return F.cross_entropy(
            logits.flatten(0, 1).float(), labels.flatten(), ignore_index=IGNORE_INDEX,
            label_smoothing=label_smoothing, reduction="sum",
        )  # fmt: skip


def plain_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, autocast: torch.dtype | None = None
) -> Callable[[Sequence[dict[str, torch.Tensor]]], torch.Tensor]:
    """One optimizer step over micro-batches: the loss is the sum over all of them divided by the step's target
    tokens (as ``train``'s), backward after each, then Adam. `model` may be the compiled module. Returns the loss."""
    device_type = next(model.parameters()).device.type

    def step(micro_batches: Sequence[dict[str, torch.Tensor]]) -> torch.Tensor:
        targets = sum((batch["labels"] != IGNORE_INDEX).sum() for batch in micro_batches)
        total = torch.zeros((), device=targets.device)
        for batch in micro_batches:
            with torch.autocast(device_type, dtype=autocast) if autocast else contextlib.nullcontext():
                loss = model(batch["input_ids"], batch["attention_mask"], batch["labels"]) / targets
            loss.backward()
            total += loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return total

    return step
