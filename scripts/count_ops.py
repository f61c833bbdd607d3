"""Count the operators one training step and one decoding step launch, ours against MarianMT's, on the CPU.

On a GPU at the sizes of this project, a step is bound by kernel launches rather than arithmetic: each operator that
computes is (at least) one kernel. Counts are not timings: they do not depend on the machine's load, and the same
command gives the same counts, so this script may run on a busy machine.

    python scripts/count_ops.py --output docs/results/op_counts.json

Both models are the same network with the same weights: MarianMT by `bench.marian_twin`. What is counted, per
contestant:

* **training step**: forward with labels, backward, Adam (fused, as on a GPU), ``zero_grad``, on one padded batch of
  random pairs. Ours twice: ``pack_tokens=False`` (what ``auto`` does on CUDA) and ``True`` (what it does on the CPU
  for such a batch);
* **decoding step**: ``generate()`` (greedy, and beam 4) with K and with 2K new tokens; the difference over K is
  one step, search included. ``</s>`` is made unreachable (a zero embedding row: its logit is 0 among thousands of
  others), so that every sentence runs to the maximum length in both models.

Operators are counted where PyTorch hands them to a backend (a `TorchDispatchMode`, on every thread: backward runs
on autograd's): each operator a device implements, as called, after composite operators (``linear``, ``dropout``)
have become the ones they are made of and before the backend's own internals. The PyTorch profiler was tried
first: its ``aten::`` events nest a kernel's internal calls (``addmm``'s ``resolve_conj`` and ``copy_`` on the CPU)
under it, so neither its leaves nor its top level count kernels. ``kernels`` leaves out the operators that only make
a view, allocate or read metadata (`no_kernel`), which launch nothing on a GPU. These are the CPU's dispatch counts;
CUDA runs the same operators, except that attention with a mask may be one kernel there and several here.
"""

from __future__ import annotations

import copy
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from bench import Record, adam, collate, marian_twin, model_config, options, train_step
from bench.figures import read_json, table, versions
from torch.utils._python_dispatch import TorchDispatchMode

from vanilla_transformer.decoder_vanilla_transformer import IncrementalDecoder
from vanilla_transformer.modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.tokenization import EOS_ID

ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "lift_fresh"})
"""Operators that only allocate (no kernel)."""


def no_kernel(operator: torch._ops.OpOverload) -> bool:
    """Whether `operator` launches no compute kernel on a GPU: a view (``view``, ``transpose``, ``detach``, ...), an
    allocation, or a size query. (``_local_scalar_dense``, ``.item()``, is a device-to-host copy: counted.)"""
    name = operator.overloadpacket.__name__
    return operator.is_view or name in ALLOCATIONS or name.startswith("sym_")


def operators(function) -> Counter:
    """The operators `function` hands to the backend, by name (``aten::addmm``), each call counted."""
    counts = Counter()

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counts[func] += 1
            return func(*args, **(kwargs or {}))

    with Counting():
        function()
    return counts


def summary(counts: Counter, steps: int = 1) -> dict[str, Any]:
    """Operators and kernels (per step, for a difference over `steps` steps), and the most frequent kernels."""
    kernels = Counter()
    for operator, count in counts.items():
        if not no_kernel(operator):
            kernels[f"aten::{operator.overloadpacket.__name__}"] += count
    return {
        "operators": round(sum(counts.values()) / steps, 2),
        "kernels": round(sum(kernels.values()) / steps, 2),
        "top_kernels": {name: round(count / steps, 2) for name, count in kernels.most_common(8)},
    }


def random_batch(vocab_size: int, batch_size: int, seed: int) -> dict[str, torch.Tensor]:
    """`batch_size` pairs of lengths like Multi30k's (source 8-24, target 8-26 tokens, each ending in ``</s>``),
    right-padded: about a quarter padding, as random batches have."""
    generator = torch.Generator().manual_seed(seed)
    source_lengths = torch.randint(8, 25, (batch_size,), generator=generator)
    target_lengths = torch.randint(8, 27, (batch_size,), generator=generator)
    pairs = [  # each side drawn at its whole length, its last token then made </s>
        [torch.randint(4, vocab_size, (length,), generator=generator)[:-1].tolist() + [EOS_ID] for length in pair]
        for pair in zip(source_lengths.tolist(), target_lengths.tolist(), strict=True)
    ]
    return collate(pairs)  # the kit's padding: `TranslationCollator`'s


def training_step(model, batch: dict[str, torch.Tensor]) -> Counter:
    """One step as a GPU run takes it (`bench.train_step`: forward, backward, the package's Adam in its fused
    kernels, gradients set to None). The second of two steps is counted (the first creates Adam's state)."""
    step = train_step(model, adam(model, kernels="fused"))
    step(batch)
    return operators(lambda: step(batch))


def decoding_step(model, batch: dict[str, torch.Tensor], num_beams: int, steps: int) -> dict[str, Any]:
    """Operators per decoding step of `generate()`: the counts of 2 * `steps` new tokens minus those of `steps`."""
    model.eval()
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    search = dict(num_beams=num_beams, do_sample=False, early_stopping=False, length_penalty=1.0)

    def generate(new_tokens: int):
        with torch.no_grad():
            output = model.generate(**inputs, **search, max_new_tokens=new_tokens)
        if output.shape[1] != 1 + new_tokens or bool((output[:, 1:] == EOS_ID).any()):
            raise RuntimeError(f"decoding stopped before {new_tokens} tokens: </s> was reachable")

    generate(steps)  # (weights prepared once, as in any later call)
    with mock.patch.object(IncrementalDecoder, "step", autospec=True, side_effect=IncrementalDecoder.step) as fast:
        shorter, longer = operators(lambda: generate(steps)), operators(lambda: generate(2 * steps))
    if isinstance(model, VanillaTransformerForConditionalGeneration) and fast.call_count != 3 * steps:
        raise RuntimeError("our generate() did not run on the fast decoder")
    return summary(longer - shorter, steps)


def build_models(size: str, vocab_size: int, seed: int):
    """Our model of the configuration preset `size` (dropout 0.1, SDPA) with ``</s>`` unreachable, and its MarianMT
    twin with the same weights."""
    torch.manual_seed(seed)
    ours = VanillaTransformerForConditionalGeneration(model_config(size, vocab_size))
    with torch.no_grad():
        ours.model.shared.weight[EOS_ID].zero_()  # tied: a zero logit for </s>, never the largest
    return ours, marian_twin(ours)


def count(size: str, vocab_size: int, batch_size: int, decode_batch_size: int, steps: int, seed: int) -> dict:
    ours, marian = build_models(size, vocab_size, seed)
    batch = random_batch(vocab_size, batch_size, seed)
    decode = {name: tensor[:decode_batch_size] for name, tensor in batch.items()}
    unpacked, packed = copy.deepcopy(ours), copy.deepcopy(ours)
    unpacked.config.pack_tokens, packed.config.pack_tokens = False, True
    contestants = {
        "ours, pack_tokens=False (CUDA)": unpacked,
        "ours, pack_tokens=True (CPU)": packed,
        "MarianMT": marian,
    }
    real = int(batch["attention_mask"].sum() + (batch["labels"] != -100).sum())
    result = {
        "size": size,
        "vocab_size": vocab_size,
        "layers": ours.config.encoder_layers,
        "training_batch": {
            "pairs": batch_size,
            "padded_tokens": batch["input_ids"].numel() + batch["labels"].numel(),
            "real_tokens": real,
        },
        "decoding_batch": decode_batch_size,
        "training_step": {name: summary(training_step(model, batch)) for name, model in contestants.items()},
        "decoding_step": {},
    }
    for beams in (1, 4):
        result["decoding_step"]["greedy" if beams == 1 else f"beam {beams}"] = {
            name: decoding_step(model, decode, beams, steps) for name, model in (("ours", ours), ("MarianMT", marian))
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = options.parser(__doc__, threads=None, output="write the counts here (JSON)")
    parser.add_argument("--size", default="base", help="configuration preset (default: base, the paper's)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=32, help="pairs in the training batch")
    parser.add_argument("--decode-batch-size", type=int, default=16, help="sentences per generate() call")
    parser.add_argument("--steps", type=int, default=4, help="K: decoding steps told apart (2K - K)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    record = Record(__file__, argv, timed=False)  # counts do not depend on time or load: a rerun writes the same file
    torch.set_num_threads(1)
    counts = count(args.size, args.vocab_size, args.batch_size, args.decode_batch_size, args.steps, args.seed)
    sys.stdout.write(json.dumps(record.write(counts, args.output), indent=2) + "\n")
    return 0


# Figures: name -> function of the results folder that returns the Markdown between a page's markers


def op_counts(results: Path) -> str:
    """Operators (kernels) a training step and a decoding step launch, ours against MarianMT (scripts/count_ops.py)."""
    counts = read_json(results, "op_counts.json")
    steps = [(f"training step ({counts['training_batch']['pairs']} pairs)", counts["training_step"])]
    steps += [(f"decoding step, {search} ({counts['decoding_batch']} sentences)", reports)
              for search, reports in counts["decoding_step"].items()]  # fmt: skip
    rows = [[step, name, f"{report['kernels']:,.0f}", f"{report['operators']:,.0f}"]
            for step, reports in steps for name, report in reports.items()]  # fmt: skip
    return table(["step", "contestant", "kernels", "operators (views included)"], ["l", "l", "r", "r"], rows)


def op_counts_setup(results: Path) -> str:
    counts = read_json(results, "op_counts.json")
    return (
        f"the `{counts['size']}` configuration ({counts['layers']} + {counts['layers']} layers, "
        f"{counts['vocab_size']:,}-token vocabulary), a training batch of {counts['training_batch']['real_tokens']:,} "
        f"real tokens in {counts['training_batch']['padded_tokens']:,} padded positions; "
        f"{versions(counts, 'torch', 'transformers')}"
    )


FIGURES = {"op-counts": op_counts, "op-counts-setup": op_counts_setup}


if __name__ == "__main__":
    sys.exit(main())
