"""bf16 against fp32 training on the CPU, at the ``multi30k`` preset: tokens/s, then BLEU after the same steps.

Two copies of the preset's model (N=3, d_model=256; same initial weights, same dropout seeds) train side by side on
the same Multi30k batches (4,096 tokens, the preset's): for every batch, one step in fp32, then one step under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (float32 weights and Adam, bf16 matmuls: what Accelerate's
``mixed_precision="bf16"`` sets up), interleaved, on a fixed number of threads. After ``--steps`` steps each model
translates the first ``--test-sentences`` sentences of test_2016_flickr (beam 4, length penalty 0.6, in fp32 for
both, so that only the training precision differs), scored with sacreBLEU. Prints one line::

    PRECISION steps=... fp32_tokens_per_s=... bf16_tokens_per_s=... speedup=... fp32_bleu=... bf16_bleu=...

Usage::

    python scripts/benchmark_precision.py --steps 300 --output docs/results/precision_multi30k.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import torch

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import (
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    example_lengths,
    read_parallel_text,
    tokenize_pairs,
)
from vanilla_transformer.generation import translate
from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.modeling_vanilla_transformer import token_cross_entropy
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import build_model_config, noam_schedule, parse_args
from vanilla_transformer.training.step import _forward


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps of each model")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--test-sentences", type=int, default=500, help="test sentences translated for BLEU")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    config = parse_args(["--preset", "multi30k"])
    data = Path(config.data_dir)
    pairs, _ = clean_pairs(read_parallel_text(data / "train.en", data / "train.de"))
    tokenizer = train_tokenizer((text for pair in pairs for text in pair), config.vocab_size)
    pairs, _ = clean_pairs(pairs, max_length=config.max_length, tokenizer=tokenizer)
    examples = tokenize_pairs(pairs, tokenizer)
    sampler = TokenBatchSampler(example_lengths(examples), config.max_tokens, seed=config.seed)
    collate = TranslationCollator(tokenizer.pad_token_id)
    batches = [collate([examples[i] for i in indices]) for indices in sampler.epoch_batches(0)]

    torch.manual_seed(config.seed)
    models = {"fp32": VanillaTransformerForConditionalGeneration(build_model_config(config))}
    models["bf16"] = copy.deepcopy(models["fp32"])
    optimizers, schedules, seconds, tokens = {}, {}, dict.fromkeys(models, 0.0), 0
    for name, model in models.items():
        optimizers[name] = torch.optim.Adam(model.parameters(), betas=(0.9, 0.98), eps=1e-9)
        schedules[name] = noam_schedule(optimizers[name], 256, config.warmup_steps, config.lr_scale)
        model.train()
    for step in range(args.steps):
        batch = batches[step % len(batches)]
        tokens += int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())
        for name, model in models.items():
            torch.manual_seed(step)  # the same dropout masks for both
            autocast = torch.autocast("cpu", dtype=torch.bfloat16) if name == "bf16" else nullcontext()
            started = time.perf_counter()
            with autocast:
                logits = _forward(model, batch)
            loss = token_cross_entropy(logits.float(), batch["labels"], label_smoothing=config.label_smoothing)
            loss.backward()
            optimizers[name].step()
            optimizers[name].zero_grad(set_to_none=True)
            schedules[name].step()
            seconds[name] += time.perf_counter() - started
        if (step + 1) % 50 == 0:
            print(
                f"step {step + 1}: " + ", ".join(f"{n} {tokens / s:,.0f} tok/s" for n, s in seconds.items()),
                flush=True,
            )

    sources = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    references = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    bleu = {}
    for name, model in models.items():
        model.eval()
        bleu[name] = compute_bleu(translate(model, tokenizer, sources, batch_size=64), references)["score"]
    result = {
        "steps": args.steps,
        "tokens_per_step": config.max_tokens,
        "threads": args.threads,
        "fp32_tokens_per_s": tokens / seconds["fp32"],
        "bf16_tokens_per_s": tokens / seconds["bf16"],
        "speedup": seconds["fp32"] / seconds["bf16"],
        "fp32_bleu": bleu["fp32"],
        "bf16_bleu": bleu["bf16"],
        "test_sentences": len(sources),
        "load_average_after": os.getloadavg(),
        "command": "python scripts/benchmark_precision.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    print(
        f"PRECISION steps={args.steps} fp32_tokens_per_s={result['fp32_tokens_per_s']:.0f} "
        f"bf16_tokens_per_s={result['bf16_tokens_per_s']:.0f} speedup={result['speedup']:.2f} "
        f"fp32_bleu={bleu['fp32']:.2f} bf16_bleu={bleu['bf16']:.2f}"
    )
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
