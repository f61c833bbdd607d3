"""The README's example files (``<!-- example: PATH -->`` before a fenced block), for the tests that read or run
them (tests/test_readme.py, tests/test_docs_code.py)."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
EXAMPLE = re.compile(r"<!-- example: (?P<path>\S+) -->\n```\w*\n(?P<text>.*?)```", re.DOTALL)


def examples() -> dict[str, str]:
    """The README's example files: path -> content."""
    return {match["path"]: match["text"] for match in EXAMPLE.finditer(README)}
