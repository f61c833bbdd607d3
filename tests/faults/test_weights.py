"""Weights are checked by type, not trusted by name (issue 38, cause 3), and a refusal names what the user can act on
(cause 6): a safetensors header declaring another dtype for a weight of the same byte size, in a model directory or a
checkpoint; a LoRA adapter made for a base of another size; a folder whose auto_map asks to run its code."""

import hashlib
import json
import shutil
import struct

import pytest


def forge_dtype(path, tensor, dtype="I32"):
    """Rewrite the header of a safetensors file so that `tensor`, F32, is declared `dtype` (4 bytes too): every byte
    offset stays valid, only the meaning of the bytes changes."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = data[8 : 8 + length]
    start = header.index(f'"{tensor}"'.encode())
    at = header.index(b'"F32"', start)
    assert at < header.index(b"}", start)  # the dtype of this very tensor
    path.write_bytes(data[:8] + header[:at] + f'"{dtype}"'.encode() + header[at + 5 :] + data[8 + length :])


COMMANDS = {
    "translate": lambda model, text: ["translate", "--model", model, "--input", text],
    "evaluate": lambda model, text: ["evaluate", "--model", model, "--source", text, "--reference", text],
    "export-marian": lambda model, text: ["export-marian", model, text.parent / "marian"],
    "push --dry-run": lambda model, text: ["push", model, "org/name", "--dry-run", text.parent / "upload"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_weight_declared_with_another_dtype_is_refused_naming_the_file_and_tensor(
    command, model_copy, tmp_path, run_cli
):
    forge_dtype(model_copy / "model.safetensors", "model.shared.weight")
    text = tmp_path / "in.txt"
    text.write_text("forty-two\n")
    status, out, err = run_cli(*COMMANDS[command](model_copy, text))
    assert status == 1 and out == "", err
    assert f"{model_copy / 'model.safetensors'}: model.shared.weight is stored as I32" in err and "F32" in err, err
    assert len(err.strip().splitlines()) == 1


def test_the_same_file_with_its_true_dtype_translates(model_copy, tmp_path, run_cli):
    """The check refuses the forgery only: forging F32 back to F32 changes nothing."""
    forge_dtype(model_copy / "model.safetensors", "model.shared.weight", "F32")
    status, out, err = run_cli("translate", "--model", model_copy, "--num-beams", 1, stdin=b"forty-two\n")
    assert status == 0 and out.strip(), err


def _forge_checkpoint(checkpoint):
    forge_dtype(checkpoint / "model.safetensors", "model.shared.weight")
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    data = (checkpoint / "model.safetensors").read_bytes()
    manifest["files"]["model.safetensors"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("last", [1, 2])
def test_a_checkpoint_weight_declared_with_another_dtype_is_refused_by_average(tiny_run_dir, tmp_path, run_cli, last):
    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    newest = sorted((run / "checkpoints").iterdir())[-1]
    _forge_checkpoint(newest)
    status, _, err = run_cli("average", run, "--last", last, "--output", tmp_path / "avg")
    assert status == 1 and "model.shared.weight" in err and "torch.int32" in err, err
    assert not (tmp_path / "avg").exists()


def test_resume_refuses_a_checkpoint_weight_of_another_dtype(tiny_run_dir, tmp_path, run_cli):
    from tiny_model import TINY

    run = shutil.copytree(tiny_run_dir, tmp_path / "run")
    checkpoints = sorted((run / "checkpoints").iterdir())
    for checkpoint in checkpoints:
        _forge_checkpoint(checkpoint)
    status, _, err = run_cli("train", *TINY, "--output-dir", run, "--resume", "--max-steps", 12)
    assert status == 1 and f"{checkpoints[-1] / 'model.safetensors'}" in err and "torch.int32" in err, err


def test_a_lora_adapter_for_a_base_of_another_size_is_one_line_naming_both_sizes(tiny_model_dir, tmp_path, run_cli):
    from tiny_model import new_tiny_model

    from vanilla_transformer.model_dir import load_tokenizer, save_adapter_dir
    from vanilla_transformer.training.lora import add_lora

    other = new_tiny_model(vocab_size=400, d_model=48, encoder_ffn_dim=96, decoder_ffn_dim=96)
    adapter = add_lora(other, r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    adapter.peft_config["default"].base_model_name_or_path = str(tiny_model_dir)  # a base of d_model 32
    save_adapter_dir(adapter, load_tokenizer(tiny_model_dir), tmp_path / "adapter")
    status, out, err = run_cli("translate", "--model", tmp_path / "adapter", stdin=b"forty-two\n")
    assert status == 1 and out == "", err
    assert len([line for line in err.splitlines() if line.strip() and "it/s]" not in line]) == 1, (
        err
    )  # progress bars aside
    assert "48 in features" in err and "has 32" in err and str(tmp_path / "adapter") in err, err


def test_the_auto_map_refusal_names_the_file_and_the_code_and_says_how_to_inspect_it(model_copy, run_cli):
    (model_copy / "evil.py").write_text("raise SystemExit('ran')\n")
    settings = json.loads((model_copy / "config.json").read_text())
    settings.update(model_type="evil", auto_map={"AutoConfig": "evil.EvilConfig", "AutoModelForSeq2SeqLM": "evil.M"})
    (model_copy / "config.json").write_text(json.dumps(settings))
    for argv in (
        ["translate", "--model", model_copy],
        ["export-ctranslate2", model_copy, model_copy.parent / "ct2"],
        ["export-marian", model_copy, model_copy.parent / "marian"],
    ):
        status, _, err = run_cli(*argv, stdin=b"forty-two\n")
        assert status == 1 and len(err.strip().splitlines()) == 1, err
        assert f"{model_copy / 'config.json'} asks to run code from {model_copy / 'evil.py'}" in err, err
        assert "less " in err and "trust_remote_code=True" not in err, err
