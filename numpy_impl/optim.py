"""AdamW, global-norm gradient clipping, and the warmup + cosine schedule."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .module import Module, Parameter


def configure_param_groups(model: Module, weight_decay: float) -> list[dict]:
    """Two groups: matrices (ndim >= 2) decayed, vectors (biases, norm gains) not, as in nanoGPT
    and GPT-3; a tied parameter appears once. Raises ValueError: ``weight_decay < 0``.
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
    params = model.parameters()
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2), torch's defaults.

    Per parameter p with gradient g, at step t = 1, 2, ...:
        m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
        m_hat = m / (1 - beta1^t),     v_hat = v / (1 - beta2^t)
        p = p - lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p)
    The decay is scaled by lr, as in ``torch.optim.AdamW`` (Algorithm 2: by the schedule alone).
    params: Parameters or torch-style group dicts; set ``group["lr"]`` to change the rate.
    ``state[p]`` uses torch's names: ``step``, ``exp_avg`` (m), ``exp_avg_sq`` (v).
    Raises ValueError: ``lr <= 0``, a beta outside ``[0, 1)``, ``eps <= 0``, ``weight_decay < 0``.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01):
        if not lr > 0:
            raise ValueError(f"lr: must be > 0, got {lr}")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"betas[{i}]: must lie in [0, 1), got {beta}")
        if not eps > 0:
            raise ValueError(f"eps: must be > 0, got {eps}")
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
        params = list(params)
        groups = params if params and isinstance(params[0], dict) else [{"params": params}]
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay}
        self.param_groups = [{**defaults, **g, "params": list(g["params"])} for g in groups]
        self.state: dict[Parameter, dict] = {}

    def zero_grad(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad.fill(0.0)

    def step(self) -> None:
        for group in self.param_groups:
            lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p not in self.state:
                    self.state[p] = {
                        "step": 0,
                        "exp_avg": np.zeros_like(p.data),
                        "exp_avg_sq": np.zeros_like(p.data),
                    }
                state = self.state[p]
                state["step"] += 1
                t, m, v, g = state["step"], state["exp_avg"], state["exp_avg_sq"], p.grad
                ### BEGIN SOLUTION ch09
                ### TODO: m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2 (like p);
                ###   m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t); then
                ###   p -= lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p). Hint: m and v are the
                ###   optimizer's state: write into them (m[...] = ...), do not rebind the names
                m[...] = beta1 * m + (1 - beta1) * g
                v[...] = beta2 * v + (1 - beta2) * g**2
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                p.data -= lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * p.data)
                ### END SOLUTION


def clip_grad_norm_(parameters: Iterable[Parameter], max_norm: float) -> float:
    """Scale all gradients in place so their global L2 norm is at most ``max_norm``.

    If norm = sqrt(sum of every g^2) > max_norm, each g *= max_norm / (norm + 1e-6), torch's
    formula. Returns the norm before clipping.
    """
    ### BEGIN SOLUTION ch09
    ### TODO: norm = sqrt(sum of g^2 over every element of every gradient); if norm > max_norm,
    ###   scale every gradient in place by max_norm / (norm + 1e-6); return the norm before
    ###   clipping, a Python float
    grads = [p.grad for p in parameters]
    total_norm = math.sqrt(sum(float((g**2).sum()) for g in grads))
    clip_coef = max_norm / (total_norm + 1e-6)
    if clip_coef < 1.0:
        for g in grads:
            g *= clip_coef  # in place: rescaling the gradients is this function's job
    return total_norm
    ### END SOLUTION


def cosine_lr(
    step: int, max_lr: float, min_lr: float, warmup_iters: int, lr_decay_iters: int
) -> float:
    """Learning rate at ``step``: linear warmup, cosine decay, then a floor (nanoGPT's get_lr).

        step < warmup:           max_lr * (step + 1) / (warmup + 1)
        warmup <= step <= decay: min_lr + (max_lr - min_lr) * (1 + cos(pi r)) / 2,
                                 r = (step - warmup) / (decay - warmup)
        step > decay:            min_lr
    The cosine is SGDR's without restarts (Loshchilov & Hutter 2017, eq. 5).
    """
    ### BEGIN SOLUTION ch09
    ### TODO: a Python float: warmup max_lr (step + 1) / (warmup_iters + 1) while step <
    ###   warmup_iters; min_lr after lr_decay_iters; in between min_lr + 0.5 (1 + cos(pi r))
    ###   (max_lr - min_lr), r going 0 .. 1. Hint: lr_decay_iters == warmup_iters has no decay
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step > lr_decay_iters or lr_decay_iters == warmup_iters:
        return min_lr
    decay_ratio = (step - warmup_iters) / (lr_decay_iters - warmup_iters)  # 0 .. 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 .. 0
    return min_lr + coeff * (max_lr - min_lr)
    ### END SOLUTION
