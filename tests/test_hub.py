"""Hub sharing: the folder scripts/push_to_hub.py uploads, its model card (read back with huggingface_hub's own
parser), the upload calls, and loading the folder from a Hub cache where the package is not installed."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

import vanilla_transformer.hub as hub
from tiny_model import SPLITS, load_script, saved_model_dir
from vanilla_transformer import VanillaTransformerForConditionalGeneration

REPO_ID = "org/tiny-numbers"
TEMPLATE = Path(__file__).resolve().parents[1] / "model_card.md"
SUMMARY = {
    "dataset": "numbers",
    "src_lang": "en",
    "tgt_lang": "de",
    "train_pairs": 240,
    "eval_split": "valid",
    "steps": 80,
    "epochs": 10.5,
    "train_hours": 0.01,
    "hardware": "1 CPU core",
    "bleu": 12.3456,
    "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
    "chrf": 45.678,
    "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0",
    "exact_match": 25.0,
    "recipe": {"optimizer": "Adam", "learning_rate": 0.003, "batch_size": 32},
    "notes": "Trained for the tests only.",
    "key_the_card_does_not_use": 1,
}
UPLOADED_FILES = {
    "README.md",
    "config.json",
    "configuration_vanilla_transformer.py",
    "generation_config.json",
    "generation_vanilla_transformer.py",
    "model.safetensors",
    "modeling_vanilla_transformer.py",
    "pipeline_vanilla_transformer.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "training_summary.json",
}
SOURCES = [source for source, _ in SPLITS.valid[:3]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hub") / "run"
    shutil.copytree(saved_model_dir(tmp_path_factory), directory)
    (directory / "training_summary.json").write_text(json.dumps(SUMMARY))
    return directory


@pytest.fixture(scope="module")
def dry_run(model_dir):
    folder = model_dir.parent / "upload"
    assert load_script("push_to_hub").main([str(model_dir), REPO_ID, "--dry-run", str(folder)]) == 0
    return folder


def test_dry_run_folder_holds_the_model_code_tokenizer_and_card(dry_run, model_dir):
    assert {path.name for path in dry_run.iterdir()} == UPLOADED_FILES
    config = json.loads((dry_run / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
        "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    }
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_vanilla_transformer.TranslationPipeline"
    assert GenerationConfig.from_pretrained(dry_run).num_beams == 4
    saved, uploaded = load_file(model_dir / "model.safetensors"), load_file(dry_run / "model.safetensors")
    assert saved.keys() == uploaded.keys() and all(torch.equal(saved[key], uploaded[key]) for key in saved)
    assert json.loads((dry_run / "training_summary.json").read_text()) == SUMMARY


def test_model_card_metadata_and_figures(dry_run):
    card = ModelCard.load(dry_run / "README.md")
    metadata = card.data.to_dict()
    assert {key: metadata[key] for key in ("license", "language", "datasets", "pipeline_tag", "library_name")} == {
        "license": "apache-2.0",
        "language": ["en", "de"],
        "datasets": ["numbers"],
        "pipeline_tag": "translation",
        "library_name": "transformers",
    }
    assert "translation" in metadata["tags"]
    assert card.data.model_name == "tiny-numbers"
    results = {result.metric_type: result for result in card.data.eval_results}
    assert {metric: result.metric_value for metric, result in results.items()} == {
        "bleu": 12.35,
        "chrf": 45.68,
        "exact_match": 25.0,
    }
    assert {(result.task_type, result.dataset_type, result.dataset_name) for result in results.values()} == {
        ("translation", "numbers", "numbers")
    }

    text = card.text
    parameters = sum(tensor.numel() for tensor in load_file(dry_run / "model.safetensors").values())
    for expected in (
        "# tiny-numbers",
        'pipeline("translation", model="org/tiny-numbers", trust_remote_code=True)',
        f"| Parameters | {parameters:,} |",
        "| BLEU | 12.35 |",
        "| chrF | 45.68 |",
        f"- BLEU signature: `{SUMMARY['signature']}`",
        "Scores on **valid**",
        "- Optimizer steps: 80 (10.50 epochs)",
        "| `learning_rate` | 0.003 |",
        "beam size 4",
        "Trained for the tests only.",
        "- Initialisation: none: trained from scratch",
        "- Corpus: numbers (configuration: not recorded)",
    ):
        assert expected in text, expected
    assert "{{" not in text and "to be measured" not in text and "<!--" not in text


def test_card_degrades_gracefully_without_figures(tmp_path):
    fields = dict.fromkeys(hub.CARD_FIELDS) | {"model_name": "m", "repo_id": "org/m", "src_lang": "en", "chrf": 40.0}
    card = ModelCard(hub.render_model_card(TEMPLATE, fields))

    assert [(result.metric_type, result.metric_value) for result in card.data.eval_results or []] == []
    metadata = card.data.to_dict()
    assert metadata["language"] == ["en"] and "datasets" not in metadata and "model-index" not in metadata
    assert "| BLEU | to be measured |" in card.text and "- BLEU signature: to be measured" in card.text
    assert "Corpus: not recorded" in card.text and "{{" not in card.text

    fields |= {"dataset": "wmt14", "tgt_lang": "de"}
    card = ModelCard(hub.render_model_card(TEMPLATE, fields))
    assert [(result.metric_type, result.metric_value) for result in card.data.eval_results] == [("chrf", 40.0)]
    assert card.data.to_dict()["language"] == ["en", "de"] and "| chrF | 40.00 |" in card.text


def test_bad_templates_summaries_and_model_dirs_raise(model_dir, tmp_path):
    fields = dict.fromkeys(hub.CARD_FIELDS)
    template = tmp_path / "card.md"
    template.write_text("---\nlicense: mit\n---\nBLEU: {{ blue }}\n")
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['blue'\]"):
        hub.render_model_card(template, fields)
    template.write_text("# no metadata\n{{ bleu }}\n")
    with pytest.raises(ValueError, match="does not start with a YAML metadata header"):
        hub.render_model_card(template, fields)
    template.write_text("---\nlicense: mit\n---\n{{ bleu }\n")
    with pytest.raises(ValueError, match="malformed placeholder"):
        hub.render_model_card(template, fields)

    summary = tmp_path / "training_summary.json"
    summary.write_text(json.dumps({"bleu": "high"}))
    with pytest.raises(ValueError, match=r"bleu must be int or float, got bleu='high'"):
        hub.read_training_summary(summary)

    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(model_dir, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(ValueError, match=r"model_dir='.*no-tokenizer' has no tokenizer"):
        hub.prepare_upload_folder(no_tokenizer, tmp_path / "out", repo_id=REPO_ID, template=TEMPLATE)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").touch()
    with pytest.raises(ValueError, match=r"folder='.*busy' exists and is not an empty directory"):
        hub.prepare_upload_folder(model_dir, tmp_path / "busy", repo_id=REPO_ID, template=TEMPLATE)


def test_a_model_saved_without_generation_config_gets_the_papers(model_dir, tmp_path):
    plain = tmp_path / "plain"
    model = VanillaTransformerForConditionalGeneration.from_pretrained(model_dir)
    model.generation_config = GenerationConfig.from_model_config(
        model.config
    )  # what save_pretrained writes by default
    model.save_pretrained(plain)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(plain)

    folder = hub.prepare_upload_folder(plain, tmp_path / "out", repo_id=REPO_ID, template=TEMPLATE)

    generation = GenerationConfig.from_pretrained(folder)
    assert (generation.num_beams, generation.length_penalty, generation.max_new_tokens) == (4, 0.6, 256)
    assert generation.decoder_start_token_id == model.config.decoder_start_token_id
    assert "training_summary.json" not in {path.name for path in folder.iterdir()}
    assert "| BLEU | to be measured |" in (folder / "README.md").read_text()


def test_push_to_hub_creates_the_repo_and_uploads_the_dry_run_folder(model_dir, dry_run, monkeypatch):
    calls = []

    class FakeHfApi:
        def __init__(self, token=None):
            calls.append(("init", token))

        def create_repo(self, repo_id, **kwargs):
            calls.append(("create_repo", repo_id, kwargs))

        def upload_folder(self, *, repo_id, folder_path, commit_message):
            files = {path.name: path.read_bytes() for path in folder_path.iterdir()}
            calls.append(("upload_folder", repo_id, files, commit_message))
            return type("CommitInfo", (), {"commit_url": f"https://huggingface.co/{repo_id}/commit/abc"})()

    monkeypatch.setattr(hub, "HfApi", FakeHfApi)
    url = hub.push_to_hub(model_dir, REPO_ID, template=TEMPLATE, private=True, token="hf_test")

    assert url == "https://huggingface.co/org/tiny-numbers/commit/abc"
    assert calls[:2] == [
        ("init", "hf_test"),
        ("create_repo", REPO_ID, {"repo_type": "model", "private": True, "exist_ok": True}),
    ]
    _, repo_id, files, _ = calls[2]
    assert repo_id == REPO_ID and files.keys() == UPLOADED_FILES
    for name in ("README.md", "config.json", "model.safetensors", "tokenizer.json"):
        assert files[name] == (dry_run / name).read_bytes(), name


def test_downloaded_repo_loads_without_the_package(dry_run, tmp_path):
    """The folder placed in a Hub cache loads offline by repo id, in a process where vanilla_transformer is absent."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo_cache = tmp_path / "hf" / "hub" / "models--org--tiny-numbers"
    shutil.copytree(dry_run, repo_cache / "snapshots" / commit)
    (repo_cache / "refs").mkdir()
    (repo_cache / "refs" / "main").write_text(commit)

    model = AutoModelForSeq2SeqLM.from_pretrained(dry_run)
    tokenizer = AutoTokenizer.from_pretrained(dry_run)
    inputs = tokenizer(SOURCES, padding=True, return_tensors="pt")
    expected = tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)  # beam 4, from the config

    script = textwrap.dedent(
        f"""
        import json, sys
        sys.modules["vanilla_transformer"] = None  # not importable, as where the package is not installed
        try:
            import vanilla_transformer
        except ImportError:
            pass
        else:
            raise SystemExit("vanilla_transformer is importable")
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        model = AutoModelForSeq2SeqLM.from_pretrained({REPO_ID!r}, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained({REPO_ID!r}, trust_remote_code=True)
        # Without trust_remote_code, AutoTokenizer asks whether to run the config's code (here stdin is empty, so
        # it does not) and falls back to a plain config: the same tokenizer.
        plain_tokenizer = AutoTokenizer.from_pretrained({REPO_ID!r})
        assert plain_tokenizer({SOURCES!r}).input_ids == tokenizer({SOURCES!r}).input_ids
        inputs = tokenizer({SOURCES!r}, padding=True, return_tensors="pt")
        generated = tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)
        translator = pipeline("translation", model={REPO_ID!r}, trust_remote_code=True)
        piped = [result["translation_text"] for result in translator({SOURCES!r}, batch_size=2)]
        print("\\nRESULT", json.dumps({{"module": type(model).__module__, "generated": generated, "piped": piped}}))
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_CACHE": str(tmp_path / "hf" / "hub"),
        "OMP_NUM_THREADS": "1",
    }
    result = subprocess.run(
        [sys.executable, "-c", script],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.rsplit("\nRESULT ", 1)[-1])
    assert loaded["module"].startswith("transformers_modules.") and "vanilla_transformer." not in loaded["module"]
    assert loaded["generated"] == expected
    assert loaded["piped"] == expected
