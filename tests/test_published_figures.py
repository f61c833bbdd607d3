"""Every figure in README.md and docs/*.md is rendered from the committed results in docs/results.

``scripts/render_figures.py --check`` re-renders each figure between its ``<!-- figure: NAME -->`` markers and
fails naming any that differs from its file; the tests here run it, show that it catches an edited number (in a
page or in a results file), and check that the committed Multi30k runs are what the docs say they are: the
``multi30k`` preset, the whole command within the hour, logged up to the step they stopped at.

A run trained before the preset's length penalty changed was scored again with the preset's search by resuming it
(``--resume`` takes no training step on a finished run; run.json's ``rescored`` gives the command): its
``results.json`` is the new one, ``results-before-rescoring.json`` the first, and the hour covers both commands.
"""

import json
import re
import shutil
from pathlib import Path

import pytest
import render_figures
import run_figures

ROOT = Path(__file__).resolve().parents[1]
MULTI30K = ROOT / "docs" / "results" / "multi30k"
RUNS = sorted(path.parent for path in MULTI30K.glob("*/results.json"))
STOPPED = sorted(path.parent for path in MULTI30K.glob("*/run.json") if not (path.parent / "results.json").exists())


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def pages_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in render_figures.pages(ROOT))


def test_every_published_figure_is_rendered_from_its_file():
    assert render_figures.render(ROOT, check=True) == []
    assert render_figures.main(["--check"]) == 0


@pytest.fixture()
def copy_of_the_docs(tmp_path: Path) -> Path:
    """README.md, docs/ and the model card's template (both copies) copied, so a test can break them."""
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "model_card.md", tmp_path / "model_card.md")
    (tmp_path / "vanilla_transformer" / "export").mkdir(parents=True)
    shutil.copy(
        ROOT / "vanilla_transformer/export/model_card.md", tmp_path / "vanilla_transformer/export/model_card.md"
    )
    shutil.copytree(ROOT / "docs", tmp_path / "docs")  # the PNGs too: the check compares the pictures
    return tmp_path


def test_the_check_fails_on_a_number_edited_in_a_page(copy_of_the_docs: Path):
    results = json.loads((copy_of_the_docs / "docs/results/multi30k/en-de-seed1/results.json").read_text())
    page = copy_of_the_docs / "docs" / "results.md"
    published = f"**{results['test_bleu']:.2f}**"
    assert published in page.read_text(encoding="utf-8")
    page.write_text(page.read_text(encoding="utf-8").replace(published, "**39.01**", 1), encoding="utf-8")
    assert render_figures.render(copy_of_the_docs, check=True) == ["docs/results.md: figure multi30k-table"]
    assert render_figures.main(["--check", "--root", str(copy_of_the_docs)]) == 1
    assert render_figures.main(["--root", str(copy_of_the_docs)]) == 0  # rendering puts the file's figure back
    assert published in page.read_text(encoding="utf-8") and "**39.01**" not in page.read_text(encoding="utf-8")
    assert render_figures.render(copy_of_the_docs, check=True) == []


def test_the_check_fails_on_a_number_edited_in_a_results_file(copy_of_the_docs: Path):
    path = copy_of_the_docs / "docs" / "results" / "numbers" / "results.json"
    results = json.loads(path.read_text(encoding="utf-8"))
    results["test_exact_match"] -= 1.0
    path.write_text(json.dumps(results), encoding="utf-8")
    assert sorted(render_figures.render(copy_of_the_docs, check=True)) == [
        "README.md: figure results-summary",
        "docs/results.md: figure numbers-table",
    ]


def test_an_unknown_or_unpublished_figure_stops_the_renderer(copy_of_the_docs: Path):
    readme = copy_of_the_docs / "README.md"
    text = readme.read_text(encoding="utf-8")
    readme.write_text(text + "\n<!-- figure: no-such-figure -->1.00<!-- /figure -->\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="unknown figure 'no-such-figure'"):
        render_figures.render(copy_of_the_docs, check=True)
    readme.write_text(text.replace("<!-- figure: results-summary -->", "<!-- gone -->"), encoding="utf-8")
    with pytest.raises(SystemExit, match="published nowhere: results-summary"):
        render_figures.render(copy_of_the_docs, check=True)


def test_there_are_committed_multi30k_runs():
    """Guards the parametrized tests below against an empty glob (a moved folder would skip them silently)."""
    folders = {run.name for run in RUNS}
    assert {folder for folder, _ in run_figures.MULTI30K_RUNS} == folders
    assert {run.name for run in STOPPED} == {"en-de-dropout0.3-lr0.6-stopped", "en-de-tiny-stopped"}


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_committed_multi30k_runs_are_what_the_docs_say(run):
    results, config, about = (read_json(run / name) for name in ("results.json", "training_config.json", "run.json"))
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    seconds = results["seconds"]
    if "rescored" in about:
        first = read_json(run / "results-before-rescoring.json")
        assert (first["step"], first["train_minutes"]) == (results["step"], results["train_minutes"])
        assert about["rescored"]["command"].startswith(about["command"]) and "--resume" in about["rescored"]["command"]
        seconds += first["seconds"]
    assert config["preset"] == "multi30k" and config["max_train_minutes"] * 60 <= seconds < 60 * 60
    assert results["train_minutes"] <= config["max_train_minutes"] + 1
    assert max(row["step"] for row in rows) == results["step"]
    assert sum("seconds" in row for row in rows) == 1  # one results row, the figures' run
    assert about["command"].startswith("vanilla-transformer train --preset multi30k")


@pytest.mark.parametrize("run", STOPPED, ids=[run.name for run in STOPPED])
def test_stopped_multi30k_runs_stopped_early(run):
    """A selection run stopped early has no results.json; the docs quote its last validation BLEU and loss."""
    config, about = read_json(run / "training_config.json"), read_json(run / "run.json")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert about["role"] == "stopped" and config["preset"] == "multi30k"
    assert not any("seconds" in row for row in rows)  # no results row: it never reached its test
    minutes = config["max_train_minutes"]
    whole = [
        read_json(folder / "results.json")["step"]
        for folder in RUNS
        if read_json(folder / "training_config.json")["max_train_minutes"] == minutes
    ]  # the runs that had the same time
    assert max(row["step"] for row in rows) < min(whole)  # stopped before any whole run's last step
    assert about["command"].startswith("vanilla-transformer train --preset multi30k")


def test_the_multi30k_length_penalty_is_the_one_chosen_on_validation():
    """The preset's alpha is the committed validation sweep's choice: of the alphas whose translations all stay
    within the longest reference (a larger alpha lets some run on towards the length limit), the one with the best
    mean validation BLEU over the trained models, and better than section 6.1's 0.6."""
    from vanilla_transformer.training.config import TrainingConfig

    sweep = read_json(MULTI30K / "length-penalty-sweep.json")
    contained = [
        alpha
        for alpha in sweep["mean_bleu"]
        if all(
            run["scores"][alpha]["longest_translation_words"] <= run["longest_reference_words"]
            for run in sweep["runs"].values()
        )
    ]
    chosen = max(contained, key=sweep["mean_bleu"].get)
    assert float(chosen) == TrainingConfig.from_preset("multi30k").decoding.length_penalty
    assert sweep["mean_bleu"][chosen] > sweep["mean_bleu"]["0.6"]
    assert all(run["split"] == "valid" for run in sweep["runs"].values())  # chosen on validation, never on test


def test_the_docs_state_the_multi30k_presets_alpha_where_they_name_it():
    from vanilla_transformer.training.config import TrainingConfig

    alpha = TrainingConfig.from_preset("multi30k").decoding.length_penalty
    pattern = r"`multi30k` preset's α is ([0-9.]+)|penalty α = ([0-9.]+) \(chosen on validation|decoding α ([0-9.]+)"
    stated = [float(next(value for value in match if value)) for match in re.findall(pattern, pages_text())]
    assert len(stated) >= 3 and all(value == alpha for value in stated), stated
