"""What a new user met at the command line (issue 45, cause 6): abbreviations, typed-wrong options, silence on an
empty input, where the trained model went, a slow ``--help``."""

import pytest

from vanilla_transformer.cli import COMMANDS


def run_expecting_exit(run_cli, *argv):
    """The exit status of a command that argparse ends with SystemExit."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(*argv)
    return exit_info.value.code


@pytest.mark.parametrize("command", list(COMMANDS))
def test_no_command_takes_an_abbreviated_option(command, run_cli, capsys):
    """``--hel`` is not ``--help``: every parser refuses a prefix of an option, naming it and the option meant."""
    status = run_expecting_exit(run_cli, command, "--hel")
    err = capsys.readouterr().err
    assert status == 2
    assert "--hel (did you mean --help?)" in err


def test_train_refuses_max_step_for_max_steps(run_cli, capsys, tmp_path):
    status = run_expecting_exit(run_cli, "train", "--max-step", "5", "--output-dir", tmp_path / "run")
    assert status == 2
    assert "unrecognized option --max-step (did you mean --max-steps?)" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_translate_names_a_mistyped_model_option_before_the_missing_one(run_cli, capsys, tiny_model_dir):
    status = run_expecting_exit(run_cli, "translate", "--modle", tiny_model_dir)
    err = capsys.readouterr().err
    assert status == 2
    assert "unrecognized option --modle (did you mean --model?)" in err
    assert "required" not in err


def test_an_option_like_no_other_is_named_without_a_guess(run_cli, capsys, tiny_model_dir):
    status = run_expecting_exit(run_cli, "translate", "--model", tiny_model_dir, "--zzzzzz")
    err = capsys.readouterr().err
    assert status == 2
    assert err.strip().endswith("unrecognized option --zzzzzz")


def test_finetune_names_an_option_neither_it_nor_the_trainer_knows_first(run_cli, capsys):
    status = run_expecting_exit(run_cli, "finetune", "--lerning-rate", "1e-4")
    err = capsys.readouterr().err
    assert status == 2
    assert "unrecognized option --lerning-rate (did you mean --learning-rate?)" in err


def test_negative_numbers_and_standard_input_are_values_not_options(run_cli, tiny_model_dir):
    status, out, err = run_cli("translate", "--model", tiny_model_dir, "--length-penalty", "0.6", "-", stdin=b"one\n")
    assert status == 0 and len(out.splitlines()) == 1, err
    status, _, err = run_cli("translate", "--model", tiny_model_dir, "--length-penalty", "-1", stdin=b"one\n")
    assert status == 1 and "--length-penalty" in err and "unrecognized" not in err  # the option's own check


@pytest.mark.parametrize("where", ["stdin", "file", "output"])
def test_translate_says_that_an_empty_input_is_empty(where, run_cli, tiny_model_dir, tmp_path):
    """An empty input is not an error (its translation is empty, exit status 0), but the user is told, on stderr,
    naming the input; and no progress bar is drawn ("translating: 0it") after that note."""
    empty = tmp_path / "empty.en"
    empty.write_bytes(b"")
    options = {"stdin": [], "file": [empty], "output": ["--input", empty, "--output", tmp_path / "out.de"]}[where]
    status, out, err = run_cli("translate", "--model", tiny_model_dir, *options)
    named = {"stdin": "standard input", "file": f"FILE={empty}", "output": f"--input={empty}"}[where]
    assert (status, out) == (0, "")
    assert f"vanilla-transformer translate: note: {named} is empty: nothing to translate" in err.splitlines()
    assert "translating" not in err, err  # the bar's label (desc="translating"); other libraries' bars may show
    if where == "output":
        assert (tmp_path / "out.de").read_bytes() == b""


def test_train_ends_by_saying_where_the_model_and_results_are(run_cli, tmp_path):
    from tiny_model import TINY

    run = tmp_path / "run"
    status, out, err = run_cli("train", *TINY, "--max-steps", "2", "--save-every", "2", "--output-dir", run)
    assert status == 0, err
    assert out.splitlines()[-2:] == [f"model: {run / 'model'}", f"results: {run / 'results.json'}"]
    assert (run / "model" / "config.json").is_file() and (run / "results.json").is_file()


def test_the_commands_page_has_a_row_for_every_command():
    from fault_support import REPO

    rows = [line for line in (REPO / "docs" / "commands.md").read_text().splitlines() if line.startswith("| `")]
    assert [name for name in COMMANDS if not any(f"`{name}`" in row.split(" | ")[0] for row in rows)] == []


def last_line(err: str) -> str:
    """The last line a terminal shows of `err` (a progress bar redraws its line with carriage returns)."""
    return err.replace("\r", "\n").strip().splitlines()[-1]


def test_an_error_during_training_is_the_last_line_not_the_progress_bar(run_cli, tmp_path, monkeypatch):
    """A full disk at a checkpoint: the error line ends the output; the training bar is closed before it."""
    import errno

    from tiny_model import TINY

    from vanilla_transformer.training import checkpoints

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoints, "save_file", no_space)
    status, _, err = run_cli("train", *TINY, "--output-dir", tmp_path / "run")
    assert status == 1
    assert "training" in err  # the bar was drawn
    assert last_line(err).startswith("vanilla-transformer train: error: ") and "No space left" in last_line(err)


def test_a_bar_that_a_library_left_open_is_closed_before_the_error_line(run_cli, tiny_model_dir, monkeypatch):
    """As the Trainer's bar in finetune: an object alive in the error's traceback holds an open bar."""
    from tqdm.auto import tqdm

    from vanilla_transformer.cli import translate

    def fails(args, sentences):
        bar = tqdm(total=len(sentences), desc="library work")
        bar.update(1)
        raise ValueError("the work failed")

    monkeypatch.setattr(translate, "translate_with_options", fails)
    status, _, err = run_cli("translate", "--model", tiny_model_dir, stdin=b"one\ntwo\n")
    assert status == 1
    assert "library work" in err  # the bar was drawn
    assert last_line(err) == "vanilla-transformer translate: error: the work failed"


@pytest.mark.parametrize(
    "command, typed, meant",
    [
        ("train", "--num-step", "--max-steps"),  # a step count, not --num-test (issue 67)
        ("finetune", "--num-step", "--max-steps"),
        ("train", "--out-dir", "--output-dir"),
        ("train", "--num-beam", "--num-beams"),
        ("translate", "--modle", "--model"),  # no family: the closest spelling
    ],
)
def test_a_mistyped_option_suggests_one_of_its_family(command, typed, meant, run_cli, capsys, tmp_path):
    argv = [command, "MODEL"] if command == "finetune" else [command]
    status = run_expecting_exit(run_cli, *argv, typed, "5", "--output-dir", tmp_path / "out")
    assert status == 2
    assert f"unrecognized option {typed} (did you mean {meant}?)" in capsys.readouterr().err
