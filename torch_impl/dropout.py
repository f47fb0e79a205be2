"""Inverted dropout (Srivastava et al. 2014), twin of ``numpy_impl/dropout.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float


def check_probability(p: float, name: str = "p") -> float:
    """Return ``float(p)`` if ``0 <= p < 1``; raise ``ValueError`` naming ``name`` otherwise."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name}: dropout probability must lie in [0, 1), got {p}")
    return float(p)


class Dropout(nn.Module):
    """Zero each element with probability ``p`` in training, scale the rest by ``1/(1-p)``;
    identity in eval mode or when ``p == 0``. Any shape.

    ``mask`` (bool, broadcastable to x, True = keep) replays the NumPy side's draw:
    ``x * mask / (1 - p)``. ``ValueError`` for ``p`` outside ``[0, 1)`` or a mask
    that does not broadcast; ``TypeError`` for a mask that is not bool.
    """

    def __init__(self, p: float = 0.0):
        super().__init__()
        self.p = check_probability(p)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        check_float(x)
        if not self.training or self.p == 0.0:
            return x
        if mask is None:
            return F.dropout(x, self.p, training=True)
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise TypeError(f"mask: expected a bool tensor (True = keep), got {_describe(mask)}")
        try:
            ok = torch.broadcast_shapes(mask.shape, x.shape) == x.shape
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"mask: expected a shape broadcastable to x's {tuple(x.shape)}, "
                f"got {tuple(mask.shape)}"
            )
        return x * mask / (1.0 - self.p)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def _describe(obj: object) -> str:
    if isinstance(obj, torch.Tensor):
        return f"tensor of dtype {obj.dtype}"
    return type(obj).__name__
