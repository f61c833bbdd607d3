"""The scalable data pipeline: streamed corpora, the token cache, vectorised batching, the micro-batch plan."""

import json
import math
import os
from types import SimpleNamespace

import numpy as np
import pytest
from accelerate import Accelerator

from vanilla_transformer.data import (
    TokenBatchSampler,
    TranslationCollator,
    clean_pairs,
    hilbert_index,
    iter_parallel_text,
    load_hf_translation_arrow,
    padding_fraction,
    read_parallel_text,
    tokenize_pairs,
)
from vanilla_transformer.data.batching import greedy_batch_sizes
from vanilla_transformer.data.cache import TokenCorpus, build_token_cache
from vanilla_transformer.tokenization import train_tokenizer
from vanilla_transformer.training import TrainingConfig, build_model_config, parse_args
from vanilla_transformer.training import setup as data_setup
from vanilla_transformer.training.step import micro_batch_plan

WORDS = [
    "the",
    "a",
    "man",
    "woman",
    "dog",
    "runs",
    "walks",
    "street",
    "red",
    "blue",
    "house",
    "on",
    "in",
    "with",
    "der",
    "die",
    "das",
    "Mann",
    "Frau",
    "Hund",
    "läuft",
]


def write_corpus(directory, count, seed=0):
    """``train``, ``valid`` and ``test`` text files of random sentences, with messy whitespace, empty sides and one
    very long pair, so that cleaning has something to do."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", count), ("valid", 5), ("test", 5)):
        lines = {"en": [], "de": []}
        for i in range(n):
            for rows in lines.values():
                words = rng.choice(WORDS, size=rng.integers(1, 12))
                rows.append("  ".join(words) + (" \t" if i % 7 == 0 else ""))
        lines["de"][1] = "   "  # empty after cleaning
        lines["en"][2] = " ".join(["house"] * 300)  # too long
        for lang, rows in lines.items():
            (directory / f"{split}.{lang}").write_text("".join(row + "\n" for row in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([" ".join(WORDS)] * 20 + WORDS, vocab_size=300)


# --------------------------------------------------------------------------------------------------------------------
# Streaming reader and the token cache
# --------------------------------------------------------------------------------------------------------------------


def test_iter_parallel_text_streams_what_read_parallel_text_reads(tmp_path):
    (tmp_path / "a.en").write_bytes("\ufeffone\r\ntwo\u2028x\nthree".encode())
    (tmp_path / "a.de").write_bytes(b"eins\nzwei\ndrei\n")
    chunks = list(iter_parallel_text(tmp_path / "a.en", tmp_path / "a.de", chunk_size=2))
    assert [len(chunk) for chunk in chunks] == [2, 1]
    assert [pair for chunk in chunks for pair in chunk] == read_parallel_text(tmp_path / "a.en", tmp_path / "a.de")
    (tmp_path / "b.de").write_bytes(b"eins\nzwei\n")
    with pytest.raises(ValueError, match=r"a.en has 3 lines, .*b.de has 2 lines"):
        list(iter_parallel_text(tmp_path / "a.en", tmp_path / "b.de"))
    (tmp_path / "c.de").write_bytes(b"1\n2\n3\n4\n5\n")
    with pytest.raises(ValueError, match=r"a.en has 3 lines, .*c.de has 5 lines"):
        list(iter_parallel_text(tmp_path / "a.en", tmp_path / "c.de", chunk_size=1))


def test_token_cache_holds_what_the_in_memory_pipeline_gives(tmp_path, tokenizer):
    """Cleaned, tokenized and filtered chunk by chunk into memory-mapped files, the corpus must equal
    clean_pairs + tokenize_pairs on the whole list, with the same counts; its batches those of TranslationCollator."""
    write_corpus(tmp_path / "data", 300)
    pairs = read_parallel_text(tmp_path / "data" / "train.en", tmp_path / "data" / "train.de")
    chunks = iter_parallel_text(tmp_path / "data" / "train.en", tmp_path / "data" / "train.de", chunk_size=64)
    corpus = build_token_cache(chunks, tokenizer, tmp_path / "cache" / "tokens", max_length=20)

    kept, stats = clean_pairs(pairs, max_length=20, tokenizer=tokenizer)
    expected = tokenize_pairs(kept, tokenizer)
    assert corpus.stats == stats and stats.dropped_empty >= 1 and stats.dropped_too_long >= 1
    assert len(corpus) == len(expected)
    assert [corpus[i]["input_ids"].tolist() for i in range(len(corpus))] == [e["input_ids"] for e in expected]
    assert [corpus[i]["labels"].tolist() for i in range(len(corpus))] == [e["labels"] for e in expected]
    assert corpus.lengths.tolist() == [[len(e["input_ids"]), len(e["labels"])] for e in expected]
    batch = [5, 0, 17, 3]
    collated = TranslationCollator(tokenizer.pad_token_id)([expected[i] for i in batch])
    ours = corpus.collate(batch, tokenizer.pad_token_id)
    assert list(ours) == list(collated)
    for name in collated:
        assert ours[name].dtype == collated[name].dtype and ours[name].tolist() == collated[name].tolist()
    # Opened again (as another process or a rerun would), it is the same; nothing else was left in the directory.
    again = TokenCorpus(tmp_path / "cache" / "tokens")
    assert again[7]["labels"].tolist() == expected[7]["labels"]
    assert sorted(os.listdir(tmp_path / "cache")) == ["tokens"]


def test_an_interrupted_cache_build_leaves_nothing(tmp_path, tokenizer):
    write_corpus(tmp_path / "data", 50)

    def chunks():
        yield from iter_parallel_text(tmp_path / "data" / "train.en", tmp_path / "data" / "train.de", chunk_size=10)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_token_cache(chunks(), tokenizer, tmp_path / "cache" / "tokens", max_length=None)
    assert os.listdir(tmp_path / "cache") == []
    with pytest.raises(FileNotFoundError, match="not a token cache"):
        TokenCorpus(tmp_path / "cache" / "tokens")


def run_config(tmp_path, *options):
    return parse_args([
        "--dataset", "text", "--data-dir", str(tmp_path / "data"), "--vocab-size", "300", "--max-length", "20",
        "--output-dir", str(tmp_path / "run"), "--data-cache-dir", str(tmp_path / "cache"), *options,
    ])  # fmt: skip


def test_data_is_prepared_once_and_rebuilt_when_its_key_changes(tmp_path, monkeypatch):
    """A rerun (new run directory) reuses the tokenizer and the token cache; a changed corpus file or cleaning
    setting builds a new cache; a resumed run's tokenizer is the run's."""
    write_corpus(tmp_path / "data", 200)
    builds, trainings = [], []
    real_build, real_train = data_setup.build_token_cache, data_setup.train_tokenizer
    monkeypatch.setattr(data_setup, "build_token_cache", lambda *a, **k: builds.append(1) or real_build(*a, **k))
    monkeypatch.setattr(data_setup, "train_tokenizer", lambda *a, **k: trainings.append(1) or real_train(*a, **k))
    accelerator = Accelerator(cpu=True)

    def prepare(config):
        corpus = data_setup.RunCorpus.of(config.data)
        _, train, valid, test = data_setup.prepare_data(
            config, accelerator, corpus, build_model_config(config.model), None
        )
        return SimpleNamespace(train=train, valid=valid, test=test)

    first = prepare(run_config(tmp_path))
    assert (builds, trainings) == ([1], [1])
    rerun = prepare(run_config(tmp_path, "--output-dir", str(tmp_path / "run2")))
    assert (builds, trainings) == ([1], [1]) and rerun.train.directory == first.train.directory
    assert [rerun.train[i]["labels"].tolist() for i in range(len(rerun.train))] == [
        first.train[i]["labels"].tolist() for i in range(len(first.train))
    ]
    assert len(first.valid) == 5 and len(first.test) == 5

    prepare(run_config(tmp_path, "--max-length", "10", "--output-dir", str(tmp_path / "run3")))
    assert (builds, trainings) == ([1, 1], [1])  # new cleaning setting: same tokenizer, new token cache
    with (
        open(tmp_path / "data" / "train.en", "a", encoding="utf-8") as appended,
        open(tmp_path / "data" / "train.de", "a", encoding="utf-8") as appended_de,
    ):
        appended.write("one more\n")
        appended_de.write("noch eins\n")
    changed = prepare(run_config(tmp_path, "--output-dir", str(tmp_path / "run4")))
    assert (builds, trainings) == ([1, 1, 1], [1, 1]) and len(changed.train) == len(first.train) + 1


def test_tokenizer_trains_on_an_even_sample_of_the_stream():
    pairs = [(f"s{i}", f"t{i}") for i in range(10)]

    def chunks():
        return iter([pairs[:4], pairs[4:]])

    assert list(data_setup._cleaned_texts(chunks, 5)) == [text for i in (1, 3, 5, 7, 9) for text in pairs[i]]
    assert list(data_setup._cleaned_texts(chunks, 0)) == [text for pair in pairs for text in pair]
    assert list(data_setup._cleaned_texts(chunks, 20)) == [text for pair in pairs for text in pair]


def test_hf_dataset_stays_arrow_and_streams_in_batches(offline, local_hub_dataset, tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.Dataset, "to_dict", lambda *a, **k: pytest.fail("to_dict reads all into memory"))
    monkeypatch.setattr(datasets.Dataset, "to_pandas", lambda *a, **k: pytest.fail("to_pandas reads all"))
    name, cache_dir = str(local_hub_dataset), str(tmp_path / "hf-cache")
    arrow = load_hf_translation_arrow(name, "de-en", src_lang="en", tgt_lang="de", cache_dir=cache_dir)
    assert isinstance(arrow, datasets.Dataset) and arrow.column_names == ["source", "target"]
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    config = TrainingConfig.from_preset("numbers", dataset=f"hf:{name}", dataset_config="de-en")
    identity, chunks = data_setup.RunCorpus.of(config.data).train_chunks(chunk_size=1)
    assert [chunk for chunk in chunks()] == [[("Hello world", "Hallo Welt")], [("The street", "Die Straße")]]
    assert set(identity) == {"hf_dataset"}


# --------------------------------------------------------------------------------------------------------------------
# Batching from the lengths
# --------------------------------------------------------------------------------------------------------------------


def reference_batch_sizes(src, tgt, max_tokens):
    """The greedy cut, one example at a time: a batch grows until one more example would exceed max_tokens."""
    sizes, size, max_src, max_tgt = [], 0, 0, 0
    for s, t in zip(src, tgt, strict=True):
        max_src, max_tgt = max(max_src, s), max(max_tgt, t)
        if size and (size + 1) * (max_src + max_tgt) > max_tokens:
            sizes.append(size)
            size, max_src, max_tgt = 0, s, t
        size += 1
    return [*sizes, size]


@pytest.mark.parametrize(("n", "max_tokens"), [(1, 10), (7, 8), (3000, 300), (20_000, 4096), (5000, 60)])
def test_vectorised_greedy_cut_equals_the_example_by_example_loop(n, max_tokens):
    rng = np.random.default_rng(n)
    src, tgt = rng.integers(1, 30, n), rng.integers(1, 30, n)
    assert greedy_batch_sizes(src, tgt, max_tokens).tolist() == reference_batch_sizes(src, tgt, max_tokens)


@pytest.mark.parametrize(("n", "max_tokens"), [(50_000, 1024), (20_000, 50), (3000, 9)])
def test_greedy_cut_of_sorted_runs_equals_the_example_by_example_loop(n, max_tokens):
    """Sorted lengths come in long runs of equal pairs, as the sampler cuts them; some examples exceed max_tokens."""
    rng = np.random.default_rng(max_tokens)
    lengths = sorted(zip(rng.integers(1, 12, n).tolist(), rng.integers(1, 12, n).tolist(), strict=True))
    src, tgt = (np.array(side) for side in zip(*lengths, strict=True))
    assert greedy_batch_sizes(src, tgt, max_tokens).tolist() == reference_batch_sizes(src, tgt, max_tokens)
    assert greedy_batch_sizes(src[:0], tgt[:0], max_tokens).tolist() == []


def reference_epoch(lengths, max_tokens, seed, epoch):
    """`TokenBatchSampler`'s epoch as its docstring gives it, one example at a time: a random order, sorted (stably)
    by the position of the lengths along the Hilbert curve through the grid of all lengths up to the longest, cut
    greedily, the batches shuffled by the same generator."""
    rng = np.random.default_rng([seed, epoch])
    src, tgt = lengths[:, 0].tolist(), lengths[:, 1].tolist()
    grid = np.meshgrid(np.arange(max(src) + 1), np.arange(max(tgt) + 1), indexing="ij")
    curve = hilbert_index(*grid).tolist()
    order = sorted(rng.permutation(len(src)).tolist(), key=lambda i: curve[src[i]][tgt[i]])
    sizes = reference_batch_sizes([src[i] for i in order], [tgt[i] for i in order], max_tokens)
    ends = np.cumsum(sizes).tolist()
    batches = [order[end - size : end] for size, end in zip(sizes, ends, strict=True)]
    batch_order = np.arange(len(batches))
    rng.shuffle(batch_order)
    return [batches[b] for b in batch_order]


@pytest.mark.parametrize(
    ("n", "longest", "max_tokens"),
    [(20_000, 40, 1024), (3000, 7, 30), (150_000, 400, 900)],  # the last: over 65,536 distinct length pairs
)
def test_sampler_epochs_equal_the_documented_plan(n, longest, max_tokens):
    lengths = np.random.default_rng(n).integers(1, longest + 1, size=(n, 2))
    sampler = TokenBatchSampler(lengths.astype(np.uint16), max_tokens, seed=11)
    for epoch in (0, 3):
        assert sampler.epoch_batches(epoch) == reference_epoch(lengths, max_tokens, 11, epoch)
    unshuffled = TokenBatchSampler(lengths, max_tokens, shuffle=False)
    src, tgt = lengths[:, 0].tolist(), lengths[:, 1].tolist()
    curve = hilbert_index(*np.meshgrid(np.arange(max(src) + 1), np.arange(max(tgt) + 1), indexing="ij")).tolist()
    expected = sorted(range(n), key=lambda i: curve[src[i]][tgt[i]])
    assert [index for batch in unshuffled.epoch_batches(0) for index in batch] == expected


def test_epoch_padding_of_the_sampler_is_that_of_its_batches():
    rng = np.random.default_rng(1)
    lengths = rng.integers(1, 50, size=(3000, 2))
    sampler = TokenBatchSampler(lengths, max_tokens=600, seed=2)
    assert sampler.padding_fraction() == pytest.approx(padding_fraction(sampler.epoch_batches(3), lengths.tolist()))


# --------------------------------------------------------------------------------------------------------------------
# Tokens per step for any number of processes
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("preset", ["wmt14-base", "wmt14-big"])
@pytest.mark.parametrize("processes", [1, 2, 3, 4, 8, 16, 64])
def test_every_process_count_gets_the_presets_tokens_per_step(preset, processes):
    config = parse_args(["--preset", preset])
    max_tokens, grad_accum = micro_batch_plan(config, processes)
    assert 45_000 <= max_tokens * grad_accum * processes <= 55_000  # 50,000 padded tokens, within 10%
    assert 2 * config.data.max_length <= max_tokens <= config.optimization.max_tokens
    assert grad_accum == math.ceil(
        50_000 / processes / config.optimization.max_tokens
    )  # the fewest micro-batches that fit


def test_micro_batch_plan_at_8_gpus_needs_no_flag_and_respects_explicit_settings():
    assert micro_batch_plan(parse_args(["--preset", "wmt14-base"]), 8) == (6250, 1)
    assert micro_batch_plan(parse_args(["--preset", "wmt14-big"]), 1) == (6250, 8)
    assert micro_batch_plan(parse_args(["--preset", "wmt14-base", "--grad-accum", "3"]), 8) == (12_500, 3)
    assert micro_batch_plan(parse_args(["--preset", "multi30k"]), 2) == (4096, 1)  # no --tokens-per-step
    # 256 processes: the share (195 tokens) is below the longest pair (2 x 256), which sets the floor.
    assert micro_batch_plan(parse_args(["--preset", "wmt14-base"]), 256) == (512, 1)


def test_results_record_the_cache_used(tmp_path):
    """The meta file names the key it was built for, so a cache directory can be traced back to its inputs."""
    write_corpus(tmp_path / "data", 40)
    accelerator = Accelerator(cpu=True)
    config = run_config(tmp_path)
    corpus = data_setup.RunCorpus.of(config.data)
    _, train, _, _ = data_setup.prepare_data(config, accelerator, corpus, build_model_config(config.model), None)
    meta = json.loads((train.directory / "meta.json").read_text())
    assert meta["key"]["max_length"] == 20 and meta["key"]["corpus"]["files"][0][0].endswith("train.en")
    assert meta["pairs"] == len(train) == meta["stats"]["kept"]


def test_a_saved_tokenizer_that_truncates_or_pads_does_not_change_the_cache(tmp_path, tokenizer):
    """A tokenizer.json saved with truncation or padding switched on (``tokenizer(..., truncation=True)`` before
    saving leaves it there): the cache holds the ids ``tokenizer(...)`` gives, untruncated and unpadded."""
    from transformers import AutoTokenizer

    write_corpus(tmp_path / "data", 60)
    tokenizer.backend_tokenizer.enable_truncation(max_length=3)
    tokenizer.backend_tokenizer.enable_padding(length=40, pad_id=tokenizer.pad_token_id)
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    saved = AutoTokenizer.from_pretrained(tmp_path / "tokenizer")
    assert saved.backend_tokenizer.truncation is not None  # the setting travelled with the file
    chunks = iter_parallel_text(tmp_path / "data" / "train.en", tmp_path / "data" / "train.de", chunk_size=16)
    corpus = build_token_cache(chunks, saved, tmp_path / "cache" / "tokens", max_length=20)
    pairs = read_parallel_text(tmp_path / "data" / "train.en", tmp_path / "data" / "train.de")
    expected = tokenize_pairs(clean_pairs(pairs, max_length=20, tokenizer=saved)[0], saved)
    assert max(len(e["input_ids"]) for e in expected) > 3
    assert [corpus[i]["input_ids"].tolist() for i in range(len(corpus))] == [e["input_ids"] for e in expected]


def test_examples_saved_as_a_token_cache_read_back_as_they_were(tmp_path):
    """`save_token_cache` (a benchmark's synthetic ids, which no text gave) keeps every example's ids and lengths, in
    order; ids past 65,535 take the wide dtype."""
    from vanilla_transformer.data.cache import save_token_cache

    examples = [{"input_ids": [5, 6, 7, 3], "labels": [8, 3]}, {"input_ids": [70_000, 3], "labels": [9, 10, 11, 3]}]
    corpus = save_token_cache(examples, 70_001, tmp_path / "tokens")
    assert len(corpus) == 2 and corpus.lengths.tolist() == [[4, 2], [2, 4]]
    for index, example in enumerate(examples):
        assert {name: ids.tolist() for name, ids in corpus[index].items()} == example
