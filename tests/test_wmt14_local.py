"""WMT14 without the Hub: the wmt14 presets read local files in WMT's own layout (``train``, ``newstest2013``,
``newstest2014``) with ``--dataset text --data-dir DIR``, offline; offline without such a folder, they stop at once
with one line saying how to bring the corpus in. The real newstest2014 is read from the shared data folder where
present."""

import json
import os
import subprocess
import sys
import time

import pytest

from vanilla_transformer.model_summary import read_training_summary
from vanilla_transformer.training import parse_args, train

SHRUNK = [
    "--vocab-size", "300", "--d-model", "16", "--layers", "1", "--heads", "2", "--ffn-dim", "32",
    "--max-length", "64", "--max-tokens", "400", "--tokens-per-step", "400", "--max-steps", "1",
    "--warmup-steps", "4", "--save-every", "1", "--keep-checkpoints", "1", "--average-checkpoints", "1",
    "--eval-every", "1000", "--max-length-offset", "3", "--num-threads", "1", "--num-samples", "0",
    "--mixed-precision", "no",
]  # fmt: skip
"""The wmt14-base preset with the model and the run shrunk to one step of a tiny model (the options of TINY)."""


def write_pairs(folder, split, pairs):
    for index, lang in enumerate(("en", "de")):
        (folder / f"{split}.{lang}").write_text("".join(pair[index] + "\n" for pair in pairs), encoding="utf-8")


def wmt14_folder(tmp_path, test_pairs):
    """A small corpus in WMT14's layout: train, newstest2013 and newstest2014 (`test_pairs`)."""
    folder = tmp_path / "wmt14"
    folder.mkdir()
    words = [("house", "Haus"), ("the small", "das kleine"), ("green", "grüne"), ("tree", "Baum"), ("big", "große")]
    train = [(f"{a} {b} {c}", f"{x} {y} {z}") for a, x in words for b, y in words for c, z in words[:3]]
    write_pairs(folder, "train", train)
    write_pairs(folder, "newstest2013", train[:6])
    write_pairs(folder, "newstest2014", test_pairs)
    return folder


def test_the_presets_take_wmt14s_split_names_from_files():
    for preset in ("wmt14-base", "wmt14-big"):
        hub = parse_args(["--preset", preset])
        assert (hub.data.dataset, hub.data.valid_split, hub.data.test_split) == ("hf:wmt14", "validation", "test")
        local = parse_args(["--preset", preset, "--dataset", "text", "--data-dir", "DIR"])
        assert (local.data.valid_split, local.data.test_split, local.data.dataset_config) == (
            "newstest2013",
            "newstest2014",
            None,
        )
        assert local.decoding.compound_split_bleu and hub.decoding.compound_split_bleu
        chosen = parse_args(["--preset", preset, "--dataset", "tsv", "--data-dir", "D", "--test-split", "dev"])
        assert (chosen.data.valid_split, chosen.data.test_split) == ("newstest2013", "dev")  # the user's wins
    assert parse_args(["--preset", "multi30k", "--dataset", "text"]).data.test_split == "test_2016_flickr"


def run_one_step(tmp_path, monkeypatch, folder):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    run = tmp_path / "run"
    config = parse_args(["--preset", "wmt14-base", "--dataset", "text", "--data-dir", str(folder), *SHRUNK,
                         "--output-dir", str(run)])  # fmt: skip
    assert config.model.preset == "base" and config.model.vocab_size == 300  # the preset, shrunk by the options
    return run, train(config)


def test_wmt14_base_trains_a_step_on_local_files_offline(tmp_path, monkeypatch, offline):
    test_pairs = [("the small house", "das kleine Haus"), ("green-tree big", "grüne-Baum große")] * 3
    run, results = run_one_step(tmp_path, monkeypatch, wmt14_folder(tmp_path, test_pairs))
    assert results["step"] == 1
    assert (run / "test.de").read_text(encoding="utf-8").splitlines()[0] == "das kleine Haus"  # newstest2014
    assert "test_bleu" in results and "test_bleu_compound_split" in results
    assert "##AT##-##AT##" in results["test_bleu_compound_split_recipe"]
    written = json.loads((run / "results.json").read_text())
    assert written["test_bleu_compound_split"] == results["test_bleu_compound_split"]
    summary = read_training_summary(run / "model" / "training_summary.json")
    assert summary["bleu_compound_split"] == results["test_bleu_compound_split"]
    assert summary["eval_split"] == "newstest2014" and "sacremoses" in summary["bleu_compound_split_recipe"]


def test_wmt14_base_reads_the_real_newstest2014(tmp_path, monkeypatch, offline, shared_data):
    real = shared_data / "wmt14_en_de"
    if not (real / "newstest2014.en").is_file():
        pytest.skip(f"newstest2014 is not in {shared_data} (set VANILLA_TRANSFORMER_DATA)")
    english, german = (
        (real / f"newstest2014.{lang}").read_text(encoding="utf-8").split("\n")[:8] for lang in "en de".split()
    )
    run, results = run_one_step(tmp_path, monkeypatch, wmt14_folder(tmp_path, list(zip(english, german, strict=True))))
    assert results["step"] == 1 and (run / "test.de").read_text(encoding="utf-8").splitlines() == german
    assert "test_bleu_compound_split" in results


def test_an_offline_wmt14_preset_without_files_stops_at_once_saying_how_to_bring_them(tmp_path):
    command = [sys.executable, "-m", "vanilla_transformer", "train", "--preset", "wmt14-base", "--output-dir",
               str(tmp_path / "run")]  # fmt: skip
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    start = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, env=environment)
    assert done.returncode != 0 and time.monotonic() - start < 60
    lines = done.stderr.strip().splitlines()
    assert "cannot load the Hugging Face dataset 'wmt14'" in lines[-1]
    assert "--dataset text --data-dir DIR" in lines[-1] and "HF_DATASETS_OFFLINE=1" in lines[-1]
    assert "newstest2013" in lines[-1] and "Traceback" not in done.stderr


def test_the_model_card_reports_both_bleus(tiny_model_dir):
    from vanilla_transformer import VanillaTransformerForConditionalGeneration
    from vanilla_transformer.export import hub
    from vanilla_transformer.metrics.compound_split import recipe

    summary = {"dataset": "wmt14", "dataset_config": "de-en", "eval_split": "test", "src_lang": "en", "tgt_lang": "de",
               "bleu": 26.1, "bleu_compound_split": 27.04, "bleu_compound_split_recipe": recipe("de")}  # fmt: skip
    model = VanillaTransformerForConditionalGeneration.from_pretrained(tiny_model_dir)
    card = hub.build_model_card(model, summary, "org/model")
    assert (
        "| BLEU | 26.10 |" in card.text and "| BLEU, tokenized and compound-split (the paper's) | 27.04 |" in card.text
    )
    assert recipe("de") in card.text
    assert {(r.metric_type, r.metric_value) for r in card.data.eval_results} >= {
        ("bleu", 26.1),
        ("bleu_compound_split", 27.04),
    }
    sacrebleu_only = {key: value for key, value in summary.items() if not key.startswith("bleu_compound_split")}
    assert "compound-split" not in hub.build_model_card(model, sacrebleu_only, "org/model").text


def test_a_hub_that_does_not_answer_is_named_after_one_request(monkeypatch):
    """Online (no offline mode) but the Hub unreachable: one short request, then the one-line error, without
    datasets' half minute of retries; a Hub that answers, even with an HTTP error, is left to datasets."""
    import socket
    import urllib.error
    import urllib.request

    import datasets

    from vanilla_transformer.data import corpora

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", False, raising=False)
    requests, loads = [], []

    def unreachable(request, timeout):
        requests.append((request.full_url, request.get_method(), timeout))
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", unreachable)

    def load_dataset(*args, **kwargs):
        loads.append(args)
        return datasets.Dataset.from_dict({"translation": [{"en": "Hello", "de": "Hallo"}]})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    with pytest.raises(
        ValueError, match=r"cannot load the Hugging Face dataset 'wmt14': .* cannot be reached"
    ) as caught:
        corpora.load_hf_translation_arrow("wmt14", "de-en", split="test", src_lang="en", tgt_lang="de")
    assert "\n" not in str(caught.value) and "--dataset text --data-dir DIR" in str(caught.value)
    assert len(requests) == 1 and requests[0][1:] == ("HEAD", corpora.HUB_PROBE_TIMEOUT) and not loads

    def answers(request, timeout):
        raise urllib.error.HTTPError(request.full_url, 404, "Not Found", {}, None)

    monkeypatch.setattr(urllib.request, "urlopen", answers)
    pairs = corpora.load_hf_translation_arrow("wmt14", "de-en", split="test", src_lang="en", tgt_lang="de")
    assert len(loads) == 1 and pairs["source"] == ["Hello"]  # datasets was asked
