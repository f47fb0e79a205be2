"""Position-wise feed-forward networks: GELU/ReLU MLP (Vaswani et al. 2017, eq. 2) and SwiGLU."""

from __future__ import annotations

import numpy as np

from .activations import GELU, ReLU, SiLU
from .dropout import Dropout
from .linear import Linear
from .module import Module, check_last_dim

FFN_ACTIVATIONS = ("gelu", "relu")


def swiglu_hidden_dim(d_model: int, multiple_of: int = 8) -> int:
    """SwiGLU's default width: 2/3 of 4 d_model, rounded up to ``multiple_of`` (as Llama).

    Three ``(d_ff, d_model)`` matrices then hold as many parameters as a 4 d_model MLP's two
    (Shazeer 2020, sec. 2). d_model 128 -> 341 -> 344."""
    hidden = int(2 * (4 * d_model) / 3)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class FeedForward(Module):
    """FFN(x) = Dropout(fc2(act(fc1(x)))), applied to every position independently.

    ``d_ff``: hidden width, ``4 * d_model`` by default (Vaswani et al. 2017, sec. 3.3).
    ``activation``: ``"gelu"`` (GPT-2, the default; ``gelu_approximate`` picks its form) or
    ``"relu"`` (the original transformer, eq. 2). ``dropout``: on the output.
    x ``(B, T, C)`` -> hidden ``(B, T, d_ff)`` -> ``(B, T, C)``.
    Raises ValueError: ``d_model`` or ``d_ff`` below 1, an unknown ``activation``.
    """

    def __init__(
        self,
        d_model,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="tanh",
        activation="gelu",
        *,
        dtype=np.float32,
        rng=None,
    ):
        if activation not in FFN_ACTIVATIONS:
            raise ValueError(f"activation: expected one of {FFN_ACTIVATIONS}, got {activation!r}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        if d_model < 1 or d_ff < 1:
            raise ValueError(
                f"d_model and d_ff must be positive, got d_model={d_model}, d_ff={d_ff}"
            )
        self.fc1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)
        self.act = GELU(gelu_approximate) if activation == "gelu" else ReLU()
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
        ### TODO: each layer's backward, in reverse order (dropout, fc2, act, fc1):
        ###   (B, T, C) -> (B, T, d_ff) -> (B, T, C); return dx
        dh = self.fc2.backward(self.dropout.backward(dout))  # (B, T, C) -> (B, T, d_ff)
        return self.fc1.backward(self.act.backward(dh))  # (B, T, d_ff) -> (B, T, C)
        ### END SOLUTION


class SwiGLUFeedForward(Module):
    """SwiGLU FFN (Shazeer 2020, eq. 6; Llama): w2(SiLU(w1(x)) * w3(x)), then dropout.

    Llama's names: ``w1`` the gate, ``w3`` the up, ``w2`` the down projection (Hugging Face:
    ``gate_proj``, ``up_proj``, ``down_proj``). ``d_ff`` None: :func:`swiglu_hidden_dim`.
    ``bias`` False by default, as Llama. x ``(..., C)`` -> hidden ``(..., d_ff)`` -> ``(..., C)``.

    Backward, with h = a * u, a = SiLU(g), g = w1 x, u = w3 x (a and u are cached):
        dh = w2^T dout,   da = dh * u,   du = dh * a,
        dx = w1^T (SiLU'(g) da) + w3^T du      (x feeds two branches: they add)

    Raises ValueError: a non-positive ``d_ff`` or ``multiple_of``.
    """

    _caches = ("_gate", "_up")  # what backward reads; dropped under no_grad()

    def __init__(
        self,
        d_model,
        d_ff=None,
        bias=False,
        dropout=0.0,
        multiple_of=8,
        *,
        dtype=np.float32,
        rng=None,
    ):
        if multiple_of < 1:
            raise ValueError(f"multiple_of: must be a positive int, got {multiple_of}")
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else d_ff
        if d_ff < 1:
            raise ValueError(f"d_ff: must be a positive int, got {d_ff}")
        self.d_model, self.d_ff = d_model, d_ff
        self.w1 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)  # gate
        self.w2 = Linear(d_ff, d_model, bias=bias, dtype=dtype, rng=rng)  # down
        self.w3 = Linear(d_model, d_ff, bias=bias, dtype=dtype, rng=rng)  # up
        self.act = SiLU()
        self.dropout = Dropout(dropout)
        self._gate = self._up = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_last_dim(x, self.d_model, "x", "d_model")
        ### BEGIN SOLUTION ch14
        ### TODO: gate = act(w1(x)), up = w3(x) (both (..., d_ff)); cache them in self._gate,
        ###   self._up; return dropout(w2(gate * up))
        gate = self.act(self.w1(x))  # (..., C) -> (..., d_ff)
        up = self.w3(x)  # (..., C) -> (..., d_ff)
        self._gate, self._up = gate, up
        return self.dropout(self.w2(gate * up))  # (..., d_ff) -> (..., C)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: dh (..., d_ff) through dropout and w2; then dgate = dh * up and dup = dh * gate;
        ###   x fed both w1 (through act) and w3, so dx (..., C) is the sum of their backward
        ###   passes
        dh = self.w2.backward(self.dropout.backward(dout))  # (..., C) -> (..., d_ff)
        dgate = dh * self._up  # (..., d_ff)
        dup = dh * self._gate  # (..., d_ff)
        self._gate = self._up = None
        return self.w1.backward(self.act.backward(dgate)) + self.w3.backward(dup)  # (..., C)
        ### END SOLUTION
