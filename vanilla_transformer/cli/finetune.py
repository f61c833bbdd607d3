"""Fine-tune a saved model with transformers' Seq2SeqTrainer, keeping the checkpoint with the best BLEU.

Examples:
    vanilla-transformer finetune runs/base --train data/train.en data/train.de --eval data/dev.en data/dev.de \\
        --output-dir runs/finetuned --max-steps 2000 --eval-steps 200 --gradient-accumulation-steps 4
    vanilla-transformer finetune org/name --hf-dataset iwslt2017 --hf-config iwslt2017-en-de --src-lang en \\
        --tgt-lang de --output-dir runs/iwslt
    vanilla-transformer finetune runs/numbers --numbers 2000 --output-dir runs/numbers-ft --max-steps 300 --eval-steps 100

--train and --eval take two aligned plain-text files (source, target), one .tsv file (source and target columns) or
one .jsonl file (keys --src-lang and --tgt-lang). The output directory holds the best model, its tokenizer and
training_summary.json, ready for vanilla-transformer push, next to the Trainer's checkpoint-* folders.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from vanilla_transformer.data import Pair, load_hf_translation, make_numbers_task
from vanilla_transformer.training.finetune import finetune, load_model_and_tokenizer, read_pairs, training_arguments

logger = logging.getLogger("finetune")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="saved model directory or Hub id, with its tokenizer")
    parser.add_argument("--output-dir", type=Path, required=True, help="where to save checkpoints and the best model")
    data = parser.add_argument_group("data (give --train and --eval, or --hf-dataset, or --numbers)")
    data.add_argument(
        "--train", nargs="+", type=Path, metavar="PATH", help="training pairs: SRC TGT, FILE.tsv or FILE.jsonl"
    )
    data.add_argument("--eval", nargs="+", type=Path, metavar="PATH", help="evaluation pairs, like --train")
    data.add_argument("--hf-dataset", help="Hugging Face translation dataset, e.g. wmt14")
    data.add_argument("--hf-config", help="dataset configuration, e.g. de-en")
    data.add_argument("--train-split", default="train", help="training split of --hf-dataset (default: train)")
    data.add_argument("--eval-split", default="validation", help="evaluation split of --hf-dataset")
    data.add_argument("--numbers", type=int, metavar="N", help="N pairs of the numbers task (and N/10 to evaluate)")
    data.add_argument("--src-lang", help="source language code (for --hf-dataset, .jsonl files and the model card)")
    data.add_argument("--tgt-lang", help="target language code")
    data.add_argument("--max-length", type=int, default=256, help="drop longer training pairs (tokens)")
    training = parser.add_argument_group("training")
    training.add_argument("--max-steps", type=int, default=-1, help="optimizer steps; overrides --num-epochs")
    training.add_argument("--num-epochs", type=float, default=3.0, help="passes over the training data (default: 3)")
    training.add_argument("--learning-rate", type=float, default=1e-4, help="peak learning rate (default: 1e-4)")
    training.add_argument("--warmup-steps", type=float, default=0.05, help="warmup steps, or a fraction if < 1")
    training.add_argument("--batch-size", type=int, default=32, help="sentence pairs per micro-batch (default: 32)")
    training.add_argument("--gradient-accumulation-steps", type=int, default=1, help="micro-batches per step")
    training.add_argument("--label-smoothing", type=float, default=0.1, help="label smoothing (default: 0.1)")
    training.add_argument("--eval-steps", type=int, default=500, help="evaluate and save every N steps (default: 500)")
    training.add_argument("--logging-steps", type=int, default=50, help="log the loss every N steps (default: 50)")
    training.add_argument("--save-total-limit", type=int, default=2, help="checkpoints kept, the best included")
    training.add_argument("--num-beams", type=int, help="evaluation beam size (default: the generation config's)")
    training.add_argument("--generation-max-length", type=int, help="maximum length of evaluation translations")
    training.add_argument("--seed", type=int, default=42, help="random seed (default: 42)")
    args = parser.parse_args(argv)

    sources = [args.train is not None or args.eval is not None, args.hf_dataset is not None, args.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: --train and --eval, --hf-dataset, --numbers")
    if sources[0] and (args.train is None or args.eval is None):
        parser.error("--train and --eval go together")
    if args.hf_dataset is not None and (args.src_lang is None or args.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")
    return args


def load_data(args: argparse.Namespace) -> tuple[list[Pair], list[Pair], dict[str, str | None]]:
    """Training pairs, evaluation pairs, and their description for the run summary."""
    if args.numbers is not None:
        splits = make_numbers_task(args.numbers, max(args.numbers // 10, 1), 0)
        return splits.train, splits.valid, dict(dataset="numbers", src_lang="en", tgt_lang="de", eval_split="valid")
    description = dict(src_lang=args.src_lang, tgt_lang=args.tgt_lang)
    if args.hf_dataset is not None:
        train, evaluation = (
            load_hf_translation(
                args.hf_dataset, args.hf_config, split=split, src_lang=args.src_lang, tgt_lang=args.tgt_lang
            )
            for split in (args.train_split, args.eval_split)
        )
        return train, evaluation, dict(description, dataset=args.hf_dataset, eval_split=args.eval_split)
    train, evaluation = (
        read_pairs(paths, src_lang=args.src_lang, tgt_lang=args.tgt_lang) for paths in (args.train, args.eval)
    )
    return train, evaluation, dict(description, dataset=args.train[0].stem, eval_split=args.eval[0].name)


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    train_pairs, eval_pairs, description = load_data(args)
    model, tokenizer = load_model_and_tokenizer(args.model)
    training_args = training_arguments(
        args.output_dir,
        max_steps=args.max_steps,
        num_train_epochs=args.num_epochs,
        learning_rate=args.learning_rate,
        warmup_steps=args.warmup_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        label_smoothing_factor=args.label_smoothing,
        eval_steps=args.eval_steps,
        logging_steps=args.logging_steps,
        save_total_limit=args.save_total_limit,
        generation_num_beams=args.num_beams,
        generation_max_length=args.generation_max_length,
        seed=args.seed,
    )
    result = finetune(
        model,
        tokenizer,
        train_pairs,
        eval_pairs,
        training_args,
        max_length=args.max_length,
        base_model=args.model,
        **description,
    )
    logger.info("best model saved to %s: %s", result.output_dir, json.dumps(result.metrics))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
