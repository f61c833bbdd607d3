"""Links are never written through, and a folder holding a link out of itself is not read (issue 38, cause 1): a
run folder, a model directory or an output from a tarball or a colleague must not make a command overwrite, or read,
a file elsewhere."""

import hashlib
import shutil

import pytest

OUTSIDE = "a file of the user's, outside every folder the command was given\n"


def _digest(folder):
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


@pytest.fixture
def outside(tmp_path):
    """A file elsewhere that a planted link names; the tests check that it is left as it was."""
    path = tmp_path / "elsewhere" / "precious.txt"
    path.parent.mkdir()
    path.write_text(OUTSIDE)
    return path


@pytest.mark.parametrize("name", ["test.hyp.de", "results.json", "metrics.png", "training_config.json"])
def test_resume_never_writes_through_a_link_in_the_run_folder(tiny_run_dir, tmp_path, outside, run_cli, name):
    from tiny_model import TINY

    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(outside)
    status, _, err = run_cli("train", *TINY, "--output-dir", run, "--resume")
    assert status == 1 and f"{run / name} is a symbolic link" in err and "Traceback" not in err, err
    assert outside.read_text() == OUTSIDE and (run / name).is_symlink()


def test_resume_refuses_a_checkpoints_folder_linked_out_of_the_run(tiny_run_dir, tmp_path, run_cli):
    from tiny_model import TINY

    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere-checkpoints"
    shutil.move(run / "checkpoints", elsewhere)
    (run / "checkpoints").symlink_to(elsewhere)
    before = _digest(elsewhere)
    status, _, err = run_cli("train", *TINY, "--output-dir", run, "--resume")
    assert status == 1 and f"{run / 'checkpoints'} is a symbolic link" in err, err
    assert _digest(elsewhere) == before


def test_a_checkpoint_piece_linked_out_of_its_folder_is_not_read(tiny_run_dir, tmp_path, run_cli):
    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    newest = sorted((run / "checkpoints").iterdir())[-1]
    moved = tmp_path / "weights.safetensors"
    shutil.move(newest / "model.safetensors", moved)
    (newest / "model.safetensors").symlink_to(moved)
    status, _, err = run_cli("average", run, "--last", 1, "--output", tmp_path / "avg")
    assert status == 1 and f"{newest / 'model.safetensors'} is a symbolic link" in err, err
    assert not (tmp_path / "avg").exists()


@pytest.mark.parametrize("output", ["file", "stdout"])
def test_translate_output_is_never_written_through_a_link(tiny_model_dir, tmp_path, outside, run_cli, output):
    source = tmp_path / "in.txt"
    source.write_text("forty-two\n")
    link = tmp_path / "out.de"
    link.symlink_to(outside)
    status, out, err = run_cli("translate", "--model", tiny_model_dir, "--input", source, "--output", link)
    assert status == 1 and f"--output={link} is a symbolic link" in err and out == "", err
    assert outside.read_text() == OUTSIDE and link.is_symlink()


def test_evaluate_results_are_never_written_through_a_link(tmp_path, outside, run_cli):
    text = tmp_path / "hyp.txt"
    text.write_text("eins\n")
    link = tmp_path / "scores.json"
    link.symlink_to(outside)
    status, _, err = run_cli("evaluate", "--hypotheses", text, "--reference", text, "--results", link)
    assert status == 1 and f"--results={link} is a symbolic link" in err, err
    assert outside.read_text() == OUTSIDE


EXPORTS = {
    "export-ctranslate2": lambda model, out: ["export-ctranslate2", model, out],
    "export-marian": lambda model, out: ["export-marian", model, out],
    "export-onnx": lambda model, out: ["export-onnx", model, out],
    "push --dry-run": lambda model, out: ["push", model, "org/name", "--dry-run", out],
    "translate": lambda model, out: ["translate", "--model", model, "--input", model / "in.txt"],
    "attention": lambda model, out: ["attention", model, "forty-two", "--output-dir", out],
}


@pytest.mark.parametrize("command", EXPORTS)
def test_every_command_refuses_a_model_folder_whose_weights_link_out_of_it(command, model_copy, tmp_path, run_cli):
    """The folder names a weights file elsewhere: not what was shipped; it is refused, naming the link."""
    moved = tmp_path / "weights-elsewhere.safetensors"
    shutil.move(model_copy / "model.safetensors", moved)
    (model_copy / "model.safetensors").symlink_to(moved)
    (model_copy / "in.txt").write_text("forty-two\n")
    out = tmp_path / "out"
    status, _, err = run_cli(*EXPORTS[command](model_copy, out))
    assert status == 1 and f"{model_copy / 'model.safetensors'} is a symbolic link" in err, err
    assert "outside the model directory" in err and not out.exists()


@pytest.mark.parametrize(
    "command",
    [
        "export-ctranslate2",
        "export-marian",
        "export-onnx",
        "push --dry-run",
        "attention",
        "average",
        "train-tokenizer",
    ],
)
def test_every_export_refuses_an_output_that_is_a_link(command, tiny_model_dir, tiny_run_dir, tmp_path, run_cli):
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one two three\n" * 20)
    argv = {
        **{
            name: EXPORTS[name](tiny_model_dir, link)
            for name in ("export-ctranslate2", "export-marian", "export-onnx", "attention")
        },
        "push --dry-run": EXPORTS["push --dry-run"](tiny_model_dir, link),
        "average": ["average", tiny_run_dir, "--output", link],
        "train-tokenizer": ["train-tokenizer", corpus, "--vocab-size", "300", "--output-dir", link],
    }[command]
    status, _, err = run_cli(*argv)
    assert status == 1 and f"={link} is a symbolic link" in err, err
    assert list(target.iterdir()) == [] and link.is_symlink()
