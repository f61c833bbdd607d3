#!/usr/bin/env python
"""The pictures and tables of docs/demo.md, from one translation of the browser demo, drawn without the model.

Run on a trained model, this script records what the demo's views show for one sentence: the demo's own computation
(`translate_with_attention`: the paper's beam search step by step, and the model's attention maps on the
translation), and the model's size for its sinusoidal positions. It writes them to docs/results/demo/numbers.json
(with the command, wall time, load and versions). ``scripts/render_figures.py`` then draws the pictures
(``PICTURES``) and the tables (``FIGURES``) from that file::

    vanilla-transformer train                        # the default job: runs/numbers/model
    python scripts/demo_figures.py --model runs/numbers/model \\
        --sentence "forty-two thousand, five hundred and seventeen" --layer 3 --head 2
    python scripts/render_figures.py
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from bench.figures import read_json, table
from bench.options import check
from bench.pictures import Picture
from bench.record import Record

from vanilla_transformer.training.run_dir import RunLayout
from vanilla_transformer.training.tracking import read_metrics
from vanilla_transformer.visualization import AXIS_LABELS, draw_attention_map

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
RECORD = "demo/numbers.json"
"""The recorded translation, under docs/results."""

TITLES = {  # kind: the title of its maps, as the demo's captions (the pictures' data, so fingerprinted)
    "encoder_self": "Encoder self-attention (source × source)",
    "decoder_self": "Decoder masked self-attention (target × decoder input)",
    "cross": "Encoder–decoder attention (target × source)",
}
TOKENS = {  # kind: the record's (query, key) tokens
    "encoder_self": ("source_tokens", "source_tokens"),
    "decoder_self": ("output_tokens", "decoder_input_tokens"),
    "cross": ("output_tokens", "source_tokens"),
}
CELL = 0.26
"""Inches per attention cell, so that a token label fits its row and column."""


def record(session, sentence: str, layer: int, head: int, positions: int = 100) -> dict[str, Any]:
    """What the demo shows for `sentence` with the model of `session` (a loaded `demo.Session`): its hypotheses, its
    beam search step by step, its attention (weights to 4 decimals, as the page's tables carry them) and the model's
    size."""
    from vanilla_transformer.demo import translate_with_attention
    from vanilla_transformer.demo.render import beam_verdict
    from vanilla_transformer.generation_vanilla_transformer import gnmt_length_penalty
    from vanilla_transformer.visualization import display_tokens

    config, tokenizer = session.model.config, session.tokenizer
    translation = translate_with_attention(session.model, tokenizer, sentence)
    alpha = translation.length_penalty

    def shown(tokens: list[int]) -> str:
        return " ".join(display_tokens(tokenizer, tokens[1:]))  # without the decoder start token

    steps = [
        {
            "step": step.step,
            "live": [[shown(tokens), log_prob] for tokens, log_prob in step.live],
            "finished": [
                [shown(tokens), log_prob, gnmt_length_penalty(len(tokens) - 1, alpha), score, tokens == translation.trace.best]
                for tokens, log_prob, score in step.finished
            ],
        }
        for step in translation.trace.steps
    ]  # fmt: skip
    attention = translation.attention
    return {
        "model": {
            "path": session.name,
            "dataset": session.summary.get("dataset_name"),
            "encoder_layers": config.encoder_layers,
            "decoder_layers": config.decoder_layers,
            "heads": config.encoder_attention_heads,
            "d_model": config.d_model,
            "max_position_embeddings": config.max_position_embeddings,
        },
        "sentence": translation.source,
        "translation": translation.text,
        "num_beams": len(translation.hypotheses),
        "length_penalty": alpha,
        "hypotheses": [vars(hypothesis) for hypothesis in translation.hypotheses],
        "verdict": beam_verdict(translation.trace, tokenizer, alpha),
        "steps": steps,
        "shown": {"layer": layer, "head": head, "positions": min(positions, config.max_position_embeddings)},
        "attention": {
            "source_tokens": attention.source_tokens,
            "decoder_input_tokens": attention.decoder_input_tokens,
            "output_tokens": attention.output_tokens,
            **{kind: getattr(attention, kind).astype("float64").round(4).tolist() for kind in TOKENS},
        },
    }


def attention_map(demo: dict, kind: str, layer: int, head: int) -> dict[str, Any]:
    """One head's map of the record: its weights and tokens, counted from 1."""
    attention = demo["attention"]
    query, key = TOKENS[kind]
    weights = attention[kind][layer - 1][head - 1]
    return {"kind": kind, "layer": layer, "head": head, "weights": weights, "queries": attention[query],
            "keys": attention[key]}  # fmt: skip


def new_figure(width: float, height: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def draw_map(ax, panel: dict, *, title: str, labels: bool = True):
    """One map on `ax`, the demo's colours (white 0 to dark blue 1), with its axes' labels unless not `labels`."""
    image = draw_attention_map(ax, panel["weights"], panel["queries"], panel["keys"], font_size=9, cmap="Blues",
                               aspect="equal")  # fmt: skip
    ax.set_title(title, fontsize=9)
    if labels:
        x_label, y_label = AXIS_LABELS[panel["kind"]]
        ax.set_xlabel(x_label, fontsize=9)
        ax.set_ylabel(y_label, fontsize=9)
    return image


def draw_one_head(data: dict):
    """The three kinds of attention of one layer and head, side by side, with the colour scale."""
    panels, cell = data["panels"], data["cell"]
    width = cell * sum(len(panel["keys"]) for panel in panels) + 1.8 * len(panels) + 1.2
    figure = new_figure(width, cell * max(len(panel["queries"]) for panel in panels) + 2.3)
    ratios = [len(panel["keys"]) for panel in panels]  # cells of one size
    axes = figure.subplots(1, len(panels), width_ratios=ratios)
    for ax, panel in zip(axes, panels, strict=True):
        image = draw_map(ax, panel, title=data["titles"][panel["kind"]].replace(" (", "\n("))
    figure.colorbar(image, ax=list(axes), shrink=0.6, label="attention weight")
    figure.suptitle(f"“{data['sentence']}”: layer {data['layer']}, head {data['head']}")
    return figure


def draw_all_heads(data: dict):
    """Every head of every layer of each kind: one block per kind, a row per layer, a column per head."""
    blocks, cell = data["blocks"], data["cell"]
    heights = [len(rows) * (cell * len(rows[0][0]["queries"]) + 1.4) + 0.5 for rows in blocks]
    columns = len(blocks[0][0])
    width = columns * (cell * max(len(rows[0][0]["keys"]) for rows in blocks) + 1.6) + 1.2
    figure = new_figure(width, sum(heights) + 0.5)
    for subfigure, rows in zip(figure.subfigures(len(blocks), 1, height_ratios=heights), blocks, strict=True):
        axes = subfigure.subplots(len(rows), columns, squeeze=False)
        for row, ax_row in zip(rows, axes, strict=True):
            for panel, ax in zip(row, ax_row, strict=True):
                image = draw_map(ax, panel, title=f"layer {panel['layer']}, head {panel['head']}", labels=False)
                if panel["head"] > 1:
                    ax.set_yticklabels([])
        x_label, y_label = AXIS_LABELS[rows[0][0]["kind"]]
        subfigure.supxlabel(x_label, fontsize=9)
        subfigure.supylabel(y_label, fontsize=9)
        subfigure.suptitle(data["titles"][rows[0][0]["kind"]], fontweight="bold")
        subfigure.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    figure.suptitle(f"“{data['sentence']}”: every layer and head", fontsize=13)
    return figure


def draw_positions(data: dict):
    """Section 3.5's table for the model's d_model, positions down and dimensions across, and its dot products."""
    from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_table

    table = sinusoidal_table(data["positions"], data["d_model"]).double()  # [P, d_model]
    similarity = table @ table.T  # [P, P]
    figure = new_figure(13, 5.6)
    encoding_ax, similarity_ax = figure.subplots(1, 2, width_ratios=[data["d_model"], data["positions"]])
    image = encoding_ax.imshow(table.numpy(), cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    encoding_ax.set(xlabel="dimension i", ylabel="position pos", title="PE(pos, i)")
    figure.colorbar(image, ax=encoding_ax, label="PE(pos, i)")
    extent = float(similarity.abs().max())
    image = similarity_ax.imshow(
        similarity.numpy(), cmap="RdBu_r", vmin=-extent, vmax=extent, aspect="equal", interpolation="nearest"
    )
    similarity_ax.set(xlabel="position q", ylabel="position p", title="PE(p) · PE(q): depends on p − q only")
    figure.colorbar(image, ax=similarity_ax, label="PE(p) · PE(q)")
    figure.suptitle(
        "Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i / d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model)),"
        f" d_model = {data['d_model']}, positions 0 to {data['positions'] - 1}"
    )
    return figure


def one_head_picture(results: Path) -> Picture:
    demo = read_json(results, RECORD)
    layer, head = demo["shown"]["layer"], demo["shown"]["head"]
    panels = [attention_map(demo, kind, layer, head) for kind in TOKENS]
    data = {
        "sentence": demo["sentence"],
        "layer": layer,
        "head": head,
        "panels": panels,
        "titles": TITLES,
        "cell": CELL,
    }
    return Picture(data, draw_one_head, code=(draw_map, draw_attention_map, new_figure))


def all_heads_picture(results: Path) -> Picture:
    demo = read_json(results, RECORD)
    heads = range(1, demo["model"]["heads"] + 1)
    blocks = [  # per kind, per layer, per head
        [[attention_map(demo, kind, layer, head) for head in heads] for layer in range(1, len(weights) + 1)]
        for kind, weights in ((kind, demo["attention"][kind]) for kind in TOKENS)
    ]
    data = {"sentence": demo["sentence"], "blocks": blocks, "titles": TITLES, "cell": CELL}
    return Picture(data, draw_all_heads, code=(draw_map, draw_attention_map, new_figure))


def positions_picture(results: Path) -> Picture:
    demo = read_json(results, RECORD)
    data = {"positions": demo["shown"]["positions"], "d_model": demo["model"]["d_model"]}
    return Picture(data, draw_positions, code=(new_figure,))


def code(text: str) -> str:
    """`text` as inline code in a Markdown table cell."""
    return "`" + text.replace("|", "\\|") + "`"


def hypotheses_table(results: Path) -> str:
    """The Translate view's table: the beam's best finished hypotheses, best GNMT score first."""
    demo = read_json(results, RECORD)
    rows = [
        [str(rank), hypothesis["text"], code(" ".join(hypothesis["tokens"])), f"{hypothesis['log_prob']:.4f}",
         f"{hypothesis['score']:.4f}"]
        for rank, hypothesis in enumerate(demo["hypotheses"], start=1)
    ]  # fmt: skip
    return table(["rank", "translation", "tokens", "log P(Y\\|X)", "GNMT score"], ["r", "l", "l", "r", "r"], rows)


def beam_table(results: Path) -> str:
    """The Beam search view: after each step the live hypotheses (log P) and the finished ones (log P / lp = score),
    best first, the winner in bold."""
    demo = read_json(results, RECORD)
    rows = []
    for step in demo["steps"]:
        live = "<br>".join(f"{code(tokens)} ({log_prob:.3f})" for tokens, log_prob in step["live"])
        finished = "<br>".join(
            f"{'**' * winner}{code(tokens)}{'**' * winner} ({log_prob:.3f} / {lp:.3f} = {score:.3f})"
            for tokens, log_prob, lp, score, winner in step["finished"]
        )
        rows.append([str(step["step"]), live, finished or "—"])
    header = ["step", "live hypotheses (log P), best first", "finished hypotheses (log P / lp = score), best first"]
    return table(header, ["r", "l", "l"], rows)


def verdict(results: Path) -> str:
    return read_json(results, RECORD)["verdict"]


def model_line(results: Path) -> str:
    """The model and the sentence of the record, where it was recorded, and whether the model is the committed
    default job's: whether its run logged the same metrics as docs/results/numbers, timings aside."""
    demo = read_json(results, RECORD)
    model = demo["model"]
    committed = training_fingerprint(RunLayout(results / "numbers").metrics)
    run = (
        "the model of the default job's committed run (its training logged the same metrics, timings aside, as the "
        "run of [the results page](results.md))"
        if model["training_fingerprint"] == committed
        else "a model of another run than the default job's committed one"
    )
    return (
        f"`{model['path']}` ({model['encoder_layers']}+{model['decoder_layers']} layers, d_model {model['d_model']}, "
        f"{model['heads']} heads), {run}, on “{demo['sentence']}”, recorded by `{demo['command']}` "
        f"({demo['processor']}, torch {demo['versions']['torch']})"
    )


PICTURES = {  # path under docs/: its picture
    "images/demo_attention.png": one_head_picture,
    "images/demo_attention_all_heads.png": all_heads_picture,
    "images/demo_positions.png": positions_picture,
}

FIGURES = {
    "demo-record": model_line,
    "demo-hypotheses": hypotheses_table,
    "demo-beam": beam_table,
    "demo-verdict": verdict,
}


def compact_json(value: Any, depth: int = 0) -> str:
    """`value` as indented JSON, each list of numbers or strings (a row of weights, a sentence's tokens) on one
    line."""
    if isinstance(value, list) and not any(isinstance(item, (list, dict)) for item in value):
        return json.dumps(value, ensure_ascii=False)
    if not value or not isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(key)}: {compact_json(item, depth + 1)}" for key, item in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}"
    return "[\n" + ",\n".join(pad + compact_json(item, depth + 1) for item in value) + "\n" + " " * depth + "]"


def training_fingerprint(metrics: Path) -> str:
    """SHA-256 of a run's metrics.jsonl without its timings: equal for two runs that trained the same weights."""
    timings = {"tokens_per_second", "train_minutes", "train_tokens_per_second", "seconds"}
    rows = [{key: value for key, value in row.items() if key not in timings} for row in read_metrics(metrics)]
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="trained model directory")
    parser.add_argument("--sentence", required=True, help="the sentence to translate")
    parser.add_argument("--layer", type=int, default=1, help="the layer of the one-head picture (default: 1)")
    parser.add_argument("--head", type=int, default=1, help="the head of the one-head picture (default: 1)")
    parser.add_argument("--output", type=Path, default=RESULTS / RECORD, help="the record (default: %(default)s)")
    args = parser.parse_args(argv)
    check(args, least={"--layer": 1, "--head": 1})
    clock = Record(__file__, sys.argv[1:] if argv is None else argv)
    from vanilla_transformer.demo import Session

    session = Session.load(args.model)
    if session.load_error is not None:
        raise SystemExit(f"--model={args.model}: {session.load_error}")
    config = session.model.config
    layers, heads = min(config.encoder_layers, config.decoder_layers), config.encoder_attention_heads
    if args.layer > layers or args.head > heads:
        raise SystemExit(f"--layer {args.layer} --head {args.head}: the model has {layers} layers of {heads} heads")
    demo = record(session, args.sentence, args.layer, args.head)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    metrics = RunLayout(Path(args.model).parent).metrics  # the run that trained the model, if it is beside it
    demo["model"]["training_fingerprint"] = training_fingerprint(metrics) if metrics.is_file() else None
    args.output.write_text(compact_json(clock.result(demo)) + "\n", encoding="utf-8")
    print(args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
