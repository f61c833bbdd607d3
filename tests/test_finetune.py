"""Fine-tuning with Seq2SeqTrainer: the two Trainer pitfalls (labels popped by label smoothing, loss normalisation
under gradient accumulation), and a whole run of vanilla-transformer finetune checked against independent computations."""

import json
import logging
import warnings

import numpy as np
import pytest
import sacrebleu
import torch
from safetensors.torch import load_file
from tiny_model import SPLITS, load_script
from torch.nn import functional as F
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, GenerationConfig, TrainerCallback

from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.serving.search import translate
from vanilla_transformer.training.finetune import build_trainer, finetune, training_arguments

# Two short targets, then two long ones: with batches of 2 in order, the two micro-batches of one step hold very
# different numbers of target tokens, so a mean of per-micro-batch means differs from the mean over all tokens.
PAIRS = [
    ("one", "eins"),
    ("two", "zwei"),
    ("nine hundred and ninety-seven", "neunhundertsiebenundneunzig"),
    ("seven hundred and seventy-three", "siebenhundertdreiundsiebzig"),
]


def test_collator_builds_decoder_inputs_from_labels(tiny_model_dir, tmp_path):
    model, tokenizer = load_model_dir(tiny_model_dir)
    trainer = build_trainer(model, tokenizer, PAIRS, PAIRS, training_arguments(tmp_path, label_smoothing_factor=0.1))

    batch = trainer.data_collator(trainer.train_dataset)

    labels = batch["labels"]
    assert (labels == -100).any(), "the batch should be padded"
    expected = torch.cat([torch.full((len(labels), 1), tokenizer.bos_token_id), labels[:, :-1]], dim=1)
    expected[expected == -100] = tokenizer.pad_token_id
    assert torch.equal(batch["decoder_input_ids"], expected)
    assert trainer.label_smoother is not None  # so the Trainer will pop the labels and need these decoder inputs


@pytest.mark.parametrize("smoothing", [0.1, 0.0], ids=["Trainer's label smoother", "model's loss"])
def test_loss_with_gradient_accumulation_equals_one_big_batch(tiny_model_dir, tmp_path, smoothing):
    """One step of 2 micro-batches of 2 pairs gives the loss and the update of one batch of 4 pairs."""
    model, tokenizer = load_model_dir(tiny_model_dir)
    initial = {name: tensor.clone() for name, tensor in model.state_dict().items()}

    # Expected: label-smoothed cross-entropy summed over every target token of the 4 pairs, divided by their number.
    encoded = tokenizer([s for s, _ in PAIRS], text_target=[t for _, t in PAIRS], padding=True, return_tensors="pt")
    labels = encoded["labels"].masked_fill(encoded["labels"] == tokenizer.pad_token_id, -100)
    with torch.no_grad():
        logits = model(input_ids=encoded["input_ids"], attention_mask=encoded["attention_mask"], labels=labels).logits
    token_losses = F.cross_entropy(
        logits.flatten(0, 1), labels.flatten(), ignore_index=-100, label_smoothing=smoothing, reduction="none"
    ).view(labels.shape)
    counts = (labels != -100).sum(dim=1)
    expected = (token_losses.sum() / counts.sum()).item()
    micro_batch_means = [token_losses[rows].sum() / counts[rows].sum() for rows in (slice(0, 2), slice(2, 4))]
    mean_of_micro_batch_means = (sum(micro_batch_means) / 2).item()
    assert abs(expected - mean_of_micro_batch_means) > 0.05, "the data should tell the two normalisations apart"

    results = {}
    for batch_size, accumulation in ((2, 2), (4, 1)):
        model, tokenizer = load_model_dir(tiny_model_dir)
        args = training_arguments(
            tmp_path / f"run-{batch_size}x{accumulation}",
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            label_smoothing_factor=smoothing,
            max_steps=1,
            optim="sgd",  # the update is lr * gradient, so a loss scaled by 2 would show in the weights
            learning_rate=0.5,
            lr_scheduler_type="constant",
            warmup_steps=0,
            max_grad_norm=0.0,  # no clipping, which would hide a scaled gradient
            train_sampling_strategy="sequential",
            eval_strategy="no",
            save_strategy="no",
            load_best_model_at_end=False,
            disable_tqdm=True,
        )
        trainer = build_trainer(model, tokenizer, PAIRS, PAIRS, args)
        loss = trainer.train().training_loss
        results[batch_size] = (loss, {name: tensor.clone() for name, tensor in model.state_dict().items()})

    (accumulated_loss, accumulated_weights), (big_batch_loss, big_batch_weights) = results[2], results[4]
    assert accumulated_loss == pytest.approx(expected, rel=1e-4)
    assert big_batch_loss == pytest.approx(expected, rel=1e-4)
    assert not torch.allclose(big_batch_weights["lm_head.weight"], initial["lm_head.weight"])  # a step was taken
    for name, tensor in big_batch_weights.items():
        torch.testing.assert_close(accumulated_weights[name], tensor, rtol=1e-4, atol=1e-6, msg=name)


def test_finetune_script_improves_the_model_and_keeps_the_best_checkpoint(tiny_model_dir, tmp_path):
    """Fine-tunes the English-to-German model to translate German to English."""
    data = tmp_path / "data"
    data.mkdir()
    for split, pairs in (("train", SPLITS.train[:96]), ("dev", SPLITS.valid[:8])):
        (data / f"{split}.en").write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
        (data / f"{split}.de").write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    output_dir = tmp_path / "finetuned"
    # as saved, in the export's format: the Trainer must not write its own defaults (max_length=20) into it
    saved_generation = GenerationConfig.from_pretrained(tiny_model_dir).to_diff_dict()

    exit_code = load_script("finetune").main([
        str(tiny_model_dir),
        "--train", str(data / "train.de"), str(data / "train.en"),
        "--eval", str(data / "dev.de"), str(data / "dev.en"),
        "--src-lang", "de", "--tgt-lang", "en",
        "--output-dir", str(output_dir),
        "--max-steps", "24", "--eval-steps", "8", "--logging-steps", "4",
        "--batch-size", "8", "--gradient-accumulation-steps", "2",
        "--learning-rate", "3e-3", "--warmup-steps", "0", "--num-beams", "1", "--save-total-limit", "3",
    ])  # fmt: skip
    assert exit_code == 0

    state = json.loads((output_dir / "checkpoint-24" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 6 and losses[-1] < 0.7 * losses[0]
    evaluations = {entry["step"]: entry for entry in state["log_history"] if "eval_bleu" in entry}
    assert sorted(evaluations) == [8, 16, 24]
    best_step = max(evaluations, key=lambda step: (evaluations[step]["eval_bleu"], -step))  # first of the best
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best_step}")

    # The saved model is the best checkpoint's, not the last one's.
    saved = load_file(output_dir / "model.safetensors")
    best = load_file(output_dir / f"checkpoint-{best_step}" / "model.safetensors")
    assert saved.keys() == best.keys() and all(torch.equal(saved[name], best[name]) for name in saved)
    if best_step != 24:
        last = load_file(output_dir / "checkpoint-24" / "model.safetensors")
        assert not all(torch.equal(saved[name], last[name]) for name in saved)

    # Its summary holds BLEU and chrF of its translations of the evaluation set by the package's search (beam 1 as
    # asked, the GNMT penalty and input + 50 tokens), computed here again.
    summary = json.loads((output_dir / "training_summary.json").read_text())
    model = AutoModelForSeq2SeqLM.from_pretrained(output_dir)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    references, sources = zip(*SPLITS.valid[:8], strict=True)
    hypotheses = translate(model, tokenizer, list(sources), num_beams=1)
    assert summary["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [list(references)]).score)
    assert summary["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [list(references)]).score)
    assert summary["chrf"] > 0 and summary["bleu"] == pytest.approx(evaluations[best_step]["eval_bleu"])
    assert summary["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    assert (summary["steps"], summary["train_pairs"], summary["src_lang"], summary["tgt_lang"]) == (24, 96, "de", "en")
    assert summary["recipe"]["sentences_per_step"] == 16 and summary["recipe"]["label_smoothing"] == 0.1
    assert summary["recipe"]["selected by"] == "evaluation bleu"  # English references: BLEU applies

    assert GenerationConfig.from_pretrained(output_dir).to_diff_dict() == saved_generation
    assert json.loads((output_dir / "config.json").read_text())["custom_pipelines"].keys() == {
        "translation",
        "text2text-generation",
    }


def test_evaluation_translates_with_the_papers_search_and_warns_nothing(tiny_model_dir, tmp_path, caplog):
    """The Trainer's evaluation scores the package's one beam search (beam 4, GNMT alpha 0.6, input + 50), not
    generate() with labels; number words score no BLEU (0 by construction) and no warning reaches the user."""
    model, tokenizer = load_model_dir(tiny_model_dir)
    pairs = SPLITS.valid[:12]
    args = training_arguments(tmp_path, eval_steps=2, max_steps=2, per_device_eval_batch_size=4)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        trainer = build_trainer(model, tokenizer, SPLITS.train[:16], pairs, args)
        metrics = trainer.evaluate()
    hypotheses = translate(model, tokenizer, [s for s, _ in pairs], num_beams=4, length_penalty=0.6)
    references = [t for _, t in pairs]
    assert metrics["eval_exact_match"] == pytest.approx(
        100 * np.mean([h == r for h, r in zip(hypotheses, references, strict=True)])
    )
    assert metrics["eval_chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    assert "eval_bleu" not in metrics and args.metric_for_best_model == "exact_match"
    assert [str(w.message) for w in caught] == [] and [r.getMessage() for r in caplog.records] == []
    with pytest.raises(ValueError, match="BLEU is 0 by construction on these evaluation pairs"):
        build_trainer(model, tokenizer, PAIRS, PAIRS, training_arguments(tmp_path, metric_for_best_model="bleu"))


def test_bad_inputs(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="unknown Seq2SeqTrainingArguments field"):
        training_arguments(tmp_path, label_smoothing=0.1)
    model, tokenizer = load_model_dir(tiny_model_dir)
    with pytest.raises(ValueError, match="no training pairs are left"):
        build_trainer(model, tokenizer, [(" ", "eins")], PAIRS, training_arguments(tmp_path))
    with pytest.raises(SystemExit):
        load_script("finetune").parse_args([str(tiny_model_dir), "--numbers", "8"])  # no --output-dir
    with pytest.raises(SystemExit):
        load_script("finetune").parse_args([str(tiny_model_dir), "--output-dir", str(tmp_path), "--train", "a", "b"])


def test_every_trainer_option_reaches_the_trainer(tiny_model_dir, tmp_path):
    """Trainer options the first, hand-written command lacked, and the shorthands it had, parse into the arguments."""
    model, data, args = load_script("finetune").parse_args([
        str(tiny_model_dir), "--numbers", "40", "--output-dir", str(tmp_path), "--bf16", "--use-cpu", "--report-to", "tensorboard",
        "--train-sampling-strategy", "group_by_length", "--push-to-hub", "--hub-model-id", "org/m", "--eval-steps", "7",
        "--batch-size", "5", "--num-epochs", "2", "--label-smoothing", "0.2", "--num-beams", "3",
        "--gradient_accumulation_steps", "3",
    ])  # fmt: skip
    assert (model, data.numbers) == (str(tiny_model_dir), 40)
    assert (args.bf16, args.report_to, args.train_sampling_strategy, args.push_to_hub, args.hub_model_id) == (
        True, ["tensorboard"], "group_by_length", True, "org/m",
    )  # fmt: skip
    assert (args.per_device_train_batch_size, args.per_device_eval_batch_size, args.num_train_epochs) == (5, 5, 2)
    assert (args.label_smoothing_factor, args.gradient_accumulation_steps) == (0.2, 3)
    assert load_script("finetune").parse_options([str(tiny_model_dir), "--numbers", "8", "--output-dir", "o",
                                                  "--num-beams", "3"]).search["num_beams"] == 3  # fmt: skip
    # Fine-tuning's defaults where the option is not given: the paper's Adam, checkpoints at each evaluation.
    assert (args.adam_beta2, args.adam_epsilon, args.learning_rate) == (0.98, 1e-9, 1e-4)
    assert (args.save_steps, args.eval_steps, args.load_best_model_at_end) == (7, 7, True)


class StopAt(TrainerCallback):
    """Stands for the process being killed after `step` optimizer steps (and the checkpoint saved there)."""

    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            control.should_training_stop = True


def test_an_interrupted_finetune_resumes_to_the_same_weights(tiny_model_dir, tmp_path):
    """Stopped after checkpoint-4 and resumed with --resume-from-checkpoint last, a run ends with the weights and
    optimizer state of the same run uninterrupted."""
    options = [
        "--numbers", "64", "--max-steps", "8", "--eval-steps", "4", "--logging-steps", "2", "--batch-size", "8",
        "--learning-rate", "3e-3", "--warmup-steps", "2", "--num-beams", "1", "--generation-max-length", "16",
        "--save-total-limit", "4", "--load-best-model-at-end", "false", "--seed", "3",
    ]  # fmt: skip
    finetune_script = load_script("finetune")
    assert finetune_script.main([str(tiny_model_dir), "--output-dir", str(tmp_path / "whole"), *options]) == 0

    interrupted = tmp_path / "interrupted"
    model_name, data, args = finetune_script.parse_args(
        [str(tiny_model_dir), "--output-dir", str(interrupted), *options]
    )
    model, tokenizer = load_model_dir(model_name)
    train_pairs, eval_pairs, _ = finetune_script.load_data(data)
    finetune(model, tokenizer, train_pairs, eval_pairs, args, callbacks=[StopAt(4)])
    assert sorted(path.name for path in interrupted.glob("checkpoint-*")) == ["checkpoint-4"]
    stopped = load_file(interrupted / "checkpoint-4" / "model.safetensors")
    assert (
        finetune_script.main(
            [str(tiny_model_dir), "--output-dir", str(interrupted), *options, "--resume-from-checkpoint", "last"]
        )
        == 0
    )

    whole, resumed = (
        load_file(tmp_path / run / "checkpoint-8" / "model.safetensors") for run in ("whole", "interrupted")
    )
    assert not all(torch.equal(stopped[name], resumed[name]) for name in stopped)  # it trained on from step 4
    for name, tensor in whole.items():
        torch.testing.assert_close(resumed[name], tensor, rtol=0, atol=1e-6, msg=name)
    whole_state, resumed_state = (
        json.loads((tmp_path / run / "checkpoint-8" / "trainer_state.json").read_text())
        for run in ("whole", "interrupted")
    )
    losses = [
        [entry["loss"] for entry in state["log_history"] if "loss" in entry] for state in (whole_state, resumed_state)
    ]
    assert losses[0] == pytest.approx(losses[1], abs=1e-6) and len(losses[0]) == 4


def test_finetune_help_is_short_grouped_and_spelled_as_the_cli(capsys):
    script = load_script("finetune")
    with pytest.raises(SystemExit):
        script.main(["--help"])
    text = capsys.readouterr().out
    assert len(text.splitlines()) < 110
    for group in ("data", "model: a LoRA adapter", "optimization", "evaluation and checkpoints", "decoding"):
        assert f"\n{group}" in text, group
    assert "--src-lang" in text and "--max-steps" in text and "--trainer-help" in text
    assert "--src_lang" not in text and "--max_steps" not in text and "--adafactor" not in text
    with pytest.raises(SystemExit):
        script.main(["--trainer-help"])
    assert "--gradient_checkpointing" in capsys.readouterr().out  # every Trainer option, still reachable
    with pytest.raises(SystemExit):
        script.parse_options(["m", "--numbers", "8", "--output-dir", "o", "--no-such-option", "1"])
    err = capsys.readouterr().err
    assert "unrecognized option --no-such-option" in err and "(--help lists finetune's" in err


def test_finetune_selects_by_the_named_metric_and_names_it(tiny_model_dir, tmp_path, caplog):
    """--numbers (one-word references): exact match by default; a named metric is the one kept and logged; local
    files are named by file, with no model-index."""
    data = tmp_path / "data"
    data.mkdir()
    for split, pairs in (("train", SPLITS.train[:32]), ("dev", SPLITS.valid[:6])):
        (data / f"{split}.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    output = tmp_path / "out"
    options = ["--train", str(data / "train.tsv"), "--eval", str(data / "dev.tsv"), "--output-dir", str(output),
               "--max-steps", "4", "--eval-steps", "2", "--batch-size", "8", "--num-beams", "1"]  # fmt: skip
    with caplog.at_level(logging.INFO):
        assert load_script("finetune").main([str(tiny_model_dir), *options, "--metric-for-best-model", "chrf"]) == 0
    state = json.loads((output / "checkpoint-4" / "trainer_state.json").read_text())
    chrfs = {entry["step"]: entry["eval_chrf"] for entry in state["log_history"] if "eval_chrf" in entry}
    best = max(chrfs, key=lambda step: (chrfs[step], -step))
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best}") and state["best_metric"] == chrfs[best]
    assert f"saved the model with eval chrf {chrfs[best]:.4g}" in caplog.text and "BLEU" not in caplog.text
    summary = json.loads((output / "training_summary.json").read_text())
    assert summary["local_data"] == "train.tsv (training) and dev.tsv (evaluation)" and "dataset" not in summary
    from vanilla_transformer.export.hub import model_card_data

    assert model_card_data(summary, "m").eval_results is None  # no model-index naming a file as a Hub dataset
