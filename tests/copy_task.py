"""A tiny model trained for a few seconds to copy sentences, with its tokenizer: non-degenerate greedy and beam
outputs for comparing implementations token for token (a random model repeats one token). conftest.py builds it
once per session: use the ``copy_model`` fixture."""

from __future__ import annotations

import random

import torch
from tiny_model import new_tiny_model

from vanilla_transformer.data import TranslationCollator, tokenize_pairs
from vanilla_transformer.tokenization import train_tokenizer

WORDS = "red blue green black white small big old new dog cat bird fish man woman child runs sits eats sees".split()


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(count)]


def train_copy_model(d_model: int = 64, steps: int = 200, lr: float = 3e-3, seed: int = 0):
    """(model, tokenizer): a model of `tiny_config`'s depth (`new_tiny_model`) after `steps` Adam steps on the copy
    task, in eval mode."""
    train = sentences(2000, seed=0)
    tokenizer = train_tokenizer(train, vocab_size=320, min_frequency=1)
    model = new_tiny_model(
        seed, vocab_size=len(tokenizer), d_model=d_model, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model
    ).train()
    examples = tokenize_pairs([(s, s) for s in train], tokenizer)
    collate = TranslationCollator(tokenizer.pad_token_id)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-9)
    # Decaying to zero settles the weights: confident predictions that quantization noise does not flip.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1 - step / steps)
    rng = random.Random(seed + 1)
    for _ in range(steps):
        model(**collate(rng.sample(examples, 32))).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        schedule.step()
    return model.eval(), tokenizer


MAX_NEW_TOKENS = 16


def greedy_by_forward_passes(model, batch, steps: int = MAX_NEW_TOKENS, start: torch.Tensor | None = None):
    """Greedy decoding the slow, obvious way: the whole prefix through the model at every step, no cache. Rows
    start from `start` ``[rows, 1]`` (default: the decoder start token), and are padded after their </s>."""
    config = model.config
    rows = batch["input_ids"].shape[0]
    prefix = start if start is not None else torch.full((rows, 1), config.decoder_start_token_id)
    done = torch.zeros(rows, dtype=torch.bool)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(**batch, decoder_input_ids=prefix, use_cache=False).logits[:, -1]
            token = logits.argmax(-1).masked_fill(done, config.pad_token_id)
            prefix = torch.cat((prefix, token[:, None]), dim=1)
            done |= token == config.eos_token_id
            if done.all():
                break
    return prefix


def generate(model, batch, **kwargs) -> torch.Tensor:
    """``model.generate`` of `batch`, `MAX_NEW_TOKENS` at most."""
    with torch.no_grad():
        return model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, **kwargs)
