"""The package's serving code that the benchmarks time and score, imported in this one place: the paper's search
(`translate`, `translate_ids` and their defaults), the onnxruntime step decoder (`load_onnx`) and CTranslate2
(`load_translator`, `translate_ctranslate2`); a model's CTranslate2 exports, loaded (`ct2_translators`); the tokens
of each translation (`hypotheses`); CTranslate2's search as a contestant on batches of token ids (`ct2_search`);
onnxruntime's search split under cProfile (`inside_onnxruntime`); and the paper's stop rule on CTranslate2 against
CTranslate2's own, on trained models (`stop_rule_workload`, its figures `ct2_stop_rule_table`, `ct2_stop_rule_environment`)."""

import argparse
import cProfile
import json
import math
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from vanilla_transformer.export.ctranslate2 import export_ctranslate2
from vanilla_transformer.serving.search import LENGTH_PENALTY, MAX_LENGTH_OFFSET, translate_ids
from vanilla_transformer.serving.search import translate as translate  # "as" itself: re-exported
from vanilla_transformer.serving.with_ctranslate2 import (
    SearchReport,
    cpu_backend,
    load_translator,
    proof_lengths,
    search_ctranslate2,
    search_rounds,
)
from vanilla_transformer.serving.with_ctranslate2 import translate_ctranslate2 as translate_ctranslate2
from vanilla_transformer.serving.with_onnxruntime import load_onnx as load_onnx
from vanilla_transformer.tokenization import EOS_ID, PAD_ID

from .figures import environment_load, minutes, processor, read_json, table, versions
from .timing import interleave


def hypotheses(sequences: torch.Tensor) -> list[list[int]]:
    """The generated tokens of each row of `generate()`'s (or `translate_ids`') output: after the decoder start, up
    to and including the first ``</s>`` (a row without one: its tokens, padding left out)."""
    rows = sequences[:, 1:].tolist()
    return [row[: row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t != PAD_ID] for row in rows]


def ct2_translators(
    model, folder: Path, quantizations: dict[str, str], device: str = "cpu", threads: int = 0, **vocabulary
) -> tuple[dict[str, Any], dict[str, float]]:
    """`model` exported to CTranslate2 in ``folder/NAME`` for each of `quantizations` (name -> ``float32``,
    ``int8``, ...; `vocabulary`: the ``tokenizer`` or ``vocabulary`` of `export_ctranslate2`), each loaded on
    `device` with `threads`; the translators and the seconds of each export and load. On CUDA, one that cannot load
    (a build this machine's driver or libraries cannot run) is left out, with a line on stderr."""
    translators, seconds = {}, {}
    for name, quantization in quantizations.items():
        started = time.perf_counter()
        path = export_ctranslate2(model, folder / name, quantization=quantization, **vocabulary)
        seconds[f"export_{name}"] = time.perf_counter() - started
        started = time.perf_counter()
        try:
            translators[name] = load_translator(path, device=device, compute_type=quantization, threads=threads)
        except (RuntimeError, ValueError) as error:
            if device != "cuda":
                raise
            print(f"CTranslate2 {name} left out: {error}", file=sys.stderr)
        seconds[f"load_{name}"] = time.perf_counter() - started
    return translators, seconds


def ct2_search(
    translator, tokens: Sequence[str], beams: int, max_length: Callable[[int], int], **options
) -> Callable[[dict], list[list[int]]]:
    """CTranslate2's own search as a contestant: a batch of token ids (``input_ids``, ``attention_mask``) -> the ids
    of each translation, ``</s>`` included. `tokens` names every id; `max_length` maps the batch's longest source to
    ``max_decoding_length``; `options` go to ``translate_batch``."""
    index = {token: i for i, token in enumerate(tokens)}

    def run(batch: dict) -> list[list[int]]:
        rows = [
            [tokens[i] for i in ids[mask.bool()].tolist()]
            for ids, mask in zip(batch["input_ids"].cpu(), batch["attention_mask"].cpu(), strict=True)
        ]
        longest = max(map(len, rows))
        results = translator.translate_batch(
            rows, beam_size=beams, max_decoding_length=max_length(longest), return_end_token=True, **options
        )
        return [[index[token] for token in result.hypotheses[0]] for result in results]

    return run


ORT_RUNS = ("onnxruntime_pybind11_state.run>", "onnxruntime_pybind11_state.run_with_iobinding>")
"""cProfile's names of onnxruntime's C++ ``run`` and ``run_with_iobinding``: a graph executing, from the call in."""


def inside_onnxruntime(decode: Callable[[dict], list[list[int]]], batches: list, ct2_tokens_per_s: float) -> dict:
    """Decode `batches` once more under cProfile and split the wall time: the seconds inside onnxruntime's runs
    (`ORT_RUNS`: the graphs executing) and the rest, the search around them (Python and PyTorch; cProfile slows that
    part, so the share inside is a lower bound). ``runs_only_tokens_per_s``: the throughput were the search free,
    the most the search could reach on these graphs; ``runs_only_vs_ct2_fp32`` sets it against CTranslate2 fp32's
    (the timed rounds', at its best thread count)."""
    profile = cProfile.Profile()
    started = time.perf_counter()
    profile.enable()
    generated = sum(len(ids) for batch in batches for ids in decode(batch))
    profile.disable()
    wall = time.perf_counter() - started
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (calls, primitive calls, own, cumulative, callers)
    runs = [row for (file, _, name), row in stats.items() if file == "~" and name.endswith(ORT_RUNS)]
    inside = sum(row[3] for row in runs)
    return {
        "seconds": round(wall, 6),
        "onnxruntime_seconds": round(inside, 6),
        "share_inside": round(inside / wall, 3),
        "runs": sum(row[1] for row in runs),
        "tokens": generated,
        "runs_only_tokens_per_s": round(generated / inside, 1) if inside else None,
        "runs_only_vs_ct2_fp32": round(generated / inside / ct2_tokens_per_s, 3) if inside else None,
    }


STOP_RULE_BATCH = 32
"""Sentences per CTranslate2 batch for both stop rules (``max_batch_size``; the paper's: also its greedy sample)."""


def stop_rule_workload(
    name: str, model_dir: Path, source: Path, reference: Path, folder: Path, threads: Sequence[int], rounds: int
) -> dict[str, Any]:
    """The paper's stop rule on CTranslate2 (`search_ctranslate2`, what ``translate --ctranslate2`` runs) against
    CTranslate2's own (``translate_batch``: its |Y|^alpha ranking, its stop after k finished, one length limit per
    call: the longest sentence's), the same beam, alpha and batches, on a trained model's test set: fp32 and int8,
    each thread count of `threads`, greedy and beam 4, interleaved (`rounds` timed calls each, the whole file per
    call, tokenized before; `stop_rule_setting`), beside the oracle: the paper's answers searched once to each
    sentence's `proof_lengths` (found untimed), the most any search that predicts lengths could reach. Per setting:
    tokens per second (generated, ``</s>`` included) of the three and their ratios to CTranslate2's own, the decoder
    steps taken (sentence-steps: the paper's beam search and greedy sample, counted by its `SearchReport`; the
    oracle's lengths; CTranslate2's own, the length of its last finished hypothesis, from an untimed call returning k
    of them), and, of each, the translations equal to PyTorch's search (`translate`, the model's alpha) and BLEU."""
    from vanilla_transformer.data import read_lines
    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.training import score_translations

    model, tokenizer = load_model_dir(model_dir)
    alpha = getattr(model.generation_config, "length_penalty", None) or LENGTH_PENALTY
    sentences, references = read_lines(source), read_lines(reference)
    tokens = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(sentences)["input_ids"]]
    limits = [min(len(t) + MAX_LENGTH_OFFSET, model.config.max_position_embeddings) for t in tokens]
    result: dict[str, Any] = {"model": str(model_dir), "source": str(source), "sentences": len(sentences)}
    result |= {"alpha": alpha, "parameters": sum(p.numel() for p in model.parameters())}
    for quantization in ("float32", "int8"):
        export_ctranslate2(str(model_dir), folder / f"{name}-{quantization}", quantization=quantization)
    decode = lambda ids: tokenizer.decode(tokenizer.convert_tokens_to_ids(ids), skip_special_tokens=True)  # noqa: E731
    for beams in (1, 4):
        torch_texts, torch_steps = torch_search(model, tokenizer, sentences, beams, alpha)
        search = "greedy" if beams == 1 else f"beam{beams}"
        scores = score_translations(torch_texts, references)
        result[search] = {"torch_bleu": round(scores["bleu"], 2), "torch_chrf": round(scores["chrf"], 2)}
        result[search]["torch_steps"] = torch_steps
        options = dict(num_beams=beams, length_penalty=alpha, end_token=tokenizer.eos_token)
        proofs: dict[str, list[int]] = {}
        for quantization, count in [(q, t) for q in ("float32", "int8") for t in threads]:
            translator = load_translator(folder / f"{name}-{quantization}", compute_type=quantization, threads=count)
            if quantization not in proofs:  # the oracle's lengths, untimed: the same at every thread count
                proofs[quantization] = proof_lengths(translator, tokens, limits, **options, batch_size=STOP_RULE_BATCH)
            row = stop_rule_setting(translator, tokens, limits, options, proofs[quantization], rounds)
            for rule in ("paper", "oracle", "own"):
                texts = [decode(ids) for ids in row.pop(f"{rule}_outputs")]
                row[f"{rule}_equal_torch"] = sum(a == b for a, b in zip(texts, torch_texts, strict=True))
                scores = score_translations(texts, references)
                row[f"{rule}_bleu"], row[f"{rule}_chrf"] = round(scores["bleu"], 2), round(scores["chrf"], 2)
            result[search][f"{'fp32' if quantization == 'float32' else 'int8'}@{count}"] = row
    return result


STOP_RULE_SECONDS, STOP_RULE_MAX_ROUNDS = 3.0, 25
"""Each contestant of `stop_rule_setting` is timed over at least `rounds` calls, more where CTranslate2's own takes
under `STOP_RULE_SECONDS` in all (a short test file: single calls of a tenth of a second are noisy), at most
`STOP_RULE_MAX_ROUNDS`."""


def stop_rule_setting(translator, tokens, limits: list[int], options: dict, proofs: list[int], rounds: int) -> dict:
    """One weights and thread count of `stop_rule_workload`, interleaved: the paper's stop rule (`search_ctranslate2`),
    the oracle (`search_rounds` to each sentence's `proof_lengths`: the same answers, were every length known in
    advance) and CTranslate2's own; tokens/s of each, ratios to CTranslate2's own, steps, and each one's outputs."""
    beams, alpha = options["num_beams"], options["length_penalty"]

    def paper(_) -> list[list[str]]:
        return search_ctranslate2(translator, tokens, limits, **options, batch_size=STOP_RULE_BATCH)

    def oracle(_) -> list[list[str]]:
        outputs: list = [None] * len(tokens)
        search_rounds(translator, tokens, limits, dict(enumerate(proofs)), outputs, SearchReport(), **options,
                      batch_size=STOP_RULE_BATCH)  # fmt: skip
        return outputs

    def own(_, **more) -> list[list[str]]:
        results = translator.translate_batch(
            tokens, beam_size=beams, length_penalty=alpha, max_decoding_length=max(limits),
            return_end_token=True, max_batch_size=STOP_RULE_BATCH, **more,
        )  # fmt: skip
        return [r.hypotheses[0] for r in results] if not more else [max(map(len, r.hypotheses)) for r in results]

    started = time.perf_counter()
    own(None)
    repeats = max(rounds, min(STOP_RULE_MAX_ROUNDS, math.ceil(STOP_RULE_SECONDS / (time.perf_counter() - started))))
    timings = interleave({"paper": paper, "oracle": oracle, "own": own}, [None], repeats=repeats)
    report = SearchReport()
    search_ctranslate2(translator, tokens, limits, **options, batch_size=STOP_RULE_BATCH, report=report)
    row: dict[str, Any] = {"rounds": repeats}
    for rule in ("paper", "oracle", "own"):
        outputs = timings.returned[rule][-1]
        row[f"{rule}_tokens_per_s"] = round(sum(map(len, outputs)) / timings.total(rule), 1)
        row[f"{rule}_outputs"] = outputs
    row["paper_vs_own"] = round(row["paper_tokens_per_s"] / row["own_tokens_per_s"], 3)
    row["oracle_vs_own"] = round(row["oracle_tokens_per_s"] / row["own_tokens_per_s"], 3)
    row["paper_steps"] = {"beam": report.beam_steps, "greedy_sample": report.greedy_steps}
    row["paper_steps"] |= {"re_searched": report.re_searched, "rounds": report.searched}
    row["oracle_steps"] = sum(proofs)
    row["own_steps"] = sum(own(None, num_hypotheses=beams)) if beams > 1 else sum(map(len, row["own_outputs"]))
    return row


def torch_search(model, tokenizer, sentences: Sequence[str], beams: int, alpha: float) -> tuple[list[str], int]:
    """PyTorch's search (`translate_ids`, what `translate` runs: longest first, batches of `STOP_RULE_BATCH`) and its
    decoder steps: the sentences still searched after each step, summed (its exact stop, in sentence-steps)."""
    encoded = tokenizer(list(sentences))["input_ids"]
    order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]), reverse=True)
    texts, steps = [""] * len(encoded), [0]

    def count(_, beams_state) -> None:
        steps[0] += len(beams_state.index)

    for start in range(0, len(order), STOP_RULE_BATCH):
        indices = order[start : start + STOP_RULE_BATCH]
        batch = tokenizer.pad({"input_ids": [encoded[i] for i in indices]}, padding_side="right", return_tensors="pt")
        with torch.no_grad():
            output = translate_ids(model.eval(), batch["input_ids"], batch["attention_mask"], num_beams=beams,
                                   length_penalty=alpha, observer=count)  # fmt: skip
        for i, text in zip(indices, tokenizer.batch_decode(output, skip_special_tokens=True), strict=True):
            texts[i] = text
    return texts, steps[0]


def stop_rule_rows(run: dict[str, Any]) -> list[list[str]]:
    """The rows of `stop_rule_table`: per workload, search and weights, each stop rule at its best thread count."""
    rows = []
    for name, workload in run["workloads"].items():
        for search in ("greedy", "beam4"):
            figures = workload[search]
            for weights in ("fp32", "int8"):
                settings = {key: row for key, row in figures.items() if key.startswith(f"{weights}@")}
                paper = max(settings, key=lambda key: settings[key]["paper_tokens_per_s"])  # the oracle: paper's
                own = max(settings, key=lambda key: settings[key]["own_tokens_per_s"])
                row, own_row = settings[paper], settings[own]
                threads = lambda key: key.split("@")[1]  # noqa: E731
                rows.append([
                    f"{name} ({workload['sentences']:,})", search.replace("beam", "beam "), weights,
                    f"{row['paper_tokens_per_s']:,.0f} ({threads(paper)}t)",
                    f"{own_row['own_tokens_per_s']:,.0f} ({threads(own)}t)",
                    f"{row['paper_tokens_per_s'] / own_row['own_tokens_per_s']:.2f}",
                    f"{row['oracle_tokens_per_s'] / own_row['own_tokens_per_s']:.2f}",
                    f"{row['paper_steps']['beam']:,} + {row['paper_steps']['greedy_sample']:,}"
                    f" ({row['paper_steps']['re_searched']} again)" if search != "greedy" else
                    f"{row['paper_steps']['beam']:,} + {row['paper_steps']['greedy_sample']:,}",
                    f"{row['oracle_steps']:,}",
                    f"{row['own_steps']:,}",
                    f"{figures['torch_steps']:,}",
                    f"{row['paper_equal_torch']:,} / {own_row['own_equal_torch']:,}",
                    " / ".join(f"{bleu:.2f} ({chrf:.1f})" for bleu, chrf in ((row["paper_bleu"], row["paper_chrf"]),
                        (own_row["own_bleu"], own_row["own_chrf"]), (figures["torch_bleu"], figures["torch_chrf"]))),
                ])  # fmt: skip
    return rows


STOP_RULE_HEADER = [
    "workload (sentences)", "search", "weights", "paper's stop rule: tokens/s", "CTranslate2's own: tokens/s",
    "paper / own", "oracle / own", "paper's steps: beam + greedy sample", "oracle's steps", "own's steps",
    "PyTorch's steps",
    "= PyTorch: paper / own",
    "BLEU (chrF): paper / own / PyTorch",
]  # fmt: skip


def bench_stop_rule(args: argparse.Namespace) -> dict[str, Any]:
    """The ``--trained`` run: `stop_rule_workload` on each trained model, the whole test file per timed call."""
    report: dict[str, Any] = {"what": "the paper's stop rule on CTranslate2 (translate --ctranslate2) against "
        "CTranslate2's own translate_batch, same beam, alpha, batches, and the oracle (each sentence searched once "
        "to its shortest proof); trained models' test sets", "threads":
        args.threads, "rounds": args.rounds, "ct2_use_mkl": os.environ.get("CT2_USE_MKL"),
        "ct2_cpu_backend": cpu_backend(), "workloads": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="benchmark-stop-rule-") as folder:
        for name, model, source, reference in args.trained:
            workload = stop_rule_workload(name, Path(model), Path(source), Path(reference), Path(folder),
                                          args.threads, args.rounds)  # fmt: skip
            report["workloads"][name] = workload
            print(name, json.dumps(workload, indent=1), flush=True)
    return report


CT2_STOP_RULE = "ct2_stop_rule.json"


def ct2_stop_rule_table(results: Path) -> str:
    """The paper's stop rule on CTranslate2 against CTranslate2's own (``--trained``), each at its best thread count."""
    return table(STOP_RULE_HEADER, ["l", "l", "l", *"rrrrrrrrrr"], stop_rule_rows(read_json(results, CT2_STOP_RULE)))


def ct2_stop_rule_environment(results: Path) -> str:
    """Where and how the ``--trained`` run ran."""
    run = read_json(results, CT2_STOP_RULE)
    return (f"{processor(run)}, threads {', '.join(map(str, run['threads']))} (Nt: the best, at N), at least {run['rounds']} interleaved rounds of the whole file (more for a short one); load average "
            f"{environment_load(run)}, {minutes(run['wall_seconds'])}; {versions(run, 'ctranslate2')} "
            f"(CT2_USE_MKL={run['ct2_use_mkl'] or 'unset'}, CTranslate2's {run['ct2_cpu_backend']} backend)")  # fmt: skip
