"""The real-data presets: Multi30k reads the shared corpus, and the paper's WMT14 base preset starts and checkpoints.

The long runs themselves are README commands, not tests. The corpora are found through $VANILLA_TRANSFORMER_DATA,
else in ../shared/data next to the repository (the `shared_data` fixture); tests that need them skip where they are
absent.
"""

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from tiny_model import load_script

from vanilla_transformer.training import build_model_config, load_splits, parse_args, train
from vanilla_transformer.training.checkpoints import list_checkpoints, load_checkpoint_weights
from vanilla_transformer.training.tracking import read_metrics


def corpus(shared_data: Path, name: str, first_file: str) -> Path:
    """The folder of corpus `name` in `shared_data`; the test skips when it lacks `first_file`."""
    if not (shared_data / name / first_file).is_file():
        pytest.skip(f"{name} is not in {shared_data} (set VANILLA_TRANSFORMER_DATA)")
    return shared_data / name


def test_multi30k_preset_reads_the_shared_corpus_in_both_directions(shared_data):
    multi30k = corpus(shared_data, "multi30k", "train.en")
    en_de = parse_args(["--preset", "multi30k"])
    assert en_de.data.data_dir == str(multi30k)
    splits = load_splits(en_de)
    assert [len(splits.train), len(splits.valid), len(splits.test)] == [29_000, 1_014, 1_000]
    first_en = (multi30k / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[0].strip()
    first_de = (multi30k / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[0].strip()
    assert tuple(splits.test[0]) == (first_en, first_de)
    de_en = load_splits(parse_args(["--preset", "multi30k", "--src-lang", "de", "--tgt-lang", "en"]))
    assert tuple(de_en.test[0]) == (first_de, first_en)
    assert (
        en_de.checkpointing.select_on_valid
        and en_de.optimization.max_train_minutes is not None
        and en_de.decoding.num_beams == 4
    )  # its alpha, chosen on validation, is checked against the committed sweep in test_published_figures.py


def test_wmt14_base_preset_starts_checkpoints_and_scores_newstest2014_on_cpu(tmp_path, capsys, shared_data):
    """The paper's base model and recipe for 25 steps of 256 tokens, on newstest2014 instead of the 4.5M-pair
    training set (which is downloaded from the Hub). Its loss starts at that of a uniform prediction and falls; a copy
    of the run cut back to its checkpoint of step 20 resumes to the same weights at step 25; and the scoring script
    gives the BLEU that training reported for the first 4 sentences."""
    newstest2014 = corpus(shared_data, "wmt14_en_de", "newstest2014.en")
    source, target = newstest2014 / "newstest2014.en", newstest2014 / "newstest2014.de"
    test_source, test_target = tmp_path / "test.en", tmp_path / "test.de"
    for path, full in ((test_source, source), (test_target, target)):
        path.write_text("".join(full.read_text(encoding="utf-8").split("\n")[:4]) + "\n", encoding="utf-8")
    files = [
        "--train-src", str(source), "--train-tgt", str(target), "--valid-src", str(test_source),
        "--valid-tgt", str(test_target), "--test-src", str(test_source), "--test-tgt", str(test_target),
    ]  # fmt: skip
    smoke = ["--max-length", "64", "--max-tokens", "256", "--grad-accum", "1", "--max-steps", "25",
             "--save-every", "10", "--log-every", "5", "--eval-every", "1000", "--max-length-offset", "2",
             "--num-threads", "1", "--num-samples", "0",
             # fp32 on every CPU: the preset's auto precision is bf16 where the CPU has it natively, and one process
             # keeps one Accelerate state, which an earlier test of this process may have made in fp32
             "--mixed-precision", "no"]  # fmt: skip
    run = tmp_path / "run"
    config = parse_args(["--preset", "wmt14-base", *files, *smoke, "--output-dir", str(run)])
    model_config = build_model_config(config.model)
    assert (model_config.d_model, model_config.encoder_layers, model_config.encoder_ffn_dim) == (512, 6, 2048)
    assert (model_config.vocab_size, config.optimization.warmup_steps, config.optimization.max_steps) == (
        37_000,
        4000,
        25,
    )

    results = train(config)
    assert results["step"] == 25
    steps = ["checkpoint-00000010", "checkpoint-00000020", "checkpoint-00000025"]
    assert [path.name for path in list_checkpoints(run / "checkpoints")] == steps
    losses = [row["train_loss"] for row in read_metrics(run / "metrics.jsonl") if "train_loss" in row]
    # An untrained model predicts nearly uniformly: its smoothed cross-entropy is about ln(vocab_size), whatever
    # the smoothing. Training must lower it (2.4e-6 is the rate of step 20 of 4,000 warmup steps: it falls slowly).
    assert len(losses) == 5 and abs(losses[0] - math.log(model_config.vocab_size)) < 0.1 * math.log(37_000)
    assert losses[-1] < losses[0] and all(math.isfinite(loss) for loss in losses)

    resumed_run = tmp_path / "resumed"
    shutil.copytree(run, resumed_run)
    shutil.rmtree(resumed_run / "checkpoints" / steps[-1])  # as if killed after the checkpoint of step 20
    resumed = train(parse_args(["--resume", "--output-dir", str(resumed_run)]))
    assert resumed["step"] == 25
    first, second = (load_checkpoint_weights(path / "checkpoints" / steps[-1]) for path in (run, resumed_run))
    assert first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)

    scores = tmp_path / "scores.json"
    evaluate = load_script("evaluate")
    arguments = ["--model", str(resumed_run / "model"), "--source", str(test_source), "--reference", str(test_target)]
    assert evaluate.main([*arguments, "--max-length-offset", "2", "--results", str(scores)]) == 0
    assert "BLEU = " in capsys.readouterr().out
    assert json.loads(scores.read_text())["bleu"] == resumed["test_bleu"]
