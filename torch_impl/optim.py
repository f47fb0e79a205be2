"""AdamW, weight-decay groups, gradient clipping and the nanoGPT learning-rate schedule.

Twin of ``numpy_impl/optim.py``. ``AdamW`` (Loshchilov & Hutter 2019) and
``clip_grad_norm_`` are torch's own; the parameter groups and ``cosine_lr`` are
the NumPy side's, line for line.
"""

from __future__ import annotations

import math

from torch import nn
from torch.nn.utils import clip_grad_norm_
from torch.optim import AdamW

__all__ = ["AdamW", "clip_grad_norm_", "configure_param_groups", "cosine_lr"]

# The NumPy AdamW has torch's positional parameters and defaults; `foreach=False` follows
# the NumPy twin's one-tensor-at-a-time order. `clip_grad_norm_` returns the norm before clipping.


def configure_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Matrices (``dim >= 2``) in a group decayed by ``weight_decay``; vectors (biases,
    norm gains) in a group with none, as in GPT-2/nanoGPT. A tied weight appears once;
    frozen parameters are left out. Raises ``ValueError`` if ``weight_decay < 0``."""
    if not weight_decay >= 0:  # also catches NaN
        raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": float(weight_decay)},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def cosine_lr(
    step: int, max_lr: float, min_lr: float, warmup_iters: int, lr_decay_iters: int
) -> float:
    """Learning rate at ``step``: linear warmup, cosine decay, then a floor (nanoGPT's get_lr).

    step <  warmup:          max_lr * (step + 1) / (warmup + 1)      (> 0 at step 0)
    warmup <= step <= decay: min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2,
                             r = (step - warmup) / (decay - warmup)
    step > decay:            min_lr

    Set into every ``group["lr"]`` before each step; unlike a scheduler it holds no state.
    """
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step > lr_decay_iters or lr_decay_iters == warmup_iters:
        return min_lr
    decay_ratio = (step - warmup_iters) / (lr_decay_iters - warmup_iters)  # 0 .. 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 .. 0
    return min_lr + coeff * (max_lr - min_lr)
