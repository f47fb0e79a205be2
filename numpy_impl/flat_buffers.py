"""The parameters as views of one flat buffer of values and one of gradients.

Zeroing, clipping and AdamW (``fast.adamw_step``) then take a few calls in all, not a few per
parameter; a gradient all-reduce sends one buffer (``labs/plumbing/distributed.py``). No new
formula. Source: PyTorch FSDP's ``FlatParameter`` (Zhao et al. 2023, sec. 3.2) and apex's
multi-tensor ``FusedAdam``. No twin: eager PyTorch keeps one tensor per parameter.
"""

from __future__ import annotations

import math

import numpy as np


class FlatParameters:
    """Parameters whose values and gradients are consecutive views of two flat buffers.

    Each parameter's ``data`` (and gradient) moves into ``data[lo:hi]`` (``grad[lo:hi]``), in
    ``params``' order. Layers write gradients in place, so they see no difference; rebinding
    a ``p.data`` or ``p.grad`` (``Module.astype``) breaks the layout, as :meth:`intact` reports.
    ``data``, ``grad``: ``(N,)``, N the total size; ``params[i]`` is
    ``data[bounds[i]:bounds[i + 1]]``; ``exp_avg``, ``exp_avg_sq``: AdamW's moments, laid out
    as ``data`` (made by :meth:`moments`).
    Raises ValueError: ``params`` empty, repeated, or of several dtypes.
    """

    def __init__(self, params):
        self.params = list(params)
        if not self.params:
            raise ValueError("params: expected at least one Parameter, got none")
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("params: a Parameter appears twice (tied weights belong once)")
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1 or not np.issubdtype(next(iter(dtypes)), np.floating):
            raise ValueError(f"params: expected one floating dtype, got {sorted(map(str, dtypes))}")
        self.bounds = [0]
        for p in self.params:
            self.bounds.append(self.bounds[-1] + p.data.size)
        self.data = np.concatenate([p.data.ravel() for p in self.params])  # (N,)
        self.grad = np.zeros_like(self.data)  # (N,)
        for p, lo, hi in zip(self.params, self.bounds[:-1], self.bounds[1:], strict=True):
            shape, grad = p.data.shape, p._grad
            p.data = self.data[lo:hi].reshape(shape)
            p.grad = self.grad[lo:hi].reshape(shape)
            if grad is not None:
                p.grad[...] = grad
        self._views = [(p, p.data, p._grad) for p in self.params]
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self.exp_avg = self.exp_avg_sq = None
        self._moments: dict[int, tuple] = {}

    def view(self, p, buffer: np.ndarray) -> np.ndarray:
        """``p``'s part of ``buffer`` (one laid out as ``data``), in ``p``'s shape."""
        i = self.index[id(p)]
        return buffer[self.bounds[i] : self.bounds[i + 1]].reshape(p.data.shape)

    def moments(self, p) -> tuple[np.ndarray, np.ndarray]:
        """``p``'s views of ``exp_avg`` and ``exp_avg_sq`` (the buffers made, zeros, at first)."""
        if self.exp_avg is None:
            self.exp_avg, self.exp_avg_sq = np.zeros_like(self.data), np.zeros_like(self.data)
        if id(p) not in self._moments:
            self._moments[id(p)] = self.view(p, self.exp_avg), self.view(p, self.exp_avg_sq)
        return self._moments[id(p)]

    def runs(self, params) -> list[tuple[int, int]]:
        """The ``(lo, hi)`` stretches of the buffers that ``params`` cover, neighbours joined."""
        spans = sorted(
            (self.bounds[i], self.bounds[i + 1]) for i in map(self.index.get, map(id, params))
        )
        joined: list[list[int]] = []
        for lo, hi in spans:
            if joined and joined[-1][1] == lo:
                joined[-1][1] = hi
            else:
                joined.append([lo, hi])
        return [(lo, hi) for lo, hi in joined]

    def zero_grad(self) -> None:
        """Every gradient set to zero, in one call."""
        self.grad[...] = 0.0

    def intact(self) -> bool:
        """True while every parameter's ``data`` and ``grad`` are still this object's views."""
        return all(p.data is d and p._grad is g for p, d, g in self._views)


def flat_parameters(flat: FlatParameters | None, params) -> FlatParameters:
    """``flat`` while it is intact and holds exactly ``params`` in order, else a new
    :class:`FlatParameters` of ``params`` (their values moved in)."""
    params = list(params)
    same = flat is not None and len(flat.params) == len(params)
    if same and flat.intact() and all(a is b for a, b in zip(flat.params, params, strict=True)):
        return flat
    return FlatParameters(params)


def clip_grad_norm_(flat: FlatParameters, max_norm: float) -> float:
    """``optim.clip_grad_norm_`` over ``flat``'s gradients (Pascanu et al. 2013, Algorithm 1):
    norm = sqrt(sum g^2), each parameter's sum added as a Python float as that does; all
    gradients times ``max_norm / (norm + 1e-6)`` (torch's 1e-6) if below 1. Returns the norm."""
    g, bounds = flat.grad, flat.bounds
    total = sum(
        float(np.einsum("i,i->", g[lo:hi], g[lo:hi]))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    )
    total_norm = math.sqrt(total)
    clip_coef = max_norm / (total_norm + 1e-6)
    if clip_coef < 1.0:
        g *= clip_coef
    return total_norm
