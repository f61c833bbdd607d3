"""See inside the model: the browser demo (``vanilla-transformer demo``), its Hub Space, and notebook views.

Gradio (the ``demo`` extra) is imported only by `build_app`; the notebook views and the Space writer need none.
"""

from .app import ALL_HEADS, Session, build_app, launch_settings
from .core import (
    Hypothesis,
    Positions,
    Translation,
    check_sentence,
    hypotheses,
    positions,
    translate_with_attention,
)
from .notebook import AttentionView, BeamView, show_attention, show_beam

__all__ = [
    "ALL_HEADS",
    "AttentionView",
    "BeamView",
    "Hypothesis",
    "Positions",
    "Session",
    "Translation",
    "hypotheses",
    "build_app",
    "check_sentence",
    "launch_settings",
    "positions",
    "show_attention",
    "show_beam",
    "translate_with_attention",
]
