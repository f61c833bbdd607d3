"""Where a step's time goes: torch's profiler over a worker's steps, summarised as the share of the wall time the
device was busy, the host's calls into the device runtime (launches, waits, copies), and the operators that cost
most on each side.

The H200 run of 2026-11-27 measured our training step and the Trainer's at 3 to 8% GPU utilisation (nvidia-smi),
MFU 0.6%: the device waited on the host. A throughput alone cannot say why; this says where the host's time went.
"""

from __future__ import annotations

import cProfile
import pstats
import time
from pathlib import Path
from typing import Any

import torch

RUNTIME_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx",
                 "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpyAsync",
                 "cudaMemsetAsync", "cudaMalloc", "cudaFree", "cudaHostAlloc")  # fmt: skip
"""The device runtime's calls whose count and host time the summary gives (those a profile shows)."""


class StepProfile:
    """torch's profiler and Python's (cProfile), started at construction and ended by `summary`, over one
    command's steps: torch's says which operators and runtime calls cost, Python's which functions of ours,
    Accelerate's or transformers' spent the host's time between them."""

    def __init__(self, device: torch.device) -> None:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.device = device
        self.profiler = torch.profiler.profile(activities=activities)
        self.python = cProfile.Profile()
        self.profiler.__enter__()
        self.python.enable()
        self.started = time.perf_counter()

    def summary(self, steps: int, top: int = 12) -> dict[str, Any]:
        """End the profile (the caller has synchronised the device) and summarise it: wall seconds, the device's
        busy seconds and share (its kernels' and copies' time), the runtime calls, the `top` operators by host time
        and the `top` kernels by device time."""
        wall = time.perf_counter() - self.started
        self.python.disable()
        self.profiler.__exit__(None, None, None)
        rows = [
            {
                "name": event.key,
                "calls": event.count,
                "self_host_ms": event.self_cpu_time_total / 1e3,
                "self_device_ms": event.self_device_time_total / 1e3,  # torch >= 2.4 (pyproject's least)
                "on_device": event.device_type != torch.autograd.DeviceType.CPU,  # a kernel or a copy
            }
            for event in self.profiler.key_averages()
        ]
        runtime = {row["name"]: row for row in rows if row["name"] in RUNTIME_CALLS}
        operators = [row for row in rows if row["name"] not in RUNTIME_CALLS]
        # The device's own events only: an operator's device time is that of the kernels it launched, which the
        # profile also lists as events of their own (summing both would count each kernel twice).
        kernels = [row for row in operators if row.pop("on_device")]
        busy = sum(row["self_device_ms"] for row in kernels) / 1e3 if self.device.type == "cuda" else None
        launches = sum(row["calls"] for name, row in runtime.items() if "Launch" in name)
        return {
            "steps": steps,
            "wall_seconds": wall,
            "device_busy_seconds": busy,
            "device_busy_share": busy / wall if busy is not None and wall > 0 else None,
            "kernel_launches_per_step": launches / steps if steps else None,
            "runtime_calls": {name: {k: row[k] for k in ("calls", "self_host_ms")} for name, row in runtime.items()},
            "top_host": sorted(operators, key=lambda row: -row["self_host_ms"])[:top],
            "top_device": sorted(kernels, key=lambda row: -row["self_device_ms"])[:top]
            if self.device.type == "cuda"
            else [],
            "top_python": python_functions(self.python, top),
        }


def python_functions(profile: cProfile.Profile, top: int) -> list[dict[str, Any]]:
    """The `top` Python functions by their own time (C functions included), with cumulative time and calls."""
    stats = pstats.Stats(profile).stats  # (file, line, name) -> (primitive calls, calls, own s, cumulative s, callers)
    rows = [
        {"function": f"{Path(file).name}:{line}:{name}", "calls": calls, "self_ms": own * 1e3, "cum_ms": cum * 1e3}
        for (file, line, name), (_, calls, own, cum, _) in stats.items()
    ]
    return sorted(rows, key=lambda row: -row["self_ms"])[:top]


def profile_lines(name: str, profile: dict[str, Any]) -> list[str]:
    """A contestant's profile in a few lines for the log."""
    busy, launches = profile["device_busy_share"], profile["kernel_launches_per_step"]
    head = f"profile {name}: {profile['steps']} steps in {profile['wall_seconds']:.2f} s"
    head += f", device busy {busy:.1%}" if busy is not None else ""
    head += f", {launches:,.0f} launches a step" if launches else ""
    lines = [head] + [
        f"  {call}: {row['calls']:,} calls, {row['self_host_ms']:,.1f} ms host"
        for call, row in profile["runtime_calls"].items()
    ]
    for side, width, key, named in (("host", 9, "self_host_ms", "name"), ("device", 7, "self_device_ms", "name"),
                                    ("python", 7, "self_ms", "function")):  # fmt: skip
        top = profile[f"top_{side}"][:6]
        lines += [f"  {side} {row[key]:{width},.1f} ms  {row['calls']:6,}x  {row[named][:70]}" for row in top]
    return lines
