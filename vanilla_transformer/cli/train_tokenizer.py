"""Train the shared source/target byte-level BPE tokenizer and save it.

Examples:
    vanilla-transformer train-tokenizer data/train.en data/train.de --vocab-size 37000 --output-dir tokenizer
    vanilla-transformer train-tokenizer --hf-dataset wmt14 --hf-config de-en --src-lang en --tgt-lang de \\
        --vocab-size 37000 --output-dir tokenizer
    vanilla-transformer train-tokenizer --numbers 20000 --vocab-size 1000 --output-dir tokenizer

Plain-text files are used line by line as they are. Dataset pairs and the
numbers task are cleaned with ``clean_pairs`` first, as for training.
Reload the result with ``AutoTokenizer.from_pretrained(output_dir)``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.cli import configure_logging
from vanilla_transformer.data import CorpusSpec, clean_pairs, load_corpus
from vanilla_transformer.tokenization import train_tokenizer

logger = logging.getLogger("train_tokenizer")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="plain-text files, one sentence per line")
    parser.add_argument("--hf-dataset", help="Hugging Face dataset to train on instead of files, e.g. wmt14")
    parser.add_argument("--hf-config", help="dataset configuration, e.g. de-en")
    parser.add_argument("--split", default="train", help="dataset split (default: train)")
    parser.add_argument("--src-lang", help="source language code of --hf-dataset, e.g. en")
    parser.add_argument("--tgt-lang", help="target language code of --hf-dataset, e.g. de")
    parser.add_argument(
        "--numbers", type=int, metavar="N", help="train on N pairs of the built-in numbers task instead of files"
    )
    parser.add_argument("--vocab-size", type=int, required=True, help="vocabulary size, special tokens included")
    parser.add_argument("--min-frequency", type=int, default=2, help="minimum pair count for a merge (default: 2)")
    parser.add_argument("--output-dir", type=Path, required=True, help="directory to save the tokenizer to")
    args = parser.parse_args(argv)

    sources = [bool(args.files), args.hf_dataset is not None, args.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: files, --hf-dataset, --numbers")
    if args.hf_dataset is not None and (args.src_lang is None or args.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")
    return args


def training_texts(args: argparse.Namespace) -> Sequence[str | Path]:
    """The files, or the source and target sentences of the chosen corpus."""
    if args.files:
        return args.files
    if args.hf_dataset is not None:
        spec = CorpusSpec(
            f"hf:{args.hf_dataset}", dataset_config=args.hf_config, src_lang=args.src_lang, tgt_lang=args.tgt_lang
        )
        pairs = load_corpus(spec, args.split)
    else:
        pairs = load_corpus(CorpusSpec("numbers", numbers=(args.numbers, 0, 0)), "train")
    pairs, _ = clean_pairs(pairs)
    return [text for pair in pairs for text in pair]


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    args = parse_args(argv)
    tokenizer = train_tokenizer(training_texts(args), args.vocab_size, min_frequency=args.min_frequency)
    tokenizer.save_pretrained(args.output_dir)
    logger.info("saved a tokenizer of %d tokens to %s", len(tokenizer), args.output_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
