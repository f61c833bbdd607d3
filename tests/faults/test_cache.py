"""A damaged token cache (data/cache.py) is named, with its file and the fix, when it is opened or a batch reads a
damaged id (issue 25, item 6), not found later as an index error inside the model."""

import numpy as np
import pytest

from vanilla_transformer.data.cache import TokenCorpus, build_token_cache
from vanilla_transformer.tokenization import train_tokenizer

PAIRS = [(f"number {i} here", f"nummer {i} hier") for i in range(40)]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([text for pair in PAIRS for text in pair], vocab_size=300, min_frequency=1)


@pytest.fixture
def cache(tmp_path, tokenizer):
    directory = tmp_path / "cache" / "tokens"
    build_token_cache([PAIRS], tokenizer, directory, max_length=None)
    return directory


def _cut(path):
    path.write_bytes(path.read_bytes()[:-1])


def _fill_ff(path):
    path.write_bytes(b"\xff" * path.stat().st_size)


DAMAGES = {
    "odd-size-tokens": ("source.tokens.bin", _cut),
    "odd-size-offsets": ("target.offsets.bin", _cut),
    "offsets-all-ff": ("source.offsets.bin", _fill_ff),
    "empty-offsets": ("target.offsets.bin", lambda p: p.write_bytes(b"")),
    "missing-tokens": ("target.tokens.bin", lambda p: p.unlink()),
    "bad-meta-json": ("meta.json", lambda p: p.write_text('{"version": 1, ')),
    "cut-lengths": ("lengths.npy", lambda p: p.write_bytes(p.read_bytes()[:70])),
}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_cache_is_named_when_opened(cache, damage):
    name, spoil = DAMAGES[damage]
    spoil(cache / name)
    with pytest.raises(
        ValueError, match=rf"token cache {cache} is damaged \(.*{name.split('.')[0]}.*delete that folder"
    ):
        TokenCorpus(cache)


def test_token_ids_beyond_the_vocabulary_are_named_before_the_model_sees_them(cache, tokenizer):
    _fill_ff(cache / "target.tokens.bin")  # the same size: only the ids tell
    corpus = TokenCorpus(cache)
    with pytest.raises(
        ValueError, match=rf"target.tokens.bin holds id 65535, beyond the vocabulary of {len(tokenizer)}"
    ):
        corpus.collate([0, 1], tokenizer.pad_token_id)
    with pytest.raises(ValueError, match="delete that folder"):
        corpus[3]


def test_a_sound_cache_still_opens_and_reads(cache, tokenizer):
    corpus = TokenCorpus(cache)
    assert len(corpus) == len(PAIRS) and corpus.vocab_size == len(tokenizer)
    expected = tokenizer(PAIRS[2][0])["input_ids"]
    assert corpus[2]["input_ids"].tolist() == expected
    assert np.array_equal(corpus.lengths[:, 0], [len(tokenizer(src)["input_ids"]) for src, _ in PAIRS])
