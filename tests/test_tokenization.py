"""Tests of the shared byte-level BPE tokenizer and its command-line script."""

import copy
from types import SimpleNamespace

import pytest
from tiny_model import load_script
from transformers import AutoTokenizer

from vanilla_transformer.tokenization import (
    BOS_ID,
    EOS_ID,
    MIN_VOCAB_SIZE,
    PAD_ID,
    UNK_ID,
    check_tokenizer_matches_config,
    train_tokenizer,
)

CORPUS = [
    "Ein Mann fährt mit dem Fahrrad über die Straße.",
    "A man rides his bike across the street.",
    "Zwei Kinder spielen im Schnee vor dem Haus.",
    "Two children are playing in the snow in front of the house.",
    "Die Frau trägt einen roten Hut und lächelt.",
    "The woman is wearing a red hat and smiling.",
    "Ein Hund läuft durch das hohe Gras.",
    "A dog runs through the tall grass.",
] * 20

ROUND_TRIP = [
    "Die Straße in München hat 3,5 km — „schön“!",
    "Größe: 1.234,56 € (ca. 20 %), Öl & Übermaß; „Zitat“ und ‚halbes‘ – «Guillemets».",
    "\"Hello,\" she said. It's 10:30 p.m. -- isn't it?",
    "  leading and trailing spaces  ",
    "double  space\tand tab",
    "Unseen characters: 東京, Ελλάδα, 🙂, ﬁ ligature, e\u0301 (decomposed é).",
    "Special-token strings as text: <s> </s> <pad> <unk>",
    "",
]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(CORPUS, vocab_size=400)


def test_special_tokens_have_the_fixed_ids(tokenizer):
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id) == (
        0,
        1,
        2,
        3,
    )


def test_vocabulary_has_the_requested_size_and_learned_merges(tokenizer):
    assert len(tokenizer) == 400
    # Training words are encoded with multi-byte merges, not one token per byte.
    assert len(tokenizer.tokenize("Straße")) < len("Straße".encode())


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_restores_the_original_text(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert UNK_ID not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_sources_end_in_eos_and_labels_are_target_ids_plus_eos(tokenizer):
    sources = ["Ein Hund läuft.", "Zwei Kinder spielen im Schnee vor dem Haus."]
    targets = ["A dog runs through the tall grass.", "Two children."]
    batch = tokenizer(sources, text_target=targets)

    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    for source, target, input_ids, mask, labels in zip(
        sources, targets, batch["input_ids"], batch["attention_mask"], batch["labels"], strict=True
    ):
        assert input_ids == tokenizer.convert_tokens_to_ids(tokenizer.tokenize(source)) + [EOS_ID]
        assert labels == tokenizer.convert_tokens_to_ids(tokenizer.tokenize(target)) + [EOS_ID]
        assert mask == [1] * len(input_ids)
        assert BOS_ID not in input_ids


def test_save_and_reload_with_auto_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)

    assert len(reloaded) == len(tokenizer)
    assert (reloaded.pad_token_id, reloaded.unk_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (0, 1, 2, 3)
    encoded = reloaded(ROUND_TRIP)["input_ids"]
    assert encoded == tokenizer(ROUND_TRIP)["input_ids"]
    assert reloaded.batch_decode(encoded, skip_special_tokens=True) == ROUND_TRIP


def test_training_on_files_equals_training_on_their_lines(tmp_path):
    english, german = tmp_path / "train.en", tmp_path / "train.de"
    english.write_text("".join(line + "\n" for line in CORPUS[1::2]), encoding="utf-8")
    german.write_text("".join(line + "\n" for line in CORPUS[0::2]), encoding="utf-8")

    from_files = train_tokenizer([english, german], vocab_size=350)
    from_texts = train_tokenizer(CORPUS[1::2] + CORPUS[0::2], vocab_size=350)

    assert from_files.get_vocab() == from_texts.get_vocab()


def test_bad_training_arguments_are_rejected(tmp_path):
    with pytest.raises(ValueError, match=rf"at least {MIN_VOCAB_SIZE} .*vocab_size=259"):
        train_tokenizer(CORPUS, vocab_size=259)
    with pytest.raises(ValueError, match="min_frequency=0"):
        train_tokenizer(CORPUS, vocab_size=300, min_frequency=0)
    with pytest.raises(ValueError, match="no training text"):
        train_tokenizer([], vocab_size=300)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        train_tokenizer([tmp_path / "missing.txt"], vocab_size=300)


def _config(**overrides):
    fields = {"vocab_size": 400, "pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3, "decoder_start_token_id": 2}
    return SimpleNamespace(**(fields | overrides))


def test_check_tokenizer_matches_config_accepts_a_matching_config(tokenizer):
    check_tokenizer_matches_config(tokenizer, _config())
    check_tokenizer_matches_config(tokenizer, _config(vocab_size=512))  # a larger, rounded-up vocabulary is fine


def test_check_tokenizer_matches_the_model_config_defaults(tokenizer):
    from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig

    check_tokenizer_matches_config(tokenizer, VanillaTransformerConfig(vocab_size=len(tokenizer)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"vocab_size": 399}, "len(tokenizer)=400 exceeds config.vocab_size=399"),
        ({"pad_token_id": 1}, "config.pad_token_id=1 but tokenizer.pad_token_id=0"),
        ({"bos_token_id": 0}, "config.bos_token_id=0 but tokenizer.bos_token_id=2"),
        ({"eos_token_id": 2}, "config.eos_token_id=2 but tokenizer.eos_token_id=3"),
        ({"decoder_start_token_id": 0}, "config.decoder_start_token_id=0 but tokenizer.bos_token_id=2"),
    ],
)
def test_check_tokenizer_matches_config_names_the_mismatch(tokenizer, overrides, message):
    with pytest.raises(ValueError) as error:
        check_tokenizer_matches_config(tokenizer, _config(**overrides))
    assert message in str(error.value)


def test_check_tokenizer_matches_config_reports_every_mismatch(tokenizer):
    with pytest.raises(ValueError) as error:
        check_tokenizer_matches_config(tokenizer, _config(vocab_size=10, eos_token_id=None))
    assert "config.vocab_size=10" in str(error.value)
    assert "config.eos_token_id=None" in str(error.value)


def test_script_trains_and_saves_a_reloadable_tokenizer(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(CORPUS) + "\n", encoding="utf-8")
    output_dir = tmp_path / "tokenizer"

    status = load_script("train-tokenizer").main([str(corpus), "--vocab-size", "300", "--output-dir", str(output_dir)])

    assert status == 0
    reloaded = AutoTokenizer.from_pretrained(output_dir)
    assert len(reloaded) == 300
    assert reloaded.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert reloaded.decode(reloaded(CORPUS[0])["input_ids"], skip_special_tokens=True) == CORPUS[0]


@pytest.mark.parametrize(
    "argv",
    [
        ["--vocab-size", "300", "--output-dir", "out"],
        ["a.txt", "--numbers", "10", "--vocab-size", "300", "--output-dir", "out"],
        ["--hf-dataset", "wmt14", "--vocab-size", "300", "--output-dir", "out"],
    ],
)
def test_script_requires_exactly_one_complete_corpus(argv):
    with pytest.raises(SystemExit):
        load_script("train-tokenizer").parse_args(argv)


def test_a_tokenizer_without_bos_starts_the_decoder_from_pad(tokenizer):
    """MarianMT's convention (no <s>; the decoder starts from <pad>) is accepted, and a wrong start is still named."""
    marian_style = copy.deepcopy(tokenizer)
    marian_style.bos_token = None
    check_tokenizer_matches_config(marian_style, _config(bos_token_id=None, decoder_start_token_id=0))
    with pytest.raises(ValueError, match="config.decoder_start_token_id=2 but tokenizer.pad_token_id=0"):
        check_tokenizer_matches_config(marian_style, _config(bos_token_id=None))


def test_the_numbers_tasks_tokenizer_reads_capitals_as_the_lower_case_words_it_was_trained_on(tiny_run_dir):
    """The numbers task's words are lower-case, so "Three Hundred And Twenty-One" was unseen byte sequences that the
    model turned into a wrong number (issue 56, cause 8). Its tokenizer lower-cases its input: capitals give the ids
    of the lower-case words, hence the same translation; a tokenizer of mixed-case text keeps case."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_run_dir / "model", trust_remote_code=False)
    for text in ("Three Hundred And Twenty-One", "FORTY-TWO", "Seven"):
        assert tokenizer(text).input_ids == tokenizer(text.lower()).input_ids, text
    assert tokenizer.decode(tokenizer("Forty-Two").input_ids, skip_special_tokens=True) == "forty-two"
    mixed = train_tokenizer(["Ein Hund rennt.", "ein hund rennt.", "A Dog runs."] * 5, vocab_size=300)
    assert mixed("Ein Hund").input_ids != mixed("ein hund").input_ids
