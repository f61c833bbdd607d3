"""Translate a file (or standard input), one sentence per line, with the paper's beam search.

    vanilla-transformer translate --model runs/numbers/model --input sentences.en --output sentences.de
    vanilla-transformer translate --model runs/numbers/model sentences.en     # the same, to standard output
    echo "three hundred and twenty-one" | vanilla-transformer translate --model runs/numbers/model

The search is the one the model's generation_config.json asks for (a trained model's: the run's beam size and alpha),
else section 6.1's: beam 4, GNMT length penalty alpha = 0.6, at most input length + 50 tokens. The options override it.

Translations are written as they are made, in input order (the sentences are sorted by length within windows of
16 batches): standard output is flushed line by line, and --output is written to OUTPUT.partial, renamed to OUTPUT
at the end. A run interrupted with Ctrl-C keeps what it finished (in OUTPUT.partial, named on standard error);
OUTPUT itself is replaced only by a complete run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

import vanilla_transformer  # noqa: F401  (registers the model with the Auto classes once transformers loads)
from vanilla_transformer.atomic import (
    check_not_an_input,
    check_output_file,
    is_standard_output,
    is_stream,
    write_file,
    writing,
)
from vanilla_transformer.cli import PROG
from vanilla_transformer.cli.decoding import (
    STDIN,
    STREAM_WINDOW_BATCHES,
    add_decoding_arguments,
    check_decoding_arguments,
    read_input_lines,
    resolve_engine,
    resolve_search_arguments,
    translate_with_options,
)
from vanilla_transformer.parsing import CommandParser

PARTIAL_SUFFIX = ".partial"
"""`write_translations` writes ``--output`` under this suffix until every translation is written."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description="Translate one sentence per line with the paper's beam search.")
    parser.add_argument("--model", required=True, help="Hugging Face model directory, with its tokenizer")
    parser.add_input_argument(
        "file",
        nargs="?",
        metavar="FILE",
        help="file to translate, the same as --input FILE (default: standard input; - also reads it)",
    )
    parser.add_input_argument(
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
        "long to search; a sentence whose answer CTranslate2's scores cannot prove there is searched again. At beam 4 "
        "on one thread it ran at 0.9 times the speed of CTranslate2's own stop rule on the default job's model and "
        "at 0.3 times on a Multi30k model, where the exact stop needs 1.5 times CTranslate2's own decoder steps and "
        "even a search told every sentence's length in advance reached only 0.6 times (docs/serving.md). --dtype bf16 "
        "and fp16 decode in CTranslate2's bfloat16 and float16 where the device computes them (a GPU), fp32 in the "
        "export's own type",
    )
    add_decoding_arguments(parser)
    args = parser.parse_args(argv)
    if args.file is not None and args.input is not None:
        parser.error(f"the input file is given twice, as FILE={args.file} and --input={args.input}: give one of them")
    args.input_option = "FILE" if args.file is not None else "--input"
    args.input = args.file if args.file is not None else args.input
    check_decoding_arguments(args)
    check_output_file(args.output, "--output")
    inputs = {args.input_option: args.input or STDIN, "--model": args.model, "--ctranslate2": args.ctranslate2}
    check_not_an_input(args.output, "--output", inputs)
    check_partial(args.output)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    sentences = read_input_lines(args.input or STDIN, args.input_option)
    if not sentences:  # not an error (an empty input has an empty translation), but rarely what was meant
        given = "standard input" if (args.input or STDIN) == STDIN else f"{args.input_option}={args.input}"
        print(f"{PROG} translate: note: {given} is empty: nothing to translate", file=sys.stderr)
        write_translations([], args.output)  # an empty translation, without loading the model
        return 0
    translations = _translate_ctranslate2(args, sentences) if args.ctranslate2 else None
    if translations is None:
        translations = translate_with_options(args, sentences)
    write_translations(translations, args.output)
    return 0


def _translate_ctranslate2(args: argparse.Namespace, sentences: Sequence[str]) -> Iterator[str]:
    """The translations of `sentences` by the CTranslate2 export ``--ctranslate2``, in input order, a window of
    `STREAM_WINDOW_BATCHES` batches at a time (as `translate_with_options`); the model and its settings are read
    before the first is asked for."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig
    from transformers.utils import GENERATION_CONFIG_NAME

    from vanilla_transformer.model_dir import check_model_dir
    from vanilla_transformer.serving.search import encode_sources
    from vanilla_transformer.serving.with_ctranslate2 import (
        check_tokenizer,
        compute_type_of,
        load_translator,
        translate_ctranslate2,
    )

    check_model_dir(args.model)
    resolve_engine(args)
    compute_type = compute_type_of(args.dtype, args.device)  # --dtype bf16 or fp16: CTranslate2's, or refused
    tokenizer = AutoTokenizer.from_pretrained(args.model, trust_remote_code=False)
    saved = Path(args.model, GENERATION_CONFIG_NAME).is_file()
    resolve_search_arguments(args, GenerationConfig.from_pretrained(args.model) if saved else None)
    check_tokenizer(args.ctranslate2, tokenizer)  # the export's own tokenizer, before any work
    translator = load_translator(
        args.ctranslate2, device=args.device, compute_type=compute_type, threads=args.num_threads or 0
    )
    settings = dict(
        beam_size=args.num_beams,
        length_penalty=args.length_penalty,
        max_length_offset=args.max_length_offset,
        max_decoding_length=getattr(AutoConfig.from_pretrained(args.model), "max_position_embeddings", None),
        batch_size=args.batch_size,
    )
    # Every sentence checked before the first window is translated, as on the PyTorch path (a long one is refused)
    encode_sources(tokenizer, sentences, settings["max_decoding_length"])
    window = args.batch_size * STREAM_WINDOW_BATCHES
    spans = [sentences[first : first + window] for first in range(0, len(sentences), window)]
    return (line for span in spans for line in translate_ctranslate2(translator, tokenizer, span, **settings))


def partial_path(output: str | os.PathLike[str]) -> Path:
    """Where `write_translations` writes the translations for `output` while they are made: ``<output>.partial``."""
    output = Path(output)
    return output.with_name(output.name + PARTIAL_SUFFIX)


def check_partial(output: str | None) -> None:
    """Refuse, before any work, an ``--output`` whose ``.partial`` file exists: it is not this run's to replace (an
    interrupted run left it, holding its first translations, or it is a file of the user's)."""
    if output is None or is_stream(Path(output)) or is_standard_output(output):
        return
    partial = partial_path(output)
    if partial.exists() or partial.is_symlink():
        raise ValueError(
            f"--output={output}: {partial} exists (what an interrupted run left, or a file of yours): move or delete "
            "it first"
        )
    check_output_file(partial, "--output")


def write_translations(translations: Iterable[str], output: str | None) -> int:
    """Write each translation, one per line, as it comes: to standard output (flushed line by line), or to
    ``<output>.partial``, renamed to `output` once every translation is written. An interrupted run (Ctrl-C) keeps
    what it finished, on standard output or in ``<output>.partial`` (named on standard error); `output` is left as it
    was until the end. Any other error removes the partial file. The number of translations written."""
    if output is None or is_standard_output(output):  # /dev/stdout: where standard output goes, not reopened
        check_output_file(output, "--output")
        return _write_lines(translations, sys.stdout)
    check_output_file(output, "--output")  # not what the command read, now that it has read everything
    if is_stream(Path(output)):  # a pipe or a terminal: written as a stream
        with writing(output, "--output"), open(output, "w", encoding="utf-8") as stream:
            return _write_lines(translations, stream)
    partial, written, stream = partial_path(output), 0, None
    try:
        with writing(output, "--output"):
            for line in translations:
                if stream is None:  # made with the first translation: an interrupted read leaves nothing
                    stream = open(partial, "x", encoding="utf-8")
                stream.write(line + "\n")
                stream.flush()
                written += 1
            if stream is None:
                write_file(output, "", what="--output")
                return 0
            stream.close()
            os.replace(partial, output)
        return written
    except KeyboardInterrupt:
        if stream is not None:
            _close(stream)
            print(f"{PROG} translate: note: the first {written} translations are in {partial}", file=sys.stderr)
        raise
    except BaseException:
        if stream is not None:
            _close(stream)
            partial.unlink(missing_ok=True)
        raise


def _close(stream: TextIO) -> None:
    """Close `stream` after an error; what it still held is lost if the system refuses it (a full disk), the error
    already raised is the one reported."""
    with contextlib.suppress(OSError):
        stream.close()


def _write_lines(translations: Iterable[str], stream: TextIO) -> int:
    written = 0
    for line in translations:
        stream.write(line + "\n")
        stream.flush()
        written += 1
    return written


if __name__ == "__main__":
    raise SystemExit(main())
