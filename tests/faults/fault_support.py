"""Helpers of the fault tests that are functions, not fixtures."""

import hashlib
import os
import resource
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


def one_line(result, *expected) -> str:
    """The refusal of a command run in this process, ``(status, stdout, stderr)``: exit 1 and one line on stderr,
    holding each of `expected`; that line."""
    status, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 1 and len(lines) == 1, err
    assert all(text in lines[0] for text in expected), err
    return lines[0]


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


CAP = 6 << 30
"""Bytes of address space of a capped process (`run_capped`): torch and the package load, an unbounded read or a
search sized by a file's word does not fit."""


def _capped():
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def run_capped(*argv, env=None, timeout=300):
    """`run_cli_process` in a process whose address space is capped at `CAP`: what would fill the machine fails fast
    (a MemoryError, an allocator's error) instead."""
    return run_cli_process(*argv, env={"OMP_NUM_THREADS": "1", **(env or {})}, timeout=timeout, preexec_fn=_capped)
