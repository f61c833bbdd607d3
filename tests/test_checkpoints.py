"""Checkpoint listing, averaging and loading."""

import pytest
import torch
from accelerate import Accelerator
from safetensors.torch import save_file

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.training.checkpoints import (
    average_checkpoints,
    check_checkpoint,
    checkpoint_step,
    list_checkpoints,
    load_checkpoint_weights,
    load_weights,
    save_checkpoint,
)


def write_checkpoint(directory, tensors):
    directory.mkdir(parents=True)
    save_file(tensors, directory / "model.safetensors")
    return directory


def test_list_checkpoints_orders_by_step_and_skips_incomplete_ones(tmp_path):
    for name in (
        "checkpoint-00000010",
        "checkpoint-00000009",
        "checkpoint-100",
        ".incomplete-checkpoint-00000200",
        "logs",
    ):
        (tmp_path / name).mkdir()
    assert [path.name for path in list_checkpoints(tmp_path)] == [
        "checkpoint-00000009",
        "checkpoint-00000010",
        "checkpoint-100",
    ]
    assert checkpoint_step(tmp_path / "checkpoint-00000010") == 10
    assert list_checkpoints(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="not a checkpoint directory"):
        checkpoint_step(tmp_path / "logs")


def test_average_checkpoints_is_the_elementwise_mean(tmp_path):
    first = write_checkpoint(
        tmp_path / "a", {"w": torch.tensor([1.0, 2.0]), "h": torch.tensor([1.0], dtype=torch.bfloat16)}
    )
    # A checkpoint written by a DistributedDataParallel model: names start with "module.".
    second = write_checkpoint(
        tmp_path / "b", {"module.w": torch.tensor([3.0, 6.0]), "module.h": torch.tensor([2.0], dtype=torch.bfloat16)}
    )
    third = write_checkpoint(
        tmp_path / "c", {"w": torch.tensor([2.0, 1.0]), "h": torch.tensor([4.0], dtype=torch.bfloat16)}
    )
    average = average_checkpoints([first, second, third])
    torch.testing.assert_close(average["w"], torch.tensor([2.0, 3.0]))
    assert average["h"].dtype == torch.bfloat16 and average["h"].item() == pytest.approx(7 / 3, rel=1e-2)
    with pytest.raises(ValueError, match="paths is empty"):
        average_checkpoints([])
    other = write_checkpoint(tmp_path / "d", {"w": torch.zeros(2), "extra": torch.zeros(1), "h": torch.zeros(1)})
    with pytest.raises(ValueError, match="different parameters"):
        average_checkpoints([first, other])
    wide = write_checkpoint(tmp_path / "e", {"w": torch.zeros(3), "h": torch.zeros(1, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match=r"parameter w has shape \(3,\)"):
        average_checkpoints([first, wide])


def test_load_weights_restores_tied_parameters_from_one_name():
    config = VanillaTransformerConfig(
        vocab_size=10, d_model=8, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=16, decoder_ffn_dim=16,
    )  # fmt: skip
    source, target = (
        VanillaTransformerForConditionalGeneration(config),
        VanillaTransformerForConditionalGeneration(config),
    )
    weights = {name: tensor for name, tensor in source.state_dict().items() if name != "lm_head.weight"}
    weights = {name: tensor for name, tensor in weights.items() if "embed_tokens" not in name}  # as saved: once
    load_weights(target, weights)
    for name, tensor in source.state_dict().items():
        torch.testing.assert_close(target.state_dict()[name], tensor)
    assert target.lm_head.weight.data_ptr() == target.model.shared.weight.data_ptr()
    with pytest.raises(ValueError, match="unexpected"):
        load_weights(target, {**weights, "extra": torch.zeros(1)})
    with pytest.raises(ValueError, match="missing"):
        load_weights(target, {name: tensor for name, tensor in weights.items() if name != "model.shared.weight"})


def test_a_save_puts_the_checkpoint_in_place_whole_and_removes_what_killed_saves_left(tmp_path):
    """Checkpoints are written as every folder is (`atomic.write_directory`): the save leaves the checkpoint, checked
    against its manifest, and no temporary; the temporaries of saves killed part way (this version's, of another
    step, and the ``.incomplete-checkpoint-<step>`` of older versions) are removed; the last `keep_last` are kept."""
    directory = tmp_path / "checkpoints"
    for name in (".checkpoint-00000004.incomplete-999999999", ".incomplete-checkpoint-00000003"):
        (directory / name).mkdir(parents=True)
        (directory / name / "model.safetensors").write_bytes(b"half")
    accelerator = Accelerator(cpu=True)
    for step in (1, 2, 3):
        state = {"model": {"w": torch.full((2,), float(step))}, "progress": {"step": step}, "scaler": None}
        final = save_checkpoint(accelerator, state, directory, step, keep_last=2)
        assert final == directory / f"checkpoint-{step:08d}" and check_checkpoint(final)["step"] == step
    assert sorted(path.name for path in directory.iterdir()) == ["checkpoint-00000002", "checkpoint-00000003"]
    assert load_checkpoint_weights(directory / "checkpoint-00000003")["w"].tolist() == [3.0, 3.0]
