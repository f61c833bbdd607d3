"""The command line: one `vanilla-transformer` command (the same as `python -m vanilla_transformer`), every command's
--help with the options it has always had, and commands that name the extra they need."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vanilla_transformer.cli import COMMAND_EXTRA, COMMANDS, main

# Options each command has had since before the package had a command line (a few per command, not all).
OPTIONS = {
    "train": ["--preset", "--output-dir", "--resume", "--dataset", "--data-dir", "--max-tokens", "--tokens-per-step"],
    "translate": ["--model", "--input", "--output", "--ctranslate2", "--num-beams", "--length-penalty", "--device"],
    "evaluate": ["--reference", "--hypotheses", "--model", "--source", "--results", "--num-beams"],
    "average": ["run_dir", "--last", "--output"],
    "train-tokenizer": ["files", "--hf-dataset", "--numbers", "--vocab-size", "--min-frequency", "--output-dir"],
    "finetune": ["model", "--train", "--eval", "--hf-dataset", "--numbers", "--output-dir", "--max-steps",
                 "--num-epochs", "--batch-size", "--eval-steps", "--label-smoothing", "--num-beams", "--bf16",
                 "--report-to", "--resume-from-checkpoint", "--push-to-hub"],
    "export-ctranslate2": ["model_dir", "output_dir", "--quantization", "--force"],
    "push": ["model_dir", "repo_id", "--template", "--private", "--token", "--dry-run"],
    "attention": ["model", "source", "--target", "--output-dir", "--layers", "--kinds"],
    "import-marian": ["SRC", "DST", "--no-tokenizer"],
    "export-marian": ["SRC", "DST", "--no-tokenizer"],
}  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}


def run(*argv: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120, **kwargs)


def test_every_command_is_listed_and_tested():
    assert OPTIONS.keys() == COMMANDS.keys()
    assert COMMAND_EXTRA.keys() <= COMMANDS.keys()


def test_the_installed_command_is_python_dash_m():
    """`vanilla-transformer` (the [project.scripts] entry point) and `python -m vanilla_transformer` print the same."""
    script = shutil.which("vanilla-transformer", path=str(Path(sys.executable).parent))
    assert script is not None, "the vanilla-transformer command is not installed next to this Python"
    installed, module = run(script, "--help"), run(sys.executable, "-m", "vanilla_transformer", "--help")
    assert installed.returncode == module.returncode == 0, installed.stderr + module.stderr
    assert installed.stdout == module.stdout
    assert all(f"  {name} " in installed.stdout for name in COMMANDS)


def test_no_command_or_an_unknown_one_is_an_error(capsys):
    assert main([]) == 2  # the usage, as an error
    assert main(["trian"]) == 2 and "unknown command 'trian'" in capsys.readouterr().err


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_command_has_help_with_its_options(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main names the program in sys.argv[0]
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith(f"usage: vanilla-transformer {command} ")
    for option in OPTIONS[command]:
        assert option in usage, option


def test_a_command_without_its_extra_names_the_pip_command():
    """With the 'train' extra's datasets missing, `train` stops before starting, naming the extra to install."""
    code = "import sys; sys.modules['datasets'] = None; from vanilla_transformer.cli import main; sys.exit(main())"
    completed = run(sys.executable, "-c", code, "train", "--output-dir", "never-written")
    assert completed.returncode == 2
    assert "vanilla-transformer train needs the 'train' extra (datasets not installed)" in completed.stderr
    assert 'pip install "vanilla-transformer[train]"' in completed.stderr
