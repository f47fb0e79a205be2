"""AdamW, weight-decay groups, gradient clipping and the nanoGPT learning-rate schedule.

Twin of ``numpy_impl/optim.py``. PyTorch provides the optimizer
(``torch.optim.AdamW``, Loshchilov & Hutter 2019), the clipping function and
the scheduler pieces; this module only wires them up the GPT-2/nanoGPT way.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.utils import clip_grad_norm_
from torch.optim import AdamW
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    LambdaLR,
    LinearLR,
    LRScheduler,
    SequentialLR,
)

__all__ = [
    "AdamW",
    "clip_grad_norm_",
    "configure_param_groups",
    "make_lr_scheduler",
    "make_optimizer",
]

# `clip_grad_norm_(parameters, max_norm)` is torch's own: it rescales the gradients in
# place so their global L2 norm is at most `max_norm`, and returns the norm *before*
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
    if weight_decay < 0:
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


def make_optimizer(
    model: nn.Module,
    lr: float,
    betas: tuple[float, float] = (0.9, 0.99),
    eps: float = 1e-8,
    weight_decay: float = 0.1,
) -> AdamW:
    """AdamW (Loshchilov & Hutter 2019, Algorithm 2) over :func:`configure_param_groups`.

    Decay is decoupled: each step does ``p -= lr * weight_decay * p`` besides
    the Adam update, rather than adding ``weight_decay * p`` to the gradient.
    The single-tensor (``foreach=False``) code path is used: slower, but it
    follows the algorithm step by step and is the easiest to compare against
    the NumPy twin.

    Args:
        model: the model to optimise.
        lr: peak learning rate (``max_lr`` of :func:`make_lr_scheduler`), ``> 0``.
        betas: decay rates of the first and second moment estimates, each in ``[0, 1)``.
        eps: added to the root of the second moment, ``> 0``.
        weight_decay: decay for matrices only, ``>= 0``.

    Returns:
        a ``torch.optim.AdamW``.

    Raises:
        ValueError: ``lr <= 0``, a beta outside ``[0, 1)``, ``eps <= 0`` or
            ``weight_decay < 0``.
    """
    if not lr > 0:
        raise ValueError(f"lr: must be > 0, got {lr}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"betas[{i}]: must lie in [0, 1), got {beta}")
    if not eps > 0:
        raise ValueError(f"eps: must be > 0, got {eps}")
    groups = configure_param_groups(model, weight_decay)
    return AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, foreach=False)


def make_lr_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_iters: int,
    lr_decay_iters: int,
    min_lr: float,
) -> LRScheduler:
    """nanoGPT's schedule: linear warmup, cosine decay, then a floor.

    With ``max_lr`` the optimizer's current ``lr`` and ``W, D = warmup_iters,
    lr_decay_iters``, the learning rate used at step ``it`` is::

        it <  W:        max_lr * (it + 1) / (W + 1)
        W <= it <= D:   min_lr + 0.5 * (1 + cos(pi * (it - W) / (D - W))) * (max_lr - min_lr)
        it >  D:        min_lr

    Warmup starts above zero, so step 0 already moves the weights. The cosine
    shape follows Loshchilov & Hutter 2017 (SGDR) without restarts. Built from
    torch's schedulers: ``LinearLR`` (factor ``(it + 1) / (W + 1)``),
    ``CosineAnnealingLR`` and a constant ``LambdaLR`` tail, joined by
    ``SequentialLR`` (the warmup piece is dropped when ``W == 0``).

    Call ``scheduler.step()`` once after each ``optimizer.step()``; the rate
    for step ``it`` is ``optimizer.param_groups[g]["lr"]`` before that step.
    ``min_lr`` is absolute, so every group should start from the same
    ``max_lr`` (the groups of :func:`make_optimizer` do).

    Args:
        optimizer: its ``lr`` (per group) is ``max_lr``; must be ``> 0``.
        warmup_iters: ``W >= 0``.
        lr_decay_iters: ``D > W``: the step at which ``min_lr`` is reached.
        min_lr: the floor, ``0 <= min_lr``.

    Returns:
        a ``torch.optim.lr_scheduler.SequentialLR``.

    Raises:
        ValueError: ``warmup_iters < 0``, ``lr_decay_iters <= warmup_iters``,
            ``min_lr < 0``, or a group whose ``lr`` is not ``> 0``.
    """
    W, D = int(warmup_iters), int(lr_decay_iters)
    if W < 0:
        raise ValueError(f"warmup_iters: must be >= 0, got {warmup_iters}")
    if D <= W:
        raise ValueError(
            f"lr_decay_iters: must exceed warmup_iters={W}, got lr_decay_iters={lr_decay_iters}"
        )
    if min_lr < 0:
        raise ValueError(f"min_lr: must be >= 0, got {min_lr}")
    max_lrs = [group["lr"] for group in optimizer.param_groups]
    if any(not lr > 0 for lr in max_lrs):
        raise ValueError(f"optimizer: every param group needs lr > 0, got {max_lrs}")

    pieces: list[LRScheduler] = []
    milestones: list[int] = []
    if W > 0:
        # factor(e) = 1/(W+1) + (1 - 1/(W+1)) * e / W = (e + 1) / (W + 1); reaches 1 at e = W.
        pieces.append(
            LinearLR(optimizer, start_factor=1.0 / (W + 1), end_factor=1.0, total_iters=W)
        )
        milestones.append(W)
    pieces.append(CosineAnnealingLR(optimizer, T_max=D - W, eta_min=min_lr))
    milestones.append(D + 1)  # the cosine covers W..D inclusive; it would climb again after D
    floor = [min_lr / lr for lr in max_lrs]
    pieces.append(LambdaLR(optimizer, lr_lambda=[lambda _, f=f: f for f in floor]))
    return SequentialLR(optimizer, pieces, milestones)
