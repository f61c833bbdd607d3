"""Training with the paper's recipe (section 5), on one CPU, one GPU or many processes through Accelerate.

The recipe, and where each piece lives:

* Data (5.1): a shared source/target BPE vocabulary (`vanilla_transformer.tokenization`), batches of similar-length
  pairs holding about 25,000 source and 25,000 target tokens per step (`data.TokenBatchSampler`, here
  ``max_tokens`` per micro-batch times ``grad_accum`` micro-batches times the number of processes).
* Optimizer (5.3): Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, and the learning rate of equation (3),
  `noam_learning_rate`: a linear warmup over 4,000 steps, then decay with the inverse square root of the step.
* Regularization (5.4): dropout (from the model configuration) and label smoothing of 0.1.
* Checkpoints (6.1): the final model averages the last 5 (base) or 20 (big) checkpoints; it translates with beam
  search, beam 4 and length penalty 0.6 (`vanilla_transformer.generation`).

The loss of an optimizer step is the sum of the label-smoothed cross-entropy of all its target tokens divided by
their number, over all micro-batches and processes, so that neither gradient accumulation nor the number of
processes changes it. A run can be interrupted and resumed (``resume=True``) with exactly the same result as an
uninterrupted one: checkpoints hold the model, the optimizer, the schedule, the position in the data and the random
number generator states of every process.

Entry points: `TrainingConfig` (every setting, with `TRAINING_PRESETS`), `parse_args` (the command line of
``vanilla-transformer train``), and `train`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from ..data import (
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    example_lengths,
    padding_fraction,
    tokenize_pairs,
)
from ..export.model_dir import write_training_summary
from ..modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
)
from ..tokenization import check_tokenizer_matches_config
from .checkpoints import (
    TrainingState,
    average_checkpoints,
    checkpoint_step,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from .evaluation import _best_validation, _evaluate, _select_on_valid, _test
from .options import TrainingConfig
from .preflight import check_training_pairs
from .results import _export, _training_summary
from .run_dir import inspect_run_dir, mark_run_started, prepare_run_dir
from .schedule import noam_schedule
from .setup import _prepare_tokenizer, build_model_config, load_splits
from .step import _to_device, accumulate_gradients
from .tracking import JsonlTracker, plot_metrics

logger = get_logger(__name__)

# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class TrainingProgress:
    """Where training stands. Saved in every checkpoint, so that a resumed run continues at the same batch."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epoch of the next training batch
    batch: int = 0  # index of this process's next training batch within its epoch
    seconds: float = 0.0  # wall time of the training loop so far (for --max-train-minutes)

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]
        self.seconds = state.get("seconds", 0.0)  # absent in checkpoints of version 0.1


def out_of_time(accelerator: Accelerator, progress: TrainingProgress, max_minutes: float | None) -> bool:
    """Whether the training loop has used up ``max_minutes``; all processes agree (they stop at the same step)."""
    if max_minutes is None:
        return False
    late = progress.seconds >= 60 * max_minutes
    if accelerator.num_processes == 1:
        return late
    return bool(accelerator.reduce(torch.tensor(float(late), device=accelerator.device), "max").item())


def _training_batches(
    sampler: TokenBatchSampler, examples: Sequence[dict], collate: TranslationCollator, progress: TrainingProgress
) -> Iterator[dict[str, torch.Tensor]]:
    """This process's training batches, from ``progress.epoch`` and ``progress.batch`` on, epoch after epoch.

    `progress` advances with every batch taken, so a checkpoint written after a step records where the next one
    starts.
    """
    while True:
        sampler.set_epoch(progress.epoch, start_batch=progress.batch)
        for indices in sampler:
            progress.batch += 1
            yield collate([examples[i] for i in indices])
        progress.epoch, progress.batch = progress.epoch + 1, 0


def gradient_accumulation_steps(config: TrainingConfig, num_processes: int) -> int:
    """``config.grad_accum`` if set, else the micro-batches per process that bring ``max_tokens`` times the number
    of processes closest to ``tokens_per_step`` (at least 1), else 1."""
    if config.grad_accum is not None:
        return config.grad_accum
    if config.tokens_per_step is not None:
        return max(1, round(config.tokens_per_step / (config.max_tokens * num_processes)))
    return 1


def train(config: TrainingConfig) -> dict[str, Any]:
    """Train a model, average its last checkpoints, export it and score it on the test set.

    Every process of an ``accelerate launch`` runs this. The run directory ``config.output_dir`` receives:
    ``training_config.json``, ``tokenizer/``, ``checkpoints/checkpoint-<step>/``, ``metrics.jsonl`` and
    ``metrics.png`` (the curves), ``model/`` (the averaged model, a Hugging Face model directory),
    ``test.<src_lang>``, ``test.<tgt_lang>`` and ``test.hyp.<tgt_lang>`` (the test set and its translations), and
    ``results.json``.

    Returns:
        The contents of ``results.json``: test BLEU (and its sacreBLEU signature), chrF and exact match, training
        throughput and padding share, and the checkpoints averaged.
    """
    started = time.perf_counter()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    run_dir = Path(config.output_dir)
    checkpoint_dir = run_dir / "checkpoints"
    resume_from = inspect_run_dir(config)
    jsonl = JsonlTracker(run_dir / "metrics.jsonl", start_step=checkpoint_step(resume_from) if resume_from else 0)
    extra_trackers = [name for name in config.report_to.split(",") if name]
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision, log_with=[jsonl, *extra_trackers], project_dir=str(run_dir)
    )
    set_seed(config.seed, device_specific=True)  # dropout differs between processes; DDP copies rank 0's weights

    # Data and tokenizer. The main process goes first: it downloads a Hugging Face dataset, the others read its cache.
    with accelerator.main_process_first():
        splits = load_splits(config)
    train_pairs, _ = clean_pairs(splits.train)
    check_training_pairs(config, splits.train, train_pairs)
    model_config = build_model_config(config)
    prepare_run_dir(accelerator, config, resume_from)  # (deletes an overwritten run only now: the new one is valid)
    tokenizer = _prepare_tokenizer(config, train_pairs, accelerator, run_dir / "tokenizer")
    check_tokenizer_matches_config(tokenizer, model_config)
    train_pairs, _ = clean_pairs(train_pairs, max_length=config.max_length, tokenizer=tokenizer)
    check_training_pairs(config, splits.train, train_pairs)
    train_examples = tokenize_pairs(train_pairs, tokenizer)
    valid_examples = tokenize_pairs(splits.valid, tokenizer)
    lengths = example_lengths(train_examples)
    sampler = TokenBatchSampler(
        lengths,
        config.max_tokens,
        seed=config.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    grad_accum = gradient_accumulation_steps(config, accelerator.num_processes)
    padding_share = padding_fraction(sampler.epoch_batches(0), lengths)
    collate = TranslationCollator(tokenizer.pad_token_id)

    # Model, optimizer (section 5.3), and what a checkpoint holds besides them.
    model = VanillaTransformerForConditionalGeneration(model_config)
    optimizer = torch.optim.Adam(model.parameters(), betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)
    scheduler = noam_schedule(optimizer, model_config.d_model, config.warmup_steps, config.lr_scale)
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    progress = TrainingProgress()
    # The scheduler is not `prepare`d: Accelerate would step it once per process for every optimizer step.
    state = TrainingState(accelerator, model, optimizer, scheduler, progress)  # what checkpoints hold, pickle-free
    if resume_from is not None:
        load_checkpoint(state, resume_from)
    mark_run_started(accelerator, config)
    accelerator.init_trackers("vanilla-transformer", config=asdict(config))

    tokens_per_step = config.max_tokens * grad_accum * accelerator.num_processes
    logger.info(
        f"{unwrapped.num_parameters():,} parameters; {len(train_examples):,} training pairs; "
        f"{accelerator.num_processes} process(es) x {grad_accum} micro-batch(es) x at most {config.max_tokens:,} "
        f"tokens = {tokens_per_step:,} tokens per step; {sampler.batches_per_replica:,} batches per process and "
        f"epoch; {padding_share:.1%} padding",
        main_process_only=True,
    )
    if (
        config.grad_accum is None
        and config.tokens_per_step
        and not 0.8 <= tokens_per_step / config.tokens_per_step <= 1.25
    ):
        logger.warning(
            f"{tokens_per_step:,} tokens per step is far from --tokens-per-step={config.tokens_per_step:,}: "
            f"choose --max-tokens so that it times the {accelerator.num_processes} process(es) divides it",
            main_process_only=True,
        )
    if resume_from is not None:
        logger.info(
            f"resumed from {resume_from} (epoch {progress.epoch}, batch {progress.batch})", main_process_only=True
        )

    keep_last = max(config.keep_checkpoints, config.average_checkpoints)
    batches = _training_batches(sampler, train_examples, collate, progress)
    window: dict[str, torch.Tensor] = {}  # statistics summed since the last log (tensors: no device sync per step)
    window_steps, window_grad_norm, window_start = 0, 0.0, time.perf_counter()
    train_seconds = train_tokens = 0.0
    bar = tqdm(total=config.max_steps, initial=progress.step, desc="training", disable=not accelerator.is_main_process)
    clock = time.perf_counter()
    with logging_redirect_tqdm():
        while progress.step < config.max_steps and not out_of_time(accelerator, progress, config.max_train_minutes):
            micro_batches = [_to_device(next(batches), accelerator.device) for _ in range(grad_accum)]
            stats = accumulate_gradients(accelerator, model, micro_batches, config.label_smoothing)
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
            learning_rate = scheduler.get_last_lr()[0]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if accelerator.optimizer_step_was_skipped:  # fp16 overflow: the loss scale drops, the step does not count
                continue
            scheduler.step()
            progress.step += 1
            bar.update(1)
            window = {name: window.get(name, 0) + value for name, value in stats.items()}
            window_steps, window_grad_norm = window_steps + 1, window_grad_norm + grad_norm

            if progress.step % config.log_every == 0:
                totals = dict(
                    zip(window, accelerator.reduce(torch.stack(list(window.values())), "sum").tolist(), strict=True)
                )
                seconds = time.perf_counter() - window_start
                train_seconds, train_tokens = train_seconds + seconds, train_tokens + totals["tokens"]
                logs = {
                    "train_loss": totals["loss"] / totals["target_tokens"],
                    "learning_rate": learning_rate,
                    "grad_norm": float(window_grad_norm) / window_steps,
                    "tokens_per_second": totals["tokens"] / seconds,
                    "padding_share": 1 - totals["tokens"] / totals["positions"],
                    "epoch": progress.epoch,
                }
                accelerator.log(logs, step=progress.step)
                bar.set_postfix(
                    loss=f"{logs['train_loss']:.3f}",
                    lr=f"{learning_rate:.2e}",
                    tok_s=f"{logs['tokens_per_second']:,.0f}",
                )
                window, window_steps, window_grad_norm = {}, 0, 0.0
                window_start = time.perf_counter()
            if progress.step % config.eval_every == 0 and valid_examples:
                _evaluate(
                    accelerator, unwrapped, tokenizer, splits.valid, valid_examples, config, collate, progress.step
                )
                window_start = time.perf_counter()
            progress.seconds, clock = progress.seconds + time.perf_counter() - clock, time.perf_counter()
            if progress.step % config.save_every == 0:
                save_checkpoint(state, checkpoint_dir, progress.step, keep_last)
                window_start = time.perf_counter()
    bar.close()
    if progress.step < config.max_steps:
        logger.info(
            f"stopped at step {progress.step} after --max-train-minutes={config.max_train_minutes}",
            main_process_only=True,
        )

    # Section 6.1: average the last checkpoints, then translate the test set with beam search.
    checkpoints = list_checkpoints(checkpoint_dir)
    if not checkpoints or checkpoint_step(checkpoints[-1]) != progress.step:
        save_checkpoint(state, checkpoint_dir, progress.step, keep_last)
        checkpoints = list_checkpoints(checkpoint_dir)
    averaged = checkpoints[-config.average_checkpoints :]
    results: dict[str, Any] = {
        "step": progress.step,
        "epochs": progress.epoch + progress.batch / sampler.batches_per_replica,
        "train_minutes": progress.seconds / 60,
        "train_tokens_per_second": train_tokens / train_seconds if train_seconds else None,
        "padding_share": padding_share,
        "train_pairs": len(train_examples),
        "num_processes": accelerator.num_processes,
        "tokens_per_step": tokens_per_step,
    }
    candidates = {"averaged": averaged, "last": checkpoints[-1:]}
    chosen = "averaged"
    if config.select_on_valid and len(averaged) > 1 and splits.valid:
        results.update(_select_on_valid(accelerator, unwrapped, tokenizer, splits, candidates, config))
        chosen = results["selected"]
    load_weights(unwrapped, average_checkpoints(candidates[chosen]))
    results["averaged_checkpoints"] = [path.name for path in candidates[chosen]]
    logger.info(f"final model: the average of {', '.join(results['averaged_checkpoints'])}", main_process_only=True)
    if accelerator.is_main_process:
        _export(unwrapped, tokenizer, run_dir / "model", config)
    if splits.test:
        results.update(_test(accelerator, unwrapped, tokenizer, splits.test, config))
        if "selected" in results:
            results[f"test_bleu_{chosen}"] = results["test_bleu"]
    if accelerator.is_main_process:
        results.update(_best_validation(run_dir / "metrics.jsonl"))
    results["seconds"] = time.perf_counter() - started
    accelerator.log({name: value for name, value in results.items() if isinstance(value, float)}, step=progress.step)
    if accelerator.is_main_process:
        (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        write_training_summary(run_dir / "model", _training_summary(config, results))
        plot_metrics(run_dir / "metrics.jsonl", run_dir / "metrics.png", required=False)
    # The DDP wrapper's C++ reducer holds the gloo/NCCL process group. Were it the group's last holder, the group
    # would be destroyed as train() returns, with the GIL held, and wait for its worker threads, which may need the
    # GIL to free the tensors of a finished collective: a deadlock (pytorch/pytorch#56297), seen here in 8 of 30
    # two-process runs on a loaded CPU (0 of 30 since). So the wrapper goes first; destroy_process_group (in
    # end_training) then drops the group through its Python binding, which releases the GIL while the threads finish.
    del model, optimizer, state
    accelerator.free_memory()
    accelerator.end_training()
    return results
