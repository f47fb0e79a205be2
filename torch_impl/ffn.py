"""Position-wise feed-forward networks, twin of ``numpy_impl/ffn.py``.

The same MLP is applied to every position independently: two layers with
GELU (GPT-2) or ReLU (Vaswani et al. 2017, eq. 2) between them, or the gated
SwiGLU of Llama (Shazeer 2020).
"""

from __future__ import annotations

import torch
from torch import nn

from .activations import GELU, ReLU, SiLU
from .dropout import Dropout
from .linear import Linear

FFN_ACTIVATIONS = ("gelu", "relu")


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """2/3 of 4 d_model rounded up to a multiple of ``multiple_of`` (Llama's rule; 8 here).

    d_model 128 -> int(341.3) = 341 -> 344. Same function as the NumPy twin's.
    """
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class FeedForward(nn.Module):
    """``FFN(x) = Dropout(GELU(x W1^T + b1) W2^T + b2)``.

    Args:
        d_model: input and output width.
        d_ff: hidden width; ``None`` means ``4 * d_model`` (Vaswani et al. 2017).
        bias: give both linear layers a bias.
        dropout: drop probability applied to the output, in ``[0, 1)``.
        gelu_approximate: ``"tanh"`` (GPT-2) or ``"none"``; see :class:`GELU`.
        activation: ``"gelu"`` (GPT-2, default) or ``"relu"`` (Vaswani et al. 2017).
        dtype: parameter dtype (``None``: torch's default).

    Submodules (in this order, matching the NumPy twin):
        fc1: ``Linear(d_model, d_ff)``, weight ``(d_ff, d_model)``.
        act: ``GELU`` or ``ReLU``.
        fc2: ``Linear(d_ff, d_model)``, weight ``(d_model, d_ff)``.
        dropout: ``Dropout``.

    Shapes:
        x: ``(..., d_model)`` -> ``(..., d_model)``; typically ``(B, T, d_model)``.

    Raises:
        ValueError: ``d_ff < 1``, a bad ``dropout``, ``gelu_approximate`` or
            ``activation``, or an input whose last dimension is not ``d_model``.
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

    Meta's names: ``w1`` gate, ``w3`` up, ``w2`` down (Hugging Face:
    ``gate_proj``, ``up_proj``, ``down_proj``). Twin of the NumPy class.

    Args:
        d_model: model width.
        d_ff: hidden width; None = :func:`swiglu_hidden_dim` (d_model, multiple_of).
        bias: biases in the three linears (Llama: none, the default).
        dropout: on the output, in ``[0, 1)``.
        multiple_of: rounding of the default ``d_ff``.
        dtype: parameter dtype.

    Submodules (in this order): ``w1 (d_ff, d_model)``, ``w2 (d_model, d_ff)``,
    ``w3 (d_ff, d_model)``, ``act`` (SiLU), ``dropout``.

    Shapes:
        x: ``(..., d_model)`` -> ``(..., d_model)``.

    Raises:
        ValueError: a non-positive ``d_ff`` or ``multiple_of``, a bad ``dropout``,
            an input whose last dimension is not ``d_model``.
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
