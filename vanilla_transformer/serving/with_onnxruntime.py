"""Serving with onnxruntime: an ONNX folder (``export.onnx.export_onnx``) as a model the package's one beam search
runs on. The folder's layout, which the exporter writes and this module reads, is
``vanilla_transformer.folder_kinds``'s.

    model = load_onnx("runs/multi30k-onnx")                  # an ONNX folder, ready for translate()
    translate(model, model.tokenizer, ["Ein Mann fährt Rad."])  # serving.search.translate, on onnxruntime

The folder is laid out as transformers.js and Optimum read a Marian model: ``config.json``, the tokenizer, and the
graphs ``onnx/encoder_model.onnx`` and ``onnx/decoder_model_merged.onnx`` (the merged decoder's cache named as
Optimum names it, `cache_names`), with int8 copies ``onnx/*_quantized.onnx`` where it was exported with
``--quantize``.

``onnxruntime`` comes with the ``onnx`` extra and is imported when a folder is loaded.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, PretrainedConfig

from ..extras import import_optional
from ..folder_kinds import DECODER_FILE, ENCODER_FILE, is_onnx_dir, quantized_name
from ..model_checks import check_no_foreign_code
from ..model_dir import check_model_files, load_tokenizer
from ..reading import check_links_inside, note_read
from ..tokenization import check_tokenizer_matches_config
from .onnx_split import split_merged_decoder

CACHE_KINDS = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
"""The four cache tensors of each decoder layer, in Optimum's order."""


def cache_names(layers: int, prefix: str) -> list[str]:
    """``{prefix}.{i}.decoder.key``, ... for every layer, in Optimum's order."""
    return [f"{prefix}.{i}.{kind}" for i in range(layers) for kind in CACHE_KINDS]


class OnnxSeq2SeqModel:
    """An ONNX folder served by onnxruntime on the CPU, as `translate` takes a model: its ``config`` (token ids,
    ``max_position_embeddings``), ``device``, eval mode, and `step_decoder`, on which the package's one beam search
    runs (``serving.step_decoders.step_decoder`` asks a model for its own). Load it with `load_onnx`."""

    training = False
    device = torch.device("cpu")

    def __init__(self, folder: Path, encoder, decoder, config: PretrainedConfig, tokenizer, options=None, memory=None):
        self.folder, self.encoder, self.decoder, self.memory = folder, encoder, decoder, memory
        self.config, self.tokenizer = config, tokenizer
        self.layers = config.decoder_layers
        self.heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.heads
        self.options = options
        self._reorder = None

    @property
    def reorder(self):
        """The session of `reorder_graph` for this model's self-attention cache, made when a search first reorders
        its beams (with the decoder's session options)."""
        if self._reorder is None:
            ort = import_optional("onnxruntime", "onnx", "serving with onnxruntime")
            graph = reorder_graph(len(decoder_cache_names(self.layers, "past_key_values")))
            options = self.options if self.options is not None else ort.SessionOptions()
            self._reorder = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        return self._reorder

    def eval(self) -> OnnxSeq2SeqModel:
        return self

    def train(self, mode: bool = True) -> OnnxSeq2SeqModel:
        if mode:
            raise ValueError("an ONNX model decodes only: it has no training mode")
        return self

    def step_decoder(self, input_ids, attention_mask, beams: int, max_steps: int) -> OnnxStepDecoder:
        return OnnxStepDecoder(self, input_ids, attention_mask, beams)


def load_onnx(folder: str | os.PathLike, *, quantized: bool = False, threads: int = 0) -> OnnxSeq2SeqModel:
    """The ONNX folder `folder` (`export_onnx`), its int8 graphs if `quantized`, on onnxruntime's CPU provider with
    `threads` intra-op threads (0: onnxruntime's default). Nothing is opened before the folder passes
    `check_onnx_dir`: no link out of it, JSON files that parse, graphs that fit its config.json and the tokenizer."""
    ort = import_optional("onnxruntime", "onnx", "serving with onnxruntime")
    folder = Path(folder)
    files = [quantized_name(f) if quantized else f for f in (ENCODER_FILE, DECODER_FILE)]
    config = check_onnx_dir(folder, files)
    note_read(folder, f"the ONNX folder {folder}")  # an output must not replace it (`vanilla_transformer.reading`)
    tokenizer = load_tokenizer(folder)
    try:  # before any graph is opened: the check of the PyTorch path (`model_dir.load_model_dir`)
        check_tokenizer_matches_config(tokenizer, config)
    except ValueError as error:
        raise ValueError(f"{folder}: its tokenizer does not fit its config.json ({error}); {EXPORT_AGAIN}") from error
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # No spinning: onnxruntime's idle threads otherwise spin after every run, on the cores where the search's PyTorch
    # operations run next between the steps; on 2 vCPUs that made the beam search's own operations many times slower
    # (issue 44: greedy 5.8 s -> 2.5 s, beam 4 10.0 s -> 6.0 s on the benchmark's small model).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    encoder = _session(ort, folder / files[0], options)
    decoder, memory = _decoder_sessions(ort, folder / files[1], options)
    return OnnxSeq2SeqModel(folder, encoder, decoder, config, tokenizer, options, memory)


def _decoder_sessions(ort, path: Path, options):
    """The sessions of the merged decoder `path`, split (`onnx_split.split_merged_decoder`): (step graph, memory
    graph); or, where the graph does not split, (the merged graph, None)."""
    onnx = import_optional("onnx", "onnx", "serving with onnxruntime")
    split = split_merged_decoder(onnx.load(str(path)))
    if split is None:
        return _session(ort, path, options), None
    memory, step = (
        _session(ort, graph, options, name=f"{path} ({part} graph)")
        for graph, part in zip(split, ("memory", "step"), strict=True)
    )
    return step, memory


def reorder_graph(count: int) -> bytes:
    """A graph that keeps rows of `count` tensors: inputs ``rows`` ``[kept]`` (int64) and ``cache.i``
    ``[rows, heads, length, head_dim]`` (float), outputs ``kept.i = cache.i[rows]``; a layer's self- or
    cross-attention keys and values, 2 per layer. The beams' reorder runs in
    onnxruntime on the values the decoder returned, so the cache is copied once, never read out into numpy."""
    from onnx import TensorProto, helper

    shape = ["rows", "heads", "length", "head_dim"]
    inputs = [helper.make_tensor_value_info("rows", TensorProto.INT64, ["kept"])]
    inputs += [helper.make_tensor_value_info(f"cache.{i}", TensorProto.FLOAT, shape) for i in range(count)]
    outputs = [
        helper.make_tensor_value_info(f"kept.{i}", TensorProto.FLOAT, ["kept", *shape[1:]]) for i in range(count)
    ]
    nodes = [helper.make_node("Gather", [f"cache.{i}", "rows"], [f"kept.{i}"], axis=0) for i in range(count)]
    graph = helper.make_graph(nodes, "reorder_beams", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


def decoder_cache_names(layers: int, prefix: str) -> list[str]:
    """The self-attention part of `cache_names`: what grows at each step and follows the beams."""
    return [name for name in cache_names(layers, prefix) if ".decoder." in name]


EXPORT_AGAIN = "export the model directory again with vanilla-transformer export-onnx"
"""What the errors of a damaged ONNX folder tell the user to do."""


def check_onnx_dir(folder: Path, files: list[str]) -> PretrainedConfig:
    """The config of the ONNX folder `folder`, once the folder is known to be what `export_onnx` writes, before any
    graph is opened by onnxruntime: an ONNX export (`is_onnx_dir`) with `files`, no link out of it
    (`check_links_inside`), JSON files that parse (`check_model_files`), no code of its own to run
    (`check_no_foreign_code`), and graphs that fit its config.json (`check_graph`). A ValueError naming the file and what to do."""
    if not is_onnx_dir(folder):
        raise ValueError(
            f"{folder} is not an ONNX export (no {ENCODER_FILE} and {DECODER_FILE} with config.json): write one with "
            f"vanilla-transformer export-onnx"
        )
    check_links_inside(folder, "ONNX folder")
    for file in files:
        if not (folder / file).is_file():
            raise ValueError(f"{folder} has no {file}: export it with --quantize")
    check_model_files(folder)
    check_no_foreign_code(folder)  # one line naming the code, before transformers is asked (its answer is 3 lines)
    try:
        config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{folder / 'config.json'} does not describe a model ({error}); {EXPORT_AGAIN}") from error
    for file in files:
        check_graph(folder, file, config)
    return config


def check_graph(folder: Path, file: str, config: PretrainedConfig) -> None:
    """Refuse, naming the file, a graph that is not ONNX, keeps weights in a file outside `folder`, or disagrees with
    `config` (``d_model``, ``vocab_size``, ``max_position_embeddings``, ``decoder_layers``,
    ``decoder_attention_heads``): what onnxruntime would refuse, or fail on, as a traceback mid-translation."""
    onnx = import_optional("onnx", "onnx", "serving with onnxruntime")
    path = folder / file
    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception as error:  # a file that is not ONNX: protobuf's DecodeError, or onnx's own
        raise ValueError(f"{path} is not an ONNX graph ({type(error).__name__}): {EXPORT_AGAIN}") from error
    inside = folder.resolve()
    for tensor in _tensors(graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        location = {entry.key: entry.value for entry in tensor.external_data}.get("location", "")
        target = (path.parent / location).resolve()
        if inside not in target.parents:
            raise ValueError(
                f"{path} keeps the weight {tensor.name} in {location}, outside the ONNX folder {folder}: a folder's "
                f"graphs read only its own files; {EXPORT_AGAIN}"
            )
    d_model, heads = config.d_model, config.decoder_attention_heads
    for tensor in graph.initializer:
        rows = list(tensor.dims)[:1]
        if tensor.name.endswith("embed_positions.pe"):
            setting, fits = "max_position_embeddings", rows and rows[0] >= config.max_position_embeddings
        elif tensor.name in ("encoder.embed_tokens.weight", "lm_head.weight"):
            setting, fits = "vocab_size", rows == [config.vocab_size]
        else:
            continue
        if not fits or list(tensor.dims)[1:] != [d_model]:
            raise ValueError(
                f"{path}: {tensor.name} has shape {list(tensor.dims)}, which does not fit {setting}="
                f"{getattr(config, setting)} and d_model={d_model} of {folder / 'config.json'}: {EXPORT_AGAIN}"
            )
    if file.startswith(DECODER_FILE.removesuffix(".onnx")):
        _check_cache_inputs(path, graph, config, heads, d_model)


def _check_cache_inputs(path: Path, graph, config: PretrainedConfig, heads: int, d_model: int) -> None:
    """The merged decoder takes the cache of ``decoder_layers`` layers, each ``[batch, heads, length, head_dim]``."""
    names = [value.name for value in graph.input if value.name.startswith("past_key_values.")]
    if names != cache_names(config.decoder_layers, "past_key_values"):
        raise ValueError(
            f"{path} takes the cache of {len(names) // len(CACHE_KINDS)} decoder layers, its config.json declares "
            f"decoder_layers={config.decoder_layers}: {EXPORT_AGAIN}"
        )
    head_dim = d_model // heads if heads and d_model % heads == 0 else None
    for value in graph.input:
        if value.name in names:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
            if len(dims) != 4 or dims[1] != heads or dims[3] != head_dim:
                raise ValueError(
                    f"{path}: {value.name} has shape {dims}, its config.json declares decoder_attention_heads={heads} "
                    f"of {head_dim} dimensions (d_model={d_model}): {EXPORT_AGAIN}"
                )


def _tensors(graph):
    """Every tensor of `graph` and its subgraphs (the merged decoder's branches): initializers and constants."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            yield from ([attribute.t] if attribute.HasField("t") else [])
            yield from attribute.tensors
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _tensors(subgraph)


def _session(ort, graph: Path | bytes, options, name: str | None = None):
    """onnxruntime's session of the graph `graph` (a file, or a serialized graph called `name`); what onnxruntime
    refuses is one line naming the file."""
    try:
        source = graph if isinstance(graph, bytes) else str(graph)
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's own exception classes (Fail, InvalidGraph, ...), not exported
        first = (str(error).strip().splitlines() or [""])[0]
        raise ValueError(f"{name or graph} does not load in onnxruntime ({first}): {EXPORT_AGAIN}") from error


class OnnxStepDecoder:
    """`StepDecoder` on the decoder graphs: the encoder runs once, then each step is one run of the decoder on the
    last token of every row, with the cache it returned. Row ``b * beams + j`` is hypothesis j of sentence b; the
    encoder output and mask are repeated for each row, as transformers' beam search does.

    Where the merged decoder split (`onnx_split.split_merged_decoder`, the model's ``memory`` session), the memory
    graph computes every layer's cross-attention keys and values once per sentence, repeated for its beams, and
    every step runs the step graph; otherwise the merged graph serves whole, and its first step computes them.

    The steps run with I/O binding: the cache stays in the values onnxruntime wrote (``self.values``, name ->
    ``OrtValue``) and is bound as the next step's input, never copied out into numpy. Only the logits are read out
    (``binding_runs`` counts the bound runs). Following the beams (`select`) runs the model's `reorder_graph` on
    those values, bound the same way: the cache is gathered once inside onnxruntime (``reorder_runs`` counts those
    runs), as PyTorch's decoder does with one ``index_select``; the encoder's cache too when sentences leave."""

    def __init__(self, model: OnnxSeq2SeqModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, beams: int):
        self.session, self.model = model.decoder, model
        self.ort = import_optional("onnxruntime", "onnx", "serving with onnxruntime")
        ids, mask = input_ids.cpu().numpy().astype(np.int64), attention_mask.cpu().numpy().astype(np.int64)
        memory = model.encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        rows = np.repeat(np.arange(ids.shape[0]), beams)
        self.past = cache_names(model.layers, "past_key_values")
        self.present = cache_names(model.layers, "present")
        inputs = {value.name for value in self.session.get_inputs()}
        arrays = {"encoder_hidden_states": memory[rows], "encoder_attention_mask": mask[rows]}
        self.arrays = {name: array for name, array in arrays.items() if name in inputs}
        empty = np.zeros((rows.size, model.heads, 0, model.head_dim), dtype=np.float32)
        self.values = {name: self._value(empty) for name in self.past}
        self.first = model.memory is None  # the merged graph's first step computes the encoder's keys and values
        if model.memory is not None:  # the split graphs: computed once, per sentence, then repeated for its beams
            names = [output.name for output in model.memory.get_outputs()]
            projected = model.memory.run(names, {"encoder_hidden_states": memory})
            past = [name.replace("present.", "past_key_values.", 1) for name in names]
            self.values.update((name, self._value(array[rows])) for name, array in zip(past, projected, strict=True))
        self.binding_runs = self.reorder_runs = 0
        self.binding = self.session.io_binding()  # one binding for every step: its inputs and outputs bound again
        self.reorder_binding = None  # the same for the reorder graph, made at the first `select`
        for name, array in self.arrays.items():
            self.binding.bind_cpu_input(name, array)

    def _value(self, array: np.ndarray):
        """`array` as an OrtValue on the CPU (onnxruntime reads the array's memory, kept alive by the value)."""
        return self.ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` of the next token after `tokens` ``[rows]``."""
        binding = self.binding
        binding.bind_cpu_input("input_ids", tokens.cpu().numpy().astype(np.int64)[:, None])
        if self.model.memory is None:
            binding.bind_cpu_input("use_cache_branch", np.array([not self.first]))
        for name, value in self.values.items():
            binding.bind_ortvalue_input(name, value)
        wanted = ["logits"] + [name for name in self.present if self.first or ".decoder." in name]
        binding.clear_binding_outputs()
        for name in wanted:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        self.binding_runs += 1
        logits, *cache = binding.get_outputs()
        past = [name.replace("present.", "past_key_values.", 1) for name in wanted[1:]]
        self.values.update(zip(past, cache, strict=True))
        self.first = False
        return torch.from_numpy(logits.numpy()[:, -1])

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep the rows `rows`. The rows of a sentence hold the same encoder output and encoder cache, so while no
        sentence leaves (as many rows kept as there are) those are not copied."""
        index = np.ascontiguousarray(rows.cpu().numpy().astype(np.int64))
        self._gather(decoder_cache_names(self.model.layers, "past_key_values"), index)
        if index.size != self.arrays["encoder_attention_mask"].shape[0]:
            for name in self.arrays:
                self.arrays[name] = self.arrays[name][index]
                self.binding.bind_cpu_input(name, self.arrays[name])
            self._gather([name for name in self.past if ".encoder." in name], index)

    def _gather(self, names: list[str], index: np.ndarray) -> None:
        """The cache values `names` (one per `reorder_graph` input), kept at rows `index` by the reorder graph on the
        values bound where they are."""
        session = self.model.reorder
        if self.reorder_binding is None:
            self.reorder_binding = session.io_binding()
        binding = self.reorder_binding
        binding.clear_binding_outputs()
        binding.bind_cpu_input("rows", index)
        for i, name in enumerate(names):
            binding.bind_ortvalue_input(f"cache.{i}", self.values[name])
            binding.bind_output(f"kept.{i}", "cpu")
        session.run_with_iobinding(binding)
        self.reorder_runs += 1
        self.values.update(zip(names, binding.get_outputs(), strict=True))


__all__ = [
    "CACHE_KINDS",
    "OnnxSeq2SeqModel",
    "EXPORT_AGAIN",
    "OnnxStepDecoder",
    "cache_names",
    "check_graph",
    "check_onnx_dir",
    "load_onnx",
]
