"""Training with the paper's recipe (section 5), on one CPU, one GPU or many processes through Accelerate.

The recipe, and where each piece lives:

* Data (5.1): a shared source/target BPE vocabulary (`vanilla_transformer.tokenization`), batches of similar-length
  pairs holding about 25,000 source and 25,000 target tokens per step (`data.TokenBatchSampler`, here
  ``max_tokens`` per micro-batch times ``grad_accum`` micro-batches times the number of processes).
* Optimizer (5.3): Adam with beta1 = 0.9, beta2 = 0.98, epsilon = 1e-9, and the learning rate of equation (3),
  `noam_learning_rate`: a linear warmup over 4,000 steps, then decay with the inverse square root of the step.
* Regularization (5.4): dropout (from the model configuration) and label smoothing of 0.1.
* Checkpoints (6.1): the final model averages the last 5 (base) or 20 (big) checkpoints; it translates with beam
  search, beam 4 and length penalty 0.6 (`vanilla_transformer.generation`).

The loss of an optimizer step is the sum of the label-smoothed cross-entropy of all its target tokens divided by
their number, over all micro-batches and processes, so that neither gradient accumulation nor the number of
processes changes it. A run can be interrupted and resumed (``resume=True``) with exactly the same result as an
uninterrupted one: checkpoints hold the model, the optimizer, the schedule, the position in the data and the random
number generator states of every process.

Entry points: `TrainingConfig` (every setting, with `TRAINING_PRESETS`), `parse_args` (the command line of
``scripts/train.py``), and `train`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import time
import warnings
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

import torch
from accelerate import Accelerator
from accelerate.logging import get_logger
from accelerate.utils import gather_object, set_seed
from torch.optim.lr_scheduler import LambdaLR
from tqdm.auto import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from .checkpoints import (
    average_checkpoints,
    checkpoint_step,
    export_model,
    list_checkpoints,
    load_weights,
    save_checkpoint,
)
from .configuration_vanilla_transformer import PRESETS as MODEL_PRESETS
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .data import (
    IGNORE_INDEX,
    Pair,
    Splits,
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    example_lengths,
    load_hf_translation,
    make_numbers_task,
    padding_fraction,
    read_jsonl,
    read_parallel_text,
    read_tsv,
    tokenize_pairs,
)
from .generation import translate
from .hub import add_pipeline_support
from .metrics import compute_bleu, compute_chrf, exact_match
from .modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    shift_tokens_right,
    token_cross_entropy,
)
from .tokenization import check_tokenizer_matches_config, train_tokenizer
from .tracking import JsonlTracker, plot_metrics, read_metrics

logger = get_logger(__name__)

_REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
TRAINING_CONFIG_NAME = "training_config.json"
DATASET_KINDS = ("numbers", "text", "tsv", "jsonl", "hf:<name>")


def _option(default: Any, help: str, *, may_change_on_resume: bool = False) -> Any:
    """A `TrainingConfig` field: its default, its ``--help`` text, and whether a resumed run may change it."""
    return field(default=default, metadata={"help": help, "may_change_on_resume": may_change_on_resume})


@dataclass
class TrainingConfig:
    """Every setting of a training run. The defaults are the paper's base model on WMT14 English-German where the
    paper gives a value; `TRAINING_PRESETS` hold complete jobs. Each field is also a command-line option
    (``d_model`` is ``--d-model``)."""

    # What this run is.
    preset: str | None = _option(None, "name of the preset these settings started from")
    output_dir: str | None = _option(
        None, "run directory: checkpoints, logs, the final model (default: runs/<preset>)", may_change_on_resume=True
    )
    resume: bool = _option(
        False,
        "continue the run in --output-dir from its last checkpoint (start it if it has none)",
        may_change_on_resume=True,
    )
    overwrite: bool = _option(
        False, "delete an existing run in --output-dir and start over", may_change_on_resume=True
    )

    # Data.
    dataset: str = _option("numbers", f"corpus: one of {', '.join(DATASET_KINDS)} (a Hugging Face dataset)")
    data_dir: str | None = _option(None, "directory of the files of a text, tsv or jsonl dataset")
    dataset_config: str | None = _option(None, "configuration of a Hugging Face dataset, e.g. de-en")
    src_lang: str = _option("en", "source language code (file suffix, column or key)")
    tgt_lang: str = _option("de", "target language code")
    train_split: str = _option("train", "name of the training split (file stem or dataset split)")
    valid_split: str = _option("valid", "name of the validation split")
    test_split: str = _option("test", "name of the test split")
    train_src: str | None = _option(
        None, "aligned text files, one sentence per line: training source (replaces --dataset)"
    )
    train_tgt: str | None = _option(None, "training target, aligned with --train-src")
    valid_src: str | None = _option(None, "validation source (with --train-src)")
    valid_tgt: str | None = _option(None, "validation target (with --train-src)")
    test_src: str | None = _option(None, "test source (with --train-src)")
    test_tgt: str | None = _option(None, "test target (with --train-src)")
    num_train: int = _option(20_000, "numbers task: training pairs")
    num_valid: int = _option(500, "numbers task: validation pairs")
    num_test: int = _option(500, "numbers task: test pairs")
    max_number: int = _option(99_999, "numbers task: the numbers are drawn from 1..max_number")
    max_length: int = _option(256, "drop training pairs with a side longer than this many tokens")

    # Tokenizer and model.
    tokenizer: str | None = _option(None, "directory of an existing tokenizer (default: train a shared BPE)")
    vocab_size: int = _option(37_000, "vocabulary size of the model (and of the tokenizer trained for it)")
    model: str = _option("base", "model preset of Table 3: base or big")
    d_model: int | None = _option(None, "override the preset's d_model")
    layers: int | None = _option(None, "override the number of encoder and of decoder layers (N)")
    heads: int | None = _option(None, "override the number of attention heads (h)")
    ffn_dim: int | None = _option(None, "override the feed-forward inner width (d_ff)")
    dropout: float | None = _option(None, "override the preset's dropout (P_drop)")

    # Optimization.
    max_tokens: int = _option(12_500, "padded source + target tokens per micro-batch and process")
    tokens_per_step: int | None = _option(
        50_000, "target padded tokens per optimizer step; sets --grad-accum from --max-tokens and the process count"
    )
    grad_accum: int | None = _option(
        None, "micro-batches per optimizer step and process (overrides --tokens-per-step)"
    )
    max_steps: int = _option(100_000, "optimizer steps to train for", may_change_on_resume=True)
    max_train_minutes: float | None = _option(
        None,
        "also stop training after this many minutes of it, evaluations and checkpoints included (the learning "
        "rate still follows the step count)",
        may_change_on_resume=True,
    )
    warmup_steps: int = _option(4000, "learning-rate warmup steps (section 5.3)")
    lr_scale: float = _option(1.0, "factor on the learning rate of equation (3)")
    adam_beta1: float = _option(0.9, "Adam beta1")
    adam_beta2: float = _option(0.98, "Adam beta2")
    adam_eps: float = _option(1e-9, "Adam epsilon")
    label_smoothing: float = _option(0.1, "label smoothing epsilon_ls (section 5.4)")
    max_grad_norm: float | None = _option(None, "clip gradients to this norm (the paper does not clip)")
    mixed_precision: str = _option("no", "no, fp16 or bf16")
    seed: int = _option(1, "seed of model initialization, data order and dropout")
    num_threads: int | None = _option(
        None, "CPU threads per process (torch.set_num_threads)", may_change_on_resume=True
    )

    # Evaluation, checkpoints, logging.
    log_every: int = _option(
        100, "log training loss, learning rate and tokens/s every this many steps", may_change_on_resume=True
    )
    eval_every: int = _option(
        5000, "compute validation loss and BLEU every this many steps", may_change_on_resume=True
    )
    save_every: int = _option(1400, "write a checkpoint every this many steps", may_change_on_resume=True)
    keep_checkpoints: int = _option(
        5, "checkpoints to keep (at least --average-checkpoints)", may_change_on_resume=True
    )
    average_checkpoints: int = _option(
        5, "average the last this many checkpoints for the final model", may_change_on_resume=True
    )
    select_on_valid: bool = _option(
        False,
        "translate the validation and test sets with the last checkpoint and with the average, keep the one with "
        "the higher validation BLEU and report the test BLEU of both",
        may_change_on_resume=True,
    )
    num_beams: int = _option(4, "beam size (section 6.1)", may_change_on_resume=True)
    length_penalty: float = _option(0.6, "GNMT length penalty alpha (section 6.1)", may_change_on_resume=True)
    max_length_offset: int = _option(50, "maximum output length = input length + this", may_change_on_resume=True)
    translate_batch_size: int = _option(64, "sentences per beam-search batch", may_change_on_resume=True)
    report_to: str = _option(
        "",
        "more Accelerate trackers besides the JSONL log, comma-separated (e.g. tensorboard)",
        may_change_on_resume=True,
    )
    num_samples: int = _option(5, "sample test translations to print at the end", may_change_on_resume=True)

    def __post_init__(self) -> None:
        if self.output_dir is None:
            self.output_dir = default_output_dir(self.preset)
        self._check()

    def _check(self) -> None:
        """Reject impossible settings, naming the command-line option and its value."""
        positive = ("num_train", "max_number", "max_length", "vocab_size", "max_tokens", "max_steps", "warmup_steps",
                    "log_every", "eval_every", "save_every", "keep_checkpoints", "average_checkpoints", "num_beams",
                    "translate_batch_size")  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{_flag(name)} must be positive, got {_flag(name)}={getattr(self, name)}")
        for name in ("tokens_per_step", "grad_accum", "num_threads", "d_model", "layers", "heads", "ffn_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{_flag(name)} must be positive, got {_flag(name)}={value}")
        if not (self.dataset in DATASET_KINDS[:-1] or (self.dataset.startswith("hf:") and len(self.dataset) > 3)):
            raise ValueError(f"unknown dataset --dataset={self.dataset!r}; choose one of {', '.join(DATASET_KINDS)}")
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"unknown model --model={self.model!r}; choose one of {', '.join(MODEL_PRESETS)}")
        if self.mixed_precision not in ("no", "fp16", "bf16"):
            raise ValueError(
                f"--mixed-precision must be no, fp16 or bf16, got --mixed-precision={self.mixed_precision!r}"
            )
        if self.max_tokens < 2 * self.max_length:
            raise ValueError(
                f"--max-tokens={self.max_tokens} is smaller than the longest pair --max-length={self.max_length} "
                f"allows ({self.max_length} source + {self.max_length} target tokens): raise --max-tokens or lower "
                f"--max-length"
            )
        if self.max_train_minutes is not None and not self.max_train_minutes > 0:
            raise ValueError(f"--max-train-minutes must be positive, got --max-train-minutes={self.max_train_minutes}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"--label-smoothing must be in [0, 1), got --label-smoothing={self.label_smoothing}")
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite contradict each other: pass one of them")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TrainingConfig:
        """The settings of preset `name` (see `TRAINING_PRESETS`), with any field overridden by keyword."""
        if name not in TRAINING_PRESETS:
            raise ValueError(f"unknown preset --preset={name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
        return cls(**{"preset": name, **TRAINING_PRESETS[name], **overrides})

    @classmethod
    def load(cls, path: str | Path) -> TrainingConfig:
        """Read the ``training_config.json`` a run wrote."""
        return cls(**json.loads(Path(path).read_text(encoding="utf-8")))

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n", encoding="utf-8")

    def check_resumable_from(self, saved: TrainingConfig) -> None:
        """Raise a ValueError naming each setting that differs from the run being resumed and must not."""
        differences = [
            f"{_flag(f.name)}={getattr(self, f.name)!r} but the run has {f.name}={getattr(saved, f.name)!r}"
            for f in fields(self)
            if not f.metadata["may_change_on_resume"] and getattr(self, f.name) != getattr(saved, f.name)
        ]
        if differences:
            changeable = ", ".join(_flag(f.name) for f in fields(self) if f.metadata["may_change_on_resume"])
            raise ValueError(
                f"cannot resume the run in {self.output_dir} with different settings: {'; '.join(differences)}. "
                f"Only these may change when resuming: {changeable}"
            )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def default_output_dir(preset: str | None) -> str:
    """``runs/<preset>``, relative to the working directory."""
    return str(Path("runs") / (preset or "custom"))


TRAINING_PRESETS: dict[str, dict[str, Any]] = {
    # English number words to German number words, generated on the fly (data.make_numbers_task): a 1.5M-parameter
    # model reaches about 97% exact match in about 6 minutes on two busy CPU cores. One thread: on a CPU shared with
    # other work, two OpenMP threads per process ran up to 16 times slower. Half the rate of equation (3) with a
    # warmup of 300 steps (peak 2.6e-3); the full rate (peak 4.4e-3 after 400 steps) made exact match fall from 90%
    # to about 55%.
    "numbers": dict(
        dataset="numbers",
        vocab_size=500,
        max_length=64,
        model="base",
        d_model=128,
        layers=3,
        heads=4,
        ffn_dim=512,
        dropout=0.1,
        max_tokens=2048,
        tokens_per_step=None,
        max_steps=1000,
        warmup_steps=300,
        lr_scale=0.5,
        log_every=20,
        eval_every=250,
        save_every=50,
        keep_checkpoints=5,
        average_checkpoints=5,
        num_threads=1,
    ),
    # Multi30k English-German (29k captions), the raw files of ../shared/data/multi30k next to the repository, in
    # 60 minutes of two CPU cores: 50 minutes of training, the rest for the tokenizer and the evaluations. A small
    # base model (N=3, d_model=256, h=4, d_ff=512, P_drop 0.1; 6.0M parameters) at 4,096 tokens per step: about 3,600
    # tokens/s on two cores, about 12 epochs in 50 minutes. Equation (3) scaled by 0.45 after 500 warmup steps
    # (peak 1.25e-3): a Transformer-Tiny (N=4, d_model=128, d_ff=256, P_drop 0.3) at 1.5 times eq. 3 (peak 4.2e-3)
    # had a validation loss of 4.65 and BLEU 6.6 after 1,000 steps. Checkpoints every 250 steps (about an epoch);
    # the last 5 are averaged, and the average is kept only if it beats the last checkpoint on validation BLEU.
    "multi30k": dict(
        dataset="text",
        data_dir=str(_REPOSITORY_ROOT.parent / "shared" / "data" / "multi30k"),
        valid_split="valid",
        test_split="test_2016_flickr",
        vocab_size=8000,
        max_length=128,
        model="base",
        d_model=256,
        layers=3,
        heads=4,
        ffn_dim=512,
        dropout=0.1,
        max_tokens=4096,
        tokens_per_step=None,
        max_steps=20_000,
        max_train_minutes=50.0,
        warmup_steps=500,
        lr_scale=0.45,
        log_every=50,
        eval_every=1000,
        save_every=250,
        keep_checkpoints=5,
        average_checkpoints=5,
        select_on_valid=True,
        num_threads=2,
    ),
    # The paper's base and big models on WMT14 English-German (Hugging Face `wmt14`, `de-en`): newstest2013 for
    # validation, newstest2014 for test. Checkpoints every ~10 minutes of the paper's 8 P100 GPUs.
    "wmt14-base": dict(
        dataset="hf:wmt14",
        dataset_config="de-en",
        valid_split="validation",
        test_split="test",
        vocab_size=37_000,
        model="base",
        max_tokens=12_500,
        tokens_per_step=50_000,
        max_steps=100_000,
        warmup_steps=4000,
        save_every=1400,
        keep_checkpoints=5,
        average_checkpoints=5,
    ),
    "wmt14-big": dict(
        dataset="hf:wmt14",
        dataset_config="de-en",
        valid_split="validation",
        test_split="test",
        vocab_size=37_000,
        model="big",
        max_tokens=6250,
        tokens_per_step=50_000,
        max_steps=300_000,
        warmup_steps=4000,
        save_every=600,
        keep_checkpoints=20,
        average_checkpoints=20,
    ),
}
DEFAULT_PRESET = "numbers"


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``scripts/train.py``: ``--preset`` plus one option per `TrainingConfig` field.

    Options not given on the command line are absent from the parsed namespace (their default is
    ``argparse.SUPPRESS``), so that `parse_args` can tell what the user chose from what the preset chose.
    """
    parser = argparse.ArgumentParser(
        description="Train a Transformer with the recipe of Vaswani et al. (2017).",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--preset",
        choices=list(TRAINING_PRESETS),
        help=f"the job to run, before overrides (default: {DEFAULT_PRESET})",
    )
    types = get_type_hints(TrainingConfig)
    for config_field in fields(TrainingConfig):
        if config_field.name == "preset":
            continue
        kind = types[config_field.name]
        help_text = f"{config_field.metadata['help']} (default: the preset's, else {config_field.default!r})"
        if kind is bool:
            parser.add_argument(_flag(config_field.name), action="store_true", help=config_field.metadata["help"])
        else:
            value_type = next(t for t in (int, float, str) if t == kind or t in getattr(kind, "__args__", ()))
            parser.add_argument(_flag(config_field.name), type=value_type, help=help_text)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> TrainingConfig:
    """Settings from the command line: the preset's, overridden by the options given.

    With ``--resume`` and a run already in the output directory, the run's saved settings take the preset's place,
    so ``--resume --output-dir DIR`` alone continues a run as it was started; options given must then be ones that
    may change (`train` checks, see `TrainingConfig.check_resumable_from`).
    """
    given = vars(build_parser().parse_args(argv))
    preset = given.get("preset", DEFAULT_PRESET)
    saved = Path(given.get("output_dir") or default_output_dir(preset)) / TRAINING_CONFIG_NAME
    if given.get("resume") and saved.is_file():
        return dataclasses.replace(TrainingConfig.load(saved), **given)
    given.pop("preset", None)
    return TrainingConfig.from_preset(preset, **given)


# --------------------------------------------------------------------------------------------------------------------
# Learning rate (section 5.3)
# --------------------------------------------------------------------------------------------------------------------


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Equation (3): ``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` for step >= 1.

    It grows linearly for `warmup_steps` steps, peaks at ``scale * (d_model * warmup_steps)^-0.5``, then decays with
    the inverse square root of the step. ("Noam" after its author, as tensor2tensor and OpenNMT call it.)
    """
    if step < 1:
        raise ValueError(f"step counts from 1, got step={step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_schedule(optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int, scale: float = 1.0) -> LambdaLR:
    """A scheduler giving the s-th optimizer step (s = 1, 2, ...) the learning rate ``noam_learning_rate(s, ...)``.

    It replaces the optimizer's own learning rate. Call ``scheduler.step()`` after each ``optimizer.step()``.
    """
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = 1.0  # LambdaLR multiplies the initial rate by the function's value
    return LambdaLR(optimizer, lambda index: noam_learning_rate(index + 1, d_model, warmup_steps, scale))


# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------


def load_splits(config: TrainingConfig) -> Splits:
    """The train, validation and test pairs of ``config.dataset``, as stored.

    ``text`` reads ``<split>.<src_lang>`` and ``<split>.<tgt_lang>`` from ``data_dir``, ``tsv`` reads
    ``<split>.tsv`` (source in the first column, target in the second), ``jsonl`` reads ``<split>.jsonl`` (keys
    ``src_lang`` and ``tgt_lang``), and ``hf:<name>`` loads the splits of a Hugging Face dataset.
    """
    if config.train_src is not None or config.train_tgt is not None:
        return _read_aligned_files(config)
    split_names = (config.train_split, config.valid_split, config.test_split)
    if config.dataset == "numbers":
        return make_numbers_task(config.num_train, config.num_valid, config.num_test, max_number=config.max_number)
    if config.dataset.startswith("hf:"):
        name = config.dataset.removeprefix("hf:")
        return Splits(
            *(
                load_hf_translation(
                    name, config.dataset_config, split=split, src_lang=config.src_lang, tgt_lang=config.tgt_lang
                )
                for split in split_names
            )
        )
    if config.data_dir is None:
        raise ValueError(f"--dataset={config.dataset} reads its files from --data-dir, which is not set")
    data_dir = Path(config.data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir={config.data_dir} is not a directory")
    if config.dataset == "text":
        return Splits(
            *(
                read_parallel_text(data_dir / f"{split}.{config.src_lang}", data_dir / f"{split}.{config.tgt_lang}")
                for split in split_names
            )
        )
    if config.dataset == "tsv":
        return Splits(*(read_tsv(data_dir / f"{split}.tsv") for split in split_names))
    return Splits(
        *(read_jsonl(data_dir / f"{split}.jsonl", config.src_lang, config.tgt_lang) for split in split_names)
    )


def _read_aligned_files(config: TrainingConfig) -> Splits:
    """The splits from ``--train-src/--train-tgt``, ``--valid-src/--valid-tgt`` and ``--test-src/--test-tgt``."""
    splits = []
    for split in ("train", "valid", "test"):
        src, tgt = getattr(config, f"{split}_src"), getattr(config, f"{split}_tgt")
        if src is None or tgt is None:
            raise ValueError(
                f"aligned files need all of --train-src/--train-tgt, --valid-src/--valid-tgt and --test-src/--test-tgt; "
                f"got --{split}-src={src!r} and --{split}-tgt={tgt!r}"
            )
        splits.append(read_parallel_text(src, tgt))
    return Splits(*splits)


def build_model_config(config: TrainingConfig) -> VanillaTransformerConfig:
    """The model configuration: the ``model`` preset of Table 3, with the overrides of `config`."""
    overrides = {
        "d_model": config.d_model,
        "encoder_layers": config.layers,
        "decoder_layers": config.layers,
        "encoder_attention_heads": config.heads,
        "decoder_attention_heads": config.heads,
        "encoder_ffn_dim": config.ffn_dim,
        "decoder_ffn_dim": config.ffn_dim,
        "dropout": config.dropout,
    }
    given = {name: value for name, value in overrides.items() if value is not None}
    return VanillaTransformerConfig.from_preset(config.model, vocab_size=config.vocab_size, **given)


def _prepare_tokenizer(
    config: TrainingConfig, train_pairs: Sequence[Pair], accelerator: Accelerator, directory: Path
) -> PreTrainedTokenizerBase:
    """The run's tokenizer, saved in `directory`: loaded from there when resuming, else from ``config.tokenizer``
    or trained on the training pairs (on the main process, which saves it for the others)."""
    with accelerator.main_process_first():
        if directory.is_dir():
            return AutoTokenizer.from_pretrained(directory)
        if config.tokenizer is not None:
            if not Path(config.tokenizer).is_dir():
                raise FileNotFoundError(f"--tokenizer={config.tokenizer} is not a directory")
            tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        else:
            tokenizer = train_tokenizer([text for pair in train_pairs for text in pair], config.vocab_size)
        if accelerator.is_main_process:
            tokenizer.save_pretrained(directory)
    return tokenizer


# --------------------------------------------------------------------------------------------------------------------
# Evaluation
# --------------------------------------------------------------------------------------------------------------------


def score_translations(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, Any]:
    """sacreBLEU's BLEU (with its signature) and chrF, and the exact-match percentage."""
    bleu = compute_bleu(hypotheses, references)
    return {
        "bleu": bleu["score"],
        "bleu_signature": bleu["signature"],
        "chrf": compute_chrf(hypotheses, references)["score"],
        "exact_match": exact_match(hypotheses, references),
    }


def _translate_across_processes(
    accelerator: Accelerator,
    model,
    tokenizer: PreTrainedTokenizerBase,
    sentences: Sequence[str],
    config: TrainingConfig,
) -> list[str]:
    """Translate `sentences`, process r taking sentences r, r + P, ...; every process returns all translations."""
    rank, world = accelerator.process_index, accelerator.num_processes
    mine = translate(
        model,
        tokenizer,
        sentences[rank::world],
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        max_length_offset=config.max_length_offset,
        batch_size=config.translate_batch_size,
    )
    translations: list[str] = [""] * len(sentences)
    for process, part in enumerate(gather_object([mine])):
        translations[process::world] = part
    return translations


@torch.no_grad()
def _validation_loss(
    accelerator: Accelerator, model, examples: Sequence[dict], config: TrainingConfig, collate: TranslationCollator
) -> dict[str, float]:
    """Label-smoothed loss and perplexity per target token, over all examples, split across processes."""
    lengths = example_lengths(examples)
    max_tokens = max(config.max_tokens, max(src + tgt for src, tgt in lengths))
    batches = TokenBatchSampler(lengths, max_tokens, shuffle=False).epoch_batches(0)
    totals = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # smoothed loss, NLL, target tokens
    model.eval()
    for indices in batches[accelerator.process_index :: accelerator.num_processes]:
        batch = _to_device(collate([examples[i] for i in indices]), accelerator.device)
        logits = _forward(model, batch)
        labels = batch["labels"]
        # num_items_in_batch=1: the summed loss, divided by the token count of all processes below.
        totals[0] += token_cross_entropy(logits, labels, 1, label_smoothing=config.label_smoothing).double()
        totals[1] += token_cross_entropy(logits, labels, 1).double()
        totals[2] += (labels != IGNORE_INDEX).sum()
    model.train()
    smoothed, nll, tokens = accelerator.reduce(totals, "sum").tolist()
    return {"valid_loss": smoothed / tokens, "valid_ppl": math.exp(nll / tokens)}


def _to_device(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


def _forward(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Teacher-forced logits ``[B, T, V]``: the decoder reads the labels shifted right behind the start token."""
    config = getattr(model, "module", model).config
    decoder_input_ids = shift_tokens_right(batch["labels"], config.pad_token_id, config.decoder_start_token_id)
    return model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
    ).logits


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class TrainingProgress:
    """Where training stands. Saved in every checkpoint, so that a resumed run continues at the same batch."""

    step: int = 0  # optimizer steps taken
    epoch: int = 0  # epoch of the next training batch
    batch: int = 0  # index of this process's next training batch within its epoch
    seconds: float = 0.0  # wall time of the training loop so far (for --max-train-minutes)

    def state_dict(self) -> dict[str, float]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.step, self.epoch, self.batch = state["step"], state["epoch"], state["batch"]
        self.seconds = state.get("seconds", 0.0)  # absent in checkpoints of version 0.1


def out_of_time(accelerator: Accelerator, progress: TrainingProgress, max_minutes: float | None) -> bool:
    """Whether the training loop has used up ``max_minutes``; all processes agree (they stop at the same step)."""
    if max_minutes is None:
        return False
    late = progress.seconds >= 60 * max_minutes
    if accelerator.num_processes == 1:
        return late
    return bool(accelerator.reduce(torch.tensor(float(late), device=accelerator.device), "max").item())


def _training_batches(
    sampler: TokenBatchSampler, examples: Sequence[dict], collate: TranslationCollator, progress: TrainingProgress
) -> Iterator[dict[str, torch.Tensor]]:
    """This process's training batches, from ``progress.epoch`` and ``progress.batch`` on, epoch after epoch.

    `progress` advances with every batch taken, so a checkpoint written after a step records where the next one
    starts.
    """
    while True:
        sampler.set_epoch(progress.epoch, start_batch=progress.batch)
        for indices in sampler:
            progress.batch += 1
            yield collate([examples[i] for i in indices])
        progress.epoch, progress.batch = progress.epoch + 1, 0


def gradient_accumulation_steps(config: TrainingConfig, num_processes: int) -> int:
    """``config.grad_accum`` if set, else the micro-batches per process that bring ``max_tokens`` times the number
    of processes closest to ``tokens_per_step`` (at least 1), else 1."""
    if config.grad_accum is not None:
        return config.grad_accum
    if config.tokens_per_step is not None:
        return max(1, round(config.tokens_per_step / (config.max_tokens * num_processes)))
    return 1


def accumulate_gradients(
    accelerator: Accelerator, model, micro_batches: Sequence[dict[str, torch.Tensor]], label_smoothing: float
) -> dict[str, torch.Tensor]:
    """Forward and backward the micro-batches of one optimizer step (this process's share of it).

    The gradients left in ``.grad`` are those of the step's loss: the sum of the label-smoothed cross-entropy of
    all its target tokens divided by their number N, over the micro-batches of all processes. Each process divides
    its sum by its share N / P, because DDP averages the gradients of the P processes; the gradients are
    all-reduced once, after the last micro-batch.

    Returns:
        This process's summed ``loss``, its ``target_tokens``, its real (non-padding) source + target ``tokens``
        and its padded ``positions``, as tensors, for logging.
    """
    target_tokens = sum((batch["labels"] != IGNORE_INDEX).sum() for batch in micro_batches)
    step_tokens = accelerator.reduce(target_tokens, "sum")
    share = step_tokens / accelerator.num_processes
    summed_loss = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    model.train()
    for index, batch in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with nullcontext() if last else accelerator.no_sync(model):
            loss = token_cross_entropy(_forward(model, batch), batch["labels"], share, label_smoothing=label_smoothing)
            accelerator.backward(loss)
        summed_loss += loss.detach().double() * share
    return {
        "loss": summed_loss,
        "target_tokens": target_tokens.double(),
        "tokens": sum(
            batch["attention_mask"].sum() + (batch["labels"] != IGNORE_INDEX).sum() for batch in micro_batches
        ).double(),
        "positions": torch.tensor(
            float(sum(batch["input_ids"].numel() + batch["labels"].numel() for batch in micro_batches)),
            dtype=torch.float64,
            device=accelerator.device,
        ),
    }


def _check_run_dir(config: TrainingConfig) -> Path | None:
    """Check the run directory against ``resume`` and ``overwrite``; return the checkpoint to resume from, if any."""
    run_dir = Path(config.output_dir)
    saved = run_dir / TRAINING_CONFIG_NAME
    if not saved.is_file() or config.overwrite:
        return None
    if not config.resume:
        raise ValueError(
            f"--output-dir={config.output_dir} already holds a run: pass --resume to continue it, --overwrite to "
            f"start it over, or choose another --output-dir"
        )
    config.check_resumable_from(TrainingConfig.load(saved))
    checkpoints = list_checkpoints(run_dir / "checkpoints")
    return checkpoints[-1] if checkpoints else None


def train(config: TrainingConfig) -> dict[str, Any]:
    """Train a model, average its last checkpoints, export it and score it on the test set.

    Every process of an ``accelerate launch`` runs this. The run directory ``config.output_dir`` receives:
    ``training_config.json``, ``tokenizer/``, ``checkpoints/checkpoint-<step>/``, ``metrics.jsonl`` and
    ``metrics.png`` (the curves), ``model/`` (the averaged model, a Hugging Face model directory),
    ``test.<src_lang>``, ``test.<tgt_lang>`` and ``test.hyp.<tgt_lang>`` (the test set and its translations), and
    ``results.json``.

    Returns:
        The contents of ``results.json``: test BLEU (and its sacreBLEU signature), chrF and exact match, training
        throughput and padding share, and the checkpoints averaged.
    """
    started = time.perf_counter()
    if config.num_threads is not None:
        torch.set_num_threads(config.num_threads)
    run_dir = Path(config.output_dir)
    checkpoint_dir = run_dir / "checkpoints"
    resume_from = _check_run_dir(config)
    jsonl = JsonlTracker(run_dir / "metrics.jsonl", start_step=checkpoint_step(resume_from) if resume_from else 0)
    extra_trackers = [name for name in config.report_to.split(",") if name]
    accelerator = Accelerator(
        mixed_precision=config.mixed_precision, log_with=[jsonl, *extra_trackers], project_dir=str(run_dir)
    )
    if accelerator.is_main_process:
        if config.overwrite:
            shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        config.save(run_dir / TRAINING_CONFIG_NAME)
    accelerator.wait_for_everyone()
    set_seed(config.seed, device_specific=True)  # dropout differs between processes; DDP copies rank 0's weights

    # Data and tokenizer. The main process goes first: it downloads a Hugging Face dataset, the others read its cache.
    with accelerator.main_process_first():
        splits = load_splits(config)
    train_pairs, _ = clean_pairs(splits.train)
    tokenizer = _prepare_tokenizer(config, train_pairs, accelerator, run_dir / "tokenizer")
    model_config = build_model_config(config)
    check_tokenizer_matches_config(tokenizer, model_config)
    train_pairs, _ = clean_pairs(train_pairs, max_length=config.max_length, tokenizer=tokenizer)
    train_examples = tokenize_pairs(train_pairs, tokenizer)
    valid_examples = tokenize_pairs(splits.valid, tokenizer)
    lengths = example_lengths(train_examples)
    sampler = TokenBatchSampler(
        lengths,
        config.max_tokens,
        seed=config.seed,
        num_replicas=accelerator.num_processes,
        rank=accelerator.process_index,
    )
    grad_accum = gradient_accumulation_steps(config, accelerator.num_processes)
    padding_share = padding_fraction(sampler.epoch_batches(0), lengths)
    collate = TranslationCollator(tokenizer.pad_token_id)

    # Model, optimizer (section 5.3), and what a checkpoint holds besides them.
    model = VanillaTransformerForConditionalGeneration(model_config)
    optimizer = torch.optim.Adam(model.parameters(), betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps)
    scheduler = noam_schedule(optimizer, model_config.d_model, config.warmup_steps, config.lr_scale)
    model, optimizer = accelerator.prepare(model, optimizer)
    unwrapped = accelerator.unwrap_model(model)
    progress = TrainingProgress()
    # The scheduler is not `prepare`d: Accelerate would step it once per process for every optimizer step.
    accelerator.register_for_checkpointing(scheduler, progress)
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
    accelerator.init_trackers("vanilla-transformer", config=asdict(config))

    tokens_per_step = config.max_tokens * grad_accum * accelerator.num_processes
    logger.info(
        f"{unwrapped.num_parameters():,} parameters; {len(train_examples):,} training pairs; "
        f"{accelerator.num_processes} process(es) x {grad_accum} micro-batch(es) x at most {config.max_tokens:,} "
        f"tokens = {tokens_per_step:,} tokens per step; {sampler.batches_per_replica:,} batches per process and "
        f"epoch; {padding_share:.1%} padding",
        main_process_only=True,
    )
    if (
        config.grad_accum is None
        and config.tokens_per_step
        and not 0.8 <= tokens_per_step / config.tokens_per_step <= 1.25
    ):
        logger.warning(
            f"{tokens_per_step:,} tokens per step is far from --tokens-per-step={config.tokens_per_step:,}: "
            f"choose --max-tokens so that it times the {accelerator.num_processes} process(es) divides it",
            main_process_only=True,
        )
    if resume_from is not None:
        logger.info(
            f"resumed from {resume_from} (epoch {progress.epoch}, batch {progress.batch})", main_process_only=True
        )

    keep_last = max(config.keep_checkpoints, config.average_checkpoints)
    batches = _training_batches(sampler, train_examples, collate, progress)
    window: dict[str, torch.Tensor] = {}  # statistics summed since the last log (tensors: no device sync per step)
    window_steps, window_grad_norm, window_start = 0, 0.0, time.perf_counter()
    train_seconds = train_tokens = 0.0
    bar = tqdm(total=config.max_steps, initial=progress.step, desc="training", disable=not accelerator.is_main_process)
    clock = time.perf_counter()
    with logging_redirect_tqdm():
        while progress.step < config.max_steps and not out_of_time(accelerator, progress, config.max_train_minutes):
            micro_batches = [_to_device(next(batches), accelerator.device) for _ in range(grad_accum)]
            stats = accumulate_gradients(accelerator, model, micro_batches, config.label_smoothing)
            grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm or math.inf)
            learning_rate = scheduler.get_last_lr()[0]
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if accelerator.optimizer_step_was_skipped:  # fp16 overflow: the loss scale drops, the step does not count
                continue
            scheduler.step()
            progress.step += 1
            bar.update(1)
            window = {name: window.get(name, 0) + value for name, value in stats.items()}
            window_steps, window_grad_norm = window_steps + 1, window_grad_norm + grad_norm

            if progress.step % config.log_every == 0:
                totals = dict(zip(window, accelerator.reduce(torch.stack(list(window.values())), "sum").tolist()))
                seconds = time.perf_counter() - window_start
                train_seconds, train_tokens = train_seconds + seconds, train_tokens + totals["tokens"]
                logs = {
                    "train_loss": totals["loss"] / totals["target_tokens"],
                    "learning_rate": learning_rate,
                    "grad_norm": float(window_grad_norm) / window_steps,
                    "tokens_per_second": totals["tokens"] / seconds,
                    "padding_share": 1 - totals["tokens"] / totals["positions"],
                    "epoch": progress.epoch,
                }
                accelerator.log(logs, step=progress.step)
                bar.set_postfix(
                    loss=f"{logs['train_loss']:.3f}",
                    lr=f"{learning_rate:.2e}",
                    tok_s=f"{logs['tokens_per_second']:,.0f}",
                )
                window, window_steps, window_grad_norm = {}, 0, 0.0
                window_start = time.perf_counter()
            if progress.step % config.eval_every == 0 and valid_examples:
                _evaluate(
                    accelerator, unwrapped, tokenizer, splits.valid, valid_examples, config, collate, progress.step
                )
                window_start = time.perf_counter()
            progress.seconds, clock = progress.seconds + time.perf_counter() - clock, time.perf_counter()
            if progress.step % config.save_every == 0:
                save_checkpoint(accelerator, checkpoint_dir, progress.step, keep_last)
                window_start = time.perf_counter()
    bar.close()
    if progress.step < config.max_steps:
        logger.info(
            f"stopped at step {progress.step} after --max-train-minutes={config.max_train_minutes}",
            main_process_only=True,
        )

    # Section 6.1: average the last checkpoints, then translate the test set with beam search.
    checkpoints = list_checkpoints(checkpoint_dir)
    if not checkpoints or checkpoint_step(checkpoints[-1]) != progress.step:
        save_checkpoint(accelerator, checkpoint_dir, progress.step, keep_last)
        checkpoints = list_checkpoints(checkpoint_dir)
    averaged = checkpoints[-config.average_checkpoints :]
    results: dict[str, Any] = {
        "step": progress.step,
        "epochs": progress.epoch + progress.batch / sampler.batches_per_replica,
        "train_minutes": progress.seconds / 60,
        "train_tokens_per_second": train_tokens / train_seconds if train_seconds else None,
        "padding_share": padding_share,
    }
    candidates = {"averaged": averaged, "last": checkpoints[-1:]}
    chosen = "averaged"
    if config.select_on_valid and len(averaged) > 1 and splits.valid:
        results.update(_select_on_valid(accelerator, unwrapped, tokenizer, splits, candidates, config))
        chosen = results["selected"]
    load_weights(unwrapped, average_checkpoints(candidates[chosen]))
    results["averaged_checkpoints"] = [path.name for path in candidates[chosen]]
    logger.info(f"final model: the average of {', '.join(results['averaged_checkpoints'])}", main_process_only=True)
    if accelerator.is_main_process:
        _export(unwrapped, tokenizer, run_dir / "model", config)
    if splits.test:
        results.update(_test(accelerator, unwrapped, tokenizer, splits.test, config))
        if "selected" in results:
            results[f"test_bleu_{chosen}"] = results["test_bleu"]
    if accelerator.is_main_process:
        results.update(_best_validation(run_dir / "metrics.jsonl"))
    results["seconds"] = time.perf_counter() - started
    accelerator.log({name: value for name, value in results.items() if isinstance(value, float)}, step=progress.step)
    if accelerator.is_main_process:
        (run_dir / "results.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        summary = _training_summary(config, results, train_pairs=len(splits.train))
        (run_dir / "model" / "training_summary.json").write_text(
            json.dumps(summary, indent=2) + "\n", encoding="utf-8"
        )
        plot_metrics(run_dir / "metrics.jsonl", run_dir / "metrics.png")
    # The DDP wrapper's C++ reducer holds the gloo/NCCL process group. Were it the group's last holder, the group
    # would be destroyed as train() returns, with the GIL held, and wait for its worker threads, which may need the
    # GIL to free the tensors of a finished collective: a deadlock (pytorch/pytorch#56297), seen here in 8 of 30
    # two-process runs on a loaded CPU (0 of 30 since). So the wrapper goes first; destroy_process_group (in
    # end_training) then drops the group through its Python binding, which releases the GIL while the threads finish.
    del model, optimizer
    accelerator.free_memory()
    accelerator.end_training()
    return results


def _evaluate(
    accelerator: Accelerator,
    model,
    tokenizer: PreTrainedTokenizerBase,
    pairs: Sequence[Pair],
    examples: Sequence[dict],
    config: TrainingConfig,
    collate: TranslationCollator,
    step: int,
) -> None:
    """Log the validation loss and perplexity, and BLEU, chrF and exact match of beam-search translations."""
    logs = _validation_loss(accelerator, model, examples, config, collate)
    hypotheses = _translate_across_processes(accelerator, model, tokenizer, [src for src, _ in pairs], config)
    scores = score_translations(hypotheses, [tgt for _, tgt in pairs])
    logs.update({f"valid_{name}": value for name, value in scores.items() if name != "bleu_signature"})
    accelerator.log(logs, step=step)
    logger.info(
        f"step {step}: validation loss {logs['valid_loss']:.3f}, exact match {logs['valid_exact_match']:.1f}%, "
        f"chrF {logs['valid_chrf']:.2f}, BLEU {logs['valid_bleu']:.2f}",
        main_process_only=True,
    )


def _select_on_valid(
    accelerator: Accelerator,
    model,
    tokenizer: PreTrainedTokenizerBase,
    splits: Splits,
    candidates: dict[str, list[Path]],
    config: TrainingConfig,
) -> dict[str, Any]:
    """Choose between the candidate weights (each the average of its checkpoints) by validation BLEU.

    Returns the validation BLEU of each candidate (``valid_bleu_<name>``), the ``selected`` name (the first one
    on a tie) and the test BLEU of the candidates not selected (``test_bleu_<name>``; the caller scores the
    selected one), so that the effect of checkpoint averaging is measured on both sets.
    """
    sources, references = [src for src, _ in splits.valid], [tgt for _, tgt in splits.valid]
    results: dict[str, Any] = {}
    for name, paths in candidates.items():
        load_weights(model, average_checkpoints(paths))
        hypotheses = _translate_across_processes(accelerator, model, tokenizer, sources, config)
        results[f"valid_bleu_{name}"] = compute_bleu(hypotheses, references)["score"]
    results["selected"] = max(candidates, key=lambda name: results[f"valid_bleu_{name}"])
    for name, paths in candidates.items():
        if name != results["selected"] and splits.test:
            load_weights(model, average_checkpoints(paths))
            hypotheses = _translate_across_processes(
                accelerator, model, tokenizer, [s for s, _ in splits.test], config
            )
            results[f"test_bleu_{name}"] = compute_bleu(hypotheses, [t for _, t in splits.test])["score"]
    logger.info(
        "validation BLEU: "
        + ", ".join(f"{name} {results[f'valid_bleu_{name}']:.2f}" for name in candidates)
        + f"; selected: {results['selected']}",
        main_process_only=True,
    )
    return results


def _best_validation(metrics_path: Path) -> dict[str, Any]:
    """The best validation BLEU logged during training, and its step (none when no evaluation ran)."""
    rows = [row for row in read_metrics(metrics_path) if "valid_bleu" in row] if metrics_path.is_file() else []
    if not rows:
        return {}
    best = max(rows, key=lambda row: row["valid_bleu"])
    return {"best_valid_bleu": best["valid_bleu"], "best_valid_step": best["step"]}


def _test(
    accelerator: Accelerator, model, tokenizer: PreTrainedTokenizerBase, pairs: Sequence[Pair], config: TrainingConfig
) -> dict[str, Any]:
    """Translate the test set, write it with its translations into the run directory, print samples; the scores."""
    sources, references = [src for src, _ in pairs], [tgt for _, tgt in pairs]
    hypotheses = _translate_across_processes(accelerator, model, tokenizer, sources, config)
    scores = {f"test_{name}": value for name, value in score_translations(hypotheses, references).items()}
    if accelerator.is_main_process:
        run_dir = Path(config.output_dir)
        files = {config.src_lang: sources, config.tgt_lang: references, f"hyp.{config.tgt_lang}": hypotheses}
        for suffix, lines in files.items():
            (run_dir / f"test.{suffix}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        samples = "".join(
            f"\n  {src}\n    -> {hyp}" + ("" if hyp == ref else f"   (reference: {ref})")
            for src, hyp, ref in list(zip(sources, hypotheses, references))[: config.num_samples]
        )
        logger.info(f"sample test translations:{samples}", main_process_only=True)
        logger.info(
            f"test: exact match {scores['test_exact_match']:.1f}%, chrF {scores['test_chrf']:.2f}, "
            f"BLEU {scores['test_bleu']:.2f} ({scores['test_bleu_signature']})",
            main_process_only=True,
        )
    return scores


def _export(model, tokenizer: PreTrainedTokenizerBase, directory: Path, config: TrainingConfig) -> Path:
    """The final model directory, with the translation pipelines as remote code (transformers 5 removed them)."""
    directory = export_model(
        model,
        tokenizer,
        directory,
        num_beams=config.num_beams,
        length_penalty=config.length_penalty,
        max_new_tokens=config.max_length + config.max_length_offset,
    )
    add_pipeline_support(directory)
    return directory


def _training_summary(config: TrainingConfig, results: dict[str, Any], train_pairs: int) -> dict[str, Any]:
    """The run's figures for the model card, in the schema of `vanilla_transformer.hub.read_training_summary`."""
    hub_dataset = config.dataset.removeprefix("hf:") if config.dataset.startswith("hf:") else None
    return {
        "dataset": hub_dataset,
        "dataset_config": config.dataset_config if hub_dataset else None,
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "train_pairs": train_pairs,
        "eval_split": config.test_split,
        "steps": results["step"],
        "train_hours": results["seconds"] / 3600,
        "bleu": results.get("test_bleu"),
        "signature": results.get("test_bleu_signature"),
        "chrf": results.get("test_chrf"),
        "exact_match": results.get("test_exact_match"),
        "recipe": {
            "preset": config.preset,
            "tokens per step": config.max_tokens * (config.grad_accum or 1),
            "warmup steps": config.warmup_steps,
            "learning-rate scale": config.lr_scale,
            "label smoothing": config.label_smoothing,
            "checkpoints averaged": len(results["averaged_checkpoints"]),
            "beam size": config.num_beams,
            "length penalty (GNMT alpha)": config.length_penalty,
        },
        "notes": None if hub_dataset else f"trained on the {config.dataset!r} data of vanilla-transformer",
    }


def average_run(run_dir: str | Path, last: int | None = None, output_dir: str | Path | None = None) -> Path:
    """Average the last checkpoints of a training run and export them as a Hugging Face model directory.

    Args:
        run_dir: The run's directory (its ``output_dir``).
        last: How many of its checkpoints to average (default: the run's ``average_checkpoints``).
        output_dir: Where to write the model (default: ``<run_dir>/average-<last>``).

    Returns:
        The model directory.
    """
    run_dir = Path(run_dir)
    saved = run_dir / TRAINING_CONFIG_NAME
    if not saved.is_file():
        raise FileNotFoundError(f"{run_dir} is not a training run: it has no {TRAINING_CONFIG_NAME}")
    config = TrainingConfig.load(saved)
    last = config.average_checkpoints if last is None else last
    if last < 1:
        raise ValueError(f"last must be at least 1, got last={last}")
    checkpoints = list_checkpoints(run_dir / "checkpoints")[-last:]
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir / 'checkpoints'} holds no checkpoint")
    if len(checkpoints) < last:
        warnings.warn(
            f"{run_dir / 'checkpoints'} holds only {len(checkpoints)} checkpoints; averaging those", stacklevel=2
        )
    model = VanillaTransformerForConditionalGeneration(build_model_config(config))
    load_weights(model, average_checkpoints(checkpoints))
    tokenizer = AutoTokenizer.from_pretrained(run_dir / "tokenizer")
    return _export(model, tokenizer, Path(output_dir or run_dir / f"average-{len(checkpoints)}"), config)


__all__ = [
    "DEFAULT_PRESET",
    "TRAINING_PRESETS",
    "TrainingConfig",
    "TrainingProgress",
    "accumulate_gradients",
    "average_run",
    "build_model_config",
    "build_parser",
    "gradient_accumulation_steps",
    "load_splits",
    "noam_learning_rate",
    "noam_schedule",
    "out_of_time",
    "parse_args",
    "score_translations",
    "train",
]
