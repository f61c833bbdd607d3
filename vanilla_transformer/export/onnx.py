"""Export to ONNX in the layout transformers.js and Optimum read a Marian model, and translate with onnxruntime
under the paper's beam search.

    export_onnx("runs/multi30k/model", "runs/multi30k-onnx", quantize=True)
    model = load_onnx("runs/multi30k-onnx")                  # an ONNX folder, ready for translate()
    translate(model, model.tokenizer, ["Ein Mann fährt Rad."])  # the package's one beam search, on onnxruntime

The folder holds ``config.json`` (``model_type`` ``marian``: `export_marian`'s configuration, which transformers.js
reads for the layer and head counts and token ids, plus ``"transformers.js_config": {"dtype": "fp32"}``, without
which the browser asks for the int8 files), ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
and the graphs of ``onnx_graphs.py``: ``onnx/encoder_model.onnx`` and ``onnx/decoder_model_merged.onnx``; with
``quantize=True`` also onnxruntime's dynamic int8 ``onnx/*_quantized.onnx``. Optimum names the same files.

The config describes the network for transformers.js; the graphs compute this package's model (its interleaved
positional table included), so the weights are not permuted as `export_marian` permutes them.

``onnx``, ``onnxscript`` and ``onnxruntime`` come with the ``onnx`` extra and are imported when used.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch
from transformers import AutoConfig, PretrainedConfig

from ..atomic import check_output_dir, write_directory
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..extras import import_optional
from ..model_dir import check_model_dir, load_model, load_tokenizer
from .marian import marian_config_from_vanilla, save_tokenizer_for_any_transformers
from .onnx_graphs import CACHE_KINDS, DecoderGraph, EncoderGraph, untraceable
from .web import find_transformers_js, write_page

ENCODER_FILE = "onnx/encoder_model.onnx"
DECODER_FILE = "onnx/decoder_model_merged.onnx"
QUANTIZED_SUFFIX = "_quantized"
"""``onnx/encoder_model_quantized.onnx``: the int8 files' names, as transformers.js asks for them."""

OPSET = 18


def quantized_name(file: str) -> str:
    return file.removesuffix(".onnx") + QUANTIZED_SUFFIX + ".onnx"


def cache_names(layers: int, prefix: str) -> list[str]:
    """``{prefix}.{i}.decoder.key``, ... for every layer, in Optimum's order."""
    return [f"{prefix}.{i}.{kind}" for i in range(layers) for kind in CACHE_KINDS]


def is_onnx_dir(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds an export of `export_onnx` (both graphs and config.json) and no PyTorch weights:
    what ``--force`` may replace, and what ``translate`` serves with onnxruntime."""
    directory = Path(directory)
    return (
        all((directory / name).is_file() for name in (ENCODER_FILE, DECODER_FILE, "config.json"))
        and not (directory / "model.safetensors").exists()
    )


# --------------------------------------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------------------------------------


def export_onnx(
    model: str | os.PathLike | torch.nn.Module,
    output_dir: str | os.PathLike,
    *,
    tokenizer=None,
    quantize: bool = False,
    force: bool = False,
    web: bool = False,
    transformers_js: str | os.PathLike | None = None,
) -> Path:
    """Write `model` as an ONNX folder (see the module docstring), whole and atomically (`write_directory`).

    Args:
        model: A saved model directory (with its tokenizer), or an in-memory model with `tokenizer`.
        output_dir: The folder to write.
        quantize: Also write onnxruntime's dynamic int8 graphs, ``onnx/*_quantized.onnx``.
        force: Replace `output_dir` if it is an ONNX folder written here (never another folder).
        web: Also write the static page that translates in the browser (``export.web.write_page``), with the files
            of the npm package `transformers_js` (``web.find_transformers_js``: by default ``$VANILLA_TRANSFORMER_
            TRANSFORMERS_JS`` or ``./node_modules/@huggingface/transformers``).

    Raises:
        ValueError: If the model's modules compute something the traced graphs would not (`untraceable`: a PEFT
            adapter not merged, a hook), or `output_dir` is not empty and not an ONNX export (or without `force`).
    """
    import_optional("onnxscript", "onnx", "ONNX export")
    output_dir = Path(output_dir)  # checked before any work: exists, is ours, writable, not a link
    if output_dir.is_dir() and not output_dir.is_symlink() and any(output_dir.iterdir()) and not force:
        raise ValueError(f"{output_dir} exists and is not empty: pass force=True (--force) to replace an ONNX export")
    check_output_dir(output_dir, "output_dir", replaceable=is_onnx_dir)
    if web:
        transformers_js = find_transformers_js(transformers_js)  # before the export: a missing package fails at once
    if isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise ValueError("a saved model directory is exported with its own tokenizer: pass no tokenizer")
        check_model_dir(model)
        tokenizer, model = load_tokenizer(model), load_model(model)
    elif tokenizer is None:
        raise ValueError("an in-memory model needs its tokenizer: pass tokenizer=")
    if not isinstance(model.config, VanillaTransformerConfig):
        raise ValueError(f"model_type={model.config.model_type!r}: export-onnx exports vanilla_transformer models")
    problem = untraceable(model)
    if problem:
        raise ValueError(f"cannot export to ONNX: {problem}; the graphs would not compute what the model does")
    model = copy.deepcopy(model).float().eval()  # the caller's model keeps its dtype and mode

    def write(folder: Path) -> None:
        _write_files(model, tokenizer, folder)
        if quantize:
            quantize_onnx(folder)
        if web:
            write_page(folder, transformers_js)

    write_directory(output_dir, write, replaceable=is_onnx_dir, what="output_dir")
    return output_dir


def _write_files(model, tokenizer, folder: Path) -> None:
    config = marian_config_from_vanilla(model.config, model.generation_config).to_dict()
    config["transformers.js_config"] = {"dtype": "fp32"}
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    model.generation_config.save_pretrained(folder)
    save_tokenizer_for_any_transformers(tokenizer, folder)
    (folder / "onnx").mkdir()
    with torch.no_grad():
        _export_encoder(model, folder / ENCODER_FILE)
        _export_decoder(model, folder / DECODER_FILE)


def _export(module, args, path: Path, input_names, output_names, dynamic_shapes) -> None:
    """`torch.onnx.export` with torch.export (dynamo), one self-contained file (no external data)."""
    with warnings.catch_warnings():  # the exporter's notes on dimension names it merged: ours are set as wanted
        warnings.filterwarnings("ignore", message=".*will not be used, since it shares the same shape constraints")
        program = torch.onnx.export(
            module,
            args,
            dynamo=True,
            input_names=input_names,
            output_names=output_names,
            dynamic_shapes=dynamic_shapes,
            opset_version=OPSET,
            external_data=False,
            optimize=True,
            verbose=False,
        )
    program.save(str(path))


_BATCH = "batch_size"  # the name transformers.js fills in when it builds the empty cache of the first step


def _export_encoder(model, path: Path) -> None:
    batch, source = torch.export.Dim(_BATCH), torch.export.Dim("encoder_sequence_length")
    ids = torch.full((2, 5), model.config.eos_token_id, dtype=torch.long)
    mask = torch.ones_like(ids)
    axes = {0: batch, 1: source}
    _export(
        EncoderGraph(model).eval(),
        (ids, mask),
        path,
        ["input_ids", "attention_mask"],
        ["last_hidden_state"],
        {"input_ids": axes, "attention_mask": axes},
    )


def _export_decoder(model, path: Path) -> None:
    """The merged decoder, traced on a cached step (3 cached tokens, 2 new; a cached encoder length that differs
    from the source's, so that the two stay separate dimensions)."""
    config = model.config
    layers, heads = config.decoder_layers, config.decoder_attention_heads
    head_dim = config.d_model // heads
    batch, source = torch.export.Dim(_BATCH), torch.export.Dim("encoder_sequence_length")
    target, past = torch.export.Dim("decoder_sequence_length"), torch.export.Dim("past_decoder_sequence_length")
    past_source = torch.export.Dim("encoder_sequence_length_out")
    ids = torch.full((2, 2), config.eos_token_id, dtype=torch.long)
    mask = torch.ones(2, 5, dtype=torch.long)
    memory = torch.zeros(2, 5, config.d_model)
    cache = [
        torch.zeros(2, heads, 3 if "decoder" in kind else 4, head_dim) for _ in range(layers) for kind in CACHE_KINDS
    ]
    cache_axes = tuple(
        {0: batch, 2: past if "decoder" in k else past_source} for _ in range(layers) for k in CACHE_KINDS
    )
    _export(
        DecoderGraph(model).eval(),
        (ids, mask, memory, torch.tensor([True]), *cache),
        path,
        ["input_ids", "encoder_attention_mask", "encoder_hidden_states", "use_cache_branch"]
        + cache_names(layers, "past_key_values"),
        ["logits", *cache_names(layers, "present")],
        {
            "input_ids": {0: batch, 1: target},
            "encoder_attention_mask": {0: batch, 1: source},
            "encoder_hidden_states": {0: batch, 1: source},
            "use_cache_branch": None,
            "past": cache_axes,
        },
    )


def quantize_onnx(folder: str | os.PathLike) -> None:
    """Write onnxruntime's dynamic int8 copy of both graphs (int8 weights, activations quantized at run time), as
    ``onnx/*_quantized.onnx``."""
    quantization = import_optional("onnxruntime.quantization", "onnx", "int8 ONNX export")
    folder = Path(folder)
    for file in (ENCODER_FILE, DECODER_FILE):
        quantization.quantize_dynamic(
            folder / file, folder / quantized_name(file), weight_type=quantization.QuantType.QInt8
        )


# --------------------------------------------------------------------------------------------------------------------
# Serving with onnxruntime
# --------------------------------------------------------------------------------------------------------------------


class OnnxSeq2SeqModel:
    """An ONNX folder served by onnxruntime on the CPU, as `translate` takes a model: its ``config`` (token ids,
    ``max_position_embeddings``), ``device``, eval mode, and `step_decoder`, on which the package's one beam search
    runs (``decoding.step_decoder`` asks a model for its own). Load it with `load_onnx`."""

    training = False
    device = torch.device("cpu")

    def __init__(self, folder: Path, encoder, decoder, config: PretrainedConfig, tokenizer):
        self.folder, self.encoder, self.decoder = folder, encoder, decoder
        self.config, self.tokenizer = config, tokenizer
        self.layers = config.decoder_layers
        self.heads = config.decoder_attention_heads
        self.head_dim = config.d_model // self.heads

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
    `threads` intra-op threads (0: onnxruntime's default)."""
    ort = import_optional("onnxruntime", "onnx", "serving with onnxruntime")
    folder = Path(folder)
    if not is_onnx_dir(folder):
        raise ValueError(
            f"{folder} is not an ONNX export (no {ENCODER_FILE} and {DECODER_FILE} with config.json): write one with "
            f"vanilla-transformer export-onnx"
        )
    files = [quantized_name(f) if quantized else f for f in (ENCODER_FILE, DECODER_FILE)]
    for file in files:
        if not (folder / file).is_file():
            raise ValueError(f"{folder} has no {file}: export it with --quantize")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    encoder, decoder = (
        ort.InferenceSession(str(folder / file), options, providers=["CPUExecutionProvider"]) for file in files
    )
    config = AutoConfig.from_pretrained(folder, trust_remote_code=False)
    return OnnxSeq2SeqModel(folder, encoder, decoder, config, load_tokenizer(folder))


class OnnxStepDecoder:
    """`StepDecoder` on the merged decoder graph: the encoder runs once, then each step is one run of the decoder on
    the last token of every row, with the cache it returned. Row ``b * beams + j`` is hypothesis j of sentence b;
    the encoder output and mask are repeated for each row, as transformers' beam search does."""

    def __init__(self, model: OnnxSeq2SeqModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, beams: int):
        self.session = model.decoder
        ids, mask = input_ids.cpu().numpy().astype(np.int64), attention_mask.cpu().numpy().astype(np.int64)
        memory = model.encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        rows = np.repeat(np.arange(ids.shape[0]), beams)
        self.past = cache_names(model.layers, "past_key_values")
        self.present = cache_names(model.layers, "present")
        self.feeds = {
            "encoder_hidden_states": memory[rows],
            "encoder_attention_mask": mask[rows],
            "use_cache_branch": np.array([False]),
        }
        empty = np.zeros((rows.size, model.heads, 0, model.head_dim), dtype=np.float32)
        self.feeds.update(dict.fromkeys(self.past, empty))

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits ``[rows, V]`` of the next token after `tokens` ``[rows]``."""
        self.feeds["input_ids"] = tokens.cpu().numpy().astype(np.int64)[:, None]
        logits, *cache = self.session.run(["logits", *self.present], self.feeds)
        self.feeds.update(zip(self.past, cache, strict=True))
        self.feeds["use_cache_branch"] = np.array([True])
        return torch.from_numpy(logits[:, -1])

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep the rows `rows`. The rows of a sentence hold the same encoder output and encoder cache, so while no
        sentence leaves (as many rows kept as there are) those are not copied."""
        index = rows.cpu().numpy()
        moved = [name for name in self.past if ".decoder." in name]
        if index.size != self.feeds["encoder_hidden_states"].shape[0]:
            moved += [name for name in self.past if ".encoder." in name]
            moved += ["encoder_hidden_states", "encoder_attention_mask"]
        for name in moved:
            self.feeds[name] = self.feeds[name][index]


__all__ = [
    "DECODER_FILE",
    "ENCODER_FILE",
    "OnnxSeq2SeqModel",
    "OnnxStepDecoder",
    "cache_names",
    "export_onnx",
    "is_onnx_dir",
    "load_onnx",
    "quantize_onnx",
    "quantized_name",
]
