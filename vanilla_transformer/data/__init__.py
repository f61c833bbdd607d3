"""Parallel corpora: loading and cleaning (`corpora`), the built-in numbers task (`numbers`), token-based batching
and collation (`batching`), the tokenized corpus on disk (`cache`).

A corpus is named by a :class:`CorpusSpec` (`spec`), the one way every command names its data, and read with
:func:`load_corpus` or :func:`load_splits`; the result is a list of ``(source, target)`` string pairs, as stored.
:func:`clean_pairs` then normalizes whitespace and filters. Typical use, for a corpus that fits in memory::

    pairs = load_corpus(CorpusSpec("text", data_dir="data/multi30k"), "train")  # train.en, train.de
    pairs, stats = clean_pairs(pairs, max_length=256, tokenizer=tokenizer)
    examples = tokenize_pairs(pairs, tokenizer)
    sampler = TokenBatchSampler(example_lengths(examples), max_tokens=50_000)
    loader = DataLoader(examples, batch_sampler=sampler, collate_fn=TranslationCollator(tokenizer.pad_token_id))
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...

At any size (training does this), stream the pairs into a token cache on disk once and memory-map it::

    corpus = build_token_cache(iter_parallel_text("train.en", "train.de"), tokenizer, "cache/wmt", max_length=256)
    sampler = TokenBatchSampler(corpus.lengths, max_tokens=50_000)
    for indices in sampler:
        batch = corpus.collate(indices, tokenizer.pad_token_id)

The paper batches by tokens, not sentences: "each training batch contained a set
of sentence pairs containing approximately 25000 source tokens and 25000 target
tokens". :class:`TokenBatchSampler` bounds the padded source plus target tokens
of a batch, so ``max_tokens=50_000`` matches that recipe.
"""

from .batching import (
    IGNORE_INDEX,
    Example,
    TokenBatchSampler,
    TranslationCollator,
    example_lengths,
    hilbert_index,
    padding_fraction,
    tokenize_pairs,
)
from .cache import TokenCorpus, build_token_cache
from .corpora import (
    MAX_LINE_BYTES,
    CleaningStats,
    Pair,
    Splits,
    clean_pairs,
    clean_text,
    decode_lines,
    iter_lines,
    iter_parallel_text,
    line_text,
    load_hf_translation,
    load_hf_translation_arrow,
    read_jsonl,
    read_lines,
    read_parallel_text,
    read_text_lines,
    read_tsv,
    split_lines,
)
from .numbers import make_numbers_task
from .spec import DATA_DIR_VARIABLE, CorpusSpec, load_corpus, load_splits, shared_data_dir, split_files

__all__ = [
    "DATA_DIR_VARIABLE",
    "IGNORE_INDEX",
    "MAX_LINE_BYTES",
    "CleaningStats",
    "CorpusSpec",
    "Example",
    "Pair",
    "Splits",
    "TokenBatchSampler",
    "TokenCorpus",
    "TranslationCollator",
    "build_token_cache",
    "clean_pairs",
    "clean_text",
    "example_lengths",
    "hilbert_index",
    "iter_lines",
    "iter_parallel_text",
    "line_text",
    "load_corpus",
    "load_hf_translation",
    "load_hf_translation_arrow",
    "load_splits",
    "make_numbers_task",
    "padding_fraction",
    "read_jsonl",
    "decode_lines",
    "read_lines",
    "read_parallel_text",
    "read_text_lines",
    "read_tsv",
    "shared_data_dir",
    "split_files",
    "split_lines",
    "tokenize_pairs",
]
