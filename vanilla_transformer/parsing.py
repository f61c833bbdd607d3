"""The option parser of every command: argparse's, with two rules for a user's typing.

* No abbreviations: ``--max-step`` is not taken for ``--max-steps`` (argparse's ``allow_abbrev``), so an option that
  a later version adds can never change what an old command line means.
* An unknown option is named first, with the closest known one: ``translate --modle X`` says
  ``unrecognized option --modle (did you mean --model?)``, not that ``--model`` is missing.

This module imports nothing heavy: ``--help`` of a command builds its parser without torch.
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


class CommandParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` without abbreviations, naming an unknown option before anything else."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_args(self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None):
        args = list(sys.argv[1:] if args is None else args)
        unknown = unknown_option(args, self)
        if unknown is not None:
            self.error(f"unrecognized option {unknown}")
        return super().parse_args(args, namespace)


__all__ = ["CommandParser", "unknown_option"]
