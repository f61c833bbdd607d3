"""The ``vanilla-transformer`` command: one command with subcommands, each a thin ``main(argv)`` over the library.

    vanilla-transformer train --preset multi30k
    vanilla-transformer translate --model runs/numbers/model < input.txt
    python -m vanilla_transformer train          # the same

Each subcommand lives in its own module of this package and is imported only when it runs, so that ``--help`` and
light commands do not pay for the training stack; its command line is parsed before torch or transformers loads, so
that a mistyped option or command is refused at once (`vanilla_transformer.parsing`). A command whose extra is not installed stops with the
``pip install "vanilla-transformer[<extra>]"`` line that installs it.

An error a user can act on (bad input, a damaged or missing file, a refused setting: `USER_ERRORS`) leaves a command
as one line, ``vanilla-transformer <command>: error: <message>``, with exit status 1 and no traceback; the messages
name the file or option and the fix. ``VANILLA_TRANSFORMER_TRACEBACK=1`` shows the traceback instead. So do errors of
the system (no space left, no permission, a read-only file system; also when a library reports one in its own
exception, as safetensors does), named with the file where it was being written (`vanilla_transformer.atomic`), and
the package's own warnings are one line each, ``vanilla-transformer <command>: warning: <message>``, without a source
path; a command interrupted with Ctrl-C prints one line and exits with status 130, as shells expect (train and finetune
say there where they stopped and the command that continues).

Multi-process training goes through Accelerate's launcher, with the module form of the command::

    accelerate launch --num_processes 8 -m vanilla_transformer train --preset wmt14-base
"""

from __future__ import annotations

import difflib
import importlib
import logging
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from ..atomic import os_error
from ..extras import MissingExtraError, require
from ..library_errors import (
    MEMORY_FIX,
    PICKLE_FIX,
    ModelTooLarge,
    SettingError,
    allocation_failure,
    unpickling_refusal,
)
from ..reading import forget_reads

PROG = "vanilla-transformer"

COMMANDS: dict[str, tuple[str, str]] = {
    # name: (module in this package[:function, default main], one-line description)
    "train": ("train", "train a Transformer with the paper's recipe (presets: numbers, multi30k, wmt14-base, ...)"),
    "translate": ("translate", "translate a file or standard input with the paper's beam search"),
    "evaluate": ("evaluate", "score translations (or a model's) against references: BLEU, chrF, exact match"),
    "average": ("average", "average the last checkpoints of a run into a model directory (section 6.1)"),
    "train-tokenizer": ("train_tokenizer", "train a shared byte-level BPE tokenizer on a corpus"),
    "finetune": ("finetune", "fine-tune a trained model with Seq2SeqTrainer"),
    "export-ctranslate2": ("export_ctranslate2", "convert a model directory to CTranslate2"),
    "export-onnx": ("export_onnx", "export a model directory to ONNX (onnxruntime, transformers.js, a web page)"),
    "push": ("push", "upload a model directory to the Hugging Face Hub with its model card"),
    "attention": ("attention", "draw a sentence's attention maps as PNG"),
    "demo": ("demo", "serve a browser demo of a model: translation, attention maps, beam search, positions"),
    "import-marian": ("marian:import_main", "convert a MarianMT (OPUS-MT) model directory or Hub id into this format"),
    "export-marian": ("marian:export_main", "write a model of this package as a plain MarianMTModel directory"),
}


COMMAND_EXTRA: dict[str, str] = {
    "train": "train",  # and "plots" for the training curves, skipped without matplotlib
    "evaluate": "train",
    "average": "train",
    "train-tokenizer": "train",
    "finetune": "train",
    "export-ctranslate2": "serve",
    "export-onnx": "onnx",
    "attention": "plots",
    "demo": "demo",
    "import-marian": "marian",
}
"""The extra each command needs beyond the core install; translate, push and export-marian need none."""


USER_ERRORS: tuple[type[BaseException], ...] = (ValueError, OSError, MissingExtraError)
"""What a command reports as one line, not a traceback: bad values, damaged files (`CheckpointError`, a damaged
safetensors or JSON file and undecodable text all arrive as ValueError), missing files and folders."""


def configure_logging() -> None:
    """The logging of the commands that report through `logging`: INFO and above, as ``LEVEL logger: message``."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def version() -> str:
    """``vanilla-transformer 0.1.0 (torch ..., transformers ...)``: the package's version and the two it runs on."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    def of(name: str) -> str:
        try:
            return installed(name)
        except PackageNotFoundError:
            return "not installed"

    return f"{PROG} {of(PROG)} (torch {of('torch')}, transformers {of('transformers')})"


def _usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} <command> [options]", "", "commands:"]
    lines += [f"  {name:<{width}}  {description}" for name, (_, description) in COMMANDS.items()]
    lines += ["", f"'{PROG} <command> --help' lists a command's options; '{PROG} --version' the installed versions."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``vanilla-transformer <command> [options]``; `argv` defaults to ``sys.argv[1:]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] in ("-V", "--version"):
        print(version())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        print(f"{PROG}: unknown command {command!r}{guess}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        if command in COMMAND_EXTRA:
            require(COMMAND_EXTRA[command], f"{PROG} {command}")
    except MissingExtraError as error:
        print(error, file=sys.stderr)
        return 2
    forget_reads()  # the record of what this command reads starts empty (`vanilla_transformer.reading`)
    module_name, _, function = COMMANDS[command][0].partition(":")
    sys.argv[0] = f"{PROG} {command}"  # argparse's prog, in --help and error messages
    try:  # the import too: Ctrl-C while torch loads is an interrupt like any other
        module = importlib.import_module(f"{__name__}.{module_name}")
        with warnings.catch_warnings():  # the showwarning below, for this command only
            warnings.showwarning = one_line_warnings(command, warnings.showwarning)
            return getattr(module, function or "main")(rest)
    except (*USER_ERRORS, KeyboardInterrupt, MemoryError, Exception) as error:
        status, message = user_error(error)
        if status is None or os.environ.get("VANILLA_TRANSFORMER_TRACEBACK") == "1":
            raise
        close_progress_bars()
        print(f"{PROG} {command}: {message}", file=sys.stderr)
        return status


PACKAGE_DIR = Path(__file__).resolve().parents[1]


def one_line_warnings(command: str, show: Callable[..., None]) -> Callable[..., None]:
    """A `warnings.showwarning` that prints the package's own warnings, which are meant for the user, as one line,
    ``vanilla-transformer <command>: warning: <message>``, without Python's source path and line; other packages'
    warnings go to `show` as before."""

    def showwarning(message, category, filename, lineno, file=None, line=None) -> None:
        try:
            ours = Path(filename).resolve().is_relative_to(PACKAGE_DIR)
        except (OSError, ValueError):
            ours = False
        if not ours:
            return show(message, category, filename, lineno, file, line)
        first = " ".join(str(message).split())
        print(f"{PROG} {command}: warning: {first}", file=file or sys.stderr, flush=True)
        return None

    return showwarning


def close_progress_bars() -> None:
    """Close the progress bars an error left open (the Trainer's, a library's), before the error line is printed:
    a bar closed later, as the objects holding it go, would be drawn after that line."""
    tqdm = sys.modules.get("tqdm.std")
    for bar in list(getattr(getattr(tqdm, "tqdm", None), "_instances", ())):  # every tqdm bar alive, of any kind
        bar.close()


def user_error(error: BaseException) -> tuple[int | None, str]:
    """The exit status and the one line a command prints for `error`: 130 for Ctrl-C, 1 for `USER_ERRORS`, memory
    (also an allocator's RuntimeError), a pickled file torch refuses and errors of the system (also those a library
    wraps in its own exception); None for a bug, which keeps its traceback."""
    if isinstance(error, KeyboardInterrupt):  # a command's own may say where it stopped and how to go on
        return 130, f"interrupted{f' {error}' if str(error) else ''}"
    if isinstance(error, (*USER_ERRORS, ModelTooLarge)):
        return 1, f"error: {error.command_line if isinstance(error, SettingError) else error}"
    requested = allocation_failure(error)
    if requested is not None:
        return 1, f"error: out of memory{f' ({requested})' if requested else ''}; {MEMORY_FIX}"
    refused = unpickling_refusal(error)
    if refused is not None:
        return 1, f"error: torch refuses to unpickle a weights file{f' ({refused})' if refused else ''}: {PICKLE_FIX}"
    system = os_error(error)
    if system is not None:
        first = (str(error).splitlines() or [""])[0]
        return 1, f"error: {os.strerror(system.errno) if system.errno else system} ({type(error).__name__}: {first})"
    return None, ""
