"""One reader for files the program did not write (issue 65, cause 3): the size on disk is judged before a byte is
read, the folder's rule on links applies, and parse and encoding errors are one line naming the file and the line:
a JSON Lines corpus with a lone surrogate or nesting too deep for the parser, a damaged CTranslate2 ``model.bin``.
(The compile cache's 20 GB file: test_compile_cache.py.)"""

import json
import os

import pytest
from fault_support import digest, one_line

from vanilla_transformer.reading import FileRefused, open_checked, parse_json, read_json

SURROGATE = '{"en": "thr\\ud83dee", "de": "drei"}'
DEEP = '{"en": ' + "[" * 100_000 + "]" * 100_000 + ', "de": "x"}'


@pytest.mark.parametrize(("line", "named"), [(SURROGATE, "lone surrogate"), (DEEP, "nested too deep")])
def test_a_jsonl_line_that_is_not_text_names_the_file_and_the_line(tmp_path, line, named):
    from vanilla_transformer.data import read_jsonl

    path = tmp_path / "train.jsonl"
    path.write_text('{"en": "one", "de": "eins"}\n' + line + "\n")
    with pytest.raises(ValueError, match=rf"^{path}:2: .*{named}") as raised:
        read_jsonl(path, "en", "de")
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(("line", "named"), [(SURROGATE, "lone surrogate"), (DEEP, "nested too deep")])
def test_finetune_on_such_a_corpus_is_one_line(tiny_model_dir, tmp_path, run_cli, line, named):
    corpus = tmp_path / "train.jsonl"
    corpus.write_text('{"en": "one", "de": "eins"}\n' + line + "\n")
    argv = ["finetune", tiny_model_dir, "--train", corpus, "--eval", corpus, "--src-lang", "en", "--tgt-lang", "de"]
    one_line(run_cli(*argv, "--max-steps", "1", "--output-dir", tmp_path / "out"), f"{corpus}:2:", named)


def test_the_reader_judges_size_and_kind_before_reading(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as stream:
        stream.truncate(20 << 30)  # sparse: 20 GB on disk, nothing to read before the refusal
    with pytest.raises(FileRefused, match=r"holds 21,474,836,480 bytes, more than the 1,024 a config may hold"):
        open_checked(big, "config", limit=1024)
    with pytest.raises(FileRefused, match="not a regular file"):
        open_checked("/dev/zero", "config", limit=1024)
    with pytest.raises(ValueError, match=rf"{tmp_path / 'cut.json'}:2: invalid JSON"):
        (tmp_path / "cut.json").write_text('{"a":\n')
        read_json(tmp_path / "cut.json")
    with pytest.raises(ValueError, match=r"^name:7: the string .* lone surrogate"):
        parse_json('["\\udc00"]', "name", 7)


def test_the_reader_applies_the_folders_rule_on_links(tmp_path):
    folder, outside = tmp_path / "folder", tmp_path / "outside.json"
    folder.mkdir()
    outside.write_text("{}")
    (folder / "config.json").symlink_to(outside)
    (folder / "inner.json").write_text("{}")
    (folder / "alias.json").symlink_to("inner.json")  # a link inside the folder is followed
    with pytest.raises(ValueError, match=f"{folder / 'config.json'} is a symbolic link to {outside}, outside the"):
        read_json(folder / "config.json", inside=folder)
    assert read_json(folder / "alias.json", inside=folder) == {}
    with pytest.raises(FileRefused, match="symbolic link"):
        open_checked(folder / "alias.json", "config", limit=1024, links=False)


@pytest.fixture(scope="module")
def ct2_export(tmp_path_factory, tiny_model_dir):
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.export.ctranslate2 import export_ctranslate2

    return export_ctranslate2(str(tiny_model_dir), tmp_path_factory.mktemp("ct2") / "export")


def _damage(data: bytes, how: str) -> bytes:
    return {
        "cut short": data[: len(data) // 2],
        "empty": b"",
        "random bytes": os.urandom(len(data)),
        "a byte too many": data + b"\0",
        "a wrong size": data[:4] + b"\xff\xff" + data[6:],
    }[how]


@pytest.mark.parametrize("how", ["cut short", "empty", "random bytes", "a byte too many", "a wrong size"])
def test_a_damaged_ctranslate2_model_bin_is_one_line(ct2_export, tiny_model_dir, tmp_path, run_cli, how):
    import shutil

    export = shutil.copytree(ct2_export, tmp_path / "ct2")
    path = export / "model.bin"
    path.write_bytes(_damage(path.read_bytes(), how))
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    before = digest(export)
    status, _, err = run_cli("translate", "--model", tiny_model_dir, "--ctranslate2", export, "--input", source)
    last = err.strip().splitlines()[-1]
    assert (
        status == 1 and f"{path} is not a complete CTranslate2 model" in last and "export the model again" in last
    ), err
    assert "Traceback" not in err and digest(export) == before


def test_an_undamaged_ctranslate2_model_bin_passes(ct2_export):
    from vanilla_transformer.serving.ctranslate2_file import check_model_bin

    check_model_bin(ct2_export)  # the layout CTranslate2 writes, walked to its end
    config = json.loads((ct2_export / "config.json").read_text())
    assert isinstance(config, dict)


@pytest.mark.parametrize(("text", "named"), [(DEEP, "nested too deep"), ('{"seed": "\\udc00"}', "lone surrogate")])
def test_a_runs_settings_and_a_models_summary_go_through_the_reader(tmp_path, text, named):
    """Config files and saved progress: a resumed run's training_config.json and a model's training_summary.json
    (a RecursionError or a string no encoder takes on main) are one ValueError naming the file."""
    from vanilla_transformer.model_summary import read_training_summary
    from vanilla_transformer.training.config import TrainingConfig

    path = tmp_path / "training_config.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"{path} is damaged \({path}: .*{named}"):
        TrainingConfig.load(path)
    with pytest.raises(ValueError, match=rf"^{path}: .*{named}"):
        read_training_summary(path)
