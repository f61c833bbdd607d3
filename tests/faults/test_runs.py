"""Faults of training runs: bad training data, --overwrite, interrupted runs, damaged and crafted checkpoints.

Every case must end in a clear error (its type, and a message naming the argument, file or line) or in the correct
result, never in a silent wrong one. Kept fast: tiny models, runs of a few steps.
"""

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
import torch
from training_helpers import same_weights, tiny_run

from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training.checkpoints import list_checkpoints, load_checkpoint_weights
from vanilla_transformer.training.state import CheckpointError
from vanilla_transformer.training.tracking import read_metrics


def aligned_files(directory: Path, train_en: str, train_de: str) -> list[str]:
    """Options naming aligned files: the given training text, and one-line validation and test sets."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in (("train.en", train_en), ("train.de", train_de), ("small.en", "one\n"), ("small.de", "eins\n")):
        (directory / name).write_text(text, encoding="utf-8")
    return ["--train-src", str(directory / "train.en"), "--train-tgt", str(directory / "train.de"),
            "--valid-src", str(directory / "small.en"), "--valid-tgt", str(directory / "small.de"),
            "--test-src", str(directory / "small.en"), "--test-tgt", str(directory / "small.de")]  # fmt: skip


def test_empty_training_data_is_named(tmp_path):
    files = aligned_files(tmp_path / "data", "", "")
    with pytest.raises(ValueError, match=r"no training pairs: --train-src=.*train.en and --train-tgt=.* is empty"):
        train(tiny_run(tmp_path / "run", *files))


def test_training_pairs_all_too_long_name_max_length(tmp_path):
    long_en, long_de = " ".join(["seven hundred"] * 30), " ".join(["siebenhundert"] * 30)
    files = aligned_files(tmp_path / "data", f"{long_en}\n" * 40, f"{long_de}\n" * 40)
    with pytest.raises(ValueError, match=r"none of the 40 training pairs .* within --max-length=8 tokens"):
        train(tiny_run(tmp_path / "run", *files, "--max-length", "8"))


def test_overwrite_refuses_a_folder_holding_no_run(tmp_path):
    folder = tmp_path / "home"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work")
    for options in ([], ["--overwrite"]):
        with pytest.raises(ValueError, match=r"is not empty and holds no run of this program"):
            train(tiny_run(folder, *options))
    assert [path.name for path in folder.iterdir()] == ["thesis.tex"]


def test_a_finished_run_survives_an_overwrite_that_fails_its_checks(tmp_path):
    run = tmp_path / "run"
    train(tiny_run(run, "--max-steps", "3"))
    before = sorted(path.name for path in run.iterdir())
    with pytest.raises(FileNotFoundError, match="--data-dir="):
        train(tiny_run(run, "--overwrite", "--dataset", "text", "--data-dir", str(tmp_path / "nowhere")))
    assert sorted(path.name for path in run.iterdir()) == before
    assert [path.name for path in list_checkpoints(run / "checkpoints")] == ["checkpoint-00000003"]


def test_overwrite_deletes_the_run_and_keeps_what_it_did_not_write(tmp_path, caplog):
    run = tmp_path / "run"
    train(tiny_run(run, "--max-steps", "3"))
    (run / "notes.txt").write_text("mine")
    (run / "average-notes.txt").write_text("mine too")  # named like an average, but not what average_run writes
    (run / "average-3").mkdir()  # what average_run writes
    with caplog.at_level(logging.WARNING):
        results = train(tiny_run(run, "--overwrite", "--max-steps", "2", "--save-every", "2"))
    assert results["step"] == 2
    assert (run / "notes.txt").read_text() == "mine" and "notes.txt" in caplog.text
    assert (run / "average-notes.txt").read_text() == "mine too" and not (run / "average-3").exists()
    assert [path.name for path in list_checkpoints(run / "checkpoints")] == ["checkpoint-00000002"]


def test_a_run_that_failed_at_start_up_does_not_block_the_corrected_command(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ValueError, match="no training pairs"):
        train(tiny_run(run, *aligned_files(tmp_path / "empty", "", "")))
    assert not (run / "training_config.json").exists()
    # Fails after its tokenizer was trained (into the data cache): that tokenizer must not be reused.
    long_en, long_de = " ".join(["seven hundred"] * 30), " ".join(["siebenhundert"] * 30)
    cache = Path(os.environ["VANILLA_TRANSFORMER_CACHE"])
    cached_before = set(cache.glob("tokenizer-*"))
    with pytest.raises(ValueError, match="--max-length=8"):
        train(
            tiny_run(
                run, *aligned_files(tmp_path / "long", f"{long_en}\n" * 40, f"{long_de}\n" * 40), "--max-length", "8"
            )
        )
    assert not (run / "training_config.json").exists()
    (failed,) = set(cache.glob("tokenizer-*")) - cached_before
    failed_tokenizer = (failed / "tokenizer.json").read_text()
    results = train(tiny_run(run, "--max-steps", "2", "--save-every", "2"))  # no --overwrite needed
    assert results["step"] == 2 and (run / "training_config.json").is_file()
    assert (run / "tokenizer" / "tokenizer.json").read_text() != failed_tokenizer


def test_a_cut_last_line_of_metrics_jsonl_does_not_block_resume(tmp_path):
    run = tmp_path / "run"
    train(tiny_run(run, "--max-steps", "3"))
    with (run / "metrics.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"step": 4, "train_lo')  # killed while logging
    assert train(parse_args(["--resume", "--output-dir", str(run), "--max-steps", "4"]))["step"] == 4
    assert [row["step"] for row in read_metrics(run / "metrics.jsonl") if "train_loss" in row] == [1, 2, 3, 4]
    lines = (run / "metrics.jsonl").read_text().split("\n")
    (run / "metrics.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]))
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON line of metrics"):
        read_metrics(run / "metrics.jsonl")


# --------------------------------------------------------------------------------------------------------------------
# Killed runs, and checkpoints with missing or damaged pieces
# --------------------------------------------------------------------------------------------------------------------


class Killed(Exception):
    """Stands for the process being killed."""


@pytest.fixture(scope="module")
def reference_run(tiny_run_dir) -> Path:
    """An uninterrupted tiny run of 8 steps with dropout; checkpoints 3, 6 and 8, the last 2 kept."""
    return tiny_run_dir


def killed_after(monkeypatch, steps: int, output_dir: Path) -> None:
    """Run the tiny run, killed during optimizer step `steps` + 1 (whatever the training loop looks like)."""
    taken, step = [0], torch.optim.Adam.step

    def counting_step(self, *args, **kwargs):
        if taken[0] == steps:
            raise Killed
        taken[0] += 1
        return step(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(torch.optim.Adam, "step", counting_step)
        with pytest.raises(Killed):
            train(tiny_run(output_dir))


def remove(file: Path) -> None:
    file.unlink()


def truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def flip_a_byte(file: Path) -> None:
    data = bytearray(file.read_bytes())
    data[-10] ^= 0xFF
    file.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "piece, damage",
    [("rng-0.safetensors", remove), ("training_state.safetensors", truncate), ("manifest.json", remove),
     ("model.safetensors", flip_a_byte), ("training_state.safetensors", flip_a_byte)],
)  # fmt: skip
def test_a_damaged_last_checkpoint_falls_back_to_the_previous_one_exactly(
    reference_run, tmp_path, monkeypatch, caplog, piece, damage
):
    run = tmp_path / "run"
    killed_after(monkeypatch, 7, run)  # checkpoints 3 and 6 written
    assert [path.name for path in list_checkpoints(run / "checkpoints")] == [
        "checkpoint-00000003",
        "checkpoint-00000006",
    ]
    damage(run / "checkpoints" / "checkpoint-00000006" / piece)
    with caplog.at_level(logging.WARNING):
        train(parse_args(["--resume", "--output-dir", str(run)]))
    assert "checkpoint-00000006" in caplog.text and piece in caplog.text and "falling back" in caplog.text
    assert (run / "checkpoints" / "damaged-checkpoint-00000006").is_dir()  # set aside, not deleted
    for name in ("checkpoint-00000006", "checkpoint-00000008"):
        assert same_weights(
            load_checkpoint_weights(run / "checkpoints" / name),
            load_checkpoint_weights(reference_run / "checkpoints" / name),
        )


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start_exactly(reference_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    killed_after(monkeypatch, 2, run)
    assert list_checkpoints(run / "checkpoints") == []
    train(parse_args(["--resume", "--output-dir", str(run)]))
    assert same_weights(
        load_checkpoint_weights(run / "checkpoints" / "checkpoint-00000008"),
        load_checkpoint_weights(reference_run / "checkpoints" / "checkpoint-00000008"),
    )


def test_no_complete_checkpoint_is_an_error_not_a_fresh_start(tmp_path, monkeypatch):
    run = tmp_path / "run"
    killed_after(monkeypatch, 7, run)
    remove(run / "checkpoints" / "checkpoint-00000003" / "rng-0.safetensors")
    truncate(run / "checkpoints" / "checkpoint-00000006" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"no complete checkpoint to resume from .*rng-0.safetensors is missing"):
        train(parse_args(["--resume", "--output-dir", str(run)]))
    assert len(list_checkpoints(run / "checkpoints")) == 2  # nothing deleted


def test_averaging_a_damaged_checkpoint_fails_naming_it(reference_run, tmp_path):
    from vanilla_transformer.training.checkpoints import average_checkpoints

    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(reference_run / "checkpoints", checkpoints)
    flip_a_byte(checkpoints / "checkpoint-00000008" / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"checkpoint-00000008.model.safetensors is damaged"):
        average_checkpoints(list_checkpoints(checkpoints))


# --------------------------------------------------------------------------------------------------------------------
# Loading a checkpoint runs no code
# --------------------------------------------------------------------------------------------------------------------


class Payload:
    """Unpickling this writes a file: what a crafted checkpoint could do instead (delete, upload, install)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",)


def test_the_crafted_payload_runs_when_unpickled(tmp_path):
    """The control: loading the crafted file with pickle does run its code, so the tests below can fail."""
    crafted, marker = tmp_path / "crafted.pkl", tmp_path / "marker"
    torch.save(Payload(marker), crafted)  # as Accelerate's save_state writes its pieces
    torch.load(crafted, weights_only=False)  # as Accelerate's load_state reads them
    assert marker.read_text() == "code ran"


def test_resume_ignores_pickle_files_planted_in_a_checkpoint(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "marker"
    train(tiny_run(run, "--max-steps", "3"))
    checkpoint = run / "checkpoints" / "checkpoint-00000003"
    # Every name Accelerate's load_state unpickles.
    for name in ("custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl", "optimizer.bin",
                 "scheduler.bin", "scaler.pt", "pytorch_model.bin"):  # fmt: skip
        torch.save(Payload(marker), checkpoint / name)
    assert train(parse_args(["--resume", "--output-dir", str(run), "--max-steps", "4"]))["step"] == 4
    assert not marker.exists()


def test_a_checkpoint_piece_replaced_by_a_pickle_fails_to_load_and_runs_nothing(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "marker"
    train(tiny_run(run, "--max-steps", "3"))
    checkpoint = run / "checkpoints" / "checkpoint-00000003"
    torch.save(Payload(marker), checkpoint / "training_state.safetensors")
    crafted = (checkpoint / "training_state.safetensors").read_bytes()
    # The attacker rewrites the manifest too, so the file passes the size and hash check.
    import hashlib

    manifest = json.loads((checkpoint / "manifest.json").read_text())
    manifest["files"]["training_state.safetensors"] = {
        "bytes": len(crafted),
        "sha256": hashlib.sha256(crafted).hexdigest(),
    }
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=r"training_state.safetensors is damaged: not a training state file"):
        train(parse_args(["--resume", "--output-dir", str(run), "--max-steps", "4"]))
    assert not marker.exists()


def test_a_pickled_checkpoint_of_an_older_version_is_refused(tmp_path):
    run, marker = tmp_path / "run", tmp_path / "marker"
    train(tiny_run(run, "--max-steps", "3"))
    checkpoint = run / "checkpoints" / "checkpoint-00000003"
    for name in ("manifest.json", "training_state.safetensors", "rng-0.safetensors"):
        (checkpoint / name).unlink()
    for name in ("optimizer.bin", "custom_checkpoint_0.pkl", "custom_checkpoint_1.pkl", "random_states_0.pkl"):
        torch.save(Payload(marker), checkpoint / name)
    with pytest.raises(CheckpointError, match=r"written by an older version with pickle"):
        train(parse_args(["--resume", "--output-dir", str(run), "--max-steps", "4"]))
    assert not marker.exists()


def _contents(run: Path) -> dict[str, bytes]:
    return {str(path.relative_to(run)): path.read_bytes() for path in sorted(run.rglob("*")) if path.is_file()}


def test_resume_on_a_finished_run_says_so_in_one_line_and_rewrites_nothing(tiny_run_dir, tmp_path, run_cli):
    """Issue 67: before, ``train --resume`` on a finished run averaged and tested it again and replaced its
    results.json (its seconds, its throughput, its command); now it says the run is finished, exits 0 and leaves
    every file byte for byte; ``--finish-again`` is how to average and test again."""
    run = Path(shutil.copytree(tiny_run_dir, tmp_path / "run"))
    before = _contents(run)
    status, out, err = run_cli("train", "--resume", "--output-dir", run)
    assert status == 0, err
    assert len(out.splitlines()) == 1 and out.startswith(f"{run} is a finished run (step 8, --max-steps=8 reached"), (
        out
    )
    assert "--finish-again" in out and err == "", err
    assert _contents(run) == before
    old = json.loads((run / "results.json").read_text())
    status, out, err = run_cli("train", "--resume", "--finish-again", "--output-dir", run)
    assert status == 0, err
    new = json.loads((run / "results.json").read_text())
    assert new["step"] == old["step"] == 8 and new["seconds"] != old["seconds"]
    assert json.loads((run / "training_config.json").read_text())["finish_again"] is False  # asked once, not kept
    status, _, err = run_cli("train", "--finish-again", "--output-dir", tmp_path / "new")
    assert status == 1 and "--finish-again redoes the end of a finished run: pass it with --resume" in err, err
