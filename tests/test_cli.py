"""The command line: one `vanilla-transformer` command (the same as `python -m vanilla_transformer`), every command's
--help with the options it has always had, and commands that name the extra they need."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tiny_model import load_script

from vanilla_transformer.cli import COMMAND_EXTRA, COMMANDS, main
from vanilla_transformer.training import TrainingConfig

# Options each command has had since before the package had a command line (a few per command, not all).
OPTIONS = {
    "train": ["--preset", "--output-dir", "--resume", "--dataset", "--data-dir", "--max-tokens", "--tokens-per-step"],
    "translate": ["--model", "FILE", "--input", "--output", "--ctranslate2", "--num-beams", "--length-penalty",
                  "--device"],
    "evaluate": ["--reference", "--hypotheses", "--model", "--source", "--results", "--num-beams"],
    "average": ["run_dir", "--last", "--output"],
    "train-tokenizer": ["files", "--hf-dataset", "--numbers", "--vocab-size", "--min-frequency", "--output-dir"],
    "finetune": ["model", "--train", "--eval", "--hf-dataset", "--numbers", "--output-dir", "--max-steps",
                 "--num-epochs", "--batch-size", "--eval-steps", "--label-smoothing", "--num-beams",
                 "--metric-for-best-model", "--resume-from-checkpoint", "--trainer-help", "--src-lang"],
    "export-ctranslate2": ["model_dir", "output_dir", "--quantization", "--force"],
    "export-onnx": ["model_dir", "output_dir", "--quantize", "--web", "--transformers-js", "--force"],
    "push": ["model_dir", "repo_id", "--template", "--private", "--token", "--dry-run", "--space", "--static",
             "--transformers-js"],
    "attention": ["model", "source", "--target", "--output-dir", "--layers", "--kinds"],
    "demo": ["model", "--host", "--port"],
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


@pytest.mark.parametrize("command", list(COMMANDS))
def test_each_commands_help_describes_it_in_whole_sentences(command, capsys, monkeypatch):
    """The description under the usage is whole (issue 56: export-onnx's stopped at the docstring's first line break,
    mid-sentence): one paragraph that ends a sentence."""
    monkeypatch.setenv("COLUMNS", "10000")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit):
        main([command, "--help"])
    description = capsys.readouterr().out.split("\n\n")[1].strip()
    assert description.endswith(".") and "\n" not in description, description


def test_an_export_into_a_non_empty_folder_names_the_option_for_the_command_and_the_argument_for_python(
    tiny_model_dir, tmp_path, capsys
):
    """The command's user is told ``--force``, the library's caller ``force=True``, each only their own."""
    pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    from vanilla_transformer.export.onnx import export_onnx

    folder = tmp_path / "taken"
    folder.mkdir()
    (folder / "notes.md").write_text("mine\n")
    assert main(["export-onnx", str(tiny_model_dir), str(folder)]) == 1
    err = capsys.readouterr().err
    assert "pass --force to replace" in err and "force=True" not in err, err
    with pytest.raises(ValueError, match="pass force=True to replace") as refused:
        export_onnx(tiny_model_dir, folder)
    assert "--force" not in str(refused.value)


def test_a_command_without_its_extra_names_the_pip_command():
    """With the 'train' extra's datasets missing, `train` stops before starting, naming the extra to install."""
    code = "import sys; sys.modules['datasets'] = None; from vanilla_transformer.cli import main; sys.exit(main())"
    completed = run(sys.executable, "-c", code, "train", "--output-dir", "never-written")
    assert completed.returncode == 2
    assert "vanilla-transformer train needs the 'train' extra (datasets not installed)" in completed.stderr
    assert 'pip install "vanilla-transformer[train]"' in completed.stderr


def test_evaluate_reads_a_process_substitution_and_names_a_missing_file(tmp_path):
    """``--reference <(head -n 3 ref.de)`` hands the command /dev/fd/63, a pipe and not a regular file: it is read
    like a file. A missing file still stops the command with an error naming the argument."""
    bash = shutil.which("bash")
    script = shutil.which("vanilla-transformer", path=str(Path(sys.executable).parent))
    if bash is None or script is None:
        pytest.skip("needs bash and the installed vanilla-transformer command")
    hypotheses, references, results = tmp_path / "hyp.de", tmp_path / "ref.de", tmp_path / "scores.json"
    hypotheses.write_text("das ist ein Test\nja\ndrei Hunde\n", encoding="utf-8")
    references.write_text("das ist ein Test\nnein\ndrei Hunde\nvier\nfünf\n", encoding="utf-8")
    command = (
        f"{shlex.quote(script)} evaluate --hypotheses {shlex.quote(str(hypotheses))} "
        f"--reference <(head -n 3 {shlex.quote(str(references))}) --results {shlex.quote(str(results))}"
    )
    completed = run(bash, "-c", command)
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert json.loads(results.read_text())["exact_match"] == pytest.approx(200 / 3)  # 2 of the first 3 lines
    missing = run(script, "evaluate", "--hypotheses", str(tmp_path / "missing.de"), "--reference", str(references))
    assert (
        missing.returncode != 0 and "--hypotheses=" in missing.stderr and "missing.de: no such file" in missing.stderr
    )


BAD_SEARCH_OPTIONS = [
    ("--length-penalty", "nan", "--length-penalty must be finite and non-negative, got --length-penalty=nan"),
    ("--length-penalty", "inf", "--length-penalty must be finite and non-negative, got --length-penalty=inf"),
    ("--length-penalty", "-1", "--length-penalty must be finite and non-negative, got --length-penalty=-1.0"),
    ("--max-length-offset", "-1", "--max-length-offset must be non-negative, got --max-length-offset=-1"),
    ("--num-beams", "0", "--num-beams must be at least 1, got --num-beams=0"),
    ("--num-beams", "-2", "--num-beams must be at least 1, got --num-beams=-2"),
]
"""A search option that cannot work, and the error that names it: a NaN alpha changes the output, a negative one or
offset cuts it short, and 0 or -2 beams crash deep inside generate()."""


@pytest.mark.parametrize("command", ["translate", "evaluate", "train"])
@pytest.mark.parametrize("option, value, message", BAD_SEARCH_OPTIONS)
def test_bad_search_options_are_refused_naming_the_option_before_anything_is_read(
    command, option, value, message, tmp_path
):
    """Neither the model nor the files exist, and nothing is written: the option is what the error names. train
    refuses the final search's settings with the others, not after hours of training, at the test."""
    missing = tmp_path / "missing"
    arguments = {
        "translate": ["--model", str(missing), str(missing / "input.en")],
        "evaluate": ["--model", str(missing), "--source", str(missing / "a.en"), "--reference", str(missing / "a.de")],
        "train": ["--dataset", "text", "--data-dir", str(missing), "--output-dir", str(tmp_path / "run")],
    }[command]
    script = load_script(command)  # train: its command line alone, which main parses before training
    with pytest.raises(ValueError, match=re.escape(message)):
        (script.parse_args if command == "train" else script.main)([*arguments, option, value])
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["translate", "evaluate"])
def test_a_batch_size_below_one_is_refused_naming_the_option(command, tmp_path):
    files = {"translate": ["x.en"], "evaluate": ["--source", "x.en", "--reference", "x.de"]}[command]
    with pytest.raises(ValueError, match=re.escape("--batch-size must be at least 1, got --batch-size=0")):
        load_script(command).main(["--model", str(tmp_path), *files, "--batch-size", "0"])


def test_train_refuses_a_search_setting_of_the_wrong_type_in_its_saved_config():
    with pytest.raises(ValueError, match=re.escape("--num-beams must be an integer, got --num-beams='4'")):
        TrainingConfig.from_preset("numbers", num_beams="4")  # e.g. from a hand-edited training_config.json
    assert TrainingConfig.from_preset("numbers", length_penalty=0, max_length_offset=0).decoding.max_length_offset == 0


@pytest.mark.parametrize(
    "field, value", [("num_beams", "4"), ("length_penalty", float("nan")), ("max_length_offset", -1)]
)
def test_a_bad_search_in_the_models_generation_config_is_named(field, value, tiny_model_dir, tmp_path, capsys):
    """A hand-edited generation_config.json (e.g. "num_beams": "4", which made generate() raise a TypeError): the
    command names the file and the field, and the option that overrides it works."""
    edited = tmp_path / "model"
    shutil.copytree(tiny_model_dir, edited)
    path = edited / "generation_config.json"
    saved = json.loads(path.read_text())
    path.write_text(json.dumps({**saved, "length_penalty_type": "gnmt", "max_length_offset": 50, field: value}))
    (tmp_path / "source.en").write_text("seven\nthree hundred\n", encoding="utf-8")
    translate, arguments = load_script("translate"), ["--model", str(edited), str(tmp_path / "source.en")]
    option = "--" + field.replace("_", "-")
    with pytest.raises(
        ValueError, match=rf"the model's generation_config.json \(override it with {option}\): {field} "
    ):
        translate.main(arguments)
    override = {"num_beams": "2", "length_penalty": "0.6", "max_length_offset": "5"}[field]
    capsys.readouterr()
    assert translate.main([*arguments, option, override]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


def test_version_names_the_package_and_what_it_runs_on(capsys):
    from vanilla_transformer.cli import main

    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vanilla-transformer ") and "torch " in out and "transformers " in out
