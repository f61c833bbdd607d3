"""Every option is checked at the start against everything that later consumes it (issue 38, cause 4): what the help
accepts never fails after training, and where the last step fails anyway the trained weights are kept."""

import json

import pytest

from vanilla_transformer import model_dir


def test_train_with_num_beams_1_trains_exports_a_greedy_model_and_translates(tmp_path, run_cli):
    from tiny_model import TINY

    run = tmp_path / "run"
    status, _, err = run_cli("train", *TINY, "--num-beams", 1, "--output-dir", run)
    assert status == 0, err
    saved = json.loads((run / "model" / "generation_config.json").read_text())
    assert saved["num_beams"] == 1 and "early_stopping" not in saved and "length_penalty" not in saved
    assert json.loads((run / "results.json").read_text())["step"] == 8
    status, out, err = run_cli("translate", "--model", run / "model", stdin=b"forty-two\n")
    assert status == 0 and len(out.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--metric-for-best-model", "accuracy"], "--metric-for-best-model=accuracy"),
        (["--report-to", "tensorboard"], "--report-to tensorboard"),
        (["--resume-from-checkpoint", "{tmp}/no-such-checkpoint"], "--resume-from-checkpoint"),
        (["--generation-num-beams", "0"], "--generation-num-beams"),
    ],
    ids=["unknown-metric", "missing-integration", "missing-checkpoint", "no-beams"],
)
def test_finetune_refuses_options_its_trainer_would_fail_on_before_loading_anything(
    options, named, tiny_model_dir, tmp_path, run_cli, monkeypatch
):
    from transformers.integrations import get_available_reporting_integrations

    if "tensorboard" in options and "tensorboard" in get_available_reporting_integrations():
        pytest.skip("tensorboard is installed here")
    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    options = [option.format(tmp=tmp_path) for option in options]
    argv = ["finetune", tiny_model_dir, "--numbers", "40", "--output-dir", tmp_path / "out", *options]
    status, _, err = run_cli(*argv)
    assert status == 1 and named in err and "Traceback" not in err, err
    assert loads == [] and not (tmp_path / "out").exists()


def test_a_finetune_whose_final_evaluation_fails_still_writes_the_trained_weights(
    tiny_model_dir, tmp_path, monkeypatch
):
    from transformers import Seq2SeqTrainer

    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.training.finetune import finetune, training_arguments

    model, tokenizer = load_model_dir(tiny_model_dir)
    pairs = [("one", "eins"), ("two", "zwei"), ("three", "drei"), ("four", "vier")]
    args = training_arguments(
        tmp_path / "out", max_steps=2, eval_strategy="no", save_strategy="no", load_best_model_at_end=False,
        per_device_train_batch_size=2, learning_rate=1e-2, use_cpu=True,
    )  # fmt: skip

    def failing_evaluate(self, *args, **kwargs):
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(Seq2SeqTrainer, "evaluate", failing_evaluate)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"final evaluation failed .*the trained model is saved in"):
        finetune(model, tokenizer, pairs, pairs, args)
    saved, _ = load_model_dir(tmp_path / "out")
    trained = saved.state_dict()
    assert any(not (trained[name] == before[name]).all() for name in before)  # the trained weights, not the base's
