"""AdamW, weight-decay groups, gradient clipping and the nanoGPT learning-rate schedule.

Twin of ``numpy_impl/optim.py``. PyTorch provides the optimizer
(``torch.optim.AdamW``, Loshchilov & Hutter 2019) and the clipping function;
this module adds the GPT-2/nanoGPT parameter groups and the learning-rate
function, which is the NumPy side's, line for line. Training builds the
optimizer the same way in both backends::

    optimizer = AdamW(configure_param_groups(model, weight_decay), lr=max_lr,
                      betas=(beta1, beta2), eps=eps)
    for step in range(max_iters):
        for group in optimizer.param_groups:
            group["lr"] = cosine_lr(step, max_lr, min_lr, warmup_iters, lr_decay_iters)
        ...
        optimizer.step()
"""

from __future__ import annotations

import math

from torch import nn
from torch.nn.utils import clip_grad_norm_
from torch.optim import AdamW

__all__ = ["AdamW", "clip_grad_norm_", "configure_param_groups", "cosine_lr"]

# `AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, ...)` is
# torch's own; the NumPy AdamW has the same positional parameters and defaults. Pass
# `foreach=False` to follow the algorithm one tensor at a time (the NumPy twin's order).
#
# `clip_grad_norm_(parameters, max_norm)` is torch's own too: it rescales the gradients
# in place so their global L2 norm is at most `max_norm`, and returns the norm *before*
# clipping (a 0-dim tensor), which is the number worth logging.


def configure_param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Split parameters into a decayed and a non-decayed AdamW group.

    Matrices (``dim >= 2``: linear weights, embeddings) are decayed; vectors
    (biases, LayerNorm gains and shifts) are not, as in GPT-2/nanoGPT.
    Parameters come from ``model.named_parameters()``, so a tied weight
    appears once; parameters with ``requires_grad=False`` are left out.

    Args:
        model: any ``nn.Module``.
        weight_decay: decoupled decay coefficient for the matrices, ``>= 0``.

    Returns:
        ``[{"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0}]``, each list in
        ``named_parameters()`` order.

    Raises:
        ValueError: ``weight_decay < 0``.
    """
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

    The NumPy twin's function, line for line: a Python float, set into every
    ``group["lr"]`` before each step (a scheduler object would hold state that
    a resumed run must replay; this holds none).
    """
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step > lr_decay_iters or lr_decay_iters == warmup_iters:
        return min_lr
    decay_ratio = (step - warmup_iters) / (lr_decay_iters - warmup_iters)  # 0 .. 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 .. 0
    return min_lr + coeff * (max_lr - min_lr)
