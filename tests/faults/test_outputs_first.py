"""Every output is checked before any work (issue 38, cause 2): a user's non-empty folder handed to finetune or push
--dry-run is refused up front, nothing written into it and no model loaded; every output of a command is checked
before the first of them is written."""

import pytest
from fault_support import digest

from vanilla_transformer import model_dir


@pytest.fixture
def users_folder(tmp_path):
    """A folder of the user's, with files of the names finetune and push write."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "README.md").write_text("my notes\n")
    (folder / "config.json").write_text('{"mine": true}\n')
    return folder


@pytest.fixture
def no_model_loads(monkeypatch):
    """Records every model load of finetune: none may happen before its outputs are checked."""
    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    return loads


FINETUNE = ["--numbers", "40", "--max-steps", "1", "--eval-steps", "1", "--num-beams", "1"]


def test_finetune_refuses_a_users_non_empty_folder_before_loading_anything(
    tiny_model_dir, users_folder, run_cli, no_model_loads
):
    before = digest(users_folder)
    status, _, err = run_cli("finetune", tiny_model_dir, *FINETUNE, "--output-dir", users_folder)
    assert status == 1 and f"--output-dir={users_folder} is not empty and was not written by finetune" in err, err
    assert no_model_loads == [] and digest(users_folder) == before


def test_finetune_merge_folder_is_checked_before_training(tiny_model_dir, tmp_path, run_cli, no_model_loads):
    from vanilla_transformer.training.finetune import FINETUNE_MARKER

    output = tmp_path / "lora"  # an earlier run's output, whose merged folder the user has since filled
    (output / "merged").mkdir(parents=True)
    (output / FINETUNE_MARKER).write_text("")
    (output / "merged" / "notes.txt").write_text("mine\n")
    status, _, err = run_cli("finetune", tiny_model_dir, *FINETUNE, "--lora", "--merge", "--output-dir", output)
    assert status == 1 and f"the merged model directory={output / 'merged'} is a folder that is not empty" in err
    assert no_model_loads == [] and (output / "merged" / "notes.txt").read_text() == "mine\n"


def test_finetune_refuses_a_link_inside_its_own_output_folder(tiny_model_dir, tmp_path, run_cli, no_model_loads):
    from vanilla_transformer.training.finetune import FINETUNE_MARKER

    output, outside = tmp_path / "run", tmp_path / "outside.md"
    output.mkdir()
    (output / FINETUNE_MARKER).write_text("")
    outside.write_text("mine\n")
    (output / "README.md").symlink_to(outside)
    status, _, err = run_cli("finetune", tiny_model_dir, *FINETUNE, "--output-dir", output)
    assert status == 1 and f"{output / 'README.md'} is a symbolic link" in err, err
    assert no_model_loads == [] and outside.read_text() == "mine\n"


@pytest.mark.parametrize("which", ["folder", "space"])
def test_push_dry_run_checks_both_folders_before_writing_either(
    tiny_model_dir, tmp_path, users_folder, run_cli, which
):
    dry_run = tmp_path / "upload"
    if which == "folder":
        dry_run = users_folder
    else:
        space = tmp_path / "upload-space"
        space.mkdir()
        (space / "app.py").write_text("# mine\n")
    status, _, err = run_cli("push", tiny_model_dir, "org/name", "--dry-run", dry_run, "--space", "org/demo")
    assert status == 1 and "is a folder that is not empty" in err, err
    if which == "folder":
        assert (users_folder / "README.md").read_text() == "my notes\n"
        assert not (tmp_path / "mine-space").exists()
    else:
        assert not dry_run.exists()  # nothing written before the Space folder was refused
        assert (space / "app.py").read_text() == "# mine\n"
    # the corrected command then runs
    status, _, err = run_cli(
        "push", tiny_model_dir, "org/name", "--dry-run", tmp_path / "fresh", "--space", "org/demo"
    )
    assert status == 0 and (tmp_path / "fresh" / "README.md").is_file(), err
    assert (tmp_path / "fresh-space" / "app.py").is_file()


@pytest.mark.parametrize("command", ["export-marian", "export-ctranslate2", "export-onnx"])
def test_exports_refuse_a_users_folder_before_reading_the_model(command, tmp_path, users_folder, run_cli):
    missing = tmp_path / "no-model"  # nothing is read: a missing model would be named otherwise
    status, _, err = run_cli(command, missing, users_folder)
    assert status == 1 and str(users_folder) in err and "not empty" in err, err
    assert (users_folder / "config.json").read_text() == '{"mine": true}\n'
