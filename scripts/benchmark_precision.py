"""bf16 against fp32 training on the CPU, at the ``multi30k`` preset: tokens/s, then BLEU after the same steps.

Three copies of the preset's model (N=3, d_model=256; same initial weights, same dropout seeds) train side by side
on the same Multi30k batches (4,096 tokens, the preset's), interleaved, on a fixed number of threads: for every batch
one step of each of these, in an order reversed every batch (`bench.interleave`). Each is a `Trainer` built from
``train``'s options as ``train`` builds it, in a process of its own (Accelerate keeps one precision per process),
which takes a step when asked (a pipe's round trip, well under a millisecond, against steps of a second):

- ``fp32``: ``--preset multi30k --mixed-precision no --attn-implementation sdpa`` (transformers' SDPA attention,
  the model's default);
- ``bf16_sdpa``: ``--mixed-precision bf16`` (Accelerate's CPU autocast: float32 weights and Adam, bf16 matmuls),
  SDPA attention;
- ``bf16``: ``--mixed-precision bf16 --attn-implementation eager``, the preset's choice.

After ``--steps`` steps each model translates the first ``--test-sentences`` sentences of test_2016_flickr (beam 4,
length penalty 0.6, in fp32 for all, so that only the training precision differs), scored with sacreBLEU. Prints
one line::

    PRECISION steps=... fp32_tokens_per_s=... bf16_sdpa_tokens_per_s=... bf16_tokens_per_s=... speedup=... ...

Usage::

    python scripts/benchmark_precision.py --steps 300 --output docs/results/precision_multi30k.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from bench import Record, interleave
from bench.figures import read_json

from vanilla_transformer.data import clean_pairs, split_files, tokenize_pairs
from vanilla_transformer.data.cache import save_token_cache
from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import parse_args
from vanilla_transformer.training.setup import RunCorpus

CONTESTANTS = {
    "fp32": ["--mixed-precision", "no", "--attn-implementation", "sdpa"],
    "bf16_sdpa": ["--mixed-precision", "bf16", "--attn-implementation", "sdpa"],
    "bf16": ["--mixed-precision", "bf16", "--attn-implementation", "eager"],
}
"""Each contestant's ``train`` options over the multi30k preset."""


def worker(name: str, data: Path, threads: int) -> None:
    """One contestant's `Trainer`, driven over stdin/stdout (JSON lines): ``step`` (with the step's dropout seed)
    takes a step and answers its non-padding tokens; ``translate`` answers the translations of ``sources``."""
    from accelerate import Accelerator
    from bench.serving import translate
    from transformers import AutoTokenizer

    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.data.cache import TokenCorpus
    from vanilla_transformer.training import Trainer, build_model_config
    from vanilla_transformer.training.checkpoints import load_weights
    from vanilla_transformer.training.run import accelerator_options
    from vanilla_transformer.training.step import to_device

    out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")  # the protocol; anything else printed: stderr
    os.dup2(2, 1)
    torch.set_num_threads(threads)
    config = parse_args(["--preset", "multi30k", *CONTESTANTS[name]])
    tokenizer = AutoTokenizer.from_pretrained(data / "tokenizer")
    torch.manual_seed(config.optimization.seed)  # the same initial weights in every process
    model = VanillaTransformerForConditionalGeneration(build_model_config(config.model))
    accelerator = Accelerator(**accelerator_options(config.optimization))
    trainer = Trainer(config, accelerator, model, tokenizer, TokenCorpus(data / "tokens"))
    batches = trainer.batches()
    for line in sys.stdin:
        command = json.loads(line)
        if command["command"] == "step":
            micro_batches = [to_device(next(batches), accelerator.device) for _ in range(trainer.grad_accum)]
            torch.manual_seed(command["seed"])  # the same dropout masks for all
            taken = trainer.train_step(micro_batches)
            out.write(json.dumps(taken.stats["tokens"].item()) + "\n")
        else:  # translate, in fp32: the trained weights in a plain model
            plain = VanillaTransformerForConditionalGeneration(build_model_config(config.model)).eval()
            load_weights(plain, trainer.state_dict()["model"])
            out.write(json.dumps(translate(plain, tokenizer, command["sources"], batch_size=64)) + "\n")


def start_worker(name: str, data: Path, threads: int) -> subprocess.Popen:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", name, "--data", str(data)]
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(
        [*command, "--threads", str(threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=environment,
    )  # fmt: skip


def ask(process: subprocess.Popen, **command: Any) -> Any:
    process.stdin.write(json.dumps(command) + "\n")
    process.stdin.flush()
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"a worker ended (exit {process.wait()}); its error is printed above")
    return json.loads(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="training steps of each model")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (default: %(default)s)")
    parser.add_argument("--test-sentences", type=int, default=500, help="test sentences translated for BLEU")
    parser.add_argument("--data-dir", help="the Multi30k files (default: $VANILLA_TRANSFORMER_DATA/multi30k)")
    parser.add_argument("--output", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--worker", choices=list(CONTESTANTS), help=argparse.SUPPRESS)  # internal: one contestant
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)  # internal: the coordinator's data folder
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.data, args.threads)
        return 0
    record = Record(__file__, argv)
    config = parse_args(["--preset", "multi30k", *(["--data-dir", args.data_dir] if args.data_dir else [])])
    corpus = RunCorpus.of(config.data, config.preset)  # names --data-dir and $VANILLA_TRANSFORMER_DATA if unset
    pairs, _ = clean_pairs(corpus.load("train"))
    tokenizer = train_tokenizer((text for pair in pairs for text in pair), config.model.vocab_size)
    pairs, _ = clean_pairs(pairs, max_length=config.data.max_length, tokenizer=tokenizer)
    source_file, reference_file = split_files(corpus.spec, corpus.names["test"])
    sources = source_file.read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    references = reference_file.read_text(encoding="utf-8").splitlines()[: args.test_sentences]
    tokens = dict.fromkeys(CONTESTANTS, 0.0)
    with tempfile.TemporaryDirectory(prefix="benchmark-precision-") as folder:
        tokenizer.save_pretrained(Path(folder) / "tokenizer")
        save_token_cache(tokenize_pairs(pairs, tokenizer), config.model.vocab_size, Path(folder) / "tokens")
        workers = {name: start_worker(name, Path(folder), args.threads) for name in CONTESTANTS}
        try:

            def train_step(name: str):
                def run(step: int) -> None:
                    tokens[name] += ask(workers[name], command="step", seed=step)

                return run

            def progress(step: int, timings) -> None:
                if (step + 1) % 50 == 0:
                    print(
                        f"step {step + 1}: "
                        + ", ".join(f"{n} {tokens[n] / timings.total(n):,.0f} tok/s" for n in workers)
                    )

            # No warm-up: every model trains exactly --steps steps, on which BLEU is then compared.
            timings = interleave(
                {name: train_step(name) for name in workers}, range(args.steps), warmup=0, progress=progress
            )
            bleu = {
                name: compute_bleu(ask(process, command="translate", sources=sources), references)["score"]
                for name, process in workers.items()
            }
        finally:
            for process in workers.values():
                process.stdin.close()
                process.wait()
    if len(set(tokens.values())) != 1:
        raise RuntimeError(f"the contestants trained on different batches: {tokens}")
    seconds = {name: timings.total(name) for name in CONTESTANTS}
    result = {
        "steps": args.steps,
        "tokens_per_step": config.optimization.max_tokens,
        "threads": args.threads,
        **{f"{name}_tokens_per_s": tokens[name] / seconds[name] for name in CONTESTANTS},
        "speedup": seconds["fp32"] / seconds["bf16"],
        "speedup_bf16_sdpa": seconds["fp32"] / seconds["bf16_sdpa"],
        **{f"{name}_bleu": bleu[name] for name in CONTESTANTS},
        "test_sentences": len(sources),
    }
    print(
        f"PRECISION steps={args.steps} "
        + " ".join(f"{name}_tokens_per_s={result[f'{name}_tokens_per_s']:.0f}" for name in CONTESTANTS)
        + f" speedup={result['speedup']:.2f} speedup_bf16_sdpa={result['speedup_bf16_sdpa']:.2f} "
        + " ".join(f"{name}_bleu={bleu[name]:.2f}" for name in CONTESTANTS)
    )
    record.write(result, args.output)
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers
# --------------------------------------------------------------------------------------------------------------------


def precision_figures(results: Path) -> str:
    """bf16 training against fp32 (scripts/benchmark_precision.py)."""
    run = read_json(results, "precision_multi30k.json")
    return (
        f"fp32 with SDPA attention {run['fp32_tokens_per_s']:,.0f} tokens/s; bf16 autocast with SDPA "
        f"{run['bf16_sdpa_tokens_per_s']:,.0f} ({run['speedup_bf16_sdpa']:.2f}×); bf16 autocast with eager attention "
        f"{run['bf16_tokens_per_s']:,.0f} ({run['speedup']:.2f}×); test BLEU after {run['steps']} steps "
        f"{run['fp32_bleu']:.2f}, {run['bf16_sdpa_bleu']:.2f} and {run['bf16_bleu']:.2f} "
        f"({run['test_sentences']} sentences)"
    )


FIGURES = {
    "precision": precision_figures,
}


if __name__ == "__main__":
    sys.exit(main())
