"""The layout rules of docs/development.md that the code itself can show: every import points down the floors (the
table `MAY_IMPORT`), no test module imports another test module (shared helpers live in conftest.py or a helper
module), no module imports another's private names (those of the package; a private name of torch or transformers is
tested against each supported version where used), and export/ writes folders while serving/ runs them."""

import ast
import re
import sys
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


PACKAGE = REPOSITORY / "vanilla_transformer"
REMOTE_CODE = "remote code"
"""The room of the files copied next to every saved model (``*_vanilla_transformer.py``): torch and transformers only."""

MAY_IMPORT: dict[str, set[str]] = {
    # the bottom: the remote-code files, and modules of the standard library alone (or torch, transformers)
    REMOTE_CODE: set(),
    "reading": set(),
    "atomic": {"reading"},
    "constants": {"parsing"},  # the ranges of finetune's settings (FINETUNE_RANGES) are parsing's Range
    "extras": set(),
    "folder_kinds": set(),
    "lazy_exports": set(),
    "library_errors": set(),
    "parsing": set(),
    "written": set(),
    "metrics": set(),
    "environment": {REMOTE_CODE},
    "__init__": {REMOTE_CODE},  # the package's own face: registration and the model classes
    # what reads and writes corpora and model folders
    "data": {"environment", "extras", "lazy_exports", "parsing", "reading"},  # parsing: a number from the environment
    "tokenization": {"data"},
    "model_summary": {"atomic", "reading"},
    "model_checks": {"environment", "reading"},
    "progress_bars": set(),
    "visualization": {"atomic", "constants", "extras"},
    "model_dir": {
        "atomic",
        "reading",
        "extras",
        "folder_kinds",
        "library_errors",
        "model_checks",
        "model_summary",
        "progress_bars",
        "tokenization",
    },
    # what runs a model or an exported folder, then what writes one
    "serving": {
        *(REMOTE_CODE, "atomic", "constants", "extras", "folder_kinds", "library_errors", "model_checks"),
        *("model_dir", "reading", "tokenization"),
    },
    "export": {
        *(REMOTE_CODE, "atomic", "constants", "extras", "folder_kinds", "library_errors", "model_dir"),
        *("model_checks", "model_summary", "reading", "serving", "tokenization", "written"),
    },
    # the jobs: training (and fine-tuning, which writes an adapter's card with export/), the browser demo
    "training": {
        *(REMOTE_CODE, "atomic", "constants", "data", "environment", "export", "extras", "lazy_exports", "metrics"),
        *("model_checks", "model_dir", "model_summary", "parsing", "reading", "serving", "tokenization"),
    },
    "demo": {
        REMOTE_CODE,
        "__init__",
        "atomic",
        "export",
        "extras",
        "model_dir",
        "model_summary",
        "serving",
        "visualization",
    },
    # the command line on top
    "cli": {
        *(REMOTE_CODE, "__init__", "atomic", "constants", "data", "demo", "export", "extras", "folder_kinds"),
        *("library_errors", "metrics", "model_dir", "parsing", "serving", "tokenization", "training", "visualization"),
        *("reading", "written"),
    },
    "__main__": {"cli"},
}
"""Each room of the package (a folder, or a module at its top; the remote-code files are one room) and the rooms its
code may import: the one statement of the floors, which docs/development.md shows (`floors`). A room imports its own
modules freely; the table has no circle, so no import runs back up."""

LOW_MODULES = ("atomic", "model_checks", "model_dir", "folder_kinds", "parsing", "reading", "written")
ABOVE_THE_LOW_MODULES = ("cli", "demo", "export", "serving", "training")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPOSITORY).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _room(module: str) -> str:
    """The room of a module of the package (``vanilla_transformer.serving.search`` -> ``serving``)."""
    parts = module.split(".")[1:]
    if not parts:
        return "__init__"
    return REMOTE_CODE if parts[0].endswith("_vanilla_transformer") else parts[0]


def _is_module(name: str) -> bool:
    path = REPOSITORY.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported_modules(path: Path) -> list[str]:
    """Every module `path` imports, as an absolute name, at any depth (in functions, under TYPE_CHECKING too); ``from
    package import module`` counts as the module."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                found.append(f"{base}.{alias.name}" if _is_module(f"{base}.{alias.name}") else base)
    return found


def _package_imports() -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports."""
    return {
        _module_name(path): {name for name in _imported_modules(path) if name.split(".")[0] == "vanilla_transformer"}
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def floors(table: dict[str, set[str]] = MAY_IMPORT) -> list[list[str]]:
    """The rooms by floor, the bottom first: a room stands one floor above the highest room it may import. Raises
    ValueError naming the rooms of a circle."""
    floor: dict[str, int] = {}

    def place(room: str, path: tuple[str, ...]) -> int:
        if room in path:
            raise ValueError(f"a circle: {' -> '.join([*path[path.index(room) :], room])}")
        if room not in floor:
            floor[room] = 1 + max((place(below, (*path, room)) for below in table[room]), default=-1)
        return floor[room]

    for room in table:
        place(room, ())
    return [sorted(room for room in table if floor[room] == level) for level in range(max(floor.values()) + 1)]


def test_every_import_points_down_the_floors():
    """The table has no circle, names every room there is, and every import of the package's code is allowed by it;
    the remote-code files import only the standard library, torch, transformers and one another."""
    assert len(floors()) > 5
    imports = _package_imports()
    upward = sorted(
        f"{module} imports {name}" if _room(module) in MAY_IMPORT else f"{module}: its room is not in MAY_IMPORT"
        for module, names in imports.items()
        for name in names
        if _room(name) != _room(module) and _room(name) not in MAY_IMPORT.get(_room(module), ())
    )
    assert not upward, upward
    assert set(MAY_IMPORT) <= {_room(module) for module in imports}, "a room of MAY_IMPORT is gone"
    allowed = {"torch", "transformers", *sys.stdlib_module_names}
    foreign = sorted(
        f"{path.name} imports {name}"
        for path in sorted(PACKAGE.glob("*_vanilla_transformer.py"))
        for name in _imported_modules(path)
        if name.split(".")[0] not in allowed and _room(name) != REMOTE_CODE
    )
    assert not foreign, foreign


def test_the_low_modules_import_nothing_above_them():
    """model_dir, model_checks and atomic (and the folder kinds and the option parser) are at the bottom: a model
    folder is read, written and checked without export/, serving/, training/, cli/ or demo/."""
    imports = _package_imports()
    upward = sorted(
        f"{module} imports {name}"
        for module, names in imports.items()
        if module.removeprefix("vanilla_transformer.") in LOW_MODULES
        for name in names
        if _room(name) in ABOVE_THE_LOW_MODULES
    )
    assert not upward, upward


def test_no_module_circle():
    """Within a room too: no module imports one that imports it back, however far round."""
    imports = _package_imports()
    table = {
        module: {name for name in names if name in imports and name != module} for module, names in imports.items()
    }
    floors(table)


def test_the_architecture_page_shows_the_floors():
    """docs/development.md lists the rooms of each floor, the top first, as `MAY_IMPORT` places them."""
    text = (REPOSITORY / "docs" / "development.md").read_text(encoding="utf-8")
    shown = re.search(r"<!-- floors -->\n(.*?)<!-- /floors -->", text, re.S)
    assert shown, "docs/development.md has no <!-- floors --> table"
    rows = [line for line in shown.group(1).splitlines() if line.startswith("| ") and not line.startswith("| floor")]
    table = [[cell.strip(" `") for cell in row.strip("| ").split("|")[1].split(",")] for row in rows]
    assert table == [[room.replace("__init__", "__init__.py") for room in rooms] for rooms in reversed(floors())]


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


def test_one_variable_names_the_shared_data_folder():
    """Issue 67: the skip messages named two variables for the same folder (the tests' own and the package's);
    every environment variable that the tests and scripts read for data is the package's `DATA_DIR_VARIABLE`."""
    from vanilla_transformer.data import DATA_DIR_VARIABLE

    read = re.compile(r"""(?:environ\.get\(|environ\[|getenv\(|\$\{?)["']?([A-Z][A-Z0-9_]*DATA[A-Z0-9_]*)""")
    named = {}
    for path in [
        *REPOSITORY.glob("tests/**/*.py"),
        *REPOSITORY.glob("scripts/**/*.py"),
        *REPOSITORY.glob("scripts/*.sh"),
    ]:
        for name in read.findall(path.read_text(encoding="utf-8")):
            named.setdefault(name, path.relative_to(REPOSITORY).as_posix())
    assert {name: path for name, path in named.items() if name != DATA_DIR_VARIABLE} == {}
