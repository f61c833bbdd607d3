"""What a run starts from: the corpus splits, the model configuration and the tokenizer."""

from __future__ import annotations

import ctypes
import itertools
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from accelerate.logging import get_logger
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data import (
    CorpusSpec,
    Pair,
    Splits,
    clean_text,
    iter_parallel_text,
    load_corpus,
    load_hf_translation_arrow,
    tokenize_pairs,
)
from ..data import load_splits as load_corpus_splits
from ..data.cache import TokenCorpus, build_token_cache, cache_key, default_cache_dir, tokenizer_fingerprint
from ..data.spec import corpus_data_dir
from ..tokenization import check_tokenizer_matches_config, train_tokenizer
from .options import TrainingConfig
from .preflight import check_training_pairs

logger = get_logger(__name__)

# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------


def corpus_spec(config: TrainingConfig) -> CorpusSpec:
    """The run's corpus: ``--dataset`` and ``--data-dir``, or the aligned files of ``--train-src`` and the rest."""
    common = {
        "data_dir": config.data_dir,
        "dataset_config": config.dataset_config,
        "src_lang": config.src_lang,
        "tgt_lang": config.tgt_lang,
        "numbers": (config.num_train, config.num_valid, config.num_test),
        "max_number": config.max_number,
    }
    if config.train_src is None and config.train_tgt is None:
        return CorpusSpec(kind=config.dataset, **common)
    files = {}
    for split in ("train", "valid", "test"):
        src, tgt = getattr(config, f"{split}_src"), getattr(config, f"{split}_tgt")
        if src is None or tgt is None:
            raise ValueError(
                f"aligned files need all of --train-src/--train-tgt, --valid-src/--valid-tgt and --test-src/--test-tgt; "
                f"got --{split}-src={src!r} and --{split}-tgt={tgt!r}"
            )
        files[split] = (src, tgt)
    return CorpusSpec.from_files(files, **common)


def _split_name(spec: CorpusSpec, config: TrainingConfig, split: str) -> str:
    """The stored name of split ``train``, ``valid`` or ``test``: ``--<split>-split``, unless files name it."""
    return split if spec.files else getattr(config, f"{split}_split")


def load_splits(config: TrainingConfig) -> Splits:
    """The train, validation and test pairs of the run's corpus (`corpus_spec`), as stored, in lists (training
    streams its training split instead, `train_chunks`)."""
    spec = corpus_spec(config)
    return load_corpus_splits(spec, [_split_name(spec, config, split) for split in ("train", "valid", "test")])


def load_split(config: TrainingConfig, split: str) -> list[Pair]:
    """The pairs of one split, ``train``, ``valid`` or ``test``, as a list."""
    spec = corpus_spec(config)
    return load_corpus(spec, _split_name(spec, config, split))


def train_chunks(config: TrainingConfig, chunk_size: int = 20_000) -> tuple[dict[str, Any], Callable[[], Iterator]]:
    """The training split as a stream: what identifies it (for cache keys) and a function that returns a fresh
    iterator over its pairs in chunks of at most `chunk_size`.

    Plain-text files are read line by line and a Hugging Face dataset batch by batch from its Arrow files, so the
    corpus is never held in memory; the identity of files is their path, size and modification time, that of a
    Hugging Face dataset its fingerprint. TSV and JSON Lines files (small corpora) and the numbers task are read
    whole.
    """
    spec, name = corpus_spec(config), _split_name(corpus_spec(config), config, "train")
    files = spec.files.get("train")
    if files is None and spec.kind == "text":
        files = tuple(str(corpus_data_dir(spec) / f"{name}.{lang}") for lang in (spec.src_lang, spec.tgt_lang))
    if files is not None and len(files) == 2:
        return {"files": [_file_identity(path) for path in files]}, lambda: iter_parallel_text(*files, chunk_size)
    if spec.hub_dataset is not None:
        dataset = load_hf_translation_arrow(
            spec.hub_dataset, spec.dataset_config, split=name, src_lang=spec.src_lang, tgt_lang=spec.tgt_lang
        )
        batches = lambda: (list(zip(b["source"], b["target"], strict=True)) for b in dataset.iter(chunk_size))  # noqa: E731
        return {"hf_dataset": dataset._fingerprint}, batches
    pairs = load_corpus(spec, name)
    if spec.kind == "numbers" and not spec.files:
        identity: dict[str, Any] = {"numbers": [*spec.numbers, spec.max_number]}
    else:
        identity = {
            "files": [_file_identity(path) for path in files or [corpus_data_dir(spec) / f"{name}.{spec.kind}"]]
        }
    return identity, lambda: (pairs[i : i + chunk_size] for i in range(0, len(pairs), chunk_size))


def _file_identity(path: str | Path) -> list[Any]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such file: {path}")
    stat = Path(path).stat()
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def build_model_config(config: TrainingConfig) -> VanillaTransformerConfig:
    """The model configuration: the ``model`` preset of Table 3, with the overrides of `config`."""
    overrides = {
        "d_model": config.d_model,
        "encoder_layers": config.layers,
        "decoder_layers": config.layers,
        "encoder_attention_heads": config.heads,
        "decoder_attention_heads": config.heads,
        "encoder_ffn_dim": config.ffn_dim,
        "decoder_ffn_dim": config.ffn_dim,
        "dropout": config.dropout,
    }
    given = {name: value for name, value in overrides.items() if value is not None}
    return VanillaTransformerConfig.from_preset(config.model, vocab_size=config.vocab_size, **given)


@dataclass
class RunData:
    """The data of a run: its tokenizer, the training corpus (tokenized, memory-mapped) and the evaluation pairs."""

    tokenizer: PreTrainedTokenizerBase
    train: TokenCorpus
    valid: list[Pair]
    test: list[Pair]
    valid_examples: list[dict[str, list[int]]]


def prepare_data(
    config: TrainingConfig,
    accelerator: Accelerator,
    model_config: VanillaTransformerConfig,
    resumed_tokenizer: Path | None,
) -> RunData:
    """The tokenizer, the tokenized training corpus and the evaluation pairs of a run.

    The main process goes first and does the work: it trains the tokenizer on a stream of the cleaned pairs (or
    finds it in the data cache), then cleans, tokenizes and filters the training split into the token cache
    (`data.cache`), unless a cache for the same corpus, tokenizer and cleaning settings exists. The other processes
    wait, then open the same files. Reruns and resumed runs open the cache too. On several machines the run
    directory and ``--data-cache-dir`` belong on a filesystem they all share (checkpoints need it as well).

    Args:
        resumed_tokenizer: The tokenizer directory of the run being resumed, which the run keeps using.
    """
    cache_root = Path(config.data_cache_dir) if config.data_cache_dir else default_cache_dir()
    # First the main process; then, on each other machine, its local main process (which finds the cache there if
    # the machines share --data-cache-dir, else builds its own); then all the others, which open it.
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        identity, chunks = train_chunks(config)
        if not next(iter(chunks()), None):
            check_training_pairs(config, [])  # an empty training split, named before anything is trained on it
        tokenizer = _prepare_tokenizer(config, identity, chunks, resumed_tokenizer, cache_root)
        check_tokenizer_matches_config(tokenizer, model_config)
        key = {"corpus": identity, "tokenizer": tokenizer_fingerprint(tokenizer), "max_length": config.max_length}
        directory = cache_root / f"tokens-{cache_key(**key)}"
        if (directory / "meta.json").is_file():
            corpus = TokenCorpus(directory)
        else:
            logger.info(f"tokenizing the training pairs into {directory}", main_process_only=True)
            corpus = build_token_cache(chunks(), tokenizer, directory, max_length=config.max_length, key=key)
            release_freed_memory()
        valid, test = load_split(config, "valid"), load_split(config, "test")
    logger.info(f"training pairs: {corpus.stats}", main_process_only=True)
    check_training_pairs(config, range(corpus.stats.total), range(corpus.stats.kept))
    return RunData(tokenizer, corpus, valid, test, tokenize_pairs(valid, tokenizer))


def release_freed_memory() -> None:
    """Hand memory that was freed but is still held by the C allocator back to the operating system (glibc's
    ``malloc_trim``; nothing elsewhere), so that a phase's peak does not stay in the process for the next phase."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _cleaned_texts(chunks: Callable[[], Iterator], limit: int | None) -> Iterator[str]:
    """Source and target sentences of the pairs that cleaning keeps (before the length filter), one at a time; of at
    most `limit` pairs, spread evenly over the corpus (which takes one more pass to count it)."""
    total = sum(len(chunk) for chunk in chunks()) if limit else 0
    index = 0
    for chunk in chunks():
        for src, tgt in chunk:
            index += 1
            if limit and total > limit and (index * limit) // total == ((index - 1) * limit) // total:
                continue
            src, tgt = clean_text(src), clean_text(tgt)
            if src and tgt:
                yield src
                yield tgt


def _prepare_tokenizer(
    config: TrainingConfig,
    identity: dict[str, Any],
    chunks: Callable[[], Iterator],
    resumed_tokenizer: Path | None,
    cache_root: Path,
) -> PreTrainedTokenizerBase:
    """The run's tokenizer: the resumed run's, else ``config.tokenizer``, else the data cache's for this corpus and
    vocabulary size, else trained on a stream of the cleaned training pairs and saved in the cache."""
    if resumed_tokenizer is not None:
        return AutoTokenizer.from_pretrained(resumed_tokenizer)
    if config.tokenizer is not None:
        if not Path(config.tokenizer).is_dir():
            raise FileNotFoundError(f"--tokenizer={config.tokenizer} is not a directory")
        return AutoTokenizer.from_pretrained(config.tokenizer)
    limit = config.tokenizer_train_pairs
    cached = cache_root / f"tokenizer-{cache_key(corpus=identity, vocab_size=config.vocab_size, pairs=limit)}"
    if not cached.is_dir():
        logger.info(f"training the tokenizer; it goes to {cached}", main_process_only=True)
        texts = _cleaned_texts(chunks, limit)
        first = next(texts, None)
        if first is None:  # every pair has an empty side
            check_training_pairs(config, range(sum(len(chunk) for chunk in chunks())), [])
        trained = train_tokenizer(itertools.chain([first], texts), config.vocab_size)
        release_freed_memory()  # the trainer's word and pair counts, freed but still held by malloc
        cached.parent.mkdir(parents=True, exist_ok=True)
        building = tempfile.mkdtemp(prefix=f".{cached.name}.", dir=cached.parent)
        try:
            trained.save_pretrained(building)
            os.rename(building, cached)
        except OSError:  # another process saved the same tokenizer first
            if not cached.is_dir():
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return AutoTokenizer.from_pretrained(cached)
