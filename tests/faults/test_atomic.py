"""Every write that replaces a folder is atomic and refuses what it did not create (issue 25, item 3), tested on
`vanilla_transformer.atomic.write_directory` with real processes SIGKILLed at each of its points."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vanilla_transformer import atomic
from vanilla_transformer.atomic import PAUSE_ENV, write_directory

FILES = 20

# A writer in its own process: imports this checkout's atomic.py (no torch import, so it starts fast), writes FILES files that
# all hold its version, and may be told to use the fallback of two renames instead of the atomic exchange.
WRITER = textwrap.dedent(
    f"""
    import os, sys
    sys.path.insert(0, {str(Path(atomic.__file__).parents[1])!r})
    from vanilla_transformer import atomic
    if os.environ.get("NO_EXCHANGE"):
        atomic._exchange = lambda first, second: False
    target, version = sys.argv[1], sys.argv[2]
    def write(folder):
        for i in range({FILES}):
            (folder / f"part-{{i:02d}}.txt").write_text(version * 1000)
    atomic.write_directory(target, write, replaceable=lambda folder: (folder / "part-00.txt").is_file())
    """
)


def _write(script: Path, target: Path, version: str, *, pause: str | None = None, no_exchange: bool = False):
    env = {k: v for k, v in os.environ.items() if k not in (PAUSE_ENV, "NO_EXCHANGE")}
    if pause:
        env[PAUSE_ENV] = pause
    if no_exchange:
        env["NO_EXCHANGE"] = "1"
    return subprocess.Popen(
        [sys.executable, str(script), str(target), version], env=env, stderr=subprocess.PIPE, text=True
    )


def _versions(folder: Path) -> set[str]:
    """The versions the folder's files hold; a whole folder has all FILES files of one version."""
    files = sorted(folder.iterdir())
    assert [f.name for f in files] == [f"part-{i:02d}.txt" for i in range(FILES)], f"{folder} is not whole"
    contents = {f.read_text() for f in files}
    assert all(len(text) == 1000 for text in contents), f"{folder} holds a cut file"
    return {text[0] for text in contents}


@pytest.fixture
def writer(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return script


POINTS = [(point, False) for point in ("started", "written", "exchanged", "removing")] + [
    (point, True) for point in ("written", "set-aside", "exchanged", "removing")
]


@pytest.mark.parametrize(("point", "no_exchange"), POINTS, ids=[f"{p}{'-fallback' * f}" for p, f in POINTS])
def test_a_writer_killed_at_any_point_leaves_the_old_folder_or_the_new_one_whole(writer, tmp_path, point, no_exchange):
    target = tmp_path / "out" / "model"
    assert _write(writer, target, "A").wait() == 0
    assert _versions(target) == {"A"}
    process = _write(writer, target, "B", pause=point, no_exchange=no_exchange)
    line = process.stderr.readline()
    assert f"paused at {point}" in line, line + process.stderr.read()
    process.send_signal(signal.SIGKILL)
    process.wait()
    expected = {"A"} if point in ("started", "written") else {"B"}
    if point == "set-aside":  # the old folder is aside: the target is missing until the next writer puts it back
        assert not target.exists()
    else:
        assert _versions(target) == expected
    if point == "exchanged":  # the old folder waits for deletion under the name of the path that served
        (leftover,) = [path for path in target.parent.iterdir() if path.name != "model"]
        assert (".model.replaced-" if no_exchange else ".model.incomplete-") in leftover.name
        assert _versions(leftover) == {"A"}
    # The next write puts back what was set aside, clears what the killed writer left, and replaces the folder.
    assert _write(writer, target, "C").wait() == 0
    assert _versions(target) == {"C"}
    assert sorted(path.name for path in target.parent.iterdir()) == ["model"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_the_exchange_swaps_two_folders_in_one_step(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        (folder / "name").write_text(folder.name)
    assert atomic._exchange(first, second)
    assert (first / "name").read_text() == "second" and (second / "name").read_text() == "first"


def test_the_next_writer_puts_back_a_folder_set_aside(writer, tmp_path):
    target = tmp_path / "model"
    assert _write(writer, target, "A").wait() == 0
    process = _write(writer, target, "B", pause="set-aside", no_exchange=True)
    assert "paused at set-aside" in process.stderr.readline()
    process.send_signal(signal.SIGKILL)
    process.wait()
    atomic._recover(target)
    assert _versions(target) == {"A"}


def test_a_non_empty_folder_it_did_not_write_is_refused_and_kept(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    calls = []
    with pytest.raises(ValueError, match=r"--output=.*mine is a folder that is not empty and was not written"):
        write_directory(target, calls.append, replaceable=lambda folder: False, what="--output")
    assert calls == [] and (target / "thesis.tex").read_text() == "years of work"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine"]


def test_a_file_or_a_link_is_refused(tmp_path):
    file = tmp_path / "file"
    file.write_text("data")
    with pytest.raises(ValueError, match="not a folder"):
        write_directory(file, lambda folder: None, replaceable=lambda folder: True)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(ValueError, match="is a symbolic link .*never writes through a link"):
        write_directory(tmp_path / "link", lambda folder: None, replaceable=lambda folder: True)
    assert file.read_text() == "data" and (tmp_path / "link").is_symlink()


def test_a_failed_write_leaves_the_old_folder_and_no_temporary(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text("{}")

    def fail(folder):
        (folder / "config.json").write_text("")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_directory(target, fail, replaceable=lambda folder: True)
    assert (target / "config.json").read_text() == "{}"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model"]


def test_an_empty_folder_is_replaced_and_a_missing_one_created(tmp_path):
    (tmp_path / "empty").mkdir()
    for name in ("empty", "new/nested"):
        write_directory(tmp_path / name, lambda folder: (folder / "x").write_text("1"))
        assert (tmp_path / name / "x").read_text() == "1"


def test_write_file_replaces_a_file_whole_refuses_links_and_writes_to_pipes_directly(tmp_path):
    from vanilla_transformer.atomic import write_file

    target = tmp_path / "out.txt"
    target.write_text("old")
    write_file(target, "new\n")
    assert target.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    with pytest.raises(ValueError, match=f"{link} is a symbolic link"):
        write_file(link, "through the link\n")
    assert link.is_symlink() and target.read_text() == "new\n"  # the file it names is left as it was
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE, text=True)
    write_file(fifo, "to the pipe\n")
    assert reader.communicate(timeout=30)[0] == "to the pipe\n" and fifo.exists() and not fifo.is_file()


def test_add_pipeline_support_never_leaves_a_cut_config_json(tmp_path, monkeypatch):
    """config.json is rewritten through a temporary file: a failure while writing leaves the old one."""
    from vanilla_transformer import model_dir

    (tmp_path / "config.json").write_text('{"model_type": "vanilla_transformer"}')

    def failing_replace(source, destination):
        raise OSError("killed here")

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    with pytest.raises(OSError, match="killed here"):
        model_dir.add_pipeline_support(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text()) == {"model_type": "vanilla_transformer"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".config.json")]
