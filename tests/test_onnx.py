"""ONNX export and serving with onnxruntime (issue 37): the folder transformers.js and Optimum read, the package's one
beam search on an onnxruntime step decoder, the same tokens as ``generate()``, int8, and what the export refuses."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("onnxruntime", reason="the onnx extra (onnxruntime) is not installed")
pytest.importorskip("onnxscript", reason="the onnx extra (onnxscript) is not installed")
import onnx
from copy_task import sentences

from vanilla_transformer.cli import main as cli_main
from vanilla_transformer.decoder_vanilla_transformer import unsupported_modules
from vanilla_transformer.export.onnx import export_onnx
from vanilla_transformer.folder_kinds import DECODER_FILE, ENCODER_FILE, quantized_name
from vanilla_transformer.model_dir import save_model_dir
from vanilla_transformer.serving.search import paper_generation_config, translate, translate_ids
from vanilla_transformer.serving.with_onnxruntime import OnnxStepDecoder, cache_names, load_onnx

SOURCES = sentences(12, seed=5)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, confident_copy_model):
    """The trained copy model saved as a model directory, and its ONNX export with int8 graphs, through the CLI."""
    model, tokenizer = confident_copy_model
    root = tmp_path_factory.mktemp("onnx")
    save_model_dir(model, tokenizer, root / "model", generation_config=paper_generation_config(model.config))
    assert cli_main(["export-onnx", str(root / "model"), str(root / "onnx"), "--quantize"]) == 0
    return root


@pytest.fixture
def onnx_steps(monkeypatch):
    """Counts the onnxruntime decoder's steps: proof that onnxruntime, not PyTorch, decoded."""
    calls = []
    step = OnnxStepDecoder.step

    def counting(self, tokens):
        calls.append(tokens.shape[0])
        return step(self, tokens)

    monkeypatch.setattr(OnnxStepDecoder, "step", counting)
    return calls


def test_the_folder_is_the_layout_transformers_js_reads(exported):
    folder = exported / "onnx"
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "marian" and config["transformers.js_config"] == {"dtype": "fp32"}
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (folder / name).is_file()
    layers = config["decoder_layers"]
    heads, head_dim = config["decoder_attention_heads"], config["d_model"] // config["decoder_attention_heads"]

    def signature(file):
        graph = onnx.load(str(folder / file)).graph
        dims = lambda value: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]  # noqa: E731
        return {v.name: dims(v) for v in graph.input}, {v.name: dims(v) for v in graph.output}

    inputs, outputs = signature(ENCODER_FILE)
    assert list(inputs) == ["input_ids", "attention_mask"] and list(outputs) == ["last_hidden_state"]
    assert all(shape[0] == "batch_size" for shape in [*inputs.values(), *outputs.values()])
    inputs, outputs = signature(DECODER_FILE)
    past = [
        f"past_key_values.{i}.{k}"
        for i in range(layers)
        for k in ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
    ]
    assert list(inputs) == ["input_ids", "encoder_attention_mask", "encoder_hidden_states", "use_cache_branch", *past]
    attentions = [f"cross_attentions.{i}" for i in range(layers)]  # the web page's attention view
    assert list(outputs) == ["logits", *[name.replace("past_key_values", "present") for name in past], *attentions]
    assert all(outputs[name][1] == heads for name in attentions)
    assert all(
        shape[0] == "batch_size" for name, shape in [*inputs.items(), *outputs.items()] if name != "use_cache_branch"
    )
    # transformers.js builds the first step's empty cache from these: every other dimension a number or 0.
    assert all(inputs[name][1] == heads and inputs[name][3] == head_dim for name in past)
    assert inputs["use_cache_branch"] == [1]
    for file in (ENCODER_FILE, DECODER_FILE):
        assert (folder / quantized_name(file)).is_file()


def _merged_session(folder):
    """The exported merged decoder as onnxruntime runs it unchanged: the independent reference of the split graphs."""
    import onnxruntime

    return onnxruntime.InferenceSession(str(folder / DECODER_FILE), providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("split", [True, False])
def test_the_steps_run_with_io_binding_and_give_the_logits_of_the_merged_graph(
    exported, confident_copy_model, monkeypatch, split
):
    """The cache stays in onnxruntime's values between steps (I/O binding ran every step, and the beams' reorder
    ran in onnxruntime's reorder graph at every select), and a step's logits are those of the exported merged graph
    run unchanged on numpy feeds with the cache it returned, reordered in numpy: with the merged graph split
    (`split_merged_decoder`: the memory graph once, then the step graph) and with it served whole."""
    from vanilla_transformer.serving import with_onnxruntime

    if not split:
        monkeypatch.setattr(with_onnxruntime, "split_merged_decoder", lambda model: None)
    _, tokenizer = confident_copy_model
    served = load_onnx(exported / "onnx")
    assert (served.memory is not None) == split
    assert any(i.name == "use_cache_branch" for i in served.decoder.get_inputs()) != split
    merged = _merged_session(exported / "onnx")
    batch = tokenizer(SOURCES[:2], padding=True, return_tensors="pt")
    decoder = served.step_decoder(batch["input_ids"], batch["attention_mask"], 2, 10)
    memory = served.encoder.run(None, {k: batch[k].numpy() for k in ("input_ids", "attention_mask")})[0]
    rows = torch.tensor([0, 0, 1, 1])
    past = cache_names(served.layers, "past_key_values")
    empty = torch.zeros(4, served.heads, 0, served.head_dim).numpy()
    feeds = {"encoder_hidden_states": memory[rows], "encoder_attention_mask": batch["attention_mask"].numpy()[rows]}
    feeds |= dict.fromkeys(past, empty) | {"use_cache_branch": torch.tensor([False]).numpy()}
    tokens = torch.full((4,), served.config.decoder_start_token_id)
    for order in (torch.tensor([1, 0, 3, 2]), torch.tensor([0, 0, 2, 2])):
        logits = decoder.step(tokens)
        feeds["input_ids"] = tokens.numpy()[:, None]
        expected, *cache = merged.run(["logits", *cache_names(served.layers, "present")], feeds)
        torch.testing.assert_close(logits, torch.from_numpy(expected[:, -1]), rtol=1e-5, atol=1e-5)
        decoder.select(order)
        feeds |= {name: value[order.numpy()] for name, value in zip(past, cache, strict=True)}
        feeds["use_cache_branch"] = torch.tensor([True]).numpy()
        tokens = logits.argmax(-1)[order]
    assert decoder.binding_runs == 2 and decoder.reorder_runs == 2


def test_a_merged_graph_of_another_shape_is_served_whole(exported):
    """`split_merged_decoder` splits only the shape it knows: the exported graph splits (its step graph has no If
    and no encoder cache outputs, its memory graph reads the encoder output alone); a copy whose cache branch reads
    another input, or that has no If, is left whole (None), never split wrongly."""
    from vanilla_transformer.serving.onnx_split import split_merged_decoder

    model = onnx.load(str(exported / "onnx" / DECODER_FILE))
    memory, step = (onnx.load_from_string(graph) for graph in split_merged_decoder(model))
    assert [i.name for i in memory.graph.input] == ["encoder_hidden_states"]
    assert all(o.name.startswith("present.") and ".encoder." in o.name for o in memory.graph.output)
    assert "If" not in {node.op_type for node in step.graph.node}
    layers = json.loads((exported / "onnx" / "config.json").read_text())["decoder_layers"]
    decoder_cache = [name for name in cache_names(layers, "present") if ".decoder." in name]
    assert [o.name for o in step.graph.output] == ["logits", *decoder_cache]
    assert not any(".encoder." in o.name or "cross_attentions" in o.name for o in step.graph.output)
    rewired = copy.deepcopy(model)
    branch = next(n for n in rewired.graph.node if n.op_type == "If")
    then_branch = next(a.g for a in branch.attribute if a.name == "then_branch")
    then_branch.node[0].input[0] = "encoder_hidden_states"  # a copy of something else than its cache input
    assert split_merged_decoder(rewired) is None
    flat = copy.deepcopy(model)
    flat.graph.node.remove(next(n for n in flat.graph.node if n.op_type == "If"))
    assert split_merged_decoder(flat) is None


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("num_beams", [1, 4])
def test_onnxruntime_decodes_the_tokens_of_generate(
    exported, confident_copy_model, onnx_steps, num_beams, split, monkeypatch
):
    """The package's one search on onnxruntime gives generate()'s tokens, batched and one sentence at a time, on the
    split graphs and on the merged graph served whole."""
    from vanilla_transformer.serving import with_onnxruntime

    if not split:
        monkeypatch.setattr(with_onnxruntime, "split_merged_decoder", lambda model: None)
    model, tokenizer = confident_copy_model
    served = load_onnx(exported / "onnx")
    assert (served.memory is not None) == split
    generation = paper_generation_config(model.config, num_beams=num_beams)
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    expected = model.generate(**batch, generation_config=generation)
    assert expected.shape[1] > 6  # translations of several tokens, not a degenerate </s>
    assert torch.equal(
        translate_ids(served, batch["input_ids"], batch["attention_mask"], num_beams=num_beams), expected
    )
    assert onnx_steps and onnx_steps[0] == len(SOURCES) * num_beams
    for sentence in SOURCES[:4]:
        one = tokenizer([sentence], return_tensors="pt")
        alone = translate_ids(served, one["input_ids"], one["attention_mask"], num_beams=num_beams)
        assert torch.equal(alone, model.generate(**one, generation_config=generation))
    texts = translate(served, served.tokenizer, SOURCES, num_beams=num_beams, batch_size=5)
    assert texts == translate(model, tokenizer, SOURCES, num_beams=num_beams)


@pytest.fixture(scope="module")
def peaked(tmp_path_factory, make_peaked_model, copy_model):
    """A random model whose distributions are neither flat nor one-hot (long outputs, beams that reorder at every
    step), and its ONNX export."""
    tokenizer = copy_model[1]
    model = make_peaked_model(len(tokenizer), seed=3).train()  # no dropout: the same function in either mode
    folder = export_onnx(model, tmp_path_factory.mktemp("peaked") / "onnx", tokenizer=tokenizer)
    assert model.training  # the caller's model is left as it came (the export traces a copy in eval mode)
    return model.eval(), load_onnx(folder)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_onnxruntime_follows_the_beams_of_generate_on_long_outputs(peaked, copy_model, onnx_steps, num_beams):
    """Outputs of dozens of tokens where the surviving hypotheses change rows at every step: a step decoder that did
    not reorder its cache as the search selects rows would differ (checked by hand on a copy that skips it)."""
    model, served = peaked
    generation = paper_generation_config(model.config, num_beams=num_beams)
    batch = copy_model[1](SOURCES, padding=True, return_tensors="pt")
    expected = model.generate(**batch, generation_config=generation)
    assert expected.shape[1] > 30
    assert torch.equal(
        translate_ids(served, batch["input_ids"], batch["attention_mask"], num_beams=num_beams), expected
    )
    assert onnx_steps


def test_int8_graphs_run_integer_products_and_keep_the_translations(exported, confident_copy_model, onnx_steps):
    model, tokenizer = confident_copy_model
    folder = exported / "onnx"
    operators = {node.op_type for node in onnx.load(str(folder / quantized_name(DECODER_FILE))).graph.node}
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= operators or "DynamicQuantizeMatMul" in operators
    int8 = translate(load_onnx(folder, quantized=True), tokenizer, SOURCES)
    assert onnx_steps
    fp32 = translate(model, tokenizer, SOURCES)
    assert sum(a == b for a, b in zip(int8, fp32, strict=True)) >= len(SOURCES) - 1, (int8, fp32)


def test_translate_and_evaluate_serve_an_onnx_folder(exported, tmp_path, capsys, onnx_steps):
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in SOURCES))
    for model, extra in ((exported / "model", []), (exported / "onnx", []), (exported / "onnx", ["--quantized"])):
        output = tmp_path / f"{model.name}{len(extra)}.txt"
        arguments = ["translate", "--model", str(model), str(tmp_path / "in.txt"), "--output", str(output), *extra]
        assert cli_main(arguments) == 0
    assert (tmp_path / "onnx0.txt").read_text() == (tmp_path / "model0.txt").read_text()
    assert len(onnx_steps) > 0
    arguments = ["evaluate", "--model", str(exported / "onnx"), "--source", str(tmp_path / "in.txt")]
    assert cli_main([*arguments, "--reference", str(tmp_path / "model0.txt"), "--engine", "onnxruntime"]) == 0
    assert "exact match = 100.00%" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("which", "options", "message"),
    [
        ("model", ["--engine", "onnxruntime"], "is not an ONNX export"),
        ("onnx", ["--engine", "torch"], "is an ONNX export"),
        ("model", ["--quantized"], "--quantized goes with --engine onnxruntime"),
        ("onnx", ["--dtype", "bf16"], "the ONNX graphs are float32"),
        ("onnx", ["--device", "cuda"], "--device=cuda"),  # no CUDA here, or: onnxruntime decodes on the CPU
    ],
)
def test_engine_options_that_cannot_work_are_named(exported, tmp_path, capsys, which, options, message):
    (tmp_path / "in.txt").write_text("red dog\n")
    assert cli_main(["translate", "--model", str(exported / which), str(tmp_path / "in.txt"), *options]) == 1
    assert message in capsys.readouterr().err


def test_a_model_with_an_adapter_or_a_hook_is_refused_by_name(copy_model, tmp_path):
    from peft import LoraConfig, get_peft_model

    model, tokenizer = copy_model
    recorded = copy.deepcopy(model)  # transformers' own output recording leaves hooks that change no output
    batch = tokenizer(["red dog"], return_tensors="pt")
    recorded(**batch, decoder_input_ids=batch["input_ids"][:, :1], output_hidden_states=True)
    assert (
        any(module._forward_hooks for module in recorded.modules())
        and unsupported_modules(recorded, traced=True) == ""
    )
    hooked = copy.deepcopy(model)
    hooked.model.decoder.layers[0].fc1.register_forward_hook(lambda module, inputs, output: output * 2)
    with pytest.raises(ValueError, match="forward hook on model.decoder.layers.0.fc1"):
        export_onnx(hooked, tmp_path / "hooked", tokenizer=tokenizer)
    adapted = get_peft_model(copy.deepcopy(model), LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(ValueError, match="PEFT .*merge the adapter first"):
        export_onnx(adapted, tmp_path / "adapted", tokenizer=tokenizer)
    assert not (tmp_path / "hooked").exists() and not (tmp_path / "adapted").exists()


def test_only_an_onnx_export_is_replaced(exported, tmp_path):
    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "todo.txt").write_text("keep me")
    with pytest.raises(ValueError, match="not empty"):
        export_onnx(exported / "model", mine)
    with pytest.raises(ValueError, match="was not written by this program"):
        export_onnx(exported / "model", mine, force=True)
    assert (mine / "todo.txt").read_text() == "keep me"
    with pytest.raises(ValueError, match="the model being exported"):  # the model itself
        export_onnx(exported / "model", exported / "model", force=True)
    assert (exported / "model" / "model.safetensors").is_file()


def test_the_cache_names_follow_optimum():
    assert cache_names(1, "present") == [
        "present.0.decoder.key",
        "present.0.decoder.value",
        "present.0.encoder.key",
        "present.0.encoder.value",
    ]


def test_the_page_without_transformers_js_fails_before_exporting(copy_model, tmp_path, monkeypatch):
    monkeypatch.delenv("VANILLA_TRANSFORMER_TRANSFORMERS_JS", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./node_modules here
    model, tokenizer = copy_model
    with pytest.raises(ValueError, match="npm install --ignore-scripts @huggingface/transformers"):
        export_onnx(model, tmp_path / "site", tokenizer=tokenizer, web=True)
    assert not (tmp_path / "site").exists()


def test_export_prints_no_notes_of_the_libraries_underneath(exported, tmp_path):
    """export-onnx --quantize, as a user runs it: none of torch.onnx's torchvision lines, torch's LeafSpec deprecation
    or onnxruntime's pre-processing advice (they say nothing about the export). A new process, so that no warning
    was already shown once."""
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from vanilla_transformer.cli import main; sys.exit(main(sys.argv[1:]))"]
        + ["export-onnx", str(exported / "model"), str(tmp_path / "onnx"), "--quantize"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "onnx" / quantized_name(DECODER_FILE)).is_file()
    for note in ("torchvision is not installed", "LeafSpec", "pre-processing"):
        assert note not in run.stdout + run.stderr
