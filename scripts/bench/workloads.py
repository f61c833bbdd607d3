"""What the benchmarks run: the model sizes, the decoding benchmark's sentences, the one FLOPs formula, and the one
training step (the package's own Adam, `vanilla_transformer.training.step.build_adam`, with the paper's settings)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.data import IGNORE_INDEX
from vanilla_transformer.data.batching import TranslationCollator
from vanilla_transformer.tokenization import EOS_ID, PAD_ID
from vanilla_transformer.training.config import OptimizationConfig
from vanilla_transformer.training.step import build_adam

SIZES = ("tiny", "small", "base")
"""Model sizes, presets of `VanillaTransformerConfig.from_preset`: ``base`` is the paper's base model; ``small`` a
3+3-layer d_model=256 model; ``tiny`` for tests."""


def model_config(size: str, vocab_size: int, **overrides) -> VanillaTransformerConfig:
    """A configuration of one of :data:`SIZES` (or any preset), with the paper's dropout 0.1 unless overridden."""
    return VanillaTransformerConfig.from_preset(size, **{"vocab_size": vocab_size, "dropout": 0.1, **overrides})


# Data: realistic sentence lengths


def source_sentences(data_dir: str | None, count: int, seed: int = 0) -> tuple[list[str], str]:
    """`count` English sentences and their description: Multi30k's training sources where `data_dir` holds them,
    else synthetic words of log-normal lengths (a decoding step's speed depends on the lengths, not the words)."""
    data = Path(data_dir) if data_dir else None
    if data is not None and (data / "train.en").is_file():
        from vanilla_transformer.data import CorpusSpec, load_corpus

        pairs = load_corpus(CorpusSpec("text", data_dir=str(data)), "train")[:count]
        return [source for source, _ in pairs], f"Multi30k en-de train, first {len(pairs)} pairs"
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(3000)]
    lengths = np.clip(np.rint(rng.lognormal(2.6, 0.3, count)), 2, 60).astype(int)
    return [" ".join(rng.choice(words, n)) for n in lengths], "synthetic sentences of log-normal lengths"


def synthetic_pairs(
    count: int, vocab_size: int, lengths: tuple[tuple[float, float], ...], longest: int, seed: int = 0
) -> list[tuple[list[int], list[int]]]:
    """`count` pairs of random token ids (each side ending in ``</s>``) whose lengths are drawn from the log-normal
    fits `lengths` (source, target), clipped to 2 to `longest`: a step's speed depends on the lengths, not the words."""
    rng = np.random.default_rng(seed)
    sides = [np.clip(np.rint(rng.lognormal(mean, std, count)), 2, longest).astype(int) for mean, std in lengths]
    return [
        tuple(rng.integers(EOS_ID + 1, vocab_size, length - 1).tolist() + [EOS_ID] for length in pair)
        for pair in zip(*sides, strict=True)
    ]


def collate(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 at padding): `TranslationCollator`'s."""
    return TranslationCollator(PAD_ID)([{"input_ids": source, "labels": target} for source, target in pairs])


# FLOPs


def forward_flops(
    config: VanillaTransformerConfig, source_lengths: Sequence[int], target_lengths: Sequence[int]
) -> float:
    """FLOPs (2 per multiply-add) of the matrix products of one forward pass over the real tokens of a batch.

    Counted: every linear layer (attention projections, FFN, the cross-attention keys and values of the source, the
    output projection) and the attention products Q K^T and A V (the causal half in decoder self-attention).
    Not counted: embeddings, softmax, LayerNorm, elementwise work, and any padding.
    """
    d = config.d_model
    encoder_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim  # Q, K, V, output; FFN: per source token
    decoder_layer = 6 * d * d + 2 * d * config.decoder_ffn_dim  # self Q, K, V, output; cross Q, output; FFN
    macs = 0
    for source, target in zip(source_lengths, target_lengths, strict=True):
        macs += config.encoder_layers * (source * encoder_layer + 2 * source * source * d)
        macs += config.decoder_layers * (
            target * decoder_layer + source * 2 * d * d + target * (target + 1) * d + 2 * target * source * d
        )
        macs += target * d * config.vocab_size
    return 2.0 * macs


def training_flops(config: VanillaTransformerConfig, batch: dict[str, torch.Tensor]) -> float:
    """Forward plus backward (twice the forward) FLOPs of a batch's real tokens (its ``attention_mask`` and
    ``labels``)."""
    sources = batch["attention_mask"].sum(1).tolist()
    targets = (batch["labels"] != IGNORE_INDEX).sum(1).tolist()
    return 3 * forward_flops(config, sources, targets)


# The training step


def adam(model: torch.nn.Module, learning_rate: float = 1e-4, kernels: str = "fused") -> torch.optim.Adam:
    """Section 5.3's Adam over `model` as ``train`` builds it (`build_adam`: the betas and epsilon of the training
    settings' defaults, ``--adam-implementation`` `kernels`), at a constant `learning_rate`. Frozen parameters (a
    LoRA model's) get no gradient, so Adam leaves them alone."""
    optimization = dataclasses.replace(OptimizationConfig(), adam_implementation=kernels)
    optimizer = build_adam(model, optimization, next(model.parameters()).device.type)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    return optimizer


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    autocast: torch.dtype | None = None,
) -> Callable[[dict[str, torch.Tensor]], torch.Tensor]:
    """One training step of `model` on a batch with labels, as every benchmark takes it: the loss (under `autocast`
    where given: mixed precision, float32 weights and Adam), its backward pass, an `adam` step (by default), the
    gradients set to None. The step returns the loss."""
    optimizer = optimizer if optimizer is not None else adam(model)
    device_type = next(model.parameters()).device.type
    model.train()

    def step(batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with torch.autocast(device_type, dtype=autocast) if autocast else contextlib.nullcontext():
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    return step
