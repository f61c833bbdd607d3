"""The layout rules of docs/development.md that the code itself can show: no test module imports another test
module (shared helpers live in conftest.py or a helper module), and no module imports another's private names
(those of the package; a private name of torch or transformers is tested against each supported version where used)."""

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
