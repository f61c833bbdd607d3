"""Ids and names end up in code and metadata (issue 56, cause 3): a repository id is checked by the Hub's own rules
before anything is written, and every value written into a Space's app.py or its README's YAML is written as data,
so that none can end a string or a docstring and add a statement, nor add a key to the metadata."""

import ast

import pytest
from fault_support import one_line
from huggingface_hub import metadata_load

HOSTILE_IDS = [
    "../escape",
    "org/name/extra",
    'org/x"""\nimport os\nos.system("echo planted")\n"""',
    "org/name\nsdk: docker\napp_port: 8080",
]


@pytest.mark.parametrize("option", ["repo_id", "--space", "--base-model"])
@pytest.mark.parametrize("hostile", HOSTILE_IDS, ids=["parent", "three-parts", "docstring", "yaml-keys"])
def test_push_refuses_an_id_the_hub_would_not_take_before_writing(tiny_model_dir, tmp_path, run_cli, option, hostile):
    target = tmp_path / "upload"
    argv = ["push", tiny_model_dir, "org/numbers", "--dry-run", target, "--space", "org/demo"]
    if option == "repo_id":
        argv[2] = hostile
    elif option == "--space":
        argv[-1] = hostile
    else:
        argv = ["push", tiny_model_dir, "org/numbers", "--dry-run", target, "--base-model", hostile]
    one_line(run_cli(*argv), f"{option}={hostile!r}" if option != "repo_id" else f"repo_id={hostile!r}")
    assert sorted(path.name for path in tmp_path.iterdir()) == []


def _app_statements(app: str) -> list[str]:
    """The kinds of the top-level statements of a generated app.py, and its MODEL's value."""
    tree = ast.parse(app)
    return [type(node).__name__ for node in tree.body]


@pytest.mark.parametrize(
    "model",
    [
        './runs/x"""\nimport os\nos.system("echo planted")\n"""',  # a local path: written as it is, as a literal
        "/models/it's \\ here\n",
    ],
)
def test_a_space_writes_its_values_as_data(tmp_path, model):
    from vanilla_transformer.demo.space import MODEL_VARIABLE, write_space

    title = 'demo"\n---\nsdk: docker\napp_port: 8080\n'
    folder = write_space(tmp_path / "space", model, title=title)
    app = (folder / "app.py").read_text()
    assert _app_statements(app) == ["Expr", "Import", "ImportFrom", "Assign", "Assign", "If"]
    assignment = ast.parse(app).body[3]
    call = assignment.value
    assert [ast.literal_eval(argument) for argument in call.args] == [MODEL_VARIABLE, model]
    metadata = metadata_load(folder / "README.md")
    expected = {"title", "sdk", "sdk_version", "app_file", "license", "emoji", "colorFrom", "colorTo", "pinned"}
    assert set(metadata) == expected and metadata["title"] == title and metadata["sdk"] == "gradio"


def test_a_space_refuses_a_hub_id_the_hub_would_not_take(tmp_path):
    from vanilla_transformer.demo.space import write_space

    with pytest.raises(ValueError, match="model=.* is not a Hub repository id"):
        write_space(tmp_path / "space", 'org/x"\nsdk: docker')
    assert not (tmp_path / "space").exists()
