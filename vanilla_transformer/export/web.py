"""A static page that translates in the visitor's browser, with no server: transformers.js and onnxruntime-web (wasm)
run the ONNX export next to it (``export-onnx --web``).

Everything the page loads is a file of its folder: ``index.html`` and ``translate.js``, the model files of the
export, and under ``js/`` transformers.js's browser bundle and onnxruntime-web's wasm files, copied from an npm
install of ``@huggingface/transformers`` (never downloaded at run time). The page sets ``env.allowRemoteModels =
false`` and points onnxruntime-web's ``wasmPaths`` at ``js/``; its Content-Security-Policy allows no other origin,
so a browser would refuse any request that left the folder's host.

transformers.js has no beam search (``num_beams: 4`` quietly decodes greedily), so the page runs the package's own
search, ``search.js``: ``generation_vanilla_transformer.beam_search`` step for step (beam width from the page's
``vt-beams`` control, 1 to 8, the model's ``num_beams`` by default; GNMT's length penalty; at most input length +
50 tokens; the exact stopping rule), on the merged decoder fed as ``serving.with_onnxruntime.OnnxStepDecoder`` feeds
it, through the onnxruntime-web sessions transformers.js opens. transformers.js gives the tokenizer only.

After each translation the page shows its cross-attention for a chosen layer and head (``attention.js``, under
``vt-attention``): one more run of the merged decoder over the chosen translation, whose ``cross_attentions.{i}``
outputs (``export.onnx_graphs.DecoderGraph``) are the weights the model computed. The graph gives them because the
page cannot compute them from the other outputs: the encoder keys are in the cache, but the queries are not.

Install the npm package without its install scripts (onnxruntime-node's downloads CUDA files)::

    npm install --ignore-scripts @huggingface/transformers
"""

from __future__ import annotations

import json
import os
from importlib import resources
from pathlib import Path

from ..reading import read_bytes, read_json

TRANSFORMERS_JS_ENV = "VANILLA_TRANSFORMER_TRANSFORMERS_JS"
"""The folder of an installed ``@huggingface/transformers`` npm package, where ``--transformers-js`` is not given."""

INSTALL_HINT = (
    "install it with `npm install --ignore-scripts @huggingface/transformers` (in any folder), then pass "
    "--transformers-js path/to/node_modules/@huggingface/transformers or set " + TRANSFORMERS_JS_ENV
)

BUNDLE = "dist/transformers.min.js"
"""transformers.js's browser build, onnxruntime-web included; it loads the wasm runtime below."""

WASM_FILES = ("ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm")
"""onnxruntime-web's runtime for the CPU (wasm), the build transformers.js picks by default."""

PAGE_FILES = ("index.html", "translate.js", "search.js", "attention.js")
"""The page, its script, the search it runs (``search.js``: also run by the tests in Node) and its attention view."""


def find_transformers_js(path: str | os.PathLike | None = None) -> Path:
    """The ``@huggingface/transformers`` package folder: `path`, else ``$VANILLA_TRANSFORMER_TRANSFORMERS_JS``, else
    ``node_modules/@huggingface/transformers`` in the current folder, with the onnxruntime-web it needs
    (`onnxruntime_web`). Raises a ValueError naming what is missing."""
    if path is None:
        path = os.environ.get(TRANSFORMERS_JS_ENV) or Path("node_modules/@huggingface/transformers")
        where = f"${TRANSFORMERS_JS_ENV}" if os.environ.get(TRANSFORMERS_JS_ENV) else "./node_modules"
    else:
        where = "--transformers-js"
    folder = Path(path)
    if not (folder / BUNDLE).is_file() or not (folder / "package.json").is_file():
        raise ValueError(f"{where}: no @huggingface/transformers package at {folder} (no {BUNDLE}); {INSTALL_HINT}")
    onnxruntime_web(folder)  # the runtime it needs, found before anything is written
    return folder


def onnxruntime_web(package: Path) -> Path:
    """The ``onnxruntime-web`` package that `package` (transformers.js) depends on, at the version it names."""
    wanted = _manifest(package).get("dependencies", {}).get("onnxruntime-web")
    # npm puts it beside the package (node_modules/onnxruntime-web), or inside it when versions conflict.
    for candidate in (package / "node_modules/onnxruntime-web", package.parent.parent / "onnxruntime-web"):
        if (candidate / "package.json").is_file() and _manifest(candidate).get("version") == wanted:
            return candidate
    raise ValueError(f"{package} needs onnxruntime-web {wanted}, which is not installed beside it; {INSTALL_HINT}")


def write_page(folder: str | os.PathLike, transformers_js: str | os.PathLike | None = None) -> None:
    """Add the translation page to the ONNX export `folder`: ``index.html``, ``translate.js`` and ``js/`` (the
    browser bundle, onnxruntime-web's wasm runtime, and both packages' licences)."""
    package = find_transformers_js(transformers_js)
    runtime = onnxruntime_web(package)
    folder = Path(folder)
    scripts = folder / "js"
    scripts.mkdir()
    _copy(package, BUNDLE, scripts / "transformers.min.js")
    for name in WASM_FILES:
        _copy(runtime, f"dist/{name}", scripts / name)
    _copy(package, "LICENSE", scripts / "LICENSE.transformers.js.txt")
    versions = {"transformers.js": _version(package), "onnxruntime-web": _version(runtime)}
    notice = (
        f"transformers.js {versions['transformers.js']} (Apache-2.0, LICENSE.transformers.js.txt) and onnxruntime-web "
        f"{versions['onnxruntime-web']} (MIT, Copyright (c) Microsoft Corporation), copied from their npm packages.\n"
    )
    (scripts / "NOTICE.txt").write_text(notice, encoding="utf-8")
    for name in PAGE_FILES:
        text = resources.files(__package__).joinpath(f"web/{name}").read_text(encoding="utf-8")
        (folder / name).write_text(text.replace("{{versions}}", json.dumps(versions)), encoding="utf-8")


PACKAGE_FILE_LIMIT = 256 << 20
"""The largest file of an npm package copied into the page (the wasm runtime is some tens of MB)."""


def _copy(package: Path, name: str, destination: Path) -> None:
    """Copy the file `name` of the npm package `package` to `destination`, through the reader of files this program
    did not write (`vanilla_transformer.reading`): a link out of the package is refused, never followed, so nothing
    from outside it lands in a folder that is uploaded."""
    destination.write_bytes(read_bytes(package / name, "npm package", limit=PACKAGE_FILE_LIMIT, inside=package))


def _manifest(package: Path) -> dict:
    """The ``package.json`` of an npm package, read inside it (`_copy`'s rule); a ValueError naming it if it is not a
    JSON object."""
    manifest = read_json(package / "package.json", "npm package", inside=package)
    if not isinstance(manifest, dict):
        raise ValueError(f"{package / 'package.json'} is not a JSON object: not an npm package")
    return manifest


def _version(package: Path) -> str:
    return str(_manifest(package).get("version"))


__all__ = ["TRANSFORMERS_JS_ENV", "find_transformers_js", "onnxruntime_web", "write_page"]
