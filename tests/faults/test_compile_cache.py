"""The compile cache holds compiled code that torch unpickles (issue 56, cause 1): a cache file is loaded only if this
program wrote it for this user, and none other is put in torch's caches. Planted, linked, shared-writable, foreign,
cut or changed files, and artifacts whose keys would make torch write outside its cache folder, are one warning
naming the file, and nothing of theirs reaches torch's caches.

The artifacts here are made with torch's own recorder (private, as the package's reader of them), of AOTAutograd's
kind, whose loading writes each artifact's content under torch's cache folder at a path made from its key."""

import json
import logging
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate import PartialState
from fault_support import REPO
from tiny_model import TINY

from vanilla_transformer.training import compile_cache
from vanilla_transformer.training.compile_cache import load_compile_cache, save_compile_cache

KEY = "aotautograd-test-key"
CONTENT = b"compiled graph"


@pytest.fixture
def caches(tmp_path, monkeypatch, caplog):
    """(the compile cache file's path, torch's cache folder), each test with its own user cache (the record) and its
    own torch caches."""
    PartialState()
    monkeypatch.setenv("VANILLA_TRANSFORMER_CACHE", str(tmp_path / "user-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-cache"))
    caplog.set_level(logging.WARNING)
    folder = tmp_path / "data-cache"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    return folder / "compile-0123.bin", tmp_path / "torch-cache"


def _record(key: str, content: bytes = CONTENT) -> None:
    """Have torch's recorder hold one AOTAutograd artifact of `key`, as if this process had compiled it."""
    from torch.compiler._cache import CacheArtifactManager

    CacheArtifactManager._ensure_cache_artifacts_registered()
    CacheArtifactManager.clear()
    CacheArtifactManager.record_artifact("aot_autograd", key, content)


def _artifacts(key: str = KEY, content: bytes = CONTENT) -> bytes:
    """What `torch.compiler.save_cache_artifacts` gives for one AOTAutograd artifact of `key`."""
    _record(key, content)
    return torch.compiler.save_cache_artifacts()[0]


def _save(path, key: str = KEY) -> None:
    """`save_compile_cache` of one artifact, as a compiled run saves what it compiled."""
    _record(key)
    assert save_compile_cache(path)


def _loaded(torch_cache) -> list:
    """The artifacts' contents that loading put in torch's caches."""
    return [path for path in torch_cache.rglob("*") if path.is_file() and path.read_bytes() == CONTENT]


def _refused(caplog, path, reason: str) -> None:
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(path) in warnings[0] and reason in warnings[0], warnings
    assert "un-pickle" not in caplog.text and "Traceback" not in caplog.text


def test_what_this_program_saved_is_loaded(caches, caplog):
    path, torch_cache = caches
    _save(path)
    assert load_compile_cache(path) and len(_loaded(torch_cache)) == 1
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_planted_cache_file_is_not_loaded(caches, caplog):
    """A file this program did not write (a run folder's settings naming a folder from elsewhere), however valid."""
    path, torch_cache = caches
    path.write_bytes(_artifacts())
    os.chmod(path, 0o600)
    assert not load_compile_cache(path) and _loaded(torch_cache) == []
    _refused(caplog, path, "no record of writing it")


def test_a_planted_record_beside_the_file_is_not_believed(caches, caplog):
    """A tarball's folder may hold a record too: the program's own is kept elsewhere, in the user's cache."""
    path, torch_cache = caches
    _save(path)
    planted = path.parent / "planted"
    planted.mkdir()
    shutil.copy(path, planted / path.name)
    shutil.copy(compile_cache.default_cache_dir() / compile_cache.RECORD_FILE, planted / compile_cache.RECORD_FILE)
    assert not load_compile_cache(planted / path.name) and _loaded(torch_cache) == []
    _refused(caplog, planted / path.name, "no record of writing it")


def test_a_cache_file_that_is_a_link_is_not_followed(caches, caplog, tmp_path):
    path, torch_cache = caches
    elsewhere = tmp_path / "elsewhere" / path.name
    elsewhere.parent.mkdir()
    _save(elsewhere)
    path.symlink_to(elsewhere)
    assert not load_compile_cache(path) and _loaded(torch_cache) == []
    _refused(caplog, path, "symbolic link")


@pytest.mark.parametrize("writable", ["the file", "its folder"])
def test_a_cache_that_others_can_write_is_not_loaded(caches, caplog, writable):
    path, torch_cache = caches
    _save(path)
    os.chmod(path if writable == "the file" else path.parent, 0o666 if writable == "the file" else 0o777)
    assert not load_compile_cache(path) and _loaded(torch_cache) == []
    _refused(caplog, path, "can be written by others")


def test_a_cache_of_another_user_is_not_loaded(caches, caplog):
    if os.getuid() != 0:
        pytest.skip("giving a file to another user needs root")
    path, torch_cache = caches
    _save(path)
    os.chown(path, os.getuid() + 4242, -1)
    assert not load_compile_cache(path) and _loaded(torch_cache) == []
    _refused(caplog, path, f"belongs to user id {os.getuid() + 4242}")


@pytest.mark.parametrize("damage", ["cut short", "changed"])
def test_a_damaged_cache_is_one_warning_naming_the_file(caches, caplog, damage):
    path, torch_cache = caches
    _save(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "cut short" else data[:-1] + bytes([data[-1] ^ 1]))
    assert not load_compile_cache(path) and _loaded(torch_cache) == []
    _refused(caplog, path, "not what this program wrote there")


@pytest.mark.parametrize("key", ["absolute", "parent"])
def test_an_artifact_key_that_leaves_torchs_cache_is_refused(caches, caplog, tmp_path, key):
    """Even in a file this program wrote (torch's recorder gave it such a key): nothing is written outside."""
    path, torch_cache = caches
    outside = tmp_path / "escaped"
    _save(path, str(outside) if key == "absolute" else f"../../{outside.name}")
    assert not load_compile_cache(path)
    assert not outside.exists() and _loaded(tmp_path) == []
    _refused(caplog, path, "names a path outside")


class MarkerPayload:
    """Unpickled, it creates the file `marker`: what a planted cache file could do to whoever unpickles it."""

    def __init__(self, marker) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


PLANTING_RESUME = """
import sys
from pathlib import Path
from vanilla_transformer.cli import main
from vanilla_transformer.training import trainer

planted, run = Path(sys.argv[1]).read_bytes(), sys.argv[2]
where = trainer.compile_cache_path

def planting(*args):
    path = where(*args)  # the exact file the run looks for, planted just before it looks
    path.write_bytes(planted)
    return path

trainer.compile_cache_path = planting
sys.exit(main(["train", "--resume", "--finish-again", "--output-dir", run, "--dynamo-backend", "eager"]))
"""


def test_train_resume_never_loads_a_compile_cache_planted_in_the_folder_its_run_names(caches, tmp_path):
    """End to end, through ``train --resume`` (issue 56, cause 1): a run folder from elsewhere whose
    training_config.json names a cache folder, which holds a planted ``compile-<key>.bin`` at the exact path the
    compiled run looks (Dynamo's eager backend: the cache is consulted as for any backend, without inductor's
    minutes). The run warns in one line naming the file, finishes, leaves the file where it was, and puts nothing of
    it in torch's caches: torch's own reader of its AOTAutograd cache, which unpickles what it finds there (as the
    next inductor compile would), finds nothing, and the payload's marker is never created."""
    path, torch_cache = caches
    folder, run, marker = path.parent, tmp_path / "run", tmp_path / "payload-ran"
    finished = subprocess.run(
        [sys.executable, "-m", "vanilla_transformer", "train", *TINY, "--max-steps", "1", "--save-every", "1",
         "--eval-every", "100", "--num-valid", "2", "--num-test", "2", "--data-cache-dir", str(folder),
         "--output-dir", str(run)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert json.loads((run / "training_config.json").read_text())["data_cache_dir"] == str(folder)
    planted = tmp_path / "planted.bin"
    payload = pickle.dumps(MarkerPayload(marker))
    planted.write_bytes(_artifacts(KEY, payload))
    resumed = subprocess.run(
        [sys.executable, "-c", PLANTING_RESUME, str(planted), str(run)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300,
    )  # fmt: skip
    assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-3000:]
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

    assert list(AOTAutogradCache.iterate_over_candidates(True, None, KEY)) == []
    assert not marker.exists()
    assert [found for found in torch_cache.rglob("*") if found.is_file() and found.read_bytes() == payload] == []
    named = [line for line in resumed.stderr.splitlines() if "compile-" in line and "is not loaded" in line]
    assert len(named) == 1 and "no record of writing it for this user" in named[0], resumed.stderr[-3000:]
    cache_file = Path(named[0].split("the compile cache ", 1)[1].split(" is not loaded", 1)[0])
    assert cache_file.parent == folder and cache_file.name.startswith("compile-")
    assert cache_file.read_bytes() == planted.read_bytes()  # not the program's to delete


LOAD_CAPPED = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from accelerate import PartialState
from vanilla_transformer.training.compile_cache import load_compile_cache
PartialState()
sys.exit(0 if load_compile_cache(Path(sys.argv[1])) is False else 3)
"""


@pytest.mark.parametrize("recorded", [True, False])
def test_a_20_gb_cache_file_is_refused_by_its_size_or_record_before_it_is_read(caches, tmp_path, recorded):
    """Issue 65, cause 3: the record is looked up and the size on disk judged before a byte is read, so a 20 GB file
    (sparse here) is one warning naming it, in a process whose memory could not hold it (capped at 4 GB)."""
    path, _ = caches
    if recorded:
        _save(path)  # the record names the file, with the size this program wrote; then it grows
    with open(path, "ab") as stream:
        stream.truncate(20 << 30)
    os.chmod(path, 0o600)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", LOAD_CAPPED, str(path)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    reason = "21,474,836,480 bytes" if recorded else "no record of writing it"  # by its size, or the record
    warnings = [line for line in result.stderr.splitlines() if "is not loaded" in line]
    assert len(warnings) == 1 and str(path) in warnings[0] and reason in warnings[0], result.stderr[-3000:]
