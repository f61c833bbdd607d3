"""torch's private pieces that compiled training reads (issue 64): on the supported torch releases each is there and
used; where a release lacks one, training does without it with one warning, never a traceback, and computes the
same. CI runs this file at both ends of the supported range (.ci/run)."""

import logging
import types

import pytest
import torch
from accelerate import Accelerator, PartialState
from tiny_model import new_tiny_model

from vanilla_transformer.training import compile_cache, step


@pytest.fixture
def warnings_logged(caplog):
    PartialState()
    caplog.set_level(logging.WARNING)
    return caplog


def compiling_accelerator(monkeypatch) -> Accelerator:
    accelerator = Accelerator(cpu=True)
    monkeypatch.setattr(step, "compiling", lambda _: True)
    return accelerator


def test_the_supported_torch_has_every_private_piece():
    """The fast paths run here: without these, the tests below would be the only ones that ran."""
    assert hasattr(torch._dynamo.config, "specialize_float")
    assert callable(getattr(torch.compiler, "save_cache_artifacts", None))
    assert compile_cache._artifact_manager() is not None
    from torch._inductor.cpu_vec_isa import pick_vec_isa  # the vector-ISA probe's function

    assert callable(pick_vec_isa)
    assert step.compile_count() is not None


def test_floats_are_specialized_where_torch_can(monkeypatch, warnings_logged):
    accelerator = compiling_accelerator(monkeypatch)
    with step.specialized_floats(accelerator):
        assert torch._dynamo.config.specialize_float is True
    assert not warnings_logged.records


def test_without_specialize_float_training_warns_once_and_goes_on(monkeypatch, warnings_logged):
    accelerator = compiling_accelerator(monkeypatch)
    monkeypatch.setattr(torch._dynamo, "config", types.SimpleNamespace())  # a torch without the setting
    with step.specialized_floats(accelerator):
        pass
    [record] = warnings_logged.records
    assert "specialize_float" in record.getMessage() and "the same results" in record.getMessage()


def test_without_save_cache_artifacts_the_cache_is_not_written(monkeypatch, tmp_path, warnings_logged):
    monkeypatch.delattr(torch.compiler, "save_cache_artifacts")
    path = tmp_path / "compile-0123.bin"
    assert compile_cache.save_compile_cache(path) is False
    assert not path.exists()
    [record] = warnings_logged.records
    assert str(path) in record.getMessage() and "compiles anew" in record.getMessage()


def test_without_the_compiled_modules_original_every_region_stays_compiled(monkeypatch, warnings_logged):
    """A wrapper of an unknown torch that keeps no ``_orig_mod``: nothing is unwrapped, nothing raised."""

    class Wrapper(torch.nn.Module):  # stands for OptimizedModule without its _orig_mod
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

    model = new_tiny_model()
    model.model.shared = Wrapper(model.model.shared)  # a region outside the repeated layers
    monkeypatch.setattr(torch._dynamo.eval_frame, "OptimizedModule", Wrapper)
    assert step.compile_layers_only(model) == 1
    assert isinstance(model.model.shared, Wrapper)
    [record] = warnings_logged.records
    assert "_orig_mod" in record.getMessage()
