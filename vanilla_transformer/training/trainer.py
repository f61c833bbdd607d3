"""The `Trainer`: the state of a training run and the operations on it, as fairseq's and transformers' trainers.

The trainer owns the run's settings, the `Accelerator`, the model (as `Accelerator.prepare` returned it, and
unwrapped), Adam and its schedule (section 5.3), the `TrainingProgress`, the batches (`TokenBatchSampler`), the
`Evaluator` and the run directory, and nothing else holds them: `train_step` takes one optimizer step, `fit` steps
until the end of the run (logging, validating and saving checkpoints on schedule), `finish` makes the final model
(section 6.1), and `state_dict` / `load_state_dict` are what a checkpoint saves and a resumed run restores.
`vanilla_transformer.training.run.train` builds one and calls these; ``scripts/benchmark_training.py`` and
``scripts/benchmark_precision.py`` build one too, so that they time the step that ``train`` takes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import PreTrainedTokenizerBase

from ..atomic import write_directory
from ..data import Pair, TokenBatchSampler
from ..data.cache import TokenCorpus
from ..decoder_vanilla_transformer import sdpa_backends
from ..model_dir import is_saved_model_dir
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from .checkpoints import (
    average_checkpoints,
    checkpoint_step,
    list_checkpoints,
    load_checkpoint,
    load_weights,
    save_checkpoint,
    unique_weights,
)
from .compile_cache import compile_cache_path, load_compile_cache, save_compile_cache
from .config import TrainingConfig
from .evaluation import Evaluator, best_validation
from .logs import get_logger
from .preflight import auto_attention
from .progress import TrainingProgress, out_of_time
from .results import export_model
from .run_dir import RunLayout
from .schedule import noam_schedule
from .step import (
    VectorISAProbe,
    accumulate_gradients,
    build_adam,
    check_step_memory,
    compile_count,
    compile_layers_only,
    compiled_loss,
    compiling,
    loss_scale,
    micro_batch_plan,
    overflow_skipped,
    prefer_compile_settings,
    to_device,
    tokens_in_memory,
)

logger = get_logger(__name__)


@dataclass
class StepResult:
    """What a step taken reports for the log: this process's summed statistics, the gradient norm (before
    clipping), and the learning rate the update used. All tensors stay on the device: reading them syncs."""

    stats: dict[str, torch.Tensor]
    grad_norm: torch.Tensor
    learning_rate: float


class Trainer:
    """A training run's state (see the module) and its operations.

    Args:
        config: The run's settings.
        accelerator: The run's Accelerator (its precision and compilation settings apply to the model).
        model: The model to train, before `Accelerator.prepare` (the trainer prepares it).
        tokenizer: The run's tokenizer (its padding id pads the batches).
        train_data: The tokenized training split (`data.cache.TokenCorpus`).
        valid: The validation pairs, scored during training and by ``--select-on-valid``.
        test: The test pairs, scored by `finish`.
    """

    def __init__(
        self,
        config: TrainingConfig,
        accelerator: Accelerator,
        model: VanillaTransformerForConditionalGeneration,
        tokenizer: PreTrainedTokenizerBase,
        train_data: TokenCorpus,
        valid: Sequence[Pair] = (),
        test: Sequence[Pair] = (),
    ) -> None:
        self.isa_probe = VectorISAProbe.start(accelerator)  # first: it overlaps what follows, up to the first step
        self.config, self.accelerator, self.tokenizer, self.train_data = config, accelerator, tokenizer, train_data
        self.layout = RunLayout(config.checkpointing.output_dir)
        optimization = config.optimization
        attention = config.model.attn_implementation
        if attention == "auto":
            attention = auto_attention(accelerator.device.type, accelerator.mixed_precision)
        if attention is not None:
            model.set_attn_implementation(attention)
        self.memory_tokens = tokens_in_memory(accelerator, model, config.data.max_length)
        self.max_tokens, self.grad_accum = micro_batch_plan(config, accelerator.num_processes, self.memory_tokens)
        self.sampler = self.token_batches()
        optimizer = build_adam(model, optimization, accelerator.device.type)
        # Not `prepare`d: Accelerate would step the schedule once per process for every optimizer step.
        self.scheduler = noam_schedule(
            optimizer, model.config.d_model, optimization.warmup_steps, optimization.lr_scale
        )
        prefer_compile_settings(accelerator)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)  # compiled if the dynamo plugin is on
        if compiling(accelerator) and accelerator.state.dynamo_plugin.use_regional_compilation:
            compile_layers_only(self.model)  # the repeated layers; the other leaves run eagerly
        self.unwrapped = accelerator.unwrap_model(self.model, keep_torch_compile=False)  # evaluation runs eagerly
        self.loss_function = compiled_loss(accelerator)
        self.progress = TrainingProgress(micro_batch_tokens=self.max_tokens, micro_batches=self.grad_accum)
        self.evaluator = Evaluator(accelerator, self.unwrapped, tokenizer, valid, test, config)
        self.compilations, self.compile_seconds = 0, 0.0  # graphs compiled during steps, and those steps' time
        self.recompilations, self.steps_run = 0, 0  # graphs compiled after this trainer's first step; steps run
        self.compile_cache = compile_cache_path(config, accelerator, model.config) if compiling(accelerator) else None
        self.compile_cache_loaded = self.compile_cache is not None and load_compile_cache(self.compile_cache)
        self.train_tokens_per_second: float | None = None  # of the last `fit`, evaluations and checkpoints left out

    @property
    def tokens_per_step(self) -> int:
        """Padded tokens per optimizer step, at most: micro-batch size x micro-batches x processes."""
        return self.max_tokens * self.grad_accum * self.accelerator.num_processes

    # ----------------------------------------------------------------------------------------------------------------
    # State
    # ----------------------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint holds: the ``model`` weights (each tied weight once), the ``optimizer``, the
        ``scheduler``, the ``progress`` and the fp16 loss ``scaler`` (None without one). Its tensors are the live
        ones where they are on the CPU: copy them to keep this state while training goes on."""
        scaler = self.accelerator.scaler
        return {
            "model": unique_weights(self.unwrapped),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "progress": self.progress.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (a checkpoint's state, or another trainer's of the same settings)."""
        load_weights(self.unwrapped, state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.progress.load_state_dict(state["progress"])
        self.keep_micro_batch_plan()
        if self.accelerator.scaler is not None and state["scaler"] is not None:
            self.accelerator.scaler.load_state_dict(state["scaler"])

    def keep_micro_batch_plan(self) -> None:
        """Cut the batches as the run being resumed did. With ``--fill-gpu-memory`` the plan follows the free memory
        the device has now, which may differ from when the run started; the progress counts batches of the plan it
        was saved with, so another plan would resume at other pairs, skipping some and repeating others."""
        saved = (self.progress.micro_batch_tokens, self.progress.micro_batches)
        if min(saved) < 1 or saved == (self.max_tokens, self.grad_accum):
            self.progress.micro_batch_tokens, self.progress.micro_batches = self.max_tokens, self.grad_accum
            return
        plan = f"the checkpoint's micro-batch plan (micro_batches={saved[1]:,}, micro_batch_tokens={saved[0]:,})"
        check_step_memory(saved[0], saved[1], self.accelerator.device, plan)  # a step no machine holds: refused
        fits = self.memory_tokens is None or saved[0] <= max(self.memory_tokens, self.config.optimization.max_tokens)
        logger.warning(
            f"resuming with the run's micro-batches, {saved[1]} x {saved[0]:,} tokens, not the {self.grad_accum} x "
            f"{self.max_tokens:,} this device's free memory would take"
            + ("" if fits else ": they may not fit in it (resume where the run had as much memory free)"),
            main_process_only=True,
        )
        self.max_tokens, self.grad_accum = saved
        self.sampler = self.token_batches()

    def token_batches(self) -> TokenBatchSampler:
        """This process's share of the training batches, cut by the micro-batch plan (``max_tokens``)."""
        return TokenBatchSampler(
            self.train_data.lengths, self.max_tokens, seed=self.config.optimization.seed,
            num_replicas=self.accelerator.num_processes, rank=self.accelerator.process_index,
        )  # fmt: skip

    def save_checkpoint(self) -> Path:
        """Save the state as ``checkpoints/checkpoint-<step>`` in the run directory (`checkpoints.save_checkpoint`),
        keeping the last ``--keep-checkpoints`` (at least ``--average-checkpoints``). Every process calls this."""
        state = self.state_dict() if self.accelerator.is_main_process else None
        return save_checkpoint(
            self.accelerator,
            state,
            self.layout.checkpoints,
            self.progress.step,
            self.config.checkpointing.keep_last,
        )

    def load_checkpoint(self, path: str | Path) -> None:
        """Resume from a checkpoint (`checkpoints.load_checkpoint`): the state and this process's random numbers."""
        load_checkpoint(self.accelerator, path, self.load_state_dict)
        logger.info(
            f"resumed from {path} (epoch {self.progress.epoch}, batch {self.progress.batch})", main_process_only=True
        )

    # ----------------------------------------------------------------------------------------------------------------
    # Training
    # ----------------------------------------------------------------------------------------------------------------

    def batches(self) -> Iterator[dict[str, torch.Tensor]]:
        """This process's training batches, from ``progress.epoch`` and ``progress.batch`` on, epoch after epoch.

        The progress advances with every batch taken, so a checkpoint written after a step records where the next
        one starts.
        """
        progress, pad_token_id = self.progress, self.tokenizer.pad_token_id
        while True:
            self.sampler.set_epoch(progress.epoch, start_batch=progress.batch)
            for indices in self.sampler:
                progress.batch += 1
                yield self.train_data.collate(indices, pad_token_id)
            progress.epoch, progress.batch = progress.epoch + 1, 0

    def train_step(self, micro_batches: Sequence[dict[str, torch.Tensor]]) -> StepResult | None:
        """One optimizer step of section 5: forward and backward of the micro-batches (on the device), clipping (if
        asked), Adam, the schedule; the progress counts it. None if fp16 loss scaling skipped it (an overflow: the
        step does not count). Also counts the graphs compiled meanwhile, and the time of the steps that compiled."""
        accelerator, optimization = self.accelerator, self.config.optimization
        before, started = compile_count(), time.perf_counter()
        if self.isa_probe is not None:  # the first step compiles: the probe's answer is needed now
            self.isa_probe.wait()
            self.isa_probe = None
        stats = accumulate_gradients(
            accelerator, self.model, micro_batches, optimization.label_smoothing, self.loss_function
        )
        grad_norm = accelerator.clip_grad_norm_(self.model.parameters(), optimization.max_grad_norm or math.inf)
        learning_rate = self.scheduler.get_last_lr()[0]
        scale = loss_scale(accelerator)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._note_compilations(before, started)
        if overflow_skipped(accelerator, scale):
            return None
        self.scheduler.step()
        self.progress.step += 1
        return StepResult(stats, grad_norm, learning_rate)

    def _note_compilations(self, before: int | None, started: float) -> None:
        """Count the graphs the step that began at `started` compiled (recompilations: those of any step but the
        trainer's first) and its time; save the compile cache (`compile_cache`) after a step that compiled, also
        when the first step loaded it (it may have compiled graphs the file lacked), and log the compile phase after
        the first step."""
        after, first = compile_count(), self.steps_run == 0
        self.steps_run += 1
        if before is None or after is None or after == before:
            return
        saved = self.accelerator.is_main_process and self.compile_cache is not None
        saved = saved and save_compile_cache(self.compile_cache)
        seconds = time.perf_counter() - started  # (the cache's writing included)
        self.compilations, self.compile_seconds = self.compilations + after - before, self.compile_seconds + seconds
        if not first:
            self.recompilations += after - before
        if first:
            loaded = "loaded" if self.compile_cache_loaded else "absent"
            logger.info(
                f"compiling the model: {seconds:.1f} s (the first step; compile cache {self.compile_cache}: {loaded}, "
                f"{'saved' if saved else 'not saved'})",
                main_process_only=True,
            )

    def validate(self) -> None:
        """Log the validation loss and scores at this step (`Evaluator.validate`)."""
        self.evaluator.validate(self.progress.step)

    def fit(self) -> None:
        """Take optimizer steps until ``--max-steps`` or the time budget, logging, validating and saving on schedule."""
        config, accelerator, progress = self.config, self.accelerator, self.progress
        max_steps, max_minutes = config.optimization.max_steps, config.optimization.max_train_minutes
        batches, window = self.batches(), _LogWindow()
        clock = time.perf_counter()
        bar = tqdm(total=max_steps, initial=progress.step, desc="training", disable=not accelerator.is_main_process)
        with bar, logging_redirect_tqdm():  # closed as an error leaves, so that the error line is the last one
            while progress.step < max_steps and not out_of_time(accelerator, progress, max_minutes):
                taken = self.train_step([to_device(next(batches), accelerator.device) for _ in range(self.grad_accum)])
                if taken is None:  # fp16 overflow: the loss scale drops, the step does not count
                    continue
                bar.update(1)
                window.add(taken.stats, taken.grad_norm)
                if progress.step % config.logging.log_every == 0:
                    logs = window.log(accelerator, progress.step, taken.learning_rate, progress.epoch)
                    if compiling(accelerator):
                        logs.update(
                            compilations=self.compilations, recompilations=self.recompilations,
                            compile_seconds=self.compile_seconds,
                        )  # fmt: skip
                    accelerator.log(logs, step=progress.step)
                    bar.set_postfix(
                        loss=f"{logs['train_loss']:.3f}", lr=f"{taken.learning_rate:.2e}",
                        tok_s=f"{logs['tokens_per_second']:,.0f}",
                    )  # fmt: skip
                if progress.step % config.logging.eval_every == 0 and self.evaluator.valid_examples:
                    self.validate()
                    window.restart()
                progress.seconds, clock = progress.seconds + time.perf_counter() - clock, time.perf_counter()
                if progress.step % config.checkpointing.save_every == 0:
                    self.save_checkpoint()
                    window.restart()
        if compiling(accelerator):
            logger.info(
                f"compiling the model: {self.compile_seconds:.1f} s; recompiled {self.recompilations} times",
                main_process_only=True,
            )
        self.train_tokens_per_second = window.train_tokens / window.train_seconds if window.train_seconds else None
        if progress.step < max_steps:
            logger.info(
                f"stopped at step {progress.step} after --max-train-minutes={max_minutes}", main_process_only=True
            )

    # ----------------------------------------------------------------------------------------------------------------
    # The final model
    # ----------------------------------------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Section 6.1: average the last checkpoints (or keep the better candidate on validation), export the model,
        translate the test set with beam search; the run's results (``results.json``, less its time and machine)."""
        config, accelerator, progress = self.config, self.accelerator, self.progress
        checkpoints = list_checkpoints(self.layout.checkpoints)
        if not checkpoints or checkpoint_step(checkpoints[-1]) != progress.step:
            self.save_checkpoint()
            checkpoints = list_checkpoints(self.layout.checkpoints)
        results = self._training_results()
        candidates = {"averaged": checkpoints[-config.checkpointing.average_checkpoints :], "last": checkpoints[-1:]}
        chosen = "averaged"
        if config.checkpointing.select_on_valid and len(candidates["averaged"]) > 1 and self.evaluator.valid:
            results.update(self.evaluator.select_on_valid(candidates))
            chosen = results["selected"]
        load_weights(self.unwrapped, average_checkpoints(candidates[chosen]))
        results["averaged_checkpoints"] = [path.name for path in candidates[chosen]]
        logger.info(
            f"final model: the average of {', '.join(results['averaged_checkpoints'])}", main_process_only=True
        )
        if accelerator.is_main_process:  # written whole: a kill leaves the old model directory or the new one
            write_directory(
                self.layout.model,
                lambda folder: export_model(
                    self.unwrapped, self.tokenizer, folder, config.decoding, config.data.max_length
                ),
                replaceable=is_saved_model_dir,
                what="the run's model directory",
            )
        if self.evaluator.test:
            results.update(self.evaluator.score_test_set())
            if "selected" in results:
                metric = self.evaluator.metric
                results[f"test_{metric}_{chosen}"] = results[f"test_{metric}"]
        if accelerator.is_main_process:
            results.update(best_validation(self.layout.metrics, self.evaluator.metric))
        return results

    def _training_results(self) -> dict[str, Any]:
        """How training went: steps, epochs, time, throughput, batches, processes, precision and compilation."""
        progress = self.progress
        return {
            "step": progress.step,
            "epochs": progress.epoch + progress.batch / self.sampler.batches_per_replica,
            "train_minutes": progress.seconds / 60,
            "train_tokens_per_second": self.train_tokens_per_second,
            "padding_share": self.sampler.padding_fraction(),
            "train_pairs": len(self.train_data),
            **self.resolved_settings(),
            **self._compile_results(),
        }

    def resolved_settings(self) -> dict[str, Any]:
        """What the settings resolved to on this device, as ``results.json`` records them: the micro-batch plan (from
        the GPU's memory with ``--fill-gpu-memory``), the processes, precision, attention and compiler backend (None
        when not compiled). The training benchmark records the same for ``train``'s default."""
        accelerator = self.accelerator
        backend = accelerator.state.dynamo_plugin.backend.value.lower() if compiling(accelerator) else None
        return {
            "tokens_per_step": self.tokens_per_step, "tokens_per_micro_batch": self.max_tokens,
            "micro_batches": self.grad_accum, "num_processes": accelerator.num_processes,
            "mixed_precision": accelerator.mixed_precision, **self.attention_settings(), "dynamo_backend": backend,
        }  # fmt: skip

    def attention_settings(self) -> dict[str, Any]:
        """The attention that training runs, as the settings resolved it on this device: ``attn_implementation``
        (transformers' name) and, for SDPA, ``sdpa_backends``, the kernels it may choose from (None: torch's own
        choice, as on the CPU)."""
        implementation = self.unwrapped.config._attn_implementation
        backends = sdpa_backends(self.accelerator.device.type) if implementation == "sdpa" else None
        return {
            "attn_implementation": implementation,
            "sdpa_backends": [backend.name for backend in backends] if backends is not None else None,
        }

    def _compile_results(self) -> dict[str, Any]:
        """How the run compiled, if it did: the graphs compiled during training steps (model and loss, forward and
        backward, recompilations included) and the wall time of the steps that compiled, which counts in
        ``train_minutes`` and so against ``--max-train-minutes``."""
        if not compiling(self.accelerator):
            return {}
        return {
            "compilations": self.compilations if compile_count() is not None else None,
            "recompilations": self.recompilations if compile_count() is not None else None,
            "compile_seconds": self.compile_seconds,
        }

    def describe(self) -> str:
        """The run's size and batching, for its log."""
        accelerator, config = self.accelerator, self.config
        auto = (
            " (--mixed-precision auto: bf16 only where native)"
            if config.optimization.mixed_precision == "auto"
            else ""
        )
        return (
            f"{self.unwrapped.num_parameters():,} parameters; {len(self.train_data):,} training pairs; "
            f"{accelerator.num_processes} process(es) x {self.grad_accum} micro-batch(es) x at most "
            f"{self.max_tokens:,} tokens = {self.tokens_per_step:,} tokens per step; "
            f"{self.sampler.batches_per_replica:,} batches per process and epoch; "
            f"{self.sampler.padding_fraction():.2%} padding; precision {accelerator.mixed_precision}{auto}; "
            f"{_attention_description(self.attention_settings())}; {_compile_description(accelerator)}"
        )


class _LogWindow:
    """Training statistics summed since the last log (tensors: no device sync per step), and the throughput."""

    def __init__(self) -> None:
        self.stats: dict[str, torch.Tensor] = {}
        self.steps, self.grad_norm, self.start = 0, 0.0, time.perf_counter()
        self.timed_tokens: torch.Tensor | float = 0.0  # the tokens of the steps since `start`: the throughput's
        self.train_seconds = self.train_tokens = 0.0

    def add(self, stats: dict[str, torch.Tensor], grad_norm: torch.Tensor | float) -> None:
        self.stats = {name: self.stats.get(name, 0) + value for name, value in stats.items()}
        self.steps, self.grad_norm = self.steps + 1, self.grad_norm + grad_norm
        self.timed_tokens = self.timed_tokens + stats["tokens"]

    def restart(self) -> None:
        """Start timing anew (after an evaluation or a checkpoint, which are not training throughput): the throughput
        counts the tokens of the steps that follow only, over their time; the loss and the other statistics keep the
        whole window's steps."""
        self.start, self.timed_tokens = time.perf_counter(), 0.0

    def log(self, accelerator: Accelerator, step: int, learning_rate: float, epoch: int) -> dict[str, float]:
        """The window's figures over all processes, to log at `step`; then a new window starts."""
        values = [*self.stats.values(), torch.as_tensor(self.timed_tokens).to(self.stats["tokens"])]
        *summed, timed_tokens = accelerator.reduce(torch.stack(values), "sum").tolist()
        totals = dict(zip(self.stats, summed, strict=True))
        seconds = time.perf_counter() - self.start
        self.train_seconds, self.train_tokens = self.train_seconds + seconds, self.train_tokens + timed_tokens
        logs = {
            "train_loss": totals["loss"] / totals["target_tokens"],
            "learning_rate": learning_rate,
            "grad_norm": float(self.grad_norm) / self.steps,
            "tokens_per_second": timed_tokens / seconds,
            "padding_share": 1 - totals["tokens"] / totals["positions"],
            "epoch": epoch,
        }
        self.stats, self.steps, self.grad_norm = {}, 0, 0.0
        self.restart()
        return logs


def _attention_description(settings: dict[str, Any]) -> str:
    backends = settings["sdpa_backends"]
    kernels = f" ({', '.join(backends).lower()})" if backends else ""
    return f"attention {settings['attn_implementation']}{kernels}"


def _compile_description(accelerator: Accelerator) -> str:
    if not compiling(accelerator):
        return "not compiled"
    plugin = accelerator.state.dynamo_plugin
    regional = ", regional" if plugin.use_regional_compilation else ""
    return (
        f"compiled with torch.compile (backend {plugin.backend.value.lower()}, mode {plugin.mode}, dynamic "
        f"{plugin.dynamic}{regional})"
    )


__all__ = ["StepResult", "Trainer"]
