"""The paper's BLEU (`vanilla_transformer.metrics.compound_split`) against a computation written here from the recipe
of tensor2tensor's get_ende_bleu.sh: Moses tokens, the ##AT##-##AT## split (a loop over characters, not the
module's regular expression), and multi-bleu.perl's corpus BLEU (clipped n-gram counts, brevity penalty) by hand.
The real newstest2014 is read from the shared data folder, where present."""

import json
import math
import random
from collections import Counter

import pytest
from tiny_model import load_script

from vanilla_transformer.metrics import compute_bleu
from vanilla_transformer.metrics.compound_split import (
    compute_compound_split_bleu,
    moses_tokenize,
    recipe,
    split_compounds,
)

pytest.importorskip("sacremoses")

ASCII_SPACE = " \t\n\r\f\v"


def split_by_hand(line: str) -> str:
    """``perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'``: left to right, a non-space, a hyphen and a non-space
    become the three tokens; the scan goes on after the match, so matches do not overlap."""
    out, i = [], 0
    while i < len(line):
        if i + 2 < len(line) and line[i] not in ASCII_SPACE and line[i + 1] == "-" and line[i + 2] not in ASCII_SPACE:
            out.append(f"{line[i]} ##AT##-##AT## {line[i + 2]}")
            i += 3
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def bleu_by_hand(hypotheses: list[str], references: list[str]) -> float:
    """multi-bleu.perl: corpus sums of clipped n-gram matches for n = 1..4 over whitespace tokens, their geometric
    mean (0 if an order has no match), times exp(1 - r/c) when the hypotheses are shorter."""
    matches, totals, hyp_length, ref_length = [0] * 4, [0] * 4, 0, 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        hyp, ref = hypothesis.split(), reference.split()
        hyp_length, ref_length = hyp_length + len(hyp), ref_length + len(ref)
        for n in range(1, 5):
            hyp_ngrams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
            ref_ngrams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
            matches[n - 1] += sum(min(count, ref_ngrams[gram]) for gram, count in hyp_ngrams.items())
            totals[n - 1] += max(len(hyp) - n + 1, 0)
    if min(matches) == 0:
        return 0.0
    log_precision = sum(math.log(m / t) for m, t in zip(matches, totals, strict=True)) / 4
    brevity = 1.0 if hyp_length >= ref_length else math.exp(1 - ref_length / hyp_length)
    return 100 * brevity * math.exp(log_precision)


def paper_bleu_by_hand(hypotheses: list[str], references: list[str], lang: str = "de") -> float:
    def prepare(lines: list[str]) -> list[str]:
        return [split_by_hand(moses_tokenize(line, lang)) for line in lines]

    return bleu_by_hand(prepare(hypotheses), prepare(references))


def damaged(lines: list[str], seed: int = 0) -> list[str]:
    """Hypotheses made from references: a word deleted in some lines, two neighbours swapped in others, the rest
    kept."""
    generator, out = random.Random(seed), []
    for line in lines:
        words, kind = line.split(), generator.randrange(3)
        if kind == 0 and len(words) > 1:
            del words[generator.randrange(len(words))]
        elif kind == 1 and len(words) > 1:
            i = generator.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        out.append(" ".join(words))
    return out


def test_the_split_is_perls(tmp_path):
    assert split_compounds("rich-text format") == "rich ##AT##-##AT## text format"
    assert split_compounds("a-b-c") == split_by_hand("a-b-c") == "a ##AT##-##AT## b-c"  # matches do not overlap
    assert split_compounds("Rhein-Main-Gebiet") == "Rhein ##AT##-##AT## Main ##AT##-##AT## Gebiet"
    assert split_compounds("- a a- -b x - y") == "- a a- -b x - y"
    # Perl reads bytes: a no-break space is not \s there, though Python's str \s matches it
    assert split_compounds("a-\u00a0b") == split_by_hand("a-\u00a0b") == "a ##AT##-##AT## \u00a0b"


def test_paper_bleu_is_the_recipe_on_newstest2014(shared_data):
    path = shared_data / "wmt14_en_de" / "newstest2014.de"
    if not path.is_file():
        pytest.skip(f"newstest2014 is not in {shared_data} (set VANILLA_TRANSFORMER_DATA)")
    references = path.read_text(encoding="utf-8").split("\n")[:300]
    hypotheses = damaged(references)
    assert sum("##AT##" in split_by_hand(moses_tokenize(line, "de")) for line in references) > 10
    result = compute_compound_split_bleu(hypotheses, references, lang="de")
    expected = paper_bleu_by_hand(hypotheses, references)
    assert 30 < expected < 95  # the damage is real but partial
    assert result["score"] == pytest.approx(expected, rel=1e-9)
    assert (
        result["recipe"] == recipe("de") and "##AT##-##AT##" in result["recipe"] and "sacremoses" in result["recipe"]
    )
    assert compute_compound_split_bleu(references, references)["score"] == pytest.approx(100.0)


def test_the_two_bleus_differ_where_the_paper_tokenizes():
    # Hyphenated compounds differ in one part: sacreBLEU's 13a keeps each one token (no match), the split matches
    # the other parts.
    references = ["Er fuhr mit der S-Bahn-Linie zum Rhein-Main-Flughafen"]
    hypotheses = ["Er fuhr mit der S-Bahn-Strecke zum Rhein-Main-Airport"]
    paper, sacre = compute_compound_split_bleu(hypotheses, references)["score"], compute_bleu(hypotheses, references)
    assert paper == pytest.approx(paper_bleu_by_hand(hypotheses, references), rel=1e-9)
    assert sacre["score"] == pytest.approx(bleu_by_hand(hypotheses, references), rel=1e-9)  # no punctuation to split
    assert paper > sacre["score"] + 20
    # Punctuation: Moses splits the apostrophe that 13a leaves attached, so a missing "'s" costs a token, not a word
    references = ["Wie geht's dir heute, mein lieber Freund aus Berlin?"]
    hypotheses = ["Wie geht dir heute, mein lieber Freund aus Berlin?"]
    paper, sacre = compute_compound_split_bleu(hypotheses, references)["score"], compute_bleu(hypotheses, references)
    assert moses_tokenize(references[0], "de").split()[1:4] == ["geht", "&apos;", "s"]
    assert paper == pytest.approx(paper_bleu_by_hand(hypotheses, references), rel=1e-9)
    assert abs(paper - sacre["score"]) > 5


def test_evaluate_reports_both_bleus_and_names_the_recipe(tmp_path, capsys):
    references = ["Die neue Fußgänger-Ampel ist seit Dienstag in Betrieb, sagte der Bürgermeister."] * 3
    hypotheses = ["Die neue Fußgänger-Ampel ist seit Montag in Betrieb, sagte der Bürgermeister."] * 3
    ref, hyp, results = tmp_path / "ref.de", tmp_path / "hyp.de", tmp_path / "scores.json"
    ref.write_text("\n".join(references) + "\n", encoding="utf-8")
    hyp.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
    evaluate = load_script("evaluate")
    arguments = ["--hypotheses", str(hyp), "--reference", str(ref)]
    assert evaluate.main([*arguments, "--compound-split-bleu", "--results", str(results)]) == 0
    output = capsys.readouterr().out
    scores = json.loads(results.read_text())
    assert scores["bleu_compound_split"] == pytest.approx(paper_bleu_by_hand(hypotheses, references), rel=1e-9)
    assert scores["bleu_compound_split_recipe"] == recipe("de")
    assert f"BLEU, tokenized and compound-split = {scores['bleu_compound_split']:.2f} ({recipe('de')})" in output
    assert f"BLEU = {scores['bleu']:.2f}" in output and scores["bleu"] != scores["bleu_compound_split"]
    assert evaluate.main([*arguments, "--results", str(results)]) == 0  # without the option, sacreBLEU alone
    assert "bleu_compound_split" not in json.loads(results.read_text())


def test_without_sacremoses_only_the_papers_bleu_is_refused(monkeypatch):
    """Training and the benchmarks import the module; a machine without sacremoses (a GPU image) still trains and
    scores sacreBLEU, and the paper's BLEU names the extra that brings it."""
    import sys

    from vanilla_transformer.metrics import compound_split

    monkeypatch.setitem(sys.modules, "sacremoses", None)
    monkeypatch.setattr(compound_split, "_moses", compound_split._moses.__wrapped__)
    with pytest.raises(ModuleNotFoundError, match=r"needs sacremoses, from the 'train' extra"):
        compute_compound_split_bleu(["Ein Test."], ["Ein Test."])
