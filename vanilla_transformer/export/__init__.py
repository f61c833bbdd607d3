"""A trained model leaving the package: the Hub with its model card (`hub`), a CTranslate2 model (`ctranslate2`), an
ONNX folder (`onnx`, its graphs `onnx_graphs`, its web page `web`) and a plain MarianMT directory (`marian`). These
write folders; what runs them is `vanilla_transformer.serving`. Saving and loading a model directory is
`vanilla_transformer.model_dir`."""

from __future__ import annotations

from pathlib import Path

from ..atomic import check_output_dir
from ..library_errors import SettingError
from ..written import check_replaceable, written_by


def check_export_dir(
    output_dir: Path, force: bool, kind: str, what: str, *, names: tuple[str, ...], source: Path | None = None
) -> None:
    """Before any work, the output folder of an export that ``--force`` may replace: a non-empty `output_dir` needs
    `force`, and then must hold only what the command `kind` wrote there, by its manifest and the `names` it writes
    (`written.first_foreign`: the first other file is named); a link, a file or an unwritable place is refused (`atomic.check_output_dir`, the
    package's one rule); so is the model folder `source` being exported, a folder holding it or one inside it
    (replacing it would delete the model). `what` names the export in the refusal without `force`."""
    if source is not None:
        model, output = Path(source).resolve(), Path(output_dir).resolve()
        if model == output or model in output.parents or output in model.parents:
            raise ValueError(
                f"output_dir={output_dir} would replace or hold the model being exported ({source}): choose another "
                f"output directory"
            )
    if output_dir.is_dir() and not output_dir.is_symlink() and any(output_dir.iterdir()) and not force:
        refusal = f"{output_dir} exists and is not empty: pass {{}} to replace {what}"
        raise SettingError(refusal.format("force=True"), refusal.format("--force"))
    check_replaceable(output_dir, kind, "output_dir", names)
    check_output_dir(output_dir, "output_dir", replaceable=written_by(kind, names))


__all__ = ["check_export_dir"]
