"""The one timer: contestants interleaved, the device synchronised around each call, the matmul rate timed by it, and
a command's wall and CPU time (`run_timed`)."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

_FIRST = object()


def synchronize(device: torch.device | None) -> None:
    """Wait for the work queued on `device` (CUDA's kernels run after the call that launched them returns)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


@dataclass
class Timings:
    """What `interleave` measured: per contestant, the seconds of every timed call (per item, one per repeat) and
    what each call returned; what its warm-up returned and took; and the order of every timed round."""

    seconds: dict[str, list[list[float]]]
    returned: dict[str, list[Any]] = field(default_factory=dict)
    warmup_returned: dict[str, Any] = field(default_factory=dict)
    warmup_seconds: dict[str, float] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)

    def medians(self, name: str) -> list[float]:
        """The median seconds of `name` on each item timed so far (all of them once `interleave` returns; during
        its rounds, as `progress` sees them, the items reached)."""
        return [statistics.median(samples) for samples in self.seconds[name] if samples]

    def total(self, name: str) -> float:
        """The sum over the items timed so far of `name`'s median seconds: a throughput is their work over this."""
        return sum(self.medians(name))

    def samples(self, name: str) -> list[float]:
        """Every timed call of `name`, in the order run."""
        repeats = len(self.seconds[name][0]) if self.seconds[name] else 0
        return [per_item[repeat] for repeat in range(repeats) for per_item in self.seconds[name]]


def interleave(
    contestants: Mapping[str, Callable[[Any], Any]],
    items: Sequence[Any],
    *,
    repeats: int = 1,
    warmup: int = 1,
    warmup_item: Any = _FIRST,
    device: torch.device | str | None = None,
    progress: Callable[[int, Timings], None] | None = None,
) -> Timings:
    """Time every contestant on every item, `repeats` times, in rounds: a round calls each contestant once on one
    item, and every round runs them in the reverse order of the one before (A B C, C B A, ...).

    Args:
        contestants: Name -> a function of one item; what it returns is kept (`Timings.returned`).
        items: What the contestants run on (batches, sentences, step counts), the same for all.
        repeats: Passes over `items`.
        warmup: Untimed calls of each contestant before the rounds, one contestant after the other (first-call
            allocations, compilation), on `warmup_item` (default: the first item). 0 for none, where a call
            changes what it measures (a training step that must not run more steps than the others).
        device: Synchronised before and after every timed call (a CUDA device: its queued kernels are part of the
            call's time); None or a CPU needs none.
        progress: Called after every round with the round's index and the timings so far.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    if warmup < 0:
        raise ValueError(f"warmup must be at least 0, got {warmup}")
    if not items:
        raise ValueError("interleave needs at least one item")
    device = torch.device(device) if device is not None else None
    names = list(contestants)
    timings = Timings(seconds={name: [[] for _ in items] for name in names}, returned={name: [] for name in names})
    warm_item = items[0] if warmup_item is _FIRST else warmup_item
    for name in names if warmup else ():
        synchronize(device)
        started = time.perf_counter()
        for _ in range(warmup):
            timings.warmup_returned[name] = contestants[name](warm_item)
        synchronize(device)
        timings.warmup_seconds[name] = time.perf_counter() - started
    rounds = 0
    for _ in range(repeats):
        for index, item in enumerate(items):
            order = names if rounds % 2 == 0 else names[::-1]
            for name in order:
                synchronize(device)
                started = time.perf_counter()
                returned = contestants[name](item)
                synchronize(device)
                timings.seconds[name][index].append(time.perf_counter() - started)
                timings.returned[name].append(returned)
            timings.order.append(list(order))
            if progress is not None:
                progress(rounds, timings)
            rounds += 1
    return timings


def matmul(device: torch.device, dtype: torch.dtype) -> tuple[Callable[[Any], None], float]:
    """A square matmul in `dtype` on `device`, as a contestant (a function of one ignored item), and its FLOPs."""
    n = 8192 if device.type == "cuda" else 2048 if dtype == torch.float32 else 1024  # (CPUs emulate bf16/fp16)
    calls = 20 if device.type == "cuda" else 1
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))

    def run(_=None) -> None:
        for _ in range(calls):
            torch.mm(a, b)

    return run, 2.0 * n**3 * calls


def matmul_rate(device: torch.device, dtype: torch.dtype, repeats: int = 5) -> float:
    """FLOP/s of `matmul` on `device`, the median of `repeats` timed runs after one warm-up (`interleave` with one
    contestant): the denominator of model-FLOPs utilisation (MFU), measured on the machine rather than read off a
    data sheet."""
    run, flops = matmul(device, dtype)
    timings = interleave({"matmul": run}, [None], repeats=repeats, device=device)
    return flops / statistics.median(timings.samples("matmul"))


def run_timed(
    argv: list[str], cwd: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `argv` in `cwd`, its output captured; the completed process, and its exit status, wall time, the CPU time
    of its processes (user + system) and the peak memory of the largest of them."""
    before, clock = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    completed = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - clock
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return completed, {
        "exit_status": completed.returncode,
        "wall_seconds": round(wall, 1),
        "cpu_seconds": round(cpu, 1),
        "peak_memory_mib": round(after.ru_maxrss / 1024),  # the largest of the processes so far (Linux: KiB)
    }
