"""Training: the schedule, loss normalisation, presets, resuming, bad input, and two processes."""

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
from accelerate import Accelerator
from tiny_model import TINY, load_script
from torch.nn import functional as F
from training_helpers import launch, same_weights, tiny_run
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration, environment
from vanilla_transformer.data import DATA_DIR_VARIABLE, TranslationCollator
from vanilla_transformer.data.numbers import english_number
from vanilla_transformer.model_summary import read_training_summary
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import (
    TRAINING_PRESETS,
    TrainingConfig,
    TrainingProgress,
    accumulate_gradients,
    build_model_config,
    checkpoints,
    load_splits,
    noam_learning_rate,
    noam_schedule,
    out_of_time,
    parse_args,
    preflight,
    train,
)
from vanilla_transformer.training.checkpoints import (
    average_checkpoints,
    list_checkpoints,
    load_checkpoint_weights,
    read_training_state,
)
from vanilla_transformer.training.preflight import WORKING_CPU_LAUNCH, launch_mismatch
from vanilla_transformer.training.run_dir import RunFinished
from vanilla_transformer.training.step import micro_batch_plan
from vanilla_transformer.training.tracking import read_metrics

REPOSITORY = Path(__file__).resolve().parent.parent


class Killed(Exception):
    """Stands for the process being killed."""


@pytest.fixture(scope="module")
def reference_run(tiny_run_dir) -> Path:
    """An uninterrupted tiny run of 8 steps, with dropout."""
    return tiny_run_dir


# --------------------------------------------------------------------------------------------------------------------
# Learning rate and loss
# --------------------------------------------------------------------------------------------------------------------


def test_noam_learning_rate_is_equation_3():
    # d_model = 512, warmup 4000: 512^-0.5 * step * 4000^-1.5 during warmup, 512^-0.5 * step^-0.5 after.
    assert noam_learning_rate(1, 512, 4000) == pytest.approx(512**-0.5 * 4000**-1.5)
    assert noam_learning_rate(4000, 512, 4000) == pytest.approx(0.0441941738 / 63.2455532)  # the peak, 6.99e-4
    assert noam_learning_rate(16000, 512, 4000) == pytest.approx(512**-0.5 / 126.491106)
    assert noam_learning_rate(100, 128, 10, scale=2.0) == pytest.approx(2.0 * 128**-0.5 * 0.1)
    with pytest.raises(ValueError, match="step=0"):
        noam_learning_rate(0, 512, 4000)


def test_noam_schedule_gives_step_s_the_rate_of_step_s():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=123.0)
    scheduler = noam_schedule(optimizer, d_model=64, warmup_steps=3)
    used = []
    for _ in range(6):
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert used == pytest.approx([64**-0.5 * min(s**-0.5, s * 3**-1.5) for s in range(1, 7)])


def test_logged_learning_rate_and_steps_follow_the_schedule(reference_run):
    rows = [row for row in read_metrics(reference_run / "metrics.jsonl") if "train_loss" in row]
    assert [row["step"] for row in rows] == list(range(1, 9))
    scale = TrainingConfig.load(reference_run / "training_config.json").optimization.lr_scale
    expected = [scale * 16**-0.5 * min(s**-0.5, s * 4**-1.5) for s in range(1, 9)]  # d_model 16, warmup 4
    assert [row["learning_rate"] for row in rows] == pytest.approx(expected)


def test_accumulated_gradient_is_that_of_the_mean_over_all_target_tokens():
    """Two micro-batches with 3 and 16 target tokens: the gradient must be that of the mean over the 19 tokens
    (not the mean of the two micro-batch means), with label smoothing."""
    torch.manual_seed(0)
    config = VanillaTransformerConfig(
        vocab_size=20, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0,
    )  # fmt: skip
    model = VanillaTransformerForConditionalGeneration(config)
    collate = TranslationCollator(pad_token_id=0)
    short = collate([{"input_ids": [5, 6, 3], "labels": [7, 8, 3]}])
    long = collate(
        [{"input_ids": [9, 3], "labels": [4, 5, 6, 7, 8, 3]}, {"input_ids": [10, 11, 12, 3], "labels": [9, 3]}] * 2
    )
    accelerator = Accelerator()
    stats = accumulate_gradients(accelerator, model, [short, long], label_smoothing=0.1)
    accumulated = {name: parameter.grad.clone() for name, parameter in model.named_parameters()}

    model.zero_grad()
    logits, labels = [], []
    for batch in (short, long):
        logits.append(model(**batch).logits.flatten(0, 1))
        labels.append(batch["labels"].flatten())
    loss = F.cross_entropy(torch.cat(logits), torch.cat(labels), ignore_index=-100, label_smoothing=0.1)
    loss.backward()
    assert stats["target_tokens"].item() == 19
    assert stats["loss"].item() / 19 == pytest.approx(loss.item(), rel=1e-6)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(accumulated[name], parameter.grad, rtol=1e-5, atol=1e-7, msg=name)


# --------------------------------------------------------------------------------------------------------------------
# Presets and command line
# --------------------------------------------------------------------------------------------------------------------


def test_numbers_is_the_default_preset_and_options_override_it():
    config = parse_args([])
    assert (
        config.preset == "numbers"
        and config.data.dataset == "numbers"
        and config.checkpointing.output_dir == "runs/numbers"
    )
    model_config = build_model_config(config.model)  # the size is the configuration's preset of the same name
    assert (config.model.preset, model_config.d_model, model_config.encoder_layers) == ("numbers", 128, 3)
    assert config.optimization.num_threads == TRAINING_PRESETS["numbers"]["num_threads"]
    overridden = parse_args(["--max-steps", "7", "--dropout", "0.3"])
    assert overridden.optimization.max_steps == 7 and build_model_config(overridden.model).dropout == 0.3
    with pytest.raises(SystemExit):
        parse_args(["--preset", "wmt15"])


def test_wmt14_presets_follow_the_paper():
    base, big = parse_args(["--preset", "wmt14-base"]), parse_args(["--preset", "wmt14-big"])
    for config in (base, big):
        assert (config.data.dataset, config.data.dataset_config, config.data.test_split) == (
            "hf:wmt14",
            "de-en",
            "test",
        )
        assert (config.optimization.adam_beta1, config.optimization.adam_beta2, config.optimization.adam_eps) == (
            0.9,
            0.98,
            1e-9,
        )
        assert (config.optimization.warmup_steps, config.optimization.label_smoothing, config.model.vocab_size) == (
            4000,
            0.1,
            37_000,
        )
        assert (config.decoding.num_beams, config.decoding.length_penalty, config.decoding.max_length_offset) == (
            4,
            0.6,
            50,
        )
        # About 25,000 source + 25,000 target tokens per step, whatever the number of processes.
        for processes in (1, 2, 4, 8):  # every count: tests/test_data_cache.py
            max_tokens, grad_accum = micro_batch_plan(config, processes)
            assert 45_000 <= max_tokens * grad_accum * processes <= 55_000
    assert (base.model.preset, base.optimization.max_steps, base.checkpointing.average_checkpoints) == (
        "base",
        100_000,
        5,
    )
    assert (big.model.preset, big.optimization.max_steps, big.checkpointing.average_checkpoints) == (
        "big",
        300_000,
        20,
    )
    assert micro_batch_plan(TrainingConfig.from_preset("wmt14-base", grad_accum=3), 4)[1] == 3


# --------------------------------------------------------------------------------------------------------------------
# The run directory, checkpoints, resuming
# --------------------------------------------------------------------------------------------------------------------


def test_run_directory_holds_a_loadable_model_and_the_last_checkpoints(reference_run):
    assert [path.name for path in list_checkpoints(reference_run / "checkpoints")] == [
        "checkpoint-00000006",
        "checkpoint-00000008",
    ]
    results = json.loads((reference_run / "results.json").read_text())
    assert results["step"] == 8 and results["averaged_checkpoints"] == ["checkpoint-00000006", "checkpoint-00000008"]
    assert {"test_chrf", "test_exact_match", "train_tokens_per_second", "padding_share"} <= results.keys()
    assert (reference_run / "metrics.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = read_metrics(reference_run / "metrics.jsonl")
    assert {row["step"] for row in rows if "valid_exact_match" in row} == {4, 8}
    assert len((reference_run / "test.hyp.de").read_text().splitlines()) == 12
    # What a published figure needs beside it: the installed versions, the command, the load.
    environment = results["environment"]
    assert environment["versions"]["transformers"] == transformers.__version__
    assert environment["versions"]["torch"] == torch.__version__
    assert (
        environment["command"] and len(environment["load_average_start"]) == len(environment["load_average_end"]) == 3
    )

    model = AutoModelForSeq2SeqLM.from_pretrained(reference_run / "model")
    assert model.generation_config.num_beams == 4 and model.generation_config.length_penalty == 0.6
    summary = read_training_summary(reference_run / "model" / "training_summary.json")
    assert summary["steps"] == 8 and summary["chrf"] == results["test_chrf"] and summary["train_pairs"] == 160
    assert set(json.loads((reference_run / "model" / "config.json").read_text())["custom_pipelines"]) == {
        "translation",
        "text2text-generation",
    }
    average = {
        name: (first + second) / 2
        for (name, first), second in zip(
            load_checkpoint_weights(reference_run / "checkpoints" / "checkpoint-00000006").items(),
            load_checkpoint_weights(reference_run / "checkpoints" / "checkpoint-00000008").values(),
            strict=True,
        )
    }
    torch.testing.assert_close(model.model.shared.weight, average["model.shared.weight"])
    torch.testing.assert_close(model.lm_head.weight, average["model.shared.weight"])  # still tied


def test_exported_model_stops_each_sentence_at_its_source_length_plus_the_runs_offset(reference_run):
    """TINY trains with --max-length-offset 3 and scores the test set with it: the exported generation_config.json
    says 3 (not section 6.1's 50), and generate() of the exported model stops a sentence that never emits </s> at
    its own source length + 3 tokens."""
    assert TINY[TINY.index("--max-length-offset") + 1] == "3"
    assert json.loads((reference_run / "model" / "generation_config.json").read_text())["max_length_offset"] == 3
    model = AutoModelForSeq2SeqLM.from_pretrained(reference_run / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(reference_run / "model")
    config = model.config
    with torch.no_grad():  # every decoder output becomes the all-ones vector; </s> and <pad> then score -d_model
        final_norm = model.model.decoder.layers[-1].final_layer_norm
        final_norm.weight.zero_()
        final_norm.bias.fill_(1.0)
        model.model.shared.weight[[config.eos_token_id, config.pad_token_id]] = -1.0  # tied to lm_head
    sources = ["seven", "three hundred and twelve", "ninety-nine thousand, nine hundred and ninety-nine"]
    batch = tokenizer(sources, padding=True, return_tensors="pt")
    output = model.generate(**batch)
    lengths = (output[:, 1:] != config.pad_token_id).sum(dim=1)
    assert len(set(batch["attention_mask"].sum(dim=1).tolist())) == 3  # three different source lengths
    assert lengths.tolist() == (batch["attention_mask"].sum(dim=1) + 3).tolist()


def test_interrupted_run_resumes_to_the_same_weights(reference_run, tmp_path, monkeypatch):
    """Killed while writing the checkpoint of step 6, the run loses steps 4 to 6, resumes from step 3 and must end
    exactly where the uninterrupted run ended, dropout included."""
    output_dir = tmp_path / "interrupted"
    save_file = checkpoints.save_file

    def killed_at_step_6(tensors, filename, **kwargs):
        if "00000006" in filename:
            Path(filename).write_bytes(b"half-written")
            raise Killed
        return save_file(tensors, filename, **kwargs)

    monkeypatch.setattr(checkpoints, "save_file", killed_at_step_6)
    with pytest.raises(Killed):
        train(tiny_run(output_dir))
    monkeypatch.undo()
    assert [path.name for path in list_checkpoints(output_dir / "checkpoints")] == ["checkpoint-00000003"]

    resumed = parse_args(["--resume", "--output-dir", str(output_dir)])  # the run's own settings
    assert resumed == tiny_run(output_dir, "--resume")
    train(resumed)
    for name in ("checkpoint-00000006", "checkpoint-00000008"):
        assert same_weights(
            load_checkpoint_weights(output_dir / "checkpoints" / name),
            load_checkpoint_weights(reference_run / "checkpoints" / name),
        )
    rows = [row for row in read_metrics(output_dir / "metrics.jsonl") if "train_loss" in row]
    expected = [row for row in read_metrics(reference_run / "metrics.jsonl") if "train_loss" in row]
    assert [row["step"] for row in rows] == list(range(1, 9))  # steps 4-6 of the killed run are not logged twice
    assert [(row["train_loss"], row["grad_norm"]) for row in rows] == [
        (row["train_loss"], row["grad_norm"]) for row in expected
    ]


# --------------------------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------------------------


def test_bad_settings_are_rejected_naming_the_option():
    with pytest.raises(ValueError, match=r"unknown dataset --dataset='wmt99'"):
        TrainingConfig.from_preset("numbers", dataset="wmt99")
    with pytest.raises(ValueError, match=r"--max-tokens=100 is smaller than the longest pair --max-length=64"):
        TrainingConfig.from_preset("numbers", max_tokens=100)
    with pytest.raises(ValueError, match=r"unknown model --model='huge'"):
        TrainingConfig.from_preset("numbers", model="huge")


def test_missing_and_mismatched_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="--data-dir="):
        train(tiny_run(tmp_path / "run1", "--dataset", "text", "--data-dir", str(tmp_path / "nowhere")))
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.en").write_text("one\ntwo\nthree\n")
    (data / "train.de").write_text("eins\nzwei\n")
    with pytest.raises(FileNotFoundError, match=r"--data-dir=.* has no valid.en or valid.de: pass --data-dir"):
        train(tiny_run(tmp_path / "run3", "--dataset", "text", "--data-dir", str(data)))  # every split, first
    for split in ("valid", "test"):
        (data / f"{split}.en").write_text("one\n")
        (data / f"{split}.de").write_text("eins\n")
    with pytest.raises(ValueError, match="parallel files differ in length"):
        train(tiny_run(tmp_path / "run2", "--dataset", "text", "--data-dir", str(data)))


def test_a_preset_finds_its_corpus_through_the_data_variable_or_names_both_ways_to_give_it(tmp_path, monkeypatch):
    """The multi30k preset reads $VANILLA_TRANSFORMER_DATA/multi30k, never a folder next to the source tree. With
    neither the variable nor --data-dir it stops before reading or writing anything, naming both; a --data-dir
    without the files says to pass --data-dir."""
    monkeypatch.delenv(DATA_DIR_VARIABLE, raising=False)
    run = tmp_path / "run"
    config = TrainingConfig.from_preset("multi30k", output_dir=str(run), num_threads=1, mixed_precision="no")
    assert config.data.data_dir is None
    unset = r"--preset multi30k reads multi30k/ from --data-dir, which is not set: pass --data-dir .*VANILLA_TRANSFORMER_DATA"
    with pytest.raises(ValueError, match=unset):
        load_splits(config)
    with pytest.raises(ValueError, match=unset):
        train(config)
    assert not run.exists()  # the run stopped before it wrote anything

    monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path / "corpora"))
    assert parse_args(["--preset", "multi30k"]).data.data_dir == str(tmp_path / "corpora" / "multi30k")
    assert parse_args(["--preset", "multi30k", "--data-dir", "mine"]).data.data_dir == "mine"
    for data_dir, message in ((tmp_path / "nowhere", "is not a directory"), (tmp_path, "has no train.en or train.de")):
        config = TrainingConfig.from_preset("multi30k", data_dir=str(data_dir), output_dir=str(run))
        with pytest.raises(FileNotFoundError, match=rf"--data-dir=.*{message}.*pass --data-dir"):
            load_splits(config)


def test_the_presets_models_are_the_configuration_presets_of_their_documented_sizes():
    """Sizes are defined once, as configuration presets: the training presets use them (the numbers task's model has
    about 1.5M parameters, Multi30k's 6.0M, as their comments say), and so does the benchmark."""
    sizes = {}
    for preset in ("numbers", "multi30k"):
        model_config = build_model_config(TrainingConfig.from_preset(preset).model)
        assert (
            model_config.to_dict()
            == VanillaTransformerConfig.from_preset(preset, vocab_size=model_config.vocab_size).to_dict()
        )
        sizes[preset] = VanillaTransformerForConditionalGeneration(model_config).num_parameters()
    assert round(sizes["numbers"] / 1e6, 1) == 1.5 and round(sizes["multi30k"] / 1e6, 1) == 6.0
    multi30k = build_model_config(TrainingConfig.from_preset("multi30k").model)
    assert (multi30k.d_model, multi30k.encoder_layers, multi30k.encoder_ffn_dim, multi30k.dropout) == (
        256,
        3,
        512,
        0.2,
    )
    # An override still wins over the preset's size.
    assert build_model_config(TrainingConfig.from_preset("multi30k", d_model=128).model).d_model == 128


def test_tokenizer_larger_than_the_model_vocabulary(tmp_path):
    tokenizer = train_tokenizer(["eins zwei drei vier", "one two three four"] * 10, vocab_size=270)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    assert len(tokenizer) > 264
    with pytest.raises(ValueError, match=r"exceeds config.vocab_size=264"):
        train(tiny_run(tmp_path / "run", "--tokenizer", str(tmp_path / "tokenizer"), "--vocab-size", "264"))


def test_resuming_with_incompatible_settings(reference_run):
    with pytest.raises(ValueError, match=r"already holds a run: pass --resume"):
        train(tiny_run(reference_run))
    with pytest.raises(ValueError, match=r"--d-model=32 but the run has d_model=16"):
        train(parse_args(["--resume", "--output-dir", str(reference_run), "--d-model", "32"]))
    with pytest.raises(ValueError, match=r"--preset='multi30k' but the run has preset='numbers'"):
        train(parse_args(["--resume", "--output-dir", str(reference_run), "--preset", "multi30k"]))


# --------------------------------------------------------------------------------------------------------------------
# Two processes
# --------------------------------------------------------------------------------------------------------------------


TWO_PROCESS_OPTIONS = [*TINY, "--dropout", "0", "--max-steps", "4", "--save-every", "2", "--eval-every", "2"]


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory) -> Path:
    """4 steps of 2 CPU processes, one micro-batch each per step, without dropout; checkpoints at steps 2 and 4."""
    output_dir = tmp_path_factory.mktemp("two") / "run"
    completed = launch(output_dir, *TWO_PROCESS_OPTIONS, "--grad-accum", "1", launcher=["--mixed_precision", "no"])
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "the launch asked for" not in completed.stderr  # two asked, two run
    return output_dir


def test_a_launch_asked_for_two_cpu_processes_that_runs_one_says_so(tmp_path):
    """`accelerate launch --cpu --num_processes 2` without MPI starts one process: the run says that it was asked
    for several, and names the command that starts them."""
    completed = launch(tmp_path / "run", *TINY, "--max-steps", "1", topology=["--cpu", "--num_processes", "2"])
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["num_processes"] == 1
    assert "the launch asked for several processes" in completed.stderr
    assert WORKING_CPU_LAUNCH in completed.stderr


def test_launch_mismatch_compares_what_the_launcher_recorded_with_the_processes_running():
    simple_launcher = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "ACCELERATE_USE_CPU": "True"}
    assert "several processes" in launch_mismatch(1, simple_launcher)
    assert launch_mismatch(1, {"ACCELERATE_USE_CPU": "True"}) is None  # accelerate launch --num_processes 1
    assert launch_mismatch(1, {}) is None  # plain python
    torchrun = {"MASTER_ADDR": "127.0.0.1", "WORLD_SIZE": "2", "RANK": "0"}
    assert launch_mismatch(2, torchrun) is None
    assert "2 processes (WORLD_SIZE=2) but 1 process(es) run" in launch_mismatch(1, torchrun)
    assert launch_mismatch(4, {"OMPI_COMM_WORLD_SIZE": "4", "MASTER_ADDR": "h"}) is None  # mpirun


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n\nprocessor\t: 1\n")
    assert environment.cpu_flags(cpuinfo) == {"fpu", "sse2", "avx2", "avx512f", "avx512_bf16"}
    assert environment.cpu_flags(tmp_path / "missing") is None


def test_bf16_on_a_cpu_without_native_bf16_is_named():
    assert "without native bf16" in preflight.slow_bf16("cpu", "bf16", {"avx2", "avx512f"})
    assert preflight.slow_bf16("cpu", "bf16", {"avx2", "avx512_bf16"}) is None
    assert preflight.slow_bf16("cpu", "bf16", {"amx_bf16"}) is None
    assert preflight.slow_bf16("cpu", "no", {"avx2"}) is None
    assert preflight.slow_bf16("cuda", "bf16", set()) is None
    assert preflight.slow_bf16("cpu", "bf16", None) is None  # flags unknown: say nothing


def test_two_processes_equal_one_process_accumulating_two_micro_batches(two_process_run, tmp_path):
    """`accelerate launch` with 2 CPU processes, one micro-batch each per step, must take the same steps as one
    process with 2 micro-batches per step: same losses, gradient norms and weights (without dropout)."""
    train(parse_args([*TWO_PROCESS_OPTIONS, "--grad-accum", "2", "--output-dir", str(tmp_path / "one")]))

    two, one = two_process_run, tmp_path / "one"
    results = json.loads((two / "results.json").read_text())
    assert (results["step"], results["num_processes"], results["tokens_per_step"]) == (4, 2, 2 * 400)
    summary = read_training_summary(two / "model" / "training_summary.json")
    assert (summary["num_processes"], summary["tokens_per_step"]) == (2, 800)
    assert (two / "checkpoints" / "checkpoint-00000004" / "rng-1.safetensors").is_file()  # rank 1 saved too
    for name in ("checkpoint-00000002", "checkpoint-00000004"):
        assert same_weights(
            load_checkpoint_weights(two / "checkpoints" / name), load_checkpoint_weights(one / "checkpoints" / name)
        )
    rows_two = [row for row in read_metrics(two / "metrics.jsonl") if "train_loss" in row]
    rows_one = [row for row in read_metrics(one / "metrics.jsonl") if "train_loss" in row]
    for row_two, row_one in zip(rows_two, rows_one, strict=True):
        assert row_two["train_loss"] == pytest.approx(row_one["train_loss"], rel=1e-6)
        assert row_two["grad_norm"] == pytest.approx(row_one["grad_norm"], rel=1e-6)


def test_two_processes_compiled_by_the_launcher_equal_the_eager_two_processes(two_process_run, tmp_path):
    """``accelerate launch --dynamo_backend eager``: DDP inside torch.compile's wrapper, the same kernels, so the same
    losses and gradient norms as the eager launch. (Not bitwise the same weights: the attention keys' bias has a zero
    gradient in exact arithmetic; the rounding noise left there differs with the compiled graph's summation order, and
    Adam, dividing by that noise's own scale, moves the bias by up to the learning rate either way.)"""
    options = [*TWO_PROCESS_OPTIONS, "--grad-accum", "1"]
    completed = launch(tmp_path / "run", *options, launcher=["--mixed_precision", "no", "--dynamo_backend", "eager"])
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["dynamo_backend"] == "eager" and results["compilations"] >= 2 and results["num_processes"] == 2
    rows = [
        [row for row in read_metrics(run / "metrics.jsonl") if "train_loss" in row]
        for run in (tmp_path / "run", two_process_run)
    ]
    assert len(rows[0]) == 4
    for compiled, eager in zip(*rows, strict=True):
        assert compiled["train_loss"] == pytest.approx(eager["train_loss"], rel=1e-6)
        assert compiled["grad_norm"] == pytest.approx(eager["grad_norm"], rel=1e-5)


def test_two_processes_killed_and_resumed_end_with_the_weights_of_an_uninterrupted_run(two_process_run, tmp_path):
    """Both processes die while writing the checkpoint of step 4; resumed in two processes from step 2, the run must
    end with the weights of the uninterrupted two-process run, read from the same token cache."""
    options = [*TWO_PROCESS_OPTIONS, "--grad-accum", "1"]
    killed = launch(tmp_path / "run", *options, PROBE_KILL_AT="checkpoint-00000004")
    assert killed.returncode != 0
    assert [path.name for path in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["checkpoint-00000002"]
    resumed = launch(tmp_path / "run", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    for name in ("checkpoint-00000002", "checkpoint-00000004"):
        assert same_weights(
            load_checkpoint_weights(tmp_path / "run" / "checkpoints" / name),
            load_checkpoint_weights(two_process_run / "checkpoints" / name),
        )


def test_average_checkpoints_script(reference_run, tmp_path):
    """The script's average of the last 2 checkpoints is their element-wise mean, computed here by hand, and the model
    the run exported; the "average" of the last one is that checkpoint."""
    script = load_script("average")
    assert script.main([str(reference_run), "--output", str(tmp_path / "two")]) == 0
    assert script.main([str(reference_run), "--last", "1", "--output", str(tmp_path / "one")]) == 0
    sixth, eighth = (
        load_checkpoint_weights(reference_run / "checkpoints" / f"checkpoint-0000000{step}") for step in (6, 8)
    )
    by_hand = {name: ((sixth[name].double() + eighth[name].double()) / 2).float() for name in sixth}
    two = load_checkpoint_weights(tmp_path / "two")
    assert two.keys() <= by_hand.keys() and "model.shared.weight" in two
    assert all(torch.equal(two[name], by_hand[name]) for name in two)
    assert not torch.equal(two["model.shared.weight"], eighth["model.shared.weight"])
    assert same_weights(two, load_checkpoint_weights(reference_run / "model"))
    last = load_checkpoint_weights(reference_run / "checkpoints" / "checkpoint-00000008")
    assert same_weights(load_checkpoint_weights(tmp_path / "one"), last)
    generation = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "one").generation_config
    assert (generation.num_beams, generation.max_length_offset) == (4, 3)  # the run's search, TINY's offset 3


def test_aligned_files_given_by_train_src_and_train_tgt(tmp_path):
    from vanilla_transformer.training import load_splits

    files = {}
    for split, n in (("train", 5), ("valid", 2), ("test", 3)):
        for lang in ("en", "de"):
            path = tmp_path / f"{split}.{lang}"
            path.write_text("".join(f"{split} {lang} {i}\n" for i in range(n)), encoding="utf-8")
            files[f"--{split}-{'src' if lang == 'en' else 'tgt'}"] = str(path)
    config = parse_args([arg for item in files.items() for arg in item])
    splits = load_splits(config)
    assert [len(splits.train), len(splits.valid), len(splits.test)] == [5, 2, 3]
    assert tuple(splits.test[2]) == ("test en 2", "test de 2")
    with pytest.raises(ValueError, match="--valid-src=None"):
        load_splits(parse_args(["--train-src", files["--train-src"], "--train-tgt", files["--train-tgt"]]))


# --------------------------------------------------------------------------------------------------------------------
# Time budget, selection on the validation set
# --------------------------------------------------------------------------------------------------------------------


def test_time_budget_stops_training_and_carries_over_to_a_resumed_run(tmp_path):
    # 0.6 ms of budget: the first step exceeds it, so the loop stops after step 1 (checked before every step).
    results = train(tiny_run(tmp_path, "--max-train-minutes", "1e-5"))
    assert results["step"] == 1 and results["train_minutes"] >= 1e-5
    assert [path.name for path in list_checkpoints(tmp_path / "checkpoints")] == ["checkpoint-00000001"]
    saved = TrainingProgress()
    saved.load_state_dict(read_training_state(tmp_path / "checkpoints" / "checkpoint-00000001")["progress"])
    assert saved.step == 1 and saved.seconds == pytest.approx(60 * results["train_minutes"])
    # The spent time is in the checkpoint: the same budget takes no further step (the run is finished: it says so and
    # writes nothing), a larger one continues to the end.
    with pytest.raises(RunFinished, match=r"step 1, --max-train-minutes=1e-05 reached"):
        train(parse_args(["--resume", "--output-dir", str(tmp_path)]))
    assert train(parse_args(["--resume", "--output-dir", str(tmp_path), "--max-train-minutes", "60"]))["step"] == 8


def test_a_finished_run_resumed_with_another_search_scores_again_without_training(tmp_path):
    """Resuming a finished run with --finish-again takes no step and changes no weight: it redoes section 6.1's final stage with the
    search now asked for (the exported generation config carries it), and the log keeps one results row, the new
    one, after the same training rows."""
    first = train(tiny_run(tmp_path, "--max-train-minutes", "1e-5"))
    checkpoint = tmp_path / "checkpoints" / "checkpoint-00000001"
    weights, rows = load_checkpoint_weights(checkpoint), read_metrics(tmp_path / "metrics.jsonl")
    assert GenerationConfig.from_pretrained(tmp_path / "model").length_penalty == 0.6
    again = train(
        parse_args(
            [
                "--resume",
                "--finish-again",
                "--output-dir",
                str(tmp_path),
                "--num-beams",
                "2",
                "--length-penalty",
                "1.5",
            ]
        )
    )
    assert again["step"] == first["step"] == 1 and same_weights(load_checkpoint_weights(checkpoint), weights)
    generation = GenerationConfig.from_pretrained(tmp_path / "model")
    assert (generation.num_beams, generation.length_penalty) == (2, 1.5)
    rescored = read_metrics(tmp_path / "metrics.jsonl")
    assert [row for row in rescored if "seconds" not in row] == [row for row in rows if "seconds" not in row]
    assert [row["seconds"] for row in rescored if "seconds" in row] == [again["seconds"]] != [first["seconds"]]
    assert json.loads((tmp_path / "results.json").read_text())["seconds"] == again["seconds"]


def test_progress_of_checkpoints_without_training_time_loads_with_zero_seconds():
    progress = TrainingProgress()
    progress.load_state_dict({"step": 5, "epoch": 1, "batch": 2})
    assert (progress.step, progress.epoch, progress.batch, progress.seconds) == (5, 1, 2, 0.0)


@pytest.mark.parametrize(
    ("last_score", "margin", "selected"),
    [(20.0, "0.5", "last"), (10.4, "0.5", "averaged"), (10.4, "0", "last"), (9.0, "0", "averaged")],
)
def test_select_on_valid_keeps_the_average_unless_the_last_checkpoint_beats_it_by_the_margin(
    tmp_path, monkeypatch, last_score, margin, selected
):
    """The tiny run translates number words, where BLEU is 0 by construction, so candidates are chosen by exact
    match. The selection's validation scores are forced: 10 for the average, then `last_score` for the last
    checkpoint (the order `select_on_valid` scores them, four calls up: through `Evaluator.translate_and_score`,
    `translate_and_score` and `score_translations`). The last checkpoint wins only when it is better by more than
    --select-margin; the selected weights are then exported and scored on the test set, and the other candidate is
    scored on the test set as well."""
    from vanilla_transformer.training import evaluation

    forced, real = iter([10.0, last_score]), evaluation.exact_match

    def exact_match(hypotheses, references):
        score = next(forced, None) if sys._getframe(4).f_code.co_name == "select_on_valid" else None
        return real(hypotheses, references) if score is None else score

    monkeypatch.setattr(evaluation, "exact_match", exact_match)
    results = train(tiny_run(tmp_path, "--select-on-valid", "--select-margin", margin))
    assert not any("bleu" in key for key in results)  # never computed, let alone chosen by
    assert (results["valid_exact_match_averaged"], results["valid_exact_match_last"]) == (10.0, last_score)
    assert results["selected"] == selected
    other = "averaged" if selected == "last" else "last"
    assert results[f"test_exact_match_{selected}"] == results["test_exact_match"]
    assert f"test_exact_match_{other}" in results
    checkpoints = sorted(path.name for path in (tmp_path / "checkpoints").iterdir())
    assert results["averaged_checkpoints"] == (checkpoints[-1:] if selected == "last" else checkpoints[-2:])
    model = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "model")
    expected = average_checkpoints([tmp_path / "checkpoints" / name for name in results["averaged_checkpoints"]])
    torch.testing.assert_close(model.model.shared.weight, expected["model.shared.weight"], rtol=0, atol=0)
    if selected == "averaged":  # the average of several checkpoints differs from the last one
        last = load_checkpoint_weights(tmp_path / "checkpoints" / checkpoints[-1])
        assert not torch.equal(model.model.shared.weight, last["model.shared.weight"])
    rows = [row for row in read_metrics(tmp_path / "metrics.jsonl") if "valid_exact_match" in row]
    best = max(rows, key=lambda row: (row["valid_exact_match"], row["valid_chrf"]))
    assert (results["best_valid_exact_match"], results["best_valid_step"]) == (best["valid_exact_match"], best["step"])


def test_the_numbers_task_reports_exact_match_by_magnitude_and_no_bleu(reference_run):
    """results.json's figures by magnitude, recomputed here from the test set and the translations the run wrote."""
    results = json.loads((reference_run / "results.json").read_text())
    sources, references, hypotheses = (
        (reference_run / f"test.{suffix}").read_text(encoding="utf-8").splitlines()
        for suffix in ("en", "de", "hyp.de")
    )
    by_digits: dict[int, list[bool]] = {}
    for source, reference, hypothesis in zip(sources, references, hypotheses, strict=True):
        digits = len(str(english_number(source)))
        by_digits.setdefault(digits, []).append(hypothesis == reference)
    expected = {f"{10 ** (d - 1):,}-{10**d - 1:,}": 100 * sum(v) / len(v) for d, v in sorted(by_digits.items())}
    assert results["test_exact_match_by_magnitude"] == pytest.approx(expected)
    assert "test_bleu" not in results and "best_valid_bleu" not in results
    assert all("valid_bleu" not in row for row in read_metrics(reference_run / "metrics.jsonl"))


def test_bad_time_budget_is_rejected_naming_the_option():
    with pytest.raises(
        ValueError, match=r"--max-train-minutes must be finite and positive, got --max-train-minutes=0"
    ):
        TrainingConfig.from_preset("numbers", max_train_minutes=0)


def test_a_busy_run_directory_is_refused_and_a_killed_run_leaves_no_lock(tmp_path):
    """Two real `vanilla-transformer train` processes into one folder: the second stops at once, naming it, while
    the first runs; once the first is SIGKILLed, a third runs there (``--overwrite``): no stale lock."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "vanilla_transformer", "train", *TINY, "--output-dir", str(run_dir)]
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    first = subprocess.Popen([*command, "--max-steps", "100000"], env=environment, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not (run_dir / "training_config.json").is_file():  # the first run has started
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.2)
        second = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=120)
        assert second.returncode != 0 and f"--output-dir={run_dir} is in use" in second.stderr, second.stderr[-2000:]
        assert first.poll() is None  # the refused run did not disturb the first
    finally:
        first.kill()
        first.wait()
    third = subprocess.run([*command, "--overwrite"], env=environment, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr[-2000:]
    assert json.loads((run_dir / "results.json").read_text())["step"] == 8


class TwoClocks:
    """Two processes' view of `out_of_time`: process 1's clock runs 1.5x process 0's. Its `reduce` is the collective
    (the max over both processes' lateness at the current step), and records the steps at which it was called."""

    num_processes, device = 2, torch.device("cpu")

    def __init__(self, budget_seconds: float):
        self.budget, self.step, self.collectives = budget_seconds, 0, []

    def seconds(self, rank: int, step: int) -> float:
        return step * (1.0, 1.5)[rank]

    def reduce(self, late: torch.Tensor, reduction: str) -> torch.Tensor:
        assert reduction == "max"
        self.collectives.append(self.step)
        return torch.tensor(float(any(self.seconds(rank, self.step) >= self.budget for rank in (0, 1))))

    def stop_step(self, rank: int, processes: int = 2) -> int:
        """The step before which process ``rank`` stops, running the loop's check before each step."""
        accelerator = self if processes == 2 else SimpleNamespace(num_processes=1)
        progress = TrainingProgress()
        for self.step in range(1000):
            progress.step, progress.seconds = self.step, self.seconds(rank, self.step)
            if out_of_time(accelerator, progress, self.budget / 60):
                return self.step
        raise AssertionError("never stopped")


def test_processes_agree_on_the_time_budget_every_ten_steps_and_stop_together():
    """Agreeing is a collective and a host-device sync, so several processes agree only every 10 steps: both stop at
    the first multiple of 10 where either is late (process 1 is late from step 8, process 0 from step 12). One
    process needs no agreement: it stops at its own first late step."""
    clocks = TwoClocks(budget_seconds=12.0)
    assert clocks.stop_step(rank=0) == clocks.stop_step(rank=1) == 10
    assert clocks.collectives == [0, 10, 0, 10]  # a collective every 10 steps, not every step
    clocks.collectives.clear()
    assert (clocks.stop_step(rank=1, processes=1), clocks.stop_step(rank=0, processes=1)) == (8, 12)
    assert clocks.collectives == []


def test_every_split_is_checked_before_the_tokenizer_is_trained(tmp_path, monkeypatch):
    """A missing validation split stops the run before any work, with the format the folder does hold."""
    from vanilla_transformer.training import setup

    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "test"):
        (data / f"{split}.tsv").write_text("one\teins\ntwo\tzwei\n", encoding="utf-8")
    (data / "valid.jsonl").write_text('{"en": "one", "de": "eins"}\n', encoding="utf-8")
    monkeypatch.setattr(setup, "train_tokenizer", lambda *args, **kwargs: pytest.fail("the tokenizer was trained"))
    with pytest.raises(FileNotFoundError, match=r"has no valid.tsv: .*holds valid.jsonl: pass --dataset jsonl"):
        train(tiny_run(tmp_path / "run", "--dataset", "tsv", "--data-dir", str(data)))


def test_a_log_window_restarted_after_a_checkpoint_times_only_the_steps_that_follow(monkeypatch):
    """A checkpoint or a validation inside a log window restarts its clock: the throughput it reports is then the
    tokens of the steps after the restart over their time, not every token of the window over that shorter time.
    Two steps of 100 tokens take 1 s each; a 5 s checkpoint; then two steps of 300 tokens, 1 s each: 300 tokens/s."""
    from vanilla_transformer.training import trainer as trainer_module

    now = [0.0]
    monkeypatch.setattr(trainer_module.time, "perf_counter", lambda: now[0])
    accelerator = SimpleNamespace(reduce=lambda tensor, reduction: tensor)
    window = trainer_module._LogWindow()

    def step(tokens: float) -> None:
        now[0] += 1.0
        stats = {"loss": 2.0 * tokens, "target_tokens": tokens / 2, "tokens": tokens, "positions": 2.0 * tokens}
        window.add({name: torch.tensor(value, dtype=torch.float64) for name, value in stats.items()}, 1.0)

    step(100), step(100)
    now[0] += 5.0  # the checkpoint
    window.restart()
    step(300), step(300)
    logs = window.log(accelerator, step=4, learning_rate=1e-3, epoch=0)
    assert logs["tokens_per_second"] == pytest.approx(600 / 2)
    assert logs["train_loss"] == pytest.approx(2 * 800 / 400)  # the loss keeps every step of the window
    step(50)  # a window without a restart: all its tokens over all its time
    assert window.log(accelerator, step=5, learning_rate=1e-3, epoch=0)["tokens_per_second"] == pytest.approx(50)
    assert window.train_tokens / window.train_seconds == pytest.approx(650 / 3)  # results.json's figure


def test_a_one_process_run_logs_each_fact_once_and_without_a_rank_prefix(tmp_path, caplog):
    """Issue 67: with one process, Accelerate's ``[RANK 0]`` prefixed every line, and a run that built its token
    cache logged its cleaning twice (the cache's line and the run's)."""
    caplog.set_level(logging.INFO, logger="vanilla_transformer")
    train(tiny_run(tmp_path / "run", "--max-steps", "2", "--data-cache-dir", str(tmp_path / "cache")))
    messages = [record.getMessage() for record in caplog.records if record.name.startswith("vanilla_transformer")]
    assert messages and not [message for message in messages if "[RANK" in message]
    assert sum("kept 160 of 160 pairs" in message for message in messages) == 1, messages
