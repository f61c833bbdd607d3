"""Sizes a file or an option declares are checked before anything is allocated (issue 45, causes 3 and 4): a
config.json declaring more layers than its weights hold, positions or a model that memory cannot hold, a run's
training_config.json declaring a model too large to train, a beam (from --num-beams or generation_config.json) whose
search memory cannot hold, and an input of long lines, which the tokenizer would hold whole: each is one line naming
the setting, in a real process whose memory is capped, long before the allocator would fail."""

import json
import shutil

import pytest
from fault_support import run_capped

TIMEOUT = 120  # seconds: a check before allocation answers in the time torch takes to load


def _one_line(completed, *expected):
    err = completed.stderr.decode(errors="replace")
    assert completed.returncode == 1, err[-2000:]
    assert "Traceback" not in err and "memory allocation" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip() and "%|" not in line]  # progress bars aside
    assert len(lines) == 1 and all(text in lines[0] for text in expected), err[-2000:]


def _edit(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _translate(model, tmp_path, *options, text="zwei drei\n"):
    source = tmp_path / "in.txt"
    source.write_text(text)
    return run_capped("translate", "--model", model, "--input", source, *options, timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"decoder_layers": 10**5}, "decoder_layers=100,000"),
        ({"encoder_layers": 10**5}, "encoder_layers=100,000"),
        ({"max_position_embeddings": 10**9}, "max_position_embeddings=1,000,000,000"),
        ({"vocab_size": 10**9}, "vocab_size=1,000,000,000"),  # a model of 128 GB
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else None,
)
def test_a_config_declaring_sizes_its_weights_or_memory_cannot_hold_is_named(model_copy, tmp_path, change, named):
    _edit(model_copy / "config.json", **change)
    _one_line(_translate(model_copy, tmp_path), str(model_copy / "config.json"), named)


def test_a_run_declaring_a_model_too_large_to_train_is_named(tiny_run_dir, tmp_path):
    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    _edit(run / "training_config.json", layers=10**7)
    completed = run_capped("train", "--output-dir", run, "--resume", timeout=TIMEOUT)
    _one_line(completed, "training_config.json", "decoder_layers=10,000,000")


def test_a_beam_from_the_command_line_that_memory_cannot_hold_is_named(tiny_model_dir, tmp_path):
    _one_line(_translate(tiny_model_dir, tmp_path, "--num-beams", "100000000"), "num_beams=100,000,000")


def test_a_beam_from_generation_config_that_memory_cannot_hold_is_named(model_copy, tmp_path):
    _edit(model_copy / "generation_config.json", num_beams=10**8, length_penalty_type="gnmt")  # as train writes it
    _one_line(_translate(model_copy, tmp_path), "num_beams=100,000,000")


def test_long_lines_within_the_line_limit_are_refused_before_the_tokenizer_holds_them(tiny_model_dir, tmp_path):
    line = "zwei drei " * 100_000  # 1 MB, within the 1 MiB of a line
    completed = _translate(tiny_model_dir, tmp_path, text=(line + "\n") * 200)
    _one_line(completed, "sentence 1 has", "max_position_embeddings=")
