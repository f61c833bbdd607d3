"""Helpers of the fault tests that are functions, not fixtures."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_cli_process(*argv, stdin: bytes = b"", env: dict | None = None, timeout: float = 300):
    """``python -m vanilla_transformer <argv>`` in a real process (as this checkout is on the path)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", *map(str, argv)],
        input=stdin,
        capture_output=True,
        env=environment,
        timeout=timeout,
    )
