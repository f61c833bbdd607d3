"""What the translate and evaluate commands share: their decoding options (section 6.1's search, batching, device,
precision), filled in from the model's own generation config, the translation they run, and how they read text.

    add_decoding_arguments(parser)        # --num-beams, --length-penalty, --max-length-offset, --batch-size, ...
    check_decoding_arguments(args)        # refuse what cannot work, naming the option, before anything is read
    translate_with_options(args, lines)   # load args.model, fill in the model's search, translate
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..constants import DECODING_DTYPES, LENGTH_PENALTY, MAX_LENGTH_OFFSET, NUM_BEAMS
from ..folder_kinds import is_onnx_dir
from ..parsing import Range, check_input_path, thread_range

if TYPE_CHECKING:
    from transformers import GenerationConfig

# torch, transformers and the modules that import them load when a command runs, not for its --help.

STDIN = "-"
"""The file name that stands for standard input."""


def read_input_lines(path: str | os.PathLike[str], option: str) -> list[str]:
    """The lines of the UTF-8 text at `path`, as `read_text_lines` reads them: split on ``"\\n"`` only, CRLF line ends
    and a byte-order mark dropped, a carriage return inside a line read as a space, a line or an input too long for
    memory refused before it is read whole; errors name ``<stdin>`` or the option and file, and the line.

    `path` may be a regular file, a pipe or FIFO (``<(head -n 5 ref.txt)``, ``/dev/fd/63``, ``mkfifo``), a
    character device, or ``-`` for standard input. `option` is the command-line argument that named it (e.g.
    ``--reference``), named in every error.

    Raises:
        FileNotFoundError: If nothing is at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: If it cannot be read.
        ValueError: If it is not UTF-8 text (naming the line), or too large (naming the limit).
    """
    from ..data import read_text_lines
    from ..reading import note_read

    note_read(path, f"the input {option}={path}")  # what an output must not replace (`reading`)
    if str(path) == STDIN:
        stream = sys.stdin.buffer if hasattr(sys.stdin, "buffer") else io.BytesIO(sys.stdin.read().encode("utf-8"))
        return read_text_lines(stream, "<stdin>")
    check_input_path(path, option)
    name, file = f"{option}={path}", Path(path)
    try:
        return read_text_lines(file, name)
    except OSError as error:
        raise OSError(f"{name} cannot be read: {error.strerror or error}") from error


ENGINES = ("torch", "onnxruntime")
"""What ``--engine`` offers: this package's PyTorch model, or its ONNX export on onnxruntime; the same search."""


def decoding_dtype(name: str):
    """The torch dtype of a ``--dtype`` name of `DECODING_DTYPES`: float32, bfloat16 or float16."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The decoding options the translate and evaluate scripts share: section 6.1's search, batching, device."""
    model_default = "default: the model's generation_config.json, else section 6.1's"
    parser.add_argument("--num-beams", type=Range(int, 1), help=f"beam size ({model_default}: {NUM_BEAMS})")
    parser.add_argument(
        "--length-penalty", type=Range(float, 0), help=f"GNMT alpha ({model_default}: {LENGTH_PENALTY})"
    )
    parser.add_argument(
        "--max-length-offset",
        type=Range(int, 0),
        help=f"at most input length + this ({model_default}: {MAX_LENGTH_OFFSET})",
    )
    parser.add_argument(
        "--batch-size", type=Range(int, 1), default=32, help="sentences per batch (default: %(default)s)"
    )
    parser.add_argument(
        "--device",
        help="default: cuda where there is one, else cpu; with --engine onnxruntime, cpu (the only one)",
    )
    parser.add_argument(
        "--num-threads",
        type=thread_range(),
        help="CPU threads, at most this machine's processors (default: torch's); 1 is fastest on a CPU busy with other work",
    )
    parser.add_argument(
        "--dtype",
        choices=list(DECODING_DTYPES),
        default="fp32",
        help="precision of the weights and activations while decoding (default: %(default)s). bf16 is faster on GPUs "
        "and on CPUs with AVX-512 BF16 or AMX, and may change some translations: docs/decoding.md gives BLEU against fp32",
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        help="what runs the model under the paper's search: torch (a model directory) or onnxruntime (a folder of "
        "vanilla-transformer export-onnx); default: onnxruntime for such a folder, else torch",
    )
    parser.add_argument(
        "--quantized",
        action="store_true",
        help="with onnxruntime: the int8 graphs (written by export-onnx --quantize)",
    )


def check_decoding_arguments(args: argparse.Namespace) -> None:
    """Reject, before any file or model is read, the search options of `add_decoding_arguments` that cannot work
    (`check_search_settings`), a ``--batch-size`` or ``--num-threads`` below 1, a ``--device`` this machine does not
    have, ``--quantized`` with ``--engine torch``, and a ``--dtype`` or ``--device`` onnxruntime does not run: a
    ValueError naming the option. What the model folder decides is checked when it is read (`resolve_engine`)."""
    import torch

    from ..serving.search import check_search_settings

    search = {name: getattr(args, name) for name in ("num_beams", "length_penalty", "max_length_offset")}
    check_search_settings(flag=True, **search)
    for option, value in (("--batch-size", args.batch_size), ("--num-threads", args.num_threads)):
        if value is not None and value < 1:
            raise ValueError(f"{option} must be at least 1, got {option}={value}")
    if args.engine == "torch" and args.quantized:
        raise ValueError("--quantized goes with --engine onnxruntime (an ONNX export's int8 graphs)")
    if args.engine == "onnxruntime":
        _check_onnxruntime_options(args)
    if args.device is None:  # chosen with the engine (`resolve_engine`)
        return
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"--device={args.device} is not a device (cpu, cuda, cuda:1, mps, ...): {error}") from error
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"--device={args.device}: no such CUDA device here; use --device cpu")


def resolve_engine(args: argparse.Namespace) -> None:
    """Fill in ``--engine`` from the folder ``args.model`` (onnxruntime for an ONNX export, else torch) and
    ``--device``; refuse, naming the folder or option, what cannot work: the other engine's folder, ``--quantized``
    without an ONNX export, or a ``--dtype`` or ``--device`` onnxruntime does not run here."""
    import torch

    onnx = is_onnx_dir(args.model)
    args.engine = args.engine or ("onnxruntime" if onnx else "torch")
    if args.engine == "torch":
        if onnx:
            raise ValueError(f"--model={args.model} is an ONNX export: it decodes with --engine onnxruntime")
        if args.quantized:
            raise ValueError("--quantized goes with --engine onnxruntime (an ONNX export's int8 graphs)")
        args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return
    if not onnx:
        raise ValueError(
            f"--model={args.model} is not an ONNX export (no onnx/encoder_model.onnx): write one with "
            f"vanilla-transformer export-onnx, or decode it with --engine torch"
        )
    _check_onnxruntime_options(args)
    args.device = "cpu"


def _check_onnxruntime_options(args: argparse.Namespace) -> None:
    if args.dtype != "fp32":
        raise ValueError(f"--dtype {args.dtype}: the ONNX graphs are float32 (--quantized: int8)")
    if args.device not in (None, "cpu"):
        raise ValueError(f"--device={args.device}: onnxruntime decodes on the CPU here; pass --device cpu")


def resolve_search_arguments(args: argparse.Namespace, generation_config: GenerationConfig | None) -> None:
    """Fill in the search options of `add_decoding_arguments` that were not given (None), in place: from
    `generation_config` when it asks for section 6.1's search (`paper_generation_config`, which ``train`` exports
    with the run's beam size, alpha and offset), else section 6.1's beam 4, alpha 0.6 and input length + 50. So the
    command line translates with the search ``model.generate()`` runs and the training run scored. A value of
    `generation_config` that cannot work raises a ValueError naming the field and the option that overrides it."""
    from ..generation_vanilla_transformer import LENGTH_PENALTY_TYPE
    from ..generation_vanilla_transformer import MAX_LENGTH_OFFSET as MAX_LENGTH_OFFSET_FIELD
    from ..serving.search import check_search_settings

    gnmt = generation_config is not None and getattr(generation_config, LENGTH_PENALTY_TYPE, None) == "gnmt"
    # (option, generation config field, section 6.1's value)
    for name, field, default in (
        ("num_beams", "num_beams", NUM_BEAMS),
        ("length_penalty", "length_penalty", LENGTH_PENALTY),
        ("max_length_offset", MAX_LENGTH_OFFSET_FIELD, MAX_LENGTH_OFFSET),
    ):
        if getattr(args, name) is None:
            value = getattr(generation_config, field, None) if gnmt else None
            value = default if value is None else value  # a field the config leaves unset: section 6.1's
            check_search_settings(
                where=f"the model's generation_config.json (override it with --{name.replace('_', '-')}): ",
                **{field: value},
            )
            setattr(args, name, value)


STREAM_WINDOW_BATCHES = 16
"""`translate_with_options` sorts sentences by length within windows of this many batches (``--batch-size``), and
gives each window's translations, in input order, as soon as the window is done (`serving.search.translate_stream`)."""


def translate_with_options(args: argparse.Namespace, sentences: Sequence[str]) -> Iterator[str]:
    """Translate `sentences` with the model directory ``args.model`` (or, with ``--engine onnxruntime``, its ONNX
    export on onnxruntime) and the options of `add_decoding_arguments`, ``--num-threads`` included, with a progress
    bar: what the translate and evaluate commands run. The translations come in input order, a window of
    `STREAM_WINDOW_BATCHES` batches at a time, so that a caller can write each as it comes; every sentence is checked
    before the first is translated. Search options not given are the model's (`resolve_search_arguments`) and are
    filled into `args`."""
    import torch
    from transformers import GenerationConfig

    from ..model_dir import load_model_dir
    from ..serving.search import translate_stream
    from ..serving.with_onnxruntime import load_onnx

    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    resolve_engine(args)
    if args.engine == "onnxruntime":
        model = load_onnx(args.model, quantized=args.quantized, threads=args.num_threads or 0)
        tokenizer = model.tokenizer
        resolve_search_arguments(args, GenerationConfig.from_pretrained(args.model))
    else:
        model, tokenizer = load_model_dir(args.model, args.device)
        resolve_search_arguments(args, model.generation_config)
        model.to(decoding_dtype(args.dtype))
    return translate_stream(
        model,
        tokenizer,
        sentences,
        num_beams=args.num_beams,
        length_penalty=args.length_penalty,
        max_length_offset=args.max_length_offset,
        batch_size=args.batch_size,
        window=args.batch_size * STREAM_WINDOW_BATCHES,
        show_progress=True,
    )


__all__ = [
    "DECODING_DTYPES",
    "ENGINES",
    "STDIN",
    "STREAM_WINDOW_BATCHES",
    "add_decoding_arguments",
    "decoding_dtype",
    "check_decoding_arguments",
    "read_input_lines",
    "resolve_engine",
    "resolve_search_arguments",
    "translate_with_options",
]
