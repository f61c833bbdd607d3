"""What the benchmarks measure of the device itself: synchronisation, a dense matmul (for the matmul rate), peak
memory."""

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


def peak_memory(fn: Callable[[], Any], device: torch.device) -> int:
    """Peak bytes of tensors allocated by `fn` above those live when it starts. On CUDA,
    ``torch.cuda.max_memory_allocated``; on a CPU the same quantity from the PyTorch profiler's allocation events.
    Both leave out the allocator's cache and memory that is not a tensor's."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - start
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    allocations = []  # (time, bytes): positive for an allocation, negative for a free
    pending = list(prof.profiler.kineto_results.experimental_event_tree())
    while pending:
        event = pending.pop()
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            allocations.append((event.start_time_ns, event.extra_fields.alloc_size))
        pending.extend(event.children)
    live = peak = 0
    for _, size in sorted(allocations):
        live += size
        peak = max(peak, live)
    return peak
