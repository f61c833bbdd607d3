"""Fine-tune a saved model with transformers' Seq2SeqTrainer, keeping the checkpoint with the best evaluation score.

Examples:

    vanilla-transformer finetune runs/base/model --train data/train.en data/train.de --eval data/dev.en data/dev.de \\
        --output-dir runs/finetuned --max-steps 2000 --eval-steps 200 --gradient-accumulation-steps 4 --bf16
    vanilla-transformer finetune org/name --hf-dataset iwslt2017 --hf-config iwslt2017-en-de --src-lang en \\
        --tgt-lang de --output-dir runs/iwslt --report-to tensorboard
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-ft --max-steps 300 \\
        --resume-from-checkpoint last                                      # continue an interrupted run
    vanilla-transformer finetune runs/numbers/model --numbers 2000 --output-dir runs/numbers-lora --max-steps 300 \
        --lora --lora-r 8 --lora-target-modules q_proj,v_proj --learning-rate 1e-3 --merge     # a LoRA adapter

--train and --eval take two aligned plain-text files (source, target), one .tsv file (source and target columns) or
one .jsonl file (keys --src-lang and --tgt-lang). Evaluation translates with the paper's beam search (beam 4, GNMT
alpha 0.6, input + 50 tokens) and keeps the checkpoint with the best --metric-for-best-model (BLEU where it applies,
else exact match). Every other option of transformers' Seq2SeqTrainingArguments passes through to the Trainer
(``--trainer-help`` lists them), with the defaults of `vanilla_transformer.training.finetune.FINETUNE_DEFAULTS`;
``--resume-from-checkpoint last`` continues from the last checkpoint in --output-dir. The output directory holds the
best model, its tokenizer and training_summary.json, ready for vanilla-transformer push, next to the Trainer's
checkpoint-* folders. With --lora only a LoRA adapter is trained (peft, the 'peft' extra) and the output directory is
an adapter folder (adapter_config.json naming the base model, adapter_model.safetensors, the tokenizer, the model
card), which translate, evaluate, attention and push load with its base; --merge also writes the merged, plain model
directory to OUTPUT_DIR/merged. Ctrl-C saves a checkpoint at the end of the step and ends with one line naming it and the
command that continues (a second Ctrl-C stops at once, from the last checkpoint written).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vanilla_transformer.cli import configure_logging
from vanilla_transformer.cli.trainer_options import trainer_option_names
from vanilla_transformer.constants import FINETUNE_RANGES, FINETUNE_SETTINGS, LORA_DEFAULTS, SEARCH_DEFAULTS
from vanilla_transformer.extras import require
from vanilla_transformer.parsing import (
    CommandParser,
    Range,
    check_ranges,
    refuse_remote_code_prompts,
    summary,
    unknown_option,
)

if TYPE_CHECKING:
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments

    from vanilla_transformer.data import Pair

# torch, transformers and the training stack load when the command runs, not for --help nor a mistyped option
# (tests/faults/test_startup.py)

logger = logging.getLogger("finetune")


def _option(default: Any, help: str, **argparse_settings: Any) -> Any:
    """A field of an options dataclass, and its command-line option (``--name-with-dashes``): its default, its help,
    and any other setting of argparse's ``add_argument``; a field that defaults to False is a flag."""
    return field(default=default, metadata={"help": help, **argparse_settings})


@dataclass
class DataArguments:
    """The data options: --train and --eval, or --hf-dataset, or --numbers."""

    train: list[str] | None = _option(
        None, "training pairs: SRC TGT, FILE.tsv or FILE.jsonl", nargs="+", metavar="FILE"
    )
    eval: list[str] | None = _option(None, "evaluation pairs, like --train", nargs="+", metavar="FILE")
    hf_dataset: str | None = _option(None, "Hugging Face translation dataset, e.g. wmt14")
    hf_config: str | None = _option(None, "its configuration, e.g. de-en")
    train_split: str = _option("train", "training split of --hf-dataset (default: %(default)s)")
    eval_split: str = _option("validation", "evaluation split of --hf-dataset (default: %(default)s)")
    numbers: int | None = _option(
        None, "N pairs of the numbers task (and N/10 to evaluate)", type=Range(int, 1), metavar="N"
    )
    src_lang: str | None = _option(None, "source language: key or column of --hf-dataset and .jsonl; the model card")
    tgt_lang: str | None = _option(None, "target language")
    max_length: int = _option(256, "drop longer training pairs, in tokens (default: %(default)s)", type=Range(int, 1))


@dataclass
class LoraArguments:
    """Train a LoRA adapter (peft) instead of every weight."""

    lora: bool = _option(False, "train a LoRA adapter only; the output is an adapter folder")
    lora_r: int = _option(LORA_DEFAULTS["r"], "rank r (default: %(default)s)", type=Range(int, 1))
    lora_alpha: int = _option(
        LORA_DEFAULTS["alpha"], "the update is alpha/r BA (default: %(default)s)", type=Range(int, 1)
    )
    lora_dropout: float = _option(
        LORA_DEFAULTS["dropout"],
        "dropout on the adapter's input (default: %(default)s)",
        type=Range(float, 0, 1, high_open=True),
    )
    lora_target_modules: str = _option(
        ",".join(LORA_DEFAULTS["target_modules"]),
        "comma-separated linear layers to adapt: q_proj,k_proj,v_proj,out_proj,fc1,fc2, or all-linear "
        "(default: %(default)s)",
    )
    merge: bool = _option(False, "with --lora: also write the merged model to OUTPUT_DIR/merged")

    @property
    def target_modules(self) -> list[str] | str:
        names = [name.strip() for name in self.lora_target_modules.split(",")]
        return names[0] if names == ["all-linear"] else names

    def settings(self) -> dict[str, Any]:
        """The keyword arguments of `add_lora`."""
        return dict(
            r=self.lora_r, alpha=self.lora_alpha, dropout=self.lora_dropout, target_modules=self.target_modules
        )


TRAINER_OPTIONS = {
    "num_epochs": ("num_train_epochs",),
    "batch_size": ("per_device_train_batch_size", "per_device_eval_batch_size"),
    "grad_accum": ("gradient_accumulation_steps",),
    "label_smoothing": ("label_smoothing_factor",),
}
"""This command's options that set `Seq2SeqTrainingArguments` fields of other names; its other optimization and
checkpoint options have the field's own name (``--max-steps`` is ``max_steps``)."""


class TrainerHelp(argparse.Action):
    """``--trainer-help``: print the Trainer's options and exit, as ``--help`` does."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        trainer_parser().print_help()
        parser.exit()


def add_group(parser: argparse.ArgumentParser, title: str, arguments: type) -> None:
    """The options of the dataclass `arguments`, one per field (`_option`), as a group of `parser` titled `title`."""
    group = parser.add_argument_group(title)
    for option in dataclasses.fields(arguments):
        settings = dict(option.metadata)
        if option.default is False:
            settings["action"] = "store_true"
        else:
            settings["default"] = option.default
        group.add_argument("--" + option.name.replace("_", "-"), **settings)


def _add_search_options(parser: argparse.ArgumentParser) -> None:
    """The group of the search that evaluation translates with (the paper's), part of `build_parser`."""
    decoding = parser.add_argument_group("decoding: the search evaluation translates with (the paper's)")
    decoding.add_argument(
        "--num-beams",
        type=Range(int, 1),
        default=SEARCH_DEFAULTS["num_beams"],
        help="beam size (default: %(default)s)",
    )
    decoding.add_argument(
        "--length-penalty",
        type=Range(float, 0),
        default=SEARCH_DEFAULTS["length_penalty"],
        help="GNMT length penalty alpha (default: %(default)s)",
    )
    decoding.add_argument(
        "--max-length-offset",
        type=Range(int, 0),
        default=SEARCH_DEFAULTS["max_length_offset"],
        help="at most input length + this many tokens (default: %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    """finetune's own options, in groups; any other `Seq2SeqTrainingArguments` option passes through to the
    Trainer (`parse_options`)."""
    parser = CommandParser(
        prog="vanilla-transformer finetune",
        usage="%(prog)s MODEL (--train SRC TGT --eval SRC TGT | --hf-dataset NAME | --numbers N) --output-dir DIR "
        "[options] [Trainer options]",
        description=summary(__doc__),
        epilog="Any other option of transformers' Seq2SeqTrainingArguments (--gradient-checkpointing, --bf16, "
        "--report-to tensorboard, ...) goes to the Trainer; --trainer-help lists them.",
    )
    parser.add_argument("model", help="saved model directory or Hub id, with its tokenizer")
    parser.add_argument("--trainer-help", action=TrainerHelp, help="list the Trainer's options, then exit")
    add_group(parser, "data (--train and --eval, or --hf-dataset, or --numbers)", DataArguments)
    add_group(parser, "model: a LoRA adapter (peft) instead of every weight", LoraArguments)
    defaults, ranges = FINETUNE_SETTINGS, FINETUNE_RANGES  # the Trainer's ranges, by field
    optimization = parser.add_argument_group("optimization")
    optimization.add_argument("--max-steps", type=ranges["max_steps"], help="optimizer steps (default: --num-epochs)")
    optimization.add_argument(
        "--num-epochs", type=ranges["num_train_epochs"], help="passes over the training pairs (default: 3)"
    )
    optimization.add_argument(
        "--learning-rate",
        type=ranges["learning_rate"],
        help=f"peak learning rate (default: {defaults['learning_rate']})",
    )
    optimization.add_argument(
        "--warmup-steps",
        type=ranges["warmup_steps"],
        help=f"warmup steps, or a fraction of all below 1 (default: {defaults['warmup_steps']})",
    )
    optimization.add_argument(
        "--batch-size",
        type=ranges["per_device_train_batch_size"],
        help=f"sentences per batch and device (default: {defaults['per_device_train_batch_size']})",
    )
    optimization.add_argument(
        "--grad-accum", type=ranges["gradient_accumulation_steps"], help="batches per optimizer step (default: 1)"
    )
    optimization.add_argument(
        "--label-smoothing",
        type=ranges["label_smoothing_factor"],
        help=f"label smoothing epsilon (default: {defaults['label_smoothing_factor']})",
    )
    optimization.add_argument(
        "--seed", type=ranges["seed"], help="seed of initialization and data order (default: 42)"
    )
    checkpoints = parser.add_argument_group("evaluation and checkpoints")
    checkpoints.add_argument("--output-dir", required=True, help="where the checkpoints and the best model go")
    checkpoints.add_argument(
        "--eval-steps",
        type=ranges["eval_steps"],
        help=f"evaluate and save a checkpoint every this many steps (default: {defaults['eval_steps']})",
    )
    checkpoints.add_argument(
        "--metric-for-best-model",
        help="the evaluation score that keeps the best checkpoint: bleu, chrf, exact_match or loss (default: bleu "
        "where it applies, else exact_match: BLEU is 0 by construction on one-word references such as number words)",
    )
    checkpoints.add_argument(
        "--save-total-limit",
        type=ranges["save_total_limit"],
        help=f"checkpoints kept (default: {defaults['save_total_limit']})",
    )
    checkpoints.add_argument(
        "--logging-steps",
        type=ranges["logging_steps"],
        help=f"log the training loss every this many steps (default: {defaults['logging_steps']})",
    )
    checkpoints.add_argument(
        "--resume-from-checkpoint",
        metavar="DIR",
        help="continue from a checkpoint folder, or last: the last in --output-dir",
    )
    _add_search_options(parser)
    return parser


def trainer_parser() -> HfArgumentParser:
    """The Trainer's options (`Seq2SeqTrainingArguments`), with fine-tuning's defaults (`FINETUNE_DEFAULTS`)."""
    from transformers import HfArgumentParser, Seq2SeqTrainingArguments

    from vanilla_transformer.training.finetune import FINETUNE_DEFAULTS

    parser = HfArgumentParser(
        Seq2SeqTrainingArguments, prog="vanilla-transformer finetune MODEL ... [TRAINER OPTIONS]", allow_abbrev=False
    )
    parser.set_defaults(**FINETUNE_DEFAULTS, output_dir=None, save_strategy=None, save_steps=None)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> tuple[str, DataArguments, Seq2SeqTrainingArguments]:
    """The model to fine-tune, the data options and the Trainer's arguments (see `parse_options`)."""
    options = parse_options(argv)
    return options.model, options.data, options.training_args


@dataclass
class Options:
    """What the command line asks for."""

    model: str
    data: DataArguments
    lora: LoraArguments
    training_args: Seq2SeqTrainingArguments
    search: dict[str, Any] = field(default_factory=dict)


def parse_options(argv: Sequence[str] | None = None) -> Options:
    """The command line: finetune's own options, and any other `Seq2SeqTrainingArguments` option for the Trainer
    (``--gradient-checkpointing``; ``--trainer-help`` lists them)."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if {"-h", "--help"} & set(argv[: argv.index("--")] if "--" in argv else argv):
        parser.parse_args(argv)  # prints finetune's options and exits, before transformers loads
    trainer_names = trainer_option_names()  # read from transformers' source: a mistyped option is refused at once
    if trainer_names is not None:
        _refuse_unknown_option(parser, unknown_option(argv, parser, also_known=trainer_names))
    namespace, rest = parser.parse_known_args(argv)
    try:
        check_ranges(parser, namespace)
    except ValueError as error:
        parser.error(str(error))  # as finetune's other checks of its own options
    from transformers import Seq2SeqTrainingArguments

    from vanilla_transformer.serving.search import check_search_settings
    from vanilla_transformer.training.finetune import check_trainer_values

    trainer = trainer_parser()
    _refuse_unknown_option(parser, unknown_option(argv, parser, trainer))  # exactly, by transformers' own parser
    trainer_namespace, unknown = trainer.parse_known_args(rest)
    if unknown:
        parser.error(
            f"unrecognized arguments: {' '.join(unknown)} (--help lists finetune's, --trainer-help the Trainer's)"
        )
    refuse_remote_code_prompts()  # parsed: the command runs from here on (its parse is not CommandParser.parse_args)
    given = vars(namespace)
    data = DataArguments(**{f.name: given[f.name] for f in dataclasses.fields(DataArguments)})
    _check_data(parser, data)
    lora = LoraArguments(**{f.name: given[f.name] for f in dataclasses.fields(LoraArguments)})
    _check_lora(parser, lora)
    values = {
        f.name: getattr(trainer_namespace, f.name) for f in dataclasses.fields(Seq2SeqTrainingArguments) if f.init
    }
    for name in ("max_steps", "learning_rate", "warmup_steps", "seed", "output_dir", "eval_steps", "save_total_limit",
                 "logging_steps", "resume_from_checkpoint", "metric_for_best_model"):  # fmt: skip
        if given[name] is not None:
            values[name] = given[name]
    for option, names in TRAINER_OPTIONS.items():
        if given[option] is not None:
            values.update(dict.fromkeys(names, given[option]))
    if values["save_strategy"] is None:  # checkpoints when evaluating, for load_best_model_at_end
        values["save_strategy"] = values["eval_strategy"]
    if values["save_steps"] is None:
        values["save_steps"] = values["eval_steps"]
    if values["resume_from_checkpoint"] == "last":
        values["resume_from_checkpoint"] = _last_checkpoint(parser, values["output_dir"])
    search = {name: given[name] for name in SEARCH_DEFAULTS}
    check_trainer_values(values, lambda name: _spelled(argv, name))  # the one check, pass-through options too
    try:
        check_search_settings(flag=True, **search)
        training_args = Seq2SeqTrainingArguments(**values)
    except ValueError as error:
        parser.error(str(error))
    return Options(namespace.model, data, lora, training_args, search)


def _spelled(argv: Sequence[str], name: str) -> str:
    """The option of Trainer field `name` as `argv` spells it (``--learning_rate``, ``--learning-rate``, or finetune's
    own, ``--grad-accum`` for ``gradient_accumulation_steps``); ``--name`` where it is not given."""
    own = [option for option, names in TRAINER_OPTIONS.items() if name in names]
    spellings = [f"--{name}", f"--{name.replace('_', '-')}", *(f"--{option.replace('_', '-')}" for option in own)]
    given = [token.split("=", 1)[0] for token in argv]
    return next((spelling for spelling in reversed(given) if spelling in spellings), spellings[0])


def _refuse_unknown_option(parser: argparse.ArgumentParser, unknown: str | None) -> None:
    if unknown is not None:
        parser.error(f"unrecognized option {unknown} (--help lists finetune's, --trainer-help the Trainer's)")


def _check_data(parser: argparse.ArgumentParser, data: DataArguments) -> None:
    sources = [data.train is not None or data.eval is not None, data.hf_dataset is not None, data.numbers is not None]
    if sum(sources) != 1:
        parser.error("give exactly one of: --train and --eval, --hf-dataset, --numbers")
    if sources[0] and (data.train is None or data.eval is None):
        parser.error("--train and --eval go together")
    if data.hf_dataset is not None and (data.src_lang is None or data.tgt_lang is None):
        parser.error("--hf-dataset needs --src-lang and --tgt-lang")


def _check_lora(parser: argparse.ArgumentParser, lora: LoraArguments) -> None:
    """The LoRA options, checked before anything loads; the target modules are checked against the model later."""
    if not lora.lora:
        given = [
            f"--{f.name.replace('_', '-')}"
            for f in dataclasses.fields(LoraArguments)[1:]
            if getattr(lora, f.name) != f.default
        ]
        if given:
            parser.error(f"{', '.join(given)} need(s) --lora")
        return
    try:
        require("peft", "vanilla-transformer finetune --lora")
        from vanilla_transformer.training.lora import check_lora_settings

        check_lora_settings(None, **lora.settings())
    except (ImportError, ValueError) as error:
        parser.error(str(error))


def prepare_model(
    parser: argparse.ArgumentParser, model_name: str, lora: LoraArguments, *, seed: int
) -> tuple[Any, Any]:
    """The model to fine-tune and its tokenizer; with --lora, wrapped with a new LoRA adapter, whose random
    initialisation follows --seed (not whatever ran before in the process)."""
    from transformers import set_seed

    from vanilla_transformer.model_dir import is_adapter_dir, load_model_dir
    from vanilla_transformer.training.lora import add_lora

    if is_adapter_dir(model_name):
        parser.error(f"{model_name} is a LoRA adapter folder: fine-tune its merged model (finetune --lora --merge)")
    model, tokenizer = load_model_dir(model_name)
    if lora.lora:
        set_seed(seed)
        try:
            model = add_lora(model, **lora.settings())
        except ValueError as error:
            parser.error(str(error))
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        logger.info("LoRA adapter: %d trainable parameters of %d", trainable, model.num_parameters())
    return model, tokenizer


def _last_checkpoint(parser: argparse.ArgumentParser, output_dir: str) -> str:
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(output_dir) if Path(output_dir).is_dir() else None
    if last is None:
        parser.error(f"--resume-from-checkpoint last: --output-dir={output_dir} holds no checkpoint-* folder")
    return last


def load_data(data: DataArguments) -> tuple[list[Pair], list[Pair], dict[str, Any]]:
    """Training pairs, evaluation pairs, and their description for the run summary; files are described by name
    (`local_data`), never as a Hub dataset."""
    from vanilla_transformer.data import CorpusSpec, load_corpus
    from vanilla_transformer.data.numbers import check_numbers_task

    if data.numbers is not None:
        check_numbers_task("--numbers", data.numbers, data.numbers + max(data.numbers // 10, 1))
    spec = CorpusSpec.from_options(
        dataset="numbers" if data.numbers is not None else None,
        numbers=(data.numbers, max(data.numbers // 10, 1), 0) if data.numbers is not None else None,
        files={"train": data.train, "eval": data.eval} if data.train else None,
        hf_dataset=data.hf_dataset,
        dataset_config=data.hf_config,
        src_lang=data.src_lang,
        tgt_lang=data.tgt_lang,
    )
    languages = {"src_lang": spec.src_lang, "tgt_lang": spec.tgt_lang}
    if data.numbers is not None:
        splits = ("train", "valid")
        description = dict(dataset_name="numbers", eval_split="valid", **languages)
    elif data.hf_dataset is not None:
        splits = (data.train_split, data.eval_split)
        description = dict(
            dataset=data.hf_dataset, dataset_name=data.hf_dataset, dataset_config=data.hf_config,
            eval_split=data.eval_split, **languages,
        )  # fmt: skip
    else:
        spec.check(["train", "eval"])
        splits = ("train", "eval")
        named = {role: " + ".join(Path(path).name for path in spec.files[split]) for split, role in
                 (("train", "training"), ("eval", "evaluation"))}  # fmt: skip
        local = " and ".join(f"{names} ({role})" for role, names in named.items())
        description = dict(
            dataset_name="local files", local_data=local, eval_split=named["evaluation"], **languages,
            notes=f"Fine-tuned on local files, not a Hugging Face Hub dataset: {local}.",
        )  # fmt: skip
    train, evaluation = (load_corpus(spec, split) for split in splits)
    return train, evaluation, description


def main(argv: Sequence[str] | None = None) -> int:
    configure_logging()
    options = parse_options(argv)
    from vanilla_transformer.training.finetune import check_finetune_arguments, claim_output_dir, finetune

    check_finetune_arguments(
        options.training_args, merge=options.lora.merge
    )  # all that consumes them, before any work
    train_pairs, eval_pairs, description = load_data(options.data)  # every file checked before the model loads
    model, tokenizer = prepare_model(build_parser(), options.model, options.lora, seed=options.training_args.seed)
    claim_output_dir(options.training_args.output_dir)
    from vanilla_transformer.training.progress import Interrupted

    try:
        result = finetune(
            model,
            tokenizer,
            train_pairs,
            eval_pairs,
            options.training_args,
            max_length=options.data.max_length,
            description={"base_model": options.model, **description},
            merge=options.lora.merge,
            search=options.search,
        )
    except Interrupted as interrupt:
        command = continue_command(sys.argv[1:] if argv is None else argv, interrupt.checkpoint is not None)
        raise KeyboardInterrupt(f"{interrupt.describe()}; continue with: {command}") from None
    lora = options.lora
    saved = "LoRA adapter" if lora.lora else "best model"
    logger.info("%s saved to %s: %s", saved, result.output_dir, json.dumps(result.metrics))
    if result.merged_dir is not None:
        logger.info("merged model saved to %s", result.merged_dir)
    return 0


def continue_command(argv: Sequence[str], resumable: bool) -> str:
    """The command as typed, continuing from the last checkpoint (``--resume-from-checkpoint last``) if there is
    one, else from the start (without ``--resume-from-checkpoint``)."""
    words, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--resume-from-checkpoint":
            skip = True
        elif not word.startswith("--resume-from-checkpoint="):
            words.append(word)
    if resumable:
        words += ["--resume-from-checkpoint", "last"]
    return " ".join(["vanilla-transformer finetune", *map(shlex.quote, words)])


if __name__ == "__main__":
    raise SystemExit(main())
