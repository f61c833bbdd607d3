"""One check per value, wherever it comes from (issue 65, cause 2): the types that hold the settings check their
fields against the ranges the parsers declare, so that a resumed run's training_config.json, a checkpoint's saved
progress, finetune's pass-through Trainer options, an environment variable and an imported Marian config.json meet
the check the command line meets; a count is bounded by the work it asks for before that work starts. Each refusal is
one line naming the option, or the file and the field.

`test_every_way_a_value_enters_meets_the_one_check` walks every field of every such type: a numeric field added
without a range fails it."""

import dataclasses
import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest
from fault_support import digest, one_line, run_cli_process

from vanilla_transformer.parsing import Range

REPO = Path(__file__).resolve().parents[2]


def _outside(declared: Range):
    """A value of the right kind just outside `declared`."""
    return declared.kind(declared.low) - 1 if declared.low is not None else declared.kind(declared.high) + 1


def _edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def _one_line_process(completed, *expected) -> str:
    err = completed.stderr.decode(errors="replace")
    lines = [line for line in err.splitlines() if line.strip()]
    assert completed.returncode == 1 and "Traceback" not in err, err[-3000:]
    assert all(text in lines[-1] for text in expected), err[-3000:]
    return lines[-1]


@pytest.fixture
def run_copy(tiny_run_dir, tmp_path):
    return Path(shutil.copytree(tiny_run_dir, tmp_path / "run"))


# --------------------------------------------------------------------------------------------------------------------
# A resumed run's saved settings, a checkpoint's saved progress
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("lr_scale", -1), ("max_grad_norm", -1), ("adam_beta2", 1.5)])
def test_a_resumed_runs_saved_setting_out_of_its_range_is_named_with_the_file(field, value, run_copy, run_cli):
    """``lr_scale: -1`` trained backwards from the resumed run's second step, ``max_grad_norm: -1`` flipped the
    gradients' sign: both exited 0. Now the run is refused before any step, naming the file and the field."""
    settings = run_copy / "training_config.json"
    _edit_json(settings, **{field: value})
    before = digest(run_copy)
    line = one_line(run_cli("train", "--resume", "--output-dir", run_copy, "--max-steps", 10), str(settings))
    assert f"{field} must be" in line and f"{field}={value!r}" in line
    assert digest(run_copy) == before


def _set_progress(checkpoint: Path, **changes) -> None:
    """Change the progress a checkpoint restores, and its manifest to match (as an editor with the format would)."""
    from vanilla_transformer.training.state import load_state, save_state

    file = checkpoint / "training_state.safetensors"
    state = load_state(file)
    state["progress"].update(changes)
    save_state(state, file)
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    data = file.read_bytes()
    manifest["files"][file.name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"micro_batches": 10**9}, "micro_batches=1,000,000,000"),  # hung: a step gathering 10^9 micro-batches
        ({"micro_batch_tokens": float("inf")}, "micro_batch_tokens=inf"),  # a traceback (int(inf))
        ({"step": -3}, "step=-3"),
    ],
    ids=["micro-batches", "infinite-tokens", "negative-step"],
)
def test_a_checkpoints_saved_progress_that_cannot_be_resumed_is_named_with_its_file(change, named, run_copy):
    from vanilla_transformer.training.checkpoints import list_checkpoints

    checkpoint = list_checkpoints(run_copy / "checkpoints")[-1]
    _set_progress(checkpoint, **change)
    completed = run_cli_process("train", "--resume", "--output-dir", run_copy, "--max-steps", 10, timeout=240)
    _one_line_process(completed, str(checkpoint / "training_state.safetensors"), named)
    assert list_checkpoints(run_copy / "checkpoints")[-1] == checkpoint


# --------------------------------------------------------------------------------------------------------------------
# Counts bounded by the work they ask for
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "--num-train", 10**12, "--output-dir", "{tmp}/run"], "--num-train=1,000,000,000,000"),
        (["train", "--tokens-per-step", 10**15, "--output-dir", "{tmp}/run"], "--tokens-per-step=1000000000000000"),
        (["train-tokenizer", "--numbers", 10**12, "--vocab-size", 100, "--output-dir", "{tmp}/tok"], "--numbers="),
        (["finetune", "{model}", "--numbers", 10**12, "--output-dir", "{tmp}/ft"], "--numbers=1,000,000,000,000"),
    ],
    ids=["train-num-train", "train-tokens-per-step", "train-tokenizer-numbers", "finetune-numbers"],
)
def test_a_count_no_machine_finishes_is_refused_before_the_work_naming_the_option(
    argv, named, tiny_model_dir, tmp_path
):
    """Each of these ran until killed: 10^12 pairs of the numbers task generated one by one, a step gathering
    8 * 10^10 micro-batches. Each is now estimated against the memory it needs before it starts."""
    work = tmp_path / "work"
    work.mkdir()
    argv = [str(arg).format(tmp=work, model=tiny_model_dir) for arg in argv]
    completed = run_cli_process(*argv, timeout=240)
    line = _one_line_process(completed, named, "memory")
    assert len([text for text in completed.stderr.decode().splitlines() if text.strip()]) == 1, line
    assert list(work.iterdir()) == []


# --------------------------------------------------------------------------------------------------------------------
# finetune's pass-through Trainer options, the environment, an imported config.json
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--learning_rate", "inf"),  # saved NaN weights, exit 0
        ("--label_smoothing_factor", "1.5"),  # trained
        ("--num_train_epochs", "inf"),  # a traceback
        ("--gradient_accumulation_steps", "0"),  # a traceback
        ("--per_device_eval_batch_size", "0"),
    ],
)
def test_finetunes_pass_through_trainer_options_meet_its_own_ranges(
    option, value, tiny_model_dir, tmp_path, run_cli, monkeypatch
):
    from vanilla_transformer import model_dir

    loads = []
    monkeypatch.setattr(model_dir, "load_model_dir", lambda *args, **kwargs: loads.append(args))
    result = run_cli("finetune", tiny_model_dir, "--numbers", 40, "--output-dir", tmp_path / "out", option, value)
    one_line(result, f"{option} must be", f"{option}={float(value) if '.' in value or 'inf' in value else value}")
    assert loads == [] and not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1e9"])
def test_a_number_from_the_environment_is_checked_naming_the_variable(value, tiny_model_dir, tmp_path, run_cli,
                                                                       monkeypatch):  # fmt: skip
    source = tmp_path / "in.txt"
    source.write_text("forty-two\n")
    monkeypatch.setenv("VANILLA_TRANSFORMER_MAX_INPUT_BYTES", value)
    line = one_line(
        run_cli("translate", "--model", tiny_model_dir, "--input", source), "VANILLA_TRANSFORMER_MAX_INPUT"
    )
    assert "VANILLA_TRANSFORMER_MAX_INPUT_BYTES must be" in line and value in line


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    import torch
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    config = MarianConfig(
        vocab_size=40, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
        pad_token_id=39, decoder_start_token_id=39, eos_token_id=0,
    )  # fmt: skip
    folder = tmp_path_factory.mktemp("marian") / "marian"
    MarianMTModel(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("written", ['"32"', "64.5", "1e400", "true"])
def test_import_marian_refuses_a_config_size_of_the_wrong_json_type_in_one_line_as_translate(
    written, marian_dir, model_copy, tmp_path, run_cli
):
    """A size of the wrong JSON type was a traceback of huggingface_hub's strict dataclasses; translate refused the
    same field of its own config.json in one line. Both now meet the model configuration's one check."""
    source = Path(shutil.copytree(marian_dir, tmp_path / "m"))
    for folder in (source, model_copy):
        config = folder / "config.json"
        config.write_text(config.read_text().replace('"d_model": 32', f'"d_model": {written}'))
        assert written in config.read_text()
    shown = {'"32"': "'32'", "1e400": "inf", "true": "True"}.get(written, written)
    imported = one_line(run_cli("import-marian", source, tmp_path / "out", "--no-tokenizer"), f"d_model={shown}")
    assert str(source / "config.json") in imported and not (tmp_path / "out").exists()
    (tmp_path / "in.txt").write_text("forty-two\n")
    translated = one_line(run_cli("translate", "--model", model_copy, "--input", tmp_path / "in.txt"))
    assert imported.split("(", 1)[1] == translated.split("(", 1)[1]  # the same check, the same words


# --------------------------------------------------------------------------------------------------------------------
# Every way a value enters, through the one check
# --------------------------------------------------------------------------------------------------------------------


def _numeric(annotation) -> bool:
    return bool(re.search(r"\b(int|float)\b", str(annotation)))


def test_every_way_a_value_enters_meets_the_one_check(tmp_path, monkeypatch, capsys):
    """Every numeric field of each type that holds settings has a declared range, and a value just outside it is
    refused by each way it can enter: the command line, a saved training_config.json (naming the file and the field),
    a library call, a checkpoint's saved progress, finetune's pass-through Trainer options, the environment, the
    model's config.json. A field added without a range fails here."""
    from vanilla_transformer.configuration_vanilla_transformer import FIELD_RANGES, VanillaTransformerConfig
    from vanilla_transformer.constants import FINETUNE_RANGES
    from vanilla_transformer.training.config import OPTIONS, TrainingConfig, flag
    from vanilla_transformer.training.options import build_parser
    from vanilla_transformer.training.progress import RANGES as PROGRESS_RANGES
    from vanilla_transformer.training.progress import TrainingProgress
    from vanilla_transformer.training.ranges import RANGES

    # train: the command line, a saved run's file, a library call.
    numeric = [option for option, (_, field) in OPTIONS.items() if _numeric(field.type)]
    assert len(numeric) > 30 and sorted(set(numeric) - RANGES.keys()) == []
    parser = build_parser()
    for option in numeric:
        bad = _outside(RANGES[option])
        with pytest.raises(ValueError, match=re.escape(f"{flag(option)} must be")):
            parser.parse_args([flag(option), str(bad)])
        saved = tmp_path / "training_config.json"
        saved.write_text(json.dumps({**TrainingConfig().options(), option: bad}))
        with pytest.raises(ValueError, match=re.escape(f"{saved}: {option} must be")):
            TrainingConfig.load(saved)
        with pytest.raises(ValueError, match=re.escape(f"{flag(option)} must be")):
            TrainingConfig.from_options(**{option: bad})
        with pytest.raises(ValueError, match=re.escape(f"{flag(option)} must be")):
            TrainingConfig.from_options(**{option: "1"})  # a string where a number belongs: a hand-edited file

    # A checkpoint's saved progress.
    progress = dataclasses.asdict(TrainingProgress())
    assert progress.keys() == PROGRESS_RANGES.keys()
    for name, declared in PROGRESS_RANGES.items():
        with pytest.raises(ValueError, match=re.escape(f"progress {name} must be")):
            TrainingProgress().load_state_dict({**progress, name: _outside(declared)})

    # finetune: its own options declare the Trainer's ranges; the Trainer's own spelling meets them too.
    from vanilla_transformer.cli import finetune as finetune_cli

    own = {action.dest: action.type for action in finetune_cli.build_parser()._actions}
    for dest, names in {**{name: (name,) for name in own}, **finetune_cli.TRAINER_OPTIONS}.items():
        for name in names if dest in own else ():
            if name in FINETUNE_RANGES:
                assert own[dest] is FINETUNE_RANGES[name], dest  # one declaration, not a copy
    from transformers import Seq2SeqTrainingArguments

    trainer_fields = {field.name: field for field in dataclasses.fields(Seq2SeqTrainingArguments)}
    set_by_finetune = {name for names in finetune_cli.TRAINER_OPTIONS.values() for name in names}
    set_by_finetune |= {dest for dest, kind in own.items() if isinstance(kind, Range) and dest in trainer_fields}
    assert sorted(set_by_finetune - FINETUNE_RANGES.keys()) == []
    for name, declared in FINETUNE_RANGES.items():
        argv = ["model", "--numbers", "40", "--output-dir", str(tmp_path / "ft"), f"--{name}", str(_outside(declared))]
        with pytest.raises((ValueError, SystemExit)) as refused:  # SystemExit: an option finetune has itself
            finetune_cli.parse_options(argv)
        assert f"--{name} must be" in (capsys.readouterr().err if refused.type is SystemExit else str(refused.value))

    # The environment: no number is read from it but through `environment_number`, which names the variable.
    from vanilla_transformer.data.corpora import INPUT_LIMIT_ENV, input_limit

    sources = [path for path in (REPO / "vanilla_transformer").rglob("*.py")]
    unchecked = [
        str(path.relative_to(REPO))
        for path in sources
        if re.search(r"\b(int|float)\(\s*os\.(environ|getenv)", path.read_text(encoding="utf-8"))
    ]
    assert unchecked == []
    monkeypatch.setenv(INPUT_LIMIT_ENV, "0")
    with pytest.raises(ValueError, match=f"{INPUT_LIMIT_ENV} must be at least 1"):
        input_limit()

    # The model's configuration: every numeric field has a range (the token ids and init_std have their own rules).
    annotations = VanillaTransformerConfig.__annotations__
    own_rules = {"init_std", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"}
    numeric_fields = {name for name, kind in annotations.items() if _numeric(kind)}
    assert sorted(numeric_fields - FIELD_RANGES.keys() - own_rules) == []
    for name, (kind, low, _) in FIELD_RANGES.items():
        for bad in (kind(low) - 1, "1", True):
            with pytest.raises(ValueError, match=re.escape(f"{name} must be")):
                VanillaTransformerConfig(**{name: bad})
    for name in own_rules:
        with pytest.raises(ValueError, match=re.escape(f"{name} must be")):
            VanillaTransformerConfig(**{name: -1})
    # train's model options take the values the configuration takes (the remote-code file cannot import the ranges)
    model_fields = {"vocab_size": "vocab_size", "d_model": "d_model", "layers": "encoder_layers",
                    "heads": "encoder_attention_heads", "ffn_dim": "encoder_ffn_dim", "dropout": "dropout"}  # fmt: skip
    for option, name in model_fields.items():
        kind, low, high = FIELD_RANGES[name]
        declared = RANGES[option]
        assert (declared.kind, declared.low, declared.high, declared.high_open) == (kind, low, high, high is not None)
