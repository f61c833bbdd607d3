"""A Hugging Face Space of the demo: a folder with ``app.py``, ``requirements.txt`` and a README holding the Space
metadata, and its upload (``vanilla-transformer push MODEL_DIR REPO_ID --space SPACE_ID``).

The Space's app loads the model from the Hub (or from ``$VANILLA_TRANSFORMER_MODEL``) and needs only the package
with its ``demo`` extra: ``pip install -r requirements.txt && gradio app.py``.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

from .. import __version__
from ..atomic import write_directory
from ..export.space import PACKAGE_LINK, check_repo_id, upload_space, write_space_readme
from ..model_dir import is_local_path

MODEL_VARIABLE = "VANILLA_TRANSFORMER_MODEL"
"""The environment variable that names another model for a Space's app (a Hub id or a local directory)."""

GRADIO_VERSION = "6.31.0"
"""The Gradio the Space asks for when none is installed here: the one the demo is tested with."""

APP = '''"""The vanilla-transformer demo: `gradio app.py` or `python app.py` serves it."""

import os

from vanilla_transformer.demo import build_app, launch_settings

MODEL = os.environ.get({variable!r}, {model!r})
demo = build_app(MODEL)

if __name__ == "__main__":
    demo.launch(**launch_settings(host=None))  # GRADIO_SERVER_NAME, set on Spaces, or 127.0.0.1
'''
"""The Space's app.py: the model and the variable are written as Python literals (``repr``), never into a string or
a docstring, so that no id or path can end one and add a statement."""

BODY = """The Transformer of "Attention Is All You Need" ({package}), {model_line}. Translate with the paper's beam
search, see every layer and head of the encoder self-attention, the decoder's masked self-attention and the
encoder-decoder alignment, follow the beam search step by step, and see the sinusoidal positions of section 3.5.

Run it locally: `pip install -r requirements.txt && gradio app.py`.
"""


def write_space(folder: str | os.PathLike[str], model: str, *, title: str | None = None) -> Path:
    """Write the Space folder of the demo of `model` (a Hub id, checked by the Hub's rules; a local directory for a
    local run).

    The folder is written whole (`vanilla_transformer.atomic.write_directory`), never into a folder that holds
    anything, nor through a link; `check_output_dir` checks it before any work.

    Raises:
        ValueError: If `folder` exists and is not an empty directory, or is a link; if `model` is neither a local
            path nor a Hub repository id.
    """
    if not is_local_path(model):
        check_repo_id(model, "model")
    write_directory(folder, lambda temporary: _write_space_files(temporary, model, title), what="folder")
    return Path(folder)


def _write_space_files(folder: Path, model: str, title: str | None) -> None:
    try:
        gradio = importlib.metadata.version("gradio")
    except importlib.metadata.PackageNotFoundError:
        gradio = GRADIO_VERSION
    hub_model = not is_local_path(model)
    title = title or f"{model.rsplit('/', 1)[-1]} demo"
    (folder / "app.py").write_text(APP.format(model=model, variable=MODEL_VARIABLE), encoding="utf-8")
    (folder / "requirements.txt").write_text(f"vanilla-transformer[demo]=={__version__}\n", encoding="utf-8")
    model_line = f"the model [{model}](https://huggingface.co/{model})" if hub_model else f"the model `{model}`"
    write_space_readme(
        folder,
        sdk="gradio",
        title=title,
        body=BODY.format(package=PACKAGE_LINK, model_line=model_line),
        models=[model] if hub_model else None,
        sdk_version=gradio,
        app_file="app.py",
    )


def push_space(
    space_id: str,
    model: str,
    *,
    private: bool = False,
    token: str | None = None,
    commit_message: str = "Upload vanilla Transformer demo",
) -> str:
    """Upload the folder of `write_space` to the Gradio Space `space_id` (`export.space.upload_space`), created if
    needed; the commit's URL."""
    return upload_space(
        space_id,
        "gradio",
        lambda folder: write_space(folder, model),
        private=private,
        token=token,
        commit_message=commit_message,
    )


__all__ = ["MODEL_VARIABLE", "push_space", "write_space"]
