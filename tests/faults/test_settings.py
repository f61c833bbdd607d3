"""The README's promise on search settings, through the commands as a user types them (issue 25, item 4): a NaN,
infinite or negative length penalty, a negative --max-length-offset and a --num-beams below 1 stop translate, evaluate
and train with one line naming the option, before any file or model is read; the same values in a model's
generation_config.json are named with the file."""

import json

import pytest

BAD_OPTIONS = [
    ("--length-penalty", "nan"),
    ("--length-penalty", "inf"),
    ("--length-penalty", "-0.5"),
    ("--max-length-offset", "-1"),
    ("--num-beams", "0"),
    ("--num-beams", "-2"),
]


@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
@pytest.mark.parametrize("command", ["translate", "evaluate", "train"])
def test_a_search_option_that_cannot_work_is_refused_naming_it_before_anything_is_read(
    command, option, value, run_cli, tmp_path
):
    missing = tmp_path / "missing"  # nothing is read: a missing model or file would be named otherwise
    argv = {
        "translate": ["translate", "--model", missing, "--input", missing / "in.txt"],
        "evaluate": ["evaluate", "--model", missing, "--source", missing / "s", "--reference", missing / "r"],
        "train": ["train", "--preset", "numbers", "--output-dir", missing],
    }[command]
    status, out, err = run_cli(*argv, f"{option}={value}")
    assert status != 0, out
    assert option in err and "Traceback" not in err, err
    assert not missing.exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("num_beams", "4"), ("num_beams", 0), ("length_penalty", float("nan")), ("length_penalty", -1.0)],
)
def test_a_generation_config_that_cannot_work_is_named_by_translate(field, value, run_cli, model_copy, tmp_path):
    path = model_copy / "generation_config.json"
    settings = json.loads(path.read_text())
    settings.update({field: value, "length_penalty_type": "gnmt"})
    path.write_text(json.dumps(settings))  # NaN is written as the JSON extension NaN, which Python reads back
    source = tmp_path / "in.txt"
    source.write_text("forty-two\n")
    status, out, err = run_cli("translate", "--model", model_copy, "--input", source)
    assert status == 1 and out == "", err
    assert "generation_config.json" in err and field in err and "Traceback" not in err, err


@pytest.mark.parametrize("device", ["gpu", "cuda:99"])
def test_a_device_this_machine_lacks_is_named_before_the_model_loads(device, run_cli, tmp_path):
    missing, source = tmp_path / "missing", tmp_path / "in.txt"
    source.write_text("zwei drei\n")  # a missing input is named first, before torch loads (issue 67)
    status, _, err = run_cli("translate", "--model", missing, "--input", source, "--device", device)
    assert status == 1 and f"--device={device}" in err and "Traceback" not in err, err
