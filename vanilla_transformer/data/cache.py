"""A corpus tokenized once, on disk, memory-mapped by every process and reused by every run (as fairseq-preprocess).

`build_token_cache` streams the pairs in chunks: it cleans them (`clean_text`, empty sides dropped), tokenizes each
chunk with the tokenizer's batch encoding (the Rust `tokenizers` library encodes a batch on all cores), drops pairs
with a side longer than ``max_length`` tokens and appends the ids to flat files. The directory it writes holds, per
side (``source``, ``target``):

* ``<side>.tokens.bin``: every example's ids one after the other (``uint16`` when the vocabulary fits, else
  ``int32``);
* ``<side>.offsets.bin``: ``int64``, where each example starts, plus the end (``len + 1`` entries);

``lengths.npy`` (the ``[n, 2]`` source and target lengths, ``uint16``, for batching)

and ``meta.json`` (the number of pairs, the dtype, the cleaning counts and the key it was built for). The directory
is written under a temporary name and renamed when complete, so a reader never sees half a cache, and two processes
building the same cache at once both end with one complete copy.

`TokenCorpus` opens such a directory as read-only memory maps: the pages are the operating system's page cache,
shared by all processes of a machine, and read from disk as batches touch them, so a process's memory does not grow
with the corpus. Its `lengths` feed `TokenBatchSampler`; `collate` builds padded batches straight from the arrays.

The key of a cache (`cache_key`) is a hash of what determines its contents: the corpus (`corpus` identity, e.g.
file paths, sizes and modification times, or a dataset fingerprint), the tokenizer (a hash of its serialized form)
and the cleaning settings, so a changed input builds a new cache and an unchanged one is reused.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from .batching import IGNORE_INDEX
from .corpora import CleaningStats, Pair, clean_text

logger = logging.getLogger(__name__)

CACHE_VERSION = 1
SIDES = ("source", "target")
CACHE_ENV = "VANILLA_TRANSFORMER_CACHE"


def default_cache_dir() -> Path:
    """``$VANILLA_TRANSFORMER_CACHE``, else ``$XDG_CACHE_HOME/vanilla-transformer`` (``~/.cache/...``)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "vanilla-transformer"


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A hash of everything that decides how `tokenizer` encodes: its ``tokenizer.json`` for a fast tokenizer, else
    the files ``save_pretrained`` writes."""
    digest = hashlib.sha256(type(tokenizer).__name__.encode())
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        digest.update(backend.to_str().encode())
    else:
        with tempfile.TemporaryDirectory() as directory:
            tokenizer.save_pretrained(directory)
            for path in sorted(Path(directory).iterdir()):
                digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def cache_key(**parts: Any) -> str:
    """A short hash of ``parts`` (JSON-serializable), with the cache format's version."""
    text = json.dumps({"version": CACHE_VERSION, **parts}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], target: bool) -> list[list[int]]:
    """Batch-encode `texts` as sources or (``text_target``) targets, as the model sees them (with ``</s>``).

    A plain `PreTrainedTokenizerFast` (as `train_tokenizer` makes) encodes sources and targets alike, so its Rust
    backend encodes the batch directly, on all cores, a third faster than through ``tokenizer(...)``; subclasses
    may switch to target mode, so they go through ``tokenizer(text_target=...)``, and so does a tokenizer whose saved
    ``tokenizer.json`` truncates or pads (``tokenizer(...)`` turns both off for each call; the backend would not).
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if type(tokenizer) is PreTrainedTokenizerFast and backend.truncation is None and backend.padding is None:
        return [encoding.ids for encoding in backend.encode_batch(texts)]
    if target:
        return tokenizer(text_target=texts, return_attention_mask=False)["input_ids"]
    return tokenizer(texts, return_attention_mask=False)["input_ids"]


class _SideWriter:
    """Appends the ids of one side to ``<side>.tokens.bin`` and its offsets to ``<side>.offsets.bin``."""

    def __init__(self, directory: Path, side: str, dtype: np.dtype) -> None:
        self.dtype = dtype
        self.tokens = open(directory / f"{side}.tokens.bin", "wb")
        self.offsets = open(directory / f"{side}.offsets.bin", "wb")
        self.end = 0
        self.offsets.write(np.zeros(1, dtype=np.int64).tobytes())

    def append(self, sequences: Sequence[Sequence[int]]) -> None:
        lengths = np.fromiter((len(ids) for ids in sequences), dtype=np.int64, count=len(sequences))
        flat = np.fromiter(itertools.chain.from_iterable(sequences), dtype=self.dtype, count=int(lengths.sum()))
        self.tokens.write(flat.tobytes())
        self.offsets.write((self.end + np.cumsum(lengths)).tobytes())
        self.end += int(lengths.sum())

    def close(self) -> None:
        self.tokens.close()
        self.offsets.close()


def build_token_cache(
    chunks: Iterable[Sequence[Pair]],
    tokenizer: PreTrainedTokenizerBase,
    directory: str | os.PathLike[str],
    *,
    max_length: int | None,
    key: dict[str, Any] | None = None,
) -> TokenCorpus:
    """Clean, tokenize and filter the pairs of `chunks` into a cache directory, atomically; open it.

    Args:
        chunks: The raw pairs, in chunks (each is cleaned and tokenized as one batch).
        tokenizer: Encodes sources with ``tokenizer(texts)`` and targets with ``tokenizer(text_target=texts)``.
        directory: Where the cache goes. If it already exists (built meanwhile by another process) it is kept.
        max_length: Drop pairs with a side longer than this many tokens (``</s>`` included); ``None`` keeps all.
        key: What the cache was built from, recorded in ``meta.json``.

    Returns:
        The cache, opened.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    dtype = np.dtype(np.uint16 if len(tokenizer) <= np.iinfo(np.uint16).max + 1 else np.int32)
    building = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        writers = [_SideWriter(building, side, dtype) for side in SIDES]
        total = kept = empty = too_long = 0
        for chunk in chunks:
            cleaned = [(clean_text(src), clean_text(tgt)) for src, tgt in chunk]
            non_empty = [pair for pair in cleaned if pair[0] and pair[1]]
            total, empty = total + len(cleaned), empty + len(cleaned) - len(non_empty)
            if not non_empty:
                continue
            sources, targets = (list(side) for side in zip(*non_empty, strict=True))
            encoded = [_encode(tokenizer, sources, target=False), _encode(tokenizer, targets, target=True)]
            if max_length is not None:
                keep = [
                    i
                    for i, (s, t) in enumerate(zip(*encoded, strict=True))
                    if len(s) <= max_length and len(t) <= max_length
                ]
                too_long += len(non_empty) - len(keep)
                encoded = [[side[i] for i in keep] for side in encoded]
            kept += len(encoded[0])
            for writer, side in zip(writers, encoded, strict=True):
                writer.append(side)
        for writer in writers:
            writer.close()
        stats = CleaningStats(total=total, kept=kept, dropped_empty=empty, dropped_too_long=too_long)
        _write_meta(building, stats, dtype, len(tokenizer), key)
        logger.debug("cleaning: %s", stats)  # the run logs it, built or read back (training.setup)
        try:
            os.rename(building, directory)
        except OSError:  # another process finished the same cache first
            if not (directory / "meta.json").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return TokenCorpus(directory)


def _write_meta(
    building: Path, stats: CleaningStats, dtype: np.dtype, vocab_size: int, key: dict[str, Any] | None
) -> None:
    """``lengths.npy`` (from the offsets written) and ``meta.json`` of a cache being built."""
    lengths = np.stack([np.diff(np.fromfile(building / f"{side}.offsets.bin", dtype=np.int64)) for side in SIDES], 1)
    np.save(building / "lengths.npy", lengths.astype(np.uint16 if lengths.max(initial=0) < 2**16 else np.int32))
    meta = {
        "version": CACHE_VERSION,
        "pairs": stats.kept,
        "dtype": dtype.name,
        "vocab_size": vocab_size,
        "stats": stats.__dict__,
        "key": key,
    }
    (building / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def save_token_cache(
    examples: Sequence[dict[str, Sequence[int]]], vocab_size: int, directory: str | os.PathLike[str]
) -> TokenCorpus:
    """Examples already tokenized (``input_ids`` and ``labels``, as `tokenize_pairs` makes them) as a token cache in
    the new folder `directory`, kept as they are; opened. For ids that no text gave, e.g. a benchmark's synthetic
    pairs, which `Trainer` batches as it batches a corpus."""
    directory = Path(directory)
    directory.mkdir(parents=True)
    dtype = np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.int32)
    for side, name in zip(SIDES, ("input_ids", "labels"), strict=True):
        writer = _SideWriter(directory, side, dtype)
        writer.append([example[name] for example in examples])
        writer.close()
    stats = CleaningStats(total=len(examples), kept=len(examples), dropped_empty=0, dropped_too_long=0)
    _write_meta(directory, stats, dtype, vocab_size, None)
    return TokenCorpus(directory)


def _memmap(file: Path, dtype: np.dtype) -> np.ndarray:
    """`file` as a read-only array of `dtype`; an empty file as an empty array. Raises a ValueError naming the file if
    its size is not a whole number of items (a cut file)."""
    size = file.stat().st_size
    if size % dtype.itemsize:
        raise ValueError(f"{file.name} has {size} bytes, not a whole number of {dtype.name} ids: it was cut")
    return np.memmap(file, dtype=dtype, mode="r") if size else np.zeros(0, dtype)


class TokenCorpus:
    """A tokenized corpus written by `build_token_cache`, memory-mapped read-only.

    ``corpus[i]`` is the example ``{"input_ids": source ids, "labels": target ids}`` (NumPy arrays);
    ``corpus.lengths`` the ``[n, 2]`` source and target lengths; ``corpus.collate(indices, pad_token_id)`` the
    padded batch of those examples, as `TranslationCollator` would build it.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        meta_path = self.directory / "meta.json"
        if not meta_path.is_file():
            raise FileNotFoundError(f"{self.directory} is not a token cache: it has no meta.json")
        try:
            self._open(meta_path)
        except (ValueError, TypeError, KeyError, OSError, EOFError) as error:
            raise ValueError(
                f"token cache {self.directory} is damaged ({error}): delete that folder, the next run rebuilds it"
            ) from error

    def _open(self, meta_path: Path) -> None:
        """Read meta.json and map the arrays, checking that every file agrees with it (a cut or overwritten file
        fails here, naming the file, not as an index error deep in a batch)."""
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError as error:
            raise ValueError(f"{meta_path} is not JSON: {error}") from error
        if self.meta.get("version") != CACHE_VERSION:
            raise ValueError(f"{meta_path}: version {self.meta.get('version')}, not {CACHE_VERSION}")
        self.stats = CleaningStats(**self.meta["stats"])
        pairs, dtype = int(self.meta["pairs"]), np.dtype(self.meta["dtype"])
        self._tokens, self._offsets = [], []
        for side in SIDES:
            offsets = _memmap(self.directory / f"{side}.offsets.bin", np.dtype(np.int64))
            if len(offsets) != pairs + 1 or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
                raise ValueError(f"{side}.offsets.bin does not hold the {pairs + 1} rising offsets of meta.json")
            tokens = _memmap(self.directory / f"{side}.tokens.bin", dtype)
            if len(tokens) != int(offsets[-1]):
                raise ValueError(f"{side}.tokens.bin holds {len(tokens)} ids, its offsets {int(offsets[-1])}")
            self._tokens.append(tokens)
            self._offsets.append(offsets)
        try:
            lengths = self.lengths
        except (ValueError, OSError, EOFError) as error:
            raise ValueError(f"lengths.npy cannot be read: {error}") from error
        if lengths.shape != (pairs, 2):
            raise ValueError(f"lengths.npy has shape {lengths.shape}, not ({pairs}, 2)")
        self.vocab_size = self.meta.get("vocab_size")  # None in caches of older versions

    def __len__(self) -> int:
        return self.meta["pairs"]

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """``[n, 2]``: the source and target length of every example, ``</s>`` included (read from ``lengths.npy``,
        2 bytes per length, rather than from the offsets, 8 bytes)."""
        return np.load(self.directory / "lengths.npy")

    def _check_ids(self, ids: np.ndarray, side: int) -> None:
        """A token id outside the vocabulary (an overwritten tokens file) is named here, not by an embedding."""
        if self.vocab_size is not None and ids.size and int(ids.max()) >= self.vocab_size:
            raise ValueError(
                f"token cache {self.directory} is damaged: {SIDES[side]}.tokens.bin holds id {int(ids.max())}, beyond "
                f"the vocabulary of {self.vocab_size}: delete that folder, the next run rebuilds it"
            )

    def _ids(self, side: int, index: int) -> np.ndarray:
        return self._tokens[side][self._offsets[side][index] : self._offsets[side][index + 1]]

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"example {index} out of range for {len(self)} examples")
        index %= len(self)
        ids = [self._ids(side, index) for side in range(len(SIDES))]
        for side, side_ids in enumerate(ids):
            self._check_ids(side_ids, side)
        return {"input_ids": ids[0].astype(np.int64), "labels": ids[1].astype(np.int64)}

    def collate(self, indices: Sequence[int], pad_token_id: int) -> dict[str, torch.Tensor]:
        """``input_ids`` padded with `pad_token_id`, ``attention_mask``, and ``labels`` padded with -100."""
        batch = {}
        for side, (name, pad) in enumerate((("input_ids", pad_token_id), ("labels", IGNORE_INDEX))):
            rows = [self._ids(side, int(index)) for index in indices]
            lengths = np.array([len(row) for row in rows])
            padded = np.full((len(rows), lengths.max()), pad, dtype=np.int64)
            flat = np.concatenate(rows)
            self._check_ids(flat, side)
            padded[np.arange(padded.shape[1]) < lengths[:, None]] = flat
            batch[name] = torch.from_numpy(padded)
            if side == 0:
                batch["attention_mask"] = torch.from_numpy(
                    (np.arange(padded.shape[1]) < lengths[:, None]).astype(np.int64)
                )
        return batch
