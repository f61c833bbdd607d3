"""The option parser of every command: argparse's, with two rules for a user's typing.

* No abbreviations: ``--max-step`` is not taken for ``--max-steps`` (argparse's ``allow_abbrev``), so an option that
  a later version adds can never change what an old command line means.
* An unknown option is named first, with the closest known one: ``translate --modle X`` says
  ``unrecognized option --modle (did you mean --model?)``, not that ``--model`` is missing.
* Every numeric option declares its range where it is added (``type=Range(float, 0, low_open=True)``, `Range`):
  a value out of it, NaN or infinity is refused as the command line parses, naming the option.

A command line that parses is a command that runs: only then does the parser turn off transformers' prompt to run a
model folder's code (`refuse_remote_code_prompts`), which imports transformers. Until then this module imports nothing
heavy: ``--help`` and a mistyped option are answered without torch or transformers.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+(e[-+]?\d+)?$")


def unknown_option(
    argv: Sequence[str], *parsers: argparse.ArgumentParser, also_known: Iterable[str] = ()
) -> str | None:
    """The first option of `argv` that none of `parsers` knows (nor is in `also_known`), with a "did you mean" where
    one is close; None if all are known. Negative numbers, ``-`` (standard input) and everything after ``--`` are
    values, not options."""
    known = {option for parser in parsers for action in parser._actions for option in action.option_strings}
    known.update(also_known)
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-") or token == "-" or _NUMBER.match(token):
            continue
        name = token.split("=", 1)[0]
        if name in known or (not token.startswith("--") and token[:2] in known):
            continue
        close = closest_option(name, known)
        return f"{name} (did you mean {close}?)" if close else name
    return None


def _noun(option: str) -> str:
    """What an option counts or names: its last word, singular (``--max-steps``: ``step``)."""
    word = option.lstrip("-").replace("_", "-").rsplit("-", 1)[-1].lower()
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def closest_option(name: str, known: Iterable[str]) -> str | None:
    """The known option `name` most likely meant: the closest spelling among the options of its family, those that
    count or name the same thing (``--num-step`` is a step count: ``--max-steps``, not ``--num-test``), else the
    closest spelling of all (``--modle``: ``--model``); None if none is close."""
    options = sorted(known)
    family = [option for option in options if option.startswith("--") and _noun(option) == _noun(name)]
    if family and name.startswith("--"):
        return difflib.get_close_matches(name, family, n=1, cutoff=0)[0]
    close = difflib.get_close_matches(name, options, n=1)
    return close[0] if close else None


@dataclass(frozen=True)
class Range:
    """The values a numeric option takes, declared where the option is (``type=Range(int, 1)``) and checked once the
    command line parses (`CommandParser.parse_args`): an int or a float (a float finite: NaN and infinity are refused
    everywhere), at least `low` (above it when `low_open`) and at most `high` (below it when `high_open`). A value
    out of range is a ValueError naming the option: one line, exit status 1, before anything is read or loaded."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    @property
    def __name__(self) -> str:  # argparse names the type in "invalid int value: 'x'"
        return self.kind.__name__

    def __call__(self, text: str) -> int | float:
        return self.kind(text)

    def describe(self) -> str:
        """``non-negative``, ``at least 1``, ``positive``, ``in [0, 1)``, with ``finite and`` before it for a float."""
        low, high = self.low, self.high
        if low is not None and high is not None:
            text = f"in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"
        elif low is not None:
            text = {(0, False): "non-negative", (0, True): "positive"}.get(
                (low, self.low_open), f"{'above' if self.low_open else 'at least'} {low}"
            )
        elif high is not None:
            text = f"{'below' if self.high_open else 'at most'} {high}"
        else:
            text = "a number"
        return f"finite and {text}" if self.kind is float else text

    def check(self, option: str, value: float) -> None:
        """Raise the ValueError naming `option` if `value` is out of this range, or not a number of its kind (an int
        for an int range; a bool is not a number): a value from a file or the environment is checked as typed."""
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or (self.kind is int and not isinstance(value, int)):
            kind = "an integer" if self.kind is int else "a number"
            raise ValueError(f"{option} must be {kind}, got {option}={value!r}")
        inside = math.isfinite(value) and (
            (self.low is None or (value > self.low if self.low_open else value >= self.low))
            and (self.high is None or (value < self.high if self.high_open else value <= self.high))
        )
        if not inside:
            raise ValueError(f"{option} must be {self.describe()}, got {option}={value!r}")


SEED_RANGE = Range(int, 0, 2**32 - 1)
"""``--seed``: what every generator takes (NumPy's seeds stop below 2**32)."""


def thread_range() -> Range:
    """``--num-threads``: 1 to the processors of this machine (more threads than processors never run faster, and a
    million of them made CTranslate2 crash)."""
    return Range(int, 1, os.cpu_count() or 1)


def environment_number(variable: str, declared: Range) -> int | float | None:
    """The number environment variable `variable` sets, checked against its range `declared` as an option's is;
    None where it is unset or empty. A value that is not a number of its kind, or out of range, is a ValueError
    naming the variable (``VANILLA_TRANSFORMER_MAX_INPUT_BYTES must be an integer, got ...='abc'``)."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    try:
        value = declared(text)
    except ValueError:
        value = text  # refused by the check below, as typed
    declared.check(variable, value)
    return value


def check_ranges(parser: argparse.ArgumentParser, namespace: argparse.Namespace) -> None:
    """Check every value `namespace` holds for an option of `parser` declared with a `Range`."""
    for action in parser._actions:
        value = getattr(namespace, action.dest, None)
        if not isinstance(action.type, Range) or value is None or value is argparse.SUPPRESS:
            continue
        option = action.option_strings[0] if action.option_strings else action.dest
        for item in value if isinstance(value, list) else [value]:
            action.type.check(option, item)


def refuse_remote_code_prompts() -> None:
    """No command ever asks on standard input whether to run a model folder's code: every load passes
    ``trust_remote_code=False``, and should one not, transformers refuses (its CI setting, a prompt timeout of 0)
    instead of reading an answer that a pipe (``echo y | ...``) would give, and printing its question into stdout."""
    from transformers import dynamic_module_utils

    dynamic_module_utils.TIME_OUT_REMOTE_CODE = 0


def summary(doc: str | None) -> str:
    """A command module's docstring's first paragraph on one line: its ``--help`` description, a whole sentence."""
    return " ".join((doc or "").strip().split("\n\n", 1)[0].split())


def check_input_path(path: str | os.PathLike[str] | None, option: str) -> None:
    """Refuse an input file that is missing or a folder, naming `option` (``--input=x.en: no such file``). None and
    ``-`` (standard input) pass."""
    if path is None or str(path) == "-":
        return
    name, file = f"{option}={path}", Path(path)
    if not file.exists():
        raise FileNotFoundError(f"{name}: no such file")
    if file.is_dir():
        raise IsADirectoryError(f"{name} is a directory, not a file of lines")


class CommandParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` without abbreviations, naming an unknown option before anything else; a command line
    that parses turns off transformers' remote-code prompt (`refuse_remote_code_prompts`). The input files declared
    with `add_input_argument` are checked first (`check_input_path`), before torch loads: a mistyped name is named
    at once, not after seconds."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._inputs: list[argparse.Action] = []

    def add_input_argument(self, *args, **kwargs) -> argparse.Action:
        """`add_argument` for a file the command reads (``-``: standard input), checked as the line is parsed."""
        action = self.add_argument(*args, **kwargs)
        self._inputs.append(action)
        return action

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = list(sys.argv[1:] if args is None else args)
        unknown = unknown_option(args, self)
        if unknown is not None:
            self.error(f"unrecognized option {unknown}")
        parsed = super().parse_args(args, namespace)
        check_ranges(self, parsed)
        for action in self._inputs:
            option = action.option_strings[0] if action.option_strings else (action.metavar or action.dest)
            check_input_path(getattr(parsed, action.dest, None), str(option))
        refuse_remote_code_prompts()  # the command runs from here on
        return parsed


__all__ = [
    "CommandParser",
    "SEED_RANGE",
    "Range",
    "check_input_path",
    "check_ranges",
    "closest_option",
    "environment_number",
    "refuse_remote_code_prompts",
    "summary",
    "thread_range",
    "unknown_option",
]
