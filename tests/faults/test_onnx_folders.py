"""An ONNX folder is checked before onnxruntime reads it, and ``export-onnx --force`` replaces only its own export
(issue 45, causes 1 and 2): a graph linked out of the folder, weights kept outside it, a file that is not ONNX, a
config.json that disagrees with the graphs or the tokenizer are one line naming the file; an ONNX folder given where
a model directory goes is named as such; ``--force`` never deletes a user's folder nor the model being exported, and
a ``--web`` export missing onnxruntime-web stops before the model is read."""

import json
import shutil

import pytest
from fault_support import digest, one_line

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra (onnxscript) is not installed")
import onnx

from vanilla_transformer.folder_kinds import DECODER_FILE, ENCODER_FILE


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tiny_model_dir):
    """The tiny model's ONNX folder (one export for the module; tests damage copies)."""
    from vanilla_transformer.export.onnx import export_onnx

    return export_onnx(tiny_model_dir, tmp_path_factory.mktemp("onnx") / "onnx")


@pytest.fixture
def onnx_copy(exported, tmp_path):
    return shutil.copytree(exported, tmp_path / "onnx")


def _translate(run_cli, folder, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("zwei drei\n")
    return run_cli("translate", "--model", folder, "--input", source)


def test_a_graph_linked_out_of_the_folder_is_not_read(run_cli, onnx_copy, tmp_path):
    outside = tmp_path / "elsewhere.onnx"
    shutil.move(onnx_copy / ENCODER_FILE, outside)
    (onnx_copy / ENCODER_FILE).symlink_to(outside)
    one_line(_translate(run_cli, onnx_copy, tmp_path), "symbolic link", "outside the ONNX folder")


def test_weights_kept_outside_the_folder_are_not_read(run_cli, onnx_copy, tmp_path):
    path = onnx_copy / ENCODER_FILE
    model = onnx.load(str(path))
    tensor = next(t for t in model.graph.initializer if t.name == "encoder.embed_tokens.weight")
    secret = tmp_path / "secret.bin"
    secret.write_bytes(tensor.raw_data)
    location = "../../secret.bin"  # onnx/ -> the folder -> tmp_path
    tensor.ClearField("raw_data")
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(secret.stat().st_size))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    path.write_bytes(model.SerializeToString())
    one_line(_translate(run_cli, onnx_copy, tmp_path), str(path), "outside the ONNX folder")


def test_a_file_that_is_not_onnx_is_named(run_cli, onnx_copy, tmp_path):
    (onnx_copy / DECODER_FILE).write_bytes(b"this is not a graph\n" * 10)
    one_line(_translate(run_cli, onnx_copy, tmp_path), str(onnx_copy / DECODER_FILE), "export-onnx")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"decoder_attention_heads": 2}, "decoder_attention_heads=2"),
        ({"decoder_layers": 3}, "decoder_layers=3"),
        ({"max_position_embeddings": 10**8}, "max_position_embeddings=100000000"),
        ({"vocab_size": 500}, "vocab_size=500"),
        ({"d_model": 64}, "d_model=64"),
        ({"pad_token_id": 3}, "tokenizer"),
    ],
    ids=lambda value: next(iter(value)) if isinstance(value, dict) else None,
)
def test_a_config_that_disagrees_with_the_graphs_is_named(run_cli, onnx_copy, tmp_path, change, named):
    path = onnx_copy / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    one_line(_translate(run_cli, onnx_copy, tmp_path), named)


@pytest.mark.parametrize(
    "argv",
    [
        ["attention", "{onnx}", "zwei"],
        ["push", "{onnx}", "me/model", "--dry-run", "{out}"],
        ["finetune", "{onnx}", "--numbers", "20", "--output-dir", "{out}", "--max-steps", "1"],
        ["export-ctranslate2", "{onnx}", "{out}"],
        ["export-marian", "{onnx}", "{out}"],
        ["export-onnx", "{onnx}", "{out}"],
    ],
    ids=lambda argv: argv[0],
)
def test_an_onnx_folder_given_for_a_model_directory_is_named(run_cli, exported, tmp_path, argv):
    pytest.importorskip("ctranslate2") if argv[0] == "export-ctranslate2" else None
    values = {"onnx": str(exported), "out": str(tmp_path / "out")}
    one_line(run_cli(*(arg.format(**values) for arg in argv)), "is an ONNX export, not a model directory")
    assert not (tmp_path / "out").exists()


def test_force_never_replaces_a_users_folder_holding_graphs(run_cli, tiny_model_dir, onnx_copy):
    (onnx_copy / ".git").mkdir()
    (onnx_copy / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (onnx_copy / "README.md").write_text("my model\n")
    before = digest(onnx_copy)
    one_line(run_cli("export-onnx", tiny_model_dir, onnx_copy, "--force"), "not replaced")
    assert digest(onnx_copy) == before


def test_force_never_replaces_the_folder_holding_the_model(run_cli, tiny_model_dir, onnx_copy):
    shutil.copytree(tiny_model_dir, onnx_copy / "model")
    before = digest(onnx_copy)
    one_line(run_cli("export-onnx", onnx_copy / "model", onnx_copy, "--force"), "the model being exported")
    assert digest(onnx_copy) == before


def test_a_web_export_missing_onnxruntime_web_stops_before_the_model_is_read(
    run_cli, tiny_model_dir, tmp_path, monkeypatch
):
    package = tmp_path / "node_modules" / "@huggingface" / "transformers"
    (package / "dist").mkdir(parents=True)
    (package / "dist" / "transformers.min.js").write_text("// bundle\n")
    (package / "package.json").write_text(json.dumps({"version": "3.0.0", "dependencies": {"onnxruntime-web": "1.0"}}))

    def never(*args, **kwargs):
        raise AssertionError("the model was read before the page's packages were found")

    monkeypatch.setattr("vanilla_transformer.export.onnx.load_model_dir", never)
    argv = ["export-onnx", tiny_model_dir, tmp_path / "site", "--web", "--transformers-js", package]
    one_line(run_cli(*argv), "onnxruntime-web")
    assert not (tmp_path / "site").exists()


def test_an_onnx_config_asking_for_remote_code_is_one_line_and_runs_nothing(run_cli, onnx_copy, tmp_path):
    """A config.json whose auto_map names code of the folder is refused as a model directory's is: one line naming the
    file and the code, transformers' multi-line question never printed, the code never run (issue 56, cause 7)."""
    ran = tmp_path / "the code ran"
    (onnx_copy / "planted.py").write_text(f"open({str(ran)!r}, 'w').close()\n")
    path = onnx_copy / "config.json"
    config = {**json.loads(path.read_text()), "model_type": "planted", "auto_map": {"AutoConfig": "planted.Config"}}
    path.write_text(json.dumps(config))
    line = one_line(_translate(run_cli, onnx_copy, tmp_path), str(path), "planted.py", "never runs code")
    assert "trust_remote_code" not in line and not ran.exists()


def _grow_tokenizer(folder, tokens: int) -> int:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    tokenizer.add_tokens([f"added{i}" for i in range(tokens)])
    tokenizer.save_pretrained(folder)
    return len(tokenizer)


def test_export_onnx_refuses_a_tokenizer_larger_than_the_vocabulary(run_cli, model_copy, tmp_path):
    """Ids past the embedding would index nothing: the PyTorch path refuses such a model directory, and so does the
    export, before writing anything."""
    size = _grow_tokenizer(model_copy, 20)
    vocab = json.loads((model_copy / "config.json").read_text())["vocab_size"]
    one_line(run_cli("export-onnx", model_copy, tmp_path / "out"), f"len(tokenizer)={size}", f"vocab_size={vocab}")
    assert not (tmp_path / "out").exists()


def test_an_onnx_folder_whose_tokenizer_outgrows_the_vocabulary_is_refused_before_its_graphs_open(
    run_cli, onnx_copy, tmp_path, monkeypatch
):
    from vanilla_transformer.serving import with_onnxruntime

    size = _grow_tokenizer(onnx_copy, 20)
    monkeypatch.setattr(with_onnxruntime, "_session", lambda *args, **kwargs: pytest.fail("a graph was opened"))
    one_line(_translate(run_cli, onnx_copy, tmp_path), f"len(tokenizer)={size}", "exceeds config.vocab_size")
