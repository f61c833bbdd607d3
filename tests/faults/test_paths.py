"""Nothing read from disk is trusted (issue 25, item 1): names built from a saved training_config.json stay inside the
run directory, a checkpoint manifest lists only the checkpoint's own pieces, a checkpoint's step is its name's, and a
checkpoint belongs to its run (its run id)."""

import hashlib
import json
import shutil
import uuid

import pytest

from vanilla_transformer.training import checkpoints
from vanilla_transformer.training.checkpoints import (
    check_checkpoint,
    find_resumable_checkpoint,
    list_checkpoints,
    load_checkpoint_weights,
)
from vanilla_transformer.training.state import CheckpointError


@pytest.fixture
def run_copy(tiny_run_dir, tmp_path):
    return shutil.copytree(tiny_run_dir, tmp_path / "run")


def _edit_json(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _newest(run):
    return list_checkpoints(run / "checkpoints")[-1]


@pytest.mark.parametrize("field", ["src_lang", "tgt_lang"])
def test_overwrite_never_deletes_outside_the_run_from_a_crafted_training_config(run_copy, tmp_path, field):
    from tiny_model import TINY

    from vanilla_transformer.training import parse_args, train

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep")
    (run_copy / "test.x").mkdir()  # so that run/test.x/../../victim resolves to the victim
    _edit_json(run_copy / "training_config.json", **{field: "x/../../victim"})
    with pytest.raises(ValueError, match=rf"training_config.json: {field}='x/../../victim' is not a language code"):
        train(parse_args([*TINY, "--output-dir", str(run_copy), "--overwrite"]))
    assert (victim / "precious.txt").read_text() == "keep"
    assert (run_copy / "checkpoints").is_dir()  # nothing of the run was deleted either


def test_a_damaged_training_config_is_named_by_average(run_copy, run_cli):
    (run_copy / "training_config.json").write_text('{"preset": ')
    status, _, err = run_cli("average", run_copy)
    assert status == 1 and f"{run_copy / 'training_config.json'} is damaged" in err


@pytest.mark.parametrize("listed", ["../../../outside.txt", "/etc/hostname", "extra.safetensors"])
def test_a_manifest_listing_a_path_outside_the_checkpoint_is_refused(run_copy, tmp_path, listed):
    newest = _newest(run_copy)
    target = tmp_path / "outside.txt" if listed.startswith("..") else newest / listed
    if listed.startswith("/"):
        target = type(tmp_path)(listed)
        if not target.is_file():
            pytest.skip(f"{listed} is absent here")
    elif not target.exists():
        target.write_text("planted")
    manifest = json.loads((newest / "manifest.json").read_text())
    data = target.read_bytes()
    manifest["files"][listed] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (newest / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"must list exactly the pieces of a checkpoint.*which are not"):
        check_checkpoint(newest)
    with pytest.raises(CheckpointError, match="must list exactly"):
        load_checkpoint_weights(newest)  # what averaging reads
    previous = list_checkpoints(run_copy / "checkpoints")[-2]
    assert find_resumable_checkpoint(run_copy / "checkpoints") == previous  # resume falls back to a sound one


def test_a_renamed_checkpoint_is_refused_for_resume_and_averaging(run_copy, run_cli):
    first, newest = list_checkpoints(run_copy / "checkpoints")
    renamed = first.with_name("checkpoint-00000100")
    first.rename(renamed)
    with pytest.raises(CheckpointError, match=r"holds the checkpoint of step \d+ .*not of step 100"):
        check_checkpoint(renamed)
    assert find_resumable_checkpoint(run_copy / "checkpoints") == newest
    status, _, err = run_cli("average", run_copy, "--last", 2, "--output", run_copy / "avg")
    assert status == 1 and "not of step 100" in err and not (run_copy / "avg").exists()


def test_a_checkpoint_of_another_run_is_refused_for_resume_and_averaging(run_copy, run_cli, tmp_path):
    other = shutil.copytree(run_copy, tmp_path / "other")
    # `other` is another run: its own id, written when it started; its checkpoint copied in from `run_copy`.
    (other / checkpoints.RUN_MARKER).write_text(uuid.uuid4().hex + "\n")
    with pytest.raises(CheckpointError, match="written by another run"):
        check_checkpoint(_newest(other))
    with pytest.raises(CheckpointError, match="no complete checkpoint to resume from"):
        find_resumable_checkpoint(other / "checkpoints")
    status, _, err = run_cli("average", other, "--output", other / "avg")
    assert status == 1 and "written by another run" in err and not (other / "avg").exists()
    # the same checkpoints in their own run are fine
    assert find_resumable_checkpoint(run_copy / "checkpoints") == _newest(run_copy)


def test_every_checkpoint_of_a_run_records_the_id_written_when_it_started(run_copy):
    run_id = (run_copy / checkpoints.RUN_MARKER).read_text().strip()
    assert len(run_id) == 32
    for checkpoint in list_checkpoints(run_copy / "checkpoints"):
        assert json.loads((checkpoint / "manifest.json").read_text())["run_id"] == run_id


def test_a_checkpoint_of_an_older_version_resumes_in_its_own_older_run(run_copy):
    """Runs written before run ids (manifest format 1, an empty marker file) still resume and average."""
    (run_copy / checkpoints.RUN_MARKER).write_text("")  # as older versions left it
    for checkpoint in list_checkpoints(run_copy / "checkpoints"):
        manifest = json.loads((checkpoint / "manifest.json").read_text())
        del manifest["run_id"]
        manifest["format"] = 1
        (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    assert find_resumable_checkpoint(run_copy / "checkpoints") == _newest(run_copy)
    load_checkpoint_weights(_newest(run_copy))


def test_loose_checkpoints_outside_any_run_still_average(run_copy, tmp_path):
    """A checkpoints folder copied out on its own has no run to match; it is averaged as before (library use)."""
    loose = shutil.copytree(run_copy / "checkpoints", tmp_path / "loose")
    assert find_resumable_checkpoint(loose) == list_checkpoints(loose)[-1]
    load_checkpoint_weights(list_checkpoints(loose)[-1])
