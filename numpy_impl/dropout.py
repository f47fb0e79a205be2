"""Inverted dropout (Srivastava et al. 2014): scale at train time, identity at eval."""

from __future__ import annotations

import numpy as np

from .module import Module


class Dropout(Module):
    """y = x * keep / (1 - p), keep ~ Bernoulli(1 - p); identity in eval mode or when p = 0.

    Args:
        p: probability of zeroing an element, in ``[0, 1)``.
        seed: seed of this layer's own ``np.random.Generator``.

    Shapes: forward(x ``(...)``, mask=None) -> ``(...)``; backward(dout) -> dx.
    ``mask`` (bool, True = keep, broadcastable to x) replaces the random draw;
    the parity tests inject the same mask into both backends that way.

    Raises:
        ValueError: ``p`` outside ``[0, 1)``; ``mask`` not broadcastable to ``x``.
        TypeError: ``mask`` that is not a bool array.
    """

    def __init__(self, p: float = 0.0, seed=None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p: dropout probability must lie in [0, 1), got {p}")
        self.p = p
        self._rng = np.random.default_rng(seed)
        self._scale = None

    def forward(self, x: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        if not self.training or self.p == 0.0:
            self._scale = None
            return x
        if mask is None:
            mask = self._rng.random(x.shape) >= self.p
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
        # one array holding keep / (1 - p) serves forward and backward alike
        self._scale = mask.astype(x.dtype) / (1.0 - self.p)
        return x * self._scale

    def backward(self, dout: np.ndarray) -> np.ndarray:
        if self._scale is None:
            return dout
        return dout * self._scale
