"""Every setting of a training run (`TrainingConfig`), the presets (`TRAINING_PRESETS`) and the command line."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from accelerate.utils import DynamoBackend

from ..atomic import write_file
from ..configuration_vanilla_transformer import PRESETS as MODEL_PRESETS
from ..data.spec import DATA_DIR_VARIABLE, shared_data_dir
from ..data.spec import KINDS as DATASET_KINDS
from ..translation import check_generation_settings

TRAINING_CONFIG_NAME = "training_config.json"

ADAM_IMPLEMENTATIONS = ("auto", "fused", "foreach", "for-loop")
"""The choices of ``--adam-implementation`` (`step.build_adam`)."""


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
    data_dir: str | None = _option(
        None,
        f"directory of the files of a text, tsv or jsonl dataset (a preset's default: its folder in "
        f"${DATA_DIR_VARIABLE}, e.g. $VANILLA_TRANSFORMER_DATA/multi30k)",
    )
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
    data_cache_dir: str | None = _option(
        None,
        "where the trained tokenizer and the tokenized training corpus are cached for reruns and resumed runs "
        "(default: $VANILLA_TRANSFORMER_CACHE, else ~/.cache/vanilla-transformer)",
        may_change_on_resume=True,
    )

    # Tokenizer and model.
    tokenizer: str | None = _option(None, "directory of an existing tokenizer (default: train a shared BPE)")
    vocab_size: int = _option(37_000, "vocabulary size of the model (and of the tokenizer trained for it)")
    tokenizer_train_pairs: int | None = _option(
        500_000,
        "train the tokenizer on at most this many training pairs (1M sentences), spread evenly over the corpus, "
        "as SentencePiece's input_sentence_size; 0: all. Keeps the trainer's memory and time flat as the corpus grows",
    )
    model: str = _option(
        "base", f"model size, a configuration preset: {', '.join(MODEL_PRESETS)} (base and big are Table 3's)"
    )
    d_model: int | None = _option(None, "override the preset's d_model")
    layers: int | None = _option(None, "override the number of encoder and of decoder layers (N)")
    heads: int | None = _option(None, "override the number of attention heads (h)")
    ffn_dim: int | None = _option(None, "override the feed-forward inner width (d_ff)")
    dropout: float | None = _option(None, "override the preset's dropout (P_drop)")

    # Optimization.
    max_tokens: int = _option(
        12_500,
        "padded source + target tokens per micro-batch and process (with --tokens-per-step: the most per "
        "micro-batch; smaller micro-batches are used where the processes' share of a step is smaller)",
    )
    tokens_per_step: int | None = _option(
        50_000,
        "padded tokens per optimizer step over all processes; sets the micro-batch size (at most --max-tokens) "
        "and --grad-accum from the process count",
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
    adam_implementation: str = _option(
        "auto",
        "Adam's kernels, the same update: fused (one kernel for all parameters), foreach (one per operation), "
        "for-loop (per parameter), or auto: fused on CUDA, torch's default elsewhere (fused gained nothing on the CPU)",
    )
    label_smoothing: float = _option(0.1, "label smoothing epsilon_ls (section 5.4)")
    max_grad_norm: float | None = _option(None, "clip gradients to this norm (the paper does not clip)")
    mixed_precision: str | None = _option(
        None,
        "no, fp16, bf16, or auto: bf16 where the GPU or CPU computes it natively, else no (default: what "
        "accelerate launch --mixed_precision or the accelerate config file set, else no)",
    )
    dynamo_backend: str | None = _option(
        None,
        "compile the model and loss with torch.compile through Accelerate's dynamo plugin: inductor (or another "
        "backend torch.compiler.list_backends() names), no, or auto: inductor on CUDA and on a CPU training in "
        "native bf16, else no, unless accelerate launch --dynamo_backend or the accelerate config file chose "
        "(default: what they set, else no)",
        may_change_on_resume=True,
    )
    attn_implementation: str | None = _option(
        None,
        "attention backend while training: eager or sdpa (default: the model's, sdpa). On a CPU under bf16, eager "
        "is faster: PyTorch's CPU SDPA with a padding mask gains nothing from bf16",
    )
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
    select_margin: float = _option(
        0.5,
        "with --select-on-valid, keep the average unless the last checkpoint's validation BLEU is higher by more "
        "than this many points (the noise of BLEU on about a thousand sentences)",
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
        # The final search, section 6.1: refused here, before any data is read or step taken, not at the test.
        check_generation_settings(
            flag=True,
            num_beams=self.num_beams,
            length_penalty=self.length_penalty,
            max_length_offset=self.max_length_offset,
        )
        positive = ("num_train", "max_number", "max_length", "vocab_size", "max_tokens", "max_steps", "warmup_steps",
                    "log_every", "eval_every", "save_every", "keep_checkpoints", "average_checkpoints",
                    "translate_batch_size")  # fmt: skip
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{_flag(name)} must be positive, got {_flag(name)}={getattr(self, name)}")
        if self.tokenizer_train_pairs is not None and self.tokenizer_train_pairs < 0:
            raise ValueError(f"--tokenizer-train-pairs must be 0 or more, got {self.tokenizer_train_pairs}")
        for name in ("tokens_per_step", "grad_accum", "num_threads", "d_model", "layers", "heads", "ffn_dim"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{_flag(name)} must be positive, got {_flag(name)}={value}")
        if not (self.dataset in DATASET_KINDS[:-1] or (self.dataset.startswith("hf:") and len(self.dataset) > 3)):
            raise ValueError(f"unknown dataset --dataset={self.dataset!r}; choose one of {', '.join(DATASET_KINDS)}")
        if self.model not in MODEL_PRESETS:
            raise ValueError(f"unknown model --model={self.model!r}; choose one of {', '.join(MODEL_PRESETS)}")
        if self.mixed_precision not in (None, "no", "fp16", "bf16", "auto"):
            raise ValueError(
                f"--mixed-precision must be no, fp16, bf16 or auto, got --mixed-precision={self.mixed_precision!r}"
            )
        backends = [backend.value.lower() for backend in DynamoBackend]
        backends.append("auto")
        if self.dynamo_backend is not None and self.dynamo_backend.lower() not in backends:
            raise ValueError(
                f"--dynamo-backend must be one of {', '.join(backends)}, got --dynamo-backend={self.dynamo_backend!r}"
            )
        if self.adam_implementation not in ADAM_IMPLEMENTATIONS:
            raise ValueError(
                f"--adam-implementation must be one of {', '.join(ADAM_IMPLEMENTATIONS)}, got "
                f"--adam-implementation={self.adam_implementation!r}"
            )
        if self.attn_implementation not in (None, "eager", "sdpa"):
            raise ValueError(
                f"--attn-implementation must be eager or sdpa, got --attn-implementation={self.attn_implementation!r}"
            )
        if not self.select_margin >= 0:
            raise ValueError(f"--select-margin must be 0 or more, got --select-margin={self.select_margin}")
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
        """The settings of preset `name` (see `TRAINING_PRESETS`), with any field overridden by keyword. A preset
        that reads a named corpus (`PRESET_DATA_FOLDERS`) finds it in ``$VANILLA_TRANSFORMER_DATA`` unless
        ``data_dir`` is given; with neither, its ``data_dir`` stays unset and the run stops naming both."""
        if name not in TRAINING_PRESETS:
            raise ValueError(f"unknown preset --preset={name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
        settings = {"preset": name, **TRAINING_PRESETS[name]}
        shared = shared_data_dir(PRESET_DATA_FOLDERS[name]) if name in PRESET_DATA_FOLDERS else None
        if shared is not None:
            settings["data_dir"] = str(shared)
        return cls(**{**settings, **overrides})

    @classmethod
    def load(cls, path: str | Path) -> TrainingConfig:
        """Read the ``training_config.json`` a run wrote: the file itself, never through a link; a damaged one is named."""
        path = Path(path)
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link: a run's settings are read from its folder itself; put the "
                             "file in its place")  # fmt: skip
        try:
            settings = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{path} is damaged ({error}): restore it, or start a new run elsewhere") from error
        return cls(**settings)

    def save(self, path: str | Path) -> None:
        write_file(path, json.dumps(asdict(self), indent=2) + "\n")  # whole, never through a link

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


def micro_batch_plan(config: TrainingConfig, num_processes: int) -> tuple[int, int]:
    """The micro-batch size in padded tokens and the micro-batches per step and process (gradient accumulation).

    With ``--grad-accum`` (or without ``--tokens-per-step``): ``--max-tokens`` and ``--grad-accum`` (1) as given.
    Otherwise each process's share of ``--tokens-per-step``, ``S = tokens_per_step / num_processes``, is cut into the
    fewest micro-batches of at most ``--max-tokens``: ``ceil(S / max_tokens)`` micro-batches of ``floor(S / that)``
    tokens. So ``wmt14-base`` (50,000 tokens, at most 12,500) takes 4 micro-batches of 12,500 on one process, 1 of
    6,250 on 8 and 1 of 781 on 64. A micro-batch never gets smaller than the longest pair ``--max-length`` allows
    (``2 * max_length``), which exceeds the target when ``S`` is smaller than that.
    """
    if config.grad_accum is not None or config.tokens_per_step is None:
        return config.max_tokens, config.grad_accum or 1
    share = config.tokens_per_step / num_processes
    grad_accum = max(1, math.ceil(share / config.max_tokens))
    return max(2 * config.max_length, min(config.max_tokens, int(share // grad_accum))), grad_accum


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
        model="numbers",
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
    # Multi30k English-German (29k captions), the raw files of $VANILLA_TRANSFORMER_DATA/multi30k (or --data-dir), in
    # 60 minutes of two CPU cores: 57 minutes of training (evaluations included), then the final selection and test
    # (under a minute). A small base model (N=3, d_model=256, h=4, d_ff=512; 6.0M parameters) at 4,096 tokens per
    # step, in bf16 autocast with eager attention where the CPU has native bf16 (--mixed-precision auto; fp32
    # elsewhere, as emulated bf16 ran 60x slower): an AVX-512 BF16 CPU trains it 1.33 times faster than fp32 with
    # SDPA, whose CPU kernel with a padding mask gains nothing from bf16 (scripts/benchmark_precision.py); and
    # compiled there (--dynamo-backend auto): 9,586 steps in the hour against 6,428 eager (issue 36);
    # about 28 epochs. P_drop 0.2: at 0.1 validation loss stopped falling after ~20 epochs, and 0.2 gave 38.99
    # validation BLEU against 37.58 (docs/results/multi30k). Equation (3) scaled by 0.45 after 500 warmup steps
    # (peak 1.25e-3). Checkpoints every 250 steps (about an epoch); the last 5 are averaged, and the average is kept
    # unless the last checkpoint is better on validation BLEU by more than 0.5. Beam 4 with GNMT alpha 1.0, not the
    # paper's 0.6: as in section 6.1, alpha is chosen on the development set. At 0.6 the translations were 4 to 7%
    # shorter than the references; 1.0 gained 0.19 validation BLEU on the mean of three trained models, and is the
    # largest alpha with no run-on translation: at 1.2 one German -> English translation repeated a word to 34 words
    # (docs/results/multi30k/length-penalty-sweep.json).
    "multi30k": dict(
        dataset="text",
        valid_split="valid",
        test_split="test_2016_flickr",
        vocab_size=8000,
        max_length=128,
        model="multi30k",
        max_tokens=4096,
        tokens_per_step=None,
        max_steps=20_000,
        max_train_minutes=57.0,
        mixed_precision="auto",
        dynamo_backend="auto",
        attn_implementation="eager",
        warmup_steps=500,
        lr_scale=0.45,
        log_every=50,
        eval_every=1000,
        save_every=250,
        keep_checkpoints=5,
        average_checkpoints=5,
        select_on_valid=True,
        length_penalty=1.0,
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

PRESET_DATA_FOLDERS = {"multi30k": "multi30k"}
"""The presets that read a named corpus, and its folder in ``$VANILLA_TRANSFORMER_DATA`` (`DATA_DIR_VARIABLE`)."""


# --------------------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``vanilla-transformer train``: ``--preset`` plus one option per `TrainingConfig` field.

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
