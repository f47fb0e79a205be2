"""Activations GELU (Hendrycks & Gimpel 2016), ReLU, SiLU; twin of numpy_impl/activations.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float

GELU_APPROXIMATIONS = ("tanh", "none")


class GELU(nn.Module):
    """``GELU(x) = x * Phi(x)``, Phi the standard normal CDF (Hendrycks & Gimpel 2016).

    ``"none"``: ``0.5 * x * (1 + erf(x / sqrt(2)))``; ``"tanh"`` (GPT-2's, the default):
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))``. Any shape.
    ``ValueError`` if ``approximate`` is neither.
    """

    def __init__(self, approximate: str = "tanh"):
        super().__init__()
        if approximate not in GELU_APPROXIMATIONS:
            raise ValueError(
                f"approximate: expected one of {GELU_APPROXIMATIONS}, got {approximate!r}"
            )
        self.approximate = approximate

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x)
        return F.gelu(x, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class ReLU(nn.Module):
    """``ReLU(x) = max(x, 0)``, the activation of the original transformer's FFN
    (Vaswani et al. 2017, eq. 2). Elementwise, any shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x)
        return F.relu(x)


class SiLU(nn.Module):
    """``SiLU(x) = x * sigmoid(x)`` (Swish-1; Elfwing et al. 2017), the gate of SwiGLU
    (Shazeer 2020). Elementwise, any shape."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x)
        return F.silu(x)
