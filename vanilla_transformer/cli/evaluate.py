"""Score translations of a test set: sacreBLEU's BLEU (with its signature), chrF and exact match; with
``--compound-split-bleu``, the paper's tokenized, compound-split BLEU too (`vanilla_transformer.metrics.compound_split`).

BLEU is left out where no reference holds a 4-gram (`vanilla_transformer.metrics.bleu_applies`): it is 0 by
construction there, whatever the translations, as on the built-in task's number words.

    vanilla-transformer evaluate --model runs/numbers/model \
        --source runs/numbers/test.en --reference runs/numbers/test.de
    vanilla-transformer evaluate --hypotheses output.de --reference newstest2014.de   # existing output
    vanilla-transformer evaluate --hypotheses output.de --reference newstest2014.de --compound-split-bleu  # + the paper's
    vanilla-transformer evaluate --hypotheses - --reference <(head -n 5 ref.de) < out.de  # pipes, standard input

With --model the sources are first translated with the paper's beam search, as vanilla-transformer translate does: with
the model's own beam size and alpha (its generation_config.json) unless the options say otherwise. Each of --reference,
--hypotheses and --source may be a file, a pipe or FIFO, or - (standard input, for one of them).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

import vanilla_transformer  # noqa: F401  (registers the model with the Auto classes once transformers loads)
from vanilla_transformer.atomic import check_not_an_input, check_output_file, write_file
from vanilla_transformer.cli.decoding import (
    STDIN,
    add_decoding_arguments,
    check_decoding_arguments,
    read_input_lines,
    translate_with_options,
)
from vanilla_transformer.parsing import CommandParser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description="Score translations: BLEU, chrF and exact match.")
    inputs = "a file, a pipe such as <(head -n 5 file), or - for standard input"
    parser.add_input_argument("--reference", required=True, help=f"reference translations, one per line: {inputs}")
    parser.add_input_argument(
        "--hypotheses", help=f"translations to score (instead of --model and --source): {inputs}"
    )
    parser.add_argument("--model", help="Hugging Face model directory to translate --source with")
    parser.add_input_argument("--source", help=f"source sentences, one per line: {inputs}")
    parser.add_argument("--output", help="with --model: also write the translations to this file")
    parser.add_argument("--results", help="also write the scores to this file, as JSON")
    parser.add_argument(
        "--compound-split-bleu",
        nargs="?",
        const="de",
        metavar="LANG",
        help="also report the paper's BLEU, tokenized and compound-split as tensor2tensor's get_ende_bleu.sh: Moses "
        "tokenizer for the references' language LANG (default: de), ##AT##-##AT## split, corpus BLEU on those tokens",
    )
    add_decoding_arguments(parser)
    args = parser.parse_args(argv)
    if (args.hypotheses is None) == (args.model is None and args.source is None):
        parser.error("give either --hypotheses, or --model and --source")
    if args.hypotheses is None and (args.model is None or args.source is None):
        parser.error("--model and --source go together")
    from_stdin = [f"--{name}" for name in ("reference", "hypotheses", "source") if getattr(args, name) == STDIN]
    if len(from_stdin) > 1:
        parser.error(f"only one input can be read from standard input (-), got {' and '.join(from_stdin)}")
    check_decoding_arguments(args)
    check_output_file(args.output, "--output")
    check_output_file(args.results, "--results")
    inputs = {f"--{name}": getattr(args, name) for name in ("reference", "hypotheses", "source", "model")}
    check_not_an_input(args.output, "--output", inputs)
    check_not_an_input(args.results, "--results", inputs, outputs={"--output": args.output})
    return args


def _check_same_length(lines: list[str], references: list[str], option: str, args: argparse.Namespace) -> None:
    """Before any translating: a line-count mismatch means the files are not aligned."""
    if len(lines) != len(references):
        raise ValueError(
            f"{option}={getattr(args, option[2:])} has {len(lines)} lines but --reference={args.reference} has "
            f"{len(references)}: they must be aligned line by line"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from vanilla_transformer.metrics import bleu_applies  # not for --help: sacrebleu, torch
    from vanilla_transformer.training import score_translations

    references = read_input_lines(args.reference, "--reference")
    if args.hypotheses is not None:
        hypotheses = read_input_lines(args.hypotheses, "--hypotheses")
        _check_same_length(hypotheses, references, "--hypotheses", args)
    else:
        sources = read_input_lines(args.source, "--source")
        _check_same_length(sources, references, "--source", args)
        hypotheses = list(translate_with_options(args, sources))
        print(
            f"search: beam {args.num_beams}, GNMT alpha {args.length_penalty}, "
            f"at most input length + {args.max_length_offset}"
        )
        if args.output:
            write_file(args.output, "".join(line + "\n" for line in hypotheses), what="--output")
    scores = score_translations(
        hypotheses, references, bleu=bleu_applies(references), compound_split_lang=args.compound_split_bleu
    )
    if "bleu" in scores:
        print(f"BLEU = {scores['bleu']:.2f} ({scores['bleu_signature']})")
    if "bleu_compound_split" in scores:
        print(
            f"BLEU, tokenized and compound-split = {scores['bleu_compound_split']:.2f} ({scores['bleu_compound_split_recipe']})"
        )
    else:
        print("BLEU: not scored, no reference holds a 4-gram (0 by construction, as on number words)")
    print(f"chrF = {scores['chrf']:.2f}")
    print(f"exact match = {scores['exact_match']:.2f}%")
    if args.results:
        write_file(args.results, json.dumps(scores, indent=2) + "\n", what="--results")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
