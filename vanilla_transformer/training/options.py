"""The command line of ``vanilla-transformer train``: ``--preset``, then one option per setting of `TrainingConfig`,
in groups by its parts (data, model, optimization, checkpoints, decoding, logging and validation)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import MISSING, Field
from pathlib import Path
from typing import Any, get_type_hints

from ..parsing import CommandParser
from .config import OPTIONS, PARTS, RANGES, TrainingConfig, default_output_dir, flag, part_options
from .presets import DEFAULT_PRESET, TRAINING_PRESETS

GROUPS = {
    "data": "data",
    "model": "model",
    "optimization": "optimization",
    "checkpointing": "checkpoints",
    "decoding": "decoding",
    "logging": "logging and validation",
}
"""The title of each part's group of options in ``--help``."""


def _shown_default(config_field: Field, value: Any) -> str:
    """`` (default: ...)`` for ``--help``: the value the command as typed runs with, or what an unset one means."""
    if value is None or value is False or value == "":
        unset = config_field.metadata.get("unset")
        return f" (default: {unset})" if unset else ""
    return " (default: on)" if value is True else f" (default: {value})"


def _field_default(config_field: Field) -> Any:
    factory = config_field.default_factory
    return config_field.default if factory is MISSING else factory()


def _add_option(group: argparse._ArgumentGroup, option: str, config_field: Field, kind: Any, value: Any) -> None:
    help_text = config_field.metadata["help"] + _shown_default(config_field, value)
    if kind is bool:
        group.add_argument(flag(option), action="store_true", help=help_text)
    else:
        value_type = next(t for t in (int, float, str) if t == kind or t in getattr(kind, "__args__", ()))
        parse = value_type if value_type is str else RANGES[option]  # the settings' ranges; none: a KeyError
        group.add_argument(flag(option), type=parse, metavar=_metavar(option, value_type), help=help_text)


def _metavar(option: str, value_type: type) -> str:
    """What an option takes, in one short word: N (a count), X (a number), DIR, FILE or NAME."""
    if value_type is not str:
        return "N" if value_type is int else "X"
    if option.endswith("_dir") or option == "tokenizer":
        return "DIR"
    return "FILE" if option.endswith(("_src", "_tgt")) else "NAME"


def build_parser(preset: str = DEFAULT_PRESET) -> argparse.ArgumentParser:
    """The command line of ``vanilla-transformer train``: ``--preset`` plus one option per `TrainingConfig` setting,
    grouped by part (`GROUPS`). ``--help`` shows each option's value in `preset`, the job the command runs.

    Options not given on the command line are absent from the parsed namespace (their default is
    ``argparse.SUPPRESS``), so that `parse_args` can tell what the user chose from what the preset chose.
    """
    parser = CommandParser(
        description="Train a Transformer with the recipe of Vaswani et al. (2017). Options override the settings of "
        "the --preset; each option's default is the preset's value.",
        usage="%(prog)s [-h] [--preset NAME] [OPTION ...]",
        argument_default=argparse.SUPPRESS,
    )
    parser.add_argument(
        "--preset",
        choices=list(TRAINING_PRESETS),
        help=f"the job to run, before the options below (default: {DEFAULT_PRESET})",
    )
    settings = TrainingConfig.preset_settings(preset)
    values = {option: settings.get(option, _field_default(field)) for option, (_, field) in OPTIONS.items()}
    for part, cls in PARTS.items():
        group = parser.add_argument_group(GROUPS[part], (cls.__doc__ or "").strip())
        types = get_type_hints(cls)
        for option, config_field in part_options(cls).items():
            _add_option(group, option, config_field, types[config_field.name], values[option])
    return parser


def _named_preset(argv: Sequence[str]) -> str:
    """The ``--preset`` that `argv` names, for ``--help``; the default one if none or an unknown one (which the full
    parser then refuses)."""
    finder = CommandParser(add_help=False)
    finder.add_argument("--preset", default=DEFAULT_PRESET)
    preset = finder.parse_known_args(argv)[0].preset
    return preset if preset in TRAINING_PRESETS else DEFAULT_PRESET


def parse_args(argv: Sequence[str] | None = None) -> TrainingConfig:
    """Settings from the command line: the preset's, overridden by the options given.

    With ``--resume`` and a run already in the output directory, the run's saved settings take the preset's place,
    so ``--resume --output-dir DIR`` alone continues a run as it was started; options given must then be ones that
    may change (`train` checks, see `TrainingConfig.check_resumable_from`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    given = vars(build_parser(_named_preset(argv)).parse_args(argv))
    from .run_dir import RunLayout  # accelerate: after --help, which exits above

    preset = given.get("preset", DEFAULT_PRESET)
    saved = RunLayout(Path(given.get("output_dir") or default_output_dir(preset))).settings
    if given.get("resume") and saved.is_file():
        return TrainingConfig.load(saved, **given)
    given.pop("preset", None)
    return TrainingConfig.from_preset(preset, **given)


__all__ = ["GROUPS", "RANGES", "build_parser", "parse_args"]
