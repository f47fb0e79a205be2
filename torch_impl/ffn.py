"""Position-wise feed-forward networks (one MLP per position), twin of ``numpy_impl/ffn.py``."""

from __future__ import annotations

import torch
from torch import nn

from .activations import GELU, ReLU, SiLU
from .dropout import Dropout
from .linear import Linear

FFN_ACTIVATIONS = ("gelu", "relu")


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """2/3 of 4 d_model rounded up to a multiple of ``multiple_of`` (Llama's rule): 128 -> 344."""
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class FeedForward(nn.Module):
    """``FFN(x) = Dropout(act(x W1^T + b1) W2^T + b2)``, act GELU (GPT-2) or ReLU
    (Vaswani et al. 2017, eq. 2); ``d_ff`` defaults to ``4 * d_model``.

    Submodules fc1, act, fc2, dropout, in the NumPy twin's order. Shapes: ``(..., d_model)``
    -> ``(..., d_model)``. ``ValueError`` for a bad size, option, or input width.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "tanh",
        activation: str = "gelu",
        *,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if activation not in FFN_ACTIVATIONS:
            raise ValueError(f"activation: expected one of {FFN_ACTIVATIONS}, got {activation!r}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        if d_model < 1 or d_ff < 1:
            raise ValueError(
                f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}"
            )
        self.d_model = d_model
        self.d_ff = d_ff
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype)
        self.act = GELU(gelu_approximate) if activation == "gelu" else ReLU()
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))  # (..., d_model) -> (..., d_ff)
        return self.dropout(self.fc2(h))  # (..., d_ff) -> (..., d_model)


class SwiGLUFeedForward(nn.Module):
    """SwiGLU FFN (Shazeer 2020, eq. 6), as in Llama: ``w2(SiLU(w1(x)) * w3(x))``, then dropout.

    Meta's names (Hugging Face: ``gate_proj``, ``up_proj``, ``down_proj``); ``d_ff`` defaults
    to :func:`swiglu_hidden_dim`. Shapes: ``(..., d_model)`` -> ``(..., d_model)``.
    ``ValueError`` for a non-positive size, a bad dropout, or a wrong input width.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        multiple_of: int = 8,
        *,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if multiple_of < 1:
            raise ValueError(f"multiple_of: must be a positive int, got {multiple_of}")
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else d_ff
        if d_ff < 1:
            raise ValueError(f"d_ff: must be a positive int, got {d_ff}")
        self.d_model = d_model
        self.d_ff = d_ff
        self.w1 = Linear(d_model, d_ff, bias=bias, dtype=dtype)  # gate
        self.w2 = Linear(d_ff, d_model, bias=bias, dtype=dtype)  # down
        self.w3 = Linear(d_model, d_ff, bias=bias, dtype=dtype)  # up
        self.act = SiLU()
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x: expected shape (..., d_model={self.d_model}), got {tuple(x.shape)}"
            )
        # (..., d_model) -> two (..., d_ff) branches, gated product -> (..., d_model)
        return self.dropout(self.w2(self.act(self.w1(x)) * self.w3(x)))
