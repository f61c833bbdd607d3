"""What a run starts from: the corpus splits, the model configuration and the tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from accelerate import Accelerator
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data import (
    Pair,
    Splits,
    load_hf_translation,
    make_numbers_task,
    read_jsonl,
    read_parallel_text,
    read_tsv,
)
from ..tokenization import train_tokenizer
from .options import TrainingConfig

# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------


def load_splits(config: TrainingConfig) -> Splits:
    """The train, validation and test pairs of ``config.dataset``, as stored.

    ``text`` reads ``<split>.<src_lang>`` and ``<split>.<tgt_lang>`` from ``data_dir``, ``tsv`` reads
    ``<split>.tsv`` (source in the first column, target in the second), ``jsonl`` reads ``<split>.jsonl`` (keys
    ``src_lang`` and ``tgt_lang``), and ``hf:<name>`` loads the splits of a Hugging Face dataset.
    """
    if config.train_src is not None or config.train_tgt is not None:
        return _read_aligned_files(config)
    split_names = (config.train_split, config.valid_split, config.test_split)
    if config.dataset == "numbers":
        return make_numbers_task(config.num_train, config.num_valid, config.num_test, max_number=config.max_number)
    if config.dataset.startswith("hf:"):
        name = config.dataset.removeprefix("hf:")
        return Splits(
            *(
                load_hf_translation(
                    name, config.dataset_config, split=split, src_lang=config.src_lang, tgt_lang=config.tgt_lang
                )
                for split in split_names
            )
        )
    if config.data_dir is None:
        raise ValueError(f"--dataset={config.dataset} reads its files from --data-dir, which is not set")
    data_dir = Path(config.data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"--data-dir={config.data_dir} is not a directory")
    if config.dataset == "text":
        return Splits(
            *(
                read_parallel_text(data_dir / f"{split}.{config.src_lang}", data_dir / f"{split}.{config.tgt_lang}")
                for split in split_names
            )
        )
    if config.dataset == "tsv":
        return Splits(*(read_tsv(data_dir / f"{split}.tsv") for split in split_names))
    return Splits(
        *(read_jsonl(data_dir / f"{split}.jsonl", config.src_lang, config.tgt_lang) for split in split_names)
    )


def _read_aligned_files(config: TrainingConfig) -> Splits:
    """The splits from ``--train-src/--train-tgt``, ``--valid-src/--valid-tgt`` and ``--test-src/--test-tgt``."""
    splits = []
    for split in ("train", "valid", "test"):
        src, tgt = getattr(config, f"{split}_src"), getattr(config, f"{split}_tgt")
        if src is None or tgt is None:
            raise ValueError(
                f"aligned files need all of --train-src/--train-tgt, --valid-src/--valid-tgt and --test-src/--test-tgt; "
                f"got --{split}-src={src!r} and --{split}-tgt={tgt!r}"
            )
        splits.append(read_parallel_text(src, tgt))
    return Splits(*splits)


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


def _prepare_tokenizer(
    config: TrainingConfig, train_pairs: Sequence[Pair], accelerator: Accelerator, directory: Path
) -> PreTrainedTokenizerBase:
    """The run's tokenizer, saved in `directory`: loaded from there when resuming, else from ``config.tokenizer``
    or trained on the training pairs (on the main process, which saves it for the others)."""
    with accelerator.main_process_first():
        if directory.is_dir():
            return AutoTokenizer.from_pretrained(directory)
        if config.tokenizer is not None:
            if not Path(config.tokenizer).is_dir():
                raise FileNotFoundError(f"--tokenizer={config.tokenizer} is not a directory")
            tokenizer = AutoTokenizer.from_pretrained(config.tokenizer)
        else:
            tokenizer = train_tokenizer([text for pair in train_pairs for text in pair], config.vocab_size)
        if accelerator.is_main_process:
            tokenizer.save_pretrained(directory)
    return tokenizer
