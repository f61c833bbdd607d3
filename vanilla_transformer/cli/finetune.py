"""Fine-tune a saved model with transformers' Seq2SeqTrainer, keeping the checkpoint with the best BLEU.

Examples:

    vanilla-transformer finetune runs/base/model --train data/train.en data/train.de --eval data/dev.en data/dev.de \\
        --output-dir runs/finetuned --max-steps 2000 --eval-steps 200 --gradient-accumulation-steps 4 --bf16
    vanilla-transformer finetune org/name --hf-dataset iwslt2017 --hf-config iwslt2017-en-de --src-lang en \\
        --tgt-lang de --output-dir runs/iwslt --report-to tensorboard
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300 \\
        --resume-from-checkpoint last                                      # continue an interrupted run

--train and --eval take two aligned plain-text files (source, target), one .tsv file (source and target columns) or
one .jsonl file (keys --src-lang and --tgt-lang). Every option of transformers' Seq2SeqTrainingArguments is
accepted (``--help`` lists them), with the defaults of `vanilla_transformer.training.finetune.FINETUNE_DEFAULTS`;
``--resume-from-checkpoint last`` continues from the last checkpoint in --output-dir. The output directory holds the
best model, its tokenizer and training_summary.json, ready for vanilla-transformer push, next to the Trainer's
checkpoint-* folders.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser, Seq2SeqTrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from vanilla_transformer.cli import configure_logging
from vanilla_transformer.data import CorpusSpec, Pair, load_corpus
from vanilla_transformer.export.model_dir import load_model_dir
from vanilla_transformer.training.finetune import FINETUNE_DEFAULTS, finetune

logger = logging.getLogger("finetune")


@dataclass
class DataArguments:
    """The data options (give --train and --eval, or --hf-dataset, or --numbers) and the shorthands of the first
    version of this command."""

    train: list[str] | None = field(default=None, metadata={"help": "training pairs: SRC TGT, FILE.tsv or FILE.jsonl"})
    eval: list[str] | None = field(default=None, metadata={"help": "evaluation pairs, like --train"})
    hf_dataset: str | None = field(default=None, metadata={"help": "Hugging Face translation dataset, e.g. wmt14"})
    hf_config: str | None = field(default=None, metadata={"help": "dataset configuration, e.g. de-en"})
    train_split: str = field(default="train", metadata={"help": "training split of --hf-dataset"})
    eval_split: str = field(default="validation", metadata={"help": "evaluation split of --hf-dataset"})
    numbers: int | None = field(default=None, metadata={"help": "N pairs of the numbers task (and N/10 to evaluate)"})
    src_lang: str | None = field(default=None, metadata={"help": "source language (--hf-dataset, .jsonl, card)"})
    tgt_lang: str | None = field(default=None, metadata={"help": "target language code"})
    max_length: int = field(default=256, metadata={"help": "drop longer training pairs (tokens)"})
    num_epochs: float | None = field(default=None, metadata={"help": "shorthand for --num-train-epochs"})
    batch_size: int | None = field(default=None, metadata={"help": "--per-device-train/eval-batch-size, both"})
    label_smoothing: float | None = field(default=None, metadata={"help": "shorthand for --label-smoothing-factor"})
    num_beams: int | None = field(default=None, metadata={"help": "shorthand for --generation-num-beams"})


_SHORTHANDS = {
    "num_epochs": ("num_train_epochs",),
    "batch_size": ("per_device_train_batch_size", "per_device_eval_batch_size"),
    "label_smoothing": ("label_smoothing_factor",),
    "num_beams": ("generation_num_beams",),
}


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser((DataArguments, Seq2SeqTrainingArguments), description=__doc__.splitlines()[0])
    parser.add_argument("model", help="saved model directory or Hub id, with its tokenizer")
    parser.set_defaults(**FINETUNE_DEFAULTS, output_dir=None, save_strategy=None, save_steps=None)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[str, DataArguments, Seq2SeqTrainingArguments]:
    """The model to fine-tune, the data options and the Trainer's arguments."""
    parser = build_parser()
    namespace = parser.parse_args(argv)
    data = DataArguments(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(DataArguments)})
    _check_data(parser, data)
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(Seq2SeqTrainingArguments) if f.init}
    if values["output_dir"] is None:
        parser.error("--output-dir is required")
    for shorthand, names in _SHORTHANDS.items():
        if getattr(data, shorthand) is not None:
            values.update(dict.fromkeys(names, getattr(data, shorthand)))
    if values["save_strategy"] is None:  # checkpoints when evaluating, for load_best_model_at_end
        values["save_strategy"] = values["eval_strategy"]
    if values["save_steps"] is None:
        values["save_steps"] = values["eval_steps"]
    if values["resume_from_checkpoint"] == "last":
        values["resume_from_checkpoint"] = _last_checkpoint(parser, values["output_dir"])
    return namespace.model, data, Seq2SeqTrainingArguments(**values)


def _check_data(parser: HfArgumentParser, data: DataArguments) -> None:
    sources = [data.train is not None or data.eval is not None, data.hf_dataset is not None, data.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: --train and --eval, --hf-dataset, --numbers")
    if sources[0] and (data.train is None or data.eval is None):
        parser.error("--train and --eval go together")
    if data.hf_dataset is not None and (data.src_lang is None or data.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")


def _last_checkpoint(parser: HfArgumentParser, output_dir: str) -> str:
    last = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if last is None:
        parser.error(f"--resume-from-checkpoint last: --output-dir={output_dir} holds no checkpoint-* folder")
    return last


def load_data(data: DataArguments) -> tuple[list[Pair], list[Pair], dict[str, Any]]:
    """Training pairs, evaluation pairs, and their description for the run summary."""
    languages = {key: value for key in ("src_lang", "tgt_lang") if (value := getattr(data, key)) is not None}
    if data.numbers is not None:
        spec = CorpusSpec("numbers", numbers=(data.numbers, max(data.numbers // 10, 1), 0))
        splits = ("train", "valid")
        description = dict(dataset_name="numbers", src_lang="en", tgt_lang="de", eval_split="valid")
    elif data.hf_dataset is not None:
        spec = CorpusSpec(f"hf:{data.hf_dataset}", dataset_config=data.hf_config, **languages)
        splits = (data.train_split, data.eval_split)
        description = dict(
            dataset=data.hf_dataset, dataset_config=data.hf_config, eval_split=data.eval_split, **languages
        )
    else:
        spec = CorpusSpec.from_files({"train": data.train, "eval": data.eval}, **languages)
        splits = ("train", "eval")
        description = dict(dataset_name=data.train[0], eval_split=data.eval[0], **languages)
    description["dataset_name"] = description.get("dataset_name") or data.hf_dataset
    train, evaluation = (load_corpus(spec, split) for split in splits)
    return train, evaluation, description


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    model_name, data, training_args = parse_args(argv)
    train_pairs, eval_pairs, description = load_data(data)
    model, tokenizer = load_model_dir(model_name)
    result = finetune(
        model,
        tokenizer,
        train_pairs,
        eval_pairs,
        training_args,
        max_length=data.max_length,
        description={"base_model": model_name, **description},
    )
    logger.info("best model saved to %s: %s", result.output_dir, json.dumps(result.metrics))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
