"""The built-in numbers task: English number words to German number words, generated with num2words."""

from __future__ import annotations

import random

from ..extras import import_optional
from .corpora import Splits


def make_numbers_task(
    num_train: int, num_valid: int, num_test: int, *, max_number: int = 99_999, seed: int = 0
) -> Splits:
    """The built-in task: English number words to German number words.

    ``321`` gives the pair ``("three hundred and twenty-one",
    "dreihunderteinundzwanzig")`` (:func:`num2words.num2words` with
    ``lang="en"`` and ``lang="de"``). The numbers are drawn without replacement
    from ``1..max_number``, so no number is in two splits. The splits are the
    same for the same arguments. Numbers up to 99,999 with about 20,000
    training pairs are learnable by a small model in minutes.

    Raises:
        ValueError: If a size is negative, ``max_number`` is below 1, or the
            splits need more than ``max_number`` distinct numbers.
    """
    sizes = {"num_train": num_train, "num_valid": num_valid, "num_test": num_test}
    for argument, size in sizes.items():
        if size < 0:
            raise ValueError(f"{argument} must be non-negative, got {argument}={size}")
    if max_number < 1:
        raise ValueError(f"max_number must be at least 1, got max_number={max_number}")
    total = sum(sizes.values())
    if total > max_number:
        raise ValueError(
            f"num_train + num_valid + num_test = {total} distinct numbers do not fit in 1..max_number={max_number}"
        )
    num2words = import_optional("num2words", "train", "the numbers task").num2words
    numbers = random.Random(seed).sample(range(1, max_number + 1), total)
    pairs = [(num2words(number, lang="en"), num2words(number, lang="de")) for number in numbers]
    return Splits(
        train=pairs[:num_train],
        valid=pairs[num_train : num_train + num_valid],
        test=pairs[num_train + num_valid :],
    )
