"""Inverted dropout (Srivastava et al. 2014): scale at train time, identity at eval."""

from __future__ import annotations

import numpy as np

from .module import Module, check_float


class Dropout(Module):
    """y = x * keep / (1 - p), keep ~ Bernoulli(1 - p); identity in eval mode or when p = 0.

    Srivastava et al. 2014, sec. 10 (scaling at training time instead of at test
    time, so evaluation is the identity). Backward: dx = dout * keep / (1 - p).

    Args:
        p: probability of zeroing an element, in ``[0, 1)``.
        seed: seed of this layer's own ``np.random.Generator``.

    Shapes: forward(x ``(...)``, mask=None) -> ``(...)``; backward(dout) -> dx.
    ``mask`` (bool, True = keep, broadcastable to x) replaces the random draw;
    the parity tests inject the same mask into both backends that way.

    Cache: the bool mask keep (None in eval mode or when p = 0).

    Raises:
        ValueError: ``p`` outside ``[0, 1)``; ``mask`` not broadcastable to ``x``.
        TypeError: ``mask`` that is not a bool array.
    """

    _caches = ("_keep",)  # what backward reads; dropped under no_grad()

    def __init__(self, p: float = 0.0, *, seed=None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p: dropout probability must lie in [0, 1), got {p}")
        self.p = p
        self._rng = np.random.default_rng(seed)
        self._keep = None

    def forward(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        check_float(x)
        if not self.training or self.p == 0.0:
            self._keep = None
            return x
        if mask is None:
            mask = self._rng.random(x.shape) >= self.p  # keep ~ Bernoulli(1 - p)
        else:  # the torch twin's checks: a mask must neither be cast nor grow x
            mask = np.asarray(mask)
            if mask.dtype != np.bool_:
                raise TypeError(
                    f"mask: expected a bool array (True = keep), got dtype {mask.dtype}"
                )
            try:
                ok = np.broadcast_shapes(mask.shape, x.shape) == x.shape
            except ValueError:
                ok = False
            if not ok:
                raise ValueError(
                    f"mask: expected a shape broadcastable to x's {x.shape}, got {mask.shape}"
                )
        self._keep = mask
        return x * mask / (1 - self.p)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        if self._keep is None:
            return dout
        return dout * self._keep / (1 - self.p)
