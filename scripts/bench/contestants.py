"""The training contestants the benchmarks share, each in a worker process of its own (`processes`), written once:

* ``ours``: our `Trainer` built from ``train`` options (`ours_config`), on its own batches of the token cache;
  ``ours:default`` is ``train``'s default as-is (no precision, compilation, Adam or attention given) and records
  what that default resolved to;
* ``trainer``: MarianMT of the same initial weights (`marian_twin`) in transformers' `Seq2SeqTrainer`, its own loop;
* ``torch``: plain PyTorch (`plain_torch.PlainTransformer`) on our batches, eager or ``torch.compile``\\d.

A contestant is ``KIND:key=value,...`` (`Spec`) with the keys of `SPEC_KEYS` (keys left out take the first value)
and the `EXTRA_KEYS` that any kind may add. The coordinator starts one worker per contestant (`run_contestants`),
drives them with the kit's interleaved timer, and summarises each (`summarise`, `add_mfu`, `compare`).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from vanilla_transformer.data import IGNORE_INDEX

from .processes import Channel, Tally, build_trainer, serve
from .timing import matmul_rate
from .twin import marian_twin
from .workloads import adam

PRECISION = {
    "precision": {"no": "fp32", "bf16": "bf16"},
    "compile": {"no": "eager", "inductor": "compiled (inductor)"},
}
ATTENTION = {"attn": {"sdpa": "SDPA", "eager": "eager attention"}}
SPEC_KEYS: dict[str, dict[str, dict[str, str]]] = {
    "ours": {
        "precision": PRECISION["precision"],
        "compile": {**PRECISION["compile"], "whole": "compiled (inductor), the whole model at once"},
        "adam": {"default": "Adam", "foreach": "foreach Adam", "fused": "fused Adam"},
        **ATTENTION,
    },
    "trainer": {**PRECISION, "optim": {"adamw_torch_fused": "fused AdamW", "adamw_torch": "AdamW"}, **ATTENTION},
    "torch": PRECISION,
}
"""The settings of each kind of contestant, and their values (the first is the default) with their words in the
published table. Ours compiles the whole model as one graph too (``whole``), as before regional compilation."""
EXTRA_KEYS: dict[str, dict[str, str]] = {
    "cudnn": {"on": "", "off": "cuDNN attention off", "only": "cuDNN attention alone, ragged"},
    "micro": {"preset": "", "one": "the step as one micro-batch", "fixed": "micro-batches not planned from memory"},
}  # micro: not the Trainer's, whose batch size is fixed
"""Settings any kind may add, named only where not the first value: cuDNN's SDPA backend switched off in the
worker (``torch.backends.cuda.enable_cudnn_sdp(False)``, what a user can set), or on CUDA the only one left on
(flash, memory-efficient and math attention switched off, so that our model's attention keeps torch's choice, cuDNN),
on its ragged path that does not rebuild per sequence length (``TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1``, set in the
worker; pytorch#155958); the step's tokens as one
micro-batch instead of ``--grad-accum`` micro-batches of ``--max-tokens`` (ours and torch); and, for
``ours:default``, those ``--grad-accum`` micro-batches of ``--max-tokens`` instead of the plan ``train`` makes from
the GPU's memory (the wmt14 presets' 4 x 12,500 tokens, against which the plan is measured)."""
KINDS = {"ours": "ours", "trainer": "MarianMT + Seq2SeqTrainer", "torch": "plain PyTorch"}


@dataclass(frozen=True)
class Spec:
    """One contestant: its kind, its settings (every key of `SPEC_KEYS` filled in; none for ``ours:default``, whose
    settings are ``train``'s) and its extra settings."""

    kind: str
    settings: tuple[tuple[str, str], ...]
    extras: tuple[tuple[str, str], ...] = ()

    @property
    def default(self) -> bool:
        return self.kind == "ours" and not self.settings

    @classmethod
    def parse(cls, text: str) -> Spec:
        kind, _, rest = text.strip().partition(":")
        if kind not in SPEC_KEYS:
            raise ValueError(f"contestant {text!r}: the kind must be one of {sorted(SPEC_KEYS)}")
        keys, given, items = SPEC_KEYS[kind], {}, list(filter(None, rest.split(",")))
        default = kind == "ours" and "default" in items
        extra_keys = {key: values for key, values in EXTRA_KEYS.items() if kind != "trainer" or key != "micro"}
        allowed = {**({} if default else keys), **extra_keys}
        for item in (item for item in items if not (default and item == "default")):
            key, equals, value = item.partition("=")
            if not equals or value not in allowed.get(key, ()):
                choices = "; ".join(f"{name}={'|'.join(values)}" for name, values in allowed.items())
                raise ValueError(f"contestant {text!r}: bad setting {item!r}; {kind} takes {choices}")
            given[key] = value
        settings = () if default else tuple((key, given.get(key, next(iter(values)))) for key, values in keys.items())
        first = {key: next(iter(values)) for key, values in EXTRA_KEYS.items()}
        extras = tuple((key, given[key]) for key in EXTRA_KEYS if given.get(key, first[key]) != first[key])
        return cls(kind, settings, extras)

    def __getitem__(self, key: str) -> str | None:
        """A setting's value; None for those of ``ours:default``, which ``train`` chooses."""
        values = dict(self.settings) | dict(self.extras)
        return values.get(key, next(iter(EXTRA_KEYS[key])) if key in EXTRA_KEYS else None)

    @property
    def name(self) -> str:
        words = ["default"] if self.default else [f"{key}={value}" for key, value in self.settings]
        return f"{self.kind}:" + ",".join(words + [f"{key}={value}" for key, value in self.extras])

    @property
    def is_baseline(self) -> bool:
        """fp32, eager, and the other settings at their defaults: the side's reference."""
        keys = SPEC_KEYS[self.kind]
        return bool(self.settings) and not self.extras and all(v == next(iter(keys[k])) for k, v in self.settings)


def parse_contestants(text: str) -> list[Spec]:
    """Contestants from a comma or space separated list: a word with ``:`` starts one, ``key=value`` words extend it."""
    specs: list[str] = []
    for word in filter(None, re.split(r"[,\s]+", text)):
        if ":" in word or word in SPEC_KEYS:
            specs.append(word if ":" in word else word + ":")
        elif ("=" in word or word == "default") and specs:
            specs[-1] += ("" if specs[-1].endswith(":") else ",") + word
        else:
            raise ValueError(f"--contestants: {word!r} is neither KIND:key=value nor key=value after one")
    parsed = [Spec.parse(spec) for spec in specs]
    names = [spec.name for spec in parsed]
    if len(set(names)) < len(names) or not parsed:
        raise ValueError(f"--contestants must name distinct contestants, got {names}")
    return parsed


def label(name: str, row: dict[str, Any] | None = None) -> str:
    """A contestant's words in the published table: ``ours:precision=no,compile=inductor,...`` as "ours: fp32,
    compiled (inductor), ..."; ``ours:default`` as "ours: train's default (what it resolved to, from `row`: settings, micro-batches)"."""
    spec = Spec.parse(name)
    words = [SPEC_KEYS[spec.kind][key][value] for key, value in spec.settings]
    if spec.default:
        row = row or {}
        said = [values.get(str(row[key]), str(row[key])) for key, values in SPEC_KEYS["ours"].items() if key in row]
        plan = row.get("resolved") or {}
        if "micro_batches" in plan:
            said.append(f"{plan['micro_batches']} x {plan['tokens_per_micro_batch']:,} tokens")
        words = ["train's default" + (f" ({', '.join(said)})" if said else "")]
    return f"{KINDS[spec.kind]}: {', '.join(words + [EXTRA_KEYS[key][value] for key, value in spec.extras])}"


# Workers: one contestant each, driven over stdin/stdout


def model_config(args):
    """The model of ``--model-size`` and ``--vocab-size``: our configuration, which every kind's model follows."""
    from vanilla_transformer import VanillaTransformerConfig

    return VanillaTransformerConfig.from_preset(args.model_size, vocab_size=args.vocab_size)


def initial_model(args, spec: Spec):
    """Our model with the seed's initial weights (the same in every worker), in the contestant's attention."""
    from vanilla_transformer import VanillaTransformerForConditionalGeneration

    torch.manual_seed(args.seed)
    model = VanillaTransformerForConditionalGeneration(model_config(args))
    if spec["attn"] is not None:
        model.set_attn_implementation(spec["attn"])
    return model


def micro_batches(args, spec: Spec) -> tuple[int, int]:
    """The contestant's padded tokens per micro-batch and micro-batches per step (``micro=one``: one of them all).
    Plain PyTorch takes ``train``'s default's plan where the coordinator passed it (``args.default_plan``, from the
    ``ours:default`` worker), so that both step on the same token batches cut the same way."""
    if spec["micro"] == "one":
        return args.max_tokens * args.grad_accum, 1
    if spec.kind == "torch" and spec["micro"] == "preset" and getattr(args, "default_plan", None):
        return tuple(args.default_plan)
    return args.max_tokens, args.grad_accum


def ours_config(args, spec: Spec):
    """Our contestant as ``train`` options: ``--preset`` (default: multi30k), with the benchmark's model, vocabulary,
    micro-batches and seed, and the contestant's precision, compilation, Adam and attention (none for the
    default: what ``train`` chooses). The default's micro-batches are the preset's plan, as ``train`` makes it
    (``--fill-gpu-memory`` included), unless the benchmark was given them (``args.planned`` false) or ``micro`` is
    set."""
    from vanilla_transformer.training import parse_args

    options = ["--preset", args.preset or "multi30k", "--model", args.model_size, "--vocab-size", str(args.vocab_size)]
    options += ["--seed", str(args.seed)]
    if not (spec.default and args.planned and spec["micro"] == "preset"):
        max_tokens, grad_accum = micro_batches(args, spec)
        options += ["--max-tokens", str(max_tokens), "--grad-accum", str(grad_accum)]
    if not spec.default:
        backend = {"whole": "inductor"}.get(spec["compile"], spec["compile"])
        options += ["--mixed-precision", spec["precision"], "--dynamo-backend", backend]
        options += ["--attn-implementation", spec["attn"]]
        adam_kernels = {"default": "auto"}.get(spec["adam"], spec["adam"])  # auto: torch's on the CPU, fused on CUDA
        options += ["--adam-implementation", adam_kernels]
    return parse_args(options)


def spec_settings(trainer) -> dict[str, str]:
    """What a built `Trainer`'s settings resolved to (`Trainer.resolved_settings`, as ``results.json`` records
    them) in the words of `SPEC_KEYS`: precision, compilation (layer by layer or whole), attention, Adam's kernels."""
    resolved, plugin = trainer.resolved_settings(), trainer.accelerator.state.dynamo_plugin
    backend = resolved["dynamo_backend"] or "no"
    defaults = trainer.optimizer.optimizer.defaults if hasattr(trainer.optimizer, "optimizer") else {}
    return {
        "precision": resolved["mixed_precision"],
        "compile": backend if backend == "no" or plugin.use_regional_compilation else "whole",
        "attn": resolved["attn_implementation"],
        "adam": "fused" if defaults.get("fused") else "foreach" if defaults.get("foreach") else "default",
    }


def ours_trainer(args, spec: Spec):
    """Our contestant's `Trainer`, built from ``train`` options (`ours_config`) as `train` builds it: the
    Accelerator's precision and compilation, the model's attention and the micro-batch plan are ``train``'s."""
    if spec["compile"] == "whole":  # as `accelerate launch` without --dynamo_use_regional_compilation sets it
        os.environ["ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION"] = "false"
    config, model = ours_config(args, spec), initial_model(args, spec)
    return build_trainer(config, args.data, model, cpu=args.device == "cpu")


def ours_worker(args, spec: Spec, channel: Channel) -> None:
    """Our `Trainer` (`ours_trainer`) on its own batches of the token cache (`Trainer.batches`), timed step by step
    (`Trainer.train_step`); it reports what its settings resolved to."""
    from vanilla_transformer.training.step import to_device

    trainer = ours_trainer(args, spec)
    device, batches = trainer.accelerator.device, trainer.batches()
    meter = Tally(device, trainer.unwrapped.config)

    def step() -> tuple[list[dict], torch.Tensor]:
        started = time.perf_counter()
        taken = [to_device(next(batches), device) for _ in range(trainer.grad_accum)]
        meter.data_seconds += time.perf_counter() - started
        result = trainer.train_step(taken)
        return taken, result.stats["tokens"] if result is not None else torch.zeros((), device=device)

    serve(channel, meter, step, resolved=trainer.resolved_settings(), settings=spec_settings(trainer))


def torch_worker(args, spec: Spec, channel: Channel) -> None:
    """Plain PyTorch (`PlainTransformer`, our model's dimensions) on the batches ``train`` takes: the same token
    cache, `TokenBatchSampler` and seed; the package's Adam; bf16 autocast and ``torch.compile`` where asked."""
    from vanilla_transformer.data import TokenBatchSampler
    from vanilla_transformer.data.cache import TokenCorpus
    from vanilla_transformer.tokenization import PAD_ID

    from .plain_torch import PlainTransformer, plain_step

    device, config = torch.device(args.device), model_config(args)
    torch.manual_seed(args.seed)
    model = PlainTransformer(config).to(device).train()
    step_of = plain_step(
        torch.compile(model) if spec["compile"] != "no" else model,
        adam(model, 1e-4, "auto"),
        torch.bfloat16 if spec["precision"] == "bf16" else None,
    )
    corpus = TokenCorpus(args.data / "tokens")
    max_tokens, grad_accum = micro_batches(args, spec)
    sampler = TokenBatchSampler(corpus.lengths, max_tokens, seed=args.seed)

    def epochs() -> Iterator[dict[str, torch.Tensor]]:
        for epoch in range(sys.maxsize):
            sampler.set_epoch(epoch)
            yield from (corpus.collate(indices, PAD_ID) for indices in sampler)

    batches, meter = epochs(), Tally(device, config)

    def step() -> tuple[list[dict], torch.Tensor]:
        started = time.perf_counter()
        taken = [{k: v.to(device, non_blocking=True) for k, v in next(batches).items()} for _ in range(grad_accum)]
        meter.data_seconds += time.perf_counter() - started
        step_of(taken)
        return taken, sum(batch["attention_mask"].sum() + (batch["labels"] != IGNORE_INDEX).sum() for batch in taken)

    planned = spec["micro"] == "preset" and bool(getattr(args, "default_plan", None))
    serve(channel, meter, step, batches={"tokens_per_micro_batch": max_tokens, "micro_batches": grad_accum,
                                         "default_plan": planned})  # fmt: skip


def trainer_worker(args, spec: Spec, channel: Channel) -> None:
    """MarianMT (our initial weights) in `Seq2SeqTrainer`'s own loop, paused by a callback every command's steps."""
    from transformers import AutoTokenizer, DataCollatorForSeq2Seq, Seq2SeqTrainer, TrainerCallback

    examples = json.loads((args.data / "examples.json").read_text(encoding="utf-8"))
    tokenizer = AutoTokenizer.from_pretrained(args.data / "tokenizer")
    model = marian_twin(initial_model(args, spec))
    device = torch.device(args.device)
    meter = Tally(device, model.config)

    class CountingTrainer(Seq2SeqTrainer):
        """Counts the non-padding tokens of every batch the Trainer's loop trains on."""

        def training_step(self, model, inputs, *rest, **options):
            meter.add([inputs], inputs["attention_mask"].sum() + (inputs["labels"] != IGNORE_INDEX).sum(), steps=0)
            return super().training_step(model, inputs, *rest, **options)

    class Pause(TrainerCallback):
        """Reports every ``steps`` optimizer steps, then waits for the next command (stop ends training)."""

        def __init__(self) -> None:
            self.remaining = channel.receive().get("steps", 0)  # the warm-up

        def on_step_end(self, arguments, state, control, **kwargs):
            meter.steps += 1  # an optimizer step: --grad-accum micro-batches
            self.remaining -= 1
            if self.remaining > 0:
                return control
            channel.send(event="done", **meter.report())
            command = channel.receive()
            if command["command"] == "stop":
                control.should_training_stop = True
            else:
                self.remaining = command["steps"]
                meter.reset(profile=command.get("profile", False))
            return control

    trainer = CountingTrainer(
        model=model,
        args=trainer_arguments(args, spec, device),
        train_dataset=examples,
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=IGNORE_INDEX),
        processing_class=tokenizer,
    )
    batches = {"batch_size": args.batch_size, "micro_batches": args.grad_accum, "default_plan": False}  # fixed
    channel.send(event="ready", device=str(device), batches=batches)
    trainer.add_callback(Pause())  # blocks until the warm-up command
    meter.reset()
    trainer.train()


def trainer_arguments(args, spec: Spec, device: torch.device):
    """The Trainer's best settings for a translation model of this size, as its documentation recommends them, with
    the paper's Adam (our training settings' betas and epsilon)."""
    from transformers import Seq2SeqTrainingArguments

    from vanilla_transformer.training.config import OptimizationConfig

    paper, compiled = OptimizationConfig(), spec["compile"] != "no"
    return Seq2SeqTrainingArguments(
        output_dir=str(args.data / f"trainer-{os.getpid()}"), bf16=spec["precision"] == "bf16",
        torch_compile=compiled, **({"torch_compile_backend": spec["compile"]} if compiled else {}),
        train_sampling_strategy="group_by_length", per_device_train_batch_size=args.batch_size,
        gradient_accumulation_steps=args.grad_accum, label_smoothing_factor=0.1, optim=spec["optim"],
        adam_beta1=paper.adam_beta1, adam_beta2=paper.adam_beta2, adam_epsilon=paper.adam_eps, weight_decay=0.0,
        learning_rate=1.25e-3, lr_scheduler_type="inverse_sqrt", warmup_steps=500,  # the multi30k preset's peak
        max_steps=10**9, save_strategy="no", logging_strategy="no", report_to="none", dataloader_num_workers=0,
        use_cpu=device.type == "cpu", disable_tqdm=True, seed=1,
    )  # fmt: skip


CUDNN_RAGGED = {"TORCH_CUDNN_SDPA_AVOID_RECOMPILE": "1"}
"""What asks cuDNN's attention for its ragged path (torch >= 2.9, pytorch#155958), read when attention first runs."""


def cudnn_attention_only(device: str) -> None:
    """``cudnn=only``: cuDNN's ragged path asked for (`CUDNN_RAGGED`), and on CUDA cuDNN's SDPA backend the only one
    on. On the CPU (``--tiny``), which has no cuDNN attention, the backends stay as they are."""
    os.environ.update(CUDNN_RAGGED)
    if device == "cuda":
        for switch in ("flash", "mem_efficient", "math"):
            getattr(torch.backends.cuda, f"enable_{switch}_sdp")(False)
        torch.backends.cuda.enable_cudnn_sdp(True)


def worker_main(args) -> int:
    """A worker process's body (a benchmark's hidden ``--worker SPEC``): cuDNN's attention off if asked, then the
    contestant's kind."""
    channel = Channel()
    torch.set_num_threads(args.threads)
    spec = Spec.parse(args.worker)
    if spec["cudnn"] == "off":
        torch.backends.cuda.enable_cudnn_sdp(False)
    if spec["cudnn"] == "only":
        cudnn_attention_only(args.device)
    {"ours": ours_worker, "trainer": trainer_worker, "torch": torch_worker}[spec.kind](args, spec, channel)
    return 0


def summarise(spec: Spec, figures: dict[str, Any]) -> dict[str, Any]:
    """A contestant's throughput over all rounds, its per-round spread, tokens per step, and warm-up; for
    ``ours:default``, ``"default": true``, its settings as the other rows name theirs, and ``resolved``: what
    ``results.json`` records of them, the micro-batch plan included (`Trainer.resolved_settings`)."""
    rounds = figures["rounds"]
    total = {key: sum(r[key] for r in rounds) for key in ("steps", "seconds", "tokens", "positions", "data_seconds")}
    per_round = [r["tokens"] / r["seconds"] for r in rounds]
    chosen = {"default": True, **figures["settings"], "resolved": figures["resolved"]} if spec.default else {}
    return {
        "kind": spec.kind,
        **dict(spec.settings),
        **dict(spec.extras),
        **chosen,
        "batches": figures.get("batches"),
        "device": figures["device"],
        "tokens_per_second": total["tokens"] / total["seconds"],
        "round_tokens_per_second": {
            "median": statistics.median(per_round),
            "min": min(per_round),
            "max": max(per_round),
            "all": per_round,
        },
        "tokens_per_step": total["tokens"] / total["steps"],
        "padded_tokens_per_step": total["positions"] / total["steps"],
        "steps": total["steps"],
        "seconds": total["seconds"],
        "data_seconds": total["data_seconds"] if spec.kind != "trainer" else None,
        "compilations_measured": sum(r["compilations"] or 0 for r in rounds),  # recompilations: see warmup_steps
        "warmup_seconds": figures["warmup"]["seconds"],
        "warmup_compilations": figures["warmup"]["compilations"],
        "model_flops_per_second": sum(r["flops"] for r in rounds) / total["seconds"],
        "peak_memory_bytes": max((r["peak_memory_bytes"] or 0 for r in rounds), default=0) or None,
        "profile": figures.get("profile"),
        "torch_logs": figures.get("torch_logs"),
    }


def add_mfu(summaries: dict[str, dict[str, Any]], device: torch.device) -> dict[str, float]:
    """Each contestant's model-FLOPs utilisation: its model FLOP/s over the device's matmul rate in its precision
    (bf16, fp16 or fp32; `matmul_rate`, measured here once the workers are gone); the rates measured."""
    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "no": torch.float32}
    rates = {p: matmul_rate(device, dtypes[p]) for p in sorted({row["precision"] for row in summaries.values()})}
    for row in summaries.values():
        row["matmul_flops_per_second"] = rates[row["precision"]]
        row["mfu"] = row["model_flops_per_second"] / rates[row["precision"]]
    return rates


def compare(summaries: dict[str, dict[str, Any]], specs: list[Spec]) -> dict[str, Any]:
    """Each kind's best (fastest) contestant, the ratios to each kind's fp32 eager baseline and to the Trainer's
    best, ours_best / trainer_best, and ``train``'s default against plain PyTorch's best and the Trainer's."""
    best: dict[str, str | None] = {}
    for kind in SPEC_KEYS:
        names = [spec.name for spec in specs if spec.kind == kind and spec.name in summaries]
        best[kind] = max(names, key=lambda n: summaries[n]["tokens_per_second"]) if names else None
    speed = {kind: summaries[name]["tokens_per_second"] if name else None for kind, name in best.items()}
    baselines = {spec.kind: spec.name for spec in specs if spec.is_baseline and spec.name in summaries}
    for spec in specs:
        if spec.name in summaries:
            row, baseline = summaries[spec.name], baselines.get(spec.kind)
            row["vs_baseline"] = (
                row["tokens_per_second"] / summaries[baseline]["tokens_per_second"] if baseline else None
            )
            row["vs_trainer_best"] = row["tokens_per_second"] / speed["trainer"] if speed["trainer"] else None
    compared = {
        "ours_best": best["ours"],
        "trainer_best": best["trainer"],
        "baselines": baselines,
        "ours_best_tokens_per_second": speed["ours"],
        "trainer_best_tokens_per_second": speed["trainer"],
        "ratio": speed["ours"] / speed["trainer"] if speed["ours"] and speed["trainer"] else None,
    }
    if best["torch"]:
        compared |= {"torch_best": best["torch"], "torch_best_tokens_per_second": speed["torch"]}
    default = next((spec.name for spec in specs if spec.default and spec.name in summaries), None)
    if default:
        ours = summaries[default]["tokens_per_second"]
        compared["default"] = default
        compared |= {f"default_vs_{kind}_best": ours / speed[kind] for kind in ("torch", "trainer") if speed[kind]}
    return compared
