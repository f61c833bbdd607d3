"""Helpers shared by the training tests (test_training, test_paper_behaviour, test_precision, the fault tests):
a tiny run's configuration, weight equality, and a real `accelerate launch` of the command on the CPU."""

import os
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from tiny_model import TINY

from vanilla_transformer.training import TrainingConfig, parse_args

REPOSITORY = Path(__file__).resolve().parent.parent


def tiny_run(output_dir: Path, *options: str) -> TrainingConfig:
    return parse_args([*TINY, "--output-dir", str(output_dir), *options])


def same_weights(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> bool:
    return first.keys() == second.keys() and all(torch.equal(first[name], second[name]) for name in first)


def launch(
    output_dir: Path,
    *options: str,
    processes: int = 2,
    launcher: Sequence[str] = (),
    topology: Sequence[str] | None = None,
    **env: str,
):
    """`accelerate launch` of tests/launch_probe.py (``vanilla-transformer train`` with probes) on the CPU.

    `accelerate launch --cpu --num_processes 2` starts one process unless MPI is set up; `--multi_gpu` starts two
    through torch.distributed, and ACCELERATE_USE_CPU makes them use the CPU (gloo) even where GPUs exist.
    `topology` replaces those options."""
    with socket.socket() as probe:  # a free port: the default one may be taken by another job on the machine
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if topology is None:
        topology = ["--multi_gpu", "--num_processes", str(processes)] if processes > 1 else ["--num_processes", "1"]
    command = [
        sys.executable, "-m", "accelerate.commands.launch", *topology, "--num_machines", "1", "--main_process_port",
        str(port), "--dynamo_backend", "no", *launcher, str(REPOSITORY / "tests" / "launch_probe.py"), "train",
        *options, "--output-dir", str(output_dir),
    ]  # fmt: skip
    environment = {
        **os.environ,
        "ACCELERATE_USE_CPU": "true",
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        **env,
    }
    return subprocess.run(command, check=False, env=environment, capture_output=True, text=True, timeout=300)
