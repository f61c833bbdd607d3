"""The one way to name a corpus: a `CorpusSpec`, read by `load_corpus` (one split) and `load_splits` (three).

Every command names its data with one: ``vanilla-transformer train`` (``--dataset``, ``--data-dir``,
``--train-src``...), ``finetune`` (``--train``/``--eval``, ``--hf-dataset``, ``--numbers``), ``train-tokenizer``
(files, ``--hf-dataset``, ``--numbers``), and the benchmarks (``scripts/bench/workloads.load_corpus``).

Kinds (`CorpusSpec.kind`):

* ``numbers``: the built-in task (`make_numbers_task`), splits ``train``, ``valid`` and ``test`` of the sizes in
  ``numbers``;
* ``text``: ``<data_dir>/<split>.<src_lang>`` and ``<split>.<tgt_lang>``, aligned line by line;
* ``tsv``: ``<data_dir>/<split>.tsv``, source in the first column, target in the second;
* ``jsonl``: ``<data_dir>/<split>.jsonl``, objects with the keys ``src_lang`` and ``tgt_lang``;
* ``hf:<name>``: the split of a Hugging Face dataset (configuration ``dataset_config``).

``files`` names a split's files directly instead (`CorpusSpec.from_files`): two aligned text files, one ``.tsv``
or one ``.jsonl`` file. `split_files` is the one place that names a split's files.

The corpora the presets and benchmarks read (``multi30k/``, ``wmt14_en_de/``) lie in one folder, named by the
environment variable `DATA_DIR_VARIABLE` (`shared_data_dir`), never by a path relative to the source tree.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .corpora import Pair, Splits, load_hf_translation, read_jsonl, read_parallel_text, read_tsv
from .numbers import make_numbers_task

KINDS = ("numbers", "text", "tsv", "jsonl", "hf:<name>")

DATA_DIR_VARIABLE = "VANILLA_TRANSFORMER_DATA"
"""The environment variable naming the folder that holds the named corpora (``multi30k/``, ``wmt14_en_de/``)."""


def shared_data_dir(name: str) -> Path | None:
    """The folder of corpus `name` in ``$VANILLA_TRANSFORMER_DATA`` (`DATA_DIR_VARIABLE`); None when it is not set."""
    root = os.environ.get(DATA_DIR_VARIABLE)
    return Path(root) / name if root else None


@dataclass(frozen=True)
class CorpusSpec:
    """Where a parallel corpus is and how to read it; see the module's documentation for the kinds."""

    kind: str
    data_dir: str | None = None
    dataset_config: str | None = None
    src_lang: str = "en"
    tgt_lang: str = "de"
    files: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Files of a split by split name, overriding ``data_dir``: (source, target) text files, or one .tsv/.jsonl."""
    numbers: tuple[int, int, int] = (20_000, 500, 500)
    """Numbers task: the sizes of the train, valid and test splits."""
    max_number: int = 99_999
    """Numbers task: the numbers are drawn from 1..max_number."""
    option: str = "--data-dir"
    """The command-line option that sets ``data_dir``, named in errors."""

    def __post_init__(self) -> None:
        if not (self.kind in KINDS[:-1] or (self.kind.startswith("hf:") and len(self.kind) > 3)):
            raise ValueError(f"unknown corpus kind {self.kind!r}; choose one of {', '.join(KINDS)}")

    @property
    def hub_dataset(self) -> str | None:
        """The Hugging Face dataset of an ``hf:<name>`` corpus."""
        return self.kind.removeprefix("hf:") if self.kind.startswith("hf:") else None

    @classmethod
    def from_files(cls, files: Mapping[str, Sequence[str | os.PathLike[str]]], **kwargs: object) -> CorpusSpec:
        """A corpus given as files per split, e.g. ``{"train": ["train.en", "train.de"], "valid": ["dev.tsv"]}``.

        Raises:
            ValueError: If a split's paths are neither two files, nor one ``.tsv`` or ``.jsonl`` file.
        """
        kinds = {split: _files_kind(paths) for split, paths in files.items()}
        kind = next(iter(kinds.values()), "text")
        as_strings = {split: tuple(str(path) for path in paths) for split, paths in files.items()}
        return cls(kind=kind, files=as_strings, **kwargs)

    @classmethod
    def from_options(
        cls,
        *,
        dataset: str | None = None,
        files: Mapping[str, Sequence[str | os.PathLike[str]]] | None = None,
        hf_dataset: str | None = None,
        data_dir: str | None = None,
        dataset_config: str | None = None,
        numbers: Sequence[int] | None = None,
        max_number: int | None = None,
        src_lang: str | None = None,
        tgt_lang: str | None = None,
    ) -> CorpusSpec:
        """The corpus that a command's options name, the one mapping of ``train``'s, ``finetune``'s and
        ``train-tokenizer``'s options: exactly one of `dataset` (a kind: ``numbers``, ``text``, ``tsv``, ``jsonl``
        with `data_dir`, or ``hf:<name>``), `files` (split name to files, `from_files`) or `hf_dataset` (a Hugging
        Face dataset, with `dataset_config`, `src_lang` and `tgt_lang`). `numbers` (train, valid and test sizes)
        and `max_number` set the numbers task; languages not given are ``en`` and ``de``.

        Raises:
            ValueError: If none or several corpora are named, or a Hugging Face dataset lacks its languages.
        """
        named = [name for name, value in (("dataset", dataset), ("files", files), ("hf_dataset", hf_dataset)) if value]
        if len(named) != 1:
            raise ValueError(f"name exactly one corpus (a dataset, files or a Hugging Face dataset), got {named}")
        languages = {key: value for key, value in (("src_lang", src_lang), ("tgt_lang", tgt_lang)) if value}
        if hf_dataset is not None:
            if len(languages) < 2:
                raise ValueError("--hf-dataset needs --src-lang and --tgt-lang")
            dataset = f"hf:{hf_dataset}"
        task = {"numbers": tuple(numbers)} if numbers is not None else {}
        task.update({"max_number": max_number} if max_number is not None else {})
        if files:
            return cls.from_files(files, **languages, **task)
        return cls(kind=dataset, data_dir=data_dir, dataset_config=dataset_config, **languages, **task)

    def check(self, splits: Sequence[str]) -> None:
        """Before any work: the files of each of `splits` exist (nothing to check for the numbers task and Hugging
        Face datasets).

        Raises:
            FileNotFoundError: Naming the option and the missing file, and the ``--dataset`` whose files the folder
                holds, if another format's do.
        """
        if self.kind == "numbers" and not self.files or self.hub_dataset is not None:
            return
        for split in splits:
            if split not in self.files:
                corpus_data_dir(self)
            missing = [path for path in split_files(self, split) if not path.is_file()]
            if missing and split in self.files:
                raise FileNotFoundError(f"no such file: {missing[0]} (the {split} split)")
            if missing:
                raise FileNotFoundError(_missing_files_message(self, split, missing))


def load_corpus(spec: CorpusSpec, split: str) -> list[Pair]:
    """The pairs of one split of `spec`, as stored (clean them with `clean_pairs`).

    Raises:
        FileNotFoundError: If a file or the data directory is missing; the message names ``spec.option``.
        ValueError: If the split or a language is missing from a dataset, or a file is malformed.
    """
    if split in spec.files:
        return _read_files(spec.files[split], spec)
    if spec.kind == "numbers":
        splits = make_numbers_task(*spec.numbers, max_number=spec.max_number)
        if split not in ("train", "valid", "test"):
            raise ValueError(f"the numbers task has the splits train, valid and test, not {split!r}")
        return getattr(splits, split)
    if spec.hub_dataset is not None:
        return load_hf_translation(
            spec.hub_dataset, spec.dataset_config, split=split, src_lang=spec.src_lang, tgt_lang=spec.tgt_lang
        )
    spec.check([split])
    return _read_files(tuple(str(path) for path in split_files(spec, split)), spec)


def split_files(spec: CorpusSpec, split: str) -> tuple[Path, ...]:
    """The files that hold `split` of a file corpus: those `spec.files` gives, else in ``data_dir``
    ``<split>.<src_lang>`` and ``<split>.<tgt_lang>`` (text), ``<split>.tsv`` or ``<split>.jsonl``. Not checked.

    Raises:
        ValueError: For the numbers task and Hugging Face datasets, which have no files, or without ``data_dir``.
    """
    if split in spec.files:
        return tuple(Path(path) for path in spec.files[split])
    if spec.kind == "numbers" or spec.hub_dataset is not None:
        raise ValueError(f"a {spec.kind} corpus has no files")
    names = {"text": [f"{split}.{spec.src_lang}", f"{split}.{spec.tgt_lang}"], "tsv": [f"{split}.tsv"]}
    return tuple(Path(_data_dir_option(spec)) / name for name in names.get(spec.kind, [f"{split}.jsonl"]))


def load_splits(spec: CorpusSpec, names: Sequence[str] = ("train", "valid", "test")) -> Splits:
    """The train, validation and test pairs of `spec`, read from the splits `names` (in that order)."""
    if spec.kind == "numbers" and not spec.files:
        return make_numbers_task(*spec.numbers, max_number=spec.max_number)
    return Splits(*(load_corpus(spec, name) for name in names))


def corpus_data_dir(spec: CorpusSpec) -> Path:
    """``spec.data_dir``, checked; the errors name the option that sets it."""
    data_dir = Path(_data_dir_option(spec))
    if not data_dir.is_dir():
        raise FileNotFoundError(
            f"{spec.option}={spec.data_dir} is not a directory: pass {spec.option} with the corpus's files"
        )
    return data_dir


def _missing_files_message(spec: CorpusSpec, split: str, missing: Sequence[Path]) -> str:
    """What is missing, and the ``--dataset`` whose files for `split` the folder holds instead, if any."""
    message = (
        f"{spec.option}={spec.data_dir} has no {' or '.join(path.name for path in missing)}: pass {spec.option} with "
        f"the {spec.kind} files of the corpus, named <split>.{'<lang>' if spec.kind == 'text' else spec.kind}"
    )
    held = _split_languages(Path(spec.data_dir), split) if spec.kind == "text" and not spec.files else []
    if held:  # a language code the folder does not hold (--src-lang fr where it holds en and de)
        return f"{message}. The folder holds {split}.<lang> for {', '.join(held)}: pass --src-lang and --tgt-lang among them"
    for kind in ("text", "tsv", "jsonl"):
        found = split_files(replace(spec, kind=kind, files={}), split)
        if kind != spec.kind and all(path.is_file() for path in found):
            names = " and ".join(path.name for path in found)
            return f"{message}. The folder holds {names}: pass --dataset {kind}"
    return message


def _split_languages(data_dir: Path, split: str) -> list[str]:
    """The language codes of the ``<split>.<lang>`` plain-text files in `data_dir` (not tsv or jsonl)."""
    suffixes = {path.name[len(split) + 1 :] for path in data_dir.glob(f"{split}.*") if path.is_file()}
    return sorted(code for code in suffixes if code and "." not in code and code not in ("tsv", "jsonl"))


def _data_dir_option(spec: CorpusSpec) -> str:
    if spec.data_dir is None:
        raise ValueError(f"a {spec.kind} corpus is read from {spec.option}, which is not set")
    return spec.data_dir


def _files_kind(paths: Sequence[str | os.PathLike[str]]) -> str:
    if len(paths) == 2:
        return "text"
    if len(paths) == 1 and Path(paths[0]).suffix in (".tsv", ".jsonl"):
        return Path(paths[0]).suffix[1:]
    raise ValueError(
        f"a split's files are two aligned plain-text files (source, target) or one .tsv or .jsonl file, "
        f"got {[str(path) for path in paths]}"
    )


def _read_files(paths: tuple[str, ...], spec: CorpusSpec) -> list[Pair]:
    kind = _files_kind(paths)
    if kind == "text":
        return read_parallel_text(*paths)
    if kind == "tsv":
        return read_tsv(paths[0])
    return read_jsonl(paths[0], spec.src_lang, spec.tgt_lang)


__all__ = [
    "DATA_DIR_VARIABLE",
    "KINDS",
    "CorpusSpec",
    "corpus_data_dir",
    "load_corpus",
    "load_splits",
    "shared_data_dir",
    "split_files",
]
