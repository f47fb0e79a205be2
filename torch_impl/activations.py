"""Activations GELU (Hendrycks & Gimpel 2016), ReLU, SiLU; twin of numpy_impl/activations.py."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float

GELU_APPROXIMATIONS = ("tanh", "none")


class GELU(nn.Module):
    """Gaussian Error Linear Unit, ``GELU(x) = x * Phi(x)`` (Hendrycks & Gimpel 2016).

    ``Phi`` is the standard normal CDF. Two forms are offered:

    * ``approximate="none"`` (exact)::

          GELU(x) = 0.5 * x * (1 + erf(x / sqrt(2)))

    * ``approximate="tanh"`` (the default here, and the form GPT-2 was trained
      with, so the GPT default)::

          GELU(x) ~= 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x**3)))

    The two differ by less than about 1e-3 in absolute value; pick the one the
    weights were trained with.

    Args:
        approximate: ``"tanh"`` or ``"none"``.

    Shapes:
        x: any shape, float -> same shape and dtype.

    Raises:
        ValueError: if ``approximate`` is neither ``"tanh"`` nor ``"none"``.
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
