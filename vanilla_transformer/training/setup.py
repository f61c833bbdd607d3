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
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data import (
    DATA_DIR_VARIABLE,
    CorpusSpec,
    Pair,
    Splits,
    clean_text,
    iter_parallel_text,
    load_corpus,
    load_hf_translation_arrow,
    split_files,
)
from ..data import load_splits as load_corpus_splits
from ..data.cache import TokenCorpus, build_token_cache, cache_key, default_cache_dir, tokenizer_fingerprint
from ..data.spec import corpus_data_dir
from ..model_checks import check_declared_sizes
from ..tokenization import check_tokenizer_matches_config, train_tokenizer
from .config import DataConfig, ModelConfig, TrainingConfig
from .logs import get_logger
from .preflight import check_training_pairs
from .presets import PRESET_DATA_FOLDERS
from .run_dir import RunLayout

logger = get_logger(__name__)

SPLITS = ("train", "valid", "test")
"""The roles of a run's splits; ``--<role>-split`` names each one's stored split."""

# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------


def corpus_spec(data: DataConfig) -> CorpusSpec:
    """The run's corpus: ``--dataset`` and ``--data-dir``, or the aligned files of ``--train-src`` and the rest."""
    languages = {"src_lang": data.src_lang, "tgt_lang": data.tgt_lang}
    if data.train_src is None and data.train_tgt is None:
        return CorpusSpec.from_options(
            dataset=data.dataset,
            data_dir=data.data_dir,
            dataset_config=data.dataset_config,
            numbers=(data.num_train, data.num_valid, data.num_test),
            max_number=data.max_number,
            **languages,
        )
    files = {}
    for split in ("train", "valid", "test"):
        src, tgt = getattr(data, f"{split}_src"), getattr(data, f"{split}_tgt")
        if src is None or tgt is None:
            raise ValueError(
                f"aligned files need all of --train-src/--train-tgt, --valid-src/--valid-tgt and --test-src/--test-tgt; "
                f"got --{split}-src={src!r} and --{split}-tgt={tgt!r}"
            )
        files[split] = (src, tgt)
    return CorpusSpec.from_options(files=files, **languages)


@dataclass(frozen=True)
class RunCorpus:
    """The run's corpus, built once (`RunCorpus.of`): its `CorpusSpec` and the stored names of its ``train``,
    ``valid`` and ``test`` splits (``--<split>-split``, unless files name them)."""

    spec: CorpusSpec
    names: dict[str, str]

    @classmethod
    def of(cls, data: DataConfig, preset: str | None = None) -> RunCorpus:
        """The corpus of the data settings of a run of `preset` (`corpus_spec`).

        Raises:
            ValueError: If a file corpus has no ``--data-dir``: for a preset's corpus, naming both ``--data-dir`` and
                the environment variable `DATA_DIR_VARIABLE` that gives its default.
        """
        spec = corpus_spec(data)
        file_corpus = spec.kind != "numbers" and spec.hub_dataset is None
        if file_corpus and not spec.files and spec.data_dir is None:
            folder = PRESET_DATA_FOLDERS.get(preset or "")
            if folder is not None:
                raise ValueError(
                    f"--preset {preset} reads {folder}/ from --data-dir, which is not set: pass --data-dir "
                    f"with its files, or set the environment variable {DATA_DIR_VARIABLE} to the folder that holds "
                    f"{folder}/"
                )
        names = {split: split if spec.files else getattr(data, f"{split}_split") for split in SPLITS}
        return cls(spec, names)

    def load(self, split: str) -> list[Pair]:
        """The pairs of one split, ``train``, ``valid`` or ``test``, as stored, in a list."""
        return load_corpus(self.spec, self.names[split])

    def splits(self) -> Splits:
        """The train, validation and test pairs, as stored, in lists (training streams its training split instead,
        `train_chunks`)."""
        return load_corpus_splits(self.spec, [self.names[split] for split in SPLITS])

    def train_chunks(self, chunk_size: int = 20_000) -> tuple[dict[str, Any], Callable[[], Iterator]]:
        """The training split as a stream: what identifies it (for cache keys) and a function that returns a fresh
        iterator over its pairs in chunks of at most `chunk_size`.

        Plain-text files are read line by line and a Hugging Face dataset batch by batch from its Arrow files, so the
        corpus is never held in memory; the identity of files is their path, size and modification time, that of a
        Hugging Face dataset its fingerprint. TSV and JSON Lines files (small corpora) and the numbers task are read
        whole.
        """
        spec, name = self.spec, self.names["train"]
        if spec.hub_dataset is not None:
            dataset = load_hf_translation_arrow(
                spec.hub_dataset, spec.dataset_config, split=name, src_lang=spec.src_lang, tgt_lang=spec.tgt_lang
            )
            batches = lambda: (list(zip(b["source"], b["target"], strict=True)) for b in dataset.iter(chunk_size))  # noqa: E731
            return {"hf_dataset": dataset._fingerprint}, batches
        if spec.kind == "numbers":
            pairs = load_corpus(spec, name)
            identity: dict[str, Any] = {"numbers": [*spec.numbers, spec.max_number]}
        else:
            if not spec.files:
                corpus_data_dir(spec)  # a missing folder is named by its option
            files = [str(path) for path in split_files(spec, name)]
            if len(files) == 2:  # aligned plain-text files, streamed
                lines = lambda: iter_parallel_text(*files, chunk_size)  # noqa: E731
                return {"files": [_file_identity(path) for path in files]}, lines
            pairs = load_corpus(spec, name)  # one TSV or JSON Lines file; a missing one is named with its option
            identity = {"files": [_file_identity(path) for path in files]}
        return identity, lambda: (pairs[i : i + chunk_size] for i in range(0, len(pairs), chunk_size))


def load_splits(config: TrainingConfig) -> Splits:
    """The train, validation and test pairs of the corpus of `config`, as stored, in lists."""
    return RunCorpus.of(config.data, config.preset).splits()


def _file_identity(path: str | Path) -> list[Any]:
    if not Path(path).is_file():
        raise FileNotFoundError(f"no such file: {path}")
    stat = Path(path).stat()
    return [str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns]


def build_model_config(model: ModelConfig) -> VanillaTransformerConfig:
    """The model configuration: the ``--model`` preset of Table 3, with the overrides of the model settings; a model
    that memory could not hold to train is refused, naming the setting (`check_declared_sizes`)."""
    overrides = {
        "d_model": model.d_model,
        "encoder_layers": model.layers,
        "decoder_layers": model.layers,
        "encoder_attention_heads": model.heads,
        "decoder_attention_heads": model.heads,
        "encoder_ffn_dim": model.ffn_dim,
        "decoder_ffn_dim": model.ffn_dim,
        "dropout": model.dropout,
    }
    given = {name: value for name, value in overrides.items() if value is not None}
    config = VanillaTransformerConfig.from_preset(model.preset, vocab_size=model.vocab_size, **given)
    check_declared_sizes(  # before any data is read or weight allocated: weights, gradients and Adam's two moments
        config,
        f"the model settings (--model {model.preset}, --layers, --d-model, --ffn-dim, --vocab-size; on --resume, the "
        f"run's {RunLayout('.').settings.name})",
        bytes_per_parameter=16,
        fix="choose a smaller model, or train on a machine with more memory",
    )
    return config


def prepare_data(
    config: TrainingConfig,
    accelerator: Accelerator,
    corpus: RunCorpus,
    model_config: VanillaTransformerConfig,
    resumed_tokenizer: Path | None,
) -> tuple[PreTrainedTokenizerBase, TokenCorpus, list[Pair], list[Pair]]:
    """The tokenizer, the tokenized training split and the validation and test pairs of a run's corpus.

    The main process goes first and does the work: it trains the tokenizer on a stream of the cleaned pairs (or
    finds it in the data cache), then cleans, tokenizes and filters the training split into the token cache
    (`data.cache`), unless a cache for the same corpus, tokenizer and cleaning settings exists. The other processes
    wait, then open the same files. Reruns and resumed runs open the cache too. On several machines the run
    directory and ``--data-cache-dir`` belong on a filesystem they all share (checkpoints need it as well).

    Args:
        resumed_tokenizer: The tokenizer directory of the run being resumed, which the run keeps using.
    """
    corpus.spec.check(list(corpus.names.values()))  # every split's files, before the tokenizer is trained
    cache_root = Path(config.data.data_cache_dir) if config.data.data_cache_dir else default_cache_dir()
    # First the main process; then, on each other machine, its local main process (which finds the cache there if
    # the machines share --data-cache-dir, else builds its own); then all the others, which open it.
    with accelerator.main_process_first(), accelerator.local_main_process_first():
        identity, chunks = corpus.train_chunks()
        if not next(iter(chunks()), None):
            check_training_pairs(config.data, [])  # an empty training split, named before anything is trained on it
        tokenizer = _prepare_tokenizer(config, identity, chunks, resumed_tokenizer, cache_root)
        check_tokenizer_matches_config(tokenizer, model_config)
        key = {"corpus": identity, "tokenizer": tokenizer_fingerprint(tokenizer), "max_length": config.data.max_length}
        directory = cache_root / f"tokens-{cache_key(**key)}"
        if (directory / "meta.json").is_file():
            train = TokenCorpus(directory)
        else:
            logger.info(f"tokenizing the training pairs into {directory}", main_process_only=True)
            train = build_token_cache(chunks(), tokenizer, directory, max_length=config.data.max_length, key=key)
            release_freed_memory()
        valid, test = corpus.load("valid"), corpus.load("test")
    logger.info(f"training pairs: {train.stats}", main_process_only=True)
    check_training_pairs(config.data, range(train.stats.total), range(train.stats.kept))
    return tokenizer, train, valid, test


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
    """The run's tokenizer: the resumed run's, else ``config.data.tokenizer``, else the data cache's for this corpus and
    vocabulary size, else trained on a stream of the cleaned training pairs and saved in the cache."""
    if resumed_tokenizer is not None:
        return AutoTokenizer.from_pretrained(resumed_tokenizer, trust_remote_code=False)
    if config.data.tokenizer is not None:
        if not Path(config.data.tokenizer).is_dir():
            raise FileNotFoundError(f"--tokenizer={config.data.tokenizer} is not a directory")
        return AutoTokenizer.from_pretrained(config.data.tokenizer, trust_remote_code=False)
    limit = config.data.tokenizer_train_pairs
    lowercase = config.data.numbers_task  # number words are lower-case: capitals read as the same words
    key = cache_key(
        corpus=identity, vocab_size=config.model.vocab_size, pairs=limit, **({"lowercase": True} if lowercase else {})
    )
    cached = cache_root / f"tokenizer-{key}"
    if not cached.is_dir():
        logger.info(f"training the tokenizer; it goes to {cached}", main_process_only=True)
        texts = _cleaned_texts(chunks, limit)
        first = next(texts, None)
        if first is None:  # every pair has an empty side
            check_training_pairs(config.data, range(sum(len(chunk) for chunk in chunks())), [])
        trained = train_tokenizer(itertools.chain([first], texts), config.model.vocab_size, lowercase=lowercase)
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
    return AutoTokenizer.from_pretrained(cached, trust_remote_code=False)
