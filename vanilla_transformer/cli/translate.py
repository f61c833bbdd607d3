"""Translate a file (or standard input), one sentence per line, with the paper's beam search.

    vanilla-transformer translate --model runs/numbers/model --input sentences.en --output sentences.de
    vanilla-transformer translate --model runs/numbers/model sentences.en     # the same, to standard output
    echo "three hundred and twenty-one" | vanilla-transformer translate --model runs/numbers/model

The search is the one the model's generation_config.json asks for (a trained model's: the run's beam size and alpha),
else section 6.1's: beam 4, GNMT length penalty alpha = 0.6, at most input length + 50 tokens. The options override it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import vanilla_transformer  # noqa: F401  (registers the model with the Auto classes once transformers loads)
from vanilla_transformer.atomic import check_output_file, write_file
from vanilla_transformer.cli import PROG
from vanilla_transformer.cli.decoding import (
    STDIN,
    add_decoding_arguments,
    check_decoding_arguments,
    read_input_lines,
    resolve_engine,
    resolve_search_arguments,
    translate_with_options,
)
from vanilla_transformer.cli.parsing import CommandParser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description="Translate one sentence per line with the paper's beam search.")
    parser.add_argument("--model", required=True, help="Hugging Face model directory, with its tokenizer")
    parser.add_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="file to translate, the same as --input FILE (default: standard input; - also reads it)",
    )
    parser.add_argument(
        "--input", help="file to translate, or a pipe such as <(head -n 5 file) (default, or -: standard input)"
    )
    parser.add_argument("--output", help="file to write (default: standard output)")
    parser.add_argument(
        "--ctranslate2",
        metavar="DIR",
        help="decode with this CTranslate2 export of --model (vanilla-transformer export-ctranslate2): the same search "
        "(--num-beams, GNMT's --length-penalty, each sentence at most its input length + --max-length-offset tokens, "
        "exact stopping) run by CTranslate2's beam search, so the same translations up to the rounding of its "
        "kernels (and of int8 weights). Its cost: a greedy pass over a sample of at most 32 sentences predicts how "
        "long to search; a sentence whose answer CTranslate2's scores cannot prove there is searched again. Beam 4 "
        "took about as many decoder steps as CTranslate2's own stop rule on the default job's model, and 2.7 times "
        "as many on a Multi30k model, where PyTorch's exact stop itself takes 1.7 times (docs/serving.md)",
    )
    add_decoding_arguments(parser)
    args = parser.parse_args(argv)
    if args.file is not None and args.input is not None:
        parser.error(f"the input file is given twice, as FILE={args.file} and --input={args.input}: give one of them")
    args.input_option = "FILE" if args.file is not None else "--input"
    args.input = args.file if args.file is not None else args.input
    check_decoding_arguments(args)
    check_output_file(args.output, "--output")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sentences = read_input_lines(args.input or STDIN, args.input_option)
    if not sentences:  # not an error (an empty input has an empty translation), but rarely what was meant
        given = "standard input" if (args.input or STDIN) == STDIN else f"{args.input_option}={args.input}"
        print(f"{PROG} translate: note: {given} is empty: nothing to translate", file=sys.stderr)
    if args.ctranslate2:
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig
        from transformers.utils import GENERATION_CONFIG_NAME

        from vanilla_transformer.model_dir import check_model_dir
        from vanilla_transformer.serving.with_ctranslate2 import translate_ctranslate2

        check_model_dir(args.model)
        resolve_engine(args)
        tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=False)
        saved = Path(args.model, GENERATION_CONFIG_NAME).is_file()
        resolve_search_arguments(args, GenerationConfig.from_pretrained(args.model) if saved else None)
        translations = translate_ctranslate2(
            args.ctranslate2,
            tokenizer,
            sentences,
            beam_size=args.num_beams,
            length_penalty=args.length_penalty,
            max_length_offset=args.max_length_offset,
            max_decoding_length=getattr(AutoConfig.from_pretrained(args.model), "max_position_embeddings", None),
            batch_size=args.batch_size,
            device=args.device,
            threads=args.num_threads or 0,
        )
    else:
        translations = translate_with_options(args, sentences)
    output = "".join(line + "\n" for line in translations)
    if args.output:
        write_file(args.output, output, what="--output")
    else:
        sys.stdout.write(output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
