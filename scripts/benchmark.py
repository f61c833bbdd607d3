#!/usr/bin/env python
"""Benchmark our Transformer against MarianMT of the same architecture (and CTranslate2): speed, memory, MFU.

    python scripts/benchmark.py                                  # small model, 2 CPU threads, every section
    python scripts/benchmark.py --size base --sections train generate
    python scripts/benchmark.py --device cuda --dtype bf16 --size base --json results.json
    python scripts/benchmark.py --sections generate --size small base --threads 1 2 --json decoding.json

Ratios are the result: the contestants run interleaved on the same batches (see `benchmarking.py` beside this script).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import benchmarking as benchmark


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    defaults = benchmark.Settings()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--size",
        nargs="+",
        default=[defaults.size],
        choices=sorted(benchmark.SIZES),
        help="model sizes to run, one report each (default: %(default)s)",
    )
    parser.add_argument("--sections", nargs="+", default=list(benchmark.SECTIONS), choices=benchmark.SECTIONS)
    parser.add_argument("--device", default=defaults.device, help="cpu or cuda (default: %(default)s)")
    parser.add_argument(
        "--dtype",
        default=defaults.dtype,
        choices=sorted(benchmark.DTYPES),
        help="fp32, or bf16: mixed-precision training and bf16 generate() (for GPUs)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        nargs="+",
        default=[defaults.threads],
        help="torch CPU threads, fixed for each report; one report per size and count (default: %(default)s)",
    )
    parser.add_argument("--attn-implementation", default=defaults.attn_implementation, choices=["sdpa", "eager"])
    parser.add_argument("--vocab-size", type=int, default=defaults.vocab_size)
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size, help="pairs per random training batch")
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="padded tokens per token-bucketed batch (default: as many real tokens as a random batch)",
    )
    parser.add_argument("--num-batches", type=int, default=defaults.num_batches, help="batches per measurement")
    parser.add_argument("--gen-batch-size", type=int, default=defaults.gen_batch_size)
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens)
    parser.add_argument("--num-beams", type=int, nargs="+", default=list(defaults.num_beams))
    parser.add_argument("--repeats", type=int, default=defaults.repeats, help="timed runs per batch and contestant")
    parser.add_argument("--scaling-lengths", type=int, nargs="+", default=list(defaults.scaling_lengths))
    parser.add_argument("--scaling-batch-size", type=int, default=defaults.scaling_batch_size)
    parser.add_argument(
        "--data-dir",
        default=defaults.data_dir,
        help="Multi30k directory; synthetic pairs when absent (default: %(default)s)",
    )
    parser.add_argument("--no-ctranslate2", action="store_true", help="skip CTranslate2 even if installed")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--json", default=None, help="also write every figure to this JSON file")
    return parser.parse_args(argv)


def settings_for(args: argparse.Namespace, size: str, threads: int) -> benchmark.Settings:
    return benchmark.Settings(
        size=size,
        vocab_size=args.vocab_size,
        device=args.device,
        dtype=args.dtype,
        threads=threads,
        attn_implementation=args.attn_implementation,
        batch_size=args.batch_size,
        max_tokens=args.max_tokens,
        num_batches=args.num_batches,
        gen_batch_size=args.gen_batch_size,
        max_new_tokens=args.max_new_tokens,
        num_beams=tuple(args.num_beams),
        repeats=args.repeats,
        scaling_lengths=tuple(args.scaling_lengths),
        scaling_batch_size=args.scaling_batch_size,
        data_dir=args.data_dir,
        ctranslate2=not args.no_ctranslate2,
        seed=args.seed,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reports = []
    for size in args.size:
        for threads in args.threads:
            report = benchmark.run(settings_for(args, size, threads), args.sections)
            print(benchmark.format_report(report), end="\n\n", flush=True)
            reports.append(report)
    if args.json:
        benchmark.save_report(reports if len(reports) > 1 else reports[0], args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
