"""What a published figure needs beside the figure: the command, the machine and its load, the package versions.

Training writes it into ``results.json``; every benchmark in ``scripts/`` writes it into its results file.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import torch

# Bytes of memory this machine can still give: defined in the remote-code decoder, whose generate() checks use it.
from .decoder_vanilla_transformer import available_memory  # noqa: F401

RECORDED_PACKAGES = (
    "vanilla-transformer",
    "torch",
    "transformers",
    "tokenizers",
    "accelerate",
    "sacrebleu",
    "peft",
    "ctranslate2",
    "onnxruntime",
)
"""The packages whose versions are recorded (those installed)."""


def package_versions() -> dict[str, str]:
    """Python's version and those of `RECORDED_PACKAGES`. torch's is ``torch.__version__``, its build included
    (``2.14.1+cu130``): the distribution's metadata may leave the local part out."""
    versions = {"python": platform.python_version()}
    for name in RECORDED_PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    versions["torch"] = torch.__version__
    return versions


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo``'s on Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags, from Linux's `cpuinfo`; None where that file cannot be read (other systems)."""
    try:
        with open(cpuinfo, encoding="utf-8") as file:
            for line in file:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return set()


SPEED_FEATURES = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
"""The CPU features that decide this package's CPU figures: AVX2 or AVX-512 kernels, and native bf16 (without it
torch emulates bf16, tens of times slower than fp32); recorded with every figure, as the same model name covers
both kinds of processor."""


def gpu_names() -> list[str]:
    """The names of the CUDA devices torch sees (none on a CPU-only machine)."""
    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count())]


def command_line() -> str:
    """The command line that started this process: ``vanilla-transformer train ...`` (the script's name, not its
    path), or ``python -m vanilla_transformer train ...``."""
    interpreter, *args = sys.orig_argv
    if args and not args[0].startswith("-"):  # a script: the console entry point, or a file
        return shlex.join([Path(args[0]).name, *args[1:]])
    return shlex.join([Path(interpreter).name, *args])


def run_environment(load_average_start: tuple[float, ...] | None = None) -> dict[str, Any]:
    """The command as typed, the machine's load average at the start (given) and now, the processor and GPUs, and
    the versions of Python and of `RECORDED_PACKAGES`."""
    return {
        "command": command_line(),
        "load_average_start": list(load_average_start) if load_average_start is not None else None,
        "load_average_end": list(os.getloadavg()),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs, {platform.system()}",
        "processor": cpu_name(),
        "processor_features": sorted(set(SPEED_FEATURES) & flags) if (flags := cpu_flags()) is not None else None,
        "gpus": gpu_names(),
        "versions": package_versions(),
    }


DYNAMO_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")
"""The torch.compile backends a run may ask for by name (``--dynamo-backend``), besides no and auto: those this
project runs, where torch has them. Accelerate's list has more (tvm, aot_ts_nvfuser, ipex, ...), which end in
tracebacks: they need packages the project does not install, or torch no longer has them."""


def runnable_dynamo_backends() -> tuple[str, ...]:
    """``no``, ``auto`` and the `DYNAMO_BACKENDS` that this torch registers (``torch.compiler.list_backends``)."""
    registered = set(torch.compiler.list_backends(exclude_tags=()))
    return ("no", "auto", *(name for name in DYNAMO_BACKENDS if name in registered))
