"""AdamW, global-norm gradient clipping, and the warmup + cosine schedule."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .module import Module, Parameter


def configure_param_groups(model: Module, weight_decay: float) -> list[dict]:
    """Split parameters into a decayed and a non-decayed group.

    Matrices (ndim >= 2: Linear weights, embeddings) are decayed; vectors
    (biases, LayerNorm weights, anything 1-D) are not, as in nanoGPT and
    GPT-3: decaying a gain towards 0 only fights the normalisation.
    A tied parameter appears once.
    """
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay: must be >= 0, got {weight_decay}")
    params = model.parameters()
    return [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]


class AdamW:
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2).

    Per parameter, at step t (g = gradient, lr = group learning rate):
        p  <- p * (1 - lr * weight_decay)                 decoupled decay
        m  <- beta1 m + (1 - beta1) g
        v  <- beta2 v + (1 - beta2) g^2
        p  <- p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

    The same arithmetic, in the same order, as ``torch.optim.AdamW``, so the
    two backends agree to rounding. Updates are in place.

    Args:
        params: a list of Parameters or of param-group dicts (``"params"``
            plus optional ``"lr"``, ``"weight_decay"``), as in torch.
        lr, betas, eps, weight_decay: defaults for every group.

    Attributes:
        param_groups: list of dicts; set ``group["lr"]`` to change the rate.
        state: Parameter -> {"step": int, "exp_avg": m, "exp_avg_sq": v}.
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
        self._buf = None  # scratch space for step(), sized to the largest parameter

    def zero_grad(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                p.grad.fill(0.0)

    def step(self) -> None:
        for group in self.param_groups:
            lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                st = self.state.get(p)
                if st is None:
                    st = self.state[p] = {
                        "step": 0,
                        "exp_avg": np.zeros_like(p.data),
                        "exp_avg_sq": np.zeros_like(p.data),
                    }
                st["step"] += 1
                t, m, v, g = st["step"], st["exp_avg"], st["exp_avg_sq"], p.grad
                tmp = self._scratch(p)  # one reusable buffer: no temporaries per step
                ### BEGIN SOLUTION ch09
                ### TODO: update p in place: decoupled decay p *= 1 - lr * wd, then m and v
                ###   (in place), then p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t)
                ###   + eps), in that order (torch's); tmp is a scratch array shaped like p
                if wd != 0.0:
                    p.data *= 1.0 - lr * wd
                # m <- beta1 m + (1 - beta1) g, written as torch's lerp: m + (1 - beta1)(g - m)
                np.subtract(g, m, out=tmp)
                tmp *= 1.0 - beta1
                m += tmp
                # v <- beta2 v + (1 - beta2) g^2
                v *= beta2
                np.multiply(g, g, out=tmp)
                tmp *= 1.0 - beta2
                v += tmp
                # p <- p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
                step_size = lr / (1.0 - beta1**t)
                np.sqrt(v, out=tmp)
                tmp /= math.sqrt(1.0 - beta2**t)
                tmp += eps
                np.divide(m, tmp, out=tmp)
                tmp *= step_size
                p.data -= tmp
                ### END SOLUTION

    def _scratch(self, p: Parameter) -> np.ndarray:
        """A view of one shared buffer, shaped like ``p`` (grown on demand)."""
        if self._buf is None or self._buf.size < p.data.size or self._buf.dtype != p.dtype:
            self._buf = np.empty(p.data.size, p.dtype)
        return self._buf[: p.data.size].reshape(p.shape)


def clip_grad_norm_(parameters: Iterable[Parameter], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most ``max_norm``.

    norm = sqrt(sum over every parameter of sum(g^2)); if norm > max_norm every
    gradient is multiplied by max_norm / (norm + 1e-6) (torch's formula, so
    the backends clip identically). Returns the norm *before* clipping.
    """
    ### BEGIN SOLUTION ch09
    ### TODO: norm = sqrt(sum of g^2 over every gradient); if norm > max_norm scale every
    ###   gradient in place by max_norm / (norm + 1e-6); return the norm before clipping
    grads = [p.grad for p in parameters]
    total = math.sqrt(sum(float(np.dot(g.ravel(), g.ravel())) for g in grads))
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g *= coef
    return total
    ### END SOLUTION


def cosine_lr(step: int, max_lr: float, min_lr: float, warmup_iters: int, lr_decay_iters: int):
    """Learning rate at ``step``: linear warmup, cosine decay, then a floor (nanoGPT).

    step <  warmup:          max_lr * (step + 1) / (warmup + 1)      (> 0 at step 0)
    warmup <= step <= decay: min_lr + (max_lr - min_lr) * (1 + cos(pi * r)) / 2,
                             r = (step - warmup) / (decay - warmup)
    step > decay:            min_lr
    """
    ### BEGIN SOLUTION ch09
    ### TODO: the three pieces of the docstring: warmup, cosine decay, floor
    ###   (if lr_decay_iters == warmup_iters there is no decay: min_lr)
    if step < warmup_iters:
        return max_lr * (step + 1) / (warmup_iters + 1)
    if step > lr_decay_iters or lr_decay_iters == warmup_iters:
        return min_lr
    ratio = (step - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - min_lr)
    ### END SOLUTION
