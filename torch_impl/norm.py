"""Layer normalisation (Ba et al. 2016) and RMSNorm, twin of ``numpy_impl/norm.py``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float


class LayerNorm(nn.Module):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis (Ba et al.
    2016, eqs. 3-4); ``var`` divides by ``d_model``. weight ones, bias zeros or None.

    Shapes: ``(..., d_model)`` -> ``(..., d_model)``; ``ValueError`` for another last dimension.
    """

    def __init__(
        self,
        d_model: int,
        eps: float = 1e-5,
        bias: bool = True,
        *,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if d_model < 1:
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:  # also catches NaN
            raise ValueError(f"eps must be positive, got eps={eps}")
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, dtype=dtype))
        if bias:
            self.bias = nn.Parameter(torch.zeros(d_model, dtype=dtype))
        else:
            # defined (as None) for F.layer_norm, and out of state_dict
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x, "x", self.weight.dtype)
        if x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x: expected shape (..., d_model={self.d_model}), got {tuple(x.shape)}"
            )
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """``y = x / sqrt(mean(x^2) + eps) * weight`` over the last axis (Zhang & Sennrich 2019).

    Written as Meta's Llama writes it; ``torch.nn.RMSNorm`` (torch >= 2.4) agrees, but its
    ``eps=None`` means machine epsilon, not 1e-5. Shapes: ``(..., d_model)`` -> same;
    ``ValueError`` for another last dimension or ``eps <= 0``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, *, dtype: torch.dtype | None = None):
        super().__init__()
        if d_model < 1:
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:
            raise ValueError(f"eps: must be positive, got {eps}")
        self.d_model = d_model
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x, "x", self.weight.dtype)
        if x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x: expected shape (..., d_model={self.d_model}), got {tuple(x.shape)}"
            )
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"
