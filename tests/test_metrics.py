"""Tests of the BLEU, chrF and exact-match helpers and of the shipped `evaluate` modules."""

import evaluate
import huggingface_hub
import pytest
import sacrebleu

from vanilla_transformer import metrics
from vanilla_transformer.metrics import (
    BLEU_METRIC_PATH,
    CHRF_METRIC_PATH,
    compute_bleu,
    compute_chrf,
    exact_match,
    load_bleu_metric,
    load_chrf_metric,
)

HYPOTHESES = [
    "Ein Mann fährt mit dem Fahrrad über die Straße.",
    "Zwei Kinder spielen im Schnee.",
    "Die Frau trägt einen roten Hut.",
    "Ein Hund rennt durch das Gras.",
    "Dreihunderteinundzwanzig Leute warten am Bahnhof.",
]
REFERENCES = [
    "Ein Mann fährt mit seinem Fahrrad über die Straße.",
    "Zwei Kinder spielen im Schnee vor dem Haus.",
    "Die Frau trägt einen roten Hut.",
    "Ein Hund läuft durch das hohe Gras.",
    "Dreihunderteinundzwanzig Menschen warten am Bahnhof.",
]


@pytest.fixture
def offline(monkeypatch):
    """Forbid Hub access, so that a module that is not local cannot load."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)


def test_compute_bleu_equals_sacrebleu():
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])

    result = compute_bleu(HYPOTHESES, REFERENCES)

    assert result["score"] == pytest.approx(expected.score)
    assert 0 < result["score"] < 100
    assert (result["counts"], result["totals"], result["sys_len"], result["ref_len"]) == (
        expected.counts,
        expected.totals,
        expected.sys_len,
        expected.ref_len,
    )
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_compute_bleu_options_change_score_and_signature():
    shouted = [hypothesis.upper() for hypothesis in HYPOTHESES]

    cased = compute_bleu(shouted, REFERENCES)
    lowercased = compute_bleu(shouted, REFERENCES, lowercase=True)
    intl = compute_bleu(HYPOTHESES, REFERENCES, tokenize="intl")

    assert lowercased["score"] == pytest.approx(sacrebleu.corpus_bleu(shouted, [REFERENCES], lowercase=True).score)
    assert cased["score"] < lowercased["score"]
    assert "case:lc" in lowercased["signature"]
    assert "tok:intl" in intl["signature"]


def test_compute_chrf_equals_sacrebleu():
    chrf = compute_chrf(HYPOTHESES, REFERENCES)
    chrf_plus_plus = compute_chrf(HYPOTHESES, REFERENCES, word_order=2)

    assert chrf["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES]).score)
    assert chrf_plus_plus["score"] == pytest.approx(
        sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=2).score
    )
    assert chrf["signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:")
    assert "nw:2" in chrf_plus_plus["signature"]
    assert (chrf["char_order"], chrf["word_order"], chrf["beta"]) == (6, 0, 2)


def test_exact_match_is_a_percentage_of_identical_strings():
    assert exact_match(["a b", "c", "d", "e"], ["a b", "c ", "d", "E"]) == 50.0
    assert exact_match(HYPOTHESES, REFERENCES) == 20.0


@pytest.mark.parametrize("function", [compute_bleu, compute_chrf, exact_match])
def test_helpers_reject_mismatched_or_empty_inputs(function):
    with pytest.raises(ValueError, match=r"len\(hypotheses\)=2 and len\(references\)=1"):
        function(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="empty"):
        function([], [])


def test_metric_modules_live_inside_the_package():
    package_dir = metrics.__file__.removesuffix("__init__.py")
    for module_file in (BLEU_METRIC_PATH / "bleu.py", CHRF_METRIC_PATH / "chrf.py"):
        assert module_file.is_file()
        assert str(module_file).startswith(package_dir)


def test_shipped_bleu_module_loads_offline_and_matches_sacrebleu(offline, tmp_path):
    bleu = load_bleu_metric(cache_dir=str(tmp_path))

    result = bleu.compute(predictions=HYPOTHESES, references=REFERENCES)

    assert result["score"] == pytest.approx(sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES]).score)
    assert "nrefs:1|case:mixed|eff:no|tok:13a" in result["signature"]
    assert result == compute_bleu(HYPOTHESES, REFERENCES)


def test_shipped_bleu_module_accepts_options_and_batches(offline, tmp_path):
    shouted = [hypothesis.upper() for hypothesis in HYPOTHESES]
    bleu = evaluate.load(str(BLEU_METRIC_PATH), cache_dir=str(tmp_path))
    for hypothesis, reference in zip(shouted, REFERENCES, strict=True):
        bleu.add(prediction=hypothesis, reference=reference)

    result = bleu.compute(lowercase=True)

    assert result["score"] == pytest.approx(sacrebleu.corpus_bleu(shouted, [REFERENCES], lowercase=True).score)
    assert "case:lc" in result["signature"]


def test_shipped_chrf_module_loads_offline_and_matches_sacrebleu(offline, tmp_path):
    chrf = load_chrf_metric(cache_dir=str(tmp_path))

    result = chrf.compute(predictions=HYPOTHESES, references=REFERENCES, word_order=2)

    assert result["score"] == pytest.approx(sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES], word_order=2).score)
    assert "nw:2" in result["signature"]


def test_bleu_applies_only_where_a_reference_has_a_4_gram():
    """One-word references (German number words) leave BLEU 0 whatever the translations, sacreBLEU itself says:
    there BLEU does not apply, and models are chosen by exact match."""
    from vanilla_transformer.metrics import bleu_applies, selection_metric

    words = ["dreihunderteinundzwanzig", "zwölf", "siebenhundert"]
    assert sacrebleu.corpus_bleu(words, [words]).score == 0.0  # perfect translations, BLEU 0
    assert not bleu_applies(words) and selection_metric(words) == "exact_match"
    sentences = [*words, "Ein Hund rennt am Strand."]
    assert sacrebleu.corpus_bleu(sentences, [sentences]).score > 0
    assert bleu_applies(sentences) and selection_metric(sentences) == "bleu"
