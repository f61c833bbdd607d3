"""Nothing the user passes runs, nor brings in files from elsewhere (issue 65, cause 4): ``push --template`` renders
in Jinja's sandbox, and the npm package of ``--transformers-js`` is copied without following links out of it."""

import json

import pytest


def refused(result, *expected) -> str:
    """Exit 1 and, last on stderr (after the bar of the model's loading), one line holding each of `expected`."""
    status, _, err = result
    last = err.strip().splitlines()[-1]
    assert status == 1 and all(text in last for text in expected) and "Traceback" not in err, err
    return last


@pytest.mark.parametrize(
    "reach",
    [
        "lipsum.__globals__['os'].popen('touch {marker}').read()",
        "cycler.__init__.__globals__.os.popen('touch {marker}').read()",
        "self.__init__.__globals__.__builtins__.__import__('os').system('touch {marker}')",
    ],
)
def test_a_card_template_cannot_run_a_shell_command(tiny_model_dir, tmp_path, run_cli, reach):
    marker = tmp_path / "the template ran a command"
    template = tmp_path / "card.md"
    template.write_text("---\nlicense: mit\n---\n# {{ model_name }}\n\n{{ " + reach.format(marker=marker) + " }}\n")
    folder = tmp_path / "upload"
    result = run_cli("push", tiny_model_dir, "org/name", "--dry-run", folder, "--template", template)
    refused(result, f"model card template {template} does not render", "unsafe")
    assert not marker.exists() and not folder.exists()


def test_a_card_template_still_renders_the_summarys_values(tiny_model_dir, tmp_path, run_cli):
    """The sandbox keeps what a template does: variables, filters, loops, the card's metadata."""
    template = tmp_path / "card.md"
    template.write_text(
        "---\n{{ card_data }}\n---\n# {{ model_name }}\n\n{% for i in range(2) %}row {{ i }}; {% endfor %}"
        "{{ d_model }} wide, {{ '%.1f' | format(length_penalty) }}\n"
    )
    folder = tmp_path / "upload"
    status, _, err = run_cli("push", tiny_model_dir, "org/name", "--dry-run", folder, "--template", template)
    assert status == 0, err
    card = (folder / "README.md").read_text()
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert "# name" in card and "row 0; row 1;" in card and f"{config['d_model']} wide" in card


def _package(tmp_path):
    """A stand-in transformers.js npm install: the package and the onnxruntime-web beside it."""
    modules = tmp_path / "node_modules"
    package, runtime = modules / "@huggingface" / "transformers", modules / "onnxruntime-web"
    (package / "dist").mkdir(parents=True)
    (runtime / "dist").mkdir(parents=True)
    (package / "dist" / "transformers.min.js").write_text("// bundle\n")
    (package / "LICENSE").write_text("Apache-2.0\n")
    (package / "package.json").write_text(json.dumps({"version": "3.0.0", "dependencies": {"onnxruntime-web": "1.0"}}))
    (runtime / "package.json").write_text(json.dumps({"version": "1.0"}))
    for name in ("ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.wasm"):
        (runtime / "dist" / name).write_text("// runtime\n")
    return package, runtime


@pytest.mark.parametrize("where", ["the bundle", "the licence", "the runtime"])
def test_a_static_space_never_copies_what_a_link_in_the_package_points_to(tiny_model_dir, tmp_path, run_cli, where):
    pytest.importorskip("onnxscript")
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's secret\n")
    package, runtime = _package(tmp_path)
    linked = {
        "the bundle": package / "dist" / "transformers.min.js",
        "the licence": package / "LICENSE",
        "the runtime": runtime / "dist" / "ort-wasm-simd-threaded.asyncify.wasm",
    }[where]
    linked.unlink()
    linked.symlink_to(secret)
    folder = tmp_path / "up"
    argv = ["push", tiny_model_dir, "org/name", "--dry-run", folder, "--space", "org/demo", "--static"]
    status, _, err = run_cli(*argv, "--transformers-js", package)
    assert status == 1 and f"{linked} is a symbolic link to {secret}" in err and "outside the npm package" in err, err
    space = tmp_path / "up-space"
    copied = [path for path in space.rglob("*") if path.is_file()] if space.exists() else []
    assert all("the user's secret" not in path.read_text(errors="replace") for path in copied)
