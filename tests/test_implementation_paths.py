"""The implementation choices that decide speed on a GPU (issue 36), each behind a setting and checked on the CPU:
the paths give the same results, and the chosen path is the one that ran.

* packing the position-wise sublayers onto the real tokens (``config.pack_tokens``);
* attention through SDPA without a dense mask where the batch needs none (causal via ``is_causal``);
* Adam's kernels (``--adam-implementation``) and compiling by default where it paid (``--dynamo-backend auto``).
"""

from types import SimpleNamespace

import pytest
import torch
from accelerate.state import AcceleratorState
from tiny_model import TINY
from torch.nn import functional as F

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer import decoder_vanilla_transformer as decoder_module
from vanilla_transformer.modeling_vanilla_transformer import PACKING_THRESHOLDS, packing_threshold
from vanilla_transformer.training import parse_args, train
from vanilla_transformer.training import run as run_module
from vanilla_transformer.training.checkpoints import load_checkpoint_weights
from vanilla_transformer.training.preflight import auto_attention, auto_dynamo_backend
from vanilla_transformer.training.step import adam_kernels
from vanilla_transformer.training.tracking import read_metrics

# No dropout, so that runs with different kernels can be compared step for step.
SHORT = [*TINY, "--dropout", "0", "--max-steps", "4", "--save-every", "2", "--eval-every", "100", "--num-test", "2"]
SOURCE_LENGTH, TARGET_LENGTH = 7, 5  # different, so that each attention call tells its kind by its shapes


def batch(padded: bool, vocab_size: int = 40, seed: int = 0) -> dict[str, torch.Tensor]:
    """Four pairs; `padded`: right-padded on both sides, 32% of the source and 35% of the target positions."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(4, vocab_size, (4, SOURCE_LENGTH), generator=generator)
    labels = torch.randint(4, vocab_size, (4, TARGET_LENGTH), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if padded:
        for row, (source, target) in enumerate([(7, 5), (3, 2), (5, 4), (4, 2)]):
            input_ids[row, source:], attention_mask[row, source:] = 0, 0
            labels[row, target:] = -100
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


def forward_backward(model, inputs):
    model.zero_grad()
    outputs = model(**inputs)
    outputs.loss.backward()
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return outputs, gradients


# --------------------------------------------------------------------------------------------------------------------
# Packing
# --------------------------------------------------------------------------------------------------------------------


def test_packing_rule_by_setting_device_and_padding():
    assert packing_threshold("auto", "cpu") == PACKING_THRESHOLDS["cpu"] == 0.1
    assert packing_threshold("auto", "cuda") is None  # until a GPU run measures where it pays
    assert packing_threshold(True, "cuda") == 0.0 and packing_threshold(True, "cpu") == 0.0
    assert packing_threshold(False, "cpu") is None
    with pytest.raises(ValueError, match=r"pack_tokens must be True, False or 'auto', got pack_tokens='yes'"):
        VanillaTransformerConfig.from_preset("tiny", pack_tokens="yes")


@pytest.mark.parametrize("setting", [True, "auto"])
def test_packed_and_padded_training_give_the_same_loss_gradients_and_logits(make_tiny_model, setting):
    """Packed, hidden states and logits at padded positions are zero, not computed (how the test tells that packing
    ran); at real positions they, the loss and every gradient equal the padded computation's."""
    model = make_tiny_model(0, vocab_size=40).train()  # (no dropout: a deterministic function)
    inputs = batch(padded=True)
    model.config.pack_tokens = False
    padded, padded_gradients = forward_backward(model, inputs)
    model.config.pack_tokens = setting
    packed, packed_gradients = forward_backward(model, inputs)
    source_pad, target_pad = inputs["attention_mask"] == 0, inputs["labels"] == -100
    # The path that ran: zeros at every padded position packed, computed values there padded.
    assert torch.all(packed.logits[target_pad] == 0) and torch.all(packed.encoder_last_hidden_state[source_pad] == 0)
    assert torch.all(padded.logits[target_pad].abs().sum(-1) > 0)
    assert torch.all(padded.encoder_last_hidden_state[source_pad].abs().sum(-1) > 0)
    torch.testing.assert_close(packed.loss, padded.loss)
    torch.testing.assert_close(packed.logits[~target_pad], padded.logits[~target_pad])
    torch.testing.assert_close(
        packed.encoder_last_hidden_state[~source_pad], padded.encoder_last_hidden_state[~source_pad]
    )
    assert packed_gradients.keys() == padded_gradients.keys() and len(packed_gradients) > 10
    for name, gradient in padded_gradients.items():
        torch.testing.assert_close(packed_gradients[name], gradient, atol=1e-6, rtol=1e-5, msg=name)


def test_auto_does_not_pack_a_batch_with_little_padding(make_tiny_model):
    """Under `PACKING_THRESHOLDS["cpu"]` of padding (one padded source position in 28), ``auto`` computes every
    position, as ``False`` does; ``True`` packs it."""
    model = make_tiny_model(0, vocab_size=40).train()
    inputs = batch(padded=False)
    inputs["input_ids"][1, -1], inputs["attention_mask"][1, -1] = 0, 0
    for setting, packed in (("auto", False), (False, False), (True, True)):
        model.config.pack_tokens = setting
        hidden = model(**inputs).encoder_last_hidden_state
        assert bool(torch.all(hidden[1, -1] == 0)) == packed, setting


# --------------------------------------------------------------------------------------------------------------------
# SDPA
# --------------------------------------------------------------------------------------------------------------------


@pytest.fixture
def sdpa_calls(monkeypatch):
    """The arguments of every call of ``F.scaled_dot_product_attention``: (query length, key length, the mask's
    shape or None, is_causal)."""
    calls = []
    real = F.scaled_dot_product_attention

    def recording(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        mask = None if attn_mask is None else tuple(attn_mask.shape)
        calls.append((query.shape[-2], key.shape[-2], mask, is_causal))
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", recording)
    return calls


def kinds(calls) -> dict[str, set]:
    """The calls by kind of attention, from their query and key lengths: {kind: {(mask shape, is_causal)}}."""
    names = {
        (SOURCE_LENGTH, SOURCE_LENGTH): "encoder",
        (TARGET_LENGTH, TARGET_LENGTH): "decoder self",
        (TARGET_LENGTH, SOURCE_LENGTH): "cross",
    }
    grouped = {}
    for query, key, mask, causal in calls:
        grouped.setdefault(names[query, key], set()).add((mask, causal))
    return grouped


@pytest.mark.parametrize("training", [True, False])
def test_unpadded_batches_call_sdpa_without_a_mask_and_the_decoder_causal(make_tiny_model, sdpa_calls, training):
    """No padding, no mask: PyTorch may then pick its flash or memory-efficient kernels; the decoder's
    self-attention is causal through ``is_causal``. The same loss as the eager formula."""
    model = make_tiny_model(0, vocab_size=40).train(training)
    inputs = batch(padded=False)
    for with_mask in (True, False):  # an all-ones attention mask, or none
        sdpa_calls.clear()
        loss = model(**{**inputs, "attention_mask": inputs["attention_mask"] if with_mask else None}).loss
        layers = model.config.encoder_layers
        assert len(sdpa_calls) == 3 * layers
        assert kinds(sdpa_calls) == {
            "encoder": {(None, False)},
            "decoder self": {(None, True)},
            "cross": {(None, False)},
        }
    model.set_attn_implementation("eager")
    sdpa_calls.clear()
    torch.testing.assert_close(model(**inputs).loss, loss)
    assert not sdpa_calls  # (the eager formula ran)


@pytest.mark.parametrize("pack_tokens", [True, False])
def test_padded_training_keeps_the_decoder_causal_without_a_mask(make_tiny_model, sdpa_calls, pack_tokens):
    """Padded targets in training, packed or not: their trailing positions are hidden from the real tokens by
    causality, and their logits ignored by the loss, so the decoder's self-attention needs no mask. The source's
    padding still needs one, in the encoder and in the cross-attention."""
    model = make_tiny_model(0, vocab_size=40).train()
    model.config.pack_tokens = pack_tokens
    model(**batch(padded=True))
    found = kinds(sdpa_calls)
    assert found["decoder self"] == {(None, True)}
    assert all(mask is not None and not causal for mask, causal in found["encoder"] | found["cross"])


# --------------------------------------------------------------------------------------------------------------------
# Adam's kernels, and compiling by default where it pays
# --------------------------------------------------------------------------------------------------------------------

KERNELS = {"fused": "_fused_adam_", "foreach": "_foreach_addcdiv_"}
"""The torch function each implementation of Adam calls once per step (the for-loop calls neither)."""


@pytest.fixture
def adam_kernel_calls(monkeypatch):
    """How many times each of `KERNELS` ran."""
    calls = dict.fromkeys(KERNELS, 0)

    def counting(name, real):
        def count(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)

        return count

    for name, function in KERNELS.items():
        monkeypatch.setattr(torch, function, counting(name, getattr(torch, function)))
    return calls


@pytest.fixture(autouse=True)
def fresh_accelerate_state(monkeypatch):
    for name in ("ACCELERATE_DYNAMO_BACKEND", "ACCELERATE_MIXED_PRECISION"):
        monkeypatch.delenv(name, raising=False)
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_adam_auto_is_fused_on_cuda_only():
    assert adam_kernels("auto", "cuda") == {"fused": True}
    assert adam_kernels("auto", "cpu") == {}
    with pytest.raises(ValueError, match=r"--adam-implementation must be one of auto, fused, foreach, for-loop"):
        parse_args([*TINY, "--adam-implementation", "apex"])


def test_fused_foreach_and_for_loop_adam_make_the_same_run(tmp_path, adam_kernel_calls):
    """`train` with each of Adam's implementations: the kernels asked for ran, and the losses and final weights are
    the for-loop's (to float32 rounding)."""
    runs = {}
    for choice in ("for-loop", "fused", "foreach"):
        calls_before = dict(adam_kernel_calls)
        AcceleratorState._reset_state(reset_partial_state=True)
        run_dir = tmp_path / choice
        train(parse_args([*SHORT, "--output-dir", str(run_dir), "--adam-implementation", choice]))
        ran = {name for name in KERNELS if adam_kernel_calls[name] > calls_before[name]}
        assert ran == ({choice} if choice in KERNELS else set()), choice
        losses = [row["train_loss"] for row in read_metrics(run_dir / "metrics.jsonl") if "train_loss" in row]
        runs[choice] = losses, load_checkpoint_weights(run_dir / "checkpoints" / "checkpoint-00000004")
    losses, weights = runs["for-loop"]
    assert len(losses) == 4
    for choice in ("fused", "foreach"):
        assert runs[choice][0] == pytest.approx(losses, rel=1e-5)
        for name, weight in weights.items():
            if name.endswith("k_proj.bias"):
                # Its gradient is zero in exact arithmetic (q . b_k adds the same to every score of a query, which
                # softmax ignores): Adam normalises rounding noise there into steps of up to the learning rate.
                continue
            torch.testing.assert_close(runs[choice][1][name], weight, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize(
    ("device", "precision", "flags", "environ", "expected"),
    [
        ("cuda", "bf16", None, {}, "no"),  # eager SDPA without cuDNN: as fast as compiled, no warm-up (issue 55)
        ("cuda", "no", None, {}, "no"),
        ("cpu", "bf16", {"avx2", "avx512_bf16"}, {}, "inductor"),
        ("cpu", "bf16", {"avx2", "amx_bf16"}, {}, "inductor"),
        ("cpu", "no", {"avx2", "avx512_bf16"}, {}, "no"),  # fp32: compiling did not pay
        ("cpu", "bf16", {"avx2"}, {}, "no"),  # emulated bf16
        ("cpu", "bf16", None, {}, "no"),
        ("cuda", "bf16", None, {"ACCELERATE_DYNAMO_BACKEND": "NO"}, None),  # the launcher chose: Accelerate decides
        ("cpu", "bf16", {"avx512_bf16"}, {"ACCELERATE_DYNAMO_BACKEND": "EAGER"}, None),
    ],
)
def test_auto_dynamo_backend_compiles_where_it_paid_and_never_overrides_the_launcher(
    device, precision, flags, environ, expected
):
    assert auto_dynamo_backend(device, precision, flags, environ) == expected


class _Started(Exception):
    """Stops `train` once the Accelerator is built."""


@pytest.mark.parametrize(
    ("flags", "launcher", "expected"),
    [({"avx2"}, None, "no"), ({"avx2", "avx512_bf16"}, None, "inductor"), ({"avx2", "avx512_bf16"}, "EAGER", None)],
)
def test_train_with_dynamo_auto_hands_accelerate_the_chosen_backend(tmp_path, monkeypatch, flags, launcher, expected):
    """The multi30k preset's ``--dynamo-backend auto`` with ``--mixed-precision auto``, given the CPU's flags: the
    Accelerator gets inductor where bf16 is native, no where it is not, and nothing where the launcher chose."""
    assert parse_args(["--preset", "multi30k"]).optimization.dynamo_backend == "auto"
    if launcher:
        monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", launcher)
    monkeypatch.setattr("vanilla_transformer.training.run.cpu_flags", lambda: flags)
    given = {}

    def accelerator(**kwargs):
        given.update(kwargs)
        raise _Started

    monkeypatch.setattr("vanilla_transformer.training.run.Accelerator", accelerator)
    options = ["--dynamo-backend", "auto", "--mixed-precision", "auto", "--output-dir", str(tmp_path / "run")]
    with pytest.raises(_Started):
        train(parse_args([*SHORT, *options]))
    assert given.get("dynamo_backend") == expected
    assert given["mixed_precision"] == ("bf16" if "avx512_bf16" in flags else "no")


def test_auto_attention_is_eager_only_on_a_cpu_in_bf16():
    assert auto_attention("cpu", "bf16") == "eager"
    assert auto_attention("cpu", "no") == auto_attention("cuda", "bf16") == auto_attention("cuda", "no") == "sdpa"
    assert parse_args(["--preset", "multi30k"]).model.attn_implementation == "auto"


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        ("multi30k", {"mixed_precision": "bf16", "dynamo_backend": "no"}),
        ("wmt14-base", {"mixed_precision": "bf16"}),
        ("wmt14-base fp16", {}),
    ],
)
def test_train_on_cuda_by_default_trains_eagerly_in_bf16(tmp_path, monkeypatch, preset, expected):
    """What a user gets on a GPU with bf16 (mocked) from the presets, with no option of precision, compiling or
    attention: bf16, not compiled (the multi30k preset's ``auto`` says no; wmt14's leave Accelerate's default, no).
    ``accelerate launch --mixed_precision fp16`` (a V100's choice) is not overridden by the preset's ``auto``."""
    preset, _, launcher = preset.partition(" ")
    if launcher:
        monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    monkeypatch.setattr(run_module, "PartialState", lambda: SimpleNamespace(device=torch.device("cuda")))
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    given = {}

    def accelerator(**kwargs):
        given.update(kwargs)
        raise _Started

    monkeypatch.setattr(run_module, "Accelerator", accelerator)
    with pytest.raises(_Started):
        train(parse_args(["--preset", preset, "--output-dir", str(tmp_path / "run")]))
    assert {name: value for name, value in given.items() if name in ("mixed_precision", "dynamo_backend")} == expected


@pytest.mark.parametrize(
    ("options", "attention", "backends"),
    [
        ([], "sdpa", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]),
        (["--attn-implementation", "auto", "--mixed-precision", "bf16"], "eager", None),
    ],
)
def test_train_records_the_attention_and_micro_batches_it_resolved(
    tmp_path, monkeypatch, options, attention, backends
):
    """results.json says what the settings resolved to on the device: here the CPU with CUDA's backend list, and a
    bf16 run on the CPU, where ``auto`` takes eager attention."""
    monkeypatch.setitem(decoder_module.SDPA_BACKENDS, "cpu", decoder_module.SDPA_BACKENDS["cuda"])
    results = train(parse_args([*SHORT, "--max-steps", "1", "--output-dir", str(tmp_path), *options]))
    assert (results["attn_implementation"], results["sdpa_backends"]) == (attention, backends)
    assert results["micro_batches"] == 1 and results["tokens_per_micro_batch"] == 400
