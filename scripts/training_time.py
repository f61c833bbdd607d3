"""How long the ``wmt14-base`` preset trains on GPUs, worked out from a committed GPU training measurement: the step's
real tokens per second and real tokens per step give seconds per step, times the preset's steps. Published by
``render_figures.py`` (``FIGURES``); nothing here measures.
"""

from __future__ import annotations

import json
from pathlib import Path

from vanilla_transformer.training.presets import TRAINING_PRESETS

GPU_TRAINING_RUN = "gpu/2026-11-27-h200/training_eager.json"
"""The GPU training measurement the estimate reads: the one committed (an H200, the wmt14-base step)."""


def wmt14_base_hours(results: Path) -> str:
    """Hours for the ``wmt14-base`` preset's steps at our best contestant's measured speed, on one GPU and on 8 if
    each kept that speed (not measured)."""
    run = json.loads((results / GPU_TRAINING_RUN).read_text(encoding="utf-8"))
    ours = run["contestants"][run["ours_best"]]
    seconds_per_step = ours["tokens_per_step"] / ours["tokens_per_second"]
    steps = TRAINING_PRESETS["wmt14-base"]["max_steps"]
    hours = steps * seconds_per_step / 3600
    label = f"{ours['precision']}, {'eager' if ours['compile'] == 'no' else 'compiled'}, {ours['attn'].upper()}"
    return (
        f"{ours['tokens_per_second']:,.0f} real tokens/s ({label}, {run['started'][:10]}) at "
        f"{ours['tokens_per_step']:,.0f} real tokens a step: {seconds_per_step:.2f} s a step, so the preset's "
        f"{steps:,} steps take {hours:,.1f} hours on one GPU, and {hours / 8:,.1f} hours on 8 if each kept that speed"
    )


FIGURES = {"wmt14-base-hours": wmt14_base_hours}
