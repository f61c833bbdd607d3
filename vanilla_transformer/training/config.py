"""Every setting of a training run (`TrainingConfig`), in parts by concern, as fairseq's configuration is: the data
(`DataConfig`), the model (`ModelConfig`), the optimization (`OptimizationConfig`), the run directory and its
checkpoints (`CheckpointConfig`), the final search (`DecodingConfig`) and logging and validation (`LoggingConfig`).

Each field is also one command-line option of ``vanilla-transformer train`` (``d_model`` is ``--d-model``; the model
part's ``preset`` is ``--model``), and one key of the run's ``training_config.json``, which stays flat: a file of
option names and values (`TrainingConfig.options`), as runs of every version wrote it. Each part reads only what its
users need: `build_model_config` the model part, the `Evaluator` the decoding part, and so on.
"""

from __future__ import annotations

import ast
import functools
import json
from dataclasses import Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..atomic import write_file
from ..constants import LENGTH_PENALTY, MAX_LENGTH_OFFSET, NUM_BEAMS
from ..data.spec import DATA_DIR_VARIABLE, shared_data_dir
from ..data.spec import KINDS as DATASET_KINDS
from ..reading import read_json
from .presets import FILE_DATASETS, PRESET_DATA_FOLDERS, PRESET_FILE_SETTINGS, TRAINING_PRESETS
from .ranges import RANGES

ADAM_IMPLEMENTATIONS = ("auto", "fused", "foreach", "for-loop")
"""The choices of ``--adam-implementation`` (`step.build_adam`)."""


def _option(
    default: Any, help: str, *, may_change_on_resume: bool = False, option: str | None = None, unset: str = ""
) -> Any:
    """A field of a part: its default, its ``--help`` text, whether a resumed run may change it, its option name
    (``--<option>`` and its key in ``training_config.json``) where that is not the field's name, and what None means
    (`unset`, for ``--help``)."""
    metadata = {"help": help, "may_change_on_resume": may_change_on_resume, "option": option, "unset": unset}
    return field(default=default, metadata=metadata)


def flag(option: str) -> str:
    """The command-line spelling of an option name: ``d_model`` is ``--d-model``."""
    return "--" + option.replace("_", "-")


def check_setting(option: str, value: Any, name: str | None = None) -> None:
    """Raise the ValueError naming `name` (default: the option's flag, ``--lr-scale``) if `value` is not a value of
    setting `option`: out of its range (`RANGES`), or None where the setting cannot be unset."""
    if option in RANGES and not (value is None and "None" in str(OPTIONS[option][1].type)):
        RANGES[option].check(name or flag(option), value)


def _check_ranges(part: Any) -> None:
    """Every numeric field of a part against its range (`check_setting`), as the part is built."""
    for option, config_field in part_options(type(part)).items():
        check_setting(option, getattr(part, config_field.name))


@dataclass
class DataConfig:
    """The corpus and its splits, its cleaning, the tokenizer and the data cache."""

    dataset: str = _option("numbers", f"corpus: one of {', '.join(DATASET_KINDS)} (a Hugging Face dataset)")
    data_dir: str | None = _option(
        None,
        "directory of the files of a text, tsv or jsonl dataset",
        unset=f"a preset's corpus folder in ${DATA_DIR_VARIABLE}, e.g. ${DATA_DIR_VARIABLE}/multi30k",
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
        "where the trained tokenizer and the tokenized training corpus are cached for reruns and resumed runs",
        may_change_on_resume=True,
        unset="$VANILLA_TRANSFORMER_CACHE, else ~/.cache/vanilla-transformer",
    )
    tokenizer: str | None = _option(None, "directory of an existing tokenizer", unset="train a shared BPE")
    tokenizer_train_pairs: int | None = _option(
        500_000,
        "train the tokenizer on at most this many training pairs (1M sentences), spread evenly over the corpus, "
        "as SentencePiece's input_sentence_size; 0: all. Keeps the trainer's memory and time flat as the corpus grows",
    )

    @property
    def numbers_task(self) -> bool:
        """Whether the run's corpus is the built-in numbers task (``--dataset numbers``, no ``--train-src``)."""
        return self.dataset == "numbers" and self.train_src is None

    def __post_init__(self) -> None:
        _check_ranges(self)
        if not (self.dataset in DATASET_KINDS[:-1] or (self.dataset.startswith("hf:") and len(self.dataset) > 3)):
            raise ValueError(f"unknown dataset --dataset={self.dataset!r}; choose one of {', '.join(DATASET_KINDS)}")


@functools.cache
def model_preset_names() -> tuple[str, ...]:
    """The names of the model sizes, `vanilla_transformer.configuration_vanilla_transformer.SIZES` (of which its
    PRESETS are made), read from that file's source rather than imported: it imports transformers, which ``train
    --help`` must not wait for. The table stays defined there only, as the remote code copied next to a model needs
    it."""
    path = Path(__file__).parent.parent / "configuration_vanilla_transformer.py"
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        target = node.target if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [None])[0]
        if isinstance(target, ast.Name) and target.id == "SIZES" and isinstance(node.value, ast.Dict):
            return tuple(ast.literal_eval(key) for key in node.value.keys)
    raise RuntimeError(f"{path} defines no SIZES dictionary literal")


@dataclass
class ModelConfig:
    """The model: a configuration preset of Table 3's sizes, its overrides, and the attention backend of training."""

    preset: str = _option(
        "base",
        f"model size, a configuration preset: {', '.join(model_preset_names())} (base and big are Table 3's)",
        option="model",
    )
    vocab_size: int = _option(37_000, "vocabulary size of the model (and of the tokenizer trained for it)")
    d_model: int | None = _option(None, "override the model preset's d_model", unset="the --model preset's")
    layers: int | None = _option(
        None, "override the number of encoder and of decoder layers (N)", unset="the --model preset's"
    )
    heads: int | None = _option(None, "override the number of attention heads (h)", unset="the --model preset's")
    ffn_dim: int | None = _option(None, "override the feed-forward inner width (d_ff)", unset="the --model preset's")
    dropout: float | None = _option(None, "override the model preset's dropout (P_drop)", unset="the --model preset's")
    attn_implementation: str | None = _option(
        None,
        "attention backend while training: eager, sdpa, or auto: eager on a CPU under bf16 (PyTorch's CPU SDPA "
        "with a padding mask gains nothing from bf16), else sdpa",
        unset="the model's, sdpa",
    )

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.preset not in model_preset_names():
            raise ValueError(f"unknown model --model={self.preset!r}; choose one of {', '.join(model_preset_names())}")
        if self.attn_implementation not in (None, "eager", "sdpa", "auto"):
            raise ValueError(
                "--attn-implementation must be eager, sdpa or auto, got "
                f"--attn-implementation={self.attn_implementation!r}"
            )


@dataclass
class OptimizationConfig:
    """Batches, steps, Adam and the learning rate of equation (3), the loss, and how the steps compute (precision,
    compilation, threads, seed)."""

    max_tokens: int = _option(
        12_500,
        "padded source + target tokens per micro-batch and process (with --tokens-per-step: the most per "
        "micro-batch; smaller micro-batches are used where the processes' share of a step is smaller)",
    )
    tokens_per_step: int | None = _option(
        50_000,
        "padded tokens per optimizer step over all processes; sets the micro-batch size (at most --max-tokens) "
        "and --grad-accum from the process count",
        unset="unset: a step is --grad-accum micro-batches of --max-tokens",
    )
    grad_accum: int | None = _option(
        None,
        "micro-batches per optimizer step and process (overrides --tokens-per-step)",
        unset="from --tokens-per-step, else 1",
    )
    fill_gpu_memory: bool = _option(
        False,
        "with --tokens-per-step on CUDA: micro-batches as large as the GPU's free memory holds (by an estimate per "
        "token), up to the process's whole share of the step, even above --max-tokens; the same loss, fewer kernels",
    )
    max_steps: int = _option(100_000, "optimizer steps to train for", may_change_on_resume=True)
    max_train_minutes: float | None = _option(
        None,
        "also stop training after this many minutes of it, evaluations and checkpoints included (the learning "
        "rate still follows the step count)",
        may_change_on_resume=True,
        unset="no limit",
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
    max_grad_norm: float | None = _option(
        None, "clip gradients to this norm (the paper does not clip)", unset="no clipping"
    )
    mixed_precision: str | None = _option(
        None,
        "no, fp16, bf16, or auto: bf16 where the GPU or CPU computes it natively, else no, unless accelerate launch "
        "--mixed_precision or the accelerate config file chose",
        unset="what accelerate launch --mixed_precision or the accelerate config file set, else no",
    )
    dynamo_backend: str | None = _option(
        None,
        "compile the model and loss with torch.compile through Accelerate's dynamo plugin: inductor (or another "
        "backend torch.compiler.list_backends() names), no, or auto: inductor on CUDA and on a CPU training in "
        "native bf16, else no, unless accelerate launch --dynamo_backend or the accelerate config file chose",
        may_change_on_resume=True,
        unset="what accelerate launch --dynamo_backend or the accelerate config file set, else no",
    )
    seed: int = _option(1, "seed of model initialization, data order and dropout")
    num_threads: int | None = _option(
        None, "CPU threads per process (torch.set_num_threads)", may_change_on_resume=True, unset="torch's"
    )

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.mixed_precision not in (None, "no", "fp16", "bf16", "auto"):
            raise ValueError(
                f"--mixed-precision must be no, fp16, bf16 or auto, got --mixed-precision={self.mixed_precision!r}"
            )
        from ..environment import runnable_dynamo_backends  # torch: when a run is configured, not for --help

        if self.dynamo_backend is not None and self.dynamo_backend.lower() not in runnable_dynamo_backends():
            raise ValueError(
                f"--dynamo-backend must be one of {', '.join(runnable_dynamo_backends())}, got --dynamo-backend="
                f"{self.dynamo_backend!r} (accelerate names more, which need other packages or no longer run in torch)"
            )
        if self.adam_implementation not in ADAM_IMPLEMENTATIONS:
            raise ValueError(
                f"--adam-implementation must be one of {', '.join(ADAM_IMPLEMENTATIONS)}, got "
                f"--adam-implementation={self.adam_implementation!r}"
            )


@dataclass
class CheckpointConfig:
    """The run directory: where it is, resuming or overwriting it, its checkpoints and the final model's choice."""

    output_dir: str | None = _option(
        None, "run directory: checkpoints, logs, the final model", may_change_on_resume=True, unset="runs/<preset>"
    )
    resume: bool = _option(
        False,
        "continue the run in --output-dir from its last checkpoint (start it if it has none)",
        may_change_on_resume=True,
    )
    overwrite: bool = _option(
        False, "delete an existing run in --output-dir and start over", may_change_on_resume=True
    )
    finish_again: bool = _option(
        False,
        "with --resume on a finished run: average its checkpoints, export the model and score the test set again, "
        "rewriting model/, the test translations and results.json",
        may_change_on_resume=True,
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

    def __post_init__(self) -> None:
        _check_ranges(self)
        if self.resume and self.overwrite:
            raise ValueError("--resume and --overwrite contradict each other: pass one of them")
        if self.finish_again and not self.resume:
            raise ValueError("--finish-again redoes the end of a finished run: pass it with --resume")

    @property
    def keep_last(self) -> int:
        """How many checkpoints a run keeps: enough to average."""
        return max(self.keep_checkpoints, self.average_checkpoints)


@dataclass
class DecodingConfig:
    """The search that scores validation and test sets and that the exported model decodes with (section 6.1)."""

    num_beams: int = _option(NUM_BEAMS, "beam size (section 6.1)", may_change_on_resume=True)
    length_penalty: float = _option(
        LENGTH_PENALTY, "GNMT length penalty alpha (section 6.1)", may_change_on_resume=True
    )
    max_length_offset: int = _option(
        MAX_LENGTH_OFFSET, "maximum output length = input length + this", may_change_on_resume=True
    )
    translate_batch_size: int = _option(64, "sentences per beam-search batch", may_change_on_resume=True)
    num_samples: int = _option(5, "sample test translations to print at the end", may_change_on_resume=True)
    compound_split_bleu: bool = _option(
        False,
        "also score the test set with the paper's BLEU beside sacreBLEU: Moses-tokenized, compound-split "
        "(tensor2tensor's get_ende_bleu.sh; needs sacremoses)",
        may_change_on_resume=True,
    )

    def __post_init__(self) -> None:
        from ..serving.search import check_generation_settings  # torch: when a run is configured, not for --help

        # The final search: refused here, before any data is read or step taken, not at the test.
        check_generation_settings(
            flag=True,
            num_beams=self.num_beams,
            length_penalty=self.length_penalty,
            max_length_offset=self.max_length_offset,
        )
        _check_ranges(self)

    def search(self) -> dict[str, Any]:
        """The keyword arguments of `translate` and `paper_generation_config` for this search."""
        return {
            "num_beams": self.num_beams,
            "length_penalty": self.length_penalty,
            "max_length_offset": self.max_length_offset,
        }


@dataclass
class LoggingConfig:
    """What the run logs, when it validates, and to which trackers."""

    log_every: int = _option(
        100, "log training loss, learning rate and tokens/s every this many steps", may_change_on_resume=True
    )
    eval_every: int = _option(
        5000, "compute validation loss and BLEU every this many steps", may_change_on_resume=True
    )
    report_to: str = _option(
        "",
        "more Accelerate trackers besides the JSONL log, comma-separated (e.g. tensorboard)",
        may_change_on_resume=True,
    )

    def __post_init__(self) -> None:
        _check_ranges(self)


PARTS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optimization": OptimizationConfig,
    "checkpointing": CheckpointConfig,
    "decoding": DecodingConfig,
    "logging": LoggingConfig,
}
"""The parts of a `TrainingConfig`, by attribute, in the order of ``--help``."""


def part_options(part: type) -> dict[str, Field]:
    """The option names of a part's fields, and the fields."""
    return {config_field.metadata["option"] or config_field.name: config_field for config_field in fields(part)}


OPTIONS: dict[str, tuple[str, Field]] = {
    option: (part, config_field) for part, cls in PARTS.items() for option, config_field in part_options(cls).items()
}
"""Every option name (``d_model``), with the part that holds it and its field there."""


@dataclass
class TrainingConfig:
    """Every setting of a training run, in parts (`PARTS`). The defaults are the paper's base model on WMT14
    English-German where the paper gives a value; `TRAINING_PRESETS` hold complete jobs, and the default job is the
    ``numbers`` preset (`from_preset`). Built from option names by `from_options`."""

    preset: str | None = None
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimization: OptimizationConfig = field(default_factory=OptimizationConfig)
    checkpointing: CheckpointConfig = field(default_factory=CheckpointConfig)
    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def __post_init__(self) -> None:
        if self.checkpointing.output_dir is None:
            self.checkpointing.output_dir = default_output_dir(self.preset)
        max_tokens, max_length = self.optimization.max_tokens, self.data.max_length
        if max_tokens < 2 * max_length:
            raise ValueError(
                f"--max-tokens={max_tokens} is smaller than the longest pair --max-length={max_length} allows "
                f"({max_length} source + {max_length} target tokens): raise --max-tokens or lower --max-length"
            )

    @classmethod
    def from_options(cls, preset: str | None = None, **options: Any) -> TrainingConfig:
        """The settings of these options (``d_model=32``), each put in its part; the others at their defaults.

        Raises:
            TypeError: Naming an option that no part has.
        """
        unknown = sorted(options.keys() - OPTIONS.keys())
        if unknown:
            raise TypeError(f"unknown training settings: {', '.join(unknown)}")
        given: dict[str, dict[str, Any]] = {part: {} for part in PARTS}
        for option, value in options.items():
            part, config_field = OPTIONS[option]
            given[part][config_field.name] = value
        return cls(preset=preset, **{part: PARTS[part](**values) for part, values in given.items()})

    def options(self) -> dict[str, Any]:
        """The settings by option name, ``preset`` first: what ``training_config.json`` holds."""
        values = {"preset": self.preset}
        for option, (part, config_field) in OPTIONS.items():
            values[option] = getattr(getattr(self, part), config_field.name)
        return values

    def replace(self, **options: Any) -> TrainingConfig:
        """These settings with the given options changed."""
        return TrainingConfig.from_options(**{**self.options(), **options})

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> TrainingConfig:
        """The settings of preset `name` (see `TRAINING_PRESETS`), with any option overridden by keyword. A preset
        that reads a named corpus (`PRESET_DATA_FOLDERS`) finds it in ``$VANILLA_TRANSFORMER_DATA`` unless
        ``data_dir`` is given; with neither, its ``data_dir`` stays unset and the run stops naming both. A preset of a
        Hugging Face corpus given as files instead (``dataset`` one of `FILE_DATASETS`) takes its split names there
        (`PRESET_FILE_SETTINGS`: WMT14's ``newstest2013`` and ``newstest2014``)."""
        settings = cls.preset_settings(name)
        if overrides.get("dataset", settings.get("dataset")) in FILE_DATASETS:
            settings.update(PRESET_FILE_SETTINGS.get(name, {}))
        return cls.from_options(**{"preset": name, **settings, **overrides})

    @staticmethod
    def preset_settings(name: str) -> dict[str, Any]:
        """The options preset `name` sets (`TRAINING_PRESETS`), with its run directory (`default_output_dir`) and its
        corpus folder in ``$VANILLA_TRANSFORMER_DATA`` where it reads a named one that is there; unchecked: so
        ``--help`` shows them without loading torch (`from_preset` checks them)."""
        if name not in TRAINING_PRESETS:
            raise ValueError(f"unknown preset --preset={name!r}; choose one of {', '.join(TRAINING_PRESETS)}")
        settings = {"output_dir": default_output_dir(name), **TRAINING_PRESETS[name]}
        shared = shared_data_dir(PRESET_DATA_FOLDERS[name]) if name in PRESET_DATA_FOLDERS else None
        if shared is not None:
            settings["data_dir"] = str(shared)
        return settings

    @classmethod
    def load(cls, path: str | Path, **overrides: Any) -> TrainingConfig:
        """Read the ``training_config.json`` a run wrote (of this version or an older one: the same option names;
        an option added since takes its default), with `overrides` (a resumed run's options) in place of its values:
        the file itself, never through a link. A damaged file, or a value of it out of its setting's range
        (`check_setting`), is named with the field."""
        path = Path(path)
        if path.is_symlink():
            raise ValueError(f"{path} is a symbolic link: a run's settings are read from its folder itself; put the "
                             "file in its place")  # fmt: skip
        try:
            settings = read_json(path, "run's settings file")  # size, text and JSON judged: one line naming the line
        except ValueError as error:
            raise ValueError(f"{path} is damaged ({error}): restore it, or start a new run elsewhere") from error
        if not isinstance(settings, dict):
            raise ValueError(f"{path} is damaged (not a JSON object): restore it, or start a new run elsewhere")
        for option, value in settings.items():
            if option in OPTIONS and option not in overrides:
                try:
                    check_setting(option, value, option)
                except ValueError as error:
                    raise ValueError(f"{path}: {error}") from None
        return cls.from_options(**{**settings, **overrides})

    def save(self, path: str | Path) -> None:
        write_file(path, json.dumps(self.options(), indent=2) + "\n")  # whole, never through a link

    def check_resumable_from(self, saved: TrainingConfig) -> None:
        """Raise a ValueError naming each setting that differs from the run being resumed and must not."""
        mine, theirs = self.options(), saved.options()
        fixed = ["preset", *(option for option, (_, f) in OPTIONS.items() if not f.metadata["may_change_on_resume"])]
        differences = [
            f"{flag(option)}={mine[option]!r} but the run has {option}={theirs[option]!r}"
            for option in fixed
            if mine[option] != theirs[option]
        ]
        if differences:
            changeable = ", ".join(
                flag(option) for option, (_, f) in OPTIONS.items() if f.metadata["may_change_on_resume"]
            )
            raise ValueError(
                f"cannot resume the run in {self.checkpointing.output_dir} with different settings: {'; '.join(differences)}. "
                f"Only these may change when resuming: {changeable}"
            )


def default_output_dir(preset: str | None) -> str:
    """``runs/<preset>``, relative to the working directory."""
    return str(Path("runs") / (preset or "custom"))


__all__ = [
    "ADAM_IMPLEMENTATIONS",
    "OPTIONS",
    "PARTS",
    "RANGES",
    "CheckpointConfig",
    "DataConfig",
    "DecodingConfig",
    "LoggingConfig",
    "ModelConfig",
    "OptimizationConfig",
    "TrainingConfig",
    "check_setting",
    "model_preset_names",
    "default_output_dir",
    "flag",
]
