"""What the benchmarks measure of the device itself: synchronisation and a dense matmul (for the matmul rate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on `device` (CUDA's kernels run after the call that launched them returns)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul(device: torch.device, dtype: torch.dtype) -> tuple[Callable[[Any], None], float]:
    """A square matmul in `dtype` on `device`, as a contestant (a function of one ignored item), and its FLOPs."""
    n = 8192 if device.type == "cuda" else 2048 if dtype == torch.float32 else 1024  # (CPUs emulate bf16/fp16)
    calls = 20 if device.type == "cuda" else 1
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def run(_=None) -> None:
        for _ in range(calls):
            torch.mm(a, b)

    return run, 2.0 * n**3 * calls
