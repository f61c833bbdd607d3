"""The modeling file as a reader meets it (issue 66): the paper's masks where the file builds them, the layers free
of the training-speed path, and the file's claims about itself true."""

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch

from vanilla_transformer import modeling_vanilla_transformer as modeling

PAD = 0


def padded_batch(make_tiny_model, implementation: str):
    model = make_tiny_model(0, vocab_size=40, attn_implementation=implementation).train()
    source = torch.tensor([[5, 6, 7, 3], [8, 3, PAD, PAD]])
    labels = torch.tensor([[9, 10, 3], [11, 3, -100]])
    return model, dict(input_ids=source, attention_mask=(source != PAD).long(), labels=labels)


def test_the_masks_are_the_papers_where_the_file_builds_them(make_tiny_model):
    """`source_mask` and `target_masks` (eager): 0 where a query may attend, the dtype's minimum (the paper's -inf)
    at the illegal connections: padding keys everywhere, later keys in the decoder's self-attention. Built by hand
    here from the two rules."""
    model = make_tiny_model(0, vocab_size=40, attn_implementation="eager")
    config = model.config
    source_padding = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    target_padding = torch.tensor([[1, 1, 1], [1, 1, 0]])
    source, target = torch.zeros(2, 4, config.d_model), torch.zeros(2, 3, config.d_model)

    def additive(allowed: torch.Tensor) -> torch.Tensor:  # [B, Tq, Tk] bool -> [B, 1, Tq, Tk]
        return torch.where(allowed, 0.0, torch.finfo(torch.float32).min)[:, None]

    keys_of = lambda padding, queries: padding.bool()[:, None, :].expand(-1, queries, -1)  # noqa: E731
    causal = torch.ones(3, 3, dtype=torch.bool).tril()  # key <= query
    torch.testing.assert_close(
        modeling.source_mask(config, source, source_padding), additive(keys_of(source_padding, 4))
    )
    self_mask, memory_mask = modeling.target_masks(config, target, target_padding, None, source, source_padding)
    torch.testing.assert_close(self_mask, additive(keys_of(target_padding, 3) & causal))
    torch.testing.assert_close(memory_mask, additive(keys_of(source_padding, 3)))


@pytest.mark.parametrize(
    "forward",
    [
        modeling.VanillaTransformerAttention.forward,
        modeling.VanillaTransformerEncoderLayer.forward,
        modeling.VanillaTransformerDecoderLayer.forward,
    ],
)
def test_no_layer_carries_the_packing(forward):
    """The layers and attention take the paper's arguments; packing is applied around them (`packed_layers`)."""
    assert not {"packing", "memory_packing"} & set(inspect.signature(forward).parameters)


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_packing_runs_around_the_layers_and_leaves_no_hook(make_tiny_model, implementation):
    """A padded training batch packed (`pack_tokens=True`): padded positions are zero, not computed (so packing
    ran), real ones equal the unpacked computation's, and no hook is left on any module after the forward."""
    model, inputs = padded_batch(make_tiny_model, implementation)
    model.config.pack_tokens = False
    unpacked = model(**inputs)
    model.config.pack_tokens = True
    packed = model(**inputs)
    source_pad, target_pad = inputs["attention_mask"] == 0, inputs["labels"] == -100
    assert torch.all(packed.encoder_last_hidden_state[source_pad] == 0) and torch.all(packed.logits[target_pad] == 0)
    assert torch.all(unpacked.logits[target_pad].abs().sum(-1) > 0)
    torch.testing.assert_close(packed.logits[~target_pad], unpacked.logits[~target_pad])
    torch.testing.assert_close(packed.loss, unpacked.loss)
    assert not [name for name, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]


def test_gradient_checkpointing_trains_unpacked(make_tiny_model):
    """Its recomputation runs the layers again after the packing hooks are gone: it computes every position."""
    model, inputs = padded_batch(make_tiny_model, "sdpa")
    model.config.pack_tokens = True
    model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    outputs = model(**inputs)
    outputs.loss.backward()
    assert outputs.encoder_last_hidden_state[inputs["attention_mask"] == 0].abs().sum() > 0


# --------------------------------------------------------------------------------------------------------------------
# The file's claims about itself
# --------------------------------------------------------------------------------------------------------------------

SOURCE = Path(modeling.__file__).read_text(encoding="utf-8")
DOCSTRING = ast.get_docstring(ast.parse(SOURCE))
NUMBERS = {"four": 4, "five": 5, "six": 6}


def test_the_docstring_names_every_file_the_modeling_file_imports():
    body = ast.parse(SOURCE).body
    imported = {node.module for node in body if isinstance(node, ast.ImportFrom) and node.level}
    assert imported and all(f"``{name}.py``" in DOCSTRING for name in imported), imported
    packages = {alias.name.split(".")[0] for node in body if isinstance(node, ast.Import) for alias in node.names}
    packages |= {node.module.split(".")[0] for node in body if isinstance(node, ast.ImportFrom) and not node.level}
    assert packages - {"math", "collections", "contextlib"} == {"torch", "transformers"}
    count = re.search(r"imports torch, transformers and (\w+) files of its own", DOCSTRING)
    assert count and NUMBERS[count.group(1)] == len(imported)


def test_the_docstring_counts_the_code_files_a_saved_model_carries(make_tiny_model, tmp_path):
    from vanilla_transformer.model_dir import save_model_dir

    model = make_tiny_model(0, vocab_size=40)
    model.save_pretrained(tmp_path / "saved")
    saved = sorted(path.name for path in (tmp_path / "saved").glob("*.py"))
    count = re.search(r"``save_pretrained`` copies these (\w+) ``\.py`` files", DOCSTRING)
    assert count and NUMBERS[count.group(1)] == len(saved)
    assert all(f"``{name}``" in DOCSTRING for name in saved), saved
    save_model_dir(model, None, tmp_path / "dir")
    extra = sorted({path.name for path in (tmp_path / "dir").glob("*.py")} - set(saved))
    assert (
        extra == ["pipeline_vanilla_transformer.py"]
        and "carries a sixth, ``pipeline_vanilla_transformer.py``" in DOCSTRING
    )


def test_the_docstring_points_to_where_label_smoothing_lives():
    """Section 5.4's label smoothing: the file named holds the call that smooths the training loss."""
    named = re.search(r"``(accumulate_gradients)`` in ``(vanilla_transformer/training/step.py)``", DOCSTRING)
    assert named
    root = Path(modeling.__file__).resolve().parent.parent
    step = ast.parse((root / named.group(2)).read_text(encoding="utf-8"))
    function = next(n for n in step.body if isinstance(n, ast.FunctionDef) and n.name == named.group(1))
    assert "label_smoothing=label_smoothing" in ast.unparse(function)
