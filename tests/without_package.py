"""Run a script in a fresh Python process where ``vanilla_transformer`` cannot be imported, as on a machine that
loads a shared model's remote code without the package installed."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

PREAMBLE = """\
import json, sys
sys.modules["vanilla_transformer"] = None  # not importable, as where the package is not installed
try:
    import vanilla_transformer
except ImportError:
    pass
else:
    raise SystemExit("vanilla_transformer is importable")
"""


def run_without_package(body: str, cwd: Path, **env: str) -> Any:
    """Run `body` (dedented) after `PREAMBLE`, offline, on one thread, with no stdin; it must end by printing
    ``"\\nRESULT " + json.dumps(value)``. Returns that value; a failing script fails the test with its stderr."""
    return result_of(run_offline(PREAMBLE + textwrap.dedent(body), cwd, **env))


def run_offline(script: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """Run `script` in a fresh Python process, offline, on one thread, with no stdin (a question on it gets no
    answer); a failing script fails the test with its stderr. Returns the process, with its stdout and stderr."""
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **env}
    result = subprocess.run(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def result_of(completed: subprocess.CompletedProcess) -> Any:
    """The value a script printed last, as ``"\\nRESULT " + json.dumps(value)``."""
    return json.loads(completed.stdout.rsplit("\nRESULT ", 1)[-1])
