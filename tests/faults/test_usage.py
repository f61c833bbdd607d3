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
