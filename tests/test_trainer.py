"""The `Trainer`'s state and the settings' parts: a state handed from one trainer to another continues the run exactly
(and a copy that leaves out any part of it does not), the saved settings of older runs load, and ``train --help``
shows each option once, in its group, with the value of the job the command runs."""

import copy
import json
import re
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from tiny_model import SPLITS, TINY

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data.cache import build_token_cache
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import Trainer, TrainingConfig, build_model_config, build_parser, parse_args
from vanilla_transformer.training.config import OPTIONS, PARTS
from vanilla_transformer.training.options import GROUPS
from vanilla_transformer.training.presets import TRAINING_PRESETS
from vanilla_transformer.training.run_dir import RunLayout

REPOSITORY = Path(__file__).resolve().parent.parent
PARTS_OF_THE_STATE = ("model", "optimizer", "scheduler", "progress")


@pytest.fixture(scope="module")
def run_data(tmp_path_factory):
    """TINY's settings, its tokenizer and its training split in a token cache."""
    folder = tmp_path_factory.mktemp("trainer")
    config = parse_args([*TINY, "--output-dir", str(folder / "run")])
    tokenizer = train_tokenizer((text for pair in SPLITS.train for text in pair), config.model.vocab_size)
    corpus = build_token_cache([SPLITS.train], tokenizer, folder / "tokens", max_length=config.data.max_length)
    return config, tokenizer, corpus


def new_trainer(run_data, seed: int) -> Trainer:
    config, tokenizer, corpus = run_data
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(build_model_config(config.model))
    return Trainer(config, Accelerator(cpu=True), model, tokenizer, corpus)


def take_steps(trainer: Trainer, steps: int) -> list[float]:
    """`steps` optimizer steps on the trainer's own batches, dropout seeded alike; the summed loss of each."""
    torch.manual_seed(1234)
    batches = trainer.batches()
    return [trainer.train_step([next(batches)]).stats["loss"].item() for _ in range(steps)]


def same_state(first: dict, second: dict) -> bool:
    """Whether two (nested) states hold the same values, tensors compared exactly."""
    if isinstance(first, torch.Tensor):
        return isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, dict):
        return first.keys() == second.keys() and all(same_state(first[k], second[k]) for k in first)
    if isinstance(first, (list, tuple)):
        return len(first) == len(second) and all(same_state(a, b) for a, b in zip(first, second, strict=True))
    return first == second


def test_a_state_loaded_into_another_trainer_continues_the_run_exactly(run_data):
    """Trainer A takes 3 steps, its state is handed to trainer B (another initialization), then both take 3 more:
    the same losses and the same state after, weights, Adam's moments, schedule and position in the data."""
    first = new_trainer(run_data, seed=0)
    take_steps(first, 3)
    state = copy.deepcopy(first.state_dict())  # its CPU tensors are the live ones
    losses = take_steps(first, 3)

    second = new_trainer(run_data, seed=1)
    assert not same_state(second.state_dict()["model"], state["model"])
    second.load_state_dict(state)
    assert second.progress.step == 3 and second.scheduler.last_epoch == 3
    assert take_steps(second, 3) == losses
    assert same_state(second.state_dict(), first.state_dict())


@pytest.mark.parametrize("part", PARTS_OF_THE_STATE)
def test_a_copy_that_leaves_out_a_part_of_the_state_does_not_continue_the_run(run_data, part):
    """The broken copy restores all but `part` (that part stays the new trainer's own): the run then differs, so
    each part of the state matters and the test above can fail."""
    first = new_trainer(run_data, seed=0)
    take_steps(first, 3)
    state = copy.deepcopy(first.state_dict())
    losses = take_steps(first, 3)

    broken = new_trainer(run_data, seed=1)
    state[part] = copy.deepcopy(broken.state_dict()[part])
    broken.load_state_dict(state)
    assert take_steps(broken, 3) != losses or not same_state(broken.state_dict()["model"], first.state_dict()["model"])


def test_settings_saved_by_earlier_versions_load_and_save_the_same_file(tmp_path):
    """The committed runs' training_config.json files, most written by the flat TrainingConfig of earlier versions:
    each loads into the parts, its options are the file's own values (plus the options added since, at their
    defaults) and saving writes them back as they were. At least one file predates options added since."""
    files = sorted((REPOSITORY / "docs" / "results").glob("**/training_config.json"))
    defaults = TrainingConfig().options()
    assert files
    older = 0
    for file in files:
        saved = json.loads(file.read_text(encoding="utf-8"))
        config = TrainingConfig.load(file)
        options = config.options()
        assert {name: options[name] for name in saved} == saved, file
        added = {name: options[name] for name in options.keys() - saved.keys()}  # options newer than the run
        assert added == {name: defaults[name] for name in added}, file
        older += bool(added)
        config.save(tmp_path / "again.json")
        assert TrainingConfig.load(tmp_path / "again.json") == config
    assert older > 0  # the files of earlier versions are what this test is about
    assert config.data.src_lang == saved["src_lang"] and config.model.preset == saved["model"]


def test_the_committed_runs_lie_where_the_run_layout_says():
    """The layout on disk has not changed: each committed run holds its settings and log (and, once finished, its
    results) under the names `RunLayout` gives them, which are among the outputs it lists for the run (what
    ``--overwrite`` deletes)."""
    folders = sorted(file.parent for file in (REPOSITORY / "docs" / "results").glob("**/training_config.json"))
    assert folders
    for folder in folders:
        layout = RunLayout(folder)
        assert layout.settings.is_file() and layout.metrics.is_file(), folder
        outputs = layout.outputs(TrainingConfig.load(layout.settings).data)
        assert {path.name for path in (layout.settings, layout.metrics, layout.results, layout.checkpoints)} <= set(
            outputs
        )
    unfinished = [folder.name for folder in folders if not RunLayout(folder).results.is_file()]
    assert len(unfinished) < len(folders) and all(name.endswith("-stopped") for name in unfinished), unfinished


def test_every_option_is_in_exactly_one_part_and_unknown_ones_are_refused():
    assert len(OPTIONS) == sum(len(part.__dataclass_fields__) for part in PARTS.values())
    with pytest.raises(TypeError, match="unknown training settings: d_modle"):
        TrainingConfig.from_preset("numbers", d_modle=32)


@pytest.mark.parametrize("preset", ["numbers", "multi30k"])
def test_help_shows_each_default_once_in_its_group_as_the_command_runs(preset, monkeypatch):
    """``train --help`` (the numbers job) and ``train --preset multi30k --help`` show the values those jobs run with,
    not the dataclass defaults (100,000 steps, the base model), once each, under the part's group."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per option
    text = build_parser(preset).format_help()
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  --")}
    job = TrainingConfig.from_preset(preset).options()
    for option in ("max_steps", "model", "vocab_size", "warmup_steps"):
        line = lines["--" + option.replace("_", "-")]
        assert line.count("(default:") == 1 and line.endswith(f"(default: {job[option]})"), line
    assert job["max_steps"] == TRAINING_PRESETS[preset]["max_steps"] != 100_000
    titles = [
        line.rstrip(":") for line in text.splitlines() if line and not line.startswith(" ") and line.endswith(":")
    ]
    assert titles[-len(GROUPS) :] == list(GROUPS.values())
    shown = {option: re.findall(rf"^  --{option.replace('_', '-')}(?=[ ,]|$)", text, re.M) for option in OPTIONS}
    assert all(len(found) == 1 for found in shown.values()), shown  # a flag without a value ends its line
