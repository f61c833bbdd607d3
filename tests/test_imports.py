"""Every module of the package imports alone, in a fresh interpreter with nothing imported before it (issue 64: a
module that imports transformers half way through its own import, as the generation file does, used to start the Auto
classes' registration, which imports the modeling file, which imports the half-imported generation file back)."""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import vanilla_transformer

REPO = Path(__file__).resolve().parents[1]


def package_modules() -> list[str]:
    """Every module of the package, named from its files: subpackages, and the folders without an ``__init__.py``
    (the `evaluate` metric scripts under metrics/), which Python imports as namespace packages."""
    root = Path(vanilla_transformer.__file__).parent
    names = {".".join(path.relative_to(root.parent).with_suffix("").parts) for path in root.rglob("*.py")}
    return sorted(name.removesuffix(".__init__") for name in names)


def import_alone(name: str) -> tuple[str, int, str]:
    # The import, then the registration it must leave behind: the Auto classes know the model once transformers is in.
    code = (
        f"import importlib, sys; importlib.import_module({name!r})\n"
        "if 'transformers' in sys.modules:\n"
        "    from transformers import AutoConfig; AutoConfig.for_model('vanilla_transformer')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    return name, done.returncode, done.stderr.strip().splitlines()[-1:]


def test_the_list_holds_the_remote_code_and_the_subpackages():
    """A list that found nothing would pass anything."""
    names = package_modules()
    assert {"vanilla_transformer", "vanilla_transformer.generation_vanilla_transformer"} <= set(names)
    assert {"vanilla_transformer.cli", "vanilla_transformer.serving.with_ctranslate2"} <= set(names)


def test_every_module_imports_alone_in_a_fresh_interpreter():
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = list(pool.map(import_alone, package_modules()))
    failed = {name: error for name, status, error in results if status != 0}
    assert failed == {}
