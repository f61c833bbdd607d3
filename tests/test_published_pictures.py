"""Every PNG under docs/ is drawn by scripts/render_figures.py from committed data, and its check catches one that
is not: drawn from another run, by another program, or from a results file edited since.

The check compares fingerprints (the data and the drawing code, in a PNG text chunk; `bench.pictures` says why not
pixels); where the matplotlib that drew the committed PNGs is installed, the pixels are compared too, so that a
fingerprint cannot stand for a picture it does not describe. The demo's pictures are checked against their record:
the weights are the softmax rows of a causal decoder, and each picture shows what its caption says.
"""

import json
import shutil
from pathlib import Path

import demo_figures
import numpy as np
import pytest
import render_figures
import run_figures
from bench.pictures import KEY, fingerprint_of, png_text

from vanilla_transformer.training.tracking import plot_metrics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


@pytest.fixture()
def docs_copy(tmp_path: Path) -> Path:
    """README.md, docs/ (PNGs included) and both copies of the model card's template, to break."""
    for name in ("README.md", "model_card.md", "vanilla_transformer/export/model_card.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    return tmp_path


def test_every_png_under_docs_is_a_picture_with_its_fingerprint():
    pngs = sorted(path.relative_to(ROOT / "docs").as_posix() for path in (ROOT / "docs").rglob("*.png"))
    assert pngs == sorted(render_figures.PICTURES)
    assert len(pngs) >= 6  # the three training-curve pictures and the demo's three
    for name, make in render_figures.PICTURES.items():
        assert fingerprint_of(ROOT / "docs" / name) == make(RESULTS).fingerprint(), name


def test_a_png_drawn_from_another_run_fails_the_check(docs_copy: Path):
    docs = docs_copy / "docs"
    other = run_figures.metrics_picture(docs / "results", "multi30k/en-de-seed2")  # the renderer, another run
    other.save(docs / "multi30k_en_de_metrics.png")
    assert render_figures.render(docs_copy, check=True) == ["docs/multi30k_en_de_metrics.png: picture"]
    assert render_figures.main(["--check", "--root", str(docs_copy)]) == 1
    assert render_figures.main(["--root", str(docs_copy)]) == 0  # rendering draws it again from its run
    assert render_figures.render(docs_copy, check=True) == []
    assert png_text(docs / "multi30k_en_de_metrics.png") == png_text(ROOT / "docs" / "multi30k_en_de_metrics.png")


def test_a_runs_own_metrics_png_fails_the_check(docs_copy: Path):
    """What the docs showed before: the metrics.png `train` writes, copied in. Same renderer, no fingerprint (and
    here even the same data): it is not the renderer's picture of the committed file."""
    docs = docs_copy / "docs"
    plot_metrics(docs / "results" / "numbers" / "metrics.jsonl", docs / "numbers_metrics.png")
    assert KEY not in png_text(docs / "numbers_metrics.png")
    assert render_figures.render(docs_copy, check=True) == ["docs/numbers_metrics.png: picture"]


def test_an_edited_results_file_fails_the_check_of_its_pictures(docs_copy: Path):
    record = docs_copy / "docs" / "results" / "demo" / "numbers.json"
    demo = json.loads(record.read_text(encoding="utf-8"))
    demo["attention"]["cross"][0][0][0][0] += 0.01  # one weight of layer 1, head 1
    record.write_text(json.dumps(demo), encoding="utf-8")
    assert render_figures.render(docs_copy, check=True) == ["docs/images/demo_attention_all_heads.png: picture"]
    demo["model"]["d_model"] = 64
    record.write_text(json.dumps(demo), encoding="utf-8")
    assert "docs/images/demo_positions.png: picture" in render_figures.render(docs_copy, check=True)


def test_a_png_no_module_draws_or_a_picture_no_page_shows_stops_the_renderer(docs_copy: Path):
    docs = docs_copy / "docs"
    shutil.copy(docs / "numbers_metrics.png", docs / "images" / "screenshot.png")
    with pytest.raises(SystemExit, match="no module's PICTURES draws: images/screenshot.png"):
        render_figures.render(docs_copy, check=True)
    (docs / "images" / "screenshot.png").unlink()
    page = docs / "demo.md"
    page.write_text(page.read_text(encoding="utf-8").replace("(images/demo_positions.png)", "(gone.png)"), "utf-8")
    with pytest.raises(SystemExit, match="shown on no page: images/demo_positions.png"):
        render_figures.render(docs_copy, check=True)


def pixels(path: Path) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(path)[..., :3]


def differing(first: Path, second: Path) -> float:
    """The share of pixels whose colour differs by more than 0.1 (of 1) between two PNGs; 1.0 for other sizes.
    One attention cell of another weight differs in 0.1% of the one-head picture's pixels."""
    a, b = pixels(first), pixels(second)
    return float((np.abs(a - b).max(axis=-1) > 0.1).mean()) if a.shape == b.shape else 1.0


def test_the_committed_pngs_are_the_pictures_their_fingerprints_name(tmp_path: Path):
    """Redrawn by the matplotlib that drew them, the pictures have the committed PNGs' pixels (to 0.05% of them,
    room for another build's text antialiasing); a picture with one attention weight changed does not (the
    comparison can fail)."""
    matplotlib = pytest.importorskip("matplotlib")
    drawn_by = {png_text(ROOT / "docs" / name)["Software"] for name in render_figures.PICTURES}
    if drawn_by != {f"matplotlib {matplotlib.__version__}"}:
        pytest.skip(f"the PNGs were drawn by {sorted(drawn_by)}, not by this matplotlib {matplotlib.__version__}")
    for name, make in render_figures.PICTURES.items():
        path = tmp_path / Path(name).name
        make(RESULTS).save(path)
        assert differing(ROOT / "docs" / name, path) < 0.0005, name
    picture = demo_figures.one_head_picture(RESULTS)
    picture.data["panels"][0]["weights"][0][0] = 0.5  # one cell of the encoder's map
    picture.save(tmp_path / "one_cell.png")
    assert differing(ROOT / "docs" / "images" / "demo_attention.png", tmp_path / "one_cell.png") > 0.0005


def demo_record() -> dict:
    return json.loads((RESULTS / demo_figures.RECORD).read_text(encoding="utf-8"))


def test_the_demo_record_is_a_translation_with_its_attention():
    demo = demo_record()
    attention, model = demo["attention"], demo["model"]
    assert demo["translation"] == demo["hypotheses"][0]["text"] and model["dataset"] == "numbers"
    for kind, (queries, keys) in demo_figures.TOKENS.items():
        weights = np.array(attention[kind])  # [layers, heads, queries, keys]
        assert weights.shape == (3, model["heads"], len(attention[queries]), len(attention[keys]))
        np.testing.assert_allclose(weights.sum(axis=-1), 1.0, atol=5e-4 * weights.shape[-1])  # rounded softmax rows
        if kind == "decoder_self":
            assert np.all(np.triu(weights, k=1) == 0)  # the causal mask
    assert (
        attention["output_tokens"][-1] == "</s>"
        and attention["decoder_input_tokens"][1:] == attention["output_tokens"][:-1]
    )  # the decoder input is the output shifted right
    finished = demo["steps"][-1]["finished"]
    assert [row[4] for row in finished].count(True) == 1 and finished[0][4]  # one winner, the best score
    assert " ".join(demo["hypotheses"][0]["tokens"]) == finished[0][0]


def test_the_demo_page_says_whether_its_model_is_the_committed_runs(docs_copy: Path):
    """Today it is: the model was trained again by `vanilla-transformer train` and logged the committed run's
    metrics, timings aside. A record of another run says so."""
    results = docs_copy / "docs" / "results"
    assert "the default job's committed run" in demo_figures.model_line(results)
    metrics = results / "numbers" / "metrics.jsonl"
    rows = metrics.read_text(encoding="utf-8").splitlines()
    shifted = json.loads(rows[0])
    shifted["train_loss"] += 1e-9
    metrics.write_text("\n".join([json.dumps(shifted), *rows[1:]]) + "\n", encoding="utf-8")
    assert "a model of another run" in demo_figures.model_line(results)
    rows[0] = json.dumps({**json.loads(rows[0]), "tokens_per_second": 1.0})  # a timing alone: still the same run
    metrics.write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert "the default job's committed run" in demo_figures.model_line(results)


def image_axes(figure) -> list:
    return [ax for ax in figure.axes if ax.images]


def test_the_all_heads_picture_shows_every_layer_kind_and_head():
    picture = demo_figures.all_heads_picture(RESULTS)
    figure = picture.draw(picture.data)
    demo = demo_record()
    shown = [
        (subfigure.get_suptitle(), ax.get_title()) for subfigure in figure.subfigs for ax in image_axes(subfigure)
    ]
    assert shown == [
        (demo_figures.TITLES[kind], f"layer {layer}, head {head}")
        for kind in demo_figures.TOKENS
        for layer in range(1, 4)
        for head in range(1, demo["model"]["heads"] + 1)
    ]
    first_cross = image_axes(figure.subfigs[2])[0]
    np.testing.assert_array_equal(first_cross.images[0].get_array(), demo["attention"]["cross"][0][0])
    assert [label.get_text() for label in first_cross.get_xticklabels()] == demo["attention"]["source_tokens"]


def test_the_one_head_picture_shows_the_three_kinds_with_readable_labels():
    picture = demo_figures.one_head_picture(RESULTS)
    figure = picture.draw(picture.data)
    demo = demo_record()
    layer, head = demo["shown"]["layer"], demo["shown"]["head"]
    axes = image_axes(figure)[:3]  # then the colour bar
    for ax, kind in zip(axes, demo_figures.TOKENS, strict=True):
        np.testing.assert_array_equal(ax.images[0].get_array(), demo["attention"][kind][layer - 1][head - 1])
    labels = {label.get_text(): (label.get_rotation(), label.get_fontsize()) for label in axes[0].get_xticklabels()}
    (dash, dash_size), (comma, comma_size), (word, word_size) = labels["-"], labels[","], labels["▁thousand"]
    assert (dash, comma, word) == (0, 0, 90) and min(dash_size, comma_size) > word_size  # punctuation upright, larger
    assert any(ax.get_label() == "<colorbar>" for ax in figure.axes)


def test_the_positions_picture_has_axes_ticks_and_colour_bars():
    from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_table

    picture = demo_figures.positions_picture(RESULTS)
    figure = picture.draw(picture.data)
    encoding, similarity = image_axes(figure)[:2]
    assert (encoding.get_xlabel(), encoding.get_ylabel()) == ("dimension i", "position pos")
    assert (similarity.get_xlabel(), similarity.get_ylabel()) == ("position q", "position p")
    table = sinusoidal_table(100, demo_record()["model"]["d_model"]).double().numpy()
    np.testing.assert_allclose(encoding.images[0].get_array(), table)
    assert len(encoding.get_xticks()) > 2 and len(encoding.get_yticks()) > 2
    assert sum(ax.get_label() == "<colorbar>" for ax in figure.axes) == 2


def test_the_recorder_writes_what_the_model_computes_and_the_pictures_draw_from_it(tiny_model_dir, tmp_path):
    """scripts/demo_figures.py on a tiny model: the record's translation is `translate()`'s, its weights the model's
    own ``output_attentions`` (to 4 decimals), and the renderer's pictures draw from such a record."""
    import torch

    from vanilla_transformer.model_dir import load_model_dir
    from vanilla_transformer.serving.search import translate

    sentence = "four hundred and seventy-nine"
    output = tmp_path / "results" / demo_figures.RECORD
    argv = ["--model", str(tiny_model_dir), "--sentence", sentence, "--layer", "2", "--head", "1"]
    assert demo_figures.main([*argv, "--output", str(output)]) == 0
    demo = json.loads(output.read_text(encoding="utf-8"))
    model, tokenizer = load_model_dir(tiny_model_dir)
    assert demo["translation"] == translate(model, tokenizer, [sentence])[0]
    assert demo["command"].startswith("python scripts/demo_figures.py --model") and demo["shown"]["layer"] == 2
    model.set_attn_implementation("eager")
    source = tokenizer(sentence, return_tensors="pt")
    labels = tokenizer(text_target=demo["translation"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        outputs = model(**source, labels=labels, output_attentions=True)
    np.testing.assert_allclose(demo["attention"]["cross"], torch.stack(outputs.cross_attentions)[:, 0], atol=6e-5)
    pictures = [make(tmp_path / "results") for make in demo_figures.PICTURES.values()]
    assert all(picture.draw(picture.data).axes for picture in pictures)
    with pytest.raises(SystemExit, match=r"^--layer 9 --head 1: the model has 2 layers of \d+ heads$"):
        demo_figures.main(["--model", str(tiny_model_dir), "--sentence", sentence, "--layer", "9"])
    with pytest.raises(SystemExit, match=r"^--head must be at least 1, got 0$"):
        demo_figures.main(["--model", str(tiny_model_dir), "--sentence", sentence, "--head", "0"])
