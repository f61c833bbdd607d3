"""The light core: loading a model, generate(), the pipeline and translating need no extra, and load none of the
heavy libraries; what needs an extra says which one."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tiny_model import SPLITS

from vanilla_transformer.extras import EXTRAS, MissingExtraError, import_optional, require

HEAVY = ["pandas", "pyarrow", "matplotlib"]
OPTIONAL = [module for extra in ("train", "plots", "serve") for module in EXTRAS[extra]]
"""The modules of the extras; not the marian extra's sentencepiece, which transformers imports wherever it is
installed (the core works without it: `test_the_core_works_without_any_extra`)."""
SOURCES = [source for source, _ in SPLITS.valid[:2]]


def run_core_work(exported_model_dir, block: list[str]) -> dict:
    """In a fresh interpreter where the modules `block` cannot be imported: import the package, load the model
    directory, generate, translate with the paper's beam search and through the pipeline; return what got loaded."""
    script = textwrap.dedent(
        f"""
        import json, sys
        for name in {block!r}:
            sys.modules[name] = None  # as if not installed
        import torch
        from transformers import pipeline
        import vanilla_transformer
        from vanilla_transformer.model_dir import load_model_dir
        from vanilla_transformer.serving.search import translate

        model, tokenizer = load_model_dir({str(exported_model_dir)!r})
        inputs = tokenizer({SOURCES!r}, padding=True, return_tensors="pt")
        generated = tokenizer.batch_decode(model.generate(**inputs, max_new_tokens=8), skip_special_tokens=True)
        translated = translate(model, tokenizer, {SOURCES!r}, max_length_offset=8)
        translator = pipeline("translation", model={str(exported_model_dir)!r}, trust_remote_code=True)
        piped = [r["translation_text"] for r in translator({SOURCES!r}, max_new_tokens=8)]
        loaded = sorted(name for name in {HEAVY + OPTIONAL!r} if sys.modules.get(name) is not None)
        print("RESULT", json.dumps(dict(loaded=loaded, generated=generated, translated=translated, piped=piped)))
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=exported_model_dir.parent,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout.rsplit("RESULT ", 1)[-1])


@pytest.fixture(scope="module")
def exported_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model written by save_model_dir (with the pipelines), as training exports it."""
    from vanilla_transformer.model_dir import load_model_dir, save_model_dir

    directory = tmp_path_factory.mktemp("core") / "model"
    save_model_dir(*load_model_dir(tiny_model_dir), directory)
    return directory


@pytest.fixture(scope="module")
def unblocked(exported_model_dir):
    return run_core_work(exported_model_dir, block=[])


def test_generate_translate_and_pipeline_load_no_heavy_library(unblocked):
    result = unblocked
    assert result["loaded"] == []  # none of pandas, pyarrow, matplotlib, nor the extras' modules
    assert all(result[key] and all(result[key]) for key in ("generated", "translated", "piped"))


def test_the_core_works_without_any_extra(exported_model_dir, unblocked):
    blocked = HEAVY + [module for modules in EXTRAS.values() for module in modules]
    assert run_core_work(exported_model_dir, block=blocked) == unblocked


def test_a_missing_extra_is_named_with_its_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "num2words", None)
    with pytest.raises(MissingExtraError, match=r"numbers task needs num2words, from the 'train' extra: pip install"):
        import_optional("num2words", "train", "the numbers task")
    with pytest.raises(
        MissingExtraError, match=r"training needs the \'train\' extra \(num2words not installed\): pip"
    ):
        require("train", "training")
    from vanilla_transformer.data import make_numbers_task

    with pytest.raises(MissingExtraError, match=r'pip install "vanilla-transformer\[train\]"'):
        make_numbers_task(3, 0, 0)
    require("plots", "plotting")  # installed here: no error
