#!/usr/bin/env python
"""Decoding a trained model in bf16 against fp32 on the CPU: tokens/s side by side, and BLEU on real test data.

The same model directory is loaded twice, once in float32 and once cast to bfloat16 (what ``vanilla-transformer
translate --dtype bf16`` does). Both translate the same sentences with the paper's search (beam 4, GNMT alpha 0.6,
input + 50; ``translate``, which runs the fast decoder behind ``generate()``), interleaved, ``--repeats`` times each,
on a fixed number of threads (`bench.interleave`, no warm-up). Tokens/s counts the output tokens of the fp32 translations for both. BLEU is sacreBLEU
(13a, cased) of each precision's translations. Prints one line::

    DTYPE sentences=... fp32_tokens_per_s=... bf16_tokens_per_s=... speedup=... fp32_bleu=... bf16_bleu=...
    same_translations=...

Usage (a model of ``vanilla-transformer train --preset multi30k``)::

    python scripts/benchmark_decoding_dtype.py --model runs/multi30k/model --output docs/results/dtype.json
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from bench import Record, interleave, options
from bench.figures import read_json
from bench.serving import translate

from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.model_dir import load_model_dir


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__)
    parser.add_argument("--model", required=True, help="model directory (e.g. runs/multi30k/model)")
    test = options.multi30k_test()
    parser.add_argument("--source", type=Path, default=test[0], help="source sentences (default: Multi30k's test)")
    parser.add_argument("--reference", type=Path, default=test[1], help="references (default: Multi30k's test)")
    parser.add_argument("--sentences", type=int, default=1000, help="first this many sentences (default: all 1,000)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=2, help="timed translations per precision")
    args = parser.parse_args(argv)
    options.check(args, files=("--source", "--reference"))
    record = Record(__file__, argv)
    torch.set_num_threads(args.threads)
    sources = args.source.read_text(encoding="utf-8").splitlines()[: args.sentences]
    references = args.reference.read_text(encoding="utf-8").splitlines()[: args.sentences]
    model, tokenizer = load_model_dir(args.model)
    models = {"fp32": model, "bf16": copy.deepcopy(model).to(torch.bfloat16)}
    contestants = {
        name: (lambda _, model=model: translate(model, tokenizer, sources, batch_size=args.batch_size))
        for name, model in models.items()
    }
    timings = interleave(contestants, [None], repeats=args.repeats, warmup=0)
    seconds = {name: sum(timings.samples(name)) for name in models}
    translations = {name: timings.returned[name][-1] for name in models}
    tokens = args.repeats * sum(len(tokenizer(line)["input_ids"]) for line in translations["fp32"])
    result = {
        "model": str(args.model),
        "sentences": len(sources),
        "threads": args.threads,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        **{f"{name}_tokens_per_s": tokens / seconds[name] for name in models},
        "speedup": seconds["fp32"] / seconds["bf16"],
        **{f"{name}_bleu": compute_bleu(translations[name], references)["score"] for name in models},
        "same_translations": sum(a == b for a, b in zip(translations["fp32"], translations["bf16"], strict=True)),
    }
    print(
        f"DTYPE sentences={len(sources)} fp32_tokens_per_s={result['fp32_tokens_per_s']:.0f} "
        f"bf16_tokens_per_s={result['bf16_tokens_per_s']:.0f} speedup={result['speedup']:.2f} "
        f"fp32_bleu={result['fp32_bleu']:.2f} bf16_bleu={result['bf16_bleu']:.2f} "
        f"same_translations={result['same_translations']}"
    )
    record.write(result, args.output)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def decoding_dtype(results: Path) -> str:
    """bf16 against fp32 decoding of the trained Multi30k model (scripts/benchmark_decoding_dtype.py)."""
    run = read_json(results, "decoding_dtype_multi30k.json")
    return (
        f"bf16 ran **{run['speedup']:.2f}x** faster than fp32 ({run['bf16_tokens_per_s']:,.0f} against "
        f"{run['fp32_tokens_per_s']:,.0f} tokens/s), with BLEU {run['bf16_bleu']:.2f} against {run['fp32_bleu']:.2f} "
        f"({run['same_translations']:,} of the {run['sentences']:,} translations identical)"
    )


FIGURES = {"decoding-dtype": decoding_dtype}


if __name__ == "__main__":
    sys.exit(main())
