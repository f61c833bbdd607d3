"""Beam search with the GNMT length penalty, `translate`, and the translate/evaluate scripts."""

import io
import itertools
import json
import math
import os
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import beam_oracle
import copy_task
import pytest
import torch
from tiny_model import load_script
from torch.nn import functional as F
from transformers import GenerationConfig

from vanilla_transformer.generation_vanilla_transformer import gnmt_length_penalty
from vanilla_transformer.model_dir import save_model_dir
from vanilla_transformer.serving.search import (
    paper_generation_config,
    trace_beam_search,
    translate,
    translate_ids,
)
from vanilla_transformer.tokenization import EOS_ID, train_tokenizer


def test_gnmt_length_penalty_values():
    assert gnmt_length_penalty(1, 0.6) == pytest.approx(1.0)
    assert gnmt_length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert gnmt_length_penalty(13, 1.0) == pytest.approx(3.0)
    assert gnmt_length_penalty(40, 0.0) == 1.0
    lengths = torch.tensor([1, 7, 19])
    torch.testing.assert_close(gnmt_length_penalty(lengths, 0.5), torch.tensor([1.0, 2.0**0.5, 2.0]))


def transformers_beam_search(model, input_ids, num_beams: int, max_new_tokens: int) -> torch.Tensor:
    """transformers' own beam search at alpha 0 (its loop: a dict output is a call the fast decoder hands over; no
    logits processor, as a Marian generation config would add)."""
    config = model.config
    settings = GenerationConfig(
        num_beams=num_beams,
        length_penalty=0.0,
        early_stopping="never",
        max_new_tokens=max_new_tokens,
        do_sample=False,
        decoder_start_token_id=config.decoder_start_token_id,
        eos_token_id=config.eos_token_id,
        pad_token_id=config.pad_token_id,
    )
    return model.generate(input_ids=input_ids, generation_config=settings, return_dict_in_generate=True).sequences


def assert_equals_transformers_at_alpha_zero(
    padded_batch, model, sources: list[list[int]], offset: int, pad_id: int
) -> dict:
    """At alpha = 0 both length penalties are 1: the searches must agree token for token, sentence by sentence, and
    in a padded batch each sentence gets the same output, padded to the longest. Returns how the outputs ended."""
    ended = {"with </s>": 0, "at the maximum length": 0}
    batched = translate_ids(
        model, *padded_batch(sources, pad_id), num_beams=4, length_penalty=0.0, max_length_offset=offset
    )
    for index, source in enumerate(sources):
        input_ids = torch.tensor([source])
        expected = transformers_beam_search(model, input_ids, 4, len(source) + offset)
        alone = translate_ids(model, input_ids, num_beams=4, length_penalty=0.0, max_length_offset=offset)
        assert alone.tolist() == expected.tolist()
        width = expected.shape[1]
        assert batched[index, :width].tolist() == expected[0].tolist()
        assert (batched[index, width:] == pad_id).all()
        ended["with </s>" if expected[0, -1] == model.config.eos_token_id else "at the maximum length"] += 1
    return ended


def test_beam_search_at_alpha_zero_equals_transformers_own(make_peaked_model, padded_batch, decoder_steps):
    sources = [[5, 6, 7, 8, 9, 10, EOS_ID], [11, 4, 5, EOS_ID], [7, EOS_ID], [4, 4, 9, 10, 6, EOS_ID]]
    ended = {"with </s>": 0, "at the maximum length": 0}
    for seed in range(3):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0)
        decoder_steps.clear()
        for how, count in assert_equals_transformers_at_alpha_zero(padded_batch, model, sources, 6, pad_id=0).items():
            ended[how] += count
        assert decoder_steps, "our search did not run on the fast decoder"
        decoder_steps.clear()
        transformers_beam_search(model, torch.tensor([sources[0]]), 4, 5)
        assert not decoder_steps, "the expectation ran on our search, not transformers' loop"
    assert all(ended.values()), ended  # both ways of finishing are covered


def all_outputs(max_length: int, vocab_size: int) -> list[list[int]]:
    """Every output beam search can return: ending in </s>, or cut at the maximum length."""
    others = [token for token in range(vocab_size) if token != EOS_ID]
    outputs = []
    for length in range(1, max_length + 1):
        outputs += [list(prefix) + [EOS_ID] for prefix in itertools.product(others, repeat=length - 1)]
    outputs += [list(tokens) for tokens in itertools.product(others, repeat=max_length)]
    return outputs


@torch.no_grad()
def sequence_log_probs(model, source: list[int], outputs: list[list[int]]) -> list[float]:
    """log P(output | source) of each output, by teacher forcing."""
    width = max(map(len, outputs))
    labels = torch.tensor([output + [-100] * (width - len(output)) for output in outputs])
    logits = model(input_ids=torch.tensor([source]).expand(len(outputs), -1), labels=labels).logits
    token_log_probs = F.log_softmax(logits.float(), dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return (token_log_probs * (labels != -100)).sum(dim=-1).tolist()


def test_exhaustive_beam_search_finds_the_best_gnmt_score_by_brute_force(make_peaked_model, padded_batch):
    """With a beam wide enough never to prune, the result must be the argmax of log P(Y) / ((5 + |Y|) / 6) ** 0.6
    over every possible output, each sentence with its own maximum length (input length + offset)."""
    vocab_size, offset, alpha = 5, 2, 0.6
    model = make_peaked_model(vocab_size, seed=0, head_std=0.3, eos_std=1.0)
    sources = [[4, EOS_ID], [EOS_ID], [4, 4, EOS_ID], [1, 4, EOS_ID], [4, 1, EOS_ID]]
    longest = max(map(len, sources)) + offset
    num_beams = (vocab_size - 1) ** (longest - 1) * vocab_size  # more than all live prefixes times the vocabulary
    result = translate_ids(
        model, *padded_batch(sources), num_beams=num_beams, length_penalty=alpha, max_length_offset=offset
    )

    differs_from_hugging_face = differs_from_log_prob = 0
    for index, source in enumerate(sources):
        outputs = all_outputs(len(source) + offset, vocab_size)
        log_probs = sequence_log_probs(model, source, outputs)
        scored = list(zip(log_probs, outputs, strict=True))
        best = max(scored, key=lambda pair: pair[0] / ((5 + len(pair[1])) / 6) ** alpha)[1]
        found = result[index, 1:].tolist()
        assert found[: len(best)] == best and all(token == 0 for token in found[len(best) :])
        hugging_face_best = max(scored, key=lambda pair: pair[0] / len(pair[1]) ** alpha)[1]
        differs_from_hugging_face += best != hugging_face_best
        differs_from_log_prob += best != max(zip(log_probs, outputs, strict=True))[1]
    # The setting tells the GNMT penalty from Hugging Face's |Y| ** alpha and from no penalty.
    assert differs_from_hugging_face > 0 and differs_from_log_prob > 0


@pytest.mark.parametrize("alpha", [0.6, 0.0, 2.0])
def test_beam_search_equals_the_oracle(make_peaked_model, padded_batch, alpha, decoder_steps):
    """Stopping early must not change the result, and the cache and batching must not either: the fast search on
    the incremental decoder gives the plain search's result (`beam_oracle`), each sentence its own maximum length."""
    sources = [[5, 6, 7, 8, EOS_ID], [11, 4, EOS_ID], [7, EOS_ID], [4, 9, 10, 6, 4, 5, EOS_ID]]
    offset = 4
    for seed in range(3):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0)
        decoder_steps.clear()
        result = translate_ids(
            model, *padded_batch(sources), num_beams=3, length_penalty=alpha, max_length_offset=offset
        )
        assert decoder_steps, "our search did not run on the fast decoder"
        for index, source in enumerate(sources):
            expected = beam_oracle.beam_search(model, source, 3, alpha, len(source) + offset)
            found = result[index, 1:].tolist()
            assert found[: len(expected)] == expected and all(token == 0 for token in found[len(expected) :])


def test_the_oracle_tells_a_search_that_ignores_the_penalty(make_peaked_model, padded_batch):
    """Equality with the oracle is not automatic: the search without the penalty differs from the oracle with it."""
    sources = [[5, 6, 7, 8, EOS_ID], [11, 4, EOS_ID], [7, EOS_ID], [4, 9, 10, 6, 4, 5, EOS_ID]]
    differs = 0
    for seed in range(3):
        model = make_peaked_model(vocab_size=12, seed=seed, head_std=0.3, eos_std=1.0)
        unpenalised = translate_ids(
            model, *padded_batch(sources), num_beams=3, length_penalty=0.0, max_length_offset=4
        )
        for index, source in enumerate(sources):
            expected = beam_oracle.beam_search(model, source, 3, 2.0, len(source) + 4)
            differs += unpenalised[index, 1 : 1 + len(expected)].tolist() != expected
    assert differs > 0


@pytest.fixture(scope="module")
def marian(copy_model):
    """MarianMTModel, transformers' own implementation, with the copy model's weights (`vanilla_to_marian`): a
    trained network (a random one repeats a token and never ends), and no logits processors (the paper's search
    has none; OPUS-MT's generation config adds bad_words_ids and forced_eos_token_id)."""
    from vanilla_transformer.export.marian import vanilla_to_marian

    model = vanilla_to_marian(copy_model[0]).eval()
    config = model.config
    ids = dict(decoder_start_token_id=config.decoder_start_token_id, eos_token_id=config.eos_token_id)
    model.generation_config = GenerationConfig(**ids, pad_token_id=config.pad_token_id)
    return model


def marian_sources(copy_model) -> list[list[int]]:
    return copy_model[1](copy_task.sentences(6, seed=5))["input_ids"]


def test_a_marian_model_searches_through_the_adapter_as_transformers_at_alpha_zero(
    marian, copy_model, padded_batch, monkeypatch
):
    """Any Hugging Face encoder-decoder with a cache runs the same search (`serving.step_decoders.CachedStepDecoder`):
    at alpha 0, transformers' own beam search on MarianMT; and translate() gives our model's translations."""
    from vanilla_transformer.serving.step_decoders import CachedStepDecoder

    steps = []
    step = CachedStepDecoder.step
    monkeypatch.setattr(CachedStepDecoder, "step", lambda self, tokens: steps.append(1) or step(self, tokens))
    sources, pad = marian_sources(copy_model), marian.config.pad_token_id
    ended = assert_equals_transformers_at_alpha_zero(padded_batch, marian, sources, 5, pad_id=pad)
    assert steps, "the adapter did not run"
    assert ended["with </s>"] > 0
    model, tokenizer = copy_model
    sentences = copy_task.sentences(6, seed=5)
    assert translate(marian, tokenizer, sentences, num_beams=3) == translate(model, tokenizer, sentences, num_beams=3)


@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_a_marian_model_searches_through_the_adapter_as_the_oracle(padded_batch, marian, copy_model, alpha):
    sources, pad = marian_sources(copy_model), marian.config.pad_token_id
    search = dict(num_beams=3, length_penalty=alpha, max_length_offset=4)
    result = translate_ids(marian, *padded_batch(sources, pad), **search)
    for index, source in enumerate(sources):
        expected = beam_oracle.beam_search(marian, source, 3, alpha, len(source) + 4)
        found = result[index, 1:].tolist()
        assert found[: len(expected)] == expected and all(token == pad for token in found[len(expected) :])


def test_the_adapter_copies_the_encoder_output_only_when_sentences_leave(marian, copy_model, padded_batch):
    """Reordering the beams of each sentence leaves its rows' encoder output as it was (the rows of a sentence hold
    the same one), so no copy is made; when a sentence finishes, its rows go and the others keep theirs."""
    from vanilla_transformer.serving.step_decoders import CachedStepDecoder

    input_ids, attention_mask = padded_batch(marian_sources(copy_model)[:2], marian.config.pad_token_id)
    decoder = CachedStepDecoder(marian, input_ids, attention_mask, beams=3)
    decoder.step(torch.full((6,), marian.config.decoder_start_token_id))
    encoded = decoder.encoded
    decoder.select(torch.tensor([2, 2, 0, 4, 3, 3]))  # each row continues a row of its own sentence
    assert decoder.encoded is encoded
    decoder.select(torch.tensor([3, 4, 4]))  # sentence 0 finished
    torch.testing.assert_close(decoder.encoded, encoded[[3, 4, 4]], rtol=0, atol=0)
    assert torch.equal(decoder.memory_mask, attention_mask[[1, 1, 1]])


def test_the_search_and_generate_pick_the_fast_decoder_by_one_rule(make_tiny_model, padded_batch, decoder_steps):
    """The search's router (`serving.step_decoders.step_decoder`) and generate() ask the same question
    (`decoder_vanilla_transformer.incremental_decoder_problem`): in eval mode, or in training mode without dropout,
    both decode on the fast decoder; in training mode with dropout, or with a forward hook on the decoder, neither
    does."""
    import warnings

    from vanilla_transformer.serving.step_decoders import step_decoder

    input_ids, attention_mask = padded_batch([[5, 6, 7, EOS_ID], [8, EOS_ID]])
    hooked = make_tiny_model(0)
    hooked.model.decoder.layers[0].fc1.register_forward_hook(lambda module, inputs, output: output)
    cases = {
        "eval mode": (make_tiny_model(0, dropout=0.1), True),
        "training mode with dropout": (make_tiny_model(0, dropout=0.1).train(), False),
        "training mode, dropping nothing": (make_tiny_model(0).train(), True),  # it computes what eval mode does
        "a forward hook": (hooked, False),
    }
    for name, (model, fast) in cases.items():
        picked = type(step_decoder(model, input_ids, attention_mask, 2, 5)).__name__
        decoder_steps.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fall-back's warning
            model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=2, max_new_tokens=3)
        assert (picked == "IncrementalDecoder", bool(decoder_steps)) == (fast, fast), name


def test_a_trace_through_the_adapter_is_translate(marian, copy_model):
    tokenizer = copy_model[1]
    for sentence in copy_task.sentences(3, seed=8):
        trace = trace_beam_search(marian, tokenizer, sentence, num_beams=3)
        assert trace.text == translate(marian, tokenizer, [sentence], num_beams=3)[0]
        assert trace.best == max(trace.steps[-1].finished, key=lambda hypothesis: hypothesis[2])[0]


class ToyCache:
    """Stands in for a key/value cache: the decoder tokens of each row, reordered like a real cache."""

    def __init__(self, tokens: torch.Tensor):
        self.tokens = tokens

    def reorder_cache(self, rows: torch.Tensor) -> None:
        self.tokens = self.tokens[rows]


class ToyTranslator(torch.nn.Module):
    """A model with next-token probabilities set by hand (tokens: 0 pad, 1 unk, 2 start, 3 </s>, 4 "a").

    After the start token: </s> 0.6, "a" 0.4. After "a": "a" 0.99, </s> 0.01. Other tokens ~0.
    """

    config = SimpleNamespace(decoder_start_token_id=2, eos_token_id=EOS_ID, pad_token_id=0)

    def get_encoder(self):
        return lambda input_ids, attention_mask: SimpleNamespace(last_hidden_state=torch.zeros(len(input_ids), 1, 1))

    def forward(self, encoder_outputs, attention_mask, decoder_input_ids, use_cache, **cache):
        (past,) = cache.values()  # under transformers' name for it (`cache` from 5.24, `past_key_values` before)
        tokens = decoder_input_ids if past is None else torch.cat((past.tokens, decoder_input_ids), 1)
        probabilities = torch.full((len(tokens), 5), 1e-9)
        after_start = tokens[:, -1] == 2
        probabilities[after_start, EOS_ID], probabilities[after_start, 4] = 0.6, 0.4
        probabilities[~after_start, EOS_ID], probabilities[~after_start, 4] = 0.01, 0.99
        return SimpleNamespace(logits=probabilities.log()[:, None], **dict.fromkeys(cache, ToyCache(tokens)))


@pytest.mark.parametrize("alpha, expected", [(0.0, [EOS_ID]), (0.6, [EOS_ID]), (2.0, [4] * 7)])
def test_hand_computed_length_penalty_decision(alpha, expected):
    """One beam, at most 1 + 6 = 7 tokens. "</s>" scores log 0.6 = -0.511 at any alpha (lp(1) = 1). "a" x 7 has
    log P = log 0.4 + 6 log 0.99 = -0.977, so it scores -0.977 at alpha 0, -0.977 / 2 ** 0.6 = -0.644 at alpha
    0.6, and -0.977 / 2 ** 2 = -0.244 at alpha 2, the winner. Stopping after step 1 (when "</s>" finishes and
    "a" scores -0.916 at length 1) would miss it: the search must bound what "a" can reach at length 7."""
    output = translate_ids(
        ToyTranslator(), torch.tensor([[4]]), num_beams=1, length_penalty=alpha, max_length_offset=6
    )
    assert output[0, 1:].tolist() == expected


def test_each_sentence_stops_at_its_own_input_length_plus_offset(make_peaked_model, padded_batch):
    model = make_peaked_model(vocab_size=12, seed=0)
    pad_id = model.config.pad_token_id
    with torch.no_grad():  # </s> and <pad> never win: their logits are -100 * d_model, the last layer norm's bias 1
        model.model.decoder.layers[-1].final_layer_norm.bias.fill_(1.0)
        model.lm_head.weight[[EOS_ID, pad_id]] = -100.0
    sources = [[5, 6, 7, 8, 9, EOS_ID], [11, EOS_ID], [7, 8, 9, EOS_ID]]
    output = translate_ids(model, *padded_batch(sources), num_beams=3, length_penalty=0.6, max_length_offset=4)
    lengths = (output[:, 1:] != pad_id).sum(dim=1).tolist()
    assert lengths == [len(source) + 4 for source in sources]
    assert output.shape[1] == 1 + max(lengths)


@pytest.fixture(scope="module")
def tokenizer():
    words = "one two three four five six seven eight nine ten eins zwei drei vier fünf sechs sieben acht neun zehn"
    return train_tokenizer(words.split() * 3, vocab_size=300)


def test_translate_keeps_order_and_model_mode(make_peaked_model, tokenizer):
    model = make_peaked_model(vocab_size=len(tokenizer), seed=0)
    sentences = ["one two", "three four five six seven eight", "", "nine", "ten ten ten ten"]
    model.train()
    batched = translate(model, tokenizer, sentences, num_beams=3, max_length_offset=3, batch_size=2)
    assert model.training  # given back in training mode, and dropout was off while translating:
    one_by_one = [
        translate(model, tokenizer, [sentence], num_beams=3, max_length_offset=3)[0] for sentence in sentences
    ]
    assert batched == one_by_one
    encoded = tokenizer(sentences[1], return_tensors="pt")
    expected = beam_oracle.beam_search(
        model.eval(), encoded["input_ids"][0].tolist(), 3, 0.6, encoded["input_ids"].shape[1] + 3
    )
    assert batched[1] == tokenizer.decode(expected, skip_special_tokens=True)


def test_trace_beam_search_is_translate_step_by_step(make_peaked_model, tokenizer):
    """The trace's text is translate()'s; its winner is the finished hypothesis with the best GNMT score; its
    log-probabilities are those of teacher forcing, and its scores log P / ((5 + |Y|) / 6) ** alpha."""
    model = make_peaked_model(vocab_size=len(tokenizer), seed=2, head_std=0.3, eos_std=1.0)
    search = dict(num_beams=3, length_penalty=0.6, max_length_offset=4)
    empty = trace_beam_search(model, tokenizer, "", **search)  # an empty line is not searched, in either
    assert empty.steps == [] and empty.text == "" == translate(model, tokenizer, [""], **search)[0]
    for sentence in ["one two", "three four five six seven eight", "nine"]:
        trace = trace_beam_search(model, tokenizer, sentence, **search)
        assert trace.text == translate(model, tokenizer, [sentence], **search)[0]
        source = tokenizer(sentence)["input_ids"]
        assert [step.step for step in trace.steps] == list(range(1, len(trace.steps) + 1))
        start = model.config.decoder_start_token_id
        for step in trace.steps:
            assert 0 < len(step.live) <= 3 or step is trace.steps[-1]
            assert [log_prob for _, log_prob in step.live] == sorted((p for _, p in step.live), reverse=True)
            hypotheses = [tokens for tokens, _ in step.live] + [tokens for tokens, _, _ in step.finished]
            assert all(tokens[0] == start for tokens in hypotheses)
            assert all(len(tokens) == 1 + step.step for tokens, _ in step.live)
            forced = sequence_log_probs(model, source, [tokens[1:] for tokens in hypotheses])
            traced = [p for _, p in step.live] + [p for _, p, _ in step.finished]
            assert traced == pytest.approx(forced, abs=1e-4)
            for tokens, log_prob, score in step.finished:
                assert score == pytest.approx(log_prob / ((5 + len(tokens) - 1) / 6) ** 0.6, abs=1e-5)
        finished = trace.steps[-1].finished
        assert trace.best == max(finished, key=lambda hypothesis: hypothesis[2])[0] == finished[0][0]
        assert tokenizer.decode(trace.best, skip_special_tokens=True) == trace.text
        assert len(finished) >= 3  # the search ran until k had finished (or the maximum length)


@pytest.mark.parametrize("name", ["num_beams", "length_penalty", "max_length_offset"])
def test_a_search_setting_of_none_is_named(make_peaked_model, tokenizer, name):
    """None is "not given" on the command line, never a search setting: translate() names it before decoding."""
    model = make_peaked_model(vocab_size=len(tokenizer), seed=0)
    with pytest.raises(ValueError, match=f"{name} must be given, got {name}=None"):
        translate(model, tokenizer, ["one"], **{name: None})
    with pytest.raises(ValueError, match=f"{name} must be given, got {name}=None"):
        trace_beam_search(model, tokenizer, "one", **{name: None})


def test_translate_and_evaluate_scripts(make_peaked_model, tokenizer, tmp_path, monkeypatch, capsys):
    model = make_peaked_model(vocab_size=len(tokenizer), seed=1)
    generation_config = paper_generation_config(model.config, max_new_tokens=20)
    model_dir = save_model_dir(model, tokenizer, tmp_path / "model", generation_config=generation_config)
    sentences = ["one two three", "four", "five six seven eight nine"]
    source = tmp_path / "test.en"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    expected = translate(model, tokenizer, sentences, max_length_offset=5)

    translate_script = load_script("translate")
    output = tmp_path / "out.de"
    common = ["--model", str(model_dir), "--max-length-offset", "5", "--device", "cpu"]
    assert translate_script.main([*common, "--input", str(source), "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == expected
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(sentences)))
    capsys.readouterr()
    assert translate_script.main(common) == 0
    assert capsys.readouterr().out.splitlines() == expected

    evaluate_script = load_script("evaluate")
    reference = tmp_path / "test.de"
    reference.write_text("\n".join([expected[0], "falsch", expected[2]]) + "\n", encoding="utf-8")
    results = tmp_path / "scores.json"
    assert (
        evaluate_script.main(
            [*common, "--source", str(source), "--reference", str(reference), "--results", str(results)]
        )
        == 0
    )
    assert json.loads(results.read_text())["exact_match"] == pytest.approx(200 / 3)

    hypotheses = tmp_path / "hyp.de"
    hypotheses.write_text("das ist ein kleiner Test\nja\n", encoding="utf-8")
    reference.write_text("das ist ein kleiner Test\nnein\n", encoding="utf-8")
    assert (
        evaluate_script.main(
            ["--hypotheses", str(hypotheses), "--reference", str(reference), "--results", str(results)]
        )
        == 0
    )
    scores = json.loads(results.read_text())
    assert scores["exact_match"] == 50.0
    # One 5-word sentence right, one 1-word sentence wrong: 5/6 unigrams, 4/4, 3/3, 2/2 higher n-grams, no brevity
    # penalty (6 words each side).
    assert scores["bleu"] == pytest.approx(100 * math.exp((math.log(5 / 6) + 3 * math.log(1.0)) / 4), abs=0.01)
    with pytest.raises(FileNotFoundError, match="--reference="):
        evaluate_script.main(["--hypotheses", str(hypotheses), "--reference", str(tmp_path / "missing.de")])


def test_translate_takes_its_input_file_as_an_argument_too(
    make_peaked_model, tokenizer, tmp_path, monkeypatch, capsys
):
    """``translate --model M file.txt`` is ``translate --model M --input file.txt``; ``-`` is standard input; the
    file given both ways is an error, and a missing one is named."""
    model = make_peaked_model(vocab_size=len(tokenizer), seed=1)
    generation_config = paper_generation_config(model.config, max_new_tokens=20)
    model_dir = str(save_model_dir(model, tokenizer, tmp_path / "model", generation_config=generation_config))
    sentences = ["one two three", "four", "five six seven eight nine"]
    source = tmp_path / "test.en"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    expected = translate(model, tokenizer, sentences)
    script = load_script("translate")

    capsys.readouterr()
    assert script.main(["--model", model_dir, str(source)]) == 0
    assert capsys.readouterr().out.splitlines() == expected
    output = tmp_path / "out.de"
    assert script.main([str(source), "--model", model_dir, "--output", str(output)]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == expected
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("\n".join(sentences).encode("utf-8"))))
    assert script.main(["--model", model_dir, "-"]) == 0
    assert capsys.readouterr().out.splitlines() == expected

    with pytest.raises(SystemExit) as exit_info:
        script.main(["--model", model_dir, str(source), "--input", str(source)])
    assert exit_info.value.code == 2
    assert "the input file is given twice, as FILE=" in capsys.readouterr().err
    with pytest.raises(FileNotFoundError, match=r"FILE=.*missing.en: no such file"):
        script.main(["--model", model_dir, str(tmp_path / "missing.en")])
    with pytest.raises(FileNotFoundError, match=r"--input=.*missing.en: no such file"):
        script.main(["--model", model_dir, "--input", str(tmp_path / "missing.en")])


HYPOTHESES = ["das ist ein Test", "ja", "drei Hunde"]
REFERENCES = ["das ist ein Test", "nein", "drei Hunde", "vier", "fünf"]
"""Scored against the first three references (``head -n 3``): 2 of 3 exact matches."""


def os_pipe(text: str | bytes, opened: list[int]) -> str:
    """A pipe holding `text`, by the name ``<(...)`` gives it: ``/dev/fd/N``, not a regular file."""
    read, write = os.pipe()
    os.write(write, text.encode("utf-8") if isinstance(text, str) else text)
    os.close(write)
    opened.append(read)
    return f"/dev/fd/{read}"


def test_evaluate_reads_pipes_fifos_and_standard_input(tmp_path, monkeypatch, capsys):
    if not Path("/dev/fd").is_dir():
        pytest.skip("no /dev/fd on this system")
    evaluate = load_script("evaluate")
    hypotheses, references = tmp_path / "hyp.de", tmp_path / "ref.de"
    hypotheses.write_text("\n".join(HYPOTHESES) + "\n", encoding="utf-8")
    references.write_text("\n".join(REFERENCES[:3]) + "\n", encoding="utf-8")
    first_three = "".join(line + "\n" for line in REFERENCES[:3])
    results, opened = tmp_path / "scores.json", []

    def exact_match(*arguments: str) -> float:
        assert evaluate.main([*arguments, "--results", str(results)]) == 0
        return json.loads(results.read_text())["exact_match"]

    fifo = tmp_path / "hyp.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=("\n".join(HYPOTHESES) + "\n",))
    writer.start()
    try:
        assert exact_match("--hypotheses", str(hypotheses), "--reference", os_pipe(first_three, opened)) == (
            pytest.approx(200 / 3)
        )
        assert exact_match("--hypotheses", str(fifo), "--reference", str(references)) == pytest.approx(200 / 3)
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(first_three.encode("utf-8"))))
        assert exact_match("--hypotheses", str(hypotheses), "--reference", "-") == pytest.approx(200 / 3)
        with pytest.raises(ValueError, match=r"--reference=/dev/fd/\d+:2: not UTF-8 text"):
            evaluate.main(["--hypotheses", str(hypotheses), "--reference", os_pipe(b"eins\nd\xe9j\n", opened)])
    finally:
        writer.join(timeout=10)
        for descriptor in opened:
            os.close(descriptor)

    with pytest.raises(SystemExit) as exit_info:
        evaluate.main(["--hypotheses", "-", "--reference", "-"])
    assert exit_info.value.code == 2
    assert "only one input can be read from standard input (-), got --reference and --hypotheses" in (
        capsys.readouterr().err
    )
    with pytest.raises(FileNotFoundError, match=r"--hypotheses=.*missing.de: no such file"):
        evaluate.main(["--hypotheses", str(tmp_path / "missing.de"), "--reference", str(references)])
    with pytest.raises(IsADirectoryError, match=r"--reference=.* is a directory"):
        evaluate.main(["--hypotheses", str(hypotheses), "--reference", str(tmp_path)])


def test_translate_and_evaluate_scripts_search_as_the_model_directory_asks(
    make_peaked_model, tokenizer, tmp_path, capsys
):
    """A trained model's generation_config.json (the run's beam size, alpha and offset, which model.generate() uses)
    is the scripts' default search; the options override it; a generation config that does not ask for GNMT's
    penalty (its |Y|^alpha is another search) leaves section 6.1's defaults."""
    from transformers import GenerationConfig

    model = make_peaked_model(vocab_size=len(tokenizer), seed=1)
    sentences = ["one two three", "four", "five six seven eight nine", "ten ten", "eleven twelve thirteen"]
    source = tmp_path / "test.en"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    search = dict(num_beams=3, length_penalty=3.0, max_length_offset=4)
    own, paper = translate(model, tokenizer, sentences, **search), translate(model, tokenizer, sentences)
    assert own != paper  # the settings change this model's translations
    trained = paper_generation_config(model.config, **search)
    foreign = GenerationConfig(num_beams=3, length_penalty=3.0, max_new_tokens=20, decoder_start_token_id=2)
    translate_script, evaluate_script = load_script("translate"), load_script("evaluate")
    for name, generation_config, expected in (("trained", trained, own), ("foreign", foreign, paper)):
        model_dir = save_model_dir(model, tokenizer, tmp_path / name, generation_config=generation_config)
        output = tmp_path / f"{name}.de"
        assert translate_script.main(["--model", str(model_dir), "--input", str(source), "--output", str(output)]) == 0
        assert output.read_text(encoding="utf-8").splitlines() == expected
    overridden = ["--num-beams", "4", "--length-penalty", "0.6", "--max-length-offset", "50"]
    capsys.readouterr()
    assert translate_script.main(["--model", str(tmp_path / "trained"), "--input", str(source), *overridden]) == 0
    assert capsys.readouterr().out.splitlines() == paper
    reference = tmp_path / "test.de"
    reference.write_text("\n".join(own) + "\n", encoding="utf-8")
    results = tmp_path / "scores.json"
    arguments = ["--model", str(tmp_path / "trained"), "--source", str(source), "--reference", str(reference)]
    assert evaluate_script.main([*arguments, "--results", str(results)]) == 0
    assert "search: beam 3, GNMT alpha 3.0, at most input length + 4" in capsys.readouterr().out
    assert json.loads(results.read_text())["exact_match"] == 100.0


def test_length_penalty_sweep_scores_each_alpha_as_the_evaluate_command_does(tiny_run_dir, tmp_path, monkeypatch):
    """scripts/sweep_length_penalty.py: per alpha, the chrF, length ratio and longest translation of the run's final
    model on its validation split equal those of ``vanilla-transformer evaluate --length-penalty alpha`` on the same
    split written to files. (The tiny run's one-word targets give BLEU 0, so chrF carries the comparison.)"""
    import sweep_length_penalty

    from vanilla_transformer.data.spec import load_corpus
    from vanilla_transformer.metrics import compute_bleu
    from vanilla_transformer.training.config import TrainingConfig
    from vanilla_transformer.training.setup import corpus_spec

    config = TrainingConfig.load(tiny_run_dir / "training_config.json")
    pairs = load_corpus(corpus_spec(config.data), config.data.valid_split)[:60]
    source, reference = tmp_path / "valid.en", tmp_path / "valid.de"
    for path, lines in ((source, [pair[0] for pair in pairs]), (reference, [pair[1] for pair in pairs])):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "sweep.json"
    arguments = ["--run", str(tiny_run_dir), "--alphas", "0.0", "3.0", "--threads", "1", "--output", str(output)]
    monkeypatch.setattr(sweep_length_penalty, "load_corpus", lambda spec, split: load_corpus(spec, split)[:60])
    assert sweep_length_penalty.main(arguments) == 0
    sweep = json.loads(output.read_text())
    scores = sweep["runs"][tiny_run_dir.name]["scores"]
    for alpha in ("0.0", "3.0"):
        hypotheses, results = tmp_path / f"hyp-{alpha}.de", tmp_path / f"scores-{alpha}.json"
        common = ["--model", str(tiny_run_dir / "model"), "--source", str(source), "--reference", str(reference)]
        assert load_script("evaluate").main([*common, "--length-penalty", alpha, "--output", str(hypotheses),
                                             "--results", str(results)]) == 0  # fmt: skip
        translations = hypotheses.read_text(encoding="utf-8").splitlines()
        bleu = compute_bleu(translations, [pair[1] for pair in pairs])
        assert scores[alpha]["chrf"] == pytest.approx(json.loads(results.read_text())["chrf"])
        assert scores[alpha]["length_ratio"] == pytest.approx(bleu["sys_len"] / bleu["ref_len"])
        assert scores[alpha]["longest_translation_words"] == max(len(line.split()) for line in translations)
        assert sweep["mean_bleu"][alpha] == scores[alpha]["bleu"]  # one run: its own


def test_length_penalty_sweep_averages_the_last_checkpoints_as_the_average_command_does(
    tiny_run_dir, tmp_path, monkeypatch
):
    """scripts/sweep_length_penalty.py --average N: the scores of the average of the run's last N checkpoints equal
    those of ``evaluate`` on the model ``average_run`` exports from the same checkpoints; more checkpoints than the run
    keeps is refused, naming --average."""
    import sweep_length_penalty

    from vanilla_transformer.data.spec import load_corpus
    from vanilla_transformer.training.config import TrainingConfig
    from vanilla_transformer.training.results import average_run
    from vanilla_transformer.training.setup import corpus_spec

    config = TrainingConfig.load(tiny_run_dir / "training_config.json")
    pairs = load_corpus(corpus_spec(config.data), config.data.valid_split)[:60]
    source, reference = tmp_path / "valid.en", tmp_path / "valid.de"
    for path, lines in ((source, [pair[0] for pair in pairs]), (reference, [pair[1] for pair in pairs])):
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    monkeypatch.setattr(sweep_length_penalty, "load_corpus", lambda spec, split: load_corpus(spec, split)[:60])
    output = tmp_path / "sweep.json"
    common = ["--run", str(tiny_run_dir), "--alphas", "0.0", "--threads", "1", "--output", str(output)]
    assert sweep_length_penalty.main([*common, "--average", "1", "2"]) == 0
    sweep = json.loads(output.read_text())
    averages = sweep["runs"][tiny_run_dir.name]["averages"]
    checkpoints = sorted(path.name for path in (tiny_run_dir / "checkpoints").iterdir() if path.is_dir())
    chrf = {}
    for count in (1, 2):
        assert averages[str(count)]["checkpoints"] == checkpoints[-count:]
        model_dir = average_run(tiny_run_dir, last=count, output_dir=tmp_path / f"average-{count}")
        results = tmp_path / f"scores-{count}.json"
        arguments = ["--model", str(model_dir), "--source", str(source), "--reference", str(reference)]
        assert load_script("evaluate").main([*arguments, "--length-penalty", "0.0", "--results", str(results)]) == 0
        chrf[count] = json.loads(results.read_text())["chrf"]
        assert averages[str(count)]["scores"]["0.0"]["chrf"] == pytest.approx(chrf[count])
        assert sweep["mean_bleu_by_average"][str(count)]["0.0"] == averages[str(count)]["scores"]["0.0"]["bleu"]
    scored = []  # refused before any model is scored, also where a smaller N comes first
    monkeypatch.setattr(sweep_length_penalty, "score_alphas", lambda *args: scored.append(args))
    with pytest.raises(SystemExit, match=r"^--average 3: .* holds only 2 checkpoints$"):
        sweep_length_penalty.main([*common, "--average", "1", "3"])
    assert scored == []


def test_translate_script_decodes_in_the_dtype_asked_for(confident_copy_model, tmp_path, monkeypatch):
    """--dtype bf16 decodes with bf16 weights (observed on the model the script loaded), and on the confident copy
    model gives the fp32 translations; an unknown dtype is refused by name."""
    from vanilla_transformer import model_dir as model_dir_module
    from vanilla_transformer.cli import decoding

    model, tokenizer = confident_copy_model
    model_dir = save_model_dir(model, tokenizer, tmp_path / "model")
    sentences = copy_task.sentences(6, seed=7)
    source = tmp_path / "source.txt"
    source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
    loaded, real_load = [], model_dir_module.load_model_dir

    def load(*args, **kwargs):
        loaded.append(real_load(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(model_dir_module, "load_model_dir", load)  # imported by decoding when it runs
    translate_script, outputs = load_script("translate"), {}
    for dtype in ("fp32", "bf16"):
        output = tmp_path / f"{dtype}.txt"
        common = ["--model", str(model_dir), "--device", "cpu", "--input", str(source), "--output", str(output)]
        assert translate_script.main([*common, "--dtype", dtype]) == 0
        outputs[dtype] = output.read_text(encoding="utf-8")
        assert {parameter.dtype for parameter in loaded[-1][0].parameters()} == {decoding.decoding_dtype(dtype)}
    assert outputs["bf16"] == outputs["fp32"] and outputs["fp32"].strip()
    with pytest.raises(SystemExit):
        translate_script.main(["--model", str(model_dir), "--dtype", "int4"])


def test_evaluate_scores_bleu_only_where_a_reference_holds_a_4_gram(tmp_path, capsys):
    """Number words are one token each: BLEU is 0 whatever the translations, so evaluate leaves it out and says why;
    on sentences it is scored, and equals sacreBLEU's corpus BLEU."""
    import sacrebleu

    evaluate = load_script("evaluate")
    cases = {
        "words": (["zweiundvierzig", "fünf", "zwölf"], ["zweiundvierzig", "fünf", "zwölftausend"]),
        "sentences": (
            ["ein Hund rennt am Strand", "zwei Kinder"],
            ["ein Hund rennt am Strand", "zwei Kinder spielen"],
        ),
    }
    printed, results = {}, {}
    for name, (hypotheses, references) in cases.items():
        hyp, ref, out = tmp_path / f"{name}.hyp", tmp_path / f"{name}.ref", tmp_path / f"{name}.json"
        hyp.write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        ref.write_text("\n".join(references) + "\n", encoding="utf-8")
        assert evaluate.main(["--hypotheses", str(hyp), "--reference", str(ref), "--results", str(out)]) == 0
        printed[name], results[name] = capsys.readouterr().out, json.loads(out.read_text())
    assert "bleu" not in results["words"] and "BLEU: not scored" in printed["words"]
    assert results["words"]["exact_match"] == pytest.approx(200 / 3)
    hypotheses, references = cases["sentences"]
    expected = sacrebleu.corpus_bleu(hypotheses, [references])
    assert results["sentences"]["bleu"] == pytest.approx(expected.score, abs=1e-6)
    assert f"BLEU = {expected.score:.2f}" in printed["sentences"]
