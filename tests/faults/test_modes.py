"""Weights files follow the umask like every other file a command writes (issue 45, cause 6a): safetensors writes
through a temporary of mode 0600, which left a run's weights alone unreadable to the group."""

import os
import stat

import torch
from safetensors.torch import save_file

from vanilla_transformer.atomic import write_directory


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def modes(folder) -> dict[str, int]:
    return {
        str(path.relative_to(folder)): stat.S_IMODE(path.stat().st_mode)
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_every_file_of_a_run_has_the_umask_s_mode(tiny_run_dir):
    files = modes(tiny_run_dir)
    assert any(name.endswith("model.safetensors") and "checkpoint" in name for name in files)
    assert "model/model.safetensors" in files
    expected = 0o666 & ~umask()
    assert {name: mode for name, mode in files.items() if mode != expected} == {}


def test_a_folder_written_whole_gives_its_weights_the_umask_s_mode(tmp_path):
    previous = os.umask(0o027)
    try:
        write_directory(
            tmp_path / "model", lambda folder: save_file({"w": torch.zeros(2)}, str(folder / "w.safetensors"))
        )
    finally:
        os.umask(previous)
    assert modes(tmp_path / "model") == {"w.safetensors": 0o640}
