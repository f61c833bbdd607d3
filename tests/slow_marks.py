"""The list of the tests marked ``slow`` (tests/conftest.py marks them), apart from conftest.py so that a test can
import it by a name no other conftest.py shares."""

from pathlib import Path

SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")
"""The tests marked ``slow`` (pyproject.toml's addopts leave them out of the default command), one per line as
``path::function`` (every parametrization of it): those that measured durations put at the top, written by
``scripts/time_tests.py --choose-slow`` from a full run's per-test times, so that the rest fits its budget."""


def slow_tests(path: Path = SLOW_TESTS) -> set[str]:
    """The ``path::function`` names of `SLOW_TESTS` (``#`` starts a comment)."""
    lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    return {line.split("#", 1)[0].strip() for line in lines} - {""}
