"""Every numeric option has a range, declared where the option is and checked as the command line parses (issue 56,
cause 4): NaN, infinity and values out of range are one line naming the option, exit status 1, before anything is
read, trained or drawn; what a model decides (its positions) is checked once it is read."""

import argparse
import os

import pytest

from vanilla_transformer import parsing
from vanilla_transformer.cli import COMMANDS, main


def _parsers_of(command: str, monkeypatch) -> list[argparse.ArgumentParser]:
    """Every `CommandParser` the command builds for ``--help``."""
    built = []
    original = parsing.CommandParser.__init__

    def record(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(parsing.CommandParser, "__init__", record)
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    monkeypatch.undo()
    return built


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_numeric_option_of_every_command_declares_its_range(command, monkeypatch, capsys):
    """An option that takes a number takes it through a `parsing.Range` (int or float, with its bounds): none is a
    bare ``type=int`` or ``type=float``, which lets NaN, infinity, 0 or -1 through to the work."""
    parsers = _parsers_of(command, monkeypatch)
    capsys.readouterr()
    assert parsers, command
    numeric = [action for parser in parsers for action in parser._actions if action.type in (int, float)]
    assert numeric == [], [action.option_strings or action.dest for action in numeric]
    ranged = [action for parser in parsers for action in parser._actions if isinstance(action.type, parsing.Range)]
    for action in ranged:
        declared = action.type
        assert declared.kind in (int, float) and (declared.low is not None or declared.high is not None), action


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["train", "--lr-scale", "nan"], "--lr-scale must be finite and positive, got --lr-scale=nan"),
        (["train", "--lr-scale", "-1"], "--lr-scale must be finite and positive, got --lr-scale=-1.0"),
        (["train", "--max-grad-norm", "nan"], "--max-grad-norm must be finite and positive"),
        (["train", "--max-grad-norm", "inf"], "--max-grad-norm must be finite and positive"),
        (["train", "--dropout", "1.5"], "--dropout must be finite and in [0, 1)"),
        (["train", "--seed", "-1"], "--seed must be in [0, 4294967295]"),
        (["train", "--dynamo-backend", "tvm"], "--dynamo-backend must be one of no, auto, inductor"),
        (["train", "--dynamo-backend", "aot_ts_nvfuser"], "got --dynamo-backend='aot_ts_nvfuser'"),
        (["attention", "m", "zwei", "--dpi", "10000000"], "--dpi must be in [1, 1200], got --dpi=10000000"),
        (["translate", "--model", "m", "--num-threads", "1000000"], "--num-threads must be in [1, "),
        (["evaluate", "--model", "m", "--source", "s", "--reference", "r", "--num-threads", "0"], "--num-threads"),
        (["train-tokenizer", "--numbers", "10", "--vocab-size", "-5", "--output-dir", "t"], "--vocab-size"),
        (["demo", "m", "--port", "70000"], "--port must be in [0, 65535]"),
    ],
    ids=lambda value: " ".join(value[:1] + value[-2:]) if isinstance(value, list) else None,
)
def test_a_number_out_of_its_range_is_one_line_naming_the_option_before_any_work(
    argv, named, run_cli, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # nothing may be written: the run directory, the tokenizer, the images would land here
    status, _, err = run_cli(*argv)
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 1 and len(lines) == 1 and named in lines[0], err
    assert list(tmp_path.iterdir()) == []


def test_num_threads_is_bounded_by_this_machines_processors(run_cli, tmp_path):
    processors = os.cpu_count() or 1
    status, _, err = run_cli("translate", "--model", tmp_path / "m", "--num-threads", processors + 1)
    assert status == 1 and f"--num-threads must be in [1, {processors}]" in err, err


def test_a_max_length_offset_beyond_the_models_positions_is_named_with_them(run_cli, tiny_model_dir, tmp_path):
    """No output is longer than the model's positions: an offset past them (10^20 overflowed torch's integers) is
    refused naming the option and the most it can be; the positions themselves still translate."""
    import json

    positions = json.loads((tiny_model_dir / "config.json").read_text())["max_position_embeddings"]
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    status, _, err = run_cli("translate", "--model", tiny_model_dir, source, "--max-length-offset", 10**20)
    assert status == 1 and "Traceback" not in err, err
    assert (
        f"--max-length-offset=100,000,000,000,000,000,000 is beyond the model's max_position_embeddings={positions}"
        in err
    )
    status, out, err = run_cli("translate", "--model", tiny_model_dir, source, "--max-length-offset", positions)
    assert status == 0 and len(out.splitlines()) == 1, err
