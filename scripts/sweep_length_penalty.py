#!/usr/bin/env python
"""Choose GNMT's length penalty alpha on the validation set, as section 6.1 did: BLEU of trained models per alpha.

Section 6.1 chose beam 4 and alpha 0.6 "after experimentation on the development set" of WMT14. A model trained on
other data may want another alpha. For each run directory of ``vanilla-transformer train`` given, this translates the
run's validation split (the corpus and split of its ``training_config.json``) with its final model (``model/``) at
each alpha, with the run's beam size and input length + 50, and scores sacreBLEU (13a, cased) and chrF. It also
records what the penalty does to length: the ratio of translation to reference length (BLEU's brevity penalty
applies below 1) and the longest translation in words, which shows a too-large alpha letting translations run on.
Nothing is timed. Prints one line per alpha, with the mean over the runs::

    ALPHA 1.2 mean_bleu=... run_name=BLEU/ratio/longest ...

With ``--average N [N ...]`` it also chooses how many checkpoints to average (section 6.1 averaged the last 5 or
20): for each N, the average of the run's last N checkpoints (those its ``checkpoints/`` still holds; a run keeps
``--keep-checkpoints``) in place of ``model/``, scored at each alpha, one line per N and alpha::

    AVERAGE 10 ALPHA 1.0 mean_bleu=... run_name=BLEU/ratio/longest ...

Usage (runs of the multi30k preset)::

    python scripts/sweep_length_penalty.py --run runs/en-de --run runs/de-en \
        --output docs/results/multi30k/length-penalty-sweep.json
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch
from bench import Record, options
from bench.figures import read_json, table
from bench.serving import translate

from vanilla_transformer.data.spec import load_corpus
from vanilla_transformer.metrics import compute_bleu, compute_chrf
from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.training.checkpoints import average_checkpoints, list_checkpoints, load_weights
from vanilla_transformer.training.config import TrainingConfig
from vanilla_transformer.training.run_dir import RunLayout
from vanilla_transformer.training.setup import corpus_spec

ALPHAS = (0.0, 0.6, 0.8, 1.0, 1.2, 1.5, 2.0)


def sweep_run(run_dir: Path, alphas: list[float], batch_size: int, averages: list[int]) -> dict[str, object]:
    """The validation scores of one run's final model at each alpha; with `averages`, of the average of its last N
    checkpoints for each N (``averages``: N -> alpha -> scores) rather than of the final model."""
    layout = RunLayout(run_dir)
    config = TrainingConfig.load(layout.settings)
    pairs = load_corpus(corpus_spec(config.data), config.data.valid_split)
    sources, references = [source for source, _ in pairs], [target for _, target in pairs]
    model, tokenizer = load_model_dir(layout.model)
    run = {
        "direction": f"{config.data.src_lang}-{config.data.tgt_lang}",
        "seed": config.optimization.seed,
        "split": config.data.valid_split,
        "sentences": len(sources),
        "num_beams": config.decoding.num_beams,
        "longest_reference_words": max(len(line.split()) for line in references),
    }
    if not averages:
        return run | {"scores": score_alphas(model, tokenizer, sources, references, alphas, config, batch_size)}
    checkpoints = list_checkpoints(layout.checkpoints)
    run["averages"] = {}
    for count in averages:  # main checked that the run holds as many
        load_weights(model, average_checkpoints(checkpoints[-count:]))
        run["averages"][str(count)] = {
            "checkpoints": [path.name for path in checkpoints[-count:]],
            "scores": score_alphas(model, tokenizer, sources, references, alphas, config, batch_size),
        }
    return run


def score_alphas(model, tokenizer, sources, references, alphas, config, batch_size) -> dict[str, dict[str, float]]:
    """BLEU, chrF, length ratio and longest translation of `model`'s translations of `sources` at each alpha."""
    scores = {}
    for alpha in alphas:
        hypotheses = translate(
            model,
            tokenizer,
            sources,
            num_beams=config.decoding.num_beams,
            length_penalty=alpha,
            max_length_offset=config.decoding.max_length_offset,  # the run's, as its exported search has it
            batch_size=batch_size,
        )
        bleu = compute_bleu(hypotheses, references)
        scores[str(alpha)] = {
            "bleu": bleu["score"],
            "chrf": compute_chrf(hypotheses, references)["score"],
            "length_ratio": bleu["sys_len"] / bleu["ref_len"],
            "longest_translation_words": max(len(line.split()) for line in hypotheses),
        }
    return scores


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__)
    parser.add_argument("--run", type=Path, action="append", required=True, help="a run directory (repeatable)")
    parser.add_argument("--alphas", type=float, nargs="+", default=list(ALPHAS), help="default: %(default)s")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per batch (default: %(default)s)")
    parser.add_argument(
        "--average",
        type=int,
        nargs="+",
        default=[],
        metavar="N",
        help="score the average of each run's last N checkpoints, for each N, instead of its final model",
    )
    args = parser.parse_args(argv)
    options.check(args, {"--average": 1, "--batch-size": 1, "--threads": 1})
    for run_dir in args.run:  # every run checked before any is scored
        layout = RunLayout(run_dir)
        if not layout.settings.is_file() or not layout.model.is_dir():
            raise SystemExit(f"--run={run_dir} is not a finished run directory (training_config.json and model/)")
        if args.average and max(args.average) > (held := len(list_checkpoints(layout.checkpoints))):
            raise SystemExit(f"--average {max(args.average)}: {layout.checkpoints} holds only {held} checkpoints")
    record = Record(__file__, argv)
    torch.set_num_threads(args.threads)
    runs = {run_dir.name: sweep_run(run_dir, args.alphas, args.batch_size, args.average) for run_dir in args.run}
    if not args.average:
        figures = {"mean_bleu": print_means({name: run["scores"] for name, run in runs.items()}, args.alphas, "")}
    else:
        figures = {"mean_bleu_by_average": {}}
        for count in map(str, args.average):
            scores = {name: run["averages"][count]["scores"] for name, run in runs.items()}
            figures["mean_bleu_by_average"][count] = print_means(scores, args.alphas, f"AVERAGE {count} ")
    record.write({"runs": runs, **figures}, args.output)
    return 0


def print_means(scores: dict[str, dict], alphas: list[float], prefix: str) -> dict[str, float]:
    """Print one line per alpha: the mean BLEU over the runs and each run's BLEU/length ratio/longest; the means."""
    mean_bleu = {}
    for alpha in map(str, alphas):
        mean_bleu[alpha] = statistics.mean(run[alpha]["bleu"] for run in scores.values())
        cells = " ".join(
            f"{name}={run[alpha]['bleu']:.2f}/{run[alpha]['length_ratio']:.3f}/{run[alpha]['longest_translation_words']}"
            for name, run in scores.items()
        )
        print(f"{prefix}ALPHA {alpha} mean_bleu={mean_bleu[alpha]:.2f} {cells}")
    return mean_bleu


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def length_ratio(results: Path) -> str:
    """How much shorter than the references the first models translated the validation set at section 6.1's α."""
    runs = read_json(results, "multi30k/length-penalty-sweep.json")["runs"].values()
    short = [1 - run["scores"]["0.6"]["length_ratio"] for run in runs]
    return f"{min(short):.0%} to {max(short):.0%} shorter"


def length_penalty_table(results: Path) -> str:
    """Mean validation BLEU of the Multi30k models at each α (scripts/sweep_length_penalty.py)."""
    sweep = read_json(results, "multi30k/length-penalty-sweep.json")
    alphas = list(sweep["mean_bleu"])
    longest = [
        max(run["scores"][alpha]["longest_translation_words"] for run in sweep["runs"].values()) for alpha in alphas
    ]
    references = {run["direction"]: run["longest_reference_words"] for run in sweep["runs"].values()}
    reference = ", ".join(f"{words} {direction}" for direction, words in sorted(references.items()))
    return table(
        ["α", *alphas],
        ["l"] + ["r"] * len(alphas),
        [
            ["mean validation BLEU", *(f"{sweep['mean_bleu'][alpha]:.2f}" for alpha in alphas)],
            [f"longest translation, words (longest reference: {reference})", *map(str, longest)],
        ],
    )


def average_table(results: Path) -> str:
    """Validation BLEU of the compiled preset run's average of its last N checkpoints at each alpha
    (``--average``)."""
    sweep = read_json(results, "multi30k/average-sweep-compiled-seed1.json")
    counts = list(sweep["mean_bleu_by_average"])
    alphas = list(sweep["mean_bleu_by_average"][counts[0]])
    return table(
        ["checkpoints averaged (every 250 steps)", *(f"α {alpha}" for alpha in alphas)],
        ["l"] + ["r"] * len(alphas),
        [[count, *(f"{sweep['mean_bleu_by_average'][count][alpha]:.2f}" for alpha in alphas)] for count in counts],
    )


FIGURES = {"average-table": average_table, "length-penalty-table": length_penalty_table, "length-ratio": length_ratio}


if __name__ == "__main__":
    sys.exit(main())
