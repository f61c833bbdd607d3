"""``--force`` and a rewrite delete only files the command writes (issue 65, cause 5): a file qualifies only if it
carries one of the names the command writes as well as being in the manifest, so a manifest anyone can write does not
make a user's files deletable; and a folder swap keeps a file that appeared while the command wrote."""

import hashlib
import json

import pytest
from fault_support import digest, one_line

from vanilla_transformer.written import MANIFEST

MAPS = ["--layers", "1", "--kinds", "cross"]


def _forge_manifest(folder, kind):
    """The manifest `kind` would write, listing every file of `folder` with its true size and hash."""
    files = {
        path.relative_to(folder).as_posix(): {
            "size": path.stat().st_size,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
    (folder / MANIFEST).write_text(json.dumps({"kind": kind, "files": files}))


@pytest.mark.filterwarnings("ignore:CTranslate2 runs int8")
def test_a_forged_manifest_does_not_let_export_ctranslate2_force_delete_a_users_files(
    tiny_model_dir, tmp_path, run_cli
):
    pytest.importorskip("ctranslate2")
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "data" / "corpus.txt").write_text("text\n")
    (mine / "notes.md").write_text("notes\n")
    _forge_manifest(mine, "export-ctranslate2")
    before = digest(mine)
    line = one_line(run_cli("export-ctranslate2", tiny_model_dir, mine, "--force"), f"output_dir={mine}")
    assert "data/corpus.txt, which export-ctranslate2 did not write" in line, line
    assert digest(mine) == before
    ours = tmp_path / "ct2"  # the command's own export is still replaced
    assert run_cli("export-ctranslate2", tiny_model_dir, ours)[0] == 0
    assert run_cli("export-ctranslate2", tiny_model_dir, ours, "--force")[0] == 0


def test_a_forged_manifest_does_not_let_attention_replace_a_users_folder(tiny_model_dir, tmp_path, run_cli):
    mine = tmp_path / "figures"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine\n")
    _forge_manifest(mine, "attention")
    before = digest(mine)
    one_line(run_cli("attention", tiny_model_dir, "zwei drei", "--output-dir", mine, *MAPS), "notes.txt")
    assert digest(mine) == before


@pytest.mark.parametrize("start", ["its own maps", "an empty folder", "no folder"])
def test_a_file_saved_into_the_folder_while_attention_replaces_it_is_kept(
    tiny_model_dir, tmp_path, run_cli, monkeypatch, start
):
    from vanilla_transformer.cli import attention

    folder = tmp_path / "maps"
    argv = ["attention", tiny_model_dir, "zwei drei", "--output-dir", folder, *MAPS]
    if start == "its own maps":
        assert run_cli(*argv)[0] == 0
    elif start == "an empty folder":
        folder.mkdir()
    real = attention.record_written

    def user_saves_meanwhile(written, *args, **kwargs):  # the new maps are written; the user saves a file meanwhile
        folder.mkdir(exist_ok=True)
        (folder / "notes.txt").write_text("saved while the maps were drawn\n")
        return real(written, *args, **kwargs)

    monkeypatch.setattr(attention, "record_written", user_saves_meanwhile)
    before = {name: data for name, data in digest(folder).items() if name != "notes.txt"}
    status, _, err = run_cli(*argv)
    last = err.splitlines()[-1]  # after the model's loading: the maps were drawn, then the swap refused
    assert status == 1 and f"--output-dir={folder}: notes.txt appeared in it" in last, err
    assert (folder / "notes.txt").read_text() == "saved while the maps were drawn\n"
    assert {name: data for name, data in digest(folder).items() if name != "notes.txt"} == before  # as it was
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".maps")]  # no temporary left
