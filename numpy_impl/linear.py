"""Linear layer y = x W^T + b, forward and backward (CS231n's affine_forward / affine_backward).

W is ``(out, in)``, PyTorch's layout: state dicts move between the twins without transposes.
The functions also serve layers that apply row blocks of one packed weight (cross-attention).
"""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_float, check_last_dim


def linear(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """y = x W^T + b over the last axis (``torch.nn.functional.linear``).

    Shapes: x ``(..., in)``, weight ``(out, in)``, bias ``(out,)`` or None -> y ``(..., out)``.
    Raises ValueError: the last axis of ``x`` is not ``in``.
    """
    check_last_dim(x, weight.shape[1], "x", "in_features")
    ### BEGIN SOLUTION ch02
    ### TODO: y (..., out) = x W^T + b: one matrix product over the rows of x flattened to
    ###   (N, in), then the bias (if not None), then back to x's leading axes
    x2 = x.reshape(-1, weight.shape[1])  # (..., in) -> (N, in)
    y = x2 @ weight.T  # (N, in) @ (in, out) -> (N, out)
    if bias is not None:
        y = y + bias  # (N, out) + (out,)
    return y.reshape(*x.shape[:-1], weight.shape[0])  # (N, out) -> (..., out)
    ### END SOLUTION


def linear_backward(
    dout: np.ndarray, x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Gradients of y = x W^T + b: dx = dout W, dW = dout^T x, db = dout summed over rows.

    Shapes: dout ``(..., out)``, x ``(..., in)``, weight ``(out, in)`` -> dx ``(..., in)``,
    dweight ``(out, in)``, dbias ``(out,)`` (None when ``bias`` is None). The caller adds them.
    """
    ### BEGIN SOLUTION ch02
    ### TODO: with dout and x flattened to (N, out) and (N, in): dx = dout W (reshaped like
    ###   x), dW = dout^T x (out, in), db = dout summed over the N rows (None if bias is None)
    out_features, in_features = weight.shape
    d2 = dout.reshape(-1, out_features)  # (..., out) -> (N, out)
    x2 = x.reshape(-1, in_features)  # (..., in) -> (N, in)
    dx = (d2 @ weight).reshape(x.shape)  # (N, out) @ (out, in) -> (N, in) -> (..., in)
    dweight = d2.T @ x2  # (out, N) @ (N, in) -> (out, in)
    dbias = None if bias is None else d2.sum(axis=0)  # (N, out) -> (out,)
    return dx, dweight, dbias
    ### END SOLUTION


class Linear(Module):
    """y = x W^T + b; ``rng`` draws the init U(-1/sqrt(in), 1/sqrt(in)), PyTorch's default.

    Shapes: x ``(..., in_features)`` -> ``(..., out_features)``; backward: dout -> dx, and
    adds dW ``(out_features, in_features)``, db ``(out_features,)``. Cache: x.
    Raises ValueError: a size below 1; the last axis of ``x`` is not ``in_features``.
    """

    _caches = ("_x",)  # what backward reads; dropped under no_grad()

    def __init__(self, in_features, out_features, bias=True, *, dtype=np.float32, rng=None):
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
        check_float(x, "x", self.weight.dtype)
        self._x = x  # backward needs the input: dW = dout^T x
        return linear(x, self.weight.data, None if self.bias is None else self.bias.data)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        bias = None if self.bias is None else self.bias.data
        dx, dweight, dbias = linear_backward(dout, self._x, self.weight.data, bias)
        self.weight.grad += dweight  # add, never assign: a shared weight collects every use
        if self.bias is not None:
            self.bias.grad += dbias
        self._x = None
        return dx
