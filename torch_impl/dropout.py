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
    """Zero each element with probability ``p`` during training, scale the rest by ``1/(1-p)``.

    Scaling at training time ("inverted" dropout) keeps the expected activation
    unchanged, so evaluation is the identity and needs no rescaling.

    Args:
        p: drop probability, in ``[0, 1)``.

    Shapes:
        x: any shape, float -> same shape and dtype.
        mask (optional): bool, broadcastable to ``x``; ``True`` keeps an element.

    Behaviour:
        * eval mode, or ``p == 0``: returns ``x`` unchanged (``mask`` ignored).
        * training with ``mask``: ``x * mask / (1 - p)``. The parity tests use
          this to replay the NumPy side's random mask exactly.
        * training without ``mask``: ``F.dropout(x, p)``, drawing from torch's RNG.

    Raises:
        ValueError: ``p`` outside ``[0, 1)``, or ``mask`` not broadcastable to ``x``.
        TypeError: ``mask`` that is not a bool tensor.
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
