"""Metric logging that needs no server: a JSON Lines tracker for Accelerate, and a plot of its curves."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accelerate.tracking import GeneralTracker, on_main_process

from ..atomic import check_output_file, replace_file, write_file
from ..extras import MissingExtraError, import_optional

logger = logging.getLogger(__name__)


class JsonlTracker(GeneralTracker):
    """An Accelerate tracker writing each ``accelerator.log(values, step)`` as one line ``{"step": step, **values}``.

    Args:
        path: The ``.jsonl`` file.
        start_step: The step training starts from: 0, or the step of the checkpoint a run resumes from. Lines of
            later steps already in the file (written by an interrupted run after its last checkpoint) are removed,
            so that no step is logged twice; so is the results row of `start_step` (a finished run resumed, for
            example with another beam search, scores its final model again and logs the new results).
    """

    name = "jsonl"
    requires_logging_directory = False
    main_process_only = True

    def __init__(self, path: str | Path, start_step: int = 0):
        super().__init__()
        self.path = Path(path)
        self.start_step = start_step
        self._file = None

    @on_main_process
    def start(self) -> None:
        if self.path.exists():
            kept = [
                row
                for row in read_metrics(self.path)
                if row["step"] < self.start_step or (row["step"] == self.start_step and not is_results_row(row))
            ]
            write_file(self.path, "".join(json.dumps(row) + "\n" for row in kept))  # a kill leaves the old log
        self.path.parent.mkdir(parents=True, exist_ok=True)
        check_output_file(self.path, "the metrics log")  # appended to: never through a link
        self._file = self.path.open("a", encoding="utf-8")

    @property
    def tracker(self):
        return self._file

    @on_main_process
    def log(self, values: Mapping[str, Any], step: int | None = None, **kwargs) -> None:
        self._file.write(json.dumps({"step": step, **values}) + "\n")
        self._file.flush()

    @on_main_process
    def finish(self) -> None:
        self._file.close()


def is_results_row(row: Mapping[str, Any]) -> bool:
    """Whether a metrics row is the final results of a run (``train`` logs them, with the run's total "seconds",
    after its last checkpoint), not a training or validation row."""
    return "seconds" in row


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows a `JsonlTracker` wrote, in order.

    A last line cut short (a run killed while logging) is dropped with a warning; a bad line before it raises a
    ValueError naming the file and line.
    """
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    rows = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines):  # no newline after it: the write was interrupted
                logger.warning(f"{path}:{number}: dropped an incomplete last line (an interrupted write)")
                break
            raise ValueError(f"{path}:{number}: not a JSON line of metrics: {error}") from error
        if not isinstance(row, dict) or not isinstance(row.get("step"), int):
            raise ValueError(f"{path}:{number}: expected a JSON object with an integer 'step', got {line[:80]!r}")
        rows.append(row)
    return rows


_PANELS = (
    ("label-smoothed loss per token", {"train_loss": "train", "valid_loss": "validation"}),
    ("validation score", {"valid_bleu": "BLEU", "valid_chrf": "chrF", "valid_exact_match": "exact match (%)"}),
)
"""The plot's panels: the y-axis label, and the curves as {metric name: legend}."""


def metric_curves(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What `plot_metrics` draws of the metrics `rows`: per panel, its y-axis label and its curves, each a legend and
    its ``[step, value]`` points (the metrics a run did not log are left out). Plain JSON values, so that a picture
    can be checked against the data it was drawn from."""
    return [
        {
            "ylabel": ylabel,
            "curves": {
                label: points
                for key, label in curves.items()
                if (points := [[row["step"], row[key]] for row in rows if key in row])
            },
        }
        for ylabel, curves in _PANELS
    ]


def metrics_figure(panels: list[dict[str, Any]]):
    """The figure of `metric_curves`: one panel each, the curves against the step (a ``matplotlib.figure.Figure``
    on matplotlib's Agg canvas, which needs no display and leaves pyplot's state alone)."""
    FigureCanvasAgg = import_optional("matplotlib.backends.backend_agg", "plots", "plotting").FigureCanvasAgg
    Figure = import_optional("matplotlib.figure", "plots", "plotting").Figure
    figure = Figure(figsize=(11, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    for axes, panel in zip(figure.subplots(1, len(panels)), panels, strict=True):
        for label, points in panel["curves"].items():
            steps, values = zip(*points, strict=True)
            axes.plot(steps, values, marker="." if len(points) < 50 else None, label=label)
        axes.set_xlabel("step")
        axes.set_ylabel(panel["ylabel"])
        axes.grid(alpha=0.3)
        if axes.has_data():
            axes.legend()
    return figure


def plot_metrics(jsonl_path: str | Path, png_path: str | Path, *, required: bool = True) -> bool:
    """Plot the training and validation loss, and the validation BLEU, chrF and exact match, against the step
    (`metrics_figure` of `metric_curves`).

    Without matplotlib (the ``plots`` extra) it raises `MissingExtraError`, or with ``required=False`` logs that the
    plot is skipped and returns False.
    """
    try:
        import_optional("matplotlib.figure", "plots", "plotting")
    except MissingExtraError as error:
        if required:
            raise
        logger.warning("skipping %s: %s", png_path, error)
        return False
    figure = metrics_figure(metric_curves(read_metrics(jsonl_path)))
    replace_file(png_path, lambda temporary: figure.savefig(temporary, format="png"))
    return True


__all__ = ["JsonlTracker", "is_results_row", "metric_curves", "metrics_figure", "plot_metrics", "read_metrics"]
