"""``--version``, ``--help`` and every command's ``--help`` answer at once (issue 45, cause 6g and its fourth pass):
they import no torch and no transformers, which took 5 to 6 seconds; importing the package still registers the model
with transformers' Auto classes."""

import json
import subprocess
import sys

import pytest
from fault_support import REPO

from vanilla_transformer.cli import COMMANDS


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(REPO)}
    )


@pytest.mark.parametrize(
    "argv",
    [["--version"], ["--help"], *([command, "--help"] for command in COMMANDS)],
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


def test_train_names_every_model_size_of_the_configuration_file_without_importing_it(tmp_path):
    """``train --help`` reads the model sizes from the remote-code configuration file's source (it imports
    transformers): the names are that file's PRESETS, in order, and an unknown one is refused naming them."""
    from vanilla_transformer.configuration_vanilla_transformer import PRESETS
    from vanilla_transformer.training.config import model_preset_names

    assert model_preset_names() == tuple(PRESETS) and len(PRESETS) >= 2
    code = """
import contextlib, io, sys
from vanilla_transformer.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    try:
        main(["train", "--help"])
    except SystemExit:
        pass
print(" ".join(out.getvalue().split()))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr
    assert f"a configuration preset: {', '.join(PRESETS)} (base and big" in completed.stdout
    completed = run_python(
        f"from vanilla_transformer.cli import main; main(['train', '--model', 'huge', '--output-dir', {str(tmp_path / 'run')!r}])"
    )
    assert completed.stderr.strip().splitlines() == [
        f"vanilla-transformer train: error: unknown model --model='huge'; choose one of {', '.join(PRESETS)}"
    ]
    assert not (tmp_path / "run").exists()


def test_the_training_run_imports_no_evaluate_nor_datasets():
    """A training run scores with sacreBLEU directly: the code it imports up to its first step leaves out `evaluate`
    (only the shipped `evaluate` modules need it) and so `datasets`, pandas and pyarrow, which `evaluate` imports:
    about half a second of every start (issue 47)."""
    code = """
import json, sys
import vanilla_transformer.training.run
from vanilla_transformer.metrics import compute_bleu
print(json.dumps([name for name in ("evaluate", "datasets", "pandas", "pyarrow") if name in sys.modules]))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads(completed.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize(
    ("package", "name", "module"),
    [
        ("vanilla_transformer.training", "Trainer", "trainer"),
        ("vanilla_transformer.data", "TokenBatchSampler", "batching"),
    ],
)
def test_a_package_imports_each_name_when_first_used(package, name, module):
    """The training and data packages load a name's module only when the name is first asked for, keep it, list it in
    dir(), and name the package and the name that it does not have."""
    code = f"""
import json, sys
import {package} as package
before = "{package}.{module}" in sys.modules
value = getattr(package, "{name}")
after = "{package}.{module}" in sys.modules
try:
    package.no_such_name
except AttributeError as error:
    missing = str(error)
print(json.dumps([before, after, vars(package).get("{name}") is value, "{name}" in dir(package), missing]))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr
    before, after, kept, listed, missing = json.loads(completed.stdout)
    assert (before, after, kept, listed) == (False, True, True, True)
    assert missing == f"module {package!r} has no attribute 'no_such_name'"


FINETUNE_MISTYPED = {
    "--bogus": "unrecognized option --bogus (--help",
    "--max-step": "unrecognized option --max-step (did you mean --max-steps?)",  # finetune's own --max-steps
    "--gradient-acumulation-steps": "unrecognized option --gradient-acumulation-steps (did you mean "
    "--gradient-accumulation-steps?)",  # the Trainer's
    "--no-bf17": "unrecognized option --no-bf17",
}
"""finetune's mistyped options, and the start of the line that refuses each."""


def test_a_mistyped_option_or_command_is_refused_before_torch_or_transformers_loads():
    """The command line is parsed first and the heavy libraries load after (issue 56, cause 8): a mistyped option of
    every command is refused with its closest name and exit status 2, in one process that has imported neither
    (finetune's options include the Trainer's, which transformers defines: their names are read from its source);
    a mistyped command is answered with the closest command."""
    commands = list(COMMANDS)
    finetune = [["finetune", "m", "--numbers", "8", "--output-dir", "o", option, "1"] for option in FINETUNE_MISTYPED]
    code = f"""
import contextlib, io, json, sys
from vanilla_transformer.cli import main
answers = []
for argv in [[command, "--modle", "x"] for command in {commands!r}] + {finetune!r} + [["tranlsate", "--model", "x"]]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit:
            status = exit.code
    heavy = [name for name in ("torch", "transformers", "accelerate") if name in sys.modules]
    answers.append([argv[0], status, err.getvalue(), heavy])
print(json.dumps(answers))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-3000:]
    *options, command = json.loads(completed.stdout)
    for name, status, err, heavy in options[: len(commands)]:
        assert (status, heavy) == (2, []), (name, err, heavy)
        assert "error: unrecognized option --modle" in err, (name, err)
    for expected, (name, status, err, heavy) in zip(FINETUNE_MISTYPED.values(), options[len(commands) :], strict=True):
        assert (name, status, heavy) == ("finetune", 2, []), (err, heavy)
        assert err.splitlines()[-1].startswith(f"vanilla-transformer finetune: error: {expected}"), err
    name, status, err, heavy = command
    assert status == 2 and heavy == [] and "unknown command 'tranlsate' (did you mean translate?)" in err, err


def test_a_command_line_that_parses_turns_off_transformers_remote_code_prompt():
    """Parsed first does not mean unguarded: once a command's line parses, transformers' prompt to run a folder's code
    is off (its timeout 0), before the command loads anything."""
    code = """
import json
from vanilla_transformer.cli import translate
from transformers import dynamic_module_utils
before = dynamic_module_utils.TIME_OUT_REMOTE_CODE
translate.parse_args(["--model", "no-such-model"])
print(json.dumps([before, dynamic_module_utils.TIME_OUT_REMOTE_CODE]))
"""
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr[-3000:]
    before, after = json.loads(completed.stdout)
    assert before > 0 and after == 0


def test_finetune_reads_every_trainer_option_that_transformers_parses():
    """The names finetune reads from transformers' source hold every option string of transformers' own parser of
    the Trainer's options, on the installed release: a valid option is never refused early; and a source laid out
    otherwise (another base class) gives no names, so the options are checked after transformers loads."""
    from vanilla_transformer.cli import trainer_options
    from vanilla_transformer.cli.finetune import trainer_parser

    names = trainer_options.trainer_option_names()
    parsed = {option for action in trainer_parser()._actions for option in action.option_strings}
    assert names is not None and parsed - {"-h", "--help"} <= names
    assert {"--gradient-accumulation-steps", "--predict_with_generate", "--report-to"} <= names
    assert len(names - parsed) <= 4, sorted(names - parsed)  # a superset, but barely: --no-optim, --no_optim


def test_finetune_checks_after_transformers_loads_when_its_source_is_laid_out_otherwise(monkeypatch, capsys):
    from vanilla_transformer.cli import finetune, trainer_options

    sources = dict(trainer_options.TRAINER_SOURCES, **{"training_args.py": ("TrainingArguments", ("Mixin",))})
    monkeypatch.setattr(trainer_options, "TRAINER_SOURCES", sources)
    assert trainer_options.trainer_option_names() is None
    with pytest.raises(SystemExit) as exit:
        finetune.parse_options(["m", "--numbers", "8", "--output-dir", "o", "--gradient-acumulation-steps", "2"])
    assert exit.value.code == 2
    assert "unrecognized option --gradient-acumulation-steps (did you mean --gradient-accumulation-steps?)" in (
        capsys.readouterr().err
    )
