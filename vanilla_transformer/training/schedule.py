"""The learning rate of section 5.3, equation (3)."""

from __future__ import annotations

import torch
from torch.optim.lr_scheduler import LambdaLR

# --------------------------------------------------------------------------------------------------------------------
# Learning rate (section 5.3)
# --------------------------------------------------------------------------------------------------------------------


def noam_learning_rate(step: int, d_model: int, warmup_steps: int, scale: float = 1.0) -> float:
    """Equation (3): ``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)`` for step >= 1.

    It grows linearly for `warmup_steps` steps, peaks at ``scale * (d_model * warmup_steps)^-0.5``, then decays with
    the inverse square root of the step. ("Noam" after its author, as tensor2tensor and OpenNMT call it.)
    """
    if step < 1:
        raise ValueError(f"step counts from 1, got step={step}")
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)


def noam_schedule(optimizer: torch.optim.Optimizer, d_model: int, warmup_steps: int, scale: float = 1.0) -> LambdaLR:
    """A scheduler giving the s-th optimizer step (s = 1, 2, ...) the learning rate ``noam_learning_rate(s, ...)``.

    It replaces the optimizer's own learning rate. Call ``scheduler.step()`` after each ``optimizer.step()``.
    """
    for group in optimizer.param_groups:
        group["lr"] = group["initial_lr"] = 1.0  # LambdaLR multiplies the initial rate by the function's value
    return LambdaLR(optimizer, lambda index: noam_learning_rate(index + 1, d_model, warmup_steps, scale))
