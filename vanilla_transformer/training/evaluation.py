"""Evaluation during and after training: validation loss, BLEU/chrF/exact match, selection on validation; and the
one way a model's translations of pairs are made and scored across processes (`translate_and_score`), which
fine-tuning's evaluation (`vanilla_transformer.training.finetune.TranslationTrainer`) uses too."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from transformers import PreTrainedTokenizerBase

from ..atomic import write_file
from ..data import IGNORE_INDEX, Pair, TokenBatchSampler, TranslationCollator, example_lengths, tokenize_pairs
from ..data.numbers import exact_match_by_magnitude
from ..metrics import bleu_applies, compute_bleu, compute_chrf, exact_match, selection_metric
from ..metrics.compound_split import compute_compound_split_bleu
from ..modeling_vanilla_transformer import (
    token_cross_entropy,
)
from ..serving.search import translate
from .checkpoints import (
    average_checkpoints,
    load_weights,
)
from .config import TrainingConfig
from .logs import get_logger
from .run_dir import RunLayout
from .step import teacher_forced_logits, to_device
from .tracking import read_metrics

logger = get_logger(__name__)

# --------------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def score_translations(
    hypotheses: Sequence[str],
    references: Sequence[str],
    *,
    bleu: bool = True,
    chrf_signature: bool = False,
    compound_split_lang: str | None = None,
) -> dict[str, Any]:
    """chrF and the exact-match percentage, and with `bleu` sacreBLEU's BLEU with its signature (leave it out where it
    is 0 by construction, `bleu_applies`); with `chrf_signature`, chrF's signature too. With `compound_split_lang`
    (the references' language) and `bleu`, also the paper's tokenized, compound-split BLEU
    (`compute_compound_split_bleu`) as ``bleu_compound_split``, its recipe as ``bleu_compound_split_recipe``."""
    scores: dict[str, Any] = {}
    if bleu:
        result = compute_bleu(hypotheses, references)
        scores.update(bleu=result["score"], bleu_signature=result["signature"])
    if bleu and compound_split_lang is not None:
        paper = compute_compound_split_bleu(hypotheses, references, lang=compound_split_lang)
        scores.update(bleu_compound_split=paper["score"], bleu_compound_split_recipe=paper["recipe"])
    chrf = compute_chrf(hypotheses, references)
    scores.update(chrf=chrf["score"], exact_match=exact_match(hypotheses, references))
    if chrf_signature:
        scores["chrf_signature"] = chrf["signature"]
    return scores


def translate_and_score(
    accelerator: Accelerator,
    model,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[Pair],
    search: Mapping[str, Any],
    *,
    bleu: bool = True,
    chrf_signature: bool = False,
    compound_split_lang: str | None = None,
) -> tuple[list[str], dict[str, Any]]:
    """Translate the sources of `pairs` with `search` (keyword arguments of `translate`), process r of the
    `accelerator`'s P taking sentences r, r + P, ...; every process returns all the translations, and their scores
    against the pairs' targets (`score_translations`, with `bleu`, `chrf_signature` and `compound_split_lang`)."""
    rank, world = accelerator.process_index, accelerator.num_processes
    sources = [src for src, _ in pairs]
    mine = translate(model, tokenizer, sources[rank::world], **search)
    hypotheses: list[str] = [""] * len(sources)
    for process, part in enumerate(gather_object([mine])):
        hypotheses[process::world] = part
    references = [tgt for _, tgt in pairs]
    scores = score_translations(
        hypotheses, references, bleu=bleu, chrf_signature=chrf_signature, compound_split_lang=compound_split_lang
    )
    return hypotheses, scores


def describe_scores(scores: dict[str, Any], prefix: str) -> str:
    """``exact match 97.0%, chrF 99.73, BLEU 12.34`` of the scores named ``<prefix>exact_match``, ... present."""
    names = {"exact_match": "exact match {:.1f}%", "chrf": "chrF {:.2f}", "bleu": "BLEU {:.2f}"}
    return ", ".join(text.format(scores[prefix + name]) for name, text in names.items() if prefix + name in scores)


class Evaluator:
    """Scores the model a run trains, the work split across the run's processes: validation loss and scores during
    training (`validate`), the choice between candidate weights (`select_on_valid`) and the test set at the end
    (`score_test_set`). It holds what every score needs, so the `Trainer` passes only a step or candidates."""

    def __init__(
        self,
        accelerator: Accelerator,
        model,
        tokenizer: PreTrainedTokenizerBase,
        valid: Sequence[Pair],
        test: Sequence[Pair],
        config: TrainingConfig,
    ) -> None:
        self.accelerator, self.model, self.tokenizer, self.config = accelerator, model, tokenizer, config
        self.valid, self.test = list(valid), list(test)
        self.search = {**config.decoding.search(), "batch_size": config.decoding.translate_batch_size}
        self.valid_examples = tokenize_pairs(self.valid, tokenizer)
        self.collate = TranslationCollator(tokenizer.pad_token_id)
        references = [tgt for _, tgt in [*self.valid, *self.test]]
        self.bleu = bleu_applies(references)
        """Whether BLEU is scored: not where it is 0 by construction (number words)."""
        self.metric = selection_metric(references)
        """What candidates are chosen by: BLEU where it applies, else exact match (then chrF, on a tie)."""

    def translate_and_score(
        self, pairs: Sequence[Pair], *, paper_bleu: bool = False
    ) -> tuple[list[str], dict[str, Any]]:
        """The translations of `pairs` with the run's search and their scores, BLEU only where it applies
        (`translate_and_score`); with `paper_bleu` and the run's ``--compound-split-bleu``, the paper's BLEU too."""
        lang = self.config.data.tgt_lang if paper_bleu and self.config.decoding.compound_split_bleu else None
        return translate_and_score(
            self.accelerator, self.model, self.tokenizer, pairs, self.search, bleu=self.bleu, compound_split_lang=lang
        )

    @torch.no_grad()
    def validation_loss(self) -> dict[str, float]:
        """Label-smoothed loss and perplexity per target token, over all validation examples."""
        accelerator, model, examples = self.accelerator, self.model, self.valid_examples
        lengths = example_lengths(examples)
        max_tokens = max(self.config.optimization.max_tokens, max(src + tgt for src, tgt in lengths))
        batches = TokenBatchSampler(lengths, max_tokens, shuffle=False).epoch_batches(0)
        totals = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # smoothed loss, NLL, target tokens
        model.eval()
        for indices in batches[accelerator.process_index :: accelerator.num_processes]:
            batch = to_device(self.collate([examples[i] for i in indices]), accelerator.device)
            logits = teacher_forced_logits(model, batch)  # [B, T, V]
            labels = batch["labels"]
            # num_items_in_batch=1: the summed loss, divided by the token count of all processes below.
            totals[0] += token_cross_entropy(
                logits, labels, 1, label_smoothing=self.config.optimization.label_smoothing
            ).double()
            totals[1] += token_cross_entropy(logits, labels, 1).double()
            totals[2] += (labels != IGNORE_INDEX).sum()
        model.train()
        smoothed, nll, tokens = accelerator.reduce(totals, "sum").tolist()
        return {"valid_loss": smoothed / tokens, "valid_ppl": math.exp(nll / tokens)}

    def validate(self, step: int) -> None:
        """Log the validation loss and perplexity, and BLEU, chrF and exact match of beam-search translations."""
        logs = self.validation_loss()
        _, scores = self.translate_and_score(self.valid)
        logs.update({f"valid_{name}": value for name, value in scores.items() if name != "bleu_signature"})
        self.accelerator.log(logs, step=step)
        logger.info(
            f"step {step}: validation loss {logs['valid_loss']:.3f}, {describe_scores(logs, 'valid_')}",
            main_process_only=True,
        )

    def select_on_valid(self, candidates: dict[str, list[Path]]) -> dict[str, Any]:
        """Choose between the candidate weights (each the average of its checkpoints) by the validation score
        `metric` (BLEU, or exact match then chrF); the model is left with the weights of the last candidate scored
        (the caller loads the selected ones).

        The first candidate (the average) is kept unless another is better on validation by more than
        ``config.checkpointing.select_margin`` points, the noise of the score. Returns the validation score of each candidate
        (``valid_<metric>_<name>``), the ``selected`` name and the test score of the candidates not selected
        (``test_<metric>_<name>``; `score_test_set` scores the selected one), so that the effect of checkpoint
        averaging is measured on both sets.
        """
        valid, test, metric = self.valid, self.test, self.metric
        results: dict[str, Any] = {}
        ranks = {}
        for name, paths in candidates.items():
            load_weights(self.model, average_checkpoints(paths))
            _, scores = self.translate_and_score(valid)
            results[f"valid_{metric}_{name}"] = scores[metric]
            ranks[name] = (scores[metric], scores["chrf"])
        preferred, best = next(iter(candidates)), max(candidates, key=ranks.__getitem__)
        margin = ranks[best][0] - ranks[preferred][0]
        better = margin > self.config.checkpointing.select_margin or (
            margin == 0 and ranks[best][1] > ranks[preferred][1]
        )
        results["selected"] = best if better else preferred
        for name, paths in candidates.items():
            if name != results["selected"] and test:
                load_weights(self.model, average_checkpoints(paths))
                results[f"test_{metric}_{name}"] = self.translate_and_score(test)[1][metric]
        logger.info(
            f"validation {metric}: "
            + ", ".join(f"{name} {results[f'valid_{metric}_{name}']:.2f}" for name in candidates)
            + f"; selected: {results['selected']}",
            main_process_only=True,
        )
        return results

    def score_test_set(self) -> dict[str, Any]:
        """Translate the test set, write it with its translations into the run directory, print samples; the
        scores (``test_bleu``, ...)."""
        config, pairs = self.config, self.test
        sources, references = [src for src, _ in pairs], [tgt for _, tgt in pairs]
        hypotheses, test_scores = self.translate_and_score(pairs, paper_bleu=True)
        scores = {f"test_{name}": value for name, value in test_scores.items()}
        if self.config.data.numbers_task:
            scores["test_exact_match_by_magnitude"] = exact_match_by_magnitude(sources, hypotheses, references)
        if self.accelerator.is_main_process:
            files = RunLayout(config.checkpointing.output_dir).test_files(config.data.src_lang, config.data.tgt_lang)
            texts = {"sources": sources, "references": references, "hypotheses": hypotheses}
            for role, path in files.items():
                write_file(path, "".join(line + "\n" for line in texts[role]))
            samples = "".join(
                f"\n  {src}\n    -> {hyp}" + ("" if hyp == ref else f"   (reference: {ref})")
                for src, hyp, ref in list(zip(sources, hypotheses, references, strict=True))[
                    : config.decoding.num_samples
                ]
            )
            logger.info(f"sample test translations:{samples}", main_process_only=True)
            signature = f" ({scores['test_bleu_signature']})" if "test_bleu_signature" in scores else ""
            if "test_bleu_compound_split" in scores:
                signature += (
                    f"; the paper's BLEU {scores['test_bleu_compound_split']:.2f} "
                    f"({scores['test_bleu_compound_split_recipe']})"
                )
            by_magnitude = scores.get("test_exact_match_by_magnitude", {})
            logger.info(
                f"test: {describe_scores(scores, 'test_')}{signature}"
                + "".join(f"\n  numbers {name}: exact match {value:.1f}%" for name, value in by_magnitude.items()),
                main_process_only=True,
            )
        return scores


def best_validation(metrics_path: Path, metric: str = "bleu") -> dict[str, Any]:
    """The best validation score `metric` logged during training (``best_valid_<metric>``), and its step (none when
    no evaluation ran)."""
    key = f"valid_{metric}"
    rows = [row for row in read_metrics(metrics_path) if key in row] if metrics_path.is_file() else []
    if not rows:
        return {}
    best = max(rows, key=lambda row: (row[key], row.get("valid_chrf", 0.0)))
    return {f"best_{key}": best[key], "best_valid_step": best["step"]}
