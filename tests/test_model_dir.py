"""The one save and load of a model directory: what it writes, what it loads, and the errors that name the path."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from tiny_model import SPLITS, tiny_config
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.model_dir import load_model_dir, save_model_dir
from vanilla_transformer.model_summary import SUMMARY_FILE
from vanilla_transformer.serving.search import paper_generation_config


@pytest.fixture(scope="module")
def saved(tiny_model_dir, tmp_path_factory):
    """The tiny model saved anew by save_model_dir, with the paper's generation config and a summary."""
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    directory = tmp_path_factory.mktemp("model-dir") / "model"
    generation = paper_generation_config(model.config, num_beams=3, max_new_tokens=30)
    save_model_dir(model, tokenizer, directory, generation_config=generation, summary={"steps": 80, "bleu": None})
    return directory


def test_save_writes_weights_code_generation_config_tokenizer_and_summary(saved, tiny_model_dir):
    names = {path.name for path in saved.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json", SUMMARY_FILE} <= names
    assert {"modeling_vanilla_transformer.py", "configuration_vanilla_transformer.py"} <= names
    assert "pipeline_vanilla_transformer.py" in names
    assert json.loads((saved / "config.json").read_text())["custom_pipelines"].keys() == {
        "translation",
        "text2text-generation",
    }
    assert json.loads((saved / SUMMARY_FILE).read_text()) == {"steps": 80}  # None values left out
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(saved / "model.safetensors")
    assert before.keys() == after.keys() and all(torch.equal(before[key], after[key]) for key in before)


def test_load_gives_the_model_in_eval_mode_with_its_generation_config(saved):
    model, tokenizer = load_model_dir(saved)
    assert isinstance(model, VanillaTransformerForConditionalGeneration) and not model.training
    assert (model.generation_config.num_beams, model.generation_config.max_new_tokens) == (3, 30)
    assert tokenizer.decode(tokenizer(SPLITS.valid[0][0])["input_ids"], skip_special_tokens=True) == SPLITS.valid[0][0]


def test_tokenizer_truncates_to_the_models_positions(saved):
    """model_max_length is max_position_embeddings: truncation=True cuts an over-long input to what the model takes,
    and the model then runs on it."""
    model, tokenizer = load_model_dir(saved)
    limit = model.config.max_position_embeddings
    assert AutoTokenizer.from_pretrained(saved).model_max_length == limit == tiny_config().max_position_embeddings
    long_text = " ".join([SPLITS.train[0][0]] * 40)
    assert len(tokenizer(long_text)["input_ids"]) > limit
    encoded = tokenizer([long_text], truncation=True, return_tensors="pt")
    assert encoded["input_ids"].shape[1] == limit and encoded["input_ids"][0, -1] == tokenizer.eos_token_id
    with torch.no_grad():
        model.generate(**encoded, max_new_tokens=3, num_beams=1)


def test_a_run_folder_or_a_missing_path_is_named(tiny_run_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match=rf"{tiny_run_dir} is a training run directory.*pass .*model"):
        load_model_dir(tiny_run_dir)
    with pytest.raises(FileNotFoundError, match="no model directory at .*nowhere"):
        load_model_dir(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(
        FileNotFoundError, match="empty holds no config.json: it is not a Hugging Face model directory"
    ):
        load_model_dir(tmp_path / "empty")


def test_every_command_taking_a_model_names_the_run_folders_model(tiny_run_dir, tmp_path):
    """push, export-ctranslate2 and export-marian, given a training run's folder, name <run>/model."""
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.export.ctranslate2 import export_ctranslate2
    from vanilla_transformer.export.hub import prepare_upload_folder
    from vanilla_transformer.export.marian import export_marian

    calls = [
        lambda: prepare_upload_folder(tiny_run_dir, tmp_path / "upload", repo_id="org/m"),
        lambda: export_ctranslate2(tiny_run_dir, tmp_path / "ct2"),
        lambda: export_marian(tiny_run_dir, tmp_path / "marian"),
    ]
    for call in calls:
        with pytest.raises(FileNotFoundError, match=rf"is a training run directory.*pass {tiny_run_dir / 'model'}"):
            call()
    assert not any(tmp_path.iterdir())  # nothing written


def test_load_names_a_missing_tokenizer_or_a_mismatch(saved, tmp_path):
    no_tokenizer = tmp_path / "model-only"
    shutil.copytree(saved, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(ValueError, match=r"'.*model-only' has no loadable tokenizer"):
        load_model_dir(no_tokenizer)
    other = tmp_path / "other-vocabulary"
    shutil.copytree(saved, other)
    VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=41)).save_pretrained(other)
    with pytest.raises(ValueError, match="vocab"):
        load_model_dir(other)


def test_a_small_model_loads_and_saves_without_progress_bars(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """Issue 67: every command drew transformers' "Loading weights" bar, even for a model that loads in a blink; a
    model over `QUICK_WEIGHTS_BYTES` (here: set to 0) still gets its bars, and the switch is as it was after."""
    from transformers.utils import logging as transformers_logging

    model, tokenizer = load_model_dir(tiny_model_dir)
    save_model_dir(model, tokenizer, tmp_path / "copy")
    err = capsys.readouterr().err
    assert "Loading weights" not in err and "Writing model shards" not in err, err
    assert transformers_logging.is_progress_bar_enabled()
    from vanilla_transformer import progress_bars

    monkeypatch.setattr(progress_bars, "QUICK_WEIGHTS_BYTES", 0)
    model, tokenizer = load_model_dir(tiny_model_dir)
    assert "Loading weights" in capsys.readouterr().err
