"""What the fault tests share: running a command as a user does, and copies of the tiny model to damage."""

import io
import shutil
import sys
from pathlib import Path

import pytest


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """Run ``vanilla-transformer <argv>`` in this process (`vanilla_transformer.cli.main`, which reports errors), with
    `stdin` bytes as standard input; returns (exit status, stdout, stderr). An exception escaping `main` is a
    traceback the user would see: it fails the test."""

    def run(*argv, stdin: bytes = b""):
        from vanilla_transformer.cli import main

        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
        capsys.readouterr()
        status = main([str(arg) for arg in argv])
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.fixture
def model_copy(tiny_model_dir, tmp_path):
    """A copy of the tiny model directory this test may change."""
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))
