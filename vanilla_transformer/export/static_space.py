"""A static Hugging Face Space of the translation page (``push MODEL_DIR REPO_ID --space SPACE_ID --static``): the
ONNX folder of ``export-onnx --web`` with a README holding the Space metadata (``sdk: static``, ``app_file:
index.html``). The Hub serves the folder's files as they are; the page translates in the visitor's browser, with the
paper's beam search, and fetches nothing from elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

from .onnx import export_onnx
from .space import PACKAGE_LINK, check_repo_id, upload_space, write_space_readme

BODY = """The Transformer of "Attention Is All You Need" ({package}),
the model [{model}](https://huggingface.co/{model}), translating in your browser: the paper's beam search (GNMT
length penalty, at most input length + 50 tokens) on onnxruntime-web, and the cross-attention of each translation. No
server: the page runs the ONNX graphs of this folder (`vanilla-transformer export-onnx --web`), and no text leaves
your computer.
"""


def write_static_space(
    folder: str | os.PathLike, model_dir: str | os.PathLike, model_id: str, *, transformers_js=None
) -> Path:
    """Write the static Space folder of the saved model directory `model_dir` (published as the Hub model
    `model_id`, checked by the Hub's rules first): its ONNX export with the page (`export_onnx` with ``web=True``) and
    the Space's README (`space.write_space_readme`)."""
    check_repo_id(model_id, "model_id")
    folder = export_onnx(model_dir, folder, web=True, transformers_js=transformers_js)
    title = f"{model_id.rsplit('/', 1)[-1]} in the browser"
    body = BODY.format(package=PACKAGE_LINK, model=model_id)
    write_space_readme(folder, sdk="static", title=title, body=body, models=[model_id], app_file="index.html")
    return folder


def push_static_space(
    space_id: str,
    model_dir: str | os.PathLike,
    model_id: str,
    *,
    transformers_js=None,
    private: bool = False,
    token: str | None = None,
    commit_message: str = "Upload vanilla Transformer page",
) -> str:
    """Upload the folder of `write_static_space` to the static Space `space_id` (`space.upload_space`), created if
    needed; the commit's URL."""
    check_repo_id(model_id, "model_id")

    def write(folder: Path) -> Path:
        return write_static_space(folder, model_dir, model_id, transformers_js=transformers_js)

    return upload_space(space_id, "static", write, private=private, token=token, commit_message=commit_message)


__all__ = ["push_static_space", "write_static_space"]
