"""The data, precision and training benchmarks and the length-penalty sweep refuse a bad option as the kit's
checks do (`bench.options.check`): one line naming the option, exit 1; not argparse's usage and exit 2, nor a
traceback once the corpus is built."""

import importlib

import pytest


@pytest.mark.parametrize(
    ("script", "argv", "says"),
    [
        ("benchmark_data", ["--pairs", "10", "--multi30k", "{tmp}", "--checkout", "a", "--compare-checkout", "b"],
         "--compare-checkout compares warm runs; --checkout runs cold only: pass one of them"),
        ("benchmark_data", ["--pairs", "10", "--multi30k", "{tmp}"], "--multi30k={tmp} has no train.en"),
        ("sweep_length_penalty", ["--run", "{tmp}", "--average", "2", "0"], "--average must be at least 1, got [2, 0]"),
        ("benchmark_precision", ["--steps", "0"], "--steps must be at least 1, got 0"),
        ("benchmark_precision", ["--test-sentences", "0"], "--test-sentences must be at least 1, got 0"),
        ("benchmark_training", ["--synthetic-pairs", "10", "--vocab-size", "100", "--model-size", "tiny"],
         "--vocab-size=100 is below the tokenizer's 263 tokens"),
        ("sweep_length_penalty", ["--run", "{tmp}"],
         "--run={tmp} is not a finished run directory (training_config.json and model/)"),
    ],
)  # fmt: skip
def test_a_bad_option_ends_the_command_in_one_line_naming_it(tmp_path, script, argv, says):
    module = importlib.import_module(script)
    with pytest.raises(SystemExit) as refused:
        module.main([word.replace("{tmp}", str(tmp_path)) for word in argv])
    assert str(refused.value) == says.replace("{tmp}", str(tmp_path))  # the message is the exit's: status 1


def test_the_data_benchmark_without_multi30k_says_where_to_point_it(monkeypatch):
    import benchmark_data

    monkeypatch.setattr(benchmark_data.options, "MULTI30K", None)  # no $VANILLA_TRANSFORMER_DATA
    with pytest.raises(SystemExit, match=r"^pass --multi30k, or set VANILLA_TRANSFORMER_DATA to the folder"):
        benchmark_data.main(["--pairs", "10"])
