"""User files are never lost (issue 56, cause 2): a folder that ``--force`` or a rewrite may replace is known by the
manifest of what this program wrote there, never by the names of the files in it, and anything else in it stops the
command, named."""

import shutil

import pytest
from fault_support import digest, one_line

from vanilla_transformer.written import MANIFEST, first_foreign, record_written


def test_a_folder_holds_only_what_was_written_while_nothing_is_added_changed_or_linked(tmp_path):
    folder = tmp_path / "written"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("a")
    (folder / "sub" / "b.bin").write_bytes(b"\0\1")
    names = ("a.txt", "sub/*.bin")
    record_written(folder, "maker", names)
    assert first_foreign(folder, "maker", names) is None
    assert "not of other" in first_foreign(folder, "other", names)
    (folder / "sub" / "mine.txt").write_text("mine")
    assert first_foreign(folder, "maker", names).startswith("sub/mine.txt, which maker did not write")
    (folder / "sub" / "mine.txt").unlink()
    (folder / "a.txt").write_text("b")  # same size, other bytes
    assert first_foreign(folder, "maker", names).startswith("a.txt, changed since")
    (folder / "a.txt").write_text("a")
    (folder / "empty").mkdir()
    assert first_foreign(folder, "maker", names).startswith("empty/, a folder")
    (folder / "empty").rmdir()
    (folder / "link").symlink_to(tmp_path)
    assert first_foreign(folder, "maker", names).startswith("link, a link")
    (folder / "link").unlink()
    (folder / MANIFEST).unlink()
    assert first_foreign(folder, "maker", names).startswith("a.txt, which maker did not write (the folder has no ")


@pytest.mark.filterwarnings("ignore:CTranslate2 runs int8")
def test_export_ctranslate2_force_keeps_a_users_folder_that_holds_a_model_bin(tiny_model_dir, tmp_path, run_cli):
    """A folder is not an export because it holds a file of an export's name: the user's notes and data stay."""
    pytest.importorskip("ctranslate2")
    mine = tmp_path / "mine"
    (mine / "data").mkdir(parents=True)
    (mine / "model.bin").write_bytes(b"my own weights")
    (mine / "notes.md").write_text("notes\n")
    (mine / "data" / "corpus.txt").write_text("text\n")
    before = digest(mine)
    one_line(run_cli("export-ctranslate2", tiny_model_dir, mine, "--force"), f"output_dir={mine}", "data,")
    assert digest(mine) == before
    ours = tmp_path / "ct2"
    assert run_cli("export-ctranslate2", tiny_model_dir, ours)[0] == 0
    assert run_cli("export-ctranslate2", tiny_model_dir, ours, "--force")[0] == 0  # its own export: replaced
    (ours / "notes.md").write_text("added by the user\n")
    before = digest(ours)
    one_line(run_cli("export-ctranslate2", tiny_model_dir, ours, "--force"), "notes.md, which export-ctranslate2")
    assert digest(ours) == before


@pytest.fixture(scope="module")
def onnx_export(tmp_path_factory, tiny_model_dir):
    pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
    pytest.importorskip("onnxscript", reason="the onnx extra (onnxscript) is not installed")
    from vanilla_transformer.export.onnx import export_onnx

    return export_onnx(tiny_model_dir, tmp_path_factory.mktemp("onnx") / "onnx")


@pytest.mark.parametrize("change", ["a file under js/", "a file changed"])
def test_export_onnx_force_keeps_what_the_user_added_or_changed(
    onnx_export, tiny_model_dir, tmp_path, run_cli, change
):
    folder = shutil.copytree(onnx_export, tmp_path / "onnx")
    if change == "a file under js/":
        (folder / "js").mkdir(exist_ok=True)
        (folder / "js" / "mine.js").write_text("// the user's\n")
        named = "js/"
    else:
        config = folder / "tokenizer_config.json"
        config.write_text(config.read_text().replace("{", '{"edited": true, ', 1))
        named = "tokenizer_config.json, changed since export-onnx wrote it"
    before = digest(folder)
    one_line(run_cli("export-onnx", tiny_model_dir, folder, "--force"), named, "not replaced")
    assert digest(folder) == before


def test_attention_never_writes_into_a_users_folder(tiny_model_dir, tmp_path, run_cli):
    mine = tmp_path / "figures"
    mine.mkdir()
    (mine / "cross_layer1.png").write_bytes(b"the user's figure")
    before = digest(mine)
    one_line(run_cli("attention", tiny_model_dir, "zwei drei", "--output-dir", mine), "cross_layer1.png")
    assert digest(mine) == before
    ours = tmp_path / "maps"
    argv = ["attention", tiny_model_dir, "zwei drei", "--output-dir", ours, "--layers", "1", "--kinds", "cross"]
    assert run_cli(*argv)[0] == 0
    assert sorted(path.name for path in ours.iterdir()) == sorted([MANIFEST, "cross_layer1.png"])
    assert run_cli(*argv)[0] == 0  # its own maps: written again
    (ours / "notes.txt").write_text("mine\n")
    one_line(run_cli(*argv), "notes.txt, which attention did not write")
    assert (ours / "notes.txt").read_text() == "mine\n"


def _same_file_spellings(tmp_path, monkeypatch, source):
    """`source` named as an output another way: as it is, as ./name from its folder, through a link to its folder."""
    monkeypatch.chdir(source.parent)
    (tmp_path / "linked").symlink_to(source.parent)
    return {
        "as given": source,
        "./name": f"./{source.name}",
        "through a linked folder": tmp_path / "linked" / source.name,
    }


@pytest.mark.parametrize("spelling", ["as given", "./name", "through a linked folder"])
def test_translate_never_writes_over_its_input(tiny_model_dir, tmp_path, monkeypatch, run_cli, spelling):
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    output = _same_file_spellings(tmp_path, monkeypatch, source)[spelling]
    one_line(run_cli("translate", "--model", tiny_model_dir, "--input", source, "--output", output), "--input=")
    one_line(run_cli("translate", "--model", tiny_model_dir, source, "--output", output), "FILE=")
    assert source.read_text() == "zwei drei\n"


@pytest.mark.parametrize("spelling", ["as given", "./name", "through a linked folder"])
def test_evaluate_never_writes_over_its_inputs(tiny_model_dir, tmp_path, monkeypatch, run_cli, spelling):
    source, reference = tmp_path / "in.txt", tmp_path / "ref.txt"
    source.write_text("zwei drei\n")
    reference.write_text("two three\n")
    output = _same_file_spellings(tmp_path, monkeypatch, reference)[spelling]
    argv = ["evaluate", "--model", tiny_model_dir, "--source", source, "--reference", reference]
    one_line(run_cli(*argv, "--output", output), "--output=", "--reference=")
    one_line(run_cli(*argv, "--results", output), "--results=", "--reference=")
    one_line(run_cli(*argv, "--output", tmp_path / "out.txt", "--results", tmp_path / "out.txt"), "--output=")
    assert reference.read_text() == "two three\n" and not (tmp_path / "out.txt").exists()


def _interrupt_after(monkeypatch, calls: int):
    """Make the search raise KeyboardInterrupt (Ctrl-C) when it is asked for its `calls`-th batch."""
    from vanilla_transformer.serving import search

    real, count = search.translate_ids, []

    def interrupted(*args, **kwargs):
        count.append(1)
        if len(count) == calls:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(search, "translate_ids", interrupted)


@pytest.mark.parametrize("to", ["--output", "standard output"])
def test_an_interrupted_translate_keeps_what_it_finished(tiny_model_dir, tmp_path, monkeypatch, run_cli, to):
    """Translations are written as they are made, in input order: a Ctrl-C part way through a file keeps the first
    window's translations, the same as an uninterrupted run's, and leaves an existing --output as it was."""
    from vanilla_transformer.cli.decoding import STREAM_WINDOW_BATCHES

    words = ["eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
    source = tmp_path / "in.txt"
    source.write_text("".join(f"{a} {b}\n" for a in words for b in words[:4]))  # 36 lines: 2 windows and a bit
    argv = ["translate", "--model", tiny_model_dir, "--input", source, "--batch-size", 1]
    status, complete, err = run_cli(*argv)
    assert status == 0, err
    first_window = complete.splitlines(keepends=True)[:STREAM_WINDOW_BATCHES]
    _interrupt_after(monkeypatch, STREAM_WINDOW_BATCHES + 3)  # in the second window
    output = tmp_path / "out.txt"
    output.write_text("the translations of last time\n")
    if to == "--output":
        status, out, err = run_cli(*argv, "--output", output)
        partial = tmp_path / "out.txt.partial"
        assert partial.read_text() == "".join(first_window)
        assert f"the first {STREAM_WINDOW_BATCHES} translations are in {partial}" in err
        partial.unlink()
    else:
        status, out, err = run_cli(*argv)
        assert out == "".join(first_window)
    assert status == 130 and err.splitlines()[-1] == "vanilla-transformer translate: interrupted", err
    assert output.read_text() == "the translations of last time\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.txt", "out.txt"]


def test_a_partial_file_of_an_earlier_run_is_not_replaced(tiny_model_dir, tmp_path, run_cli):
    source, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("zwei drei\n")
    (tmp_path / "out.txt.partial").write_text("kept\n")
    one_line(run_cli("translate", "--model", tiny_model_dir, source, "--output", output), "out.txt.partial exists")
    assert (tmp_path / "out.txt.partial").read_text() == "kept\n" and not output.exists()
