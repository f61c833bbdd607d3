"""Every low-level error leaving a command names the file and the fix, with no traceback (issue 25, item 6); and no
model folder runs code, whatever standard input answers (item 1)."""

import json

import pytest
from fault_support import run_cli_process

FIX = "copy, export or download the model directory again"


def _truncate(path, keep):
    path.write_bytes(path.read_bytes()[:keep] if keep >= 0 else path.read_bytes()[:keep])


def _edit_json(path, **changes):
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


DAMAGES = {
    "empty-weights": ("model.safetensors", lambda p: p.write_bytes(b"")),
    "cut-weights-header": ("model.safetensors", lambda p: _truncate(p, 100)),
    "cut-weights-end": ("model.safetensors", lambda p: _truncate(p, -1000)),
    "bad-config-json": ("config.json", lambda p: p.write_text('{"model_type": ')),
    "empty-config-json": ("config.json", lambda p: p.write_text("")),
    "bad-tokenizer-json": ("tokenizer.json", lambda p: _truncate(p, 50)),
    "bad-tokenizer-config": ("tokenizer_config.json", lambda p: p.write_bytes(b"\xff\xfe")),
    "bad-generation-config": ("generation_config.json", lambda p: p.write_text("{,}")),
    "config-not-an-object": ("config.json", lambda p: p.write_text("[]")),
    "tokenizer-of-another-shape": ("tokenizer.json", lambda p: p.write_text('{"version": "1.0"}')),
    "weights-of-nothing": ("model.safetensors", lambda p: p.write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")),
    "config-of-another-size": ("config.json", lambda p: _edit_json(p, vocab_size=7)),
}

COMMANDS = {
    "translate": lambda model, text: ["translate", "--model", model, "--input", text],
    "evaluate": lambda model, text: ["evaluate", "--model", model, "--source", text, "--reference", text],
    "attention": lambda model, text: ["attention", model, "forty-two", "--output-dir", text.parent / "maps"],
    "export-marian": lambda model, text: ["export-marian", model, text.parent / "marian"],
}


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_names_a_damaged_model_file_without_a_traceback(command, damage, run_cli, model_copy, tmp_path):
    name, spoil = DAMAGES[damage]
    spoil(model_copy / name)
    text = tmp_path / "in.txt"
    text.write_text("forty-two\n", encoding="utf-8")
    status, out, err = run_cli(*COMMANDS[command](model_copy, text))
    assert status == 1, err
    assert (str(model_copy / name) in err or (str(model_copy) in err and name in err)) and FIX in err, err


def test_a_damaged_model_reaches_the_user_as_one_line_in_a_real_process(model_copy, tmp_path):
    (model_copy / "model.safetensors").write_bytes(b"")
    completed = run_cli_process("translate", "--model", model_copy, stdin=b"forty-two\n")
    assert completed.returncode == 1
    err = completed.stderr.decode()
    assert "Traceback" not in err and f"{model_copy / 'model.safetensors'} is not a complete safetensors file" in err


@pytest.mark.parametrize("foreign_class", [False, True], ids=["own-class", "foreign-class"])
@pytest.mark.parametrize("config_file", ["tokenizer_config.json", "config.json"])
def test_auto_map_code_in_a_model_folder_never_runs_even_when_stdin_says_yes(
    config_file, foreign_class, model_copy, tmp_path
):
    """A crafted folder names its own class in auto_map; loading must use the package's classes and never ask."""
    witness = tmp_path / "code-ran"
    (model_copy / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(witness)!r}).write_text('ran')\n"
        "from transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
        "from transformers import PretrainedConfig as EvilConfig\n"
    )
    settings = json.loads((model_copy / config_file).read_text())
    if config_file == "tokenizer_config.json":
        settings["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", "evil.EvilTokenizer"]}
        if foreign_class:  # no class of transformers' own serves it: transformers would ask
            settings["tokenizer_class"] = "EvilTokenizer"
    else:
        settings["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForSeq2SeqLM": "evil.EvilConfig"}
        if foreign_class:
            settings["model_type"] = "evil"
    (model_copy / config_file).write_text(json.dumps(settings))
    source = tmp_path / "in.txt"
    source.write_text("forty-two\n")
    # the cases: translate through tokenizer_config.json, evaluate through config.json
    if config_file == "tokenizer_config.json":
        argvs = [["translate", "--model", model_copy, "--num-beams", 1]]
    else:
        argvs = [["evaluate", "--model", model_copy, "--source", source, "--reference", source, "--num-beams", 1]]
    for argv in argvs:
        completed = run_cli_process(*argv, stdin=b"y\n")
        assert not witness.exists(), f"{argv[0]} ran the folder's code"
        assert "Do you wish to run the custom code" not in completed.stdout.decode() + completed.stderr.decode()
        assert "Traceback" not in completed.stderr.decode()
        if foreign_class:
            assert completed.returncode == 1 and str(model_copy) in completed.stderr.decode()
