"""``--version``, ``--help`` and every command's ``--help`` answer at once (issue 45, cause 6g and its fourth pass):
they import no torch and no transformers, which took 5 to 6 seconds; importing the package still registers the model
with transformers' Auto classes."""

import json
import subprocess
import sys

import pytest
from fault_support import REPO

from vanilla_transformer.cli import COMMANDS

HEAVY_HELP = {
    "train": "its --model help lists the model presets, defined in the remote-code configuration file (transformers, "
    "torch); and TrainingConfig's package and modules import torch, transformers, accelerate",
    "finetune": "its options are transformers' Seq2SeqTrainingArguments (HfArgumentParser)",
}
"""The commands whose --help still imports torch, and why."""


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO)}
    )


def heavy(command: str) -> pytest.MarkDecorator:
    return pytest.mark.xfail(command in HEAVY_HELP, reason=HEAVY_HELP.get(command, ""), strict=True)


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], *(pytest.param([command, "--help"], marks=heavy(command)) for command in COMMANDS)],
    ids=" ".join,
)
def test_version_and_help_import_no_torch(argv):
    """Each in its own process: nothing another test imported counts."""
    code = f"""
import contextlib, io, json, sys
from vanilla_transformer.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        status = main({argv!r})
    except SystemExit as exit:
        status = exit.code
heavy = [name for name in ("torch", "transformers", "accelerate") if name in sys.modules]
print(json.dumps([status, out.getvalue(), heavy]))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr
    status, out, heavy = json.loads(completed.stdout)
    assert status == 0
    assert ("vanilla-transformer 0.1.0 (torch " in out) if argv == ["--version"] else ("usage:" in out)
    assert heavy == []


@pytest.mark.parametrize(
    "first",
    [
        "import vanilla_transformer",
        "import transformers, vanilla_transformer",
        "import vanilla_transformer.configuration_vanilla_transformer",
        "import vanilla_transformer.modeling_vanilla_transformer",
        "from vanilla_transformer.model_dir import load_model_dir",
    ],
)
def test_importing_the_package_still_registers_the_auto_classes(first):
    code = f"""{first}
from transformers import AutoConfig, AutoModelForSeq2SeqLM
config = AutoConfig.for_model("vanilla_transformer", vocab_size=40)
model = AutoModelForSeq2SeqLM.from_config(config)
import json, tempfile
with tempfile.TemporaryDirectory() as folder:
    model.save_pretrained(folder)
    auto_map = json.load(open(folder + "/config.json"))["auto_map"]
print(type(config).__name__, type(model).__name__, auto_map["AutoModelForSeq2SeqLM"])
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.split() == [
        "VanillaTransformerConfig",
        "VanillaTransformerForConditionalGeneration",
        "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    ]
