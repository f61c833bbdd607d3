"""Serving with onnxruntime: an ONNX folder (``export.onnx.export_onnx``) as a model the package's one beam search
runs on, and the folder's layout, which the exporter writes and this module reads.

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
from ..model_dir import load_tokenizer

ENCODER_FILE = "onnx/encoder_model.onnx"
DECODER_FILE = "onnx/decoder_model_merged.onnx"
QUANTIZED_SUFFIX = "_quantized"
"""``onnx/encoder_model_quantized.onnx``: the int8 files' names, as transformers.js asks for them."""

CACHE_KINDS = ("decoder.key", "decoder.value", "encoder.key", "encoder.value")
"""The four cache tensors of each decoder layer, in Optimum's order."""


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


class OnnxSeq2SeqModel:
    """An ONNX folder served by onnxruntime on the CPU, as `translate` takes a model: its ``config`` (token ids,
    ``max_position_embeddings``), ``device``, eval mode, and `step_decoder`, on which the package's one beam search
    runs (``serving.step_decoders.step_decoder`` asks a model for its own). Load it with `load_onnx`."""

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
    "CACHE_KINDS",
    "DECODER_FILE",
    "ENCODER_FILE",
    "OnnxSeq2SeqModel",
    "OnnxStepDecoder",
    "cache_names",
    "is_onnx_dir",
    "load_onnx",
    "quantized_name",
]
