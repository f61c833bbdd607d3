#!/usr/bin/env python
"""How long the demo takes to answer: a sentence's translation (the paper's beam search, traced step by step) plus
all its attention maps, as the Translate button computes them (``demo.translate_with_attention``), on the CPU.

Issue 28 asks for under one second per sentence with the Multi30k model. The model is loaded once (its load time is
recorded), one sentence warms up, then each of the first ``--sentences`` test sentences is answered ``--repeats``
times, one at a time, on ``--threads`` threads. Writes the median, the 90th percentile and the slowest answer, with
the command, the load average and the package versions (`bench.Record`). Run it alone on the
machine: other jobs change the figure.

Usage (a model of ``vanilla-transformer train --preset multi30k``)::

    python scripts/benchmark_demo.py --model runs/multi30k/model --output docs/results/demo_latency.json
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from bench import Record, interleave, options
from bench.figures import read_json, table, versions

from vanilla_transformer.data import read_lines
from vanilla_transformer.demo import translate_with_attention
from vanilla_transformer.model_dir import load_model_dir


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__, output="write the figures to this JSON file")
    parser.add_argument("--model", required=True, help="model directory (e.g. runs/multi30k/model)")
    test = options.multi30k_test()
    parser.add_argument("--source", type=Path, default=test[0], help="source sentences (default: Multi30k's test)")
    parser.add_argument("--sentences", type=int, default=100, help="first this many sentences (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=1, help="answers per sentence (default: %(default)s)")
    args = parser.parse_args(argv)
    options.check(args, {"--sentences": 1, "--repeats": 1}, files=("--source",))
    record = Record(__file__, argv)
    torch.set_num_threads(args.threads)
    sources = [line for line in read_lines(args.source) if line.strip()][: args.sentences]
    started = time.perf_counter()
    model, tokenizer = load_model_dir(args.model)
    load_seconds = time.perf_counter() - started
    # Warm-up on the first sentence: first-call allocations.
    answer = {"demo": lambda sentence: translate_with_attention(model, tokenizer, sentence)}
    seconds = interleave(answer, sources, repeats=args.repeats).samples("demo")
    ordered = sorted(seconds)
    figures = {
        "what": "seconds per sentence for the demo's Translate: beam search (beam 4, alpha 0.6) traced step by "
        "step, plus every attention map (output_attentions)",
        "model": str(args.model),
        "source": str(args.source),
        "sentences": len(sources),
        "repeats": args.repeats,
        "threads": args.threads,
        "load_seconds": round(load_seconds, 3),
        "median_seconds": round(statistics.median(seconds), 4),
        "p90_seconds": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 4),
        "max_seconds": round(ordered[-1], 4),
        "under_one_second": ordered[-1] < 1.0,
    }
    print(json.dumps(record.write(figures, args.output), indent=2))
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def demo_latency(results: Path) -> str:
    """Seconds per sentence of the demo's Translate (scripts/benchmark_demo.py)."""
    run = read_json(results, "demo_latency.json")
    rows = [
        [
            f"{run['sentences']} sentences of `{Path(run['source']).name}`, {run['threads']} threads",
            f"{run['median_seconds']:.3f} s",
            f"{run['p90_seconds']:.3f} s",
            f"{run['max_seconds']:.3f} s",
            f"{run['load_average_start'][0]:.1f}",
            versions(run, "torch", "transformers"),
        ]
    ]
    header = ["input", "median", "90th percentile", "slowest", "load before", "versions"]
    return table(header, ["l", "r", "r", "r", "r", "l"], rows)


FIGURES = {"demo-latency": demo_latency}


if __name__ == "__main__":
    raise SystemExit(main())
