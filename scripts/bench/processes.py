"""Contestants in processes of their own, and our `Trainer` as ``vanilla-transformer train`` builds it.

Accelerate keeps one process-wide state (the first Accelerator's precision and compilation), so a benchmark that
compares training settings runs each contestant in a long-lived worker process: the coordinator's `Worker` sends it
JSON lines on its stdin and reads its answers on its stdout; the worker's `Channel` keeps the protocol apart from
whatever libraries print; `Tally` counts a worker's steps and `serve` answers the coordinator's commands, whose
side `run_contestants` is (the kit's interleaved timer over the workers). `prepare_data` writes the tokenizer and
token cache that `train` would (so that every worker trains on the same ids), and `build_trainer` builds the
`Trainer` from ``train`` options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .profiling import StepProfile, profile_lines
from .timing import interleave, synchronize
from .workloads import training_flops


class Channel:
    """The worker's side of the pipe. Libraries may print to stdout, so the protocol keeps its own copy of the
    stdout file descriptor and everything else printed goes to stderr."""

    def __init__(self) -> None:
        self.out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)
        sys.stdout = sys.stderr

    def send(self, **message) -> None:
        self.out.write(json.dumps(message) + "\n")

    def receive(self) -> dict[str, Any]:
        line = sys.stdin.readline()
        return json.loads(line) if line else {"command": "stop"}


class Worker:
    """A worker process of `script` with `options` and `threads` CPU threads, as the coordinator sees it; its
    stderr goes to `log` (whose end is shown if it fails)."""

    def __init__(self, script: str, options: list[str], threads: int, log: Path, name: str) -> None:
        self.name, self.log = name, log
        environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
        scripts = str(Path(script).resolve().parent)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [scripts, os.environ.get("PYTHONPATH")]))
        command = [sys.executable, str(Path(script).resolve()), *options, "--threads", str(threads)]
        with open(log, "w", encoding="utf-8") as stderr:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=environment
            )

    def send(self, **message) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def receive(self) -> dict[str, Any]:
        line = self.process.stdout.readline()
        if not line:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-4000:]
            raise RuntimeError(f"worker {self.name} ended (exit {self.process.wait()}):\n{tail}")
        return json.loads(line)

    def ask(self, **message) -> dict[str, Any]:
        self.send(**message)
        return self.receive()

    def stop(self) -> None:
        if self.process.poll() is None:
            try:
                self.send(command="stop")
                self.process.wait(timeout=120)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


class Tally:
    """What a worker counts over a command's steps: non-padding and padded tokens, model FLOPs, the seconds spent
    building our batches, the graphs compiled meanwhile and the peak memory. The steps' time is the coordinator's
    timer's (`interleave`): a worker answers once its steps are done."""

    def __init__(self, device: torch.device, config) -> None:
        self.device, self.config = device, config
        self.reset()

    def reset(self, profile: bool = False) -> None:
        """Count afresh; with `profile`, under torch's profiler until `report` (`StepProfile`)."""
        from vanilla_transformer.training.step import compile_count

        self.profile = StepProfile(self.device) if profile else None
        self.steps, self.data_seconds = 0, 0.0
        self.tokens = torch.zeros((), dtype=torch.float64, device=self.device)
        self.positions, self.flops = 0, 0.0
        self.compiled_before = compile_count()
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def add(self, batches: list[dict], tokens: torch.Tensor, steps: int = 1) -> None:
        """A step's micro-batches (or, with ``steps=0``, one of them): their non-padding `tokens`, padded positions
        and model FLOPs (`training_flops` of the model's `config`)."""
        self.tokens += tokens.detach().double()
        self.positions += sum(batch["input_ids"].numel() + batch["labels"].numel() for batch in batches)
        self.flops += sum(training_flops(self.config, batch) for batch in batches)
        self.steps += steps

    def report(self) -> dict[str, Any]:
        """The figures since `reset`, the device synchronised first: the answer comes once the work is done."""
        from vanilla_transformer.training.step import compile_count

        tokens = float(self.tokens.item())
        synchronize(self.device)
        after = compile_count()
        compiled = after - self.compiled_before if after is not None and self.compiled_before is not None else None
        return {
            "steps": self.steps,
            "tokens": tokens,
            "positions": self.positions,
            "data_seconds": self.data_seconds,
            "compilations": compiled,
            "flops": self.flops,
            "peak_memory_bytes": torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None,
            "profile": self.profile.summary(self.steps) if self.profile else None,
        }


def serve(channel: Channel, meter: Tally, step: Callable[[], tuple[list[dict], torch.Tensor]], **ready) -> None:
    """Answer the coordinator's commands: each runs that many `step` calls (a step's micro-batches and its real
    tokens, the seconds of building the batches counted apart by `step`) and reports what `meter` counted."""
    channel.send(event="ready", device=str(meter.device), **ready)
    while (command := channel.receive())["command"] != "stop":
        meter.reset(profile=command.get("profile", False))
        for _ in range(command["steps"]):
            meter.add(*step())
        channel.send(event="done", **meter.report())


def prepare_data(options: list[str], folder: Path, max_pairs: int | None = None):
    """The training data of ``train`` `options`, prepared as `train` prepares them: the corpus (``--data-dir`` or
    ``$VANILLA_TRANSFORMER_DATA``), its first `max_pairs` training pairs cleaned, a BPE trained on them, pairs over
    ``--max-length`` dropped; the tokenizer saved in ``folder/tokenizer`` and the token ids in ``folder/tokens``.
    Returns the run's settings, the corpus, the tokenizer and the tokenized pairs."""
    from vanilla_transformer.data import clean_pairs, tokenize_pairs
    from vanilla_transformer.data.cache import save_token_cache
    from vanilla_transformer.tokenization import train_tokenizer
    from vanilla_transformer.training import parse_args
    from vanilla_transformer.training.setup import RunCorpus

    config = parse_args(options)
    corpus = RunCorpus.of(config.data, config.preset)
    pairs, _ = clean_pairs(corpus.load("train")[:max_pairs])
    tokenizer = train_tokenizer((text for pair in pairs for text in pair), config.model.vocab_size)
    pairs, _ = clean_pairs(pairs, max_length=config.data.max_length, tokenizer=tokenizer)
    examples = tokenize_pairs(pairs, tokenizer)
    tokenizer.save_pretrained(folder / "tokenizer")
    save_token_cache(examples, config.model.vocab_size, folder / "tokens")
    return config, corpus, tokenizer, examples


def build_trainer(config, data: Path, model, cpu: bool = False):
    """The `Trainer` of ``train`` settings `config` for `model`, on the tokenizer and token cache that
    `prepare_data` wrote in `data`, with the Accelerator ``train`` would make (`accelerator_options`)."""
    from accelerate import Accelerator
    from transformers import AutoTokenizer

    from vanilla_transformer.data.cache import TokenCorpus
    from vanilla_transformer.training import Trainer
    from vanilla_transformer.training.run import accelerator_options

    tokenizer = AutoTokenizer.from_pretrained(data / "tokenizer")
    accelerator = Accelerator(cpu=cpu, **accelerator_options(config.optimization))
    return Trainer(config, accelerator, model, tokenizer, TokenCorpus(data / "tokens"))


def start_worker(script: str, index: int, spec, args, data: Path, batch_size: int, plan=None) -> Worker:
    """The process of contestant `spec` (a `contestants.Spec`: its name, whether it is ``train``'s default, its
    settings by key), a `Worker` of the benchmark `script`, its stderr in ``data/worker-INDEX.log``;
    `plan`: the micro-batches (tokens, count) of ``train``'s default, for plain PyTorch."""
    options = ["--worker", spec.name, "--data", str(data), "--model-size", args.model_size, "--seed", str(args.seed)]
    options += ["--vocab-size", str(args.vocab_size), "--max-tokens", str(args.max_tokens)]
    options += ["--batch-size", str(batch_size), "--device", args.device, "--grad-accum", str(args.grad_accum)]
    options += ["--preset", args.preset] if args.preset else []
    options += ["--planned"] if args.planned else []  # the default's micro-batches: the preset's plan
    options += ["--default-plan", *map(str, plan)] if plan else []
    return Worker(script, options, args.threads, data / f"worker-{index}.log", spec.name)


TORCH_LOG_EVENTS = {"recompiles": "Recompiling function", "graph_breaks": "Graph break in user code"}
"""What dynamo writes at each recompilation and graph break under ``TORCH_LOGS=recompiles,graph_breaks``."""


def torch_logs(name: str, log: Path) -> dict[str, int]:
    """Under ``TORCH_LOGS``: the worker's log copied into the benchmark's (its stderr, the step's log of
    gpu_check.sh), and its recompilations and graph breaks counted (`TORCH_LOG_EVENTS`)."""
    text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
    print(f"== {name}: its worker's log (TORCH_LOGS={os.environ['TORCH_LOGS']})\n{text}", file=sys.stderr, flush=True)
    return {event: text.count(words) for event, words in TORCH_LOG_EVENTS.items()}


def run_contestants(script: str, args, specs: list, data: Path, batch_size: int) -> tuple[dict, list]:
    """Start the workers of `specs` (`start_worker`), then the kit's interleaved timer: each warmed up alone, then the rounds; each one's
    figures (the seconds of each command by the timer, the rest as its worker counted them) and the order run."""
    workers: dict[str, Worker] = {}
    results: dict[str, Any] = {}
    try:
        plan, first = None, next((spec for spec in specs if spec.default and spec["micro"] == "preset"), None)
        for spec in [first] * bool(first) + [spec for spec in specs if spec is not first]:
            workers[spec.name] = start_worker(script, len(workers), spec, args, data, batch_size, plan)
            if spec is first:  # train's default first: plain PyTorch takes the micro-batches it planned
                ready = workers[spec.name].receive()
                results[spec.name] = {key: ready.get(key) for key in ("device", "resolved", "settings")}
                plan = ready["resolved"]["tokens_per_micro_batch"], ready["resolved"]["micro_batches"]
        workers = {spec.name: workers[spec.name] for spec in specs}  # timed in the order given
        for name, worker in workers.items():
            if name not in results:
                ready = worker.receive()
                results[name] = {key: ready.get(key) for key in ("device", "resolved", "settings", "batches")}

        def progress(index: int, _) -> None:
            print(f"round {index + 1}/{args.rounds} done", file=sys.stderr, flush=True)

        print(f"warm-up: {args.warmup_steps} steps per contestant ...", file=sys.stderr, flush=True)
        timings = interleave(
            {name: (lambda steps, w=worker: w.ask(command="run", steps=steps)) for name, worker in workers.items()},
            [args.steps_per_round] * args.rounds,
            warmup_item=args.warmup_steps,
            progress=progress,
        )
        if args.profile_steps:  # after the timed rounds, so that the profiler's cost touches no figure
            for name, worker in workers.items():
                results[name]["profile"] = worker.ask(command="run", steps=args.profile_steps, profile=True)["profile"]
                print("\n".join(profile_lines(name, results[name]["profile"])), file=sys.stderr, flush=True)
    finally:
        for worker in workers.values():
            worker.stop()
        if os.environ.get("TORCH_LOGS"):
            for name, worker in workers.items():
                results.setdefault(name, {})["torch_logs"] = torch_logs(name, worker.log)
    for name in workers:  # the time of each command, by the timer; the rest, as its worker counted it
        warmup = {**timings.warmup_returned[name], "seconds": timings.warmup_seconds[name]}
        rounds = [{**row, "seconds": timings.seconds[name][i][0]} for i, row in enumerate(timings.returned[name])]
        results[name].update(warmup=warmup, rounds=rounds)
    return results, timings.order
