"""Helpers of the fault tests that are functions, not fixtures."""

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def digest(folder: Path) -> dict[str, str]:
    """The bytes of every file of a folder (SHA-256 by relative path), to tell that it is whole and unchanged."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def run_cli_process(*argv, stdin: bytes = b"", env: dict | None = None, timeout: float = 300, preexec_fn=None):
    """``python -m vanilla_transformer <argv>`` in a real process (as this checkout is on the path); `preexec_fn` runs
    in the child before it starts (a resource limit, say)."""
    environment = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", *map(str, argv)],
        input=stdin,
        capture_output=True,
        env=environment,
        timeout=timeout,
        preexec_fn=preexec_fn,
    )
