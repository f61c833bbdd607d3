"""The fault matrix: bad input, damaged files, interrupted runs and crafted checkpoints.

Every case must end in a clear error (its type, and a message naming the argument, file or line) or in the correct
result, never in a silent wrong one. Kept fast: tiny models, runs of a few steps.
"""

import json
import logging
import os
import re
import shutil
from pathlib import Path

import pytest
import torch
from test_training import same_weights, tiny_run
from tiny_model import load_script, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import read_lines, read_parallel_text
from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training.checkpoints import list_checkpoints, load_checkpoint_weights
from vanilla_transformer.training.state import CheckpointError
from vanilla_transformer.training.tracking import read_metrics
from vanilla_transformer.translation import paper_generation_config, translate, translate_ids

BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
"""Characters `str.splitlines` splits on besides \\n and \\r: inside a sentence they are text, not line ends."""


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model_dir(tiny_model_dir)


def small_model(**overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(0)
    return VanillaTransformerForConditionalGeneration(tiny_config(20, **overrides)).eval()


# --------------------------------------------------------------------------------------------------------------------
# Model configuration and inputs
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [("pad_token_id", -1), ("pad_token_id", 20), ("eos_token_id", 20), ("eos_token_id", [3, 25]),
     ("bos_token_id", 99), ("decoder_start_token_id", -2), ("pad_token_id", 1.5)],
)  # fmt: skip
def test_special_token_ids_outside_the_vocabulary_are_rejected(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be None or a token id in \[0, vocab_size=20\)"):
        tiny_config(20, **{name: value})
    assert getattr(tiny_config(20, **{name: None if name != "eos_token_id" else 19}), name) in (None, 19)


@pytest.mark.parametrize("shape", [(3,), (1, 3, 1)])
def test_padding_masks_of_the_wrong_rank_are_rejected(shape):
    ids = torch.tensor([[5, 6, 3]])
    with pytest.raises(ValueError, match=re.escape(f"attention_mask has shape {shape}: expected a 2D padding mask")):
        small_model()(input_ids=ids, attention_mask=torch.ones(shape), decoder_input_ids=ids)
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape"):
        small_model()(input_ids=ids, decoder_input_ids=ids, decoder_attention_mask=torch.ones(shape))


@pytest.mark.parametrize("shape", [(0, 3), (2, 0)])
def test_empty_batches_and_sequences_are_named_in_forward_and_generate(shape):
    model, empty = small_model(), torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape(f"input_ids has shape {shape}: expected (batch_size, length)")):
        model(input_ids=empty, decoder_input_ids=torch.zeros(shape[0], 1, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(f"input_ids has shape {shape}")):
        model.generate(empty, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"decoder_input_ids has shape \(1, 0\)"):
        model(input_ids=torch.tensor([[5, 3]]), decoder_input_ids=torch.zeros(1, 0, dtype=torch.long))


def test_beam_search_of_no_sentences_is_empty_and_of_empty_sentences_an_error():
    output = translate_ids(small_model(), torch.zeros(0, 4, dtype=torch.long))
    assert output.shape == (0, 1)
    with pytest.raises(ValueError, match=r"input_ids has shape \(2, 0\)"):
        translate_ids(small_model(), torch.zeros(2, 0, dtype=torch.long))


def test_bad_label_ids_are_reported_as_labels():
    ids = torch.tensor([[5, 6, 3]])
    with pytest.raises(ValueError, match=r"labels contains token id 20, outside \[0, vocab_size=20\)"):
        small_model()(input_ids=ids, labels=torch.tensor([[5, 20, -100]]))
    with pytest.raises(ValueError, match=r"labels contains token id -5"):
        small_model()(input_ids=ids, labels=torch.tensor([[5, -5, 3]]))
    assert small_model()(input_ids=ids, labels=torch.tensor([[5, 3, -100]])).loss.isfinite()


@pytest.mark.parametrize(
    "arguments, message",
    [(dict(length_penalty=float("nan")), "length_penalty must be finite"),
     (dict(length_penalty=float("inf")), "length_penalty must be finite"),
     (dict(length_penalty=-0.5), "length_penalty must be finite and non-negative"),
     (dict(max_length_offset=-1), "max_length_offset must be non-negative, got max_length_offset=-1"),
     (dict(num_beams=0), "num_beams must be at least 1")],
)  # fmt: skip
def test_beam_search_rejects_arguments_that_give_garbage(arguments, message):
    with pytest.raises(ValueError, match=message):
        translate_ids(small_model(), torch.tensor([[5, 6, 3]]), **arguments)


BAD_SEARCHES = [
    (dict(length_penalty=float("nan")), "length_penalty must be finite and non-negative, got length_penalty=nan"),
    (dict(length_penalty=float("inf")), "length_penalty must be finite and non-negative, got length_penalty=inf"),
    (dict(length_penalty=-0.5), "length_penalty must be finite and non-negative, got length_penalty=-0.5"),
    (dict(length_penalty="0.6"), "length_penalty must be a number, got length_penalty='0.6'"),
    (dict(max_length_offset=-1), "max_length_offset must be non-negative, got max_length_offset=-1"),
    (dict(max_length_offset=2.5), "max_length_offset must be an integer, got max_length_offset=2.5"),
    (dict(num_beams=0), "num_beams must be at least 1, got num_beams=0"),
    (dict(num_beams=-2), "num_beams must be at least 1, got num_beams=-2"),
    (dict(num_beams="4"), "num_beams must be an integer, got num_beams='4'"),
    (dict(num_beams=4.0), "num_beams must be an integer, got num_beams=4.0"),
    (dict(num_beams=True), "num_beams must be an integer, got num_beams=True"),
]
"""Search settings that cannot work, and the error each must raise: a NaN alpha changes the output, a negative one
or a negative offset cuts it short, beams < 1 crash deep inside generate (ZeroDivisionError, "negative dimension"),
and a string from a hand-edited JSON file raises a TypeError there."""


@pytest.mark.parametrize("arguments, message", BAD_SEARCHES)
def test_paper_generation_config_and_translate_refuse_a_search_that_cannot_work(
    arguments, message, model_and_tokenizer, monkeypatch
):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match=re.escape(message)):
        paper_generation_config(model.config, **arguments)
    monkeypatch.setattr(model, "generate", lambda *a, **k: pytest.fail("decoded with a bad search setting"))
    for sentences in (["seven", "three hundred"], []):  # refused before decoding, even with nothing to decode
        with pytest.raises(ValueError, match=re.escape(message)):
            translate(model, tokenizer, sentences, **arguments)


def test_the_smallest_valid_search_settings_translate(model_and_tokenizer):
    """Beam 1, alpha 0 and offset 0 are the edges of what is allowed, not errors."""
    model, tokenizer = model_and_tokenizer
    edge = dict(num_beams=1, length_penalty=0, max_length_offset=0)
    assert paper_generation_config(model.config, **edge).num_beams == 1
    assert len(translate(model, tokenizer, ["seven", "three hundred"], **edge)) == 2


def test_beam_search_rejects_left_padding():
    ids, mask = torch.tensor([[5, 6, 3], [0, 7, 3]]), torch.tensor([[1, 1, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match="attention_mask is not right-padded"):
        translate_ids(small_model(), ids, mask)


# --------------------------------------------------------------------------------------------------------------------
# Translation: line splitting, padding side, over-long lines, wrong directories
# --------------------------------------------------------------------------------------------------------------------


def test_translate_and_evaluate_split_lines_on_newline_only(tiny_model_dir, model_and_tokenizer, tmp_path, capsys):
    sources = ["one hundred", f"two{BREAKS[0]}hundred {''.join(BREAKS[1:])}seven", "three"]
    source = tmp_path / "source.en"
    source.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    assert read_lines(source) == sources
    output = tmp_path / "output.de"
    assert (
        load_script("translate").main(
            ["--model", str(tiny_model_dir), "--input", str(source), "--output", str(output)]
        )
        == 0
    )
    model, tokenizer = model_and_tokenizer
    expected = [translate(model, tokenizer, [line])[0] for line in sources]  # each line on its own
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    # evaluate: a hypothesis file with the same characters keeps its line count, and so its alignment.
    reference = tmp_path / "reference.de"
    reference.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    assert load_script("evaluate").main(["--hypotheses", str(source), "--reference", str(reference)]) == 0
    assert "exact match = 100.00%" in capsys.readouterr().out


def test_translate_pads_right_whatever_the_tokenizers_padding_side(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sentences = ["seven", "three hundred and twelve", "forty-one", "nine hundred and ninety-nine", "a hundred"]
    alone = [translate(model, tokenizer, [sentence])[0] for sentence in sentences]
    side = tokenizer.padding_side
    try:
        tokenizer.padding_side = "left"
        assert translate(model, tokenizer, sentences, batch_size=5) == alone
    finally:
        tokenizer.padding_side = side


def test_pipeline_pads_right_and_passes_the_mask(tiny_model_dir, tmp_path):
    from transformers import pipeline

    from vanilla_transformer.model_dir import add_pipeline_support

    shutil.copytree(tiny_model_dir, tmp_path / "model")
    add_pipeline_support(tmp_path / "model")
    translator = pipeline("translation", model=str(tmp_path / "model"), trust_remote_code=True)
    sentences = ["seven", "three hundred and twelve", "forty-one", "nine hundred and ninety-nine", "a hundred"]
    alone = [translator(sentence)[0]["translation_text"] for sentence in sentences]
    translator.tokenizer.padding_side = "left"
    batched = [result["translation_text"] for result in translator(sentences, batch_size=5)]
    assert batched == alone


def test_an_over_long_line_is_named_before_any_translation(model_and_tokenizer, monkeypatch):
    model, tokenizer = model_and_tokenizer
    long_line = " ".join(["seven"] * 200)  # more tokens than max_position_embeddings=64
    calls = []
    monkeypatch.setattr("vanilla_transformer.translation.translate_ids", lambda *a, **k: calls.append(1))
    with pytest.raises(
        ValueError, match=r"sentence 2 has \d+ tokens, more than the model's max_position_embeddings=64"
    ):
        translate(model, tokenizer, ["one", long_line, "two"])
    assert not calls


def test_a_run_directory_given_as_the_model_is_named(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "model")
    with pytest.raises(FileNotFoundError, match=r"is a training run directory, not a model directory: pass .*model"):
        load_model_dir(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match=r"holds no config.json"):
        load_model_dir(tmp_path)
    translate_script = load_script("translate")
    (tmp_path / "source.en").write_text("seven\n", encoding="utf-8")
    for decoder in ([], ["--ctranslate2", str(tmp_path / "ct2")]):
        with pytest.raises(FileNotFoundError, match=r"is a training run directory"):
            translate_script.main(["--model", str(tmp_path / "run"), "--input", str(tmp_path / "source.en"), *decoder])


def test_evaluate_checks_line_counts_before_translating(tiny_model_dir, tmp_path, monkeypatch):
    source, reference = tmp_path / "source.en", tmp_path / "reference.de"
    source.write_text("one\ntwo\nthree\n", encoding="utf-8")
    reference.write_text("eins\nzwei\n", encoding="utf-8")
    evaluate = load_script("evaluate")
    monkeypatch.setattr(evaluate, "translate_with_options", lambda *a, **k: pytest.fail("translated before checking"))
    with pytest.raises(ValueError, match=r"--source=.*source.en has 3 lines but --reference=.*reference.de has 2"):
        evaluate.main(["--model", str(tiny_model_dir), "--source", str(source), "--reference", str(reference)])
    with pytest.raises(ValueError, match=r"--hypotheses=.*source.en has 3 lines"):
        evaluate.main(["--hypotheses", str(source), "--reference", str(reference)])


def test_non_utf8_text_is_named_with_its_file_and_line(tmp_path):
    (tmp_path / "a.en").write_bytes("one\ntwo\nd\xe9j\xe0\n".encode("latin-1"))
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a.en:3: not UTF-8 text"):
        read_parallel_text(tmp_path / "a.en", tmp_path / "a.de")


# --------------------------------------------------------------------------------------------------------------------
# Training data and the run directory
# --------------------------------------------------------------------------------------------------------------------


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
