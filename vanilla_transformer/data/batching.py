"""Tokenized pairs, token-based batching grouped by length, and collation."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import Sampler
from transformers import PreTrainedTokenizerBase

from .corpora import Pair

Example = Mapping[str, Sequence[int]]
"""A tokenized pair: ``input_ids`` (source) and ``labels`` (target), both ending in ``</s>``."""

IGNORE_INDEX = -100
"""Label value ignored by the cross-entropy loss; pads ``labels``."""


# --------------------------------------------------------------------------- tokenizing and batching


def tokenize_pairs(pairs: Sequence[Pair], tokenizer: PreTrainedTokenizerBase) -> list[dict[str, list[int]]]:
    """Tokenize pairs into examples with ``input_ids`` (source) and ``labels`` (target)."""
    if not pairs:
        return []
    sources, targets = zip(*pairs, strict=True)
    encoded = tokenizer(list(sources), text_target=list(targets))
    return [
        {"input_ids": input_ids, "labels": labels}
        for input_ids, labels in zip(encoded["input_ids"], encoded["labels"], strict=True)
    ]


def example_lengths(examples: Sequence[Example]) -> list[tuple[int, int]]:
    """The (source, target) token lengths of tokenized examples, for :class:`TokenBatchSampler`."""
    return [(len(example["input_ids"]), len(example["labels"])) for example in examples]


class TokenBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples holding at most ``max_tokens`` padded tokens.

    A batch of ``n`` examples costs ``n * (max source length + max target
    length)`` tokens, the size of its padded source and target tensors; the
    paper's 25,000 source + 25,000 target tokens is ``max_tokens=50_000``.

    Each epoch:

    1. Examples are sorted by their position along a Hilbert curve through
       the plane of (source length, target length); examples with equal
       lengths are put in random order. Runs of this order are compact in
       both lengths at once, where a sort by source length alone leaves
       target lengths spread, and give about 40% less padding (Multi30k,
       ``max_tokens=4096``: 2.8% instead of 4.6%).
    2. The sorted sequence is cut greedily into batches: a batch grows until
       one more example would exceed ``max_tokens``. The sorted lengths are
       the same every epoch, so the number and sizes of the batches are too;
       only which equal-length examples share a batch changes.
    3. The batch order is shuffled.
    4. For ``num_replicas`` processes, the last ``len % num_replicas`` batches
       are dropped, so that every process gets the same number of batches
       (the dropped ones differ from epoch to epoch), and process ``rank``
       takes batches ``rank, rank + num_replicas, ...``.

    With ``shuffle=False`` steps 1 and 3 keep a fixed order (examples of equal
    lengths by index, batches in curve order).

    The batches depend only on ``seed``, the epoch and the lengths. Call
    :meth:`set_epoch` before each epoch, as with
    :class:`torch.utils.data.DistributedSampler`; to resume inside an epoch,
    call ``set_epoch(epoch, start_batch=k)`` to skip the first ``k`` batches.
    :meth:`epoch_batches` returns a whole epoch as a list.

    When a launcher such as Accelerate already shards the batches of the data
    loader over processes, use ``num_replicas=1`` here. Evaluation, where no
    example may be dropped, should also use ``num_replicas=1``.

    Args:
        lengths: ``(source length, target length)`` of each example, in tokens.
        max_tokens: Maximum padded source + target tokens in a batch.
        shuffle: Randomize the batches, as for training.
        seed: Seed of the random order, combined with the epoch.
        num_replicas: Number of processes sharing the data.
        rank: This process's index in ``range(num_replicas)``.

    Raises:
        ValueError: If an argument is out of range, an example alone exceeds
            ``max_tokens``, or there are fewer batches than processes.
    """

    def __init__(
        self,
        lengths: Sequence[tuple[int, int]],
        max_tokens: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
    ) -> None:
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be at least 1, got num_replicas={num_replicas}")
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, {num_replicas}), got rank={rank}")
        if len(lengths) == 0:
            raise ValueError("lengths is empty")
        length_array = np.asarray(lengths)
        if length_array.ndim != 2 or length_array.shape[1] != 2:
            raise ValueError(f"lengths must be (source, target) pairs, got an array of shape {length_array.shape}")
        # 32-bit arrays: an epoch's index arrays are this sampler's memory, 4 bytes per example each.
        self._src_lengths, self._tgt_lengths = (np.ascontiguousarray(side, dtype=np.int32) for side in length_array.T)
        self._index_dtype = np.int32 if len(length_array) < 2**31 else np.int64
        if self._src_lengths.min() < 1 or self._tgt_lengths.min() < 1:
            raise ValueError("every source and target length must be at least 1")
        longest = int((self._src_lengths.astype(np.int64) + self._tgt_lengths).argmax())
        longest_tokens = int(self._src_lengths[longest] + self._tgt_lengths[longest])
        if max_tokens < longest_tokens:
            raise ValueError(
                f"max_tokens={max_tokens} is smaller than example {longest}, whose source and target "
                f"lengths {self._src_lengths[longest]} + {self._tgt_lengths[longest]} = {longest_tokens} tokens; "
                f"raise max_tokens or drop long pairs with clean_pairs(max_length=...)"
            )
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.start_batch = 0
        self._curve_rank = curve_ranks(self._src_lengths, self._tgt_lengths)
        order = self._sorted_order(None)
        self._batch_ends = np.cumsum(self._batch_sizes(order))[:-1]
        self._padding = self._padding_of(order)
        num_batches = len(self._batch_ends) + 1
        if num_batches < num_replicas:
            raise ValueError(
                f"max_tokens={max_tokens} gives {num_batches} batches, fewer than num_replicas={num_replicas}"
            )
        self.batches_per_replica = num_batches // num_replicas

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Select the epoch to iterate, and how many of its batches to skip."""
        if not 0 <= start_batch <= self.batches_per_replica:
            raise ValueError(f"start_batch must be in [0, {self.batches_per_replica}], got start_batch={start_batch}")
        self.epoch = epoch
        self.start_batch = start_batch

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This process's batches of ``epoch``, as lists of example indices."""
        return [batch.tolist() for batch in self._epoch_arrays(epoch, 0)]

    def _epoch_arrays(self, epoch: int, start_batch: int) -> Iterator[np.ndarray]:
        """This process's batches of ``epoch`` from its ``start_batch``-th on, as views of one index array."""
        rng = np.random.default_rng([self.seed, epoch]) if self.shuffle else None
        order = self._sorted_order(rng)
        starts = np.concatenate([[0], self._batch_ends])
        ends = np.append(self._batch_ends, len(order))
        batch_order = np.arange(len(starts))
        if rng is not None:
            rng.shuffle(batch_order)
        kept = batch_order[: self.batches_per_replica * self.num_replicas]
        for batch in kept[self.rank :: self.num_replicas][start_batch:]:
            yield order[starts[batch] : ends[batch]]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._epoch_arrays(self.epoch, self.start_batch):
            yield batch.tolist()

    def __len__(self) -> int:
        return self.batches_per_replica - self.start_batch

    def _sorted_order(self, rng: np.random.Generator | None) -> np.ndarray:
        """Example indices sorted along the curve; equal lengths in random order if ``rng`` is given."""
        n = len(self._curve_rank)
        order = (
            rng.permutation(n).astype(self._index_dtype) if rng is not None else np.arange(n, dtype=self._index_dtype)
        )
        return order[np.argsort(self._curve_rank[order], kind="stable")]

    def _batch_sizes(self, order: np.ndarray) -> np.ndarray:
        """Cut examples, in ``order``, greedily into batches within ``max_tokens``."""
        return greedy_batch_sizes(self._src_lengths[order], self._tgt_lengths[order], self.max_tokens)

    def _padding_of(self, order: np.ndarray) -> float:
        """Share of padding in the batches cut from `order` at ``_batch_ends``."""
        starts = np.concatenate([[0], self._batch_ends])
        src, tgt = self._src_lengths[order], self._tgt_lengths[order]
        sizes = np.diff(np.append(starts, len(order)))
        padded = (sizes * (np.maximum.reduceat(src, starts) + np.maximum.reduceat(tgt, starts))).sum()
        return 1 - float(src.sum() + tgt.sum()) / float(padded)

    def padding_fraction(self) -> float:
        """Share of padding in the padded source and target tensors of an epoch's batches (all processes' batches
        together; the same every epoch, as only examples of equal lengths change places)."""
        return self._padding


def greedy_batch_sizes(src: np.ndarray, tgt: np.ndarray, max_tokens: int) -> np.ndarray:
    """Sizes of the batches that cut the sequence of examples with lengths ``src`` and ``tgt`` greedily: a batch
    grows while ``size * (max source length + max target length)`` stays within ``max_tokens`` (lengths are at
    least 1).

    Computed a run of equal lengths at a time, not an example or a batch at a time: the batch left open takes as
    many of the run's examples as fit, then the run fills batches of its own lengths, all of one size, and the rest
    opens the next batch. Sorted examples (`TokenBatchSampler`'s order along the curve) come in few runs, one per
    distinct pair of lengths, however many examples there are.
    """
    src, tgt = np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)
    if len(src) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate([[True], (src[1:] != src[:-1]) | (tgt[1:] != tgt[:-1])]))
    counts = np.diff(np.append(starts, len(src)))
    sizes, repeats = [], []
    size = max_src = max_tgt = 0  # the open batch: its examples so far and their longest lengths
    for s, t, count in zip(src[starts].tolist(), tgt[starts].tolist(), counts.tolist(), strict=True):
        if size:
            top_src, top_tgt = max(max_src, s), max(max_tgt, t)
            taken = max(0, min(count, max_tokens // (top_src + top_tgt) - size))
            if taken:
                size, max_src, max_tgt, count = size + taken, top_src, top_tgt, count - taken
            if not count:
                continue
            sizes.append(size)  # one more example would not fit
            repeats.append(1)
        full = max(1, max_tokens // (s + t))  # (an example longer than max_tokens is a batch of its own)
        sizes.append(full)
        repeats.append(count // full)
        size, max_src, max_tgt = count % full, s, t
    if size:
        sizes.append(size)
        repeats.append(1)
    return np.repeat(np.array(sizes, dtype=np.int64), repeats)


def curve_ranks(src: np.ndarray, tgt: np.ndarray) -> np.ndarray:
    """The rank of each example's ``(src[i], tgt[i])`` along the Hilbert curve (`hilbert_index`) among the distinct
    length pairs present: sorting by it sorts along the curve.

    The curve is computed once per distinct pair of lengths, not per example. Ranks are ``uint16`` while there are
    at most 65,536 distinct pairs (NumPy's stable sort of 16-bit integers is a radix sort, linear in the number of
    examples), else ``int32``.
    """
    max_src, max_tgt = int(src.max()), int(tgt.max())
    grid_src, grid_tgt = np.meshgrid(np.arange(max_src + 1), np.arange(max_tgt + 1), indexing="ij")
    present = np.zeros((max_src + 1, max_tgt + 1), dtype=bool)
    present[src, tgt] = True
    cells = np.flatnonzero(present)
    cells = cells[np.argsort(hilbert_index(grid_src.ravel()[cells], grid_tgt.ravel()[cells]))]
    ranks = np.zeros(present.size, dtype=np.uint16 if len(cells) <= 2**16 else np.int32)
    ranks[cells] = np.arange(len(cells))
    return ranks.reshape(present.shape)[src, tgt]


def hilbert_index(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Positions of the points ``(x[i], y[i])`` along a Hilbert curve.

    The curve visits each cell of the smallest ``2**k`` by ``2**k`` grid that
    holds the points, moving between adjacent cells only, so points that are
    near each other along it are near each other in the plane.

    Args:
        x: Non-negative integers.
        y: Non-negative integers, of the same shape as ``x``.

    Returns:
        The position of each point, from 0 to ``4**k - 1``.
    """
    x, y = np.array(x, dtype=np.int64), np.array(y, dtype=np.int64)
    side = 1 << int(max(x.max(initial=0), y.max(initial=0))).bit_length()
    index = np.zeros_like(x)
    half = side // 2
    while half > 0:
        right, top = (x & half) > 0, (y & half) > 0
        index += half * half * ((3 * right) ^ top)
        # Reflect and transpose so that the sub-square is walked like the whole square.
        reflect = ~top & right
        x[reflect], y[reflect] = side - 1 - x[reflect], side - 1 - y[reflect]
        transpose = ~top
        x[transpose], y[transpose] = y[transpose], x[transpose]
        half //= 2
    return index


def padding_fraction(batches: Iterable[Sequence[int]], lengths: Sequence[tuple[int, int]]) -> float:
    """Share of padding in the padded source and target tensors of ``batches``.

    Args:
        batches: Batches of example indices.
        lengths: ``(source length, target length)`` of each example.

    Returns:
        Padding positions divided by all positions, sources and targets together.

    Raises:
        ValueError: If there are no batches.
    """
    padded = real = 0
    for batch in batches:
        src = [lengths[index][0] for index in batch]
        tgt = [lengths[index][1] for index in batch]
        padded += len(batch) * (max(src) + max(tgt))
        real += sum(src) + sum(tgt)
    if padded == 0:
        raise ValueError("batches is empty")
    return 1 - real / padded


@dataclass(frozen=True)
class TranslationCollator:
    """Collate tokenized examples into right-padded tensors.

    Returns ``input_ids`` padded with ``pad_token_id``, the matching
    ``attention_mask`` (1 for tokens, 0 for padding) and ``labels`` padded with
    ``-100`` so that the loss ignores the padding. The model builds the decoder
    input from ``labels``. Use ``TranslationCollator(tokenizer.pad_token_id)``.
    """

    pad_token_id: int

    def __call__(self, examples: Sequence[Example]) -> dict[str, torch.Tensor]:
        input_ids = [torch.tensor(example["input_ids"], dtype=torch.long) for example in examples]
        labels = [torch.tensor(example["labels"], dtype=torch.long) for example in examples]
        padded_inputs = pad_sequence(input_ids, batch_first=True, padding_value=self.pad_token_id)
        source_lengths = torch.tensor([len(ids) for ids in input_ids])
        attention_mask = (torch.arange(padded_inputs.shape[1]) < source_lengths[:, None]).long()
        return {
            "input_ids": padded_inputs,
            "attention_mask": attention_mask,
            "labels": pad_sequence(labels, batch_first=True, padding_value=IGNORE_INDEX),
        }
