"""Layer normalisation (Ba et al. 2016), twin of ``numpy_impl/norm.py``.

Each token vector is normalised on its own (over the feature axis, never over
the batch), then scaled and shifted by learned per-feature parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float


class LayerNorm(nn.Module):
    """``y = (x - mean) / sqrt(var + eps) * weight + bias`` over the last axis.

    ``mean`` and ``var`` are taken over the last dimension; ``var`` is the
    biased (population) variance, divided by ``d_model`` not ``d_model - 1``,
    and ``eps`` sits inside the square root (Ba et al. 2016, eqs. 3-4; the same
    convention as ``torch.nn.LayerNorm`` and GPT-2).

    Args:
        d_model: size of the normalised (last) dimension.
        eps: added to the variance for numerical safety.
        bias: learn the shift ``bias`` when True; GPT-2 does.
        dtype: parameter dtype (``None``: torch's default).

    Parameters:
        weight: ``(d_model,)``, initialised to ones (the gain, gamma).
        bias: ``(d_model,)``, initialised to zeros (the shift, beta), or
            ``None`` when ``bias=False``.

    Shapes:
        x: ``(..., d_model)`` -> ``(..., d_model)``, x's dtype.

    Raises:
        ValueError: if the last dimension of ``x`` is not ``d_model``.
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
            # Keeps `self.bias` defined (as None) for F.layer_norm, and out of state_dict.
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

    Written as Meta's Llama writes it, ``x * torch.rsqrt(x.pow(2).mean(-1,
    keepdim=True) + eps) * weight``: ``torch.nn.RMSNorm`` (torch >= 2.4)
    computes the same thing (the parity tests check it) but this project
    accepts torch >= 2.2. Note that ``torch.nn.RMSNorm(eps=None)`` means the
    dtype's machine epsilon, not 1e-5: pass eps explicitly when comparing.

    Args:
        d_model: size of the normalised (last) dimension.
        eps: added to the mean square, inside the square root (1e-5, as in Llama 2).
        dtype: parameter dtype (``None``: torch's default).

    Parameters:
        weight: ``(d_model,)``, initialised to ones.

    Shapes:
        x: ``(..., d_model)`` -> ``(..., d_model)``, x's dtype.

    Raises:
        ValueError: the last dimension of ``x`` is not ``d_model``; ``eps <= 0``.
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
