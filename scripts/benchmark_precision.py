"""bf16 against fp32 training on the CPU, at the ``multi30k`` preset: tokens/s, then BLEU after the same steps.

Three copies of the preset's model (N=3, d_model=256; same initial weights, same dropout seeds) train side by side
on the same Multi30k batches (4,096 tokens, the preset's), interleaved, on a fixed number of threads: for every batch
one step of each of these, in an order reversed every batch (`bench.interleave`):

- ``fp32``: float32 with transformers' SDPA attention (the model's default);
- ``bf16_sdpa``: under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (float32 weights and Adam, bf16 matmuls:
  what Accelerate's ``mixed_precision="bf16"`` sets up), SDPA attention;
- ``bf16``: the same autocast with eager attention (``--attn-implementation eager``, the preset's choice).

After ``--steps`` steps each model translates the first ``--test-sentences`` sentences of test_2016_flickr (beam 4,
length penalty 0.6, in fp32 for all, so that only the training precision differs), scored with sacreBLEU. Prints
one line::

    PRECISION steps=... fp32_tokens_per_s=... bf16_sdpa_tokens_per_s=... bf16_tokens_per_s=... speedup=... ...

Usage::

    python scripts/benchmark_precision.py --steps 300 --output docs/results/precision_multi30k.json
"""

from __future__ import annotations

import argparse
import copy
import sys
from contextlib import nullcontext
from pathlib import Path

import torch
from bench import Record, interleave

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import (
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    example_lengths,
    split_files,
    tokenize_pairs,
)
from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.modeling_vanilla_transformer import token_cross_entropy
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import build_model_config, noam_schedule, parse_args
from vanilla_transformer.training.setup import RunCorpus
from vanilla_transformer.training.step import teacher_forced_logits
from vanilla_transformer.translation import translate


def count_tokens(batch: dict[str, torch.Tensor]) -> int:
    """The batch's real (non-padding) tokens, source and target."""
    return int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps of each model")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--test-sentences", type=int, default=500, help="test sentences translated for BLEU")
    parser.add_argument("--data-dir", help="the Multi30k files (default: $VANILLA_TRANSFORMER_DATA/multi30k)")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    record = Record(__file__, argv)
    torch.set_num_threads(args.threads)
    config = parse_args(["--preset", "multi30k", *(["--data-dir", args.data_dir] if args.data_dir else [])])
    corpus = RunCorpus.of(config)  # stops naming --data-dir and $VANILLA_TRANSFORMER_DATA when neither is set
    pairs, _ = clean_pairs(corpus.load("train"))
    tokenizer = train_tokenizer((text for pair in pairs for text in pair), config.vocab_size)
    pairs, _ = clean_pairs(pairs, max_length=config.max_length, tokenizer=tokenizer)
    examples = tokenize_pairs(pairs, tokenizer)
    sampler = TokenBatchSampler(example_lengths(examples), config.max_tokens, seed=config.seed)
    collate = TranslationCollator(tokenizer.pad_token_id)
    batches = [collate([examples[i] for i in indices]) for indices in sampler.epoch_batches(0)]

    torch.manual_seed(config.seed)
    models = {"fp32": VanillaTransformerForConditionalGeneration(build_model_config(config))}
    models["fp32"].set_attn_implementation("sdpa")
    models["bf16_sdpa"] = copy.deepcopy(models["fp32"])
    models["bf16"] = copy.deepcopy(models["fp32"])
    models["bf16"].set_attn_implementation("eager")
    optimizers, schedules = {}, {}
    for name, model in models.items():
        optimizers[name] = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
        schedules[name] = noam_schedule(optimizers[name], 256, config.warmup_steps, config.lr_scale)
        model.train()
    tokens = sum(count_tokens(batches[step % len(batches)]) for step in range(args.steps))

    def train_step(name: str):
        def run(step: int) -> None:
            batch, model = batches[step % len(batches)], models[name]
            torch.manual_seed(step)  # the same dropout masks for all
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if name != "fp32" else nullcontext()
            with autocast:
                logits = teacher_forced_logits(model, batch)
            loss = token_cross_entropy(logits.float(), batch["labels"], label_smoothing=config.label_smoothing)
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            schedules[name].step()

        return run

    def progress(step: int, timings) -> None:
        if (step + 1) % 50 == 0:
            done = sum(count_tokens(batches[i % len(batches)]) for i in range(step + 1))
            print(f"step {step + 1}: " + ", ".join(f"{n} {done / timings.total(n):,.0f} tok/s" for n in models))

    # No warm-up: every model trains exactly --steps steps, on which BLEU is then compared.
    timings = interleave({name: train_step(name) for name in models}, range(args.steps), warmup=0, progress=progress)
    seconds = {name: timings.total(name) for name in models}

    source_file, reference_file = split_files(corpus.spec, corpus.names["test"])
    sources = source_file.read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    references = reference_file.read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    bleu = {}
    for name, model in models.items():
        model.eval()
        bleu[name] = compute_bleu(translate(model, tokenizer, sources, batch_size=64), references)["score"]
    result = {
        "steps": args.steps,
        "tokens_per_step": config.max_tokens,
        "threads": args.threads,
        **{f"{name}_tokens_per_s": tokens / seconds[name] for name in models},
        "speedup": seconds["fp32"] / seconds["bf16"],
        "speedup_bf16_sdpa": seconds["fp32"] / seconds["bf16_sdpa"],
        **{f"{name}_bleu": bleu[name] for name in models},
        "test_sentences": len(sources),
    }
    print(
        f"PRECISION steps={args.steps} "
        + " ".join(f"{name}_tokens_per_s={result[f'{name}_tokens_per_s']:.0f}" for name in models)
        + f" speedup={result['speedup']:.2f} speedup_bf16_sdpa={result['speedup_bf16_sdpa']:.2f} "
        + " ".join(f"{name}_bleu={bleu[name]:.2f}" for name in models)
    )
    record.write(result, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
