"""Fine-tune a saved model with transformers' Seq2SeqTrainer, keeping the checkpoint with the best BLEU.

Examples:

    vanilla-transformer finetune runs/base/model --train data/train.en data/train.de --eval data/dev.en data/dev.de \\
        --output-dir runs/finetuned --max-steps 2000 --eval-steps 200 --gradient-accumulation-steps 4 --bf16
    vanilla-transformer finetune org/name --hf-dataset iwslt2017 --hf-config iwslt2017-en-de --src-lang en \\
        --tgt-lang de --output-dir runs/iwslt --report-to tensorboard
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300 \\
        --resume-from-checkpoint last                                      # continue an interrupted run
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-lora --max-steps 300 \
        --lora --lora-r 8 --lora-target-modules q_proj,v_proj --learning-rate 1e-3 --merge     # a LoRA adapter

--train and --eval take two aligned plain-text files (source, target), one .tsv file (source and target columns) or
one .jsonl file (keys --src-lang and --tgt-lang). Every option of transformers' Seq2SeqTrainingArguments is
accepted (``--help`` lists them), with the defaults of `vanilla_transformer.training.finetune.FINETUNE_DEFAULTS`;
``--resume-from-checkpoint last`` continues from the last checkpoint in --output-dir. The output directory holds the
best model, its tokenizer and training_summary.json, ready for vanilla-transformer push, next to the Trainer's
checkpoint-* folders. With --lora only a LoRA adapter is trained (peft, the 'peft' extra) and the output directory is
an adapter folder (adapter_config.json naming the base model, adapter_model.safetensors, the tokenizer, the model
card), which translate, evaluate, attention and push load with its base; --merge also writes the merged, plain model
directory to OUTPUT_DIR/merged.
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
from vanilla_transformer.extras import require
from vanilla_transformer.model_dir import is_adapter_dir, load_model_dir
from vanilla_transformer.training.finetune import FINETUNE_DEFAULTS, finetune
from vanilla_transformer.training.lora import LORA_DEFAULTS, add_lora, check_lora_settings

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


@dataclass
class LoraArguments:
    """Train a LoRA adapter (peft) instead of every weight."""

    lora: bool = field(default=False, metadata={"help": "train a LoRA adapter only; the output is an adapter folder"})
    lora_r: int = field(default=LORA_DEFAULTS["r"], metadata={"help": "LoRA rank r"})
    lora_alpha: int = field(
        default=LORA_DEFAULTS["alpha"], metadata={"help": "LoRA scaling: the update is alpha/r BA"}
    )
    lora_dropout: float = field(default=LORA_DEFAULTS["dropout"], metadata={"help": "dropout on the adapter's input"})
    lora_target_modules: str = field(
        default=",".join(LORA_DEFAULTS["target_modules"]),
        metadata={
            "help": "comma-separated linear layers to adapt (q_proj,k_proj,v_proj,out_proj,fc1,fc2; all-linear)"
        },
    )
    merge: bool = field(
        default=False, metadata={"help": "with --lora: also write the merged model to OUTPUT_DIR/merged"}
    )

    @property
    def target_modules(self) -> list[str] | str:
        names = [name.strip() for name in self.lora_target_modules.split(",")]
        return names[0] if names == ["all-linear"] else names

    def settings(self) -> dict[str, Any]:
        """The keyword arguments of `add_lora`."""
        return dict(
            r=self.lora_r, alpha=self.lora_alpha, dropout=self.lora_dropout, target_modules=self.target_modules
        )


_SHORTHANDS = {
    "num_epochs": ("num_train_epochs",),
    "batch_size": ("per_device_train_batch_size", "per_device_eval_batch_size"),
    "label_smoothing": ("label_smoothing_factor",),
    "num_beams": ("generation_num_beams",),
}


def build_parser() -> HfArgumentParser:
    parser = HfArgumentParser(
        (DataArguments, LoraArguments, Seq2SeqTrainingArguments), description=__doc__.splitlines()[0]
    )
    parser.add_argument("model", help="saved model directory or Hub id, with its tokenizer")
    parser.set_defaults(**FINETUNE_DEFAULTS, output_dir=None, save_strategy=None, save_steps=None)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[str, DataArguments, Seq2SeqTrainingArguments]:
    """The model to fine-tune, the data options and the Trainer's arguments (see `parse_options`)."""
    model, data, _, training_args = parse_options(argv)
    return model, data, training_args


def parse_options(
    argv: Sequence[str] | None = None,
) -> tuple[str, DataArguments, LoraArguments, Seq2SeqTrainingArguments]:
    """The model to fine-tune, the data options, the LoRA options and the Trainer's arguments."""
    parser = build_parser()
    namespace = parser.parse_args(argv)
    data = DataArguments(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(DataArguments)})
    _check_data(parser, data)
    lora = LoraArguments(**{f.name: getattr(namespace, f.name) for f in dataclasses.fields(LoraArguments)})
    _check_lora(parser, lora)
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
    return namespace.model, data, lora, Seq2SeqTrainingArguments(**values)


def _check_data(parser: HfArgumentParser, data: DataArguments) -> None:
    sources = [data.train is not None or data.eval is not None, data.hf_dataset is not None, data.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: --train and --eval, --hf-dataset, --numbers")
    if sources[0] and (data.train is None or data.eval is None):
        parser.error("--train and --eval go together")
    if data.hf_dataset is not None and (data.src_lang is None or data.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")


def _check_lora(parser: HfArgumentParser, lora: LoraArguments) -> None:
    """The LoRA options, checked before anything loads; the target modules are checked against the model later."""
    if not lora.lora:
        given = [
            f"--{f.name.replace('_', '-')}"
            for f in dataclasses.fields(LoraArguments)[1:]
            if getattr(lora, f.name) != f.default
        ]
        if given:
            parser.error(f"{', '.join(given)} need(s) --lora")
        return
    try:
        require("peft", "vanilla-transformer finetune --lora")
        check_lora_settings(None, **lora.settings())
    except (ImportError, ValueError) as error:
        parser.error(str(error))


def prepare_model(parser: HfArgumentParser, model_name: str, lora: LoraArguments) -> tuple[Any, Any]:
    """The model to fine-tune and its tokenizer; with --lora, wrapped with a new LoRA adapter."""
    if is_adapter_dir(model_name):
        parser.error(f"{model_name} is a LoRA adapter folder: fine-tune its merged model (finetune --lora --merge)")
    model, tokenizer = load_model_dir(model_name)
    if lora.lora:
        try:
            model = add_lora(model, **lora.settings())
        except ValueError as error:
            parser.error(str(error))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info("LoRA adapter: %d trainable parameters of %d", trainable, model.num_parameters())
    return model, tokenizer


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
    model_name, data, lora, training_args = parse_options(argv)
    model, tokenizer = prepare_model(build_parser(), model_name, lora)
    train_pairs, eval_pairs, description = load_data(data)
    result = finetune(
        model,
        tokenizer,
        train_pairs,
        eval_pairs,
        training_args,
        max_length=data.max_length,
        description={"base_model": model_name, **description},
        merge=lora.merge,
    )
    saved = "LoRA adapter" if lora.lora else "best model"
    logger.info("%s saved to %s: %s", saved, result.output_dir, json.dumps(result.metrics))
    if result.merged_dir is not None:
        logger.info("merged model saved to %s", result.merged_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
