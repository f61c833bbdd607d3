"""Tests of corpus loading, cleaning, the numbers task, token batching and collation."""

import json
import logging
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from num2words import num2words
from torch.utils.data import DataLoader

from vanilla_transformer.data import (
    DATA_DIR_VARIABLE,
    CleaningStats,
    CorpusSpec,
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    clean_text,
    example_lengths,
    hilbert_index,
    load_corpus,
    load_hf_translation,
    load_splits,
    make_numbers_task,
    padding_fraction,
    read_jsonl,
    read_parallel_text,
    read_tsv,
    tokenize_pairs,
)
from vanilla_transformer.data.numbers import english_number, exact_match_by_magnitude
from vanilla_transformer.tokenization import EOS_ID, train_tokenizer

SHARED_DATA = Path(os.environ.get(DATA_DIR_VARIABLE) or Path(__file__).resolve().parents[2] / "shared" / "data")
MULTI30K = SHARED_DATA / "multi30k"


def _write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


# --------------------------------------------------------------------------- plain text, TSV, JSONL


def test_read_parallel_text_splits_on_newlines_only(tmp_path):
    # U+2028 and a form feed are line breaks to str.splitlines() but must not shift the alignment.
    src = _write(tmp_path / "a.en", "Hello  world \nline\u2028separator\nform\x0cfeed\n")
    tgt = _write(tmp_path / "a.de", "\ufeffHallo\tWelt\nZeilen\u2028trenner\nSeiten\x0cvorschub\n")

    assert read_parallel_text(src, tgt) == [
        ("Hello  world ", "Hallo\tWelt"),
        ("line\u2028separator", "Zeilen\u2028trenner"),
        ("form\x0cfeed", "Seiten\x0cvorschub"),
    ]


def test_read_parallel_text_rejects_files_of_different_length(tmp_path):
    src = _write(tmp_path / "a.en", "one\ntwo\nthree\n")
    tgt = _write(tmp_path / "a.de", "eins\nzwei\n")
    with pytest.raises(ValueError) as error:
        read_parallel_text(src, tgt)
    message = str(error.value)
    assert f"{src} has 3 lines" in message
    assert f"{tgt} has 2 lines" in message


def test_read_parallel_text_names_a_missing_file(tmp_path):
    src = _write(tmp_path / "a.en", "one\n")
    with pytest.raises(FileNotFoundError, match="missing.de"):
        read_parallel_text(src, tmp_path / "missing.de")


def test_read_tsv_by_position_and_by_name(tmp_path):
    by_position = _write(tmp_path / "a.tsv", "Hello\tHallo\n\nThank you\tDanke\n")
    assert read_tsv(by_position) == [("Hello", "Hallo"), ("Thank you", "Danke")]
    assert read_tsv(by_position, 1, 0) == [("Hallo", "Hello"), ("Danke", "Thank you")]

    by_name = _write(tmp_path / "b.tsv", "id\tde\ten\n1\tHallo\tHello\n2\tDanke\tThank you\n")
    assert read_tsv(by_name, "en", "de") == [("Hello", "Hallo"), ("Thank you", "Danke")]


def test_read_tsv_rejects_bad_columns_and_rows(tmp_path):
    path = _write(tmp_path / "a.tsv", "id\tde\ten\n1\tHallo\tHello\n2\tDanke\n")
    with pytest.raises(ValueError, match=r"a.tsv:3: expected 3 tab-separated fields, found 2"):
        read_tsv(path, "en", "de")
    with pytest.raises(ValueError, match=r"no column 'fr'"):
        read_tsv(path, "fr", "de")
    with pytest.raises(ValueError, match=r"src_column=5"):
        read_tsv(path, 5, 1)
    with pytest.raises(ValueError, match=r"src_column='en', tgt_column=1"):
        read_tsv(path, "en", 1)


def test_read_jsonl_flat_and_translation_layouts(tmp_path):
    records = [
        {"en": "Hello", "de": "Hallo"},
        {"translation": {"de": "Schöne Grüße", "en": "Kind regards"}, "id": 7},
    ]
    path = _write(tmp_path / "a.jsonl", "\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n\n")
    assert read_jsonl(path, "en", "de") == [("Hello", "Hallo"), ("Kind regards", "Schöne Grüße")]


def test_read_jsonl_names_the_bad_line(tmp_path):
    missing_key = _write(tmp_path / "a.jsonl", '{"en": "Hello", "de": "Hallo"}\n{"en": "Thanks"}\n')
    with pytest.raises(ValueError, match=r"a.jsonl:2: missing key 'de'"):
        read_jsonl(missing_key, "en", "de")
    invalid = _write(tmp_path / "b.jsonl", '{"en": "Hello",\n')
    with pytest.raises(ValueError, match=r"b.jsonl:1: invalid JSON"):
        read_jsonl(invalid, "en", "de")
    not_text = _write(tmp_path / "c.jsonl", '{"en": "Hello", "de": 3}\n')
    with pytest.raises(ValueError, match=r"c.jsonl:1: value of 'de' is int"):
        read_jsonl(not_text, "en", "de")


# --------------------------------------------------------------------------- Hugging Face datasets


def test_load_hf_translation_reads_the_translation_column(offline, local_hub_dataset, tmp_path):
    name, cache_dir = str(local_hub_dataset), str(tmp_path / "cache")

    train = load_hf_translation(name, "de-en", split="train", src_lang="en", tgt_lang="de", cache_dir=cache_dir)
    valid = load_hf_translation(name, "de-en", split="validation", src_lang="de", tgt_lang="en", cache_dir=cache_dir)

    assert train == [("Hello world", "Hallo Welt"), ("The street", "Die Straße")]
    assert valid == [("Danke", "Thank you")]


def test_load_hf_translation_reads_one_column_per_language(offline, tmp_path):
    root = tmp_path / "flat"
    root.mkdir()
    _write(root / "train.jsonl", '{"en": "Yes", "de": "Ja"}\n{"en": "No", "de": "Nein"}\n')

    pairs = load_hf_translation(str(root), split="train", src_lang="de", tgt_lang="en", cache_dir=str(tmp_path / "c"))

    assert pairs == [("Ja", "Yes"), ("Nein", "No")]


def test_load_hf_translation_names_what_is_missing(offline, local_hub_dataset, tmp_path):
    name, cache_dir = str(local_hub_dataset), str(tmp_path / "cache")
    missing = tmp_path / "no_such_dataset"
    with pytest.raises(ValueError, match=f"cannot load dataset '{missing}'"):
        load_hf_translation(str(missing), "de-en", src_lang="en", tgt_lang="de", cache_dir=cache_dir)
    with pytest.raises(ValueError, match=r"cannot load dataset '.*wmt_like' \(config='fr-en'"):
        load_hf_translation(name, "fr-en", src_lang="en", tgt_lang="fr", cache_dir=cache_dir)
    with pytest.raises(ValueError, match=r"split='test'"):
        load_hf_translation(name, "de-en", split="test", src_lang="en", tgt_lang="de", cache_dir=cache_dir)
    with pytest.raises(ValueError, match=r"has no language 'fr'"):
        load_hf_translation(name, "de-en", src_lang="en", tgt_lang="fr", cache_dir=cache_dir)


# --------------------------------------------------------------------------- cleaning


def test_clean_text_strips_and_collapses_every_kind_of_whitespace():
    assert clean_text("  Ein\tHund \u00a0 mit  der Nummer\u00a06 .\r\n") == "Ein Hund mit der Nummer 6 ."
    assert clean_text(" \t ") == ""


def test_clean_pairs_drops_empty_and_long_pairs_and_logs_counts(caplog):
    pairs = [
        (" Hi   there ", "Hallo\tdu "),
        ("", "leer"),
        ("empty target", "   "),
        ("short", "x" * 11),
        ("y" * 10, "ten chars!"),
    ]
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.data"):
        kept, stats = clean_pairs(pairs, max_length=10)

    assert kept == [("Hi there", "Hallo du"), ("y" * 10, "ten chars!")]
    assert stats == CleaningStats(total=5, kept=2, dropped_empty=2, dropped_too_long=1)
    assert stats.dropped == 3
    assert "kept 2 of 5 pairs; dropped 2 with an empty side and 1 too long" in caplog.text


def test_clean_pairs_measures_tokens_with_a_tokenizer(numbers_tokenizer):
    short, long = "one", "seventy-seven thousand, seven hundred and seventy-seven"
    short_tokens = len(numbers_tokenizer.tokenize(short)) + 1  # + </s>
    long_tokens = len(numbers_tokenizer.tokenize(long)) + 1
    assert short_tokens < long_tokens <= len(long)

    pairs = [(short, "eins"), (long, "eins")]
    assert clean_pairs(pairs, max_length=long_tokens - 1, tokenizer=numbers_tokenizer)[0] == [(short, "eins")]
    assert clean_pairs(pairs, max_length=long_tokens, tokenizer=numbers_tokenizer)[0] == pairs


def test_clean_pairs_rejects_a_non_positive_max_length():
    with pytest.raises(ValueError, match="max_length=0"):
        clean_pairs([("a", "b")], max_length=0)


# --------------------------------------------------------------------------- numbers task


def test_numbers_task_translates_english_number_words_into_german():
    splits = make_numbers_task(200, 60, 61, max_number=321, seed=3)
    english_to_german = {num2words(n, lang="en"): num2words(n, lang="de") for n in range(1, 322)}

    everything = splits.train + splits.valid + splits.test
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (200, 60, 61)
    assert set(everything) <= set(english_to_german.items())
    assert all(1 <= english_number(src) <= 321 for src, _ in everything)


def test_numbers_task_covers_every_magnitude_the_same_way_in_each_split():
    """Each digit count is about a fifth of every split (uniform over 1..99,999, 1 and 2 digits would be 0.1%),
    so one to five digits are all trained and tested; the one- and two-digit numbers are all in training."""
    splits = make_numbers_task(5000, 1000, 1000, seed=0)
    for pairs in (splits.train, splits.valid, splits.test):
        counts = Counter(len(str(english_number(src))) for src, _ in pairs)
        assert sorted(counts) == [1, 2, 3, 4, 5]
        assert all(abs(count / len(pairs) - 0.2) < 0.04 for count in counts.values()), counts
    trained = {english_number(src) for src, _ in splits.train}
    assert set(range(1, 100)) <= trained
    five_digits = [english_number(src) for src, _ in splits.test if english_number(src) >= 10_000]
    assert not trained & set(five_digits) and len(set(five_digits)) == len(five_digits)  # held out, each once


def test_numbers_task_is_deterministic_with_disjoint_splits_where_a_magnitude_has_room():
    first = make_numbers_task(300, 50, 50, seed=0)
    assert first == make_numbers_task(300, 50, 50, seed=0)
    assert first.train != make_numbers_task(300, 50, 50, seed=1).train

    large = [
        {src for src, _ in split if english_number(src) >= 1000} for split in (first.train, first.valid, first.test)
    ]
    train, valid, test = large
    assert len(train) > 80 and not (train & valid or train & test or valid & test)


def test_english_number_reads_what_num2words_writes():
    for number in [*range(1, 100_000), 100_000, 123_456, 1_000_000, 7_654_321]:
        assert english_number(num2words(number, lang="en")) == number
    assert english_number("zwölf") is None and english_number("") is None


def test_exact_match_by_magnitude_counts_each_digit_count():
    sources = ["five", "seven", "twelve", "seven hundred", "forty-two thousand", "not a number"]
    references = ["fünf", "sieben", "zwölf", "siebenhundert", "zweiundvierzigtausend", "x"]
    hypotheses = ["fünf", "acht", "zwölf", "siebenhundert", "zweiundvierzig", "x"]
    assert exact_match_by_magnitude(sources, hypotheses, references) == {
        "1-9": 50.0, "10-99": 100.0, "100-999": 100.0, "10,000-99,999": 0.0,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"num_train": -1, "num_valid": 0, "num_test": 0}, "num_train=-1"),
        ({"num_train": 0, "num_valid": 0, "num_test": 0, "max_number": 0}, "max_number=0"),
    ],
)
def test_numbers_task_rejects_bad_sizes(arguments, message):
    with pytest.raises(ValueError, match=message):
        make_numbers_task(**arguments)


# --------------------------------------------------------------------------- tokenizing and collation


@pytest.fixture(scope="module")
def numbers_task():
    return make_numbers_task(2000, 100, 100, seed=0)


@pytest.fixture(scope="module")
def numbers_tokenizer(numbers_task):
    return train_tokenizer([text for pair in numbers_task.train for text in pair], vocab_size=300)


def test_tokenize_pairs_gives_source_ids_and_labels(numbers_tokenizer):
    pairs = [("forty-two", "zweiundvierzig"), ("seven", "sieben")]
    examples = tokenize_pairs(pairs, numbers_tokenizer)

    def ids(text):
        return numbers_tokenizer.convert_tokens_to_ids(numbers_tokenizer.tokenize(text)) + [EOS_ID]

    assert examples == [{"input_ids": ids(src), "labels": ids(tgt)} for src, tgt in pairs]
    assert example_lengths(examples) == [(len(ids(src)), len(ids(tgt))) for src, tgt in pairs]
    assert tokenize_pairs([], numbers_tokenizer) == []


def test_collator_pads_inputs_with_pad_id_and_labels_with_minus_100():
    examples = [{"input_ids": [5, 6, 3], "labels": [7, 3]}, {"input_ids": [8, 3], "labels": [9, 10, 11, 3]}]

    batch = TranslationCollator(pad_token_id=0)(examples)

    assert set(batch) == {"input_ids", "attention_mask", "labels"}
    assert torch.equal(batch["input_ids"], torch.tensor([[5, 6, 3], [8, 3, 0]]))
    assert torch.equal(batch["attention_mask"], torch.tensor([[1, 1, 1], [1, 1, 0]]))
    assert torch.equal(batch["labels"], torch.tensor([[7, 3, -100, -100], [9, 10, 11, 3]]))
    assert all(tensor.dtype == torch.long for tensor in batch.values())


# --------------------------------------------------------------------------- batching


def test_hilbert_index_walks_every_cell_through_adjacent_cells():
    side = 16
    x, y = (a.ravel() for a in np.meshgrid(np.arange(side), np.arange(side)))
    index = hilbert_index(x, y)

    assert sorted(index.tolist()) == list(range(side * side))
    order = np.argsort(index)
    steps = np.abs(np.diff(x[order])) + np.abs(np.diff(y[order]))
    assert steps.tolist() == [1] * (side * side - 1)
    assert (x[order[0]], y[order[0]]) == (0, 0)


def test_sampler_cuts_sorted_examples_greedily_within_max_tokens():
    # Equal source and target lengths lie on the curve's diagonal, which it walks in increasing order.
    lengths = [(4, 4), (1, 1), (2, 2), (4, 4), (1, 1), (3, 3), (2, 2)]
    sampler = TokenBatchSampler(lengths, max_tokens=8, shuffle=False)

    # [1, 4]: 2 * (1 + 1) = 4; adding a length-2 example would cost 3 * (2 + 2) = 12 > 8.
    assert list(sampler) == [[1, 4], [2, 6], [5], [0], [3]]
    assert len(sampler) == 5


def test_sampler_batches_cover_all_examples_within_budget():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=(500, 2)).tolist()
    sampler = TokenBatchSampler(lengths, max_tokens=400, seed=5)

    batches = list(sampler)
    assert sorted(index for batch in batches for index in batch) == list(range(500))
    for batch in batches:
        assert len(batch) * (max(lengths[i][0] for i in batch) + max(lengths[i][1] for i in batch)) <= 400


def test_sampler_is_deterministic_per_seed_and_epoch_and_reshuffles_each_epoch():
    lengths = [(5, 5)] * 40 + [(9, 7)] * 40
    sampler = TokenBatchSampler(lengths, max_tokens=50, seed=1)

    epoch_0 = list(sampler)
    assert epoch_0 == list(TokenBatchSampler(lengths, max_tokens=50, seed=1))
    assert epoch_0 != list(TokenBatchSampler(lengths, max_tokens=50, seed=2))
    sampler.set_epoch(1)
    epoch_1 = list(sampler)
    assert epoch_1 != epoch_0
    # Ties are reshuffled too: batch membership changes, not just batch order.
    assert sorted(map(sorted, epoch_1)) != sorted(map(sorted, epoch_0))
    assert sorted(map(len, epoch_1)) == sorted(map(len, epoch_0))


def test_sampler_splits_batches_disjointly_across_replicas_dropping_the_tail():
    lengths = np.random.default_rng(1).integers(1, 30, size=(300, 2)).tolist()
    single = TokenBatchSampler(lengths, max_tokens=200, seed=3)
    single.set_epoch(4)
    all_batches = list(single)
    assert len(all_batches) % 3 != 0  # so that the tail is dropped

    per_rank = []
    for rank in range(3):
        sampler = TokenBatchSampler(lengths, max_tokens=200, seed=3, num_replicas=3, rank=rank)
        sampler.set_epoch(4)
        per_rank.append(list(sampler))
        assert len(sampler) == len(all_batches) // 3 == len(per_rank[-1])

    # Rank r takes every third batch of the single-process epoch, after dropping the last len % 3.
    kept = all_batches[: len(all_batches) // 3 * 3]
    assert per_rank == [kept[rank::3] for rank in range(3)]


def test_sampler_resumes_at_a_batch_position():
    lengths = np.random.default_rng(2).integers(1, 30, size=(200, 2)).tolist()
    sampler = TokenBatchSampler(lengths, max_tokens=150, seed=7)
    sampler.set_epoch(3)
    full_epoch = list(sampler)

    restarted = TokenBatchSampler(lengths, max_tokens=150, seed=7)
    restarted.set_epoch(3, start_batch=5)
    assert list(restarted) == full_epoch[5:]
    assert len(restarted) == len(full_epoch) - 5
    assert restarted.epoch_batches(3) == full_epoch
    with pytest.raises(ValueError, match="start_batch=1000"):
        restarted.set_epoch(3, start_batch=1000)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"max_tokens": 20},
            r"max_tokens=20 is smaller than example 1, whose source and target lengths 12 \+ 10 = 22",
        ),
        ({"max_tokens": 100, "num_replicas": 0}, "num_replicas=0"),
        ({"max_tokens": 100, "num_replicas": 2, "rank": 2}, "rank=2"),
        ({"max_tokens": 100, "num_replicas": 3}, "gives 1 batches, fewer than num_replicas=3"),
    ],
)
def test_sampler_rejects_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        TokenBatchSampler([(3, 4), (12, 10)], **arguments)


def test_sampler_rejects_malformed_lengths():
    with pytest.raises(ValueError, match="lengths is empty"):
        TokenBatchSampler([], max_tokens=10)
    with pytest.raises(ValueError, match=r"shape \(2, 3\)"):
        TokenBatchSampler([(1, 2, 3), (4, 5, 6)], max_tokens=100)


def test_padding_fraction_by_hand():
    lengths = [(2, 3), (4, 1), (5, 5)]
    # Batch [0, 1] is padded to 2 * (4 + 3) = 14 positions holding 2 + 4 + 3 + 1 = 10 tokens; [2] has no padding.
    assert padding_fraction([[0, 1], [2]], lengths) == pytest.approx(4 / 24)


def test_padding_on_the_numbers_task_is_under_ten_percent(numbers_task, numbers_tokenizer):
    examples = tokenize_pairs(numbers_task.train, numbers_tokenizer)
    sampler = TokenBatchSampler(example_lengths(examples), max_tokens=1024)
    loader = DataLoader(
        examples, batch_sampler=sampler, collate_fn=TranslationCollator(numbers_tokenizer.pad_token_id)
    )

    positions = padding = 0
    for batch in loader:
        assert batch["input_ids"].numel() + batch["labels"].numel() <= 1024
        positions += batch["input_ids"].numel() + batch["labels"].numel()
        padding += int((batch["attention_mask"] == 0).sum() + (batch["labels"] == -100).sum())

    share = padding_fraction(sampler, example_lengths(examples))
    assert share == pytest.approx(padding / positions)
    assert share < 0.10  # 2,000 pairs of one to five digits; the default job's 20,000 pairs pad about 1.2%


# --------------------------------------------------------------------------- Multi30k (when available)


@pytest.fixture(scope="module")
def multi30k_train():
    if not (MULTI30K / "train.de").is_file():
        pytest.skip(f"Multi30k not found in {MULTI30K} (set {DATA_DIR_VARIABLE})")
    return read_parallel_text(MULTI30K / "train.en", MULTI30K / "train.de")


def test_cleaning_multi30k_removes_trailing_spaces_and_tabs(multi30k_train):
    assert sum(tgt != tgt.strip() for _, tgt in multi30k_train) == 40
    assert sum("\t" in tgt for _, tgt in multi30k_train) == 1

    pairs, stats = clean_pairs(multi30k_train)

    assert stats == CleaningStats(total=29_000, kept=29_000, dropped_empty=0, dropped_too_long=0)
    for pair in pairs:
        for text in pair:
            assert text == text.strip() and "\t" not in text and "  " not in text


def test_padding_on_multi30k_is_under_five_percent(multi30k_train):
    pairs, _ = clean_pairs(multi30k_train)
    tokenizer = train_tokenizer([text for pair in pairs[:5000] for text in pair], vocab_size=2000)
    lengths = example_lengths(tokenize_pairs(pairs, tokenizer))
    sampler = TokenBatchSampler(lengths, max_tokens=4096)

    assert padding_fraction(sampler, lengths) < 0.05


# --------------------------------------------------------------------------------------------------------------------
# The corpus spec: one way to name a corpus
# --------------------------------------------------------------------------------------------------------------------


def test_corpus_spec_reads_every_kind_alike(tmp_path):
    pairs = [("one", "eins"), ("two", "zwei")]
    (tmp_path / "train.en").write_text("one\ntwo\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("eins\nzwei\n", encoding="utf-8")
    (tmp_path / "train.tsv").write_text("one\teins\ntwo\tzwei\n", encoding="utf-8")
    (tmp_path / "train.jsonl").write_text('{"en": "one", "de": "eins"}\n{"en": "two", "de": "zwei"}\n')
    for kind in ("text", "tsv", "jsonl"):
        assert load_corpus(CorpusSpec(kind, data_dir=str(tmp_path)), "train") == pairs, kind
    for files in (
        [tmp_path / "train.en", tmp_path / "train.de"],
        [tmp_path / "train.tsv"],
        [tmp_path / "train.jsonl"],
    ):
        assert load_corpus(CorpusSpec.from_files({"x": files}), "x") == pairs, files
    reversed_pairs = [(target, source) for source, target in pairs]
    spec = CorpusSpec("jsonl", data_dir=str(tmp_path), src_lang="de", tgt_lang="en")
    assert load_corpus(spec, "train") == reversed_pairs
    numbers = CorpusSpec("numbers", numbers=(5, 2, 1), max_number=50)
    assert load_splits(numbers) == make_numbers_task(5, 2, 1, max_number=50)
    assert load_corpus(numbers, "valid") == make_numbers_task(5, 2, 1, max_number=50).valid


def test_corpus_spec_errors_name_the_option(tmp_path):
    with pytest.raises(ValueError, match="unknown corpus kind 'csv'"):
        CorpusSpec("csv")
    with pytest.raises(ValueError, match="read from --data-dir, which is not set"):
        load_corpus(CorpusSpec("text"), "train")
    with pytest.raises(FileNotFoundError, match=r"--data-dir=.*nowhere is not a directory"):
        load_corpus(CorpusSpec("tsv", data_dir=str(tmp_path / "nowhere")), "train")
    with pytest.raises(FileNotFoundError, match=r"--data-dir=.* has no dev.tsv: pass --data-dir"):
        load_corpus(CorpusSpec("tsv", data_dir=str(tmp_path)), "dev")
    with pytest.raises(ValueError, match=r"two aligned plain-text files .* got \[.*pairs.txt"):
        CorpusSpec.from_files({"train": [tmp_path / "pairs.txt"]})
    with pytest.raises(ValueError, match="splits train, valid and test, not 'dev'"):
        load_corpus(CorpusSpec("numbers", numbers=(2, 1, 1)), "dev")


def test_a_mistaken_dataset_kind_names_the_format_whose_files_exist(tmp_path):
    (tmp_path / "train.tsv").write_text("one\teins\n", encoding="utf-8")
    (tmp_path / "valid.jsonl").write_text('{"en": "one", "de": "eins"}\n', encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"has no train.en or train.de: .*holds train.tsv: pass --dataset tsv"):
        load_corpus(CorpusSpec("text", data_dir=str(tmp_path)), "train")
    with pytest.raises(FileNotFoundError, match=r"holds valid.jsonl: pass --dataset jsonl"):
        load_corpus(CorpusSpec("tsv", data_dir=str(tmp_path)), "valid")
    with pytest.raises(
        FileNotFoundError,
        match=r"has no test.tsv: pass --data-dir with the tsv files of the corpus, named <split>.tsv$",
    ):
        CorpusSpec("tsv", data_dir=str(tmp_path)).check(["train", "test"])  # nothing to suggest for test


def test_corpus_spec_from_options_is_each_commands_corpus(tmp_path):
    """train's --dataset/--data-dir and --train-src..., finetune's --train/--eval, --hf-dataset and --numbers, and
    train-tokenizer's --hf-dataset and --numbers all map onto the one constructor."""
    assert CorpusSpec.from_options(dataset="tsv", data_dir="d", src_lang="de", tgt_lang="en") == CorpusSpec(
        "tsv", data_dir="d", src_lang="de", tgt_lang="en"
    )
    assert CorpusSpec.from_options(dataset="numbers", numbers=(8, 1, 0), max_number=50) == CorpusSpec(
        "numbers", numbers=(8, 1, 0), max_number=50
    )
    files = {"train": ["a.en", "a.de"], "eval": ["b.tsv"]}
    assert CorpusSpec.from_options(files=files) == CorpusSpec.from_files(files)
    hub = CorpusSpec.from_options(hf_dataset="wmt14", dataset_config="de-en", src_lang="en", tgt_lang="de")
    assert (hub.kind, hub.dataset_config, hub.hub_dataset) == ("hf:wmt14", "de-en", "wmt14")
    with pytest.raises(ValueError, match="--hf-dataset needs --src-lang and --tgt-lang"):
        CorpusSpec.from_options(hf_dataset="wmt14", src_lang="en")
    with pytest.raises(ValueError, match=r"name exactly one corpus.*\['dataset', 'files'\]"):
        CorpusSpec.from_options(dataset="tsv", files=files)
    with pytest.raises(ValueError, match=r"name exactly one corpus.*\[\]"):
        CorpusSpec.from_options()
    with pytest.raises(FileNotFoundError, match=r"no such file: .*b.tsv \(the eval split\)"):
        CorpusSpec.from_options(files={"eval": [tmp_path / "b.tsv"]}).check(["eval"])


def test_a_language_code_the_folder_lacks_names_the_codes_it_holds(tmp_path):
    """Issue 67: ``--src-lang fr`` on a folder of train.en and train.de named only the missing file."""
    for name in ("train.en", "train.de"):
        (tmp_path / name).write_text("one\n", encoding="utf-8")
    with pytest.raises(
        FileNotFoundError, match=r"has no train.fr: .* holds train.<lang> for de, en: pass --src-lang and --tgt-lang"
    ):
        load_corpus(CorpusSpec("text", data_dir=str(tmp_path), src_lang="fr"), "train")
