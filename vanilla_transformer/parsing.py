"""The option parser of every command: argparse's, with two rules for a user's typing.

* No abbreviations: ``--max-step`` is not taken for ``--max-steps`` (argparse's ``allow_abbrev``), so an option that
  a later version adds can never change what an old command line means.
* An unknown option is named first, with the closest known one: ``translate --modle X`` says
  ``unrecognized option --modle (did you mean --model?)``, not that ``--model`` is missing.

A command line that parses is a command that runs: only then does the parser turn off transformers' prompt to run a
model folder's code (`refuse_remote_code_prompts`), which imports transformers. Until then this module imports nothing
heavy: ``--help`` and a mistyped option are answered without torch or transformers.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Sequence

_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+(e[-+]?\d+)?$")


def unknown_option(argv: Sequence[str], *parsers: argparse.ArgumentParser) -> str | None:
    """The first option of `argv` that none of `parsers` knows, with a "did you mean" where one is close; None if all
    are known. Negative numbers, ``-`` (standard input) and everything after ``--`` are values, not options."""
    known = {option for parser in parsers for action in parser._actions for option in action.option_strings}
    for token in argv:
        if token == "--":
            return None
        if not token.startswith("-") or token == "-" or _NUMBER.match(token):
            continue
        name = token.split("=", 1)[0]
        if name in known or (not token.startswith("--") and token[:2] in known):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1)
        return f"{name} (did you mean {close[0]}?)" if close else name
    return None


def refuse_remote_code_prompts() -> None:
    """No command ever asks on standard input whether to run a model folder's code: every load passes
    ``trust_remote_code=False``, and should one not, transformers refuses (its CI setting, a prompt timeout of 0)
    instead of reading an answer that a pipe (``echo y | ...``) would give, and printing its question into stdout."""
    from transformers import dynamic_module_utils

    dynamic_module_utils.TIME_OUT_REMOTE_CODE = 0


def summary(doc: str | None) -> str:
    """A command module's docstring's first paragraph on one line: its ``--help`` description, a whole sentence."""
    return " ".join((doc or "").strip().split("\n\n", 1)[0].split())


class CommandParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` without abbreviations, naming an unknown option before anything else; a command line
    that parses turns off transformers' remote-code prompt (`refuse_remote_code_prompts`)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = list(sys.argv[1:] if args is None else args)
        unknown = unknown_option(args, self)
        if unknown is not None:
            self.error(f"unrecognized option {unknown}")
        parsed = super().parse_args(args, namespace)
        refuse_remote_code_prompts()  # the command runs from here on
        return parsed


__all__ = ["CommandParser", "refuse_remote_code_prompts", "summary", "unknown_option"]
