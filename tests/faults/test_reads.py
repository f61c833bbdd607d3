"""One record of what a command reads (issue 65, cause 1): every file it opens for reading (the model folder's, an
export's, the input and reference, the file behind standard input) is noted by device and inode, and every output is
checked against that record before its first byte is written. And the rough edges of issue 67 on the same path:
``--output /dev/stdout`` is standard output, a missing input is named before torch loads, an empty input loads no
model."""

import subprocess
import sys

import pytest
from fault_support import REPO, digest, one_line

from vanilla_transformer import model_dir


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "tokenizer.json"])
def test_translate_output_never_replaces_a_file_of_its_model(model_copy, tmp_path, run_cli, name):
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    before = digest(model_copy)
    result = run_cli("translate", "--model", model_copy, "--input", source, "--output", model_copy / name)
    one_line(result, f"--output={model_copy / name}", f"--model={model_copy}", name, "which this command reads")
    assert digest(model_copy) == before
    assert run_cli("translate", "--model", model_copy, "--input", source)[0] == 0  # the model still translates


@pytest.mark.parametrize("option", ["--results", "--output"])
def test_evaluate_outputs_never_replace_a_file_of_its_model(model_copy, tmp_path, run_cli, option):
    source, reference = tmp_path / "in.txt", tmp_path / "ref.txt"
    source.write_text("zwei drei\n")
    reference.write_text("two three\n")
    before = digest(model_copy)
    output = model_copy / "generation_config.json"
    argv = ["evaluate", "--model", model_copy, "--source", source, "--reference", reference, option, output]
    one_line(run_cli(*argv), f"{option}={output}", "generation_config.json", "which this command reads")
    assert digest(model_copy) == before


def test_an_output_is_checked_against_what_was_read_when_it_is_written(model_copy, tmp_path, run_cli, monkeypatch):
    """A file read after the command line was checked (here: the model's files, when only the loader notes them) is
    in the record too: the write itself refuses it."""
    from vanilla_transformer.atomic import check_not_an_input
    from vanilla_transformer.cli import translate

    monkeypatch.setattr(translate, "check_not_an_input", lambda output, what, _: check_not_an_input(output, what, {}))
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    before = digest(model_copy)
    status, _, err = run_cli(
        "translate", "--model", model_copy, "--input", source, "--output", model_copy / "config.json"
    )
    last = err.splitlines()[-1]  # after the bar of the weights' loading: the model was read, then the output refused
    assert status == 1 and f"the model directory {model_copy} (its config.json), which this command reads" in last
    assert digest(model_copy) == before and not (model_copy / "config.json.partial").exists()


def _run_with_stdin(argv, stdin_path, stdout=subprocess.PIPE):
    with open(stdin_path, "rb") as stdin:
        return subprocess.run(
            [sys.executable, "-m", "vanilla_transformer", *map(str, argv)],
            stdin=stdin,
            stdout=stdout,
            stderr=subprocess.PIPE,
            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
            timeout=300,
        )


def test_an_output_never_replaces_the_file_behind_standard_input(tiny_model_dir, tmp_path):
    source = tmp_path / "x.en"
    source.write_text("zwei drei\n")
    translate = _run_with_stdin(["translate", "--model", tiny_model_dir, "--output", source], source)
    assert translate.returncode == 1 and b"is standard input, which this command reads" in translate.stderr
    reference = tmp_path / "ref.txt"
    reference.write_text("two three\n")
    argv = ["evaluate", "--model", tiny_model_dir, "--source", "-", "--reference", reference, "--output", source]
    evaluate = _run_with_stdin(argv, source)
    assert evaluate.returncode == 1 and b"is standard input, which this command reads" in evaluate.stderr
    assert source.read_text() == "zwei drei\n"
    elsewhere = _run_with_stdin(["translate", "--model", tiny_model_dir, "--output", tmp_path / "x.de"], source)
    assert elsewhere.returncode == 0 and (tmp_path / "x.de").read_text().count("\n") == 1, elsewhere.stderr


def test_output_dev_stdout_is_standard_output_even_when_that_is_a_file(tiny_model_dir, tmp_path):
    """``--output /dev/stdout > out.de``: written where standard output goes (issue 67), not refused as a link."""
    source, output = tmp_path / "x.en", tmp_path / "out.de"
    source.write_text("zwei drei\nvier\n")
    output.write_text("kept above\n")
    with open(output, "ab") as stdout:
        result = _run_with_stdin(["translate", "--model", tiny_model_dir, "--output", "/dev/stdout"], source, stdout)
    assert result.returncode == 0, result.stderr
    lines = output.read_text().splitlines()
    assert lines[0] == "kept above" and len(lines) == 3  # appended, as the shell opened it; not reopened, emptied


def test_a_missing_input_is_named_before_torch_loads(tiny_model_dir, tmp_path):
    missing = tmp_path / "no-such.en"
    code = (
        "import sys\nfrom vanilla_transformer.cli import main\n"
        f"status = main(['translate', '--model', {str(tiny_model_dir)!r}, '--input', {str(missing)!r}])\n"
        "print('torch loaded' if 'torch' in sys.modules else 'torch not loaded')\nsys.exit(status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, timeout=120
    )
    assert result.returncode == 1 and f"--input={missing}: no such file" in result.stderr, result.stderr
    assert result.stdout.strip() == "torch not loaded"


def test_an_empty_input_loads_no_model(tiny_model_dir, tmp_path, run_cli, monkeypatch):
    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    empty, output = tmp_path / "empty.en", tmp_path / "out.de"
    empty.write_text("")
    status, _, err = run_cli("translate", "--model", tiny_model_dir, "--input", empty, "--output", output)
    assert status == 0 and "nothing to translate" in err and loads == [], err
    assert output.read_bytes() == b""
