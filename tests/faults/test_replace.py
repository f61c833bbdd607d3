"""The commands that replace a folder (issue 25, item 3): ``average --output``, ``export-ctranslate2 --force`` and
``train-tokenizer --output-dir`` write atomically, and refuse to replace what they did not write."""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
from fault_support import REPO, digest


@pytest.fixture
def run_copy(tiny_run_dir, tmp_path):
    return shutil.copytree(tiny_run_dir, tmp_path / "run")


def test_average_into_the_runs_model_replaces_it_whole_without_the_stale_summary(run_copy, run_cli):
    model = run_copy / "model"
    assert (model / "training_summary.json").is_file()  # train's summary of the whole run
    status, out, err = run_cli("average", run_copy, "--last", 1, "--output", model)
    assert status == 0, err
    assert not (model / "training_summary.json").exists()  # it described another model
    assert json.loads((model / "config.json").read_text())["model_type"] == "vanilla_transformer"
    assert sorted(path.name for path in run_copy.iterdir() if path.name.startswith(".model")) == []


def test_average_refuses_a_non_empty_folder_it_did_not_write(run_copy, run_cli, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    status, out, err = run_cli("average", run_copy, "--output", mine)
    assert status == 1 and f"--output={mine} is a folder that is not empty and was not written" in err
    assert [path.name for path in mine.iterdir()] == ["notes.txt"]
    # nor the run directory itself, nor its checkpoints
    for folder in (run_copy, run_copy / "checkpoints"):
        before = digest(folder)
        status, _, err = run_cli("average", run_copy, "--output", folder)
        assert status == 1 and "not written by this program" in err and digest(folder) == before


@pytest.mark.parametrize("point", ["started", "written", "exchanged", "removing"])
def test_average_killed_at_any_point_leaves_a_whole_model(run_copy, point):
    from vanilla_transformer.atomic import PAUSE_ENV

    model = run_copy / "model"
    before = digest(model)
    env = {**os.environ, "PYTHONPATH": str(REPO), PAUSE_ENV: point}
    process = subprocess.Popen(
        [sys.executable, "-m", "vanilla_transformer", "average", str(run_copy), "--last", "1", "--output", str(model)],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in process.stderr:
            if f"paused at {point}" in line:
                break
        else:
            pytest.fail(f"average never reached {point}")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    after = digest(model)
    if point in ("started", "written"):
        assert after == before
    else:
        assert after != before and "training_summary.json" not in after
        assert all((model / name).stat().st_size > 0 for name in after)
    from vanilla_transformer.model_dir import load_model_dir

    load_model_dir(model)  # whole: it loads


def test_export_ctranslate2_never_replaces_its_own_input(tiny_model_dir, tmp_path, run_cli):
    pytest.importorskip("ctranslate2")
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    before = digest(model)
    for output in (model, tmp_path, model / "ct2"):
        status, _, err = run_cli("export-ctranslate2", model, output, "--force")
        assert status == 1 and "would replace or hold the model being exported" in err, err
        assert digest(model) == before


@pytest.mark.filterwarnings("ignore:CTranslate2 runs int8")
def test_export_ctranslate2_force_replaces_only_a_ctranslate2_model(tiny_model_dir, tmp_path, run_cli):
    pytest.importorskip("ctranslate2")
    output = tmp_path / "ct2"
    assert run_cli("export-ctranslate2", tiny_model_dir, output)[0] == 0
    status, _, err = run_cli("export-ctranslate2", tiny_model_dir, output)
    assert status == 1 and "--force" in err
    first = (output / "model.bin").stat().st_mtime_ns
    assert run_cli("export-ctranslate2", tiny_model_dir, output, "--force", "--quantization", "int8")[0] == 0
    assert (output / "model.bin").stat().st_mtime_ns != first
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "data.txt").write_text("keep")
    status, _, err = run_cli("export-ctranslate2", tiny_model_dir, mine, "--force")
    assert status == 1 and "not written by this program" in err and (mine / "data.txt").read_text() == "keep"


def _corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one two three\nfour five six\n" * 20)
    return corpus


def test_train_tokenizer_refuses_a_models_folder_before_training(tiny_model_dir, tmp_path, run_cli, monkeypatch):
    from vanilla_transformer import tokenization

    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    before = digest(model)
    trained = []
    monkeypatch.setattr(tokenization, "train_tokenizer", lambda *a, **k: trained.append(a))
    status, _, err = run_cli("train-tokenizer", _corpus(tmp_path), "--vocab-size", 300, "--output-dir", model)
    assert status == 1 and "holds a trained model" in err and "--replace-model-tokenizer" in err
    assert trained == [] and digest(model) == before


def test_train_tokenizer_replaces_a_models_tokenizer_only_when_asked(tiny_model_dir, tmp_path, run_cli):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    weights = digest(model)["model.safetensors"]
    argv = ["train-tokenizer", _corpus(tmp_path), "--vocab-size", 300, "--min-frequency", 1, "--output-dir", model]
    status, _, err = run_cli(*argv, "--replace-model-tokenizer")
    assert status == 0, err
    vocabulary = json.loads((model / "tokenizer.json").read_text())["model"]["vocab"]
    assert "Ġfive" in vocabulary and digest(model)["model.safetensors"] == weights
    assert not [path for path in model.iterdir() if path.name.startswith(".")]


def test_train_tokenizer_replaces_a_tokenizer_folder_and_refuses_other_folders(tmp_path, run_cli):
    corpus = _corpus(tmp_path)
    output = tmp_path / "tokenizer"
    argv = ["train-tokenizer", corpus, "--vocab-size", 300, "--min-frequency", 1, "--output-dir"]
    assert run_cli(*argv, output)[0] == 0
    assert run_cli(*argv, output)[0] == 0  # an earlier tokenizer is replaced
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "tokenizer"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "draft.txt").write_text("keep")
    status, _, err = run_cli(*argv, mine)
    assert status == 1 and "holds no tokenizer" in err and (mine / "draft.txt").read_text() == "keep"
