"""The browser demo: a Gradio app with the Translate, Attention, Beam search and Positions views of one model.

Gradio is imported here only, when an app is built; the `Session` behind the views needs no gradio, so the views'
answers (and their error messages) can be tested and reused without a browser. The app works offline: system fonts,
no analytics, no share links, served on 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..extras import import_optional
from ..model_dir import load_model_dir
from ..model_summary import SUMMARY_FILE, read_training_summary
from ..serving.search import LENGTH_PENALTY, NUM_BEAMS
from .core import Translation, positions, translate_with_attention
from .render import attention_html, beam_html, heatmap_image

ALL_HEADS = "all"
"""The head choice that shows every head of the layer side by side."""

HYPOTHESIS_COLUMNS = ["rank", "translation", "tokens", "log-probability", "GNMT score"]

NUMBER_EXAMPLES = [
    "five",
    "twelve",
    "forty-two",
    "seven hundred",
    "three hundred and twenty-one",
    "seventy-one thousand, four hundred and fifty-six",
]
"""The examples of a model trained on the built-in numbers task: the sizes a person types first, then longer ones."""


@dataclass
class Session:
    """The model behind an app, or the reason it did not load, and the answers of the views as plain values."""

    model: PreTrainedModel | None
    tokenizer: PreTrainedTokenizerBase | None
    name: str
    load_error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)
    """The model directory's training summary (`SUMMARY_FILE`), if it has one: what the model was trained on."""

    @classmethod
    def load(cls, name_or_path: str) -> Session:
        """Load a model directory or Hub id; a model that does not load gives a session that says why."""
        try:
            model, tokenizer = load_model_dir(name_or_path)
        except (OSError, ValueError) as error:  # FileNotFoundError is an OSError
            return cls(None, None, str(name_or_path), f"The model {str(name_or_path)!r} did not load: {error}")
        summary_path = Path(name_or_path) / SUMMARY_FILE
        try:
            summary = read_training_summary(summary_path) if summary_path.is_file() else {}
        except ValueError:  # a damaged summary only costs the page its description of the training data
            summary = {}
        return cls(model, tokenizer, str(name_or_path), summary=summary)

    @property
    def knows_numbers(self) -> bool:
        """Whether the model was trained on the built-in numbers task only."""
        return self.summary.get("dataset_name") == "numbers"

    def examples(self) -> list[str]:
        """Sentences to start from: number words for a numbers model; none known otherwise."""
        return NUMBER_EXAMPLES if self.knows_numbers else []

    def knowledge(self) -> str:
        """What the model knows, for the page (Markdown)."""
        if self.load_error is not None:
            return ""
        if self.knows_numbers:
            return (
                "This model knows **English number words only** (the built-in task: one to ninety-nine thousand "
                "nine hundred and ninety-nine) and writes them as German number words. Anything else gives "
                "nonsense. Try an example below."
            )
        languages = " → ".join(self.summary[key] for key in ("src_lang", "tgt_lang") if self.summary.get(key))
        corpus = self.summary.get("dataset") or self.summary.get("dataset_name")
        if languages or corpus:
            trained = f" trained on {corpus}" if corpus else ""
            return f"This model translates {languages or 'its source language'}{trained}: type a sentence like those."
        return "Type a sentence in the language this model was trained on: it knows only what its training data held."

    def status(self) -> str:
        """The status line of the page (Markdown)."""
        if self.load_error is not None:
            return f"**Error:** {self.load_error}"
        config = self.model.config
        return (
            f"Model `{self.name}`: {config.encoder_layers}+{config.decoder_layers} layers, d_model {config.d_model}, "
            f"{config.encoder_attention_heads} heads, {config.max_position_embeddings} positions."
        )

    def translate(
        self, text: str, num_beams: float = NUM_BEAMS, length_penalty: float = LENGTH_PENALTY
    ) -> Translation:
        """Translate `text` with its attention maps. Raises ValueError with a message for the page."""
        if self.load_error is not None:
            raise ValueError(self.load_error)
        return translate_with_attention(
            self.model, self.tokenizer, text or "", num_beams=int(num_beams), length_penalty=float(length_penalty)
        )

    @staticmethod
    def hypothesis_rows(translation: Translation) -> list[list[Any]]:
        return [
            [rank, h.text, " ".join(h.tokens), round(h.log_prob, 4), round(h.score, 4)]
            for rank, h in enumerate(translation.hypotheses, start=1)
        ]

    @staticmethod
    def timing(translation: Translation) -> str:
        return (
            f"{len(translation.hypotheses)} hypotheses, translated with attention maps in "
            f"{translation.seconds * 1000:.0f} ms. The best GNMT score wins: log P(Y|X) / ((5 + |Y|) / 6)^α."
        )

    @staticmethod
    def attention(translation: Translation | None, layer: str | int, head: str | int) -> str:
        if translation is None:
            return "<p>Translate a sentence first: its attention maps appear here.</p>"
        return attention_html(translation.attention, int(layer), None if head == ALL_HEADS else int(head))

    def beam(self, translation: Translation | None) -> str:
        if translation is None:
            return "<p>Translate a sentence first: its beam search appears here.</p>"
        return beam_html(translation.trace, self.tokenizer, translation.length_penalty)


def launch_settings(port: int | None = None, host: str | None = "127.0.0.1") -> dict[str, Any]:
    """`Blocks.launch` options of an offline app: system-font theme, no share link, no server-side rendering; served
    on `host` (None: ``$GRADIO_SERVER_NAME`` or 127.0.0.1) and `port` (None: ``$GRADIO_SERVER_PORT`` or 7860)."""
    gr = _gradio()
    theme = gr.themes.Base(
        font=["system-ui", "-apple-system", "Segoe UI", "Helvetica", "Arial", "sans-serif"],
        font_mono=["ui-monospace", "Menlo", "Consolas", "monospace"],
    )
    return dict(server_name=host, server_port=port, share=False, ssr_mode=False, theme=theme)


def _gradio():
    os.environ["GRADIO_ANALYTICS_ENABLED"] = "False"  # before gradio is imported: it reads it once
    return import_optional("gradio", "demo", "the demo")


def build_app(model: str | PreTrainedModel, tokenizer: PreTrainedTokenizerBase | None = None):
    """The demo's `gradio.Blocks` for a model directory or Hub id, or a loaded `model` and its `tokenizer`.

    A model that does not load still gives an app: its page says why, and Translate answers with the same message.
    """
    gr = _gradio()
    if isinstance(model, str | os.PathLike):
        session = Session.load(os.fspath(model))
    else:
        session = Session(model, tokenizer, type(model).__name__)
    with gr.Blocks(title="vanilla-transformer demo", analytics_enabled=False) as demo:
        gr.Markdown("# Attention Is All You Need: see inside the model")
        gr.Markdown(session.status(), elem_id="vt-status")
        gr.Markdown(session.knowledge(), elem_id="vt-knows")
        state = gr.State(None)
        with gr.Tabs():
            with gr.Tab("Translate", id="translate"):
                _translate_tab(gr, session, state)
            with gr.Tab("Attention", id="attention"):
                _attention_tab(gr, session, state)
            with gr.Tab("Beam search step by step", id="beam"):
                gr.Markdown(
                    "The search of the last translation: after each step, the k live hypotheses and the finished "
                    "ones, each scored by GNMT's log P / lp(|Y|); the best score wins."
                )
                beam = gr.HTML(session.beam(None), elem_id="vt-beam")
                state.change(session.beam, state, beam)
            with gr.Tab("Positions and embeddings", id="positions"):
                _positions_tab(gr, session)
    demo.vt_session = session
    return demo


def _translate_tab(gr, session: Session, state) -> None:
    examples = session.examples()
    source = gr.Textbox(
        label="Source sentence",
        lines=2,
        elem_id="vt-source",
        placeholder=f"for example: {examples[0]}" if examples else "a sentence in the model's source language",
    )
    if examples:
        gr.Examples([[example] for example in examples], inputs=[source], label="Examples", elem_id="vt-examples")
    with gr.Row():
        num_beams = gr.Slider(1, 8, value=NUM_BEAMS, step=1, label="Beam size k", elem_id="vt-beams")
        alpha = gr.Slider(0.0, 2.0, value=LENGTH_PENALTY, step=0.1, label="Length penalty α", elem_id="vt-alpha")
    button = gr.Button("Translate", variant="primary", elem_id="vt-translate")
    output = gr.Textbox(label="Translation", interactive=False, elem_id="vt-output")
    timing = gr.Markdown(elem_id="vt-time")
    table = gr.Dataframe(headers=HYPOTHESIS_COLUMNS, label="The beam's hypotheses", elem_id="vt-hypotheses")

    def run(text, beams, penalty):
        try:
            translation = session.translate(text, beams, penalty)
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from None
        return translation.text, session.timing(translation), session.hypothesis_rows(translation), translation

    # One translation at a time: compute_attention switches the shared model's attention implementation.
    for trigger in (button.click, source.submit):
        trigger(run, [source, num_beams, alpha], [output, timing, table, state], concurrency_id="model")


def _attention_tab(gr, session: Session, state) -> None:
    config = session.model.config if session.model is not None else None
    layers = max(config.encoder_layers, config.decoder_layers) if config else 1
    heads = max(config.encoder_attention_heads, config.decoder_attention_heads) if config else 1
    gr.Markdown(
        "Each row is a query token, each column a key token; a row's shades are its attention weights (they sum "
        "to 1), from the model's own `output_attentions`. The decoder rows are the predicted target tokens."
    )
    with gr.Row():
        layer = gr.Radio([str(n) for n in range(1, layers + 1)], value="1", label="Layer", elem_id="vt-layer")
        head = gr.Radio([*map(str, range(1, heads + 1)), ALL_HEADS], value="1", label="Head", elem_id="vt-head")
    maps = gr.HTML(session.attention(None, 1, 1), elem_id="vt-attention")
    for trigger in (layer.change, head.change, state.change):
        trigger(session.attention, [state, layer, head], maps)


def _positions_tab(gr, session: Session) -> None:
    if session.model is None:
        gr.Markdown("No model loaded.")
        return
    table = positions(session.model, num_positions=min(100, session.model.config.max_position_embeddings))
    count, d_model = table.encoding.shape
    gr.Markdown(
        f"Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...), for this model's "
        f"d_model = {d_model}, positions 0 to {count - 1} (rows). Red is +1, blue -1."
    )
    gr.Image(
        heatmap_image(table.encoding, signed=True, scale=max(1, 400 // d_model)),
        label=f"Positional encoding, {count} positions × {d_model} dimensions",
        elem_id="vt-encoding",
    )
    gr.Markdown(
        "The dot product PE(p) · PE(q) depends only on the distance p − q: the same diagonal bands everywhere, "
        "which lets attention find relative positions."
    )
    gr.Image(
        heatmap_image(table.similarity, signed=True, scale=max(1, 400 // count)),
        label=f"Dot-product similarity between positions, {count} × {count}",
        elem_id="vt-similarity",
    )


__all__ = ["ALL_HEADS", "Session", "build_app", "launch_settings"]
