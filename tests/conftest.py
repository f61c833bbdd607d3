"""Test-wide settings (tiny models run fastest on one thread, and nothing may reach the Hugging Face Hub), and the
tiny models the tests share, each built once per session from `tiny_model.TINY_CONFIG` (the "tiny" preset,
without dropout), the factories of fresh ones, and the padded batch of token-id lists."""

import json
import os
from pathlib import Path

import pytest
import torch
from slow_marks import slow_tests

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
torch.set_num_threads(1)


@pytest.hookimpl(tryfirst=True)  # before the -m selection reads the markers
def pytest_collection_modifyitems(config, items):
    slow = slow_tests()
    for item in items:
        if item.nodeid.split("[", 1)[0] in slow:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A saved model directory of the numbers task (`tiny_model.build_model_dir`). Tests must not change it: copy it
    first."""
    from tiny_model import build_model_dir

    return build_model_dir(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def make_tiny_model():
    """The factory of the tests' random tiny models: ``make_tiny_model(seed=0, **overrides)``
    (`tiny_model.new_tiny_model`), a fresh model in eval mode each call."""
    from tiny_model import new_tiny_model

    return new_tiny_model


@pytest.fixture(scope="session")
def make_peaked_model(make_tiny_model):
    """``make_peaked_model(vocab_size, seed, head_std=0.5, eos_std=1.5, d_model=16, **overrides)``: a smaller random
    model (one encoder layer, 2 heads, untied head) whose output distributions are neither flat nor one-hot, and whose
    </s> probability varies, for comparing searches."""
    from vanilla_transformer.tokenization import EOS_ID

    def make_peaked_model(
        vocab_size: int, seed: int, head_std: float = 0.5, eos_std: float = 1.5, d_model: int = 16, **overrides
    ):
        model = make_tiny_model(
            seed,
            vocab_size=vocab_size,
            d_model=d_model,
            encoder_layers=1,
            encoder_attention_heads=2,
            decoder_attention_heads=2,
            encoder_ffn_dim=32,
            decoder_ffn_dim=32,
            tie_word_embeddings=False,
            **overrides,
        )
        with torch.no_grad():
            model.lm_head.weight.normal_(0.0, head_std)
            model.lm_head.weight[EOS_ID].normal_(0.0, eos_std)
        return model

    return make_peaked_model


@pytest.fixture(scope="session")
def padded_batch():
    """``padded_batch(sources, pad_id=0)``: (input_ids, attention_mask) of token-id lists, right-padded to the
    longest."""

    def padded_batch(sources: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(map(len, sources))
        input_ids = torch.tensor([source + [pad_id] * (width - len(source)) for source in sources])
        attention_mask = torch.tensor([[1] * len(source) + [0] * (width - len(source)) for source in sources])
        return input_ids, attention_mask

    return padded_batch


@pytest.fixture(scope="session")
def copy_model():
    """(model, tokenizer) of the copy task (`copy_task.train_copy_model`), 200 steps. Tests must not change them."""
    from copy_task import train_copy_model

    return train_copy_model()


@pytest.fixture(scope="session")
def copy_batch(copy_model):
    """12 sentences of the copy task, tokenized and padded for `copy_model`."""
    from copy_task import sentences

    return copy_model[1](sentences(12, seed=11), padding=True, return_tensors="pt")


@pytest.fixture
def decoder_steps(monkeypatch):
    """Counts the fast decoder's steps, to tell which loop served a call."""
    from vanilla_transformer.generation_vanilla_transformer import IncrementalDecoder

    calls = []
    step = IncrementalDecoder.step

    def counting(self, tokens):
        calls.append(tokens.shape[0])
        return step(self, tokens)

    monkeypatch.setattr(IncrementalDecoder, "step", counting)
    return calls


@pytest.fixture(scope="session")
def confident_copy_model():
    """The copy-task model after 400 steps: confident enough that int8 rounding flips no decision."""
    from copy_task import train_copy_model

    return train_copy_model(steps=400)


@pytest.fixture(scope="session")
def tiny_run_dir(tmp_path_factory) -> Path:
    """The run directory of an uninterrupted ``vanilla-transformer train`` of 8 steps (`tiny_model.TINY`), with
    dropout. Tests must not change it."""
    from tiny_model import TINY

    from vanilla_transformer.training import parse_args, train

    output_dir = tmp_path_factory.mktemp("tiny-run")
    train(parse_args([*TINY, "--output-dir", str(output_dir)]))
    return output_dir


@pytest.fixture
def shared_data(monkeypatch) -> Path:
    """The folder holding the real corpora (``multi30k/``, ``wmt14_en_de/``): ``$VANILLA_TRANSFORMER_DATA``, else
    the checkout's ``../shared/data``; set as that variable for the test, so that the presets find it there. Tests
    that need a corpus skip when its files are absent."""
    from vanilla_transformer.data import DATA_DIR_VARIABLE

    root = Path(os.environ.get(DATA_DIR_VARIABLE) or Path(__file__).resolve().parents[2] / "shared" / "data")
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(root))
    return root


@pytest.fixture(autouse=True)
def environment_restored():
    """What a test, or the code it runs, sets in ``os.environ`` without monkeypatch is undone after it. The benchmark's
    ``compile=whole`` worker sets ``ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION=false`` (as ``accelerate launch``
    does, in the worker process it owns); run in a test, it leaked to every later test of that pytest worker, whose
    compiled runs then compiled the whole model as one graph instead of layer by layer (tests/test_compile.py's graph
    counts, one fewer). The session's own settings (`data_cache`, set up before any test) are kept."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(autouse=True, scope="session")
def data_cache(tmp_path_factory):
    """Runs cache their tokenizer and tokenized corpus in a directory of the test session, not in ~/.cache."""
    os.environ["VANILLA_TRANSFORMER_CACHE"] = str(tmp_path_factory.mktemp("data-cache"))
    yield
    os.environ.pop("VANILLA_TRANSFORMER_CACHE", None)


@pytest.fixture
def offline(monkeypatch):
    """Forbid Hub access, whenever `datasets` and `huggingface_hub` were imported."""
    import datasets
    import huggingface_hub

    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


@pytest.fixture
def local_hub_dataset(tmp_path):
    """A dataset directory laid out like `wmt14` on the Hub: a `de-en` config with a `translation` column."""
    root = tmp_path / "wmt_like"
    (root / "de-en").mkdir(parents=True)
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        "  - split: train\n    path: de-en/train.jsonl\n"
        "  - split: validation\n    path: de-en/validation.jsonl\n---\n",
        encoding="utf-8",
    )
    train = [("Hello world", "Hallo Welt"), ("The street", "Die Straße")]
    for split, pairs in {"train": train, "validation": [("Thank you", "Danke")]}.items():
        lines = [json.dumps({"translation": {"de": de, "en": en}}, ensure_ascii=False) for en, de in pairs]
        (root / "de-en" / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root
