"""Faults of model input, decoding settings and text: bad ids, masks and searches, odd line breaks, over-long lines.

Every case must end in a clear error (its type, and a message naming the argument, file or line) or in the correct
result, never in a silent wrong one. Kept fast: tiny models, runs of a few steps.
"""

import re
import shutil

import pytest
import torch
from tiny_model import load_script, tiny_config

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.data import read_lines, read_parallel_text
from vanilla_transformer.model_dir import load_model_dir
from vanilla_transformer.serving.search import paper_generation_config, translate, translate_ids

BREAKS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]
"""Characters `str.splitlines` splits on besides \\n and \\r: inside a sentence they are text, not line ends."""


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_model_dir(tiny_model_dir)


def small_model(**overrides) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(0)
    return VanillaTransformerForConditionalGeneration(tiny_config(20, **overrides)).eval()


# --------------------------------------------------------------------------------------------------------------------
# Model configuration and inputs
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [("pad_token_id", -1), ("pad_token_id", 20), ("eos_token_id", 20), ("eos_token_id", [3, 25]),
     ("bos_token_id", 99), ("decoder_start_token_id", -2), ("pad_token_id", 1.5)],
)  # fmt: skip
def test_special_token_ids_outside_the_vocabulary_are_rejected(name, value):
    with pytest.raises(ValueError, match=rf"{name} must be None or a token id in \[0, vocab_size=20\)"):
        tiny_config(20, **{name: value})
    assert getattr(tiny_config(20, **{name: None if name != "eos_token_id" else 19}), name) in (None, 19)


@pytest.mark.parametrize("shape", [(3,), (1, 3, 1)])
def test_padding_masks_of_the_wrong_rank_are_rejected(shape):
    ids = torch.tensor([[5, 6, 3]])
    with pytest.raises(ValueError, match=re.escape(f"attention_mask has shape {shape}: expected a 2D padding mask")):
        small_model()(input_ids=ids, attention_mask=torch.ones(shape), decoder_input_ids=ids)
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape"):
        small_model()(input_ids=ids, decoder_input_ids=ids, decoder_attention_mask=torch.ones(shape))


@pytest.mark.parametrize("shape", [(0, 3), (2, 0)])
def test_empty_batches_and_sequences_are_named_in_forward_and_generate(shape):
    model, empty = small_model(), torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match=re.escape(f"input_ids has shape {shape}: expected (batch_size, length)")):
        model(input_ids=empty, decoder_input_ids=torch.zeros(shape[0], 1, dtype=torch.long))
    with pytest.raises(ValueError, match=re.escape(f"input_ids has shape {shape}")):
        model.generate(empty, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"decoder_input_ids has shape \(1, 0\)"):
        model(input_ids=torch.tensor([[5, 3]]), decoder_input_ids=torch.zeros(1, 0, dtype=torch.long))


def test_beam_search_of_no_sentences_is_empty_and_of_empty_sentences_an_error():
    output = translate_ids(small_model(), torch.zeros(0, 4, dtype=torch.long))
    assert output.shape == (0, 1)
    with pytest.raises(ValueError, match=r"input_ids has shape \(2, 0\)"):
        translate_ids(small_model(), torch.zeros(2, 0, dtype=torch.long))


def test_bad_label_ids_are_reported_as_labels():
    ids = torch.tensor([[5, 6, 3]])
    with pytest.raises(ValueError, match=r"labels contains token id 20, outside \[0, vocab_size=20\)"):
        small_model()(input_ids=ids, labels=torch.tensor([[5, 20, -100]]))
    with pytest.raises(ValueError, match=r"labels contains token id -5"):
        small_model()(input_ids=ids, labels=torch.tensor([[5, -5, 3]]))
    assert small_model()(input_ids=ids, labels=torch.tensor([[5, 3, -100]])).loss.isfinite()


@pytest.mark.parametrize(
    "arguments, message",
    [(dict(length_penalty=float("nan")), "length_penalty must be finite"),
     (dict(length_penalty=float("inf")), "length_penalty must be finite"),
     (dict(length_penalty=-0.5), "length_penalty must be finite and non-negative"),
     (dict(max_length_offset=-1), "max_length_offset must be non-negative, got max_length_offset=-1"),
     (dict(num_beams=0), "num_beams must be at least 1")],
)  # fmt: skip
def test_beam_search_rejects_arguments_that_give_garbage(arguments, message):
    with pytest.raises(ValueError, match=message):
        translate_ids(small_model(), torch.tensor([[5, 6, 3]]), **arguments)


BAD_SEARCHES = [
    (dict(length_penalty=float("nan")), "length_penalty must be finite and non-negative, got length_penalty=nan"),
    (dict(length_penalty=float("inf")), "length_penalty must be finite and non-negative, got length_penalty=inf"),
    (dict(length_penalty=-0.5), "length_penalty must be finite and non-negative, got length_penalty=-0.5"),
    (dict(length_penalty="0.6"), "length_penalty must be a number, got length_penalty='0.6'"),
    (dict(max_length_offset=-1), "max_length_offset must be non-negative, got max_length_offset=-1"),
    (dict(max_length_offset=2.5), "max_length_offset must be an integer, got max_length_offset=2.5"),
    (dict(num_beams=0), "num_beams must be at least 1, got num_beams=0"),
    (dict(num_beams=-2), "num_beams must be at least 1, got num_beams=-2"),
    (dict(num_beams="4"), "num_beams must be an integer, got num_beams='4'"),
    (dict(num_beams=4.0), "num_beams must be an integer, got num_beams=4.0"),
    (dict(num_beams=True), "num_beams must be an integer, got num_beams=True"),
]
"""Search settings that cannot work, and the error each must raise: a NaN alpha changes the output, a negative one
or a negative offset cuts it short, beams < 1 crash deep inside generate (ZeroDivisionError, "negative dimension"),
and a string from a hand-edited JSON file raises a TypeError there."""


@pytest.mark.parametrize("arguments, message", BAD_SEARCHES)
def test_paper_generation_config_and_translate_refuse_a_search_that_cannot_work(
    arguments, message, model_and_tokenizer, monkeypatch
):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(ValueError, match=re.escape(message)):
        paper_generation_config(model.config, **arguments)
    monkeypatch.setattr(model, "generate", lambda *a, **k: pytest.fail("decoded with a bad search setting"))
    for sentences in (["seven", "three hundred"], []):  # refused before decoding, even with nothing to decode
        with pytest.raises(ValueError, match=re.escape(message)):
            translate(model, tokenizer, sentences, **arguments)


def test_the_smallest_valid_search_settings_translate(model_and_tokenizer):
    """Beam 1, alpha 0 and offset 0 are the edges of what is allowed, not errors."""
    model, tokenizer = model_and_tokenizer
    edge = dict(num_beams=1, length_penalty=0, max_length_offset=0)
    assert paper_generation_config(model.config, **edge).num_beams == 1
    assert len(translate(model, tokenizer, ["seven", "three hundred"], **edge)) == 2


def test_beam_search_rejects_left_padding():
    ids, mask = torch.tensor([[5, 6, 3], [0, 7, 3]]), torch.tensor([[1, 1, 1], [0, 1, 1]])
    with pytest.raises(ValueError, match="attention_mask is not right-padded"):
        translate_ids(small_model(), ids, mask)


# --------------------------------------------------------------------------------------------------------------------
# Translation: line splitting, padding side, over-long lines, wrong directories
# --------------------------------------------------------------------------------------------------------------------


def test_translate_and_evaluate_split_lines_on_newline_only(tiny_model_dir, model_and_tokenizer, tmp_path, capsys):
    sources = ["one hundred", f"two{BREAKS[0]}hundred {''.join(BREAKS[1:])}seven", "three"]
    source = tmp_path / "source.en"
    source.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    assert read_lines(source) == sources
    output = tmp_path / "output.de"
    assert (
        load_script("translate").main(
            ["--model", str(tiny_model_dir), "--input", str(source), "--output", str(output)]
        )
        == 0
    )
    model, tokenizer = model_and_tokenizer
    expected = [translate(model, tokenizer, [line])[0] for line in sources]  # each line on its own
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    # evaluate: a hypothesis file with the same characters keeps its line count, and so its alignment.
    reference = tmp_path / "reference.de"
    reference.write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    assert load_script("evaluate").main(["--hypotheses", str(source), "--reference", str(reference)]) == 0
    assert "exact match = 100.00%" in capsys.readouterr().out


def test_translate_pads_right_whatever_the_tokenizers_padding_side(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    sentences = ["seven", "three hundred and twelve", "forty-one", "nine hundred and ninety-nine", "a hundred"]
    alone = [translate(model, tokenizer, [sentence])[0] for sentence in sentences]
    side = tokenizer.padding_side
    try:
        tokenizer.padding_side = "left"
        assert translate(model, tokenizer, sentences, batch_size=5) == alone
    finally:
        tokenizer.padding_side = side


def test_pipeline_pads_right_and_passes_the_mask(tiny_model_dir, tmp_path):
    from transformers import pipeline

    from vanilla_transformer.model_dir import add_pipeline_support

    shutil.copytree(tiny_model_dir, tmp_path / "model")
    add_pipeline_support(tmp_path / "model")
    translator = pipeline("translation", model=str(tmp_path / "model"), trust_remote_code=True)
    sentences = ["seven", "three hundred and twelve", "forty-one", "nine hundred and ninety-nine", "a hundred"]
    alone = [translator(sentence)[0]["translation_text"] for sentence in sentences]
    translator.tokenizer.padding_side = "left"
    batched = [result["translation_text"] for result in translator(sentences, batch_size=5)]
    assert batched == alone


def test_an_over_long_line_is_named_before_any_translation(model_and_tokenizer, monkeypatch):
    model, tokenizer = model_and_tokenizer
    long_line = " ".join(["seven"] * 200)  # more tokens than max_position_embeddings=64
    calls = []
    monkeypatch.setattr("vanilla_transformer.serving.search.translate_ids", lambda *a, **k: calls.append(1))
    with pytest.raises(
        ValueError, match=r"sentence 2 has \d+ tokens, more than the model's max_position_embeddings=64"
    ):
        translate(model, tokenizer, ["one", long_line, "two"])
    assert not calls


def test_a_run_directory_given_as_the_model_is_named(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "model")
    with pytest.raises(FileNotFoundError, match=r"is a training run directory, not a model directory: pass .*model"):
        load_model_dir(tmp_path / "run")
    with pytest.raises(FileNotFoundError, match=r"holds no config.json"):
        load_model_dir(tmp_path)
    translate_script = load_script("translate")
    (tmp_path / "source.en").write_text("seven\n", encoding="utf-8")
    for decoder in ([], ["--ctranslate2", str(tmp_path / "ct2")]):
        with pytest.raises(FileNotFoundError, match=r"is a training run directory"):
            translate_script.main(["--model", str(tmp_path / "run"), "--input", str(tmp_path / "source.en"), *decoder])


def test_evaluate_checks_line_counts_before_translating(tiny_model_dir, tmp_path, monkeypatch):
    source, reference = tmp_path / "source.en", tmp_path / "reference.de"
    source.write_text("one\ntwo\nthree\n", encoding="utf-8")
    reference.write_text("eins\nzwei\n", encoding="utf-8")
    evaluate = load_script("evaluate")
    monkeypatch.setattr(evaluate, "translate_with_options", lambda *a, **k: pytest.fail("translated before checking"))
    with pytest.raises(ValueError, match=r"--source=.*source.en has 3 lines but --reference=.*reference.de has 2"):
        evaluate.main(["--model", str(tiny_model_dir), "--source", str(source), "--reference", str(reference)])
    with pytest.raises(ValueError, match=r"--hypotheses=.*source.en has 3 lines"):
        evaluate.main(["--hypotheses", str(source), "--reference", str(reference)])


def test_non_utf8_text_is_named_with_its_file_and_line(tmp_path):
    (tmp_path / "a.en").write_bytes("one\ntwo\nd\xe9j\xe0\n".encode("latin-1"))
    (tmp_path / "a.de").write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"a.en:3: not UTF-8 text"):
        read_parallel_text(tmp_path / "a.en", tmp_path / "a.de")


# --------------------------------------------------------------------------------------------------------------------
# Training data and the run directory
# --------------------------------------------------------------------------------------------------------------------


def test_generate_refuses_a_beam_memory_cannot_hold_before_the_decoder_allocates(monkeypatch):
    """``model.generate(num_beams=...)`` runs the memory check of ``translate_ids`` (issue 45): one ValueError naming
    num_beams, before the fast decoder allocates its caches (here against 1 MB of memory)."""
    from vanilla_transformer import decoder_vanilla_transformer, generation_vanilla_transformer

    model, built = small_model(), []
    monkeypatch.setattr(decoder_vanilla_transformer, "available_memory", lambda device="cpu": 1 << 20)
    decoder = generation_vanilla_transformer.IncrementalDecoder
    monkeypatch.setattr(
        generation_vanilla_transformer, "IncrementalDecoder", lambda *args: built.append(1) or decoder(*args)
    )
    with pytest.raises(ValueError, match=r"num_beams=1,000 hypotheses .* lower num_beams"):
        model.generate(torch.tensor([[5, 6, 7, 2]]), num_beams=1000, max_new_tokens=20)
    assert built == []
    assert model.generate(torch.tensor([[5, 6, 7, 2]]), num_beams=2, max_new_tokens=3).shape[0] == 1  # small: served
    assert built == [1]


class Expanded(Exception):
    """transformers repeated the inputs for each beam."""


@pytest.mark.parametrize(
    "settings",
    [
        dict(num_beams=10**6),  # transformers' default length, no offset: the search's least memory
        dict(num_beams=10**6, max_new_tokens=20),
        dict(generation_config="paper", num_beams=10**6),  # its max_length_offset, from the generation config
        dict(model_config=True),  # num_beams=10**6 in the model's own generation config
        dict(num_beams=10**6, fallback=True),  # a logits processor: transformers' own beam search
    ],
    ids=["default-length", "max-new-tokens", "paper-config", "model-config", "transformers-search"],
)
def test_generate_refuses_a_huge_num_beams_before_transformers_repeats_the_inputs_for_each_beam(monkeypatch, settings):
    """``generate()`` repeats the encoder's inputs and outputs ``num_beams`` times (transformers'
    ``_expand_inputs_for_generation``) before any search runs: a num_beams the memory cannot hold (here 1 GB) is
    refused before that, with the search's one line, on the fast path and on transformers' own."""
    from transformers import GenerationMixin, LogitsProcessorList, MinLengthLogitsProcessor

    from vanilla_transformer import decoder_vanilla_transformer

    assert hasattr(GenerationMixin, "_expand_inputs_for_generation")  # the spy below watches a real step

    def expand(*args, **kwargs):
        raise Expanded(kwargs.get("expand_size"))

    model = small_model()
    monkeypatch.setattr(decoder_vanilla_transformer, "available_memory", lambda device="cpu": 1 << 30)
    monkeypatch.setattr(GenerationMixin, "_expand_inputs_for_generation", expand)
    settings = dict(settings)
    paper = paper_generation_config(model.config, num_beams=10**6, max_new_tokens=None)
    if settings.get("generation_config") == "paper":
        settings["generation_config"] = paper
    if settings.pop("model_config", False):
        model.generation_config = paper
    if settings.pop("fallback", False):
        settings["logits_processor"] = LogitsProcessorList([MinLengthLogitsProcessor(2, eos_token_id=2)])
    with pytest.raises(ValueError, match=r"^the search would hold .*num_beams=1,000,000 hypotheses.* lower num_beams"):
        model.generate(torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]), **settings)
    with pytest.raises(Expanded):  # an affordable num_beams reaches the expansion
        model.generate(torch.tensor([[5, 6, 7, 2]]), num_beams=4, max_new_tokens=5)


def test_generate_names_num_return_sequences_where_sampling_asks_for_the_hypotheses(monkeypatch):
    """Sampling with a huge ``num_return_sequences`` (and one beam) is refused naming num_return_sequences, the
    setting to lower, not num_beams."""
    from transformers import GenerationMixin

    from vanilla_transformer import decoder_vanilla_transformer

    def expand(*args, **kwargs):
        raise Expanded(kwargs.get("expand_size"))

    model = small_model()
    monkeypatch.setattr(decoder_vanilla_transformer, "available_memory", lambda device="cpu": 1 << 30)
    monkeypatch.setattr(GenerationMixin, "_expand_inputs_for_generation", expand)
    with pytest.raises(ValueError, match=r"num_return_sequences=1,000,000 hypotheses.* lower num_return_sequences or"):
        model.generate(torch.tensor([[5, 6, 7, 2]]), do_sample=True, num_return_sequences=10**6, max_new_tokens=5)
