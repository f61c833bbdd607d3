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
import sys
import tempfile
from pathlib import Path

import torch
from bench import Record, interleave, options
from bench.figures import read_json
from bench.processes import Channel, Worker, build_trainer, prepare_data

from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.training import parse_args

CONTESTANTS = {
    "fp32": ["--mixed-precision", "no", "--attn-implementation", "sdpa"],
    "bf16_sdpa": ["--mixed-precision", "bf16", "--attn-implementation", "sdpa"],
    "bf16": ["--mixed-precision", "bf16", "--attn-implementation", "eager"],
}
"""Each contestant's ``train`` options over the multi30k preset."""


def worker(name: str, data: Path) -> None:
    """One contestant's `Trainer` (`bench.build_trainer`), driven over stdin/stdout (`bench.Channel`): ``step``
    (with the step's dropout seed) takes a step and answers its non-padding tokens; ``translate`` answers the
    translations of ``sources``."""
    from bench.serving import translate

    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training import build_model_config
    from vanilla_transformer.training.checkpoints import load_weights
    from vanilla_transformer.training.step import to_device

    channel = Channel()
    config = parse_args(["--preset", "multi30k", *CONTESTANTS[name]])
    torch.manual_seed(config.optimization.seed)  # the same initial weights in every process
    trainer = build_trainer(config, data, VanillaTransformerForConditionalGeneration(build_model_config(config.model)))
    batches, device = trainer.batches(), trainer.accelerator.device
    while (command := channel.receive())["command"] != "stop":
        if command["command"] == "step":
            micro_batches = [to_device(next(batches), device) for _ in range(trainer.grad_accum)]
            torch.manual_seed(command["seed"])  # the same dropout masks for all
            channel.send(tokens=trainer.train_step(micro_batches).stats["tokens"].item())
        else:  # translate, in fp32: the trained weights in a plain model
            plain = VanillaTransformerForConditionalGeneration(build_model_config(config.model)).eval()
            load_weights(plain, trainer.state_dict()["model"])
            channel.send(translations=translate(plain, trainer.tokenizer, command["sources"], batch_size=64))


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__)
    parser.add_argument("--steps", type=int, default=300, help="training steps of each model")
    parser.add_argument("--test-sentences", type=int, default=500, help="test sentences translated for BLEU")
    parser.add_argument("--data-dir", help="the Multi30k files (default: $VANILLA_TRANSFORMER_DATA/multi30k)")
    parser.add_argument("--worker", choices=list(CONTESTANTS), help=argparse.SUPPRESS)  # internal: one contestant
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)  # internal: the coordinator's data folder
    args = parser.parse_args(argv)
    options.check(args, {"--steps": 1, "--test-sentences": 1, "--threads": 1})
    if args.worker:
        torch.set_num_threads(args.threads)
        worker(args.worker, args.data)
        return 0
    record = Record(__file__, argv)
    with tempfile.TemporaryDirectory(prefix="benchmark-precision-") as folder:
        train_options = ["--preset", "multi30k", *(["--data-dir", args.data_dir] if args.data_dir else [])]
        config, corpus, _, _ = prepare_data(train_options, Path(folder))  # --data-dir, else $VANILLA_TRANSFORMER_DATA
        sources, references = map(list, zip(*corpus.load("test")[: args.test_sentences], strict=True))
        workers = {
            name: Worker(
                __file__, ["--worker", name, "--data", folder], args.threads, Path(folder, f"{name}.log"), name
            )
            for name in CONTESTANTS
        }
        try:  # each step answers its tokens, which the timer keeps (`Timings.returned`)
            steps = {
                name: (lambda step, w=w: w.ask(command="step", seed=step)["tokens"]) for name, w in workers.items()
            }

            def progress(step: int, timings) -> None:
                if (step + 1) % 50 == 0:
                    speeds = (f"{n} {sum(timings.returned[n]) / timings.total(n):,.0f} tok/s" for n in workers)
                    print(f"step {step + 1}: " + ", ".join(speeds))

            # No warm-up: every model trains exactly --steps steps, on which BLEU is then compared.
            timings = interleave(steps, range(args.steps), warmup=0, progress=progress)
            bleu = {
                name: compute_bleu(w.ask(command="translate", sources=sources)["translations"], references)["score"]
                for name, w in workers.items()
            }
        finally:
            for process in workers.values():
                process.stop()
    tokens = {name: sum(timings.returned[name]) for name in CONTESTANTS}
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


FIGURES = {"precision": precision_figures}


if __name__ == "__main__":
    sys.exit(main())
