"""The built-in numbers task: English number words to German number words, generated with num2words.

The numbers are drawn by magnitude (digit count), so that the short numbers a person types first (``five``,
``forty-two``) are as common as the long ones; `exact_match_by_magnitude` scores a test set magnitude by magnitude.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

from ..extras import import_optional
from .corpora import Splits

_UNITS = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
    "seventeen eighteen nineteen".split()  # fmt: skip
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_WORDS = {word: value for value, word in enumerate(_UNITS)} | {word: 20 + 10 * i for i, word in enumerate(_TENS)}
_SCALES = {"thousand": 10**3, "million": 10**6, "billion": 10**9}


def magnitude(number: int) -> str:
    """The magnitude a number belongs to, by digit count: ``"1-9"``, ``"10-99"``, ``"100-999"``, ``"1,000-9,999"``."""
    digits = len(str(number))
    return f"{10 ** (digits - 1):,}-{10**digits - 1:,}"


def english_number(words: str) -> int | None:
    """The number that English number words name, as num2words writes them (``"seventy-one thousand, four hundred
    and fifty-six"`` is 71456); None for anything else."""
    total = current = 0
    tokens = [token for token in re.split(r"[\s,-]+", words.strip().lower()) if token and token != "and"]
    if not tokens:
        return None
    for token in tokens:
        if token in _WORDS:
            current += _WORDS[token]
        elif token == "hundred":
            current *= 100
        elif token in _SCALES:
            total, current = total + current * _SCALES[token], 0
        else:
            return None
    return total + current


def exact_match_by_magnitude(
    sources: Sequence[str], hypotheses: Sequence[str], references: Sequence[str]
) -> dict[str, float]:
    """Exact match (0-100) of the pairs of each magnitude (`magnitude`) of the source's number, smallest first;
    sources that are not English number words are left out."""
    hits: dict[int, list[bool]] = {}
    for source, hypothesis, reference in zip(sources, hypotheses, references, strict=True):
        number = english_number(source)
        if number is not None and number > 0:
            hits.setdefault(len(str(number)), []).append(hypothesis == reference)
    return {magnitude(10 ** (d - 1)): 100.0 * sum(hits[d]) / len(hits[d]) for d in sorted(hits)}


def draw_numbers(count: int, max_number: int, rng: random.Random, pools: dict[int, list[int]]) -> list[int]:
    """`count` numbers of 1..max_number: each one's digit count uniform, the number uniform among those with that
    many digits, taken without replacement from `pools` (the numbers left per digit count, refilled in a new random
    order when one runs out, so that a magnitude smaller than its share repeats)."""
    digits = len(str(max_number))
    numbers = []
    for _ in range(count):
        d = rng.randint(1, digits)
        if not pools.get(d):
            pool = list(range(10 ** (d - 1), min(10**d - 1, max_number) + 1))
            rng.shuffle(pool)
            pools[d] = pool
        numbers.append(pools[d].pop())
    return numbers


PAIR_BYTES = 150
"""Bytes of memory a pair of the numbers task takes at least (two Python strings in a tuple in a list; 229 on
average up to 99,999): what `check_numbers_task` estimates a task's memory by, before any pair is made."""


def check_numbers_task(option: str, value: int, pairs: int) -> None:
    """Refuse, before any pair is made, a numbers task of `pairs` pairs (asked for by ``option=value``) that memory
    cannot hold by `PAIR_BYTES` alone: it would be generated for hours, until the machine runs out of memory. One
    line naming the option."""
    from ..environment import available_memory  # torch: not for a command's --help

    need, available = pairs * PAIR_BYTES, available_memory()
    if need > available:
        raise ValueError(
            f"{option}={value:,} asks for {pairs:,} pairs of the numbers task: at least {need / 1e9:,.1f} GB of "
            f"memory, more than the {available / 1e9:,.1f} GB available here"
        )


def make_numbers_task(
    num_train: int, num_valid: int, num_test: int, *, max_number: int = 99_999, seed: int = 0
) -> Splits:
    """The built-in task: English number words to German number words.

    ``321`` gives the pair ``("three hundred and twenty-one", "dreihunderteinundzwanzig")``
    (:func:`num2words.num2words` with ``lang="en"`` and ``lang="de"``). Each split is drawn the same way from
    ``1..max_number`` (`draw_numbers`): a digit count uniformly, then a number with that many digits, so that one to
    five digits are equally common up to 99,999. The test set is drawn first, then validation, then training, each
    number without replacement while its magnitude has numbers left: a large magnitude's test numbers are never
    trained on, while the few numbers of a small one (1-9, 10-99) are all in training, as a person expects the model
    to know them. The splits are the same for the same arguments.

    Raises:
        ValueError: If a size is negative or ``max_number`` is below 1.
    """
    sizes = {"num_train": num_train, "num_valid": num_valid, "num_test": num_test}
    for argument, size in sizes.items():
        if size < 0:
            raise ValueError(f"{argument} must be non-negative, got {argument}={size}")
    if max_number < 1:
        raise ValueError(f"max_number must be at least 1, got max_number={max_number}")
    num2words = import_optional("num2words", "train", "the numbers task").num2words
    rng, pools = random.Random(seed), {}
    test, valid, train = (draw_numbers(size, max_number, rng, pools) for size in (num_test, num_valid, num_train))

    def pairs(numbers: list[int]) -> list[tuple[str, str]]:
        return [(num2words(number, lang="en"), num2words(number, lang="de")) for number in numbers]

    return Splits(train=pairs(train), valid=pairs(valid), test=pairs(test))
