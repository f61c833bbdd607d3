"""The one tiny configuration of the tests (`tiny_config`), and a tiny translation model of the numbers task built
from it, briefly trained and saved with its tokenizer (`build_model_dir`), for the tests of fine-tuning, pipelines,
Hub sharing and attention maps. conftest.py builds it once per session: use the ``tiny_model_dir`` fixture."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path
from types import ModuleType

import torch
from torch.utils.data import DataLoader
from transformers import GenerationConfig

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import COMMANDS
from vanilla_transformer.data import Splits, TranslationCollator, tokenize_pairs
from vanilla_transformer.tokenization import train_tokenizer


def _numbers(count: int, seed: int) -> Splits:
    """`count` distinct numbers of 1 to 999, drawn uniformly (most have three digits), as number-word pairs."""
    from num2words import num2words

    numbers = random.Random(seed).sample(range(1, 1000), count)
    pairs = [(num2words(n, lang="en"), num2words(n, lang="de")) for n in numbers]
    return Splits(train=pairs[:240], valid=pairs[240:], test=[])


SPLITS = _numbers(256, seed=0)
"""English to German number words, 1 to 999, drawn uniformly (the tests' model learns three-digit numbers)."""

# A run of seconds: 160 numbers, a 10k-parameter model, 8 steps; checkpoints at steps 3, 6 and 8.
TINY = [
    "--num-train", "160", "--num-valid", "12", "--num-test", "12", "--vocab-size", "300",
    "--d-model", "16", "--layers", "1", "--heads", "2", "--ffn-dim", "32", "--dropout", "0.1",
    "--max-tokens", "400", "--max-steps", "8", "--warmup-steps", "4", "--log-every", "1", "--eval-every", "4",
    "--save-every", "3", "--keep-checkpoints", "2", "--average-checkpoints", "2", "--max-length-offset", "3",
    "--num-threads", "1", "--num-samples", "1",
]  # fmt: skip

GENERATION = dict(num_beams=4, max_new_tokens=24)
"""What an exported model's generation_config.json holds besides the token ids: the paper's beam size."""

TINY_CONFIG = dict(dropout=0.0, max_position_embeddings=64)
"""What the tests change of the configuration's ``"tiny"`` preset (2+2 layers of width 32, 4 heads): no dropout, so
that a model is a deterministic function, and 64 positions."""


def tiny_config(vocab_size: int = 40, **overrides) -> VanillaTransformerConfig:
    return VanillaTransformerConfig.from_preset("tiny", **{**TINY_CONFIG, "vocab_size": vocab_size, **overrides})


def new_tiny_model(seed: int = 0, **overrides) -> VanillaTransformerForConditionalGeneration:
    """A random model of `tiny_config` (with `overrides`), initialised from torch's generator seeded with `seed`, in
    eval mode. Tests get it as the ``make_tiny_model`` fixture."""
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(tiny_config(**overrides)).eval()


def build_model_dir(directory: Path, *, steps: int = 80, seed: int = 0) -> Path:
    """Train a tokenizer and a tiny model on `SPLITS.train` for `steps` Adam steps, and save both to `directory`."""
    tokenizer = train_tokenizer([text for pair in SPLITS.train for text in pair], vocab_size=400, min_frequency=1)
    model = new_tiny_model(seed, vocab_size=len(tokenizer))
    loader = DataLoader(
        tokenize_pairs(SPLITS.train, tokenizer),
        batch_size=32,
        shuffle=True,
        collate_fn=TranslationCollator(tokenizer.pad_token_id),
        generator=torch.Generator().manual_seed(seed),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    step = 0
    while step < steps:
        for batch in loader:
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            if step == steps:
                break
    model.eval()
    model.generation_config = GenerationConfig(
        **GENERATION,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        decoder_start_token_id=tokenizer.bos_token_id,
    )
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def load_script(name: str) -> ModuleType:
    """The module of the command ``vanilla-transformer <name>``, to call its ``main(argv)``."""
    return importlib.import_module(f"vanilla_transformer.cli.{COMMANDS[name][0].partition(':')[0]}")
