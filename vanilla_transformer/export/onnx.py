"""Export to ONNX in the layout transformers.js and Optimum read a Marian model; onnxruntime serves the folder
(``serving.with_onnxruntime``), and so do transformers.js and Optimum.

    export_onnx("runs/multi30k/model", "runs/multi30k-onnx", quantize=True)

The folder holds ``config.json`` (``model_type`` ``marian``: `export_marian`'s configuration, which transformers.js
reads for the layer and head counts and token ids, plus ``"transformers.js_config": {"dtype": "fp32"}``, without
which the browser asks for the int8 files), ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
and the graphs of ``onnx_graphs.py``: ``onnx/encoder_model.onnx`` and ``onnx/decoder_model_merged.onnx``; with
``quantize=True`` also onnxruntime's dynamic int8 ``onnx/*_quantized.onnx``. Optimum names the same files; the
names, and what a folder must hold (`is_onnx_dir`), are ``vanilla_transformer.folder_kinds``'s.

The config describes the network for transformers.js; the graphs compute this package's model (its interleaved
positional table included), so the weights are not permuted as `export_marian` permutes them.

``onnx``, ``onnxscript`` and ``onnxruntime`` (its quantizer) come with the ``onnx`` extra and are imported when
used.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import warnings
from pathlib import Path

import torch

from ..atomic import write_directory
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..decoder_vanilla_transformer import unsupported_modules
from ..extras import import_optional
from ..folder_kinds import DECODER_FILE, ENCODER_FILE, is_onnx_dir, quantized_name
from ..model_dir import load_model_dir
from ..serving.with_onnxruntime import CACHE_KINDS, cache_names
from ..tokenization import check_tokenizer_matches_config
from ..written import first_foreign, record_written
from . import check_export_dir
from .marian import marian_config_from_vanilla, save_tokenizer_for_any_transformers
from .onnx_graphs import DecoderGraph, EncoderGraph
from .web import find_transformers_js, write_page

OPSET = 18


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
        force: Replace `output_dir` if it is an ONNX folder written here and holds nothing else (`is_onnx_export`;
            never another folder, nor the model being exported, a folder holding it or one inside it).
        web: Also write the static page that translates in the browser (``export.web.write_page``), with the files
            of the npm package `transformers_js` (``web.find_transformers_js``: by default ``$VANILLA_TRANSFORMER_
            TRANSFORMERS_JS`` or ``./node_modules/@huggingface/transformers``).

    Raises:
        ValueError: If the model's modules compute something the traced graphs would not (`unsupported_modules`:
            a PEFT adapter not merged, a hook), or `output_dir` is not empty and not an ONNX export (or without `force`).
    """
    import_optional("onnxscript", "onnx", "ONNX export")
    if quantize:
        import_optional("onnxruntime.quantization", "onnx", "int8 ONNX export")
    output_dir = Path(output_dir)  # checked before any work: exists, is ours, writable, not a link
    source = Path(model) if isinstance(model, (str, os.PathLike)) else None
    check_export_dir(output_dir, force, ONNX_KIND, "an ONNX export", names=ONNX_FILES, source=source)
    if web:
        transformers_js = find_transformers_js(transformers_js)  # before the export: a missing package fails at once
    if isinstance(model, (str, os.PathLike)):
        if tokenizer is not None:
            raise ValueError("a saved model directory is exported with its own tokenizer: pass no tokenizer")
        model, tokenizer = load_model_dir(model)  # checked, and the tokenizer fits the model, as for translate
    elif tokenizer is None:
        raise ValueError("an in-memory model needs its tokenizer: pass tokenizer=")
    else:
        check_tokenizer_matches_config(tokenizer, model.config)  # every token id has an embedding
    if not isinstance(model.config, VanillaTransformerConfig):
        raise ValueError(f"model_type={model.config.model_type!r}: export-onnx exports vanilla_transformer models")
    problem = unsupported_modules(model, traced=True)
    if problem:
        raise ValueError(f"cannot export to ONNX: {problem}; the graphs would not compute what the model does")
    model = copy.deepcopy(model).float().eval()  # the caller's model keeps its dtype and mode

    def write(folder: Path) -> None:
        _write_files(model, tokenizer, folder)
        if quantize:
            quantize_onnx(folder)
        if web:
            write_page(folder, transformers_js)
        record_written(folder, ONNX_KIND, ONNX_FILES)

    write_directory(output_dir, write, replaceable=is_onnx_export, what="output_dir")
    return output_dir


ONNX_KIND = "export-onnx"
"""What `export_onnx` records as the writer of its folder (`written.record_written`)."""

ONNX_FILES = (
    *("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"),
    *("vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja"),
    *("onnx/*.onnx", "onnx/*.onnx.data", "onnx/*.onnx_data"),
    *("index.html", "translate.js", "search.js", "attention.js", "js/*"),
)
"""The names of the files `export_onnx` writes (with ``--quantize`` and ``--web``): what ``--force`` may delete, with
the manifest's word."""


def is_onnx_export(directory: str | os.PathLike) -> bool:
    """Whether `directory` is an ONNX folder (`is_onnx_dir`) holding only what `export_onnx` wrote there, by its
    manifest (`written.first_foreign`): what ``--force`` may replace. A folder with anything else in it (a ``.git``,
    a README, a file added under ``js/``, a graph changed since) is a user's, and is never deleted."""
    return is_onnx_dir(directory) and first_foreign(directory, ONNX_KIND, ONNX_FILES) is None


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


_LIBRARY_NOTES = (
    "torchvision is not installed",  # torch.onnx's registry, on torchvision's operators, which the model has none of
    "Please consider to run pre-processing before quantization",  # onnxruntime's quantizer: a shape-inference pass
    "Please consider pre-processing before quantization",  # that dynamic int8 weights do not need
)


class _DropNotes(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_LIBRARY_NOTES)


@contextlib.contextmanager
def _quiet_libraries():
    """Without the notes of the libraries underneath that say nothing about this export: torch.onnx's on
    torchvision, torch.export's deprecation of ``LeafSpec`` (inside torch), onnxruntime's advice to pre-process
    before quantizing, and the exporter's notes on dimension names it merged (ours are set as wanted)."""
    loggers = [logging.getLogger(), logging.getLogger("torch.onnx._internal.exporter._registration")]
    drop = _DropNotes()
    for logger in loggers:
        logger.addFilter(drop)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*will not be used, since it shares the same shape constraints")
            warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\)", category=FutureWarning)
            yield
    finally:
        for logger in loggers:
            logger.removeFilter(drop)


def _export(module, args, path: Path, input_names, output_names, dynamic_shapes) -> None:
    """`torch.onnx.export` with torch.export (dynamo), one self-contained file (no external data)."""
    with _quiet_libraries():
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
        ["logits", *cache_names(layers, "present"), *(f"cross_attentions.{i}" for i in range(layers))],
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
        with _quiet_libraries():
            quantization.quantize_dynamic(
                folder / file, folder / quantized_name(file), weight_type=quantization.QuantType.QInt8
            )


__all__ = ["ONNX_KIND", "export_onnx", "is_onnx_export", "quantize_onnx"]
