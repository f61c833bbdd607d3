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

from __future__ import annotations

from ..lazy_exports import lazy_exports

_EXPORTS: dict[str, tuple[str, str]] = {
    "IGNORE_INDEX": ("batching", "IGNORE_INDEX"),
    "Example": ("batching", "Example"),
    "TokenBatchSampler": ("batching", "TokenBatchSampler"),
    "TranslationCollator": ("batching", "TranslationCollator"),
    "example_lengths": ("batching", "example_lengths"),
    "hilbert_index": ("batching", "hilbert_index"),
    "padding_fraction": ("batching", "padding_fraction"),
    "tokenize_pairs": ("batching", "tokenize_pairs"),
    "TokenCorpus": ("cache", "TokenCorpus"),
    "build_token_cache": ("cache", "build_token_cache"),
    "MAX_LINE_BYTES": ("corpora", "MAX_LINE_BYTES"),
    "CleaningStats": ("corpora", "CleaningStats"),
    "Pair": ("corpora", "Pair"),
    "Splits": ("corpora", "Splits"),
    "clean_pairs": ("corpora", "clean_pairs"),
    "clean_text": ("corpora", "clean_text"),
    "decode_lines": ("corpora", "decode_lines"),
    "iter_lines": ("corpora", "iter_lines"),
    "iter_parallel_text": ("corpora", "iter_parallel_text"),
    "line_text": ("corpora", "line_text"),
    "load_hf_translation": ("corpora", "load_hf_translation"),
    "load_hf_translation_arrow": ("corpora", "load_hf_translation_arrow"),
    "read_jsonl": ("corpora", "read_jsonl"),
    "read_lines": ("corpora", "read_lines"),
    "read_parallel_text": ("corpora", "read_parallel_text"),
    "read_text_lines": ("corpora", "read_text_lines"),
    "read_tsv": ("corpora", "read_tsv"),
    "split_lines": ("corpora", "split_lines"),
    "make_numbers_task": ("numbers", "make_numbers_task"),
    "DATA_DIR_VARIABLE": ("spec", "DATA_DIR_VARIABLE"),
    "CorpusSpec": ("spec", "CorpusSpec"),
    "load_corpus": ("spec", "load_corpus"),
    "load_splits": ("spec", "load_splits"),
    "shared_data_dir": ("spec", "shared_data_dir"),
    "split_files": ("spec", "split_files"),
}
"""Each name of the package: its module and its name there, imported when first used, so that `spec` and `numbers` load
without torch, for the ``--help`` of the commands."""


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

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
