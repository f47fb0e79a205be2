"""Linear layer: y = x W^T + b, with its hand-written backward.

The weight is stored as ``(out_features, in_features)``, PyTorch's layout, so a
state dict moves between the backends without transposes. Every leading
dimension is flattened into one ``(N, in_features)`` matrix, so forward and
backward are each one GEMM however many batch axes the input has.
"""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_last_dim


class Linear(Module):
    """y = x W^T + b.

    Args:
        in_features, out_features: sizes of the last axis of input and output.
        bias: learn an additive bias ``b`` of shape ``(out_features,)``.
        dtype: float32 for training, float64 for parity tests.
        rng: ``np.random.Generator`` for the default init, U(-1/sqrt(in), 1/sqrt(in))
            (PyTorch's default; the GPT re-initialises its layers).

    Shapes:
        forward: x ``(..., in_features)`` -> ``(..., out_features)``
        backward: dout ``(..., out_features)`` -> dx ``(..., in_features)``;
        adds dW ``(out_features, in_features)`` and db ``(out_features,)``.

    Raises:
        ValueError: ``in_features`` or ``out_features`` below 1; the last axis
            of ``x`` is not ``in_features``.
    """

    def __init__(self, in_features, out_features, bias=True, dtype=np.float32, rng=None):
        if in_features < 1 or out_features < 1:
            raise ValueError(
                "in_features and out_features must be positive, "
                f"got in_features={in_features}, out_features={out_features}"
            )
        rng = np.random.default_rng() if rng is None else rng
        bound = 1.0 / np.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(
            rng.uniform(-bound, bound, (out_features, in_features)).astype(dtype)
        )
        self.bias = Parameter(np.zeros(out_features, dtype)) if bias else None
        self._x = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_last_dim(x, self.in_features, "x", "in_features")
        ### BEGIN SOLUTION ch02
        ### TODO: y = x W^T + b: flatten x to (N, in_features), one matrix product, add the bias
        ###   (if any), reshape to (..., out_features); keep x in self._x for backward
        self._x = x  # backward needs the input for dW = dout^T x
        x2 = x.reshape(-1, self.in_features)  # (N, in)
        out = x2 @ self.weight.data.T  # (N, in) @ (in, out) -> (N, out)
        if self.bias is not None:
            out += self.bias.data
        return out.reshape(*x.shape[:-1], self.out_features)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch02
        ### TODO: ADD (+=) dW = dout^T x (out, in) and db = dout summed over rows into .grad;
        ###   return dx = dout W, shaped like x
        x2 = self._x.reshape(-1, self.in_features)  # (N, in)
        d2 = dout.reshape(-1, self.out_features)  # (N, out)
        self.weight.grad += d2.T @ x2  # (out, N) @ (N, in) -> (out, in)
        if self.bias is not None:
            self.bias.grad += d2.sum(axis=0)
        dx = d2 @ self.weight.data  # (N, out) @ (out, in) -> (N, in)
        self._x = None
        return dx.reshape(*dout.shape[:-1], self.in_features)
        ### END SOLUTION


def linear(x, weight, bias=None):
    """TEMPORARY (lead's stand-in until the formula branch merges)."""
    y = x @ weight.T
    return y if bias is None else y + bias


def linear_backward(dout, x, weight, bias=None):
    """TEMPORARY (lead's stand-in until the formula branch merges)."""
    d2 = dout.reshape(-1, weight.shape[0])
    x2 = x.reshape(-1, weight.shape[1])
    dx = (d2 @ weight).reshape(*dout.shape[:-1], weight.shape[1])
    return dx, d2.T @ x2, None if bias is None else d2.sum(axis=0)
