"""Position-wise feed-forward network (Vaswani et al. 2017, eq. 2, with GELU)."""

from __future__ import annotations

import numpy as np

from .activations import GELU
from .dropout import Dropout
from .linear import Linear
from .module import Module


class FeedForward(Module):
    """FFN(x) = Dropout(fc2(GELU(fc1(x)))), applied to every position independently.

    Args:
        d_model: model width C.
        d_ff: hidden width; ``4 * d_model`` by default (Vaswani et al. 2017, sec. 3.3).
        bias: biases in fc1 and fc2.
        dropout: residual dropout probability on the output.
        gelu_approximate: ``"tanh"`` (GPT default) or ``"none"``.

    Shapes:
        forward: x ``(B, T, C)`` -> ``(B, T, C)``; hidden ``(B, T, d_ff)``.
        backward: dout ``(B, T, C)`` -> dx ``(B, T, C)``.

    Raises:
        ValueError: ``d_model`` or ``d_ff`` below 1.
    """

    def __init__(
        self,
        d_model,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="tanh",
        dtype=np.float32,
        rng=None,
    ):
        d_ff = 4 * d_model if d_ff is None else d_ff
        if d_model < 1 or d_ff < 1:
            raise ValueError(
                f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}"
            )
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)
        self.act = GELU(gelu_approximate)
        self.fc2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng)
        self.dropout = Dropout(dropout)

    def forward(self, x: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch06
        ### TODO: fc1, act (GELU), fc2, dropout: (B, T, C) -> (B, T, d_ff) -> (B, T, C)
        h = self.act(self.fc1(x))  # (B, T, C) -> (B, T, d_ff)
        return self.dropout(self.fc2(h))  # (B, T, d_ff) -> (B, T, C)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch06
        ### TODO: the backward of each layer of forward, in reverse order; return dx
        dh = self.fc2.backward(self.dropout.backward(dout))
        return self.fc1.backward(self.act.backward(dh))
        ### END SOLUTION
