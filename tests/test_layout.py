"""The layout rules of docs/development.md that the code itself can show: no test module imports another test
module (shared helpers live in conftest.py or a helper module), no module imports another's private names
(those of the package; a private name of torch or transformers is tested against each supported version where used),
and export/ writes folders while serving/ runs them."""

import ast
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) of each import statement in `path`; a plain ``import x`` has no names."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            found.append(("." * node.level + (node.module or ""), [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def test_no_test_module_imports_another():
    tests = REPOSITORY / "tests"
    offenders = [
        f"{path.relative_to(REPOSITORY)} imports {module}"
        for path in sorted(tests.rglob("*.py"))
        if "transformers_common" not in path.parts  # transformers' own test modules, run against our classes
        for module, _ in _imports(path)
        if module.rsplit(".", 1)[-1].startswith("test_")
    ]
    assert not offenders, offenders


def test_no_module_imports_a_private_name_of_another():
    sources = sorted((REPOSITORY / "vanilla_transformer").rglob("*.py")) + sorted(
        (REPOSITORY / "scripts").rglob("*.py")
    )
    offenders = [
        f"{path.relative_to(REPOSITORY)}: from {module} import {name}"
        for path in sources
        for module, names in _imports(path)
        if module.startswith((".", "vanilla_transformer"))
        for name in names
        if name.startswith("_") and not name.startswith("__")
    ]
    assert not offenders, offenders


SERVING_NAMES = {
    "InferenceSession",  # onnxruntime: what runs a graph
    "Translator",  # ctranslate2: what runs a converted model
    "translate_batch",  # ctranslate2's search
    "step_decoder",  # the package's search, and what it runs on
    "translate",
    "translate_ids",
    "trace_beam_search",
    "OnnxSeq2SeqModel",
    "OnnxStepDecoder",
    "load_onnx",
    "load_translator",
    "translate_ctranslate2",
}
"""What runs a model or an exported folder: serving/'s, which no module under export/ defines, imports or calls."""


def _names(path: Path) -> set[str]:
    """Every name `path` defines, imports, reads or takes as an attribute."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.rsplit(".", 1)[-1])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def test_export_writes_folders_and_serving_runs_them():
    package = REPOSITORY / "vanilla_transformer"
    serving_in_export = [
        f"{path.relative_to(REPOSITORY)}: {', '.join(sorted(_names(path) & SERVING_NAMES))}"
        for path in sorted((package / "export").rglob("*.py"))
        if _names(path) & SERVING_NAMES
    ]
    assert not serving_in_export, serving_in_export
    writers = {"write_directory", "write_file", "replace_file", "save_pretrained", "save_model_dir"}
    writing_in_serving = [
        f"{path.relative_to(REPOSITORY)}: {', '.join(sorted(_names(path) & writers))}"
        for path in sorted((package / "serving").rglob("*.py"))
        if _names(path) & writers
    ]
    assert not writing_in_serving, writing_in_serving


def _string_constants(path: Path) -> set[str]:
    """The strings `path` spells in its code: every string constant but docstrings."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    }


def _spelled_outside(owner: Path, names: set[str], root: Path) -> list[str]:
    """Where a module under `root` other than `owner` spells one of `names` as a path or a path's last part."""
    found = []
    for path in sorted(root.rglob("*.py")):
        spelled = {name for text in _string_constants(path) for name in names if text.split("/")[-1] == name}
        if path != owner and spelled:
            found.append(f"{path.relative_to(REPOSITORY)} spells {', '.join(sorted(spelled))}")
    return found


def test_one_owner_for_the_run_folder_and_the_model_summary():
    """The run folder's files are named by `RunLayout` alone (taken from it: a renamed file fails here unless every
    other spelling goes too), the model folder's summary file by `model_summary` alone; scripts read them the same
    way (a benchmark that reads a run's metrics asks `RunLayout`)."""
    from vanilla_transformer.model_summary import SUMMARY_FILE
    from vanilla_transformer.training.run_dir import RunLayout

    layout = RunLayout("run")
    files = {layout.settings.name, layout.checkpoints.name, layout.metrics.name, layout.metrics_plot.name}
    files.add(layout.results.name)
    assert files == {"training_config.json", "checkpoints", "metrics.jsonl", "metrics.png", "results.json"}
    package = REPOSITORY / "vanilla_transformer"
    owner = package / "training" / "run_dir.py"
    offenders = _spelled_outside(owner, files - {"checkpoints"}, package) + _spelled_outside(
        owner, files - {"checkpoints"}, REPOSITORY / "scripts"
    )
    offenders += _spelled_outside(package / "model_summary.py", {SUMMARY_FILE}, package)
    assert not offenders, offenders


def test_benchmarks_share_only_the_kit():
    """scripts/bench/ is the benchmarks' one shared library: no benchmark imports another (render_figures collects
    their figures by name, not by import), and none builds its own Adam: the training step is the package's."""
    scripts = REPOSITORY / "scripts"
    modules = {path.stem for path in scripts.glob("*.py")}
    offenders = [
        f"{path.relative_to(REPOSITORY)} imports {module}"
        for path in sorted(scripts.rglob("*.py"))
        for module, _ in _imports(path)
        if module.split(".")[0] in modules
    ]
    offenders += [
        f"{path.relative_to(REPOSITORY)} builds torch's Adam itself"
        for path in sorted(scripts.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in {"Adam", "AdamW"}
    ]
    assert not offenders, offenders
