"""Hub sharing: the folder vanilla-transformer push uploads, its model card (read back with huggingface_hub's own
parser), the upload calls, and loading the folder from a Hub cache where the package is not installed."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from tiny_model import SPLITS, TINY, load_script
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig
from without_package import run_without_package

import vanilla_transformer.export.hub as hub
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import clean_pairs, make_numbers_task
from vanilla_transformer.model_summary import read_training_summary
from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training.results import local_data_description
from vanilla_transformer.training.setup import RunCorpus
from vanilla_transformer.training.tracking import read_metrics

REPO_ID = "org/tiny-numbers"
REPOSITORY_CARD = Path(__file__).resolve().parents[1] / "model_card.md"
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
    "cache_vanilla_transformer.py",
    "config.json",
    "configuration_vanilla_transformer.py",
    "decoder_vanilla_transformer.py",
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
def summarised_model_dir(tmp_path_factory, tiny_model_dir):
    """A copy of the tiny model directory with a training run's summary (`SUMMARY`), for the model card's figures."""
    directory = tmp_path_factory.mktemp("hub") / "run"
    shutil.copytree(tiny_model_dir, directory)
    (directory / "training_summary.json").write_text(json.dumps(SUMMARY))
    return directory


@pytest.fixture(scope="module")
def dry_run(summarised_model_dir):
    folder = summarised_model_dir.parent / "upload"
    assert load_script("push").main([str(summarised_model_dir), REPO_ID, "--dry-run", str(folder)]) == 0
    return folder


def test_dry_run_folder_holds_the_model_code_tokenizer_and_card(dry_run, summarised_model_dir):
    assert {path.name for path in dry_run.iterdir()} == UPLOADED_FILES
    config = json.loads((dry_run / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
        "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    }
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_vanilla_transformer.TranslationPipeline"
    assert GenerationConfig.from_pretrained(dry_run).num_beams == 4
    saved, uploaded = load_file(summarised_model_dir / "model.safetensors"), load_file(dry_run / "model.safetensors")
    assert saved.keys() == uploaded.keys() and all(torch.equal(saved[key], uploaded[key]) for key in saved)
    assert json.loads((dry_run / "training_summary.json").read_text()) == SUMMARY


def test_packaged_template_is_the_repository_model_card():
    """The wheel ships export/model_card.md; the repository's top-level model_card.md is its source."""
    assert hub.TEMPLATE.read_bytes() == REPOSITORY_CARD.read_bytes()


@pytest.fixture(scope="module")
def run_card(tiny_run_dir, tmp_path_factory):
    """The card of a real tiny training run's model, from `vanilla-transformer push --dry-run` with the packaged
    template."""
    folder = tmp_path_factory.mktemp("run-card") / "upload"
    assert load_script("push").main([str(tiny_run_dir / "model"), REPO_ID, "--dry-run", str(folder)]) == 0
    return ModelCard.load(folder / "README.md")


def test_model_card_figures_are_what_the_run_measured(run_card, tiny_run_dir):
    """Every figure of the card against the run's own files (results.json, training_config.json, metrics.jsonl) and
    the training pairs counted again after cleaning."""
    results = json.loads((tiny_run_dir / "results.json").read_text())
    config = json.loads((tiny_run_dir / "training_config.json").read_text())
    logged = [row for row in read_metrics(tiny_run_dir / "metrics.jsonl") if "train_loss" in row]
    tokenizer = AutoTokenizer.from_pretrained(tiny_run_dir / "tokenizer")
    splits = make_numbers_task(
        config["num_train"], config["num_valid"], config["num_test"], max_number=config["max_number"]
    )
    kept, _ = clean_pairs(clean_pairs(splits.train)[0], max_length=config["max_length"], tokenizer=tokenizer)
    parameters = sum(p.numel() for p in load_file(tiny_run_dir / "model" / "model.safetensors").values())
    train_minutes = results["train_minutes"]
    assert 0 < train_minutes * 60 < results["seconds"]  # the training loop's time, not the whole command's

    text = run_card.text
    for expected in (
        f"| Parameters | {parameters:,} |",
        f"- Training pairs, after cleaning: {len(kept):,}",
        f"- Optimizer steps: {logged[-1]['step']:,} ({results['epochs']:.2f} epochs)",
        f"- Tokens per step: {config['max_tokens']:,} padded source + target tokens, over 1 process(es)",
        f"- Training time: {train_minutes:.3g} minutes",
        f"Scores on **{config['test_split']}**",
        f"| chrF | {results['test_chrf']:.2f} |",
        f"| Exact match (%) | {results['test_exact_match']:.2f} |",
        "- Initialisation: trained from scratch",
        "- Corpus: numbers",
        "generation config: beam size 4, length penalty\n0.6.",
    ):
        assert expected in text, expected
    assert int(results["epochs"]) == logged[-1]["epoch"] and results["epochs"] > 0
    assert "to be measured" not in text and "not recorded" not in text and "{{" not in text and "{#" not in text
    assert "BLEU |" not in text and "BLEU signature" not in text  # 0 by construction on number words: not shown

    data = run_card.data
    assert (data.model_name, data.language, data.license, data.pipeline_tag) == (
        "tiny-numbers", ["en", "de"], "apache-2.0", "translation",
    )  # fmt: skip
    # the numbers task is not a Hub dataset: no datasets, and no model-index (whose dataset type the Hub reads as one)
    assert data.datasets is None and data.base_model is None and data.eval_results is None


def test_a_run_on_local_tsv_files_names_them_on_its_card_and_claims_no_hub_dataset(tmp_path):
    """A run on the user's own TSV files: the card names the files and their folder by name (not by absolute path)
    and the language pair, its metadata holds no dataset (no `datasets`, no model-index, whose dataset `type` the
    Hub reads as a dataset id), and the scores stay in its text."""
    data = tmp_path / "my-corpus"
    data.mkdir()
    for split, pairs in (("train", SPLITS.train[:160]), ("valid", SPLITS.valid[:8]), ("test", SPLITS.valid[8:])):
        (data / f"{split}.tsv").write_text("".join(f"{source}\t{target}\n" for source, target in pairs))
    run = tmp_path / "run"
    train(parse_args([*TINY, "--dataset", "tsv", "--data-dir", str(data), "--output-dir", str(run)]))
    folder = tmp_path / "upload"
    assert load_script("push").main([str(run / "model"), REPO_ID, "--dry-run", str(folder)]) == 0
    card = ModelCard.load(folder / "README.md")

    metadata = card.data.to_dict()
    assert "datasets" not in metadata and "model-index" not in metadata and metadata["language"] == ["en", "de"]
    header = card.content.split("---")[1]
    assert "tsv" not in header and "my-corpus" not in header
    assert str(tmp_path) not in card.content
    for expected in (
        "- Corpus: local TSV files in the folder my-corpus\n",
        "learned from local TSV files in the folder my-corpus only",
        "- Trained on local TSV files, not a Hugging Face Hub dataset: train.tsv (training), valid.tsv (validation) "
        "and test.tsv (test) in the folder my-corpus; en → de.",
        "| Exact match (%) | ",
    ):
        assert expected in card.text, expected
    assert "'tsv' data" not in card.text and "Corpus: tsv" not in card.text


def test_local_files_given_one_by_one_are_named_by_folder_and_file():
    """--train-src and the other split files: named by their folder and file names; a Hub dataset keeps its id."""
    folders = {"train": "corpus", "valid": "dev", "test": "dev"}
    files = [
        arg
        for split, folder in folders.items()
        for side, lang in (("src", "en"), ("tgt", "de"))
        for arg in (f"--{split}-{side}", f"/data/{folder}/{split}.{lang}")
    ]
    config = parse_args([*files, "--output-dir", "unused"])
    local = local_data_description(RunCorpus.of(config.data))
    assert local["dataset_name"] == "local plain-text files"
    assert local["local_data"] == (
        "corpus/train.en + corpus/train.de (training), dev/valid.en + dev/valid.de (validation) and "
        "dev/test.en + dev/test.de (test)"
    )
    assert "/data/" not in local["notes"] and local["notes"].endswith("; en → de.")
    same = parse_args(["--dataset", "text", "--data-dir", "/data/multi", "--test-split", "valid", "--output-dir", "x"])
    assert local_data_description(RunCorpus.of(same.data))["local_data"] == (
        "train.en + train.de (training) and valid.en + valid.de (validation and test) in the folder multi"
    )
    wmt = parse_args(["--preset", "wmt14-base", "--output-dir", "unused"])
    assert local_data_description(RunCorpus.of(wmt.data)) is None
    assert local_data_description(RunCorpus.of(parse_args([]).data)) is None
    card = hub.model_card_data({"dataset": "wmt14", "dataset_name": "wmt14", "bleu": 1.0}, "m")
    assert card.datasets == ["wmt14"] and card.eval_results[0].dataset_type == "wmt14"


def test_a_hub_id_is_org_and_name_and_never_a_local_path(tmp_path, monkeypatch):
    """The one Hub-id test, of the card's base model and links and of an adapter's base at upload."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "model").mkdir(parents=True)
    assert hub.is_hub_id("org/name") and hub.hub_url("org/name") == "https://huggingface.co/org/name"
    for name in ("name", "runs/model", "../base", "./base", "/runs/x", "a/b/c", "org--x/name", "org/na me", ""):
        assert not hub.is_hub_id(name) and hub.hub_url(name) is None, name


def test_fine_tuned_model_card_names_its_base_model_and_dataset(summarised_model_dir, tmp_path):
    summary = {
        "base_model": "org/base",
        "dataset": "wmt14",
        "dataset_name": "wmt14",
        "dataset_config": "de-en",
        "eval_split": "validation",
        "src_lang": "en",
        "tgt_lang": "de",
        "bleu": 12.3456,
        "train_hours": 2.5,
    }
    model = VanillaTransformerForConditionalGeneration.from_pretrained(summarised_model_dir)
    card = hub.build_model_card(model, summary, REPO_ID)
    assert (card.data.base_model, card.data.datasets) == ("org/base", ["wmt14"])
    (result,) = card.data.eval_results
    assert (result.dataset_type, result.dataset_config, result.dataset_split, result.metric_value) == (
        "wmt14", "de-en", "validation", 12.35,
    )  # fmt: skip
    assert (
        "- Initialisation: fine-tuned from [`org/base`](https://huggingface.co/org/base)" in card.text
        and "- Training time: 2.5 hours" in card.text
    )
    assert "- Corpus: wmt14 (configuration: de-en)" in card.text and "| BLEU | 12.35 |" in card.text

    local = hub.build_model_card(model, {**summary, "base_model": str(tmp_path / "runs" / "x" / "model")}, REPO_ID)
    assert local.data.base_model is None and "- Initialisation: fine-tuned\n" in local.text  # not a Hub id
    assert str(tmp_path) not in local.text  # a local path says nothing to the card's readers (issue 67)


def test_card_without_figures_says_so(summarised_model_dir):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(summarised_model_dir)
    card = hub.build_model_card(model, {}, "org/m")
    metadata = card.data.to_dict()
    assert card.data.eval_results is None and "model-index" not in metadata and "language" not in metadata
    assert "The run recorded no scores." in card.text and "- Training pairs, after cleaning: not recorded" in card.text


def test_bad_templates_summaries_and_model_dirs_raise(summarised_model_dir, tmp_path):
    model = VanillaTransformerForConditionalGeneration.from_pretrained(summarised_model_dir)
    template = tmp_path / "card.md"
    template.write_text("---\n{{ card_data }}\n---\nBLEU: {{ bleu }\n")
    with pytest.raises(ValueError, match="does not render"):
        hub.build_model_card(model, {}, REPO_ID, template)

    summary = tmp_path / "training_summary.json"
    summary.write_text(json.dumps({"bleu": "high"}))
    with pytest.raises(ValueError, match=r"bleu must be int or float, got bleu='high'"):
        read_training_summary(summary)

    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(summarised_model_dir, no_tokenizer, ignore=shutil.ignore_patterns("tokenizer*"))
    with pytest.raises(ValueError, match=r"model_dir='.*no-tokenizer' has no tokenizer"):
        hub.prepare_upload_folder(no_tokenizer, tmp_path / "out", repo_id=REPO_ID)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").touch()
    with pytest.raises(ValueError, match=r"folder=.*busy is a folder that is not empty"):
        hub.prepare_upload_folder(summarised_model_dir, tmp_path / "busy", repo_id=REPO_ID)


def test_a_model_saved_without_generation_config_gets_the_papers(summarised_model_dir, tmp_path):
    plain = tmp_path / "plain"
    model = VanillaTransformerForConditionalGeneration.from_pretrained(summarised_model_dir)
    model.generation_config = GenerationConfig.from_model_config(
        model.config
    )  # what save_pretrained writes by default
    model.save_pretrained(plain)
    AutoTokenizer.from_pretrained(summarised_model_dir).save_pretrained(plain)

    folder = hub.prepare_upload_folder(plain, tmp_path / "out", repo_id=REPO_ID)

    generation = GenerationConfig.from_pretrained(folder)
    assert (generation.num_beams, generation.length_penalty, generation.max_new_tokens) == (4, 0.6, 256)
    assert generation.decoder_start_token_id == model.config.decoder_start_token_id
    assert "training_summary.json" not in {path.name for path in folder.iterdir()}
    assert "The run recorded no scores." in (folder / "README.md").read_text()


def test_push_to_hub_creates_the_repo_and_uploads_the_dry_run_folder(summarised_model_dir, dry_run, monkeypatch):
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
    url = hub.push_to_hub(summarised_model_dir, REPO_ID, private=True, token="hf_test")

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

    body = f"""
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
    hf = tmp_path / "hf"
    loaded = run_without_package(body, cwd=tmp_path, HF_HOME=str(hf), HF_HUB_CACHE=str(hf / "hub"))
    assert loaded["module"].startswith("transformers_modules.") and "vanilla_transformer." not in loaded["module"]
    assert loaded["generated"] == expected
    assert loaded["piped"] == expected


def test_a_pushed_fine_tuned_card_describes_the_users_model_only(tiny_model_dir, tmp_path):
    """Issue 67, end to end: the card of ``push`` of a fine-tuned folder named its base by a local path, showed
    ``warmup_steps | 0.05`` (a ratio under a step count's name), leaked an internal figure marker and carried the
    project's own Multi30k results."""
    output, folder = tmp_path / "finetuned", tmp_path / "upload"
    options = ["--numbers", "16", "--output-dir", str(output), "--max-steps", "2", "--eval-steps", "2",
               "--batch-size", "8", "--num-beams", "1", "--generation-max-length", "8"]  # fmt: skip
    assert load_script("finetune").main([str(tiny_model_dir), *options]) == 0
    assert load_script("push").main([str(output), REPO_ID, "--dry-run", str(folder)]) == 0
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "- Initialisation: fine-tuned\n" in card and str(tiny_model_dir) not in card
    assert "| `warmup_ratio` | 0.05 |" in card and "warmup_steps" not in card
    assert "<!--" not in card and "Multi30k" not in card and "38.9" not in card
