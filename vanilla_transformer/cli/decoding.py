"""What the translate and evaluate commands share: their decoding options (section 6.1's search, batching, device,
precision), filled in from the model's own generation config, the translation they run, and how they read text.

    add_decoding_arguments(parser)        # --num-beams, --length-penalty, --max-length-offset, --batch-size, ...
    check_decoding_arguments(args)        # refuse what cannot work, naming the option, before anything is read
    translate_with_options(args, lines)   # load args.model, fill in the model's search, translate
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import GenerationConfig

from ..data import decode_lines
from ..generation_vanilla_transformer import LENGTH_PENALTY_TYPE
from ..generation_vanilla_transformer import MAX_LENGTH_OFFSET as MAX_LENGTH_OFFSET_FIELD
from ..model_dir import load_model_dir
from ..translation import (
    LENGTH_PENALTY,
    MAX_LENGTH_OFFSET,
    NUM_BEAMS,
    check_search_settings,
    translate,
)

STDIN = "-"
"""The file name that stands for standard input."""


def read_input_lines(path: str | os.PathLike[str], option: str) -> list[str]:
    """The lines of the UTF-8 text at `path`, as `decode_lines` reads them: split on ``"\\n"`` only, CRLF line ends
    and a byte-order mark dropped, a carriage return inside a line read as a space; errors name ``<stdin>`` or the
    option and file, and the line.

    `path` may be a regular file, a pipe or FIFO (``<(head -n 5 ref.txt)``, ``/dev/fd/63``, ``mkfifo``), a
    character device, or ``-`` for standard input. `option` is the command-line argument that named it (e.g.
    ``--reference``), named in every error.

    Raises:
        FileNotFoundError: If nothing is at `path`.
        IsADirectoryError: If `path` is a directory.
        OSError: If it cannot be read.
        ValueError: If it is not UTF-8 text, naming the line.
    """
    if str(path) == STDIN:
        name, stream = "<stdin>", sys.stdin
        data = stream.buffer.read() if hasattr(stream, "buffer") else stream.read().encode("utf-8")
    else:
        name, file = f"{option}={path}", Path(path)
        if not file.exists():
            raise FileNotFoundError(f"{name}: no such file")
        if file.is_dir():
            raise IsADirectoryError(f"{name} is a directory, not a file of lines")
        try:
            data = file.read_bytes()  # also a pipe's or FIFO's: read to its end
        except OSError as error:
            raise OSError(f"{name} cannot be read: {error.strerror or error}") from error
    return decode_lines(data, name)


def check_output_file(path: str | os.PathLike[str] | None, option: str) -> None:
    """Refuse, before any model is loaded or line translated, an output file that could not be written: its folder
    is missing or not a folder or not writable, or the path is a folder. Else the work would be lost at the end."""
    if path is None:
        return
    file = Path(path)
    folder = file.parent
    if file.is_dir():
        raise IsADirectoryError(f"{option}={path} is a directory: name a file to write")
    if not folder.is_dir():
        raise FileNotFoundError(f"{option}={path}: the folder {folder} does not exist: create it first")
    if not os.access(folder, os.W_OK | os.X_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise PermissionError(f"{option}={path} cannot be written: no permission")


DECODING_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
"""The precisions ``--dtype`` offers for decoding."""


def add_decoding_arguments(parser: argparse.ArgumentParser) -> None:
    """The decoding options the translate and evaluate scripts share: section 6.1's search, batching, device."""
    model_default = "default: the model's generation_config.json, else section 6.1's"
    parser.add_argument("--num-beams", type=int, help=f"beam size ({model_default}: {NUM_BEAMS})")
    parser.add_argument("--length-penalty", type=float, help=f"GNMT alpha ({model_default}: {LENGTH_PENALTY})")
    parser.add_argument(
        "--max-length-offset", type=int, help=f"at most input length + this ({model_default}: {MAX_LENGTH_OFFSET})"
    )
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch (default: %(default)s)")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu", help="default: %(default)s"
    )
    parser.add_argument(
        "--num-threads", type=int, help="CPU threads (default: torch's); 1 is fastest on a CPU busy with other work"
    )
    parser.add_argument(
        "--dtype",
        choices=list(DECODING_DTYPES),
        default="fp32",
        help="precision of the weights and activations while decoding (default: %(default)s). bf16 is faster on GPUs "
        "and on CPUs with AVX-512 BF16 or AMX, and may change some translations: docs/decoding.md gives BLEU against fp32",
    )


def check_decoding_arguments(args: argparse.Namespace) -> None:
    """Reject, before any file or model is read, the search options of `add_decoding_arguments` that cannot work
    (`check_search_settings`), a ``--batch-size`` or ``--num-threads`` below 1, and a ``--device`` this machine does not
    have: a ValueError naming the option."""
    search = {name: getattr(args, name) for name in ("num_beams", "length_penalty", "max_length_offset")}
    check_search_settings(flag=True, **search)
    for option, value in (("--batch-size", args.batch_size), ("--num-threads", args.num_threads)):
        if value is not None and value < 1:
            raise ValueError(f"{option} must be at least 1, got {option}={value}")
    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError) as error:
        raise ValueError(f"--device={args.device} is not a device (cpu, cuda, cuda:1, mps, ...): {error}") from error
    if device.type == "cuda" and (not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()):
        raise ValueError(f"--device={args.device}: no such CUDA device here; use --device cpu")


def resolve_search_arguments(args: argparse.Namespace, generation_config: GenerationConfig | None) -> None:
    """Fill in the search options of `add_decoding_arguments` that were not given (None), in place: from
    `generation_config` when it asks for section 6.1's search (`paper_generation_config`, which ``train`` exports
    with the run's beam size, alpha and offset), else section 6.1's beam 4, alpha 0.6 and input length + 50. So the
    command line translates with the search ``model.generate()`` runs and the training run scored. A value of
    `generation_config` that cannot work raises a ValueError naming the field and the option that overrides it."""
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


def translate_with_options(args: argparse.Namespace, sentences: Sequence[str]) -> list[str]:
    """Translate `sentences` with the model directory ``args.model`` and the options of `add_decoding_arguments`,
    ``--num-threads`` included, with a progress bar: what the translate and evaluate commands run. Search options
    not given are the model's (`resolve_search_arguments`) and are filled into `args`."""
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    model, tokenizer = load_model_dir(args.model, args.device)
    resolve_search_arguments(args, model.generation_config)
    model.to(DECODING_DTYPES[args.dtype])
    return translate(
        model,
        tokenizer,
        sentences,
        num_beams=args.num_beams,
        length_penalty=args.length_penalty,
        max_length_offset=args.max_length_offset,
        batch_size=args.batch_size,
        show_progress=True,
    )


__all__ = [
    "DECODING_DTYPES",
    "STDIN",
    "add_decoding_arguments",
    "check_decoding_arguments",
    "check_output_file",
    "read_input_lines",
    "resolve_search_arguments",
    "translate_with_options",
]
