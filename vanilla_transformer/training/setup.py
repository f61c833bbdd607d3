"""What a run starts from: the corpus splits, the model configuration and the tokenizer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from accelerate import Accelerator
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..data import CorpusSpec, Pair, Splits
from ..data import load_splits as load_corpus_splits
from ..tokenization import train_tokenizer
from .options import TrainingConfig

# --------------------------------------------------------------------------------------------------------------------
# Data, tokenizer, model
# --------------------------------------------------------------------------------------------------------------------


def corpus_spec(config: TrainingConfig) -> CorpusSpec:
    """The run's corpus: ``--dataset`` and ``--data-dir``, or the aligned files of ``--train-src`` and the rest."""
    common = dict(
        data_dir=config.data_dir,
        dataset_config=config.dataset_config,
        src_lang=config.src_lang,
        tgt_lang=config.tgt_lang,
        numbers=(config.num_train, config.num_valid, config.num_test),
        max_number=config.max_number,
    )
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


def load_splits(config: TrainingConfig) -> Splits:
    """The train, validation and test pairs of the run's corpus (`corpus_spec`), as stored."""
    spec = corpus_spec(config)
    names = ("train", "valid", "test") if spec.files else (config.train_split, config.valid_split, config.test_split)
    return load_corpus_splits(spec, names)


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
