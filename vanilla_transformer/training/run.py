"""A training run, from its settings to its results: `train`.

The recipe, and where each piece lives:

* Data (5.1): a shared source/target BPE vocabulary (`vanilla_transformer.tokenization`), batches of similar-length
  pairs holding about 25,000 source and 25,000 target tokens per step (`data.TokenBatchSampler`, here
  ``max_tokens`` per micro-batch times ``grad_accum`` micro-batches times the number of processes).
* Optimizer (5.3): Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, and the learning rate of equation (3),
  `noam_learning_rate`: a linear warmup over 4,000 steps, then decay with the inverse square root of the step.
* Regularization (5.4): dropout (from the model configuration) and label smoothing of 0.1.
* Checkpoints (6.1): the final model averages the last 5 (base) or 20 (big) checkpoints; it translates with beam
  search, beam 4 and length penalty 0.6 (`vanilla_transformer.serving.search`).

The loss of an optimizer step is the sum of the label-smoothed cross-entropy of all its target tokens divided by
their number, over all micro-batches and processes, so that neither gradient accumulation nor the number of
processes changes it. A run can be interrupted and resumed (``resume=True``) with exactly the same result as an
uninterrupted one: checkpoints hold the model, the optimizer, the schedule, the position in the data and the random
number generator states of every process.

`train` checks the run directory, starts the Accelerator (`start_accelerator`), prepares the data and the run
directory, and hands the rest to a `Trainer`: ``fit``, then ``finish``.
"""

from __future__ import annotations

import os
import time
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import set_seed

from ..atomic import write_directory
from ..data.numbers import check_numbers_task
from ..environment import cpu_flags, run_environment
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .checkpoints import checkpoint_step, list_checkpoints
from .config import OptimizationConfig, TrainingConfig
from .logs import get_logger
from .preflight import auto_dynamo_backend, auto_precision, launch_mismatch, slow_bf16
from .progress import Interrupted
from .results import write_results
from .run_dir import (
    RunFinished,
    RunLayout,
    finished_run,
    inspect_run_dir,
    lock_run_dir,
    mark_run_started,
    prepare_run_dir,
)
from .setup import RunCorpus, build_model_config, prepare_data
from .step import check_step_memory, micro_batch_plan, plan_source
from .tracking import JsonlTracker
from .trainer import Trainer

logger = get_logger(__name__)


def accelerator_options(optimization: OptimizationConfig) -> dict[str, str]:
    """The Accelerator's ``mixed_precision`` and ``dynamo_backend``, where the settings choose them (``auto`` resolved
    for this machine: `auto_precision`, `auto_dynamo_backend`)."""
    # Without --mixed-precision, Accelerate's own sources decide: accelerate launch --mixed_precision, the accelerate
    # config file, ACCELERATE_MIXED_PRECISION. Passing mixed_precision="no" here would override all of them.
    # The same for compiling: accelerate launch --dynamo_backend, the config file, ACCELERATE_DYNAMO_BACKEND.
    precision = optimization.mixed_precision
    if precision == "auto" and os.environ.get("ACCELERATE_MIXED_PRECISION"):
        precision = None  # auto defers to the launcher's or the config file's choice, as --dynamo-backend auto does
    if precision == "auto":
        device = PartialState().device  # (the Accelerator made with these options shares this state)
        cuda_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        precision = auto_precision(device.type, cpu_flags(), cuda_bf16)
    backend = optimization.dynamo_backend
    if backend == "auto":
        given_precision = precision or os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        backend = auto_dynamo_backend(PartialState().device.type, given_precision, cpu_flags())
    chosen = {"mixed_precision": precision, "dynamo_backend": backend}
    return {name: value for name, value in chosen.items() if value is not None}


def start_accelerator(config: TrainingConfig, start_step: int = 0) -> Accelerator:
    """The run's Accelerator, with the JSONL log (`JsonlTracker`, from `start_step` on) and ``--report-to``'s
    trackers, its precision and compilation; the threads and the seed set. Warns when the launch runs another
    number of processes than it asked for, and when bf16 would be emulated."""
    optimization = config.optimization
    if optimization.num_threads is not None:
        torch.set_num_threads(optimization.num_threads)
    layout = RunLayout(config.checkpointing.output_dir)
    jsonl = JsonlTracker(layout.metrics, start_step=start_step)
    extra_trackers = [name for name in config.logging.report_to.split(",") if name]
    accelerator = Accelerator(
        log_with=[jsonl, *extra_trackers], project_dir=str(layout.root), **accelerator_options(config.optimization)
    )
    train_fp16_on_cpu(accelerator)
    set_seed(optimization.seed, device_specific=True)  # dropout differs between processes; DDP copies rank 0's weights
    slow = slow_bf16(accelerator.device.type, accelerator.mixed_precision, cpu_flags())
    for problem in (
        launch_mismatch(accelerator.num_processes),
        slow and f"{slow}; pass --mixed-precision auto (or no) to train in fp32",
    ):
        if problem:
            logger.warning(problem, main_process_only=True)
    return accelerator


def train_fp16_on_cpu(accelerator: Accelerator) -> None:
    """fp16 on a CPU as Accelerate sets it up on CUDA: fp16 autocast and torch's loss scaler (``GradScaler("cpu")``),
    both of which torch has on a CPU. Accelerate gives fp16 them on accelerator devices only, and on a CPU trained in
    fp32 while the log and results.json said fp16. Set before `Accelerator.prepare`, which wraps the model's forward
    in the autocast and hands the optimizer the scaler. Where this Accelerate lacks those attributes, fp16 on a CPU is
    refused naming the option, never trained in fp32 under its name."""
    if accelerator.mixed_precision != "fp16" or accelerator.device.type != "cpu" or accelerator.scaler is not None:
        return
    if getattr(accelerator, "native_amp", None) is not False:
        raise ValueError(
            "--mixed-precision fp16 (or accelerate launch --mixed_precision fp16) on a CPU: this Accelerate version "
            "sets up mixed precision in a way this package does not know; pass --mixed-precision bf16 or no"
        )
    accelerator.scaler, accelerator.native_amp = torch.amp.GradScaler("cpu"), True


def start_run(config: TrainingConfig) -> tuple[Trainer, RunCorpus]:
    """Check the run directory (nothing is written yet), start the Accelerator, prepare the data; then make the run
    directory ready (an overwritten run is deleted only now, as the new one's data passed its checks), build the
    trainer, resume it from the last checkpoint if there is one, and mark the run started."""
    resume_from = inspect_run_dir(config)
    accelerator = start_accelerator(config, checkpoint_step(resume_from) if resume_from else 0)
    plan = micro_batch_plan(config, accelerator.num_processes)  # a step memory cannot hold: refused before any work
    check_step_memory(*plan, accelerator.device, plan_source(config))
    if config.data.numbers_task:  # as many pairs as memory holds, before they are made
        sizes = {f"--num-{split}": getattr(config.data, f"num_{split}") for split in ("train", "valid", "test")}
        largest = max(sizes, key=sizes.__getitem__)
        check_numbers_task(largest, sizes[largest], sum(sizes.values()))
    model_config = build_model_config(config.model)
    corpus = RunCorpus.of(config.data, config.preset)  # every process: a corpus named wrongly stops them all at once
    checkpointing = config.checkpointing
    layout = RunLayout(checkpointing.output_dir)
    tokenizer_dir = layout.tokenizer
    resumed = checkpointing.resume and not checkpointing.overwrite and layout.settings.is_file()
    tokenizer, train_data, valid, test = prepare_data(
        config, accelerator, corpus, model_config, tokenizer_dir if resumed else None
    )
    prepare_run_dir(accelerator, checkpointing, config.data, resume_from)
    if accelerator.is_main_process and not tokenizer_dir.is_dir():
        write_directory(tokenizer_dir, tokenizer.save_pretrained, what="the run's tokenizer folder")
    accelerator.wait_for_everyone()
    model = VanillaTransformerForConditionalGeneration(model_config)
    trainer = Trainer(config, accelerator, model, tokenizer, train_data, valid, test)
    if resume_from is not None:
        trainer.load_checkpoint(resume_from)
    mark_run_started(accelerator, config)
    accelerator.init_trackers(layout.tracker_project, config=config.options())
    logger.info(trainer.describe(), main_process_only=True)
    optimization = config.optimization
    if (
        optimization.grad_accum is None
        and optimization.tokens_per_step
        and trainer.tokens_per_step > 1.1 * optimization.tokens_per_step
    ):
        logger.warning(
            f"{trainer.tokens_per_step:,} tokens per step exceeds --tokens-per-step={optimization.tokens_per_step:,}: "
            f"the {accelerator.num_processes} processes' share is smaller than the longest pair --max-length allows",
            main_process_only=True,
        )
    return trainer, corpus


def train(config: TrainingConfig) -> dict[str, Any]:
    """Train a model, average its last checkpoints, export it and score it on the test set.

    Every process of an ``accelerate launch`` runs this. The run directory ``--output-dir`` receives:
    ``training_config.json``, ``tokenizer/``, ``checkpoints/checkpoint-<step>/``, ``metrics.jsonl`` and
    ``metrics.png`` (the curves), ``model/`` (the averaged model, a Hugging Face model directory),
    ``test.<src_lang>``, ``test.<tgt_lang>`` and ``test.hyp.<tgt_lang>`` (the test set and its translations), and
    ``results.json``. The tokenizer and the tokenized training corpus are also kept in the data cache
    (``--data-cache-dir``) for later runs on the same corpus.

    Returns:
        The contents of ``results.json``: test BLEU (and its sacreBLEU signature), chrF and exact match, training
        throughput and padding share, and the checkpoints averaged.

    Raises:
        RunFinished: With ``--resume`` on a run that has nothing left to train and has written its results (unless
            ``--finish-again``), saying so; nothing in the run directory is written.
        Interrupted: On Ctrl-C, with the step reached and the last checkpoint, which ``--resume`` continues from.
    """
    started, load = time.perf_counter(), os.getloadavg()
    layout = RunLayout(config.checkpointing.output_dir)
    lock = lock_run_dir(layout)  # one writer per run directory, until this returns or the process ends
    trainer = None
    try:
        finished = finished_run(config)
        if finished is not None:
            raise RunFinished(finished)
        trainer, corpus = start_run(config)
        trainer.fit()
        results = trainer.finish()
        results.update(seconds=time.perf_counter() - started, environment=run_environment(load))
        write_results(trainer.accelerator, config, corpus, results)
    except KeyboardInterrupt as interrupt:  # Ctrl-C: where the run stopped, and the checkpoint it continues from
        checkpoints = list_checkpoints(layout.checkpoints)
        last = checkpoints[-1] if checkpoints else None
        step = trainer.progress.step if trainer is not None else None
        raise Interrupted(step, last and last.name, last and checkpoint_step(last)) from interrupt
    finally:
        lock.release()
    # The DDP wrapper's C++ reducer holds the gloo/NCCL process group. Were it the group's last holder, the group
    # would be destroyed as train() returns, with the GIL held, and wait for its worker threads, which may need the
    # GIL to free the tensors of a finished collective: a deadlock (pytorch/pytorch#56297), seen here in 8 of 30
    # two-process runs on a loaded CPU (0 of 30 since). So the wrapper goes first; destroy_process_group (in
    # end_training) then drops the group through its Python binding, which releases the GIL while the threads finish.
    accelerator = trainer.accelerator
    del trainer
    accelerator.free_memory()
    accelerator.end_training()
    return results
