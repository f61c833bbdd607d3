"""Fine-tune a saved model on parallel data with transformers' `Seq2SeqTrainer`.

The Trainer path, next to the package's own training loop: label smoothing, gradient accumulation, evaluation by
generating translations and scoring them with the package's BLEU `evaluate` module, and keeping the checkpoint with
the best BLEU::

    model, tokenizer = load_model_dir("runs/base/model")               # a directory or a Hub id
    args = training_arguments("runs/finetuned", max_steps=2000, eval_steps=200)
    result = finetune(model, tokenizer, train_pairs, eval_pairs, args)
    result.metrics["bleu"], result.output_dir                         # the best checkpoint, saved for `from_pretrained`

A model with a LoRA adapter (`vanilla_transformer.training.lora.add_lora`) trains the adapter only, and the output
directory is an adapter folder (`vanilla_transformer.export.hub.save_adapter_with_card`); ``merge=True`` also writes
the merged, plain model directory to ``<output_dir>/merged``::

    model = add_lora(model, r=8, alpha=16, target_modules=["q_proj", "v_proj"])
    result = finetune(model, tokenizer, train_pairs, eval_pairs, args, merge=True)
    result.output_dir, result.merged_dir                                # the adapter folder, the merged model

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
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    DataCollatorForSeq2Seq,
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    TrainerCallback,
)
from transformers.integrations import get_available_reporting_integrations
from transformers.trainer_utils import get_last_checkpoint

from ..atomic import check_output_dir, follow_umask, write_directory, write_file
from ..constants import AUTO_METRIC, FINETUNE_RANGES, FINETUNE_SETTINGS, SEARCH_DEFAULTS
from ..data import Pair, clean_pairs, tokenize_pairs
from ..export.hub import save_adapter_with_card
from ..metrics import bleu_applies, selection_metric
from ..model_dir import is_peft_model, is_saved_model_dir, lora_settings, save_model_dir
from ..model_summary import build_summary
from ..serving.search import check_search_settings
from .evaluation import translate_and_score
from .interrupt import StopAtInterrupt, checkpoint_on_interrupt
from .progress import Interrupted

logger = logging.getLogger(__name__)

FINETUNE_DEFAULTS: dict[str, Any] = {**FINETUNE_SETTINGS, "dataloader_pin_memory": torch.cuda.is_available()}
"""`FINETUNE_SETTINGS`, and memory pinned only for a GPU."""


def training_arguments(output_dir: str | os.PathLike[str], **overrides: Any) -> Seq2SeqTrainingArguments:
    """`Seq2SeqTrainingArguments` for fine-tuning: `FINETUNE_DEFAULTS`, with any field overridden by keyword.

    Checkpoints are saved when the model is evaluated (``save_strategy`` and ``save_steps`` default to
    ``eval_strategy`` and ``eval_steps``).

    Raises:
        ValueError: If an override is not a field of `Seq2SeqTrainingArguments`.
    """
    unknown = sorted(set(overrides) - set(Seq2SeqTrainingArguments.__dataclass_fields__))
    if unknown:
        raise ValueError(f"unknown Seq2SeqTrainingArguments field(s) {unknown} in overrides")
    kwargs = {**FINETUNE_DEFAULTS, "output_dir": str(output_dir), **overrides}
    kwargs.setdefault("save_strategy", kwargs["eval_strategy"])
    kwargs.setdefault("save_steps", kwargs["eval_steps"])
    return Seq2SeqTrainingArguments(**kwargs)


class TranslationTrainer(Seq2SeqTrainer):
    """A `Seq2SeqTrainer` that evaluates as the package does: the validation loss, then the evaluation pairs
    translated with the package's one beam search (`vanilla_transformer.serving.search.translate`, the paper's GNMT
    penalty and input + 50 tokens, not ``generate()`` with labels), scored with chrF, exact match and, where it
    applies (`bleu_applies`), sacreBLEU's BLEU. The signatures of the last scores are kept in `signatures`."""

    def __init__(self, *args: Any, eval_pairs: Sequence[Pair], search: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.eval_pairs, self.search = list(eval_pairs), dict(search)
        self.bleu = bleu_applies([target for _, target in self.eval_pairs])
        self.signatures: dict[str, str] = {}

    def evaluation_loop(
        self, dataloader, description, prediction_loss_only=None, ignore_keys=None, metric_key_prefix="eval"
    ):
        output = super().evaluation_loop(dataloader, description, True, ignore_keys, metric_key_prefix)
        output.metrics.update({f"{metric_key_prefix}_{name}": value for name, value in self.scores().items()})
        return output

    def _issue_warnings_after_load(self, load_result: Any) -> None:
        """The Trainer's warning about missing keys after loading the best checkpoint, without the tied weights
        (the paper's three-way tied embeddings), which a checkpoint holds once and the model shares: nothing is
        missing, and nothing a user could act on."""
        kept = {name for name, _ in self.model.named_parameters()}  # one name per tensor: tied copies left out
        missing = [key for key in load_result.missing_keys if key in kept]
        super()._issue_warnings_after_load(load_result._replace(missing_keys=missing))

    def scores(self) -> dict[str, float]:
        """``chrf``, ``exact_match`` and (where it applies) ``bleu`` of the evaluation pairs' translations, made and
        scored as training's evaluation does (`translate_and_score`: process r translating pairs r, r + P, ...)."""
        model = self.accelerator.unwrap_model(self.model)
        _, scores = translate_and_score(
            self.accelerator, model, self.processing_class, self.eval_pairs, self.search, bleu=self.bleu,
            chrf_signature=True,
        )  # fmt: skip
        self.signatures = {"chrf": scores.pop("chrf_signature")}
        if "bleu_signature" in scores:
            self.signatures["bleu"] = scores.pop("bleu_signature")
        return scores


def build_trainer(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_pairs: Sequence[Pair],
    eval_pairs: Sequence[Pair],
    args: Seq2SeqTrainingArguments,
    *,
    max_length: int | None = 256,
    callbacks: Sequence[TrainerCallback] = (),
    search: Mapping[str, Any] | None = None,
) -> TranslationTrainer:
    """A `TranslationTrainer` over tokenized pairs, its batches made by `DataCollatorForSeq2Seq` with the model.

    Args:
        model: The model to fine-tune, for example from `vanilla_transformer.model_dir.load_model_dir`.
        tokenizer: Its tokenizer.
        train_pairs: Training pairs, cleaned with `clean_pairs`; pairs with a side longer than `max_length` tokens
            are dropped.
        eval_pairs: Evaluation pairs, cleaned of blank pairs but not filtered by length, so that BLEU covers them.
        args: Training arguments, for example from `training_arguments`.
        max_length: Maximum source and target length of training pairs, in tokens; ``None`` keeps all.
        search: The search evaluation translates with: ``num_beams``, ``length_penalty``, ``max_length_offset``
            (default `SEARCH_DEFAULTS`, the paper's).

    Raises:
        ValueError: If no training or evaluation pair is left, or ``args.metric_for_best_model`` is ``bleu`` where
            BLEU is 0 by construction.
    """
    train_pairs, train_stats = clean_pairs(train_pairs, max_length=max_length, tokenizer=tokenizer)
    eval_pairs, _ = clean_pairs(eval_pairs)
    if not train_pairs:
        raise ValueError(f"no training pairs are left after cleaning ({train_stats})")
    if not eval_pairs:
        raise ValueError("eval_pairs holds no non-empty pair")
    choose_metric(args, [target for _, target in eval_pairs])
    search = {**SEARCH_DEFAULTS, **(search or {})}
    check_search_settings(required=True, **search)
    return TranslationTrainer(
        model=model,
        args=args,
        # With the model, the collator adds decoder_input_ids shifted from the labels: with label smoothing the
        # Trainer removes the labels before calling the model.
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        train_dataset=tokenize_pairs(train_pairs, tokenizer),
        eval_dataset=tokenize_pairs(eval_pairs, tokenizer),
        processing_class=tokenizer,
        callbacks=list(callbacks),
        eval_pairs=eval_pairs,
        search=search,
    )


def choose_metric(args: Seq2SeqTrainingArguments, references: Sequence[str]) -> str:
    """The score that keeps the best checkpoint: ``args.metric_for_best_model``, `AUTO_METRIC` decided by the
    references (`selection_metric`), written back into `args`.

    Raises:
        ValueError: If it is ``bleu`` (or ``eval_bleu``) and BLEU is 0 by construction on the references.
    """
    metric = args.metric_for_best_model or "loss"
    if metric == AUTO_METRIC:
        metric = args.metric_for_best_model = selection_metric(references)
    if metric.removeprefix("eval_") == "bleu" and not bleu_applies(references):
        raise ValueError(
            "metric_for_best_model=bleu, but BLEU is 0 by construction on these evaluation pairs (no reference has 4 "
            "words): choose exact_match or chrf (--metric-for-best-model exact_match)"
        )
    return metric


MERGED_DIR = "merged"
"""The subdirectory of a LoRA fine-tune's output directory that ``merge=True`` writes the merged model to."""

FINETUNE_MARKER = ".vanilla-transformer-finetune"
"""The file marking an output directory that `claim_output_dir` created or claimed while it was empty: a fine-tuning
run writes there again (a rerun, ``--resume-from-checkpoint``); any other non-empty folder is refused."""

METRICS = ("bleu", "chrf", "exact_match")
"""The scores the evaluation computes (``bleu`` where it applies); it also gives ``loss``."""


def check_trainer_values(values: Mapping[str, Any], spelling: Callable[[str], str] | None = None) -> None:
    """The one check of the Trainer's numeric arguments (`FINETUNE_RANGES`), by field, however they were given: a
    ValueError naming the Trainer's option (``--learning_rate``) for the first value out of its range. A learning rate
    of inf trains to NaN weights, ``gradient_accumulation_steps=0`` and ``num_train_epochs=inf`` fail deep inside the
    Trainer, a label smoothing of 1.5 trains on a loss that is no longer one. `spelling` names a field's option as
    the user typed it (default: ``--name``)."""
    for name, declared in FINETUNE_RANGES.items():
        value = values.get(name)
        if value is not None and not (name == "max_steps" and value == -1):
            declared.check(spelling(name) if spelling else f"--{name}", value)


def check_finetune_arguments(args: Seq2SeqTrainingArguments, *, merge: bool = False) -> None:
    """Refuse, before any model or data is read, what the Trainer, its callbacks or the final save would refuse only
    later: an output directory that is a link, a file, or a non-empty folder this program did not write (nor a
    Trainer's checkpoints to resume), or that holds links; with `merge`, a merged model folder that could not be
    written; a ``--metric-for-best-model`` the evaluation does not produce;
    a ``--report-to`` integration that is not installed; a ``--resume-from-checkpoint`` folder that is missing; a
    numeric argument out of its range (`check_trainer_values`). A ValueError naming the option."""
    output = Path(args.output_dir)
    check_output_dir(output, "--output-dir", replaceable=lambda folder: True)  # a link, a file, an unwritable place
    if output.is_dir():
        entries = list(output.iterdir())
        ours = (output / FINETUNE_MARKER).is_file() or (
            args.resume_from_checkpoint is not None and any(p.name.startswith("checkpoint-") for p in entries)
        )
        if entries and not ours:
            raise ValueError(
                f"--output-dir={output} is not empty and was not written by finetune: its files would be overwritten "
                "(the model, README.md, the tokenizer); choose a new or empty folder"
            )
        for path in entries:
            if path.is_symlink():
                raise ValueError(
                    f"{path} is a symbolic link (to {os.readlink(path)}): finetune never writes through a link; "
                    "remove it, or choose a new --output-dir"
                )
    if merge:
        check_output_dir(output / MERGED_DIR, "the merged model directory", replaceable=is_saved_model_dir)
    metric = (args.metric_for_best_model or "loss").removeprefix("eval_")
    if metric not in (*METRICS, "loss", AUTO_METRIC):
        raise ValueError(
            f"--metric-for-best-model={args.metric_for_best_model}: the evaluation gives {', '.join(METRICS)} and loss"
        )
    available = set(get_available_reporting_integrations())
    missing = [name for name in args.report_to or [] if name not in ("none", "all") and name not in available]
    if missing:
        raise ValueError(f"--report-to {','.join(missing)}: not installed here (pip install {' '.join(missing)})")
    resume = args.resume_from_checkpoint
    if isinstance(resume, str) and not Path(resume).is_dir():
        raise ValueError(f"--resume-from-checkpoint={resume}: no such checkpoint folder")
    check_trainer_values({name: getattr(args, name) for name in FINETUNE_RANGES})


def claim_output_dir(output_dir: str | os.PathLike[str]) -> None:
    """Create (or claim, while empty) the output directory, with the marker `FINETUNE_MARKER`."""
    output = Path(output_dir)
    output.mkdir(parents=True, exist_ok=True)
    if not (output / FINETUNE_MARKER).is_file():
        write_file(output / FINETUNE_MARKER, "")


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
    merged_dir: Path | None = None
    """With a LoRA adapter and ``merge=True``: the merged model directory, ``output_dir / MERGED_DIR``."""


def finetune(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train_pairs: Sequence[Pair],
    eval_pairs: Sequence[Pair],
    args: Seq2SeqTrainingArguments,
    *,
    max_length: int | None = 256,
    description: Mapping[str, Any] | None = None,
    resume_from_checkpoint: str | bool | None = None,
    callbacks: Sequence[TrainerCallback] = (),
    merge: bool = False,
    search: Mapping[str, Any] | None = None,
) -> FinetuneResult:
    """Fine-tune, then save the checkpoint with the best evaluation BLEU to ``args.output_dir``.

    The output directory then holds, next to the Trainer's ``checkpoint-*`` folders, a model directory written by
    `save_model_dir` like the one the main training job exports, with `SUMMARY_FILE`, the run summary
    (`vanilla_transformer.model_summary`) that `vanilla_transformer.export.hub` turns into a model card. A model
    with a LoRA adapter (a peft ``PeftModel``) trains its adapter only and is saved as an adapter folder, with its
    card, by `save_adapter_with_card`.

    Args:
        model, tokenizer, train_pairs, eval_pairs, args, max_length, callbacks, search: As for `build_trainer`.
        description: Recorded in the summary: ``base_model`` (the model fine-tuned), ``dataset`` (a Hub id),
            ``dataset_name``, ``dataset_config``, ``src_lang``, ``tgt_lang``, ``eval_split``, or any other field of
            `vanilla_transformer.model_summary.SUMMARY_FIELDS`; checked before training.
        resume_from_checkpoint: A checkpoint folder to continue from, or True for the last one in
            ``args.output_dir`` (default: ``args.resume_from_checkpoint``).
        merge: With a LoRA adapter, also write the merged model (``merge_and_unload``) as a plain model directory
            to ``output_dir / MERGED_DIR``, beside the adapter folder.

    Returns:
        The output directory, the final evaluation metrics, the summary and the Trainer's log.

    Raises:
        ValueError: If `merge` is set for a model without an adapter, or `description` has a value of the wrong type.
        TypeError: If `description` has a key that is not a summary field.
        Interrupted: On Ctrl-C: the Trainer saved a checkpoint at the end of its step (a second Ctrl-C stops at
            once, keeping the last one written); ``resume_from_checkpoint=True`` continues from it.
    """
    description = build_summary(**(description or {}))  # before training, not after it
    if merge and not is_peft_model(model):
        raise ValueError("merge=True merges a LoRA adapter: give a model with one (add_lora)")
    output_dir = Path(args.output_dir)
    merged_dir = output_dir / MERGED_DIR if merge else None
    if merged_dir is not None:  # before training, not after it
        check_output_dir(merged_dir, "the merged model directory", replaceable=is_saved_model_dir)
    # Seq2SeqTrainer's evaluation fills every unset field of the model's generation config with its default
    # (max_length=20 among them), which saving would then write: the model is saved with the original instead.
    generation_config = copy.deepcopy(model.generation_config)
    trainer = build_trainer(
        model, tokenizer, train_pairs, eval_pairs, args, max_length=max_length, callbacks=callbacks, search=search
    )
    if resume_from_checkpoint is None:
        resume_from_checkpoint = args.resume_from_checkpoint
    stop = StopAtInterrupt()
    trainer.add_callback(stop)
    try:
        with checkpoint_on_interrupt(stop):  # Ctrl-C: a checkpoint at the end of the step, then Interrupted
            train_output = trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    except KeyboardInterrupt as interrupt:
        raise _interrupted(trainer, output_dir) from interrupt
    if stop.requested:
        raise _interrupted(trainer, output_dir)
    try:
        evaluation = trainer.evaluate()  # of the best checkpoint, loaded by load_best_model_at_end
        metrics = {key.removeprefix("eval_"): value for key, value in evaluation.items()}
        summary = _summary(trainer, train_output.metrics, metrics, description)
    except (ValueError, RuntimeError, KeyError, TypeError) as error:  # the trained weights are not lost with it
        if trainer.is_world_process_zero():
            _save(trainer.model, tokenizer, output_dir, None, generation_config=generation_config, summary=None)
        first = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(
            f"the final evaluation failed ({type(error).__name__}: {first}); the trained model is saved in "
            f"{output_dir}, without its scores"
        ) from error
    if trainer.is_world_process_zero():
        _save(trainer.model, tokenizer, output_dir, merged_dir, generation_config=generation_config, summary=summary)
    metric = args.metric_for_best_model.removeprefix("eval_")
    logger.info("saved the model with eval %s %.4g to %s", metric, metrics.get(metric, float("nan")), output_dir)
    return FinetuneResult(output_dir, metrics, summary, trainer.state.log_history, merged_dir)


def _interrupted(trainer: Seq2SeqTrainer, output_dir: Path) -> Interrupted:
    """Where a fine-tuning interrupted with Ctrl-C stopped: its step and its last checkpoint."""
    last = get_last_checkpoint(output_dir) if output_dir.is_dir() else None
    step = int(Path(last).name.rpartition("-")[2]) if last else None
    return Interrupted(trainer.state.global_step, Path(last).name if last else None, step)


def _save(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    output_dir: Path,
    merged_dir: Path | None,
    *,
    generation_config: GenerationConfig,
    summary: dict[str, Any] | None,
) -> None:
    """A model directory, or an adapter folder and, with `merged_dir`, the merged model directory; the files of
    `output_dir`, the Trainer's checkpoints too, follow the umask (`follow_umask`)."""
    if not is_peft_model(model):
        save_model_dir(model, tokenizer, output_dir, generation_config=generation_config, summary=summary)
        follow_umask(output_dir)
        return
    save_adapter_with_card(model, tokenizer, output_dir, summary=summary)
    follow_umask(output_dir)
    if merged_dir is not None:
        merged = model.merge_and_unload()  # the base model, its weights W + (alpha / r) B A; no peft modules left
        write_directory(  # whole or not at all: a rerun replaces an earlier merge, never another folder
            merged_dir,
            lambda folder: save_model_dir(
                merged, tokenizer, folder, generation_config=generation_config, summary=summary
            ),
            replaceable=is_saved_model_dir,
            what="the merged model directory",
        )
        logger.info("saved the merged model to %s", merged_dir)


def _warmup(warmup_steps: float) -> dict[str, float]:
    """The warmup under its own name: below 1 the Trainer reads ``warmup_steps`` as a fraction of all steps, which
    the card names ``warmup_ratio``; from 1 on, a step count, ``warmup_steps``."""
    return {"warmup_ratio": warmup_steps} if 0 < warmup_steps < 1 else {"warmup_steps": int(warmup_steps)}


def _summary(
    trainer: Seq2SeqTrainer, train_metrics: Mapping[str, float], metrics: Mapping[str, float], description: Mapping
) -> dict[str, Any]:
    """The fine-tuning run's figures, `description` first (`vanilla_transformer.model_summary.build_summary`)."""
    args, signatures = trainer.args, trainer.signatures
    summary = build_summary(**description)
    measured = build_summary(
        train_pairs=len(trainer.train_dataset),
        steps=trainer.state.global_step,
        epochs=trainer.state.epoch,
        train_hours=train_metrics["train_runtime"] / 3600,
        num_processes=args.world_size,
        bleu=metrics.get("bleu"),
        signature=signatures.get("bleu"),
        chrf=metrics.get("chrf"),
        chrf_signature=signatures.get("chrf"),
        exact_match=metrics.get("exact_match"),
        recipe={
            "method": "fine-tuning with transformers' Seq2SeqTrainer",
            "optimizer": f"{args.optim.value}, betas ({args.adam_beta1}, {args.adam_beta2}), eps {args.adam_epsilon}",
            "learning_rate": args.learning_rate,
            "lr_scheduler": args.lr_scheduler_type.value,
            **_warmup(args.warmup_steps),
            "label_smoothing": args.label_smoothing_factor,
            "sentences_per_step": args.train_batch_size * args.gradient_accumulation_steps * args.world_size,
            "gradient_accumulation_steps": args.gradient_accumulation_steps,
            "best_step": trainer.state.best_global_step,
            "selected by": f"evaluation {args.metric_for_best_model.removeprefix('eval_')}",
            "evaluation search": ", ".join(f"{key} {value}" for key, value in trainer.search.items()),
        },
    )
    summary.update(measured)  # a field of both keeps the description's place, as in {**description, **measured}
    if is_peft_model(trainer.model):
        summary["recipe"]["method"] = "LoRA fine-tuning (peft) with transformers' Seq2SeqTrainer"
        summary["recipe"].update(lora_settings(trainer.model))
    return summary


__all__ = [
    "FINETUNE_DEFAULTS",
    "FINETUNE_MARKER",
    "MERGED_DIR",
    "check_finetune_arguments",
    "check_trainer_values",
    "claim_output_dir",
    "FinetuneResult",
    "AUTO_METRIC",
    "SEARCH_DEFAULTS",
    "TranslationTrainer",
    "choose_metric",
    "build_trainer",
    "finetune",
    "training_arguments",
]
