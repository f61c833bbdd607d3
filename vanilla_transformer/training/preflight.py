"""Checks before any training: of the run's training data, with errors that say which setting or file to fix, and
of the launch, whose process count must be the one asked for."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ..data import Pair
from .config import DataConfig


def _training_source(data: DataConfig) -> str:
    """Where the training pairs come from, as the user gave it."""
    if data.train_src is not None:
        return f"--train-src={data.train_src} and --train-tgt={data.train_tgt}"
    if data.dataset in ("text", "tsv", "jsonl"):
        return f"split {data.train_split!r} of --dataset={data.dataset} in --data-dir={data.data_dir}"
    return f"split {data.train_split!r} of --dataset={data.dataset}"


def check_training_pairs(data: DataConfig, read: Sequence[Pair], kept: Sequence[Pair] | None = None) -> None:
    """Raise a ValueError if the training data holds no pair (`read`), or none that cleaning and ``--max-length``
    kept (`kept`, when given)."""
    if not read:
        raise ValueError(f"no training pairs: {_training_source(data)} is empty")
    if kept is not None and not kept:
        raise ValueError(
            f"none of the {len(read):,} training pairs of {_training_source(data)} has both sides within "
            f"--max-length={data.max_length} tokens (or they are empty): raise --max-length"
        )


WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
"""Where launchers record the number of processes they start: torchrun (``accelerate launch --multi_gpu``), MPI."""

WORKING_CPU_LAUNCH = (
    "ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N -m vanilla_transformer train ..."
)
"""A launch of N processes on CPUs without MPI: torch.distributed starts them, gloo connects them."""


def launch_mismatch(num_processes: int, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the launch runs another number of processes than it was asked for, with the command that works; None
    when they agree or nothing says what was asked.

    What was asked: the launcher's world size (`WORLD_SIZE_VARIABLES`), else several processes where
    ``accelerate launch``'s simple launcher prepared a rendezvous (``MASTER_ADDR``, which it sets only for more than
    one process) but started one: ``accelerate launch --cpu --num_processes 2`` does that unless MPI is set up.
    """
    environ = os.environ if environ is None else environ
    recorded = [(name, environ[name]) for name in WORLD_SIZE_VARIABLES if environ.get(name, "").isdigit()]
    if recorded:
        name, value = recorded[0]
        if int(value) == num_processes:
            return None
        asked = f"{value} processes ({name}={value})"
    elif num_processes == 1 and "MASTER_ADDR" in environ and "ACCELERATE_USE_CPU" in environ:
        asked = "several processes (accelerate launch --num_processes, without --multi_gpu or MPI)"
    else:
        return None
    return (
        f"the launch asked for {asked} but {num_processes} process(es) run: `accelerate launch --cpu --num_processes "
        f"N` starts one process unless MPI is set up (--mpirun_hostfile). For N CPU processes: {WORKING_CPU_LAUNCH}"
    )


NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
"""CPU flags (Linux ``/proc/cpuinfo``) of instructions that compute bf16 matrix products natively. Without them
torch emulates bf16 on the CPU, and a bf16 matrix product can be tens of times slower than fp32's (measured on an
AVX2-only AMD EPYC: 65x for 1024 x 1024)."""


def slow_bf16(device_type: str, mixed_precision: str, flags: set[str] | None) -> str | None:
    """Why bf16 autocast would slow this run down: a CPU without native bf16 instructions (`NATIVE_BF16_FLAGS`);
    None when bf16 is not asked for, on accelerators, and where the CPU's flags are unknown."""
    if device_type != "cpu" or mixed_precision != "bf16" or flags is None:
        return None
    if any(flag in flags for flag in NATIVE_BF16_FLAGS):
        return None
    return (
        "bf16 mixed precision on a CPU without native bf16 instructions (none of "
        f"{', '.join(NATIVE_BF16_FLAGS)}): torch emulates them, many times slower than fp32"
    )


def auto_precision(device_type: str, flags: set[str] | None, cuda_bf16: bool = False) -> str:
    """What ``--mixed-precision auto`` trains in: bf16 where the device computes it natively (a CUDA GPU that
    supports it, a CPU with one of `NATIVE_BF16_FLAGS`), else ``no`` (float32). Emulated bf16 is never faster."""
    if device_type == "cuda":
        return "bf16" if cuda_bf16 else "no"
    if device_type == "cpu" and flags is not None and any(flag in flags for flag in NATIVE_BF16_FLAGS):
        return "bf16"
    return "no"


LAUNCHER_DYNAMO_VARIABLE = "ACCELERATE_DYNAMO_BACKEND"
"""Where ``accelerate launch --dynamo_backend`` and the accelerate config file leave their choice of backend."""


def auto_dynamo_backend(
    device_type: str, mixed_precision: str | None, flags: set[str] | None, environ: Mapping[str, str] | None = None
) -> str | None:
    """What ``--dynamo-backend auto`` compiles with: None (Accelerate's own choice) where the launcher or the accelerate
    config chose (`LAUNCHER_DYNAMO_VARIABLE`); else ``inductor`` where compiling paid, on a CPU training in native bf16
    (the multi30k preset: 9,586 steps in the hour against 6,428 eager), and ``no`` elsewhere: on this project's AVX2
    CPU in fp32 inductor made the training step 0.89x as fast, after a minute of compiling; and on CUDA.

    On CUDA (an H200, the wmt14-base step in bf16, issue 55) the fastest paths measured were eager SDPA without
    cuDNN's attention, 193,388 tokens/s, and inductor with eager attention, 198,179: 2.5% apart in one run, within
    its noise, while compiling costs a warm-up and a recompilation for new shapes, eager attention holds the
    ``[B, H, T, T]`` scores that flash and memory-efficient attention never build, and compiled SDPA ran at 30,599
    for a cause not found on the CPU (no graph break, no recompilation per shape there). So CUDA trains eagerly,
    with SDPA (`auto_attention`), under the model's SDPA backends (``SDPA_BACKENDS``)."""
    environ = os.environ if environ is None else environ
    if environ.get(LAUNCHER_DYNAMO_VARIABLE):
        return None
    native_bf16 = mixed_precision == "bf16" and auto_precision(device_type, flags) == "bf16"
    return "inductor" if device_type == "cpu" and native_bf16 else "no"


def auto_attention(device_type: str, mixed_precision: str | None) -> str:
    """What ``--attn-implementation auto`` trains with: ``eager`` on a CPU in bf16, where PyTorch's CPU SDPA kernel
    with a padding mask gains nothing from bf16 and eager attention's matrix products do (the multi30k preset:
    1.37x fp32 against SDPA's 1.08x); ``sdpa`` elsewhere, on CUDA its flash and memory-efficient kernels."""
    return "eager" if device_type == "cpu" and mixed_precision == "bf16" else "sdpa"


__all__ = [
    "LAUNCHER_DYNAMO_VARIABLE",
    "NATIVE_BF16_FLAGS",
    "auto_attention",
    "auto_dynamo_backend",
    "auto_precision",
    "WORKING_CPU_LAUNCH",
    "WORLD_SIZE_VARIABLES",
    "check_training_pairs",
    "launch_mismatch",
    "slow_bf16",
]
