"""Fine-tune a saved model on parallel data with transformers' `Seq2SeqTrainer`.

The Trainer path, next to the package's own training loop: label smoothing, gradient accumulation, evaluation by
generating translations and scoring them with the package's BLEU `evaluate` module, and keeping the checkpoint with
the best BLEU::

    model, tokenizer = load_model_and_tokenizer("runs/base")           # a directory or a Hub id
    args = training_arguments("runs/finetuned", max_steps=2000, eval_steps=200)
    result = finetune(model, tokenizer, train_pairs, eval_pairs, args)
    result.metrics["bleu"], result.output_dir                         # the best checkpoint, saved for `from_pretrained`

Two details of the Trainer matter for this model (transformers 5.23, ``trainer.py``):

* With ``label_smoothing_factor > 0`` the Trainer pops ``labels`` from the batch before calling the model and
  smooths the loss itself, so the model cannot build its decoder inputs from them. `DataCollatorForSeq2Seq` given the
  model adds ``decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)`` to every batch, which
  `build_trainer` does.
* The model's ``forward`` takes ``**kwargs``, so the Trainer counts the label tokens of all the micro-batches of one
  optimizer step and passes that ``num_items_in_batch`` to the loss (to the model's own loss, or to the label
  smoother, which divides by it); the loss is then a mean over the tokens of the whole accumulated batch and is not
  divided again by ``gradient_accumulation_steps``. Gradient accumulation over k batches of B sentences gives the
  loss and gradient of one batch of kB sentences.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DataCollatorForSeq2Seq,
    EvalPrediction,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
)

from ..data import Pair, clean_pairs, read_jsonl, read_parallel_text, read_tsv, tokenize_pairs
from ..export.hub import SUMMARY_FILE, add_pipeline_support
from ..metrics import compute_chrf, exact_match, load_bleu_metric
from ..tokenization import check_tokenizer_matches_config

logger = logging.getLogger(__name__)


def read_pairs(
    paths: Sequence[str | os.PathLike[str]], *, src_lang: str | None = None, tgt_lang: str | None = None
) -> list[Pair]:
    """Read a parallel corpus with the loaders of `vanilla_transformer.data`.

    Args:
        paths: Two aligned plain-text files (source, then target); or one ``.tsv`` file (source in the first column,
            target in the second); or one ``.jsonl`` file whose objects have the keys `src_lang` and `tgt_lang`.
        src_lang: Source language code, the source key of a ``.jsonl`` file.
        tgt_lang: Target language code, the target key of a ``.jsonl`` file.

    Raises:
        ValueError: If the paths fit none of these forms.
    """
    if len(paths) == 2:
        return read_parallel_text(*paths)
    if len(paths) == 1:
        path = Path(paths[0])
        if path.suffix == ".tsv":
            return read_tsv(path)
        if path.suffix == ".jsonl":
            if src_lang is None or tgt_lang is None:
                raise ValueError(f"reading {path} needs its keys src_lang and tgt_lang, got {src_lang=}, {tgt_lang=}")
            return read_jsonl(path, src_lang, tgt_lang)
    raise ValueError(
        f"paths must be two plain-text files (source, target) or one .tsv or .jsonl file, "
        f"got paths={[str(path) for path in paths]}"
    )


def load_model_and_tokenizer(
    model_name_or_path: str | os.PathLike[str], *, revision: str | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a saved model and the tokenizer saved with it, from a directory or a Hub repository.

    Raises:
        ValueError: If there is no model or no tokenizer there, or they do not fit each other.
    """
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, revision=revision)
    except (OSError, ValueError) as error:
        raise ValueError(
            f"model_name_or_path={str(model_name_or_path)!r} has no loadable tokenizer; save it with "
            f"tokenizer.save_pretrained() next to the model ({error})"
        ) from error
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(model_name_or_path, revision=revision)
    except (OSError, ValueError) as error:
        raise ValueError(f"model_name_or_path={str(model_name_or_path)!r} has no loadable model ({error})") from error
    check_tokenizer_matches_config(tokenizer, model.config)
    return model, tokenizer


def training_arguments(output_dir: str | os.PathLike[str], **overrides: Any) -> Seq2SeqTrainingArguments:
    """`Seq2SeqTrainingArguments` for fine-tuning, evaluated by BLEU every `eval_steps` steps.

    The defaults: the paper's Adam (beta2 0.98, epsilon 1e-9) and label smoothing 0.1; linear warmup and decay of a
    fine-tuning learning rate (1e-4); evaluation by generation every 500 steps with the model's generation config,
    a checkpoint at each evaluation, and the checkpoint with the best BLEU loaded and kept at the end. Any
    `Seq2SeqTrainingArguments` field can be overridden by keyword; checkpoints are saved when the model is evaluated.

    Raises:
        ValueError: If an override is not a field of `Seq2SeqTrainingArguments`.
    """
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        learning_rate=1e-4,
        lr_scheduler_type="linear",
        warmup_steps=0.05,
        adam_beta1=0.9,
        adam_beta2=0.98,
        adam_epsilon=1e-9,
        label_smoothing_factor=0.1,
        per_device_train_batch_size=32,
        per_device_eval_batch_size=32,
        eval_strategy="steps",
        eval_steps=500,
        logging_steps=50,
        save_total_limit=2,
        predict_with_generate=True,
        load_best_model_at_end=True,
        metric_for_best_model="bleu",
        greater_is_better=True,
        report_to="none",
    )
    unknown = sorted(set(overrides) - set(Seq2SeqTrainingArguments.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown Seq2SeqTrainingArguments field(s) {unknown} in overrides")
    kwargs.update(overrides)
    kwargs.setdefault("save_strategy", kwargs["eval_strategy"])
    kwargs.setdefault("save_steps", kwargs["eval_steps"])
    return Seq2SeqTrainingArguments(**kwargs)


class TranslationMetrics:
    """`compute_metrics` for a `Seq2SeqTrainer` with ``predict_with_generate=True``.

    Decodes the generated and the reference token ids and returns sacreBLEU's ``bleu`` (through the package's
    `evaluate` module), ``chrf`` and ``exact_match``, all on a 0-100 scale. The sacreBLEU signatures of the last call
    are kept in `signatures`, since the Trainer's metrics are numbers only.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.bleu_metric = load_bleu_metric()
        self.signatures: dict[str, str] = {}

    def __call__(self, prediction: EvalPrediction) -> dict[str, float]:
        hypotheses = self.decode(prediction.predictions)
        references = self.decode(prediction.label_ids)
        bleu = self.bleu_metric.compute(predictions=hypotheses, references=references)
        chrf = compute_chrf(hypotheses, references)
        self.signatures = {"bleu": bleu["signature"], "chrf": chrf["signature"]}
        return {"bleu": bleu["score"], "chrf": chrf["score"], "exact_match": exact_match(hypotheses, references)}

    def decode(self, token_ids: np.ndarray) -> list[str]:
        """Texts of padded token ids; -100 (the padding of labels and of gathered predictions) is skipped."""
        token_ids = np.where(token_ids == -100, self.tokenizer.pad_token_id, token_ids)
        return self.tokenizer.batch_decode(token_ids, skip_special_tokens=True)


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_pairs: Sequence[Pair],
    eval_pairs: Sequence[Pair],
    args: Seq2SeqTrainingArguments,
    *,
    max_length: int | None = 256,
) -> Seq2SeqTrainer:
    """A `Seq2SeqTrainer` over tokenized pairs, its batches made by `DataCollatorForSeq2Seq` with the model.

    Args:
        model: The model to fine-tune, for example from `load_model_and_tokenizer`.
        tokenizer: Its tokenizer.
        train_pairs: Training pairs, cleaned with `clean_pairs`; pairs with a side longer than `max_length` tokens
            are dropped.
        eval_pairs: Evaluation pairs, cleaned of blank pairs but not filtered by length, so that BLEU covers them.
        args: Training arguments, for example from `training_arguments`.
        max_length: Maximum source and target length of training pairs, in tokens; ``None`` keeps all.

    Raises:
        ValueError: If no training or evaluation pair is left.
    """
    train_pairs, train_stats = clean_pairs(train_pairs, max_length=max_length, tokenizer=tokenizer)
    eval_pairs, _ = clean_pairs(eval_pairs)
    if not train_pairs:
        raise ValueError(f"no training pairs are left after cleaning ({train_stats})")
    if not eval_pairs:
        raise ValueError("eval_pairs holds no non-empty pair")
    return Seq2SeqTrainer(
        model=model,
        args=args,
        # With the model, the collator adds decoder_input_ids shifted from the labels: with label smoothing the
        # Trainer removes the labels before calling the model.
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        train_dataset=tokenize_pairs(train_pairs, tokenizer),
        eval_dataset=tokenize_pairs(eval_pairs, tokenizer),
        processing_class=tokenizer,
        compute_metrics=TranslationMetrics(tokenizer),
    )


@dataclass(frozen=True)
class FinetuneResult:
    """What `finetune` produced."""

    output_dir: Path
    """Where the best model, its tokenizer, generation config and `SUMMARY_FILE` were saved."""
    metrics: dict[str, float]
    """Evaluation metrics of the saved model, without the ``eval_`` prefix: ``bleu``, ``chrf``, ``loss``, ..."""
    summary: dict[str, Any]
    """The run summary written to ``output_dir / SUMMARY_FILE``."""
    log_history: list[dict[str, float]]
    """The Trainer's log: training losses and evaluation metrics, by step."""


def finetune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_pairs: Sequence[Pair],
    eval_pairs: Sequence[Pair],
    args: Seq2SeqTrainingArguments,
    *,
    max_length: int | None = 256,
    base_model: str | None = None,
    dataset: str | None = None,
    src_lang: str | None = None,
    tgt_lang: str | None = None,
    eval_split: str | None = None,
) -> FinetuneResult:
    """Fine-tune, then save the checkpoint with the best evaluation BLEU to ``args.output_dir``.

    The output directory then holds, next to the Trainer's ``checkpoint-*`` folders, a model directory like the one
    the main training job exports: the weights and code files, ``config.json`` (which also registers the
    translation pipelines, see `add_pipeline_support`), ``generation_config.json``, the tokenizer, and
    `SUMMARY_FILE`, the run summary that `vanilla_transformer.hub` turns into a model card.

    Args:
        model, tokenizer, train_pairs, eval_pairs, args, max_length: As for `build_trainer`.
        base_model: Name of the model fine-tuned, recorded in the summary.
        dataset, src_lang, tgt_lang, eval_split: Description of the data, recorded in the summary.

    Returns:
        The output directory, the final evaluation metrics, the summary and the Trainer's log.
    """
    # Seq2SeqTrainer's evaluation fills every unset field of the model's generation config with its default
    # (max_length=20 among them), which save_model would then write: the model is saved with the original instead.
    generation_config = copy.deepcopy(model.generation_config)
    trainer = build_trainer(model, tokenizer, train_pairs, eval_pairs, args, max_length=max_length)
    train_output = trainer.train()
    evaluation = trainer.evaluate()  # of the best checkpoint, loaded by load_best_model_at_end
    metrics = {key.removeprefix("eval_"): value for key, value in evaluation.items()}
    trainer.model.generation_config = generation_config
    trainer.save_model(args.output_dir)

    output_dir = Path(args.output_dir)
    signatures = trainer.compute_metrics.signatures
    summary = {
        "base_model": base_model,
        "dataset": dataset,
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "eval_split": eval_split,
        "train_pairs": len(trainer.train_dataset),
        "steps": trainer.state.global_step,
        "epochs": trainer.state.epoch,
        "train_hours": train_output.metrics["train_runtime"] / 3600,
        "bleu": metrics.get("bleu"),
        "signature": signatures.get("bleu"),
        "chrf": metrics.get("chrf"),
        "chrf_signature": signatures.get("chrf"),
        "exact_match": metrics.get("exact_match"),
        "recipe": {
            "method": "fine-tuning with transformers' Seq2SeqTrainer",
            "optimizer": f"{args.optim.value}, betas ({args.adam_beta1}, {args.adam_beta2}), eps {args.adam_epsilon}",
            "learning_rate": args.learning_rate,
            "lr_scheduler": args.lr_scheduler_type.value,
            "warmup_steps": args.warmup_steps,
            "label_smoothing": args.label_smoothing_factor,
            "sentences_per_step": args.train_batch_size * args.gradient_accumulation_steps * args.world_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "best_step": trainer.state.best_global_step,
        },
    }
    summary = {key: value for key, value in summary.items() if value is not None}
    (output_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    add_pipeline_support(output_dir)
    logger.info("saved the model with eval BLEU %.2f to %s", metrics.get("bleu", float("nan")), output_dir)
    return FinetuneResult(output_dir, metrics, summary, trainer.state.log_history)


__all__ = [
    "FinetuneResult",
    "TranslationMetrics",
    "build_trainer",
    "finetune",
    "load_model_and_tokenizer",
    "read_pairs",
    "training_arguments",
]
