"""The demo's views without a browser (issue 28): the Translate view's hypotheses and scores, the attention maps and
their HTML, the beam view, the positions, bad input, the notebook views and the Hub Space folder."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap
import urllib.request
from html.parser import HTMLParser

import numpy as np
import pytest
import torch
from huggingface_hub import metadata_load

from vanilla_transformer.demo import Session, positions, show_attention, show_beam, translate_with_attention
from vanilla_transformer.demo.render import beam_verdict
from vanilla_transformer.demo.space import MODEL_VARIABLE, write_space
from vanilla_transformer.serving.search import BeamStep, BeamTrace, translate

SENTENCE = "red dog eats small fish"


class Tables(HTMLParser):
    """The attention-map tables of a page: their data attributes."""

    def __init__(self, html: str):
        super().__init__()
        self.maps: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table" and attrs.get("class") == "vt-map":
            self.maps.append(attrs)


def weights(table: dict[str, str]) -> np.ndarray:
    data = np.array(json.loads(table["data-weights"]))
    assert list(data.shape) == json.loads(table["data-shape"])
    return data


@pytest.fixture(scope="module")
def translation(copy_model):
    model, tokenizer = copy_model
    return translate_with_attention(model, tokenizer, SENTENCE, num_beams=4, length_penalty=0.6)


def test_the_translation_is_translates_and_each_hypothesis_is_scored_as_the_paper_says(copy_model, translation):
    model, tokenizer = copy_model
    assert translation.text == translate(model, tokenizer, [SENTENCE])[0] == translation.hypotheses[0].text
    assert len(translation.hypotheses) == 4
    assert [h.score for h in translation.hypotheses] == sorted((h.score for h in translation.hypotheses), reverse=True)
    source = tokenizer(SENTENCE, return_tensors="pt")["input_ids"]
    for hypothesis in translation.hypotheses:
        # log P(Y | X) by teacher forcing, token by token, and GNMT's lp(|Y|) = ((5 + |Y|) / 6) ** 0.6
        target = tokenizer(text_target=hypothesis.text, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=source, labels=target).logits[0]
        log_prob = sum(float(torch.log_softmax(logits[i], -1)[token]) for i, token in enumerate(target[0]))
        assert hypothesis.tokens[-1] == "</s>" and len(hypothesis.tokens) == target.shape[1]
        assert hypothesis.log_prob == pytest.approx(log_prob, abs=1e-3)
        assert hypothesis.score == pytest.approx(log_prob / ((5 + target.shape[1]) / 6) ** 0.6, abs=1e-3)


def test_the_maps_are_the_models_output_attentions_drawn_target_by_source(copy_model, translation):
    model, tokenizer = copy_model
    source = tokenizer(SENTENCE, return_tensors="pt")["input_ids"]
    target = tokenizer(text_target=translation.text, return_tensors="pt")["input_ids"]
    model.set_attn_implementation("eager")
    try:
        with torch.no_grad():
            outputs = model(input_ids=source, labels=target, output_attentions=True)
    finally:
        model.set_attn_implementation("sdpa")
    session = Session(model, tokenizer, "copy")
    maps = {m["data-kind"]: m for m in Tables(session.attention(translation, 2, 3)).maps}
    assert set(maps) == {"encoder_self", "decoder_self", "cross"}
    assert all(m["data-layer"] == "2" and m["data-head"] == "3" for m in maps.values())
    expected = {
        "encoder_self": outputs.encoder_attentions,
        "decoder_self": outputs.decoder_attentions,
        "cross": outputs.cross_attentions,
    }
    for kind, table in maps.items():
        np.testing.assert_allclose(weights(table), expected[kind][1][0, 2].numpy(), atol=1e-4)
    assert weights(maps["cross"]).shape == (target.shape[1], source.shape[1])  # target × source
    decoder = weights(maps["decoder_self"])
    assert np.all(np.triu(decoder, k=1) == 0) and np.all(np.diag(decoder) > 0)  # the causal triangle
    np.testing.assert_allclose(decoder.sum(axis=1), 1, atol=1e-3)
    all_heads = Tables(session.attention(translation, 1, "all")).maps
    assert [m["data-head"] for m in all_heads if m["data-kind"] == "cross"] == ["1", "2", "3", "4"]


def test_bad_input_is_refused_with_a_message_before_decoding(copy_model, monkeypatch, tmp_path):
    model, tokenizer = copy_model
    session = Session(model, tokenizer, "copy")
    steps = []
    monkeypatch.setattr(type(model), "forward", lambda *args, **kwargs: steps.append(1))  # no decoding may run
    for blank in ("", "   \n", None):
        with pytest.raises(ValueError, match="Enter a sentence to translate"):
            session.translate(blank)
    with pytest.raises(ValueError, match=r"has \d+ tokens, more than the model's max_position_embeddings=64"):
        session.translate(" ".join(["red dog"] * 40))
    assert steps == []
    broken = Session.load(str(tmp_path / "no-such-model"))
    assert broken.model is None and str(tmp_path / "no-such-model") in broken.load_error
    assert broken.status().startswith("**Error:**")
    with pytest.raises(ValueError, match="did not load"):
        broken.translate(SENTENCE)


def test_the_positions_are_section_3_5s_for_the_models_d_model(copy_model):
    model, _ = copy_model
    table = positions(model, 50)
    assert table.encoding.shape == (50, model.config.d_model)
    pos, i, d = 7, 5, model.config.d_model
    assert table.encoding[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / d)), abs=1e-6)
    assert table.encoding[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / d)), abs=1e-6)
    # What the encoder adds to its embeddings is this table.
    np.testing.assert_allclose(model.model.encoder.embed_positions(50).numpy(), table.encoding, atol=1e-6)
    # PE(p) . PE(q) depends on p - q only: constant along each diagonal, d_model / 2 on the main one.
    np.testing.assert_allclose(np.diag(table.similarity), d / 2, rtol=1e-5)
    np.testing.assert_allclose(np.diag(table.similarity, 3), table.similarity[0, 3], atol=1e-4)


def test_the_notebook_views_show_the_maps_and_the_search(copy_model):
    model, tokenizer = copy_model
    view = show_attention(model, tokenizer, SENTENCE, layer=2)  # all heads
    maps = Tables(view._repr_html_()).maps
    assert len(maps) == 3 * 4 and {m["data-layer"] for m in maps} == {"2"}
    cross = [m for m in maps if m["data-kind"] == "cross"]
    np.testing.assert_allclose(weights(cross[1]), view.translation.attention.cross[1, 1], atol=1e-4)
    with pytest.raises(ValueError, match="layer=3"):
        show_attention(model, tokenizer, SENTENCE, layer=3)

    beam = show_beam(model, tokenizer, SENTENCE, num_beams=3)
    html = beam._repr_html_()
    steps = beam.translation.trace.steps
    assert re.findall(r'<tr data-step="(\d+)"', html) == [str(step.step) for step in steps]
    assert html.count('class="vt-winner"') >= 1 and beam.translation.text in html
    assert f"{beam.translation.text!r} wins" in html.replace("&#x27;", "'")


def test_the_verdict_says_when_the_length_penalty_chose_the_winner(copy_model):
    _, tokenizer = copy_model
    short, long = [2, 85, 3], [2, 85, 282, 308, 307, 3]
    lp = {n: ((5 + n) / 6) ** 1.0 for n in (2, 5)}
    finished = [(long, -1.5, -1.5 / lp[5]), (short, -1.2, -1.2 / lp[2])]  # the long one scores better
    trace = BeamTrace([BeamStep(5, [], finished)], long, tokenizer.decode(long, skip_special_tokens=True))
    assert finished[0][2] > finished[1][2] and finished[0][1] < finished[1][1]
    assert "The length penalty decided it" in beam_verdict(trace, tokenizer, 1.0)
    fair = BeamTrace([BeamStep(5, [], finished[::-1])], short, tokenizer.decode(short, skip_special_tokens=True))
    assert "did not change the winner" in beam_verdict(fair, tokenizer, 1.0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


SPACE_RUN = """
import re, sys, runpy, urllib.request
for name in {blocked!r}:
    sys.modules[name] = None  # only the core and the demo extra
app = runpy.run_path("app.py")
demo = app["demo"]
assert demo.vt_session.load_error is None, demo.vt_session.load_error
_, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **app["launch_settings"]({port}))
page = urllib.request.urlopen(url, timeout=60).read().decode()
demo.close()
external = [u for u in re.findall(r'(?:src|href)="(https?://[^"]*)', page) if not u.startswith(url)]
print("PAGE", len(page), "EXTERNAL", external, "TITLE", "vanilla-transformer demo" in page)
"""


def test_the_space_folder_runs_with_only_the_core_and_the_demo_extra(tiny_model_dir, tmp_path):
    pytest.importorskip("gradio", reason="the demo extra (gradio) is not installed")
    folder = write_space(tmp_path / "space", "my-org/transformer-numbers")
    assert sorted(path.name for path in folder.iterdir()) == ["README.md", "app.py", "requirements.txt"]
    metadata = metadata_load(folder / "README.md")
    assert metadata["sdk"] == "gradio" and metadata["app_file"] == "app.py"
    assert metadata["models"] == ["my-org/transformer-numbers"] and metadata["sdk_version"]
    assert (folder / "requirements.txt").read_text().startswith("vanilla-transformer[demo]==")
    assert "my-org/transformer-numbers" in (folder / "app.py").read_text()
    with pytest.raises(ValueError, match="is a folder that is not empty"):
        write_space(folder, "my-org/transformer-numbers")

    blocked = ["matplotlib", "datasets", "evaluate", "sacrebleu", "ctranslate2", "sentencepiece", "peft"]
    code = textwrap.dedent(SPACE_RUN.format(blocked=blocked, port=free_port()))
    env = {**__import__("os").environ, MODEL_VARIABLE: str(tiny_model_dir), "HF_HUB_OFFLINE": "1"}
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=240
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "EXTERNAL [] TITLE True" in completed.stdout, completed.stdout


def test_push_space_dry_run_writes_the_model_and_the_space(tiny_model_dir, tmp_path):
    from tiny_model import load_script

    target = tmp_path / "upload"
    assert (
        load_script("push").main([str(tiny_model_dir), "org/numbers", "--dry-run", str(target), "--space", "org/demo"])
        == 0
    )
    assert (target / "config.json").is_file()
    space = tmp_path / "upload-space"
    assert metadata_load(space / "README.md")["models"] == ["org/numbers"]
    assert "'org/numbers'" in (space / "app.py").read_text()


def test_a_page_is_served_offline(copy_model):
    pytest.importorskip("gradio", reason="the demo extra (gradio) is not installed")
    from vanilla_transformer.demo import build_app, launch_settings

    demo = build_app(*copy_model)
    _, url, _ = demo.launch(prevent_thread_lock=True, quiet=True, **launch_settings(free_port()))
    try:
        page = urllib.request.urlopen(url, timeout=60).read().decode()
        config = json.loads(urllib.request.urlopen(url + "config", timeout=60).read())
    finally:
        demo.close()
    # Nothing the page loads comes from elsewhere: no CDN scripts or stylesheets, no web fonts.
    assert [u for u in re.findall(r'(?:src|href)="(https?://[^"]*)', page) if not u.startswith(url)] == []
    assert "googleapis" not in page and "googleapis" not in json.dumps(config)


def test_the_latency_script_writes_its_figures_and_environment(tiny_model_dir, tmp_path):
    """Runs, records; the figure itself is for a quiet machine, so it is not checked here."""
    from benchmark_demo import main

    source = tmp_path / "source.txt"
    source.write_text("three hundred and twelve\n\nforty-two\n", encoding="utf-8")
    output = tmp_path / "results" / "demo_latency.json"
    assert (
        main(["--model", str(tiny_model_dir), "--source", str(source), "--threads", "1", "--output", str(output)]) == 0
    )
    figures = json.loads(output.read_text())
    assert figures["sentences"] == 2 and figures["max_seconds"] >= figures["median_seconds"] > 0
    assert {"command", "load_average_start", "versions"} <= figures.keys()
    assert figures["versions"]["transformers"]


def test_the_page_says_what_the_model_knows_and_offers_examples(copy_model, tmp_path):
    """A numbers model opens with number words to try and says it knows nothing else; another model says so
    generically, without examples it cannot know."""
    from vanilla_transformer.demo.app import NUMBER_EXAMPLES, Session

    model, tokenizer = copy_model
    numbers = Session(model, tokenizer, "m", summary={"dataset_name": "numbers", "src_lang": "en", "tgt_lang": "de"})
    assert numbers.examples() == NUMBER_EXAMPLES and {"five", "twelve", "forty-two", "seven hundred"} <= set(
        NUMBER_EXAMPLES
    )
    assert "English number words only" in numbers.knowledge()
    other = Session(model, tokenizer, "m", summary={"dataset": "wmt14", "src_lang": "en", "tgt_lang": "de"})
    assert other.examples() == [] and other.knowledge().startswith("This model translates en → de trained on wmt14")
    assert Session(model, tokenizer, "m").knowledge().startswith("Type a sentence in the language")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "training_summary.json").write_text('{"dataset_name": "numbers"}')
    assert Session.load(str(tmp_path)).knows_numbers


def test_attention_maps_are_large_with_a_colour_scale(translation):
    from vanilla_transformer.demo.render import attention_html, shade

    page = attention_html(translation.attention, 1, 1)
    assert "width: 32px" in page and f'data-low="{shade(0)}" data-high="{shade(1)}"' in page
    assert f"linear-gradient(to right, {shade(0)}" in page and page.count('class="vt-scale"') == 1


def _sigint_at_default():
    """In the child: SIGINT's default action, unblocked, as at a terminal (this worker may have it ignored)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def test_the_demo_command_says_where_it_serves_in_its_own_words_and_ctrl_c_exits_130(tiny_model_dir):
    """Issue 67: ``demo`` printed gradio's launch lines (``set share=True in launch()``, which a command-line user
    cannot do) and httpx INFO lines, and exited 0 on Ctrl-C where the docs say 130."""
    import os
    import signal

    pytest.importorskip("gradio", reason="the demo extra (gradio) is not installed")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "vanilla_transformer", "demo", str(tiny_model_dir), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_at_default,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip
    try:
        first = process.stdout.readline()  # printed once the server answers
        assert first == f"serving {tiny_model_dir} at http://127.0.0.1:{port}/ (Ctrl-C stops it)\n", first
        assert (
            "vanilla-transformer demo"
            in urllib.request.urlopen(first.split(" at ")[1].split()[0], timeout=60).read().decode()
        )
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err[-3000:]
    assert err.strip().splitlines()[-1] == "vanilla-transformer demo: interrupted", err[-3000:]
    assert "share=True" not in first + out + err and "httpx" not in err and "Running on" not in out, out + err
