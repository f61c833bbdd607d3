"""Speed and memory of the model against MarianMT of the same architecture, and against CTranslate2.

`MarianMTModel` configured as the paper's Transformer (ReLU, sqrt(d_model)-scaled embeddings shared three ways, a
zero ``final_logits_bias``) is the same network as ours: our parameter names are Marian's, so one state dict loads
into both once Marian's layout of the model dimension is applied (`bench.marian_twin`, which is
`vanilla_transformer.export.marian.vanilla_to_marian`). Both models then compute the same function, and every
comparison here runs them on the same weights and the same batches.

Method: contestants run interleaved on each batch (`bench.interleave`: A, B, then B, A in the next round), each
batch's median time is kept, and a throughput is the work of all batches over the sum of their medians. Load from other processes then
slows both alike, so the ratios are what to read; absolute figures describe this machine at that moment only.

Sections (:func:`run` takes any subset):

* ``train``: forward, backward and Adam step (the paper's betas, fused implementation, the same for both), in real
  (non-padding) target tokens per second, on batches of randomly drawn sentence pairs (unsorted, as many users
  batch; about 45% padding) and on token-bucketed batches (`TokenBatchSampler`); and the model-FLOPs utilisation
  (MFU): FLOPs of the model's matrix products on the real tokens (:func:`forward_flops`) per second, over the
  matmul rate of this device in the same dtype, measured in the same run (a square matmul, as a third contestant).
* ``generate``: greedy and beam-4 `generate()`, generated tokens per second; CTranslate2 (float32 and int8) on the
  same batches when it is installed. Our `generate()` runs the incremental decoder of
  ``generation_vanilla_transformer.py``; MarianMT's runs transformers' loop. Both must return the same tokens.
* ``memory``: peak memory of a training step and of `generate()`. On CUDA, ``torch.cuda.max_memory_allocated``
  above the memory allocated before; on CPU the same quantity from the PyTorch profiler's allocation events: the
  peak of live tensor bytes allocated during the call. Both exclude allocator caching and non-tensor memory.
* ``scaling``: training-step throughput and peak memory of our model for sequence lengths 32 to 1024, with SDPA
  and with eager attention (which stores every [T, T] attention matrix for the backward pass).

The data are Multi30k English-German sentence pairs with a byte-level BPE vocabulary trained on them (read from
``--data-dir``, by default ``$VANILLA_TRANSFORMER_DATA/multi30k``, when present), or else synthetic pairs with
log-normal lengths fitted to it.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from bench import Record, environment_of, interleave, marian_twin, matmul, peak_memory, write_json

from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.data import shared_data_dir
from vanilla_transformer.data.batching import TranslationCollator
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration

SIZES = ("tiny", "small", "base")
"""Model sizes, presets of `VanillaTransformerConfig.from_preset`: ``base`` is the paper's base model; ``small`` a
3+3-layer d_model=256 model; ``tiny`` for tests."""

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
"""fp32; or bf16: mixed-precision training (float32 weights and Adam, bf16 matmuls) and bf16 generate()."""

DEFAULT_DATA_DIR = shared_data_dir("multi30k")
"""Multi30k in ``$VANILLA_TRANSFORMER_DATA`` (`vanilla_transformer.data.DATA_DIR_VARIABLE`), if set."""

# Log-normal fits of Multi30k train lengths in tokens of an 8k byte-level BPE (</s> included): log-mean, log-std.
SYNTHETIC_SOURCE_LENGTHS = (2.685, 0.295)
SYNTHETIC_TARGET_LENGTHS = (2.709, 0.329)

PAD, BOS, EOS = 0, 2, 3


@dataclasses.dataclass
class Settings:
    """What to run and how. The defaults are the CPU benchmark of the README."""

    size: str = "small"
    vocab_size: int = 8000
    device: str = "cpu"
    dtype: str = "fp32"
    threads: int | None = 2
    attn_implementation: str = "sdpa"
    batch_size: int = 32
    max_tokens: int | None = None
    num_batches: int = 4
    gen_batch_size: int = 16
    max_new_tokens: int = 40
    num_beams: tuple[int, ...] = (1, 4)
    repeats: int = 3
    scaling_lengths: tuple[int, ...] = (32, 64, 128, 256, 512, 1024)
    scaling_batch_size: int = 2
    data_dir: str | None = str(DEFAULT_DATA_DIR) if DEFAULT_DATA_DIR else None
    max_pairs: int = 12000
    ctranslate2: bool = True
    seed: int = 0

    def __post_init__(self):
        if self.size not in SIZES:
            raise ValueError(f"size={self.size!r}; choose one of {sorted(SIZES)}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r}; choose one of {sorted(DTYPES)}")
        for name in ("batch_size", "num_batches", "gen_batch_size", "max_new_tokens", "repeats", "scaling_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {name}={getattr(self, name)}")

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.device)

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


# --------------------------------------------------------------------------------------------------------------------
# The two models
# --------------------------------------------------------------------------------------------------------------------


def model_config(size: str, vocab_size: int, **overrides) -> VanillaTransformerConfig:
    """A configuration of one of :data:`SIZES`, with the paper's dropout 0.1 unless overridden."""
    return VanillaTransformerConfig.from_preset(size, **{"vocab_size": vocab_size, "dropout": 0.1, **overrides})


def build_pair(config: VanillaTransformerConfig, settings: Settings, seed: int | None = None):
    """Our model (initialised with `seed`) and its Marian twin, on the benchmark's device (float32 weights)."""
    torch.manual_seed(settings.seed if seed is None else seed)
    config = copy.deepcopy(config)
    config._attn_implementation = settings.attn_implementation
    ours = VanillaTransformerForConditionalGeneration(config).to(settings.torch_device)
    return ours, marian_twin(ours)


# --------------------------------------------------------------------------------------------------------------------
# Data: realistic sentence lengths, random and token-bucketed batches
# --------------------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Corpus:
    """Tokenized sentence pairs, each side ending in ``</s>``; `tokens` names every id (for CTranslate2)."""

    pairs: list[tuple[list[int], list[int]]]
    tokens: list[str]
    description: str


def load_corpus(vocab_size: int, data_dir: str | None = None, max_pairs: int = 12000, seed: int = 0) -> Corpus:
    """Multi30k pairs in a BPE vocabulary of `vocab_size` trained on them, or synthetic pairs if the data are absent."""
    data = Path(data_dir) if data_dir else None
    if data is not None and (data / "train.en").is_file() and (data / "train.de").is_file():
        from vanilla_transformer.data import CorpusSpec
        from vanilla_transformer.data import load_corpus as read_corpus
        from vanilla_transformer.tokenization import train_tokenizer

        english, german = map(
            list, zip(*read_corpus(CorpusSpec("text", data_dir=str(data)), "train")[:max_pairs], strict=True)
        )
        tokenizer = train_tokenizer(english + german, vocab_size)
        encoded = tokenizer(english, text_target=german)
        pairs = list(zip(encoded["input_ids"], encoded["labels"], strict=True))
        tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
        description = f"Multi30k en-de train, first {len(pairs)} pairs, byte-level BPE of {len(tokenizer)} tokens"
    else:
        rng = np.random.default_rng(seed)
        count = max_pairs

        def lengths(log_mean, log_std):
            return np.clip(np.rint(rng.lognormal(log_mean, log_std, count)), 2, 200).astype(int)

        pairs = []
        for source_length, target_length in zip(
            lengths(*SYNTHETIC_SOURCE_LENGTHS), lengths(*SYNTHETIC_TARGET_LENGTHS), strict=True
        ):
            source = rng.integers(EOS + 1, vocab_size, source_length - 1).tolist() + [EOS]
            target = rng.integers(EOS + 1, vocab_size, target_length - 1).tolist() + [EOS]
            pairs.append((source, target))
        tokens = ["<pad>", "<unk>", "<s>", "</s>"]
        description = f"{count} synthetic pairs, log-normal lengths fitted to Multi30k, random ids"
    tokens = tokens + [f"<unused{i}>" for i in range(len(tokens), vocab_size)]
    return Corpus(pairs=pairs, tokens=tokens, description=description)


def collate(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and ``labels`` (-100 at padding): `TranslationCollator`'s."""
    return TranslationCollator(PAD)([{"input_ids": source, "labels": target} for source, target in pairs])


def random_batches(corpus: Corpus, batch_size: int, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """`count` batches of `batch_size` pairs drawn at random: unsorted, so padded as a user's shuffled batches."""
    rng = np.random.default_rng(seed)
    return [
        collate([corpus.pairs[i] for i in rng.choice(len(corpus.pairs), batch_size, replace=False)])
        for _ in range(count)
    ]


def token_batches(corpus: Corpus, max_tokens: int, count: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """`count` batches of `TokenBatchSampler`: pairs of similar lengths, at most `max_tokens` padded tokens each."""
    from vanilla_transformer.data import TokenBatchSampler

    lengths = [(len(source), len(target)) for source, target in corpus.pairs]
    batches = TokenBatchSampler(lengths, max_tokens, shuffle=True, seed=seed).epoch_batches(0)
    # The mid-sized batches: the shortest and longest sentences are rare in a corpus, and in its batches.
    batches.sort(key=len)
    middle = len(batches) // 2
    chosen = batches[max(0, middle - count // 2) :][:count]
    return [collate([corpus.pairs[i] for i in batch]) for batch in chosen]


def padding_share(batches: Sequence[dict[str, torch.Tensor]]) -> float:
    """Padding positions over all positions of the source and target tensors."""
    real = sum(int(b["attention_mask"].sum()) + int((b["labels"] != -100).sum()) for b in batches)
    total = sum(b["input_ids"].numel() + b["labels"].numel() for b in batches)
    return 1 - real / total


def target_tokens(batch: dict[str, torch.Tensor]) -> int:
    return int((batch["labels"] != -100).sum())


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in batch.items()}


# --------------------------------------------------------------------------------------------------------------------
# FLOPs, timing and memory
# --------------------------------------------------------------------------------------------------------------------


def forward_flops(
    config: VanillaTransformerConfig, source_lengths: Sequence[int], target_lengths: Sequence[int]
) -> float:
    """FLOPs (2 per multiply-add) of the matrix products of one forward pass over the real tokens of a batch.

    Counted: every linear layer (attention projections, FFN, the cross-attention keys and values of the source, the
    output projection) and the attention products Q K^T and A V (the causal half in decoder self-attention).
    Not counted: embeddings, softmax, LayerNorm, elementwise work, and any padding.
    """
    d = config.d_model
    encoder_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim  # Q, K, V, output; FFN: per source token
    decoder_layer = 6 * d * d + 2 * d * config.decoder_ffn_dim  # self Q, K, V, output; cross Q, output; FFN
    macs = 0
    for source, target in zip(source_lengths, target_lengths, strict=True):
        macs += config.encoder_layers * (source * encoder_layer + 2 * source * source * d)
        macs += config.decoder_layers * (
            target * decoder_layer + source * 2 * d * d + target * (target + 1) * d + 2 * target * source * d
        )
        macs += target * d * config.vocab_size
    return 2.0 * macs


def training_flops(config: VanillaTransformerConfig, batch: dict[str, torch.Tensor]) -> float:
    """Forward plus backward (twice the forward) FLOPs of a batch's real tokens."""
    sources = batch["attention_mask"].sum(1).tolist()
    targets = (batch["labels"] != -100).sum(1).tolist()
    return 3 * forward_flops(config, sources, targets)


@contextlib.contextmanager
def _threads(count: int | None):
    previous = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# --------------------------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------------------------


def _autocast(settings: Settings):
    """Training in bf16 is mixed precision: float32 weights and optimizer, matmuls in bf16."""
    if settings.dtype == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(settings.torch_device.type, dtype=settings.torch_dtype)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """The paper's Adam (beta2 0.98, eps 1e-9), in its fused implementation, the fastest on CPU and GPU alike."""
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)


def _train_step(model, optimizer, settings: Settings) -> Callable[[dict], None]:
    def step(batch: dict[str, torch.Tensor]) -> None:
        with _autocast(settings):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def bench_training(config: VanillaTransformerConfig, corpus: Corpus, settings: Settings) -> dict[str, Any]:
    """Training-step throughput of both models on random and on token-bucketed batches; our MFU."""
    device = settings.torch_device
    ours, marian = build_pair(config, settings)
    steps = {}
    for name, model in (("ours", ours), ("marian", marian)):
        model.train()
        steps[name] = _train_step(model, _optimizer(model), settings)
    run_matmul, matmul_flops = matmul(device, settings.torch_dtype)
    result: dict[str, Any] = {}
    random_set = random_batches(corpus, settings.batch_size, settings.num_batches, settings.seed)
    mean_pair = statistics.mean(len(s) + len(t) for s, t in corpus.pairs)
    max_tokens = settings.max_tokens or int(settings.batch_size * mean_pair * 1.05)
    bucketed_set = token_batches(corpus, max_tokens, settings.num_batches, settings.seed)
    for name, batches in (("random", random_set), ("bucketed", bucketed_set)):
        batches = [_to(b, device) for b in batches]
        # Warm-up: first-call allocations, the optimizer state.
        timings = interleave({**steps, "matmul": run_matmul}, batches, repeats=settings.repeats, device=device)
        times = {name: timings.medians(name) for name in timings.seconds}
        tokens = sum(target_tokens(b) for b in batches)
        flops = sum(training_flops(config, b) for b in batches)
        matmul_rate = matmul_flops / statistics.median(times["matmul"])
        result[name] = {
            "batches": len(batches),
            "pairs_per_batch": statistics.mean(b["input_ids"].shape[0] for b in batches),
            "padding": padding_share(batches),
            "ours_tokens_per_s": tokens / sum(times["ours"]),
            "marian_tokens_per_s": tokens / sum(times["marian"]),
            "speedup": sum(times["marian"]) / sum(times["ours"]),
            "ours_model_flops_per_s": flops / sum(times["ours"]),
            "marian_model_flops_per_s": flops / sum(times["marian"]),
            "matmul_flops_per_s": matmul_rate,
            "ours_mfu": flops / sum(times["ours"]) / matmul_rate,
            "marian_mfu": flops / sum(times["marian"]) / matmul_rate,
        }
        if name == "bucketed":
            result[name]["max_tokens"] = max_tokens
    return result


def _hypotheses(sequences: torch.Tensor) -> list[list[int]]:
    """The generated tokens of each row: after the decoder start, up to and including the first </s>."""
    rows = []
    for row in sequences[:, 1:].tolist():
        rows.append(row[: row.index(EOS) + 1] if EOS in row else [token for token in row if token != PAD])
    return rows


def _generated_tokens(sequences: torch.Tensor) -> int:
    return sum(len(row) for row in _hypotheses(sequences))


def bench_generation(config: VanillaTransformerConfig, corpus: Corpus, settings: Settings) -> dict[str, Any]:
    """generate() throughput of both models (and CTranslate2's, if installed), greedy and beam search."""
    device = settings.torch_device
    ours, marian = build_pair(config, settings)
    for model in (ours, marian):
        model.eval().to(settings.torch_dtype)
    batches = random_batches(corpus, settings.gen_batch_size, settings.num_batches, settings.seed + 1)
    sources = [{key: b[key].to(device) for key in ("input_ids", "attention_mask")} for b in batches]
    translators = _ctranslate2_translators(ours, corpus, settings) if settings.ctranslate2 else {}
    result: dict[str, Any] = {"ctranslate2": sorted(translators) or None, "ct2_use_mkl": os.environ.get("CT2_USE_MKL")}
    for beams in settings.num_beams:
        kwargs = dict(max_new_tokens=settings.max_new_tokens, num_beams=beams, do_sample=False)

        def hf(model):
            @torch.inference_mode()
            def run(source):
                output = model.generate(**source, **kwargs)
                return output, _generated_tokens(output)

            return run

        contestants = {"ours": hf(ours), "marian": hf(marian)}
        for name, translator in translators.items():
            contestants[name] = _ct2_run(translator, corpus.tokens, beams, settings.max_new_tokens)
        timings = interleave(contestants, sources, repeats=settings.repeats, device=device)
        times = {name: timings.medians(name) for name in contestants}
        # What the last repeat returned on every timed batch: its tokens, and their equality (not the warm-up's alone).
        last = {name: timings.returned[name][-len(sources) :] for name in contestants}
        outputs = {name: [output for output, _ in returned] for name, returned in last.items()}
        tokens = {name: [count for _, count in returned] for name, returned in last.items()}
        equal = [torch.equal(ours, marian) for ours, marian in zip(outputs["ours"], outputs["marian"], strict=True)]
        row: dict[str, Any] = {
            "outputs_equal_marian": all(equal),
            "batches_equal_marian": f"{sum(equal)}/{len(equal)}",
            "batch_size": settings.gen_batch_size,
        }
        for name in contestants:
            row[f"{name}_tokens_per_s"] = sum(tokens[name]) / sum(times[name])
        row["speedup"] = row["ours_tokens_per_s"] / row["marian_tokens_per_s"]
        ours_hypotheses = [_hypotheses(output) for output in outputs["ours"]]
        for name in translators:
            row[f"{name}_vs_ours"] = row[f"{name}_tokens_per_s"] / row["ours_tokens_per_s"]
            if "int8" not in name:  # the same precision as ours: fp32 on fp32, bf16 on bf16
                same = [
                    a == b
                    for batch, theirs in zip(ours_hypotheses, outputs[name], strict=True)
                    for a, b in zip(batch, theirs, strict=True)
                ]
                row[f"{name}_outputs_equal_ours"] = all(same)
                row[f"{name}_rows_equal_ours"] = f"{sum(same)}/{len(same)}"
        result["greedy" if beams == 1 else f"beam{beams}"] = row
    return result


def _ctranslate2_translators(model, corpus: Corpus, settings: Settings) -> dict[str, Any]:
    """CTranslate2 exports of `model` (float32/int8 on CPU, bf16/int8_bf16 on CUDA), or none if unavailable."""
    try:
        import ctranslate2
    except ImportError:
        return {}
    from vanilla_transformer.export.ctranslate2 import export_ctranslate2
    from vanilla_transformer.serving.with_ctranslate2 import load_translator

    device = settings.torch_device
    if device.type == "cuda" and ctranslate2.get_cuda_device_count() == 0:
        return {}
    kinds = {"ct2_fp32": "float32", "ct2_int8": "int8"}
    if device.type == "cuda" and settings.dtype != "fp32":
        kinds = {"ct2_bf16": "bfloat16", "ct2_int8": "int8_bfloat16"}
    directory = Path(tempfile.mkdtemp(prefix="vanilla-ct2-"))
    translators = {}
    for name, quantization in kinds.items():
        path = export_ctranslate2(model, directory / name, quantization=quantization, vocabulary=corpus.tokens)
        try:
            translators[name] = load_translator(
                path, device=device.type, compute_type=quantization, threads=settings.threads or 0
            )
        except (RuntimeError, ValueError) as error:  # a CUDA build this machine's driver or libraries cannot run
            print(f"CTranslate2 {name} left out: {error}", file=sys.stderr)
    return translators


def _ct2_run(translator, tokens: list[str], beams: int, max_new_tokens: int):
    index = {token: i for i, token in enumerate(tokens)}

    def run(source):
        rows = [
            [tokens[i] for i in ids[mask.bool()].tolist()]
            for ids, mask in zip(source["input_ids"].cpu(), source["attention_mask"].cpu(), strict=True)
        ]
        results = translator.translate_batch(
            rows, beam_size=beams, max_decoding_length=max_new_tokens, return_end_token=True
        )
        hypotheses = [[index[token] for token in result.hypotheses[0]] for result in results]
        return hypotheses, sum(len(h) for h in hypotheses)

    return run


def bench_memory(config: VanillaTransformerConfig, corpus: Corpus, settings: Settings) -> dict[str, Any]:
    """Peak memory of a training step and of greedy and beam generate(), for both models."""
    device = settings.torch_device
    ours, marian = build_pair(config, settings)
    batch = _to(random_batches(corpus, settings.batch_size, 1, settings.seed)[0], device)
    source = {key: batch[key][: settings.gen_batch_size] for key in ("input_ids", "attention_mask")}
    result: dict[str, Any] = {"padding": padding_share([batch])}
    for name, model in (("ours", ours), ("marian", marian)):
        model.train()
        step = _train_step(model, _optimizer(model), settings)
        step(batch)  # the optimizer state exists before measuring: the peak is the step's own
        result[f"{name}_train_bytes"] = peak_memory(lambda: step(batch), device)
        model.eval().to(settings.torch_dtype)
        for beams in settings.num_beams:
            kwargs = dict(max_new_tokens=settings.max_new_tokens, num_beams=beams, do_sample=False)
            with torch.inference_mode():
                generate = lambda: model.generate(**source, **kwargs)  # noqa: E731
                result[f"{name}_generate{beams}_bytes"] = peak_memory(generate, device)
    result["train_ratio"] = result["ours_train_bytes"] / result["marian_train_bytes"]
    return result


def bench_length_scaling(config: VanillaTransformerConfig, settings: Settings) -> list[dict[str, Any]]:
    """Our training step (forward and backward) on unpadded sequences of each length, SDPA against eager."""
    device = settings.torch_device
    torch.manual_seed(settings.seed)
    longest = max(settings.scaling_lengths)
    config = copy.deepcopy(config)
    config.max_position_embeddings = max(config.max_position_embeddings, longest)
    model = VanillaTransformerForConditionalGeneration(config).to(device).train()
    generator = torch.Generator().manual_seed(settings.seed)
    rows = []
    for length in settings.scaling_lengths:
        shape = (settings.scaling_batch_size, length)
        batch = _to(
            {
                "input_ids": torch.randint(EOS + 1, config.vocab_size, shape, generator=generator),
                "labels": torch.randint(EOS + 1, config.vocab_size, shape, generator=generator),
            },
            device,
        )

        def step(implementation: str) -> Callable[[Any], None]:
            def run(_=None) -> None:
                model.set_attn_implementation(implementation)
                with _autocast(settings):
                    loss = model(**batch).loss
                loss.backward()
                model.zero_grad(set_to_none=True)

            return run

        contestants = {"sdpa": step("sdpa"), "eager": step("eager")}
        timings = interleave(contestants, [None], repeats=max(1, settings.repeats - 1), device=device)
        row: dict[str, Any] = {"length": length, "batch_size": settings.scaling_batch_size}
        for name, run in contestants.items():
            row[f"{name}_tokens_per_s"] = settings.scaling_batch_size * length / timings.total(name)
            row[f"{name}_bytes"] = peak_memory(run, device)
        rows.append(row)
    model.set_attn_implementation(settings.attn_implementation)
    return rows


SECTIONS = ("train", "generate", "memory", "scaling")


def run(settings: Settings, sections: Sequence[str] = SECTIONS, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the benchmark `sections` and return every figure, with a description of the run and its environment
    (`bench.Record`)."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(f"unknown sections {sorted(unknown)}; choose from {SECTIONS}")
    record = Record()
    with _threads(settings.threads if settings.device == "cpu" else None):
        config = model_config(settings.size, settings.vocab_size)
        corpus = load_corpus(settings.vocab_size, settings.data_dir, settings.max_pairs, settings.seed)
        report: dict[str, Any] = {
            "settings": dataclasses.asdict(settings),
            "device": _device_name(settings.torch_device),
            "threads": torch.get_num_threads() if settings.device == "cpu" else None,
            "data": corpus.description,
            "parameters": _parameter_count(config),
        }
        log(f"# {settings.size} model on {report['device']}, {settings.dtype}; data: {corpus.description}")
        sections_to_run = {
            "train": lambda: bench_training(config, corpus, settings),
            "generate": lambda: bench_generation(config, corpus, settings),
            "memory": lambda: bench_memory(config, corpus, settings),
            "scaling": lambda: bench_length_scaling(config, settings),
        }
        for name in SECTIONS:
            if name in sections:
                start = time.perf_counter()
                report[name] = sections_to_run[name]()
                log(f"  {name}: {time.perf_counter() - start:.0f} s")
        return record.result(report)


def _parameter_count(config: VanillaTransformerConfig) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in VanillaTransformerForConditionalGeneration(config).parameters())


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    import platform

    return f"CPU ({platform.processor() or platform.machine()})"


# --------------------------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------------------------


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} MiB"


def _rate(value: float) -> str:
    return f"{value:,.0f}"


def format_report(report: dict[str, Any]) -> str:
    """Markdown tables: ratios first, then this machine's absolute figures."""
    size, environment = report["settings"]["size"], environment_of(report)
    lines = [
        f"### {size} model ({report['parameters'] / 1e6:.1f}M parameters), {report['settings']['dtype']}, "
        f"{report['device']}" + (f", {report['threads']} threads" if report.get("threads") else ""),
        "",
        f"Data: {report['data']}.",
        "",
        *(
            [
                f"Load average (1 min) at start and end: {environment['load_average_start'][0]:.2f}, "
                f"{environment['load_average_end'][0]:.2f}.",
                "",
            ]
            if environment["load_average_start"]
            else []
        ),
        "| measure | ours / MarianMT | ours | MarianMT |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += _comparison_rows(report)
    lines += _mfu_table(report.get("train"))
    lines += _ctranslate2_table(report)
    lines += _equality_checks(report.get("generate"))
    lines += _scaling_table(report.get("scaling"))
    return "\n".join(lines)


def _comparison_rows(report: dict[str, Any]) -> list[str]:
    """Rows of the ours / MarianMT table: training and generation throughput, peak memory."""
    train, generate, memory = report.get("train"), report.get("generate"), report.get("memory")
    lines = []
    if train:
        for name, label in (("random", "random batches"), ("bucketed", "token-bucketed batches")):
            row = train[name]
            lines.append(
                f"| training step, {label} ({row['padding']:.0%} padding), target tok/s | **{row['speedup']:.2f}x** "
                f"| {_rate(row['ours_tokens_per_s'])} | {_rate(row['marian_tokens_per_s'])} |"
            )
    if generate:
        for key, label in (("greedy", "greedy"), ("beam4", "beam-4")):
            if key in generate:
                row = generate[key]
                lines.append(
                    f"| {label} generate(), batch {row['batch_size']}, tok/s | **{row['speedup']:.2f}x** "
                    f"| {_rate(row['ours_tokens_per_s'])} | {_rate(row['marian_tokens_per_s'])} |"
                )
    if memory:
        lines.append(
            f"| peak memory, training step ({memory['padding']:.0%} padding) | **{memory['train_ratio']:.2f}x** "
            f"| {_mib(memory['ours_train_bytes'])} | {_mib(memory['marian_train_bytes'])} |"
        )
        for beams in report["settings"]["num_beams"]:
            ours, marian = memory[f"ours_generate{beams}_bytes"], memory[f"marian_generate{beams}_bytes"]
            label = "greedy" if beams == 1 else f"beam-{beams}"
            lines.append(f"| peak memory, {label} generate() | {ours / marian:.2f}x | {_mib(ours)} | {_mib(marian)} |")
    return lines


def _mfu_table(train: dict[str, Any] | None) -> list[str]:
    if not train:
        return []
    lines = [
        "",
        "| our training step | MFU | model GFLOP/s | matmul GFLOP/s (same run) | pairs/batch |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, label in (("random", "random batches"), ("bucketed", "token-bucketed batches")):
        row = train[name]
        lines.append(
            f"| {label} ({row['padding']:.0%} padding) "
            f"| **{row['ours_mfu']:.2f}** (Marian {row['marian_mfu']:.2f}) "
            f"| {row['ours_model_flops_per_s'] / 1e9:,.1f} | {row['matmul_flops_per_s'] / 1e9:,.1f} "
            f"| {row['pairs_per_batch']:.0f} |"
        )
    return lines


def _ctranslate2_table(report: dict[str, Any]) -> list[str]:
    generate = report.get("generate")
    if not (generate and generate.get("ctranslate2")):
        return []
    names = generate["ctranslate2"]
    lines = [
        "",
        "| decoding, tok/s | ours generate() | " + " | ".join(names) + " |",
        "| --- | ---: | " + " | ".join("---:" for _ in names) + " |",
    ]
    for key, label in (("greedy", "greedy"), ("beam4", "beam-4")):
        if key in generate:
            row = generate[key]
            cells = [f"{_rate(row[f'{n}_tokens_per_s'])} (**{row[f'{n}_vs_ours']:.1f}x**)" for n in names]
            lines.append(f"| {label} | {_rate(row['ours_tokens_per_s'])} | " + " | ".join(cells) + " |")
    if report["settings"]["device"] == "cpu":
        mkl = generate.get("ct2_use_mkl")
        lines += [
            "",
            f"CTranslate2 CPU backend: CT2_USE_MKL={mkl}"
            if mkl is not None
            else "CTranslate2 CPU backend: its default (MKL on Intel CPUs, oneDNN on others).",
        ]
    return lines


def _equality_checks(generate: dict[str, Any] | None) -> list[str]:
    if not generate:
        return []
    checks = [
        f"{key}: {'yes' if row['outputs_equal_marian'] else 'NO'} ({row.get('batches_equal_marian', '?')} batches)"
        for key, row in generate.items()
        if isinstance(row, dict)
    ]
    lines = ["", "Same generated tokens as MarianMT on every timed batch: " + ", ".join(checks) + "."]
    ct2_checks = [
        f"{key}: {'yes' if value else 'NO'}"
        for key, row in generate.items()
        if isinstance(row, dict)
        for name, value in row.items()
        if name.endswith("_outputs_equal_ours")
    ]
    if ct2_checks:
        lines.append(
            "Same tokens from CTranslate2 (our precision) as from our generate(): " + ", ".join(ct2_checks) + "."
        )
    return lines


def _scaling_table(scaling: list[dict[str, Any]] | None) -> list[str]:
    if not scaling:
        return []
    lines = [
        "",
        f"| length (batch {scaling[0]['batch_size']}) | SDPA tok/s | eager tok/s | SDPA memory "
        "| eager memory | eager - SDPA (attention matrices) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in scaling:
        lines.append(
            f"| {row['length']} | {_rate(row['sdpa_tokens_per_s'])} | {_rate(row['eager_tokens_per_s'])} "
            f"| {_mib(row['sdpa_bytes'])} | {_mib(row['eager_bytes'])} "
            f"| {_mib(row['eager_bytes'] - row['sdpa_bytes'])} |"
        )
    return lines


def save_report(report: dict[str, Any] | list[dict[str, Any]], path: str | Path) -> None:
    write_json(report, path)


__all__ = [
    "DTYPES",
    "SECTIONS",
    "SIZES",
    "Corpus",
    "Settings",
    "bench_generation",
    "bench_length_scaling",
    "bench_memory",
    "bench_training",
    "build_pair",
    "collate",
    "format_report",
    "forward_flops",
    "load_corpus",
    "model_config",
    "padding_share",
    "random_batches",
    "run",
    "save_report",
    "token_batches",
    "training_flops",
]
