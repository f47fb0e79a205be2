"""Position-wise feed-forward network, twin of ``numpy_impl/ffn.py``.

The same two-layer MLP is applied to every position independently
(Vaswani et al. 2017, eq. 2, with GELU in place of ReLU as in GPT-2).
"""

from __future__ import annotations

import torch
from torch import nn

from .activations import GELU
from .dropout import Dropout
from .linear import Linear


class FeedForward(nn.Module):
    """``FFN(x) = Dropout(GELU(x W1^T + b1) W2^T + b2)``.

    Args:
        d_model: input and output width.
        d_ff: hidden width; ``None`` means ``4 * d_model`` (Vaswani et al. 2017).
        bias: give both linear layers a bias.
        dropout: drop probability applied to the output, in ``[0, 1)``.
        gelu_approximate: ``"tanh"`` (GPT-2) or ``"none"``; see :class:`GELU`.
        dtype: parameter dtype (``None``: torch's default).

    Submodules (in this order, matching the NumPy twin):
        fc1: ``Linear(d_model, d_ff)``, weight ``(d_ff, d_model)``.
        act: ``GELU``.
        fc2: ``Linear(d_ff, d_model)``, weight ``(d_model, d_ff)``.
        dropout: ``Dropout``.

    Shapes:
        x: ``(..., d_model)`` -> ``(..., d_model)``; typically ``(B, T, d_model)``.

    Raises:
        ValueError: ``d_ff < 1``, a bad ``dropout`` or ``gelu_approximate``, or
            an input whose last dimension is not ``d_model``.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "tanh",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        if d_model < 1 or d_ff < 1:
            raise ValueError(
                f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}"
            )
        self.d_model = d_model
        self.d_ff = d_ff
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype)
        self.act = GELU(gelu_approximate)
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype)
        self.dropout = Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))  # (..., d_model) -> (..., d_ff)
        return self.dropout(self.fc2(h))  # (..., d_ff) -> (..., d_model)
