"""See inside the model: the browser demo (``vanilla-transformer demo``), its Hub Space, and notebook views.

Gradio (the ``demo`` extra) is imported only by `build_app`; the notebook views and the Space writer need none.
"""

from .app import ALL_HEADS, Session, build_app, launch_settings
from .core import Hypothesis, Positions, Translation, beam_hypotheses, check_sentence, positions, translate_with_attention

__all__ = [
    "ALL_HEADS",
    "Hypothesis",
    "Positions",
    "Session",
    "Translation",
    "beam_hypotheses",
    "build_app",
    "check_sentence",
    "launch_settings",
    "positions",
    "translate_with_attention",
]
