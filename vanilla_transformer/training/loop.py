"""Training with the paper's recipe (section 5), on one CPU, one GPU or many processes through Accelerate.

The recipe, and where each piece lives:

* Data (5.1): a shared source/target BPE vocabulary (`vanilla_transformer.tokenization`), batches of similar-length
  pairs holding about 25,000 source and 25,000 target tokens per step (`data.TokenBatchSampler`, here
  ``max_tokens`` per micro-batch times ``grad_accum`` micro-batches times the number of processes).
* Optimizer (5.3): Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, and the learning rate of equation (3),
  `noam_learning_rate`: a linear warmup over 4,000 steps, then decay with the inverse square root of the step.
* Regularization (5.4): dropout (from the model configuration) and label smoothing of 0.1.
* Checkpoints (6.1): the final model averages the last 5 (base) or 20 (big) checkpoints; it translates with beam
  search, beam 4 and length penalty 0.6 (`vanilla_transformer.translation`).

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
import os
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.logging import get_logger
from accelerate.utils import set_seed
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from ..atomic import write_directory, write_file
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data import TokenBatchSampler
from ..data.cache import TokenCorpus
from ..environment import run_environment
from ..model_dir import is_saved_model_dir, write_training_summary
from ..modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
)
from .checkpoints import (
    TrainingState,
    average_checkpoints,
    checkpoint_step,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from .evaluation import Evaluator, best_validation
from .options import TRAINING_CONFIG_NAME, TrainingConfig, micro_batch_plan
from .preflight import auto_dynamo_backend, auto_precision, cpu_flags, launch_mismatch, slow_bf16
from .results import export_model, training_summary
from .run_dir import inspect_run_dir, lock_run_dir, mark_run_started, prepare_run_dir
from .schedule import noam_schedule
from .setup import RunData, build_model_config, prepare_data
from .step import (
    TrainStep,
    build_adam,
    compile_count,
    compiled_loss,
    compiling,
    prefer_dynamic_shapes,
    to_device,
)
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


# Processes agree on the time budget every this many steps: agreeing is a collective and a host-device sync.
AGREE_ON_TIME_EVERY = 10


def out_of_time(accelerator: Accelerator, progress: TrainingProgress, max_minutes: float | None) -> bool:
    """Whether the training loop has used up ``max_minutes``. One process reads its clock before every step; several
    agree (all stop at the same step) every `AGREE_ON_TIME_EVERY` steps, so they may overrun by fewer steps than that."""
    if max_minutes is None:
        return False
    late = progress.seconds >= 60 * max_minutes
    if accelerator.num_processes == 1:
        return late
    if progress.step % AGREE_ON_TIME_EVERY != 0:
        return False
    return bool(accelerator.reduce(torch.tensor(float(late), device=accelerator.device), "max").item())


def _training_batches(
    sampler: TokenBatchSampler, corpus: TokenCorpus, pad_token_id: int, progress: TrainingProgress
) -> Iterator[dict[str, torch.Tensor]]:
    """This process's training batches, from ``progress.epoch`` and ``progress.batch`` on, epoch after epoch.

    `progress` advances with every batch taken, so a checkpoint written after a step records where the next one
    starts.
    """
    while True:
        sampler.set_epoch(progress.epoch, start_batch=progress.batch)
        for indices in sampler:
            progress.batch += 1
            yield corpus.collate(indices, pad_token_id)
        progress.epoch, progress.batch = progress.epoch + 1, 0


def gradient_accumulation_steps(config: TrainingConfig, num_processes: int) -> int:
    """The micro-batches per step and process of `micro_batch_plan`."""
    return micro_batch_plan(config, num_processes)[1]


@dataclass
class _Run:
    """A started run: its settings and model configuration (built once), its directory, the Accelerator, and the
    checkpoint it resumes from."""

    config: TrainingConfig
    model_config: VanillaTransformerConfig
    accelerator: Accelerator
    run_dir: Path
    resume_from: Path | None

    @property
    def checkpoint_dir(self) -> Path:
        return self.run_dir / "checkpoints"


@dataclass
class _Trainer:
    """What the training loop updates, and how it batches."""

    model: Any  # as prepared by the Accelerator (DDP-wrapped with several processes, compiled if asked)
    unwrapped: VanillaTransformerForConditionalGeneration
    step: TrainStep
    optimizer: Any
    scheduler: torch.optim.lr_scheduler.LambdaLR
    progress: TrainingProgress
    state: TrainingState  # what checkpoints hold, pickle-free
    sampler: TokenBatchSampler
    grad_accum: int
    evaluator: Evaluator  # scores `unwrapped`


def _start_run(config: TrainingConfig) -> _Run:
    """Check the run directory (nothing is written yet), build the model configuration, start the Accelerator and
    the JSONL log (warning when it runs another number of processes than the launch asked for), seed."""
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    run_dir = Path(config.output_dir)
    resume_from = inspect_run_dir(config)
    jsonl = JsonlTracker(run_dir / "metrics.jsonl", start_step=checkpoint_step(resume_from) if resume_from else 0)
    extra_trackers = [name for name in config.report_to.split(",") if name]
    # Without --mixed-precision, Accelerate's own sources decide: accelerate launch --mixed_precision, the accelerate
    # config file, ACCELERATE_MIXED_PRECISION. Passing mixed_precision="no" here would override all of them.
    # The same for compiling: accelerate launch --dynamo_backend, the config file, ACCELERATE_DYNAMO_BACKEND.
    precision = config.mixed_precision
    if precision == "auto":
        device = PartialState().device  # (the Accelerator below shares this state)
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        precision = auto_precision(device.type, cpu_flags(), cuda_bf16)
    backend = config.dynamo_backend
    if backend == "auto":
        given_precision = precision or os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        backend = auto_dynamo_backend(PartialState().device.type, given_precision, cpu_flags())
    chosen = {"mixed_precision": precision, "dynamo_backend": backend}
    chosen = {name: value for name, value in chosen.items() if value is not None}
    accelerator = Accelerator(log_with=[jsonl, *extra_trackers], project_dir=str(run_dir), **chosen)
    set_seed(config.seed, device_specific=True)  # dropout differs between processes; DDP copies rank 0's weights
    slow = slow_bf16(accelerator.device.type, accelerator.mixed_precision, cpu_flags())
    for problem in (
        launch_mismatch(accelerator.num_processes),
        slow and f"{slow}; pass --mixed-precision auto (or no) to train in fp32",
    ):
        if problem:
            logger.warning(problem, main_process_only=True)
    return _Run(config, build_model_config(config), accelerator, run_dir, resume_from)


def _prepare_data(run: _Run) -> RunData:
    """The run's data (`prepare_data`); then the run directory is made ready (an overwritten run is deleted only
    now, as the new one's data passed its checks) and receives the tokenizer."""
    config, accelerator = run.config, run.accelerator
    tokenizer_dir = run.run_dir / "tokenizer"
    resumed = config.resume and not config.overwrite and (run.run_dir / TRAINING_CONFIG_NAME).is_file()
    data = prepare_data(config, accelerator, run.model_config, tokenizer_dir if resumed else None)
    prepare_run_dir(accelerator, config, run.resume_from)
    if accelerator.is_main_process and not tokenizer_dir.is_dir():
        write_directory(tokenizer_dir, data.tokenizer.save_pretrained, what="the run's tokenizer folder")
    accelerator.wait_for_everyone()
    return data


def _build_trainer(run: _Run, data: RunData) -> _Trainer:
    """The model, the optimizer (section 5.3) and its schedule, the batches; resumed from a checkpoint if any."""
    config, accelerator = run.config, run.accelerator
    max_tokens, grad_accum = micro_batch_plan(config, accelerator.num_processes)
    sampler = TokenBatchSampler(
        data.train.lengths, max_tokens, seed=config.seed, num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )  # fmt: skip
    model = VanillaTransformerForConditionalGeneration(run.model_config)
    if config.attn_implementation is not None:
        model.set_attn_implementation(config.attn_implementation)
    optimizer = build_adam(model, config, accelerator.device.type)
    scheduler = noam_schedule(optimizer, model.config.d_model, config.warmup_steps, config.lr_scale)
    prefer_dynamic_shapes(accelerator)
    model, optimizer = accelerator.prepare(model, optimizer)  # compiles the model if the dynamo plugin is on
    progress = TrainingProgress()
    # The scheduler is not `prepare`d: Accelerate would step it once per process for every optimizer step.
    state = TrainingState(accelerator, model, optimizer, scheduler, progress)
    if run.resume_from is not None:
        load_checkpoint(state, run.resume_from)
    mark_run_started(accelerator, config)
    accelerator.init_trackers("vanilla-transformer", config=asdict(config))
    unwrapped = accelerator.unwrap_model(model, keep_torch_compile=False)  # evaluation runs eagerly
    evaluator = Evaluator(accelerator, unwrapped, data, config)
    step = TrainStep(
        accelerator,
        model,
        optimizer,
        scheduler,
        config.label_smoothing,
        config.max_grad_norm,
        compiled_loss(accelerator),
    )
    trainer = _Trainer(model, unwrapped, step, optimizer, scheduler, progress, state, sampler, grad_accum, evaluator)
    tokens_per_step = max_tokens * grad_accum * accelerator.num_processes
    auto = " (--mixed-precision auto: bf16 only where native)" if config.mixed_precision == "auto" else ""
    logger.info(
        f"{trainer.unwrapped.num_parameters():,} parameters; {len(data.train):,} training pairs; "
        f"{accelerator.num_processes} process(es) x {grad_accum} micro-batch(es) x at most {max_tokens:,} "
        f"tokens = {tokens_per_step:,} tokens per step; {sampler.batches_per_replica:,} batches per process and "
        f"epoch; {sampler.padding_fraction():.2%} padding; precision {accelerator.mixed_precision}{auto}; "
        f"{_compile_description(accelerator)}",
        main_process_only=True,
    )
    if config.grad_accum is None and config.tokens_per_step and tokens_per_step > 1.1 * config.tokens_per_step:
        logger.warning(
            f"{tokens_per_step:,} tokens per step exceeds --tokens-per-step={config.tokens_per_step:,}: the "
            f"{accelerator.num_processes} processes' share is smaller than the longest pair --max-length allows",
            main_process_only=True,
        )
    if run.resume_from is not None:
        logger.info(
            f"resumed from {run.resume_from} (epoch {progress.epoch}, batch {progress.batch})", main_process_only=True
        )
    return trainer


class _LogWindow:
    """Training statistics summed since the last log (tensors: no device sync per step), and the throughput."""

    def __init__(self) -> None:
        self.stats: dict[str, torch.Tensor] = {}
        self.steps, self.grad_norm, self.start = 0, 0.0, time.perf_counter()
        self.train_seconds = self.train_tokens = 0.0

    def add(self, stats: dict[str, torch.Tensor], grad_norm: torch.Tensor | float) -> None:
        self.stats = {name: self.stats.get(name, 0) + value for name, value in stats.items()}
        self.steps, self.grad_norm = self.steps + 1, self.grad_norm + grad_norm

    def restart(self) -> None:
        """Start timing anew (after an evaluation or a checkpoint, which are not training throughput)."""
        self.start = time.perf_counter()

    def log(
        self, accelerator: Accelerator, bar: tqdm, step: int, learning_rate: float, epoch: int, train_step: TrainStep
    ) -> None:
        totals = dict(
            zip(self.stats, accelerator.reduce(torch.stack(list(self.stats.values())), "sum").tolist(), strict=True)
        )
        seconds = time.perf_counter() - self.start
        self.train_seconds, self.train_tokens = self.train_seconds + seconds, self.train_tokens + totals["tokens"]
        logs = {
            "train_loss": totals["loss"] / totals["target_tokens"],
            "learning_rate": learning_rate,
            "grad_norm": float(self.grad_norm) / self.steps,
            "tokens_per_second": totals["tokens"] / seconds,
            "padding_share": 1 - totals["tokens"] / totals["positions"],
            "epoch": epoch,
        }
        if compiling(accelerator):
            logs.update(compilations=train_step.compilations, compile_seconds=train_step.compile_seconds)
        accelerator.log(logs, step=step)
        bar.set_postfix(
            loss=f"{logs['train_loss']:.3f}", lr=f"{learning_rate:.2e}", tok_s=f"{logs['tokens_per_second']:,.0f}"
        )
        self.stats, self.steps, self.grad_norm = {}, 0, 0.0
        self.restart()


def _compile_description(accelerator: Accelerator) -> str:
    if not compiling(accelerator):
        return "not compiled"
    plugin = accelerator.state.dynamo_plugin
    return f"compiled with torch.compile (backend {plugin.backend.value.lower()}, mode {plugin.mode}, dynamic {plugin.dynamic})"


def _compile_results(accelerator: Accelerator, step: TrainStep) -> dict[str, Any]:
    """How the run compiled: the backend (None when not compiled), the graphs compiled during training steps (model
    and loss, forward and backward, recompilations included) and the wall time of the steps that compiled, which
    counts in ``train_minutes`` and so against ``--max-train-minutes``."""
    if not compiling(accelerator):
        return {"dynamo_backend": None}
    return {
        "dynamo_backend": accelerator.state.dynamo_plugin.backend.value.lower(),
        "compilations": step.compilations if compile_count() is not None else None,
        "compile_seconds": step.compile_seconds,
    }


def _train_loop(run: _Run, data: RunData, trainer: _Trainer) -> _LogWindow:
    """Take optimizer steps until ``max_steps`` or the time budget, logging, evaluating and saving on schedule."""
    config, accelerator, progress = run.config, run.accelerator, trainer.progress
    keep_last = max(config.keep_checkpoints, config.average_checkpoints)
    batches = _training_batches(trainer.sampler, data.train, data.tokenizer.pad_token_id, progress)
    window = _LogWindow()
    bar = tqdm(total=config.max_steps, initial=progress.step, desc="training", disable=not accelerator.is_main_process)
    clock = time.perf_counter()
    with logging_redirect_tqdm():
        while progress.step < config.max_steps and not out_of_time(accelerator, progress, config.max_train_minutes):
            micro_batches = [to_device(next(batches), accelerator.device) for _ in range(trainer.grad_accum)]
            taken = trainer.step(micro_batches)
            if taken is None:  # fp16 overflow: the loss scale drops, the step does not count
                continue
            progress.step += 1
            bar.update(1)
            window.add(taken.stats, taken.grad_norm)
            if progress.step % config.log_every == 0:
                window.log(accelerator, bar, progress.step, taken.learning_rate, progress.epoch, trainer.step)
            if progress.step % config.eval_every == 0 and data.valid_examples:
                trainer.evaluator.validate(progress.step)
                window.restart()
            progress.seconds, clock = progress.seconds + time.perf_counter() - clock, time.perf_counter()
            if progress.step % config.save_every == 0:
                save_checkpoint(trainer.state, run.checkpoint_dir, progress.step, keep_last)
                window.restart()
    bar.close()
    if progress.step < config.max_steps:
        logger.info(
            f"stopped at step {progress.step} after --max-train-minutes={config.max_train_minutes}",
            main_process_only=True,
        )
    return window


def _finish(run: _Run, data: RunData, trainer: _Trainer, window: _LogWindow) -> dict[str, Any]:
    """Section 6.1: average the last checkpoints (or keep the better candidate on validation), export the model,
    translate the test set with beam search; the results."""
    config, accelerator, progress, unwrapped = run.config, run.accelerator, trainer.progress, trainer.unwrapped
    checkpoints = list_checkpoints(run.checkpoint_dir)
    if not checkpoints or checkpoint_step(checkpoints[-1]) != progress.step:
        keep_last = max(config.keep_checkpoints, config.average_checkpoints)
        save_checkpoint(trainer.state, run.checkpoint_dir, progress.step, keep_last)
        checkpoints = list_checkpoints(run.checkpoint_dir)
    averaged = checkpoints[-config.average_checkpoints :]
    results: dict[str, Any] = {
        "step": progress.step,
        "epochs": progress.epoch + progress.batch / trainer.sampler.batches_per_replica,
        "train_minutes": progress.seconds / 60,
        "train_tokens_per_second": window.train_tokens / window.train_seconds if window.train_seconds else None,
        "padding_share": trainer.sampler.padding_fraction(),
        "tokens_per_step": trainer.sampler.max_tokens * trainer.grad_accum * accelerator.num_processes,
        "tokens_per_micro_batch": trainer.sampler.max_tokens,
        "train_pairs": len(data.train),
        "num_processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        **_compile_results(accelerator, trainer.step),
    }
    candidates = {"averaged": averaged, "last": checkpoints[-1:]}
    chosen = "averaged"
    if config.select_on_valid and len(averaged) > 1 and data.valid:
        results.update(trainer.evaluator.select_on_valid(candidates))
        chosen = results["selected"]
    load_weights(unwrapped, average_checkpoints(candidates[chosen]))
    results["averaged_checkpoints"] = [path.name for path in candidates[chosen]]
    logger.info(f"final model: the average of {', '.join(results['averaged_checkpoints'])}", main_process_only=True)
    if accelerator.is_main_process:  # written whole: a kill leaves the old model directory or the new one
        write_directory(
            run.run_dir / "model",
            lambda folder: export_model(unwrapped, data.tokenizer, folder, config),
            replaceable=is_saved_model_dir,
            what="the run's model directory",
        )
    if data.test:
        results.update(trainer.evaluator.score_test_set())
        if "selected" in results:
            metric = trainer.evaluator.metric
            results[f"test_{metric}_{chosen}"] = results[f"test_{metric}"]
    if accelerator.is_main_process:
        results.update(best_validation(run.run_dir / "metrics.jsonl", trainer.evaluator.metric))
    return results


def _write_results(run: _Run, data: RunData, results: dict[str, Any]) -> None:
    run.accelerator.log(
        {name: value for name, value in results.items() if isinstance(value, float)}, step=results["step"]
    )
    if run.accelerator.is_main_process:
        write_file(run.run_dir / "results.json", json.dumps(results, indent=2) + "\n")
        write_training_summary(run.run_dir / "model", training_summary(run.config, data.corpus, results))
        plot_metrics(run.run_dir / "metrics.jsonl", run.run_dir / "metrics.png", required=False)


def train(config: TrainingConfig) -> dict[str, Any]:
    """Train a model, average its last checkpoints, export it and score it on the test set.

    Every process of an ``accelerate launch`` runs this. The run directory ``config.output_dir`` receives:
    ``training_config.json``, ``tokenizer/``, ``checkpoints/checkpoint-<step>/``, ``metrics.jsonl`` and
    ``metrics.png`` (the curves), ``model/`` (the averaged model, a Hugging Face model directory),
    ``test.<src_lang>``, ``test.<tgt_lang>`` and ``test.hyp.<tgt_lang>`` (the test set and its translations), and
    ``results.json``. The tokenizer and the tokenized training corpus are also kept in the data cache
    (``--data-cache-dir``) for later runs on the same corpus.

    Returns:
        The contents of ``results.json``: test BLEU (and its sacreBLEU signature), chrF and exact match, training
        throughput and padding share, and the checkpoints averaged.
    """
    started, load = time.perf_counter(), os.getloadavg()
    lock = lock_run_dir(config)  # one writer per run directory, until this returns or the process ends
    try:
        run = _start_run(config)
        data = _prepare_data(run)
        trainer = _build_trainer(run, data)
        window = _train_loop(run, data, trainer)
        results = _finish(run, data, trainer, window)
        results["seconds"] = time.perf_counter() - started
        results["environment"] = run_environment(load)
        _write_results(run, data, results)
    finally:
        lock.release()
    # The DDP wrapper's C++ reducer holds the gloo/NCCL process group. Were it the group's last holder, the group
    # would be destroyed as train() returns, with the GIL held, and wait for its worker threads, which may need the
    # GIL to free the tensors of a finished collective: a deadlock (pytorch/pytorch#56297), seen here in 8 of 30
    # two-process runs on a loaded CPU (0 of 30 since). So the wrapper goes first; destroy_process_group (in
    # end_training) then drops the group through its Python binding, which releases the GIL while the threads finish.
    accelerator = run.accelerator
    del trainer
    accelerator.free_memory()
    accelerator.end_training()
    return results
