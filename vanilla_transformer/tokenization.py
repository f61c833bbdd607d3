"""Shared source/target byte-level BPE tokenizer.

The paper uses one byte-pair-encoding vocabulary shared by source and target
(about 37,000 tokens for WMT14 English-German). :func:`train_tokenizer` trains
such a vocabulary with the `tokenizers` library and wraps it as a
:class:`transformers.PreTrainedTokenizerFast`:

* Byte-level BPE (GPT-2 style): every string is representable, so ``<unk>`` is
  never produced, and ``decode(encode(text))`` gives back ``text`` exactly
  (spacing, case and Unicode included). There is no normalizer: text is not
  NFC-normalized or otherwise changed; but a vocabulary of lower-case words
  only (``lowercase=True``, the numbers task's) lower-cases its input, so that
  ``Three Hundred`` reads as the ``three hundred`` it was trained on.
* The special tokens have fixed ids, :data:`PAD_ID` to :data:`EOS_ID`, which
  are the defaults of the model configuration.
* Every encoded sequence ends in ``</s>`` and has no ``<s>``:
  ``tokenizer(sources, text_target=targets)`` returns ``input_ids`` and
  ``attention_mask`` for the sources and ``labels`` (target ids + ``</s>``).
  The model builds its decoder input by shifting ``labels`` right behind the
  decoder start token ``<s>``.
* Special-token strings in the input text (say a literal ``"</s>"``) are
  encoded as ordinary text, so they too survive a round trip.

Save with ``tokenizer.save_pretrained(directory)`` and reload with
``transformers.AutoTokenizer.from_pretrained(directory)``; the special ids are
preserved.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator
from typing import Protocol

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from .data.corpora import iter_lines

PAD_TOKEN = "<pad>"
UNK_TOKEN = "<unk>"
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"

PAD_ID = 0
UNK_ID = 1
BOS_ID = 2
"""Id of ``<s>``, also the decoder start token."""
EOS_ID = 3

SPECIAL_TOKENS = (PAD_TOKEN, UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)
"""The special tokens in id order: ``SPECIAL_TOKENS[i]`` has id ``i``."""

MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(pre_tokenizers.ByteLevel.alphabet())
"""The special tokens plus the 256 byte symbols of byte-level BPE."""


class TokenIdConfig(Protocol):
    """The configuration attributes that must agree with the tokenizer."""

    vocab_size: int
    pad_token_id: int | None
    bos_token_id: int | None
    eos_token_id: int | None
    decoder_start_token_id: int | None


_ID_FIELDS = (
    ("pad_token_id", "pad_token_id"),
    ("bos_token_id", "bos_token_id"),
    ("eos_token_id", "eos_token_id"),
)
"""Pairs of (config attribute, tokenizer attribute) that must be equal."""


def train_tokenizer(
    texts_or_files: Iterable[str | os.PathLike[str]],
    vocab_size: int,
    *,
    min_frequency: int = 2,
    show_progress: bool = False,
    lowercase: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a shared byte-level BPE tokenizer.

    Args:
        texts_or_files: Training data. Each ``str`` item is training text (pass
            source and target sentences together for a shared vocabulary);
            each :class:`os.PathLike` item (for example a :class:`pathlib.Path`)
            is a UTF-8 file read one line at a time.
        vocab_size: Size of the vocabulary, special tokens included. It is an
            upper bound: a small corpus may yield fewer tokens.
        min_frequency: Minimum count of a pair of symbols for it to be merged.
        show_progress: Show the `tokenizers` training progress bar.
        lowercase: Lower-case every text before it is split, in training and after (a ``Lowercase`` normalizer
            saved with the tokenizer): for a task whose texts are all lower-case, such as the numbers task, so
            that capitals read as the words the model knows instead of unseen byte sequences.

    Returns:
        The trained tokenizer, with the special tokens at ids
        :data:`PAD_ID`, :data:`UNK_ID`, :data:`BOS_ID` and :data:`EOS_ID`.

    Raises:
        ValueError: If ``vocab_size`` is below :data:`MIN_VOCAB_SIZE`,
            ``min_frequency`` is below 1, or there is no training text.
        FileNotFoundError: If a file does not exist.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size must be at least {MIN_VOCAB_SIZE} ({len(SPECIAL_TOKENS)} special tokens "
            f"+ 256 byte symbols), got vocab_size={vocab_size}"
        )
    if min_frequency < 1:
        raise ValueError(f"min_frequency must be at least 1, got min_frequency={min_frequency}")

    backend = Tokenizer(models.BPE())
    if lowercase:
        backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    texts = _iter_texts(texts_or_files)
    first = next(texts, None)
    if first is None:
        raise ValueError("texts_or_files holds no training text")
    # The trainer gives the special tokens the first ids, in list order.
    backend.train_from_iterator(itertools.chain([first], texts), trainer=trainer)
    backend.post_processor = processors.TemplateProcessing(
        single=f"$A {EOS_TOKEN}",
        pair=f"$A {EOS_TOKEN} $B {EOS_TOKEN}",
        special_tokens=[(EOS_TOKEN, EOS_ID)],
    )

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        unk_token=UNK_TOKEN,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        clean_up_tokenization_spaces=False,
        split_special_tokens=True,
        model_input_names=["input_ids", "attention_mask"],
    )


def check_tokenizer_matches_config(tokenizer: PreTrainedTokenizerBase, config: TokenIdConfig) -> None:
    """Check that a model configuration fits a tokenizer.

    ``config.vocab_size`` may exceed ``len(tokenizer)`` (for example when it is
    rounded up), but not the other way round. The pad, bos and eos ids must be
    equal, and the decoder must start with the tokenizer's bos token.

    Args:
        tokenizer: The tokenizer.
        config: Any object with the attributes of :class:`TokenIdConfig`, such
            as the model's configuration.

    Raises:
        ValueError: Naming every field that does not match, with both values.
    """
    problems = []
    if len(tokenizer) > config.vocab_size:
        problems.append(f"len(tokenizer)={len(tokenizer)} exceeds config.vocab_size={config.vocab_size}")
    for config_field, tokenizer_field in _ID_FIELDS:
        config_value = getattr(config, config_field)
        tokenizer_value = getattr(tokenizer, tokenizer_field)
        if config_value != tokenizer_value:
            problems.append(f"config.{config_field}={config_value} but tokenizer.{tokenizer_field}={tokenizer_value}")
    # The decoder starts from <s>, or, for a tokenizer without one (MarianMT's convention), from <pad>.
    start_field = "bos_token_id" if tokenizer.bos_token_id is not None else "pad_token_id"
    if config.decoder_start_token_id != getattr(tokenizer, start_field):
        problems.append(
            f"config.decoder_start_token_id={config.decoder_start_token_id} but "
            f"tokenizer.{start_field}={getattr(tokenizer, start_field)}"
        )
    if problems:
        raise ValueError("tokenizer does not match the model config: " + "; ".join(problems))


def _iter_texts(texts_or_files: Iterable[str | os.PathLike[str]]) -> Iterator[str]:
    """Yield the training texts: ``str`` items as they are, files line by line."""
    for item in texts_or_files:
        if isinstance(item, str):
            yield item
        else:
            yield from iter_lines(item)  # the one line reader: CRLF, BOM and bad UTF-8 as everywhere
