"""The load errors of the libraries underneath are one line naming the file and what to do (issue 45, cause 5):
torch's refusal to unpickle a crafted ``pytorch_model.bin``, and its allocator's ``can't allocate memory``."""

import pytest
import torch
from fault_support import run_cli_process
from safetensors.torch import load_file


class Payload:
    """Unpickling this writes a file: what a crafted weights file could do instead."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('code ran')",)


@pytest.fixture
def pickled_model(model_copy, tmp_path):
    """The tiny model with its weights as a pickled ``pytorch_model.bin`` carrying code, and no model.safetensors."""
    weights = load_file(model_copy / "model.safetensors")
    torch.save({**weights, "payload": Payload(tmp_path / "marker")}, model_copy / "pytorch_model.bin")
    (model_copy / "model.safetensors").unlink()
    return model_copy


def test_translate_refuses_a_crafted_pickle_in_one_line_naming_it(pickled_model, tmp_path):
    completed = run_cli_process("translate", "--model", pickled_model, stdin=b"forty-two\n")
    err = completed.stderr.decode()
    assert completed.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(
        f"vanilla-transformer translate: error: {pickled_model / 'pytorch_model.bin'} is a pickle"
    )
    assert "exec" in lines[0] and "nothing in it was run" in lines[0]
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize("command", ["evaluate", "attention", "export-onnx"])
def test_every_command_that_loads_a_model_names_the_refused_pickle(command, pickled_model, tmp_path, run_cli):
    reference = tmp_path / "ref.de"
    reference.write_text("zweiundvierzig\n")
    argv = {
        "evaluate": ["evaluate", "--model", pickled_model, "--source", reference, "--reference", reference],
        "attention": ["attention", pickled_model, "forty-two", "--output-dir", tmp_path / "maps"],
        "export-onnx": ["export-onnx", pickled_model, tmp_path / "onnx"],
    }[command]
    status, _, err = run_cli(*argv)
    assert status == 1
    assert f"{pickled_model / 'pytorch_model.bin'} is a pickle that torch refuses to load" in err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "marker").exists()


def allocate_too_much(*args, **kwargs):
    """What torch's CPU allocator raises for more memory than there is (a real one, not a copy of its text)."""
    return torch.empty(1 << 50)


def test_a_model_too_large_for_memory_is_one_line_naming_its_config(model_copy, run_cli, monkeypatch):
    from vanilla_transformer import model_dir

    monkeypatch.setattr(model_dir.AutoModelForSeq2SeqLM, "from_pretrained", allocate_too_much)
    status, _, err = run_cli("translate", "--model", model_copy, stdin=b"forty-two\n")
    assert status == 1
    assert err.strip().splitlines() == [
        f"vanilla-transformer translate: error: the model of {model_copy} does not fit in the memory left (tried to "
        f"allocate 4.0 PiB): its size is set by {model_copy / 'config.json'}; free some memory or use a machine "
        "with more"
    ]


def test_memory_running_out_while_translating_is_one_line(tiny_model_dir, run_cli, monkeypatch):
    from vanilla_transformer.serving import search

    monkeypatch.setattr(search, "translate_ids", allocate_too_much)
    status, _, err = run_cli("translate", "--model", tiny_model_dir, "--batch-size", "8", stdin=b"forty-two\n")
    assert status == 1
    assert err.replace("\r", "\n").strip().splitlines()[-1] == (
        "vanilla-transformer translate: error: out of memory (tried to allocate 4.0 PiB); give smaller inputs (or a "
        "smaller --batch-size), a smaller model, or use a machine with more memory"
    )
    assert "Traceback" not in err
