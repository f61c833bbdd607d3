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
    completed = run_capped("train", "--output-dir", run, "--resume", "--finish-again", timeout=TIMEOUT)
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


@pytest.fixture(scope="module")
def tiny_model(tiny_model_dir):
    from vanilla_transformer.model_dir import load_model_dir

    return load_model_dir(tiny_model_dir)


def test_generate_from_inputs_embeds_checks_the_beams_memory_before_transformers_repeats_them(tiny_model):
    """An embedded source stands for its ids: the beams' memory is checked for it as for input_ids (issue 56, cause
    6), before transformers copies the embeddings for each of 10^9 beams."""
    model, tokenizer = tiny_model
    batch = tokenizer(["zwei drei"], return_tensors="pt")
    embeds = model.get_encoder().embed_tokens(batch.input_ids)
    with pytest.raises(ValueError, match=r"num_beams=1,000,000,000 hypotheses"):
        model.generate(inputs_embeds=embeds, attention_mask=batch.attention_mask, num_beams=10**9)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_a_max_new_tokens_transformers_would_reserve_beyond_memory_is_refused_naming_it(tiny_model, num_beams):
    """transformers' search reserves its whole length for every hypothesis before its first step: 10^12 new tokens
    would be terabytes. A length beyond the model's positions that memory cannot hold is refused, naming the
    argument and the most the model generates."""
    model, tokenizer = tiny_model
    positions = model.config.max_position_embeddings
    batch = tokenizer(["zwei drei"], return_tensors="pt")
    with pytest.raises(ValueError, match=rf"max_new_tokens=1,000,000,000,000 .* at most {positions}"):
        model.generate(**batch, num_beams=num_beams, max_new_tokens=10**12)
