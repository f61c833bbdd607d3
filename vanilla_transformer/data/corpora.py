"""Parallel corpora: loading (text, TSV, JSONL, Hugging Face datasets) and cleaning."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from ..extras import import_optional
from ..parsing import Range, environment_number
from ..reading import parse_json

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

Pair = tuple[str, str]
"""A (source sentence, target sentence) pair."""


# --------------------------------------------------------------------------- loading


def read_parallel_text(src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str]) -> list[Pair]:
    """Read aligned plain-text files: line N of one translates line N of the other.

    Lines are split on ``"\\n"`` only, so other line-break characters inside a
    sentence cannot shift the alignment. A UTF-8 byte-order mark is dropped.

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: If the files have different numbers of lines.
    """
    sources, targets = read_lines(src_path), read_lines(tgt_path)
    if len(sources) != len(targets):
        raise ValueError(
            f"parallel files differ in length: {src_path} has {len(sources)} lines, "
            f"{tgt_path} has {len(targets)} lines"
        )
    return list(zip(sources, targets, strict=True))


def iter_parallel_text(
    src_path: str | os.PathLike[str], tgt_path: str | os.PathLike[str], chunk_size: int = 50_000
) -> Iterator[list[Pair]]:
    """Stream aligned plain-text files as chunks of at most `chunk_size` pairs, read line by line: the streaming
    form of :func:`read_parallel_text`, with the same splitting on ``"\\n"`` only and the same checks (the length
    check when the shorter file ends).

    Raises:
        FileNotFoundError: If a file does not exist.
        ValueError: If the files have different numbers of lines.
    """
    for path in (src_path, tgt_path):
        _check_regular_file(path)
    with open(src_path, "rb") as sources, open(tgt_path, "rb") as targets:
        chunk: list[Pair] = []
        for count, (src, tgt) in enumerate(itertools.zip_longest(_decoded_lines(sources), _decoded_lines(targets))):
            if src is None or tgt is None:
                counts = [count + sum(1 for _ in _decoded_lines(f)) + 1 for f in (sources, targets)]
                counts[0 if src is None else 1] -= 1
                raise ValueError(
                    f"parallel files differ in length: {src_path} has {counts[0]} lines, "
                    f"{tgt_path} has {counts[1]} lines"
                )
            chunk.append((src, tgt))
            if len(chunk) == chunk_size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk


def iter_lines(path: str | os.PathLike[str]) -> Iterator[str]:
    """The lines of a UTF-8 file as `read_lines` reads them, streamed (for files too large to hold in memory).

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If a line is not UTF-8, naming the file and the line.
    """
    _check_regular_file(path)
    with open(path, "rb") as file:
        yield from _decoded_lines(file)


def _decoded_lines(file: BinaryIO) -> Iterator[str]:
    """The lines of a binary file split on ``b"\\n"`` only, decoded as UTF-8, a leading byte-order mark dropped.

    Raises:
        ValueError: If a line is not UTF-8, naming the file and the line (as `read_lines`).
    """
    first = file.tell() == 0
    for number, line in enumerate(iter(lambda: file.readline(MAX_LINE_BYTES + 1), b""), start=1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            raise ValueError(_long_line(file.name, number))
        try:
            text = line.decode("utf-8-sig" if first and number == 1 else "utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"{file.name}:{number}: not UTF-8 text ({error.reason})") from error
        yield line_text(text)


def read_tsv(path: str | os.PathLike[str], src_column: int | str = 0, tgt_column: int | str = 1) -> list[Pair]:
    """Read pairs from a tab-separated file.

    Args:
        path: The file; fields hold no tabs and no quoting.
        src_column: Source column, by position or by name. With names, the
            first line is a header naming the columns.
        tgt_column: Target column, like ``src_column``.

    Blank lines are skipped. Every row must have as many fields as the header
    (or, without a header, the first row).

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If a column is missing or a row has the wrong number of fields.
    """
    rows = [(number, line.split("\t")) for number, line in enumerate(read_lines(path), start=1) if line.strip()]
    if not rows:
        return []
    if isinstance(src_column, str) and isinstance(tgt_column, str):
        (_, header), rows = rows[0], rows[1:]
        src_index, tgt_index = (_column_index(header, column, path) for column in (src_column, tgt_column))
        width = len(header)
    elif isinstance(src_column, int) and isinstance(tgt_column, int):
        src_index, tgt_index = src_column, tgt_column
        width = len(rows[0][1])
        if not (0 <= src_index < width and 0 <= tgt_index < width):
            raise ValueError(
                f"{path} has {width} columns; src_column={src_column} or tgt_column={tgt_column} is out of range"
            )
    else:
        raise ValueError(
            f"src_column and tgt_column must both be names or both be positions, "
            f"got src_column={src_column!r}, tgt_column={tgt_column!r}"
        )
    for number, fields in rows:
        if len(fields) != width:
            raise ValueError(f"{path}:{number}: expected {width} tab-separated fields, found {len(fields)}")
    return [(fields[src_index], fields[tgt_index]) for _, fields in rows]


def read_jsonl(path: str | os.PathLike[str], src_key: str, tgt_key: str) -> list[Pair]:
    """Read pairs from a JSON Lines file.

    Each line holds one object, either flat (``{"en": ..., "de": ...}``) or in
    the layout of Hugging Face translation datasets
    (``{"translation": {"en": ..., "de": ...}}``); a ``"translation"`` object
    takes precedence. Blank lines are skipped.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If a line is not valid JSON or lacks a key, or a value is not a string.
    """
    pairs = []
    for number, line in enumerate(read_lines(path), start=1):
        if not line.strip():
            continue
        record = parse_json(line, str(path), number)  # one line naming the line: a lone surrogate, deep nesting too
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{number}: expected a JSON object, found {type(record).__name__}")
        fields = record["translation"] if isinstance(record.get("translation"), dict) else record
        pair = []
        for key in (src_key, tgt_key):
            if key not in fields:
                raise ValueError(f"{path}:{number}: missing key {key!r}; keys are {sorted(fields)}")
            if not isinstance(fields[key], str):
                raise ValueError(f"{path}:{number}: value of {key!r} is {type(fields[key]).__name__}, not a string")
            pair.append(fields[key])
        pairs.append((pair[0], pair[1]))
    return pairs


def load_hf_translation(
    name: str,
    config: str | None = None,
    *,
    split: str = "train",
    src_lang: str,
    tgt_lang: str,
    **load_kwargs: object,
) -> list[Pair]:
    """Load pairs from a Hugging Face dataset with :func:`datasets.load_dataset`.

    Handles the standard layout of translation datasets, one ``translation``
    column of ``{language: sentence}`` (``wmt14``, ``iwslt2017``, ...), and
    flat datasets with one column per language code.

    Args:
        name: Dataset name on the Hub (``"wmt14"``) or a local dataset directory.
        config: Configuration, usually the language pair (``"de-en"``).
        split: Split to load.
        src_lang: Source language code (``"en"``).
        tgt_lang: Target language code (``"de"``).
        **load_kwargs: Passed on to :func:`datasets.load_dataset` (``cache_dir``,
            ``revision``, ...); the result must be a map-style dataset, so not
            ``streaming=True``.

    Raises:
        ValueError: If the dataset, configuration or split cannot be found, or
            a language is missing from it.
    """
    dataset = load_hf_translation_arrow(name, config, split=split, src_lang=src_lang, tgt_lang=tgt_lang, **load_kwargs)
    return list(zip(dataset["source"], dataset["target"], strict=True))


def load_hf_translation_arrow(
    name: str,
    config: str | None = None,
    *,
    split: str = "train",
    src_lang: str,
    tgt_lang: str,
    **load_kwargs: object,
) -> datasets.Dataset:
    """Like :func:`load_hf_translation`, but the pairs stay an Arrow dataset (memory-mapped, not read into Python
    lists), with the two columns ``source`` and ``target``; iterate it with ``dataset.iter(batch_size)``."""
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang must differ, both are {src_lang!r}")
    datasets = import_optional("datasets", "train", "loading a Hugging Face dataset")
    offline = getattr(datasets.config, "HF_HUB_OFFLINE", False) or getattr(
        datasets.config, "HF_DATASETS_OFFLINE", False
    )
    if not offline and not Path(name).exists():
        _check_hub_reachable(name)
    try:
        dataset = datasets.load_dataset(name, config, split=split, **load_kwargs)
    except ConnectionError as error:  # offline, and not in the datasets cache
        raise _hub_unavailable(name, str(error)) from error
    except (FileNotFoundError, ValueError) as error:
        raise ValueError(f"cannot load dataset {name!r} (config={config!r}, split={split!r}): {error}") from error
    flat = dataset.flatten()  # "translation" becomes "translation.de", "translation.en"
    columns = []
    for lang in (src_lang, tgt_lang):
        column = next((c for c in (f"translation.{lang}", lang) if c in flat.column_names), None)
        if column is None:
            raise ValueError(
                f"dataset {name!r} (config={config!r}) has no language {lang!r}; columns are {flat.column_names}"
            )
        columns.append(column)
    return flat.select_columns(columns).rename_columns({columns[0]: "source", columns[1]: "target"})


HUB_PROBE_TIMEOUT = 5.0
"""Seconds `_check_hub_reachable` waits for the Hub before a dataset is loaded from it."""


def _check_hub_reachable(name: str) -> None:
    """One request to the Hub (``HF_ENDPOINT``, through the proxies the environment names), with a short timeout and
    no retries, before `datasets.load_dataset` would spend half a minute retrying a Hub it cannot reach. Only a
    failure to connect counts: an HTTP answer (an unknown or private dataset) and a TLS error (a certificate bundle
    of the user's) are left to `datasets`.

    Raises:
        ValueError: `_hub_unavailable`, if no connection to the Hub can be made.
    """
    import ssl
    import urllib.error
    import urllib.request

    from huggingface_hub import constants

    request = urllib.request.Request(f"{constants.ENDPOINT}/api/datasets/{name}", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=HUB_PROBE_TIMEOUT).close()
    except urllib.error.HTTPError:
        return
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        if isinstance(reason, ssl.SSLError):
            return
        raise _hub_unavailable(name, f"{constants.ENDPOINT} cannot be reached ({reason})") from None


def _hub_unavailable(name: str, reason: str) -> ValueError:
    """The one-line error of a Hub dataset that cannot be loaded here, saying how to bring the corpus in instead."""
    return ValueError(
        f"cannot load the Hugging Face dataset {name!r}: {reason.splitlines()[0] if reason else 'offline'}. Without "
        "the Hub, give the corpus as local files: --dataset text --data-dir DIR, with DIR/<split>.<lang> for each "
        "split (the wmt14 presets read train, newstest2013 and newstest2014); or copy a datasets cache made where "
        "the Hub is reachable and set HF_DATASETS_OFFLINE=1 (docs/training.md, WMT14 without the Hub)"
    )


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    """Read a UTF-8 file and split it on ``"\\n"`` only (`split_lines`); a UTF-8 byte-order mark is dropped.

    Raises:
        FileNotFoundError: If the file does not exist.
        ValueError: If it is not UTF-8, naming the file and the line.
    """
    path = Path(path)
    _check_regular_file(path)
    return read_text_lines(path, str(path))


MAX_LINE_BYTES = 1 << 20
"""The longest line (1 MiB) any reader of text lines takes: a sentence is far shorter (a model's 1,024 positions of
byte-level BPE tokens hold some kilobytes), and a longer line means binary data or a file without line breaks
(``/dev/zero``), which would otherwise be read until memory runs out."""

INPUT_LIMIT_ENV = "VANILLA_TRANSFORMER_MAX_INPUT_BYTES"
"""Overrides `input_limit` (bytes): the most any input of lines may hold."""

_LINE_OVERHEAD = 64
"""Bytes of memory a line costs beyond its text, as a Python string in a list: counted against `input_limit`."""


def input_limit() -> int:
    """The most bytes (text plus `_LINE_OVERHEAD` per line) an input of lines may hold: a quarter of the memory this
    machine has available (`environment.available_memory`), or `INPUT_LIMIT_ENV`."""
    limit = environment_number(INPUT_LIMIT_ENV, Range(int, 1))
    if limit is not None:
        return limit
    from ..environment import available_memory  # torch: not for a command's --help

    return max(available_memory() // 4, 64 << 20)


def _too_large(name: str, limit: int) -> ValueError:
    return ValueError(
        f"{name} holds more than {limit:,} bytes of lines, the most read into memory here (a quarter of the memory "
        f"available; {INPUT_LIMIT_ENV} sets it): split it into smaller files"
    )


def _long_line(name: str, number: int) -> ValueError:
    return ValueError(
        f"{name}:{number}: a line longer than {MAX_LINE_BYTES:,} bytes, the longest line read: it is not text of "
        "one sentence per line"
    )


def _check_regular_file(path: str | os.PathLike[str]) -> None:
    """FileNotFoundError if nothing is at `path`; a ValueError if it is not a regular file (a folder, a device)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file: {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a regular file (a folder, a device or a pipe): give a file of lines")


def read_text_lines(source: str | os.PathLike[str] | BinaryIO, name: str) -> list[str]:
    """The lines of UTF-8 text (`decode_lines`) from a file, a pipe, a FIFO, a device or an open binary stream, read
    with bounds: a line over `MAX_LINE_BYTES` or an input over `input_limit` is refused with a ValueError naming `name`
    and the limit, before it is read whole (a regular file's size is checked before anything is read)."""
    limit = input_limit()
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.is_file() and path.stat().st_size > limit:
            raise _too_large(name, limit)
        with open(path, "rb") as stream:
            return decode_lines(read_bounded(stream, name, limit), name)
    return decode_lines(read_bounded(source, name, limit), name)


def read_bounded(stream: BinaryIO, name: str, limit: int) -> bytes:
    """Everything `stream` holds, read in blocks, refused as soon as a line passes `MAX_LINE_BYTES` or the lines
    (with `_LINE_OVERHEAD` each) pass `limit` bytes."""
    blocks, total, lines, current = [], 0, 0, 0
    while block := stream.read(1 << 20):
        blocks.append(block)
        total += len(block)
        pieces = block.split(b"\n")
        for number, piece in enumerate(pieces):
            current = current + len(piece) if number == 0 else len(piece)
            if current > MAX_LINE_BYTES + 1:  # + 1: a CRLF line end
                raise _long_line(name, lines + number + 1)
        lines += len(pieces) - 1
        if total + _LINE_OVERHEAD * lines > limit:
            raise _too_large(name, limit)
    return b"".join(blocks)


def decode_lines(data: bytes, name: str) -> list[str]:
    """The lines (`split_lines`) of UTF-8 `data`, a byte-order mark dropped, each line's text as `line_text` makes
    it; else a ValueError naming `name` (a file, or ``<stdin>``) and the line: ``name:line: not UTF-8 text``.

    The one reader of text lines: files, pipes and standard input all go through it (or, streamed, `iter_parallel_text`
    through `line_text`), so a BOM, a CRLF file or a stray carriage return reads the same from each."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise ValueError(f"{name}:{line}: not UTF-8 text ({error.reason} at byte {error.start})") from error
    return [line_text(line) for line in split_lines(text)]


def line_text(line: str) -> str:
    """A line as read, without its line end: a CRLF line end counts as ``"\\n"`` (a Windows file reads as a Unix one:
    no ``"\\r"`` reaches a model or a score), and a carriage return inside a line is read as a space, as
    `clean_text` treats it, rather than as a line break that would shift every later line against its translation.
    """
    return line.removesuffix("\n").removesuffix("\r").replace("\r", " ")


def split_lines(text: str) -> list[str]:
    """The lines of `text`, split on ``"\\n"`` only, without a final empty line.

    Not `str.splitlines`, which also splits on U+2028, U+0085, form feeds and more: one such character inside a
    sentence would shift every later line against its translation.
    """
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


def _column_index(header: list[str], column: str, path: str | os.PathLike[str]) -> int:
    if column not in header:
        raise ValueError(f"{path} has no column {column!r}; the header has {header}")
    return header.index(column)


# --------------------------------------------------------------------------- cleaning


@dataclass(frozen=True)
class CleaningStats:
    """How many pairs :func:`clean_pairs` kept and dropped, and why."""

    total: int
    kept: int
    dropped_empty: int
    dropped_too_long: int

    @property
    def dropped(self) -> int:
        return self.dropped_empty + self.dropped_too_long

    def __str__(self) -> str:
        return (
            f"kept {self.kept} of {self.total} pairs; dropped {self.dropped_empty} with an empty side "
            f"and {self.dropped_too_long} too long"
        )


def clean_text(text: str) -> str:
    """Strip a sentence and collapse each run of whitespace (spaces, tabs,
    no-break spaces, ...) into one space."""
    return " ".join(text.split())


def clean_pairs(
    pairs: Iterable[Pair],
    *,
    max_length: int | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
) -> tuple[list[Pair], CleaningStats]:
    """Normalize whitespace with :func:`clean_text` and drop unusable pairs.

    A pair is dropped when either side is empty after cleaning, or when either
    side is longer than ``max_length``.

    Args:
        pairs: The pairs.
        max_length: Maximum length of each side; ``None`` keeps all lengths.
        tokenizer: Measure lengths in tokens of this tokenizer, counting the
            special tokens it adds (``</s>``), which is the length the model
            sees. Without it, lengths are in characters.

    Returns:
        The kept pairs, cleaned and in their original order, and the counts,
        which are also logged.
    """
    if max_length is not None and max_length < 1:
        raise ValueError(f"max_length must be positive or None, got max_length={max_length}")
    cleaned = [(clean_text(src), clean_text(tgt)) for src, tgt in pairs]
    non_empty = [(src, tgt) for src, tgt in cleaned if src and tgt]
    kept = non_empty
    if max_length is not None and non_empty:
        sources, targets = zip(*non_empty, strict=True)
        src_lengths, tgt_lengths = _lengths(list(sources), tokenizer), _lengths(list(targets), tokenizer)
        kept = [
            pair
            for pair, src_length, tgt_length in zip(non_empty, src_lengths, tgt_lengths, strict=True)
            if src_length <= max_length and tgt_length <= max_length
        ]
    stats = CleaningStats(
        total=len(cleaned),
        kept=len(kept),
        dropped_empty=len(cleaned) - len(non_empty),
        dropped_too_long=len(non_empty) - len(kept),
    )
    logger.info("cleaning: %s", stats)
    return kept, stats


def _lengths(texts: list[str], tokenizer: PreTrainedTokenizerBase | None) -> list[int]:
    if tokenizer is None:
        return [len(text) for text in texts]
    return [len(ids) for ids in tokenizer(texts)["input_ids"]]


# --------------------------------------------------------------------------- numbers task


@dataclass(frozen=True)
class Splits:
    """Train, validation and test pairs."""

    train: list[Pair]
    valid: list[Pair]
    test: list[Pair]
