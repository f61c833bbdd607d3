"""Contestants in processes of their own, and our `Trainer` as ``vanilla-transformer train`` builds it.

Accelerate keeps one process-wide state (the first Accelerator's precision and compilation), so a benchmark that
compares training settings runs each contestant in a long-lived worker process: the coordinator's `Worker` sends it
JSON lines on its stdin and reads its answers on its stdout; the worker's `Channel` keeps the protocol apart from
whatever libraries print. `prepare_data` writes the tokenizer and token cache that `train` would (so that every
worker trains on the same ids), and `build_trainer` builds the `Trainer` from ``train`` options.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


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
