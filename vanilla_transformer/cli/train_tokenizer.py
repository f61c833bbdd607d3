"""Train the shared source/target byte-level BPE tokenizer and save it.

Examples:
    vanilla-transformer train-tokenizer data/train.en data/train.de --vocab-size 37000 --output-dir tokenizer
    vanilla-transformer train-tokenizer --hf-dataset wmt14 --hf-config de-en --src-lang en --tgt-lang de \\
        --vocab-size 37000 --output-dir tokenizer
    vanilla-transformer train-tokenizer --numbers 20000 --vocab-size 1000 --output-dir tokenizer

Plain-text files are used line by line as they are. Dataset pairs and the
numbers task are cleaned with ``clean_pairs`` first, as for training.
Reload the result with ``AutoTokenizer.from_pretrained(output_dir)``.

The tokenizer folder is written as a whole (`vanilla_transformer.atomic.write_directory`), replacing only an
earlier tokenizer folder. A folder holding a trained model is refused before any training: a new tokenizer gives its
token ids other meanings, and the model would translate garbage. ``--replace-model-tokenizer`` does it anyway (each
tokenizer file replaced atomically); any other non-empty folder is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer import atomic
from vanilla_transformer.atomic import write_directory
from vanilla_transformer.cli import configure_logging
from vanilla_transformer.parsing import CommandParser, Range, summary

logger = logging.getLogger("train_tokenizer")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = CommandParser(description=summary(__doc__))
    parser.add_argument("files", nargs="*", type=Path, help="plain-text files, one sentence per line")
    parser.add_argument("--hf-dataset", help="Hugging Face dataset to train on instead of files, e.g. wmt14")
    parser.add_argument("--hf-config", help="dataset configuration, e.g. de-en")
    parser.add_argument("--split", default="train", help="dataset split (default: train)")
    parser.add_argument("--src-lang", help="source language code of --hf-dataset, e.g. en")
    parser.add_argument("--tgt-lang", help="target language code of --hf-dataset, e.g. de")
    parser.add_argument(
        "--numbers",
        type=Range(int, 1),
        metavar="N",
        help="train on N pairs of the built-in numbers task instead of files",
    )
    parser.add_argument(
        "--vocab-size", type=Range(int, 1), required=True, help="vocabulary size, special tokens included"
    )
    parser.add_argument(
        "--min-frequency", type=Range(int, 1), default=2, help="minimum pair count for a merge (default: 2)"
    )
    parser.add_argument("--output-dir", type=Path, required=True, help="directory to save the tokenizer to")
    parser.add_argument(
        "--replace-model-tokenizer",
        action="store_true",
        help="write into a model directory, replacing the tokenizer its weights were trained with",
    )
    args = parser.parse_args(argv)

    sources = [bool(args.files), args.hf_dataset is not None, args.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: files, --hf-dataset, --numbers")
    if args.hf_dataset is not None and (args.src_lang is None or args.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")
    return args


TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "merges.txt",
    }
)
"""What a tokenizer's ``save_pretrained`` writes: a folder of these alone is a tokenizer folder, which may be replaced."""

MODEL_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", "adapter_config.json")
"""Any of these marks a model directory, whose tokenizer is replaced only with --replace-model-tokenizer."""


def is_tokenizer_dir(directory: Path) -> bool:
    """Whether `directory` holds a saved tokenizer and nothing else."""
    names = {path.name for path in directory.iterdir()}
    return bool(names) and names <= TOKENIZER_FILES and bool(names & {"tokenizer.json", "tokenizer_config.json"})


def check_output_dir(args: argparse.Namespace) -> bool:
    """Before any training: whether ``--output-dir`` is a model directory (allowed only with
    ``--replace-model-tokenizer``); a file, or a non-empty folder that is neither a model nor a tokenizer, is refused."""
    output = args.output_dir
    if output.exists() and not output.is_dir():
        raise ValueError(f"--output-dir={output} is a file, not a directory")
    atomic.check_output_dir(output, "--output-dir", replaceable=lambda folder: True)  # a link, an unwritable place
    if not output.is_dir() or not any(output.iterdir()):
        return False
    if any((output / name).exists() for name in MODEL_FILES):
        if not args.replace_model_tokenizer:
            raise ValueError(
                f"--output-dir={output} holds a trained model: a new tokenizer would give its token ids other "
                f"meanings. Choose another --output-dir, or pass --replace-model-tokenizer to replace it anyway"
            )
        return True
    if not is_tokenizer_dir(output):
        raise ValueError(
            f"--output-dir={output} is not empty and holds no tokenizer: choose a new or empty directory (only a "
            f"tokenizer folder is replaced)"
        )
    return False


def save_tokenizer(tokenizer, output: Path, into_model: bool) -> None:
    """Write the tokenizer folder as a whole; into a model directory, replace each tokenizer file atomically."""
    if not into_model:
        write_directory(output, tokenizer.save_pretrained, replaceable=is_tokenizer_dir, what="--output-dir")
        return
    with tempfile.TemporaryDirectory(dir=output, prefix=".tokenizer-") as temporary:
        tokenizer.save_pretrained(temporary)
        for path in Path(temporary).iterdir():
            os.replace(path, output / path.name)


def training_texts(args: argparse.Namespace) -> Sequence[str | Path]:
    """The files, or the source and target sentences of the chosen corpus."""
    if args.files:
        return args.files
    from vanilla_transformer.data import CorpusSpec, clean_pairs, load_corpus  # torch: not for --help
    from vanilla_transformer.data.numbers import check_numbers_task

    if args.numbers is not None:
        check_numbers_task("--numbers", args.numbers, args.numbers)
    spec = CorpusSpec.from_options(
        dataset="numbers" if args.numbers is not None else None,
        numbers=(args.numbers, 0, 0) if args.numbers is not None else None,
        hf_dataset=args.hf_dataset,
        dataset_config=args.hf_config,
        src_lang=args.src_lang,
        tgt_lang=args.tgt_lang,
    )
    pairs, _ = clean_pairs(load_corpus(spec, args.split if args.hf_dataset is not None else "train"))
    return [text for pair in pairs for text in pair]


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    into_model = check_output_dir(args)
    from vanilla_transformer.tokenization import train_tokenizer  # transformers: not for --help

    tokenizer = train_tokenizer(  # the numbers task's words are lower-case: capitals read as the same words
        training_texts(args), args.vocab_size, min_frequency=args.min_frequency, lowercase=args.numbers is not None
    )
    save_tokenizer(tokenizer, args.output_dir, into_model)
    logger.info("saved a tokenizer of %d tokens to %s", len(tokenizer), args.output_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
