"""LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019), forward and backward."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_float, check_last_dim


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, per token (Ba et al. 2016, eqs. 3-4).

    ``var`` is biased (divides by C) and eps sits inside the root, as in ``torch.nn.LayerNorm``.
    Shapes: x ``(..., C)`` -> ``(..., C)``; backward dout -> dx, adds dweight, dbias ``(C,)``.
    Cache: xhat ``(..., C)`` and rstd ``(..., 1)`` of :func:`layer_norm`. ``bias=False``: no shift.
    Raises ValueError: ``d_model < 1`` or ``eps <= 0``; the last axis of x is not ``d_model``.
    """

    _caches = ("_xhat", "_rstd")  # what backward reads; dropped under no_grad()

    def __init__(self, d_model, eps=1e-5, bias=True, *, dtype=np.float32):
        if d_model < 1:
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:  # also catches NaN
            raise ValueError(f"eps must be positive, got eps={eps}")
        self.d_model, self.eps = d_model, eps
        self.weight = Parameter(np.ones(d_model, dtype))
        self.bias = Parameter(np.zeros(d_model, dtype)) if bias else None
        self._xhat = self._rstd = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x, "x", self.weight.dtype)
        check_last_dim(x, self.d_model, "x", "d_model")
        b = None if self.bias is None else self.bias.data
        y, self._xhat, self._rstd = layer_norm(x, self.weight.data, b, self.eps)
        return y

    def backward(self, dout: np.ndarray) -> np.ndarray:
        xhat, rstd, C = self._xhat, self._rstd, self.d_model
        ### BEGIN SOLUTION ch07
        ### TODO: ADD dweight = sum of dout * xhat and dbias = sum of dout over every row, (C,),
        ###   into .grad (the bias may be None)
        self.weight.grad += (dout * xhat).reshape(-1, C).sum(axis=0)  # (N, C) -> (C,)
        if self.bias is not None:
            self.bias.grad += dout.reshape(-1, C).sum(axis=0)  # (N, C) -> (C,)
        ### END SOLUTION
        self._xhat = self._rstd = None
        return layer_norm_backward(dout, xhat, rstd, self.weight.data)  # dx (..., C)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float):
    """LayerNorm of each row of x ``(..., C)``; weight, bias ``(C,)`` (bias may be None).

    Returns y ``(..., C)`` and the cache xhat ``(..., C)``, rstd = 1 / sqrt(var + eps) ``(..., 1)``.
    """
    ### BEGIN SOLUTION ch07
    ### TODO: per row, xhat = (x - mean) * rstd with rstd = 1 / sqrt(var + eps) (..., 1), then
    ###   y = xhat * weight + bias (bias may be None); return y, xhat, rstd. Hint: var is
    ###   biased (divides by C)
    xc = x - x.mean(axis=-1, keepdims=True)  # (..., C): each row minus its mean (..., 1)
    var = (xc * xc).mean(axis=-1, keepdims=True)  # (..., 1), biased: divides by C
    rstd = 1.0 / np.sqrt(var + eps)  # (..., 1)
    xhat = xc * rstd  # (..., C)
    y = xhat * weight
    return (y if bias is None else y + bias), xhat, rstd
    ### END SOLUTION


def layer_norm_backward(
    dout: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, weight: np.ndarray
) -> np.ndarray:
    """dx ``(..., C)`` of :func:`layer_norm` from its cache; dxhat = dout * weight, sums over C:

        dx = rstd / C * (C dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))

    dweight = sum(dout * xhat) and dbias = sum(dout) over rows are :meth:`LayerNorm.backward`'s.
    """
    ### BEGIN SOLUTION ch07
    ### TODO: dx = rstd / C * (C dxhat - sum(dxhat) - xhat sum(dxhat xhat)) with
    ###   dxhat = dout * weight. Hint: the two row sums keep their axis (keepdims)
    C = xhat.shape[-1]
    dxhat = dout * weight  # (..., C)
    sum_dxhat = dxhat.sum(axis=-1, keepdims=True)  # (..., 1)
    sum_dxhat_xhat = (dxhat * xhat).sum(axis=-1, keepdims=True)  # (..., 1)
    return rstd / C * (C * dxhat - sum_dxhat - xhat * sum_dxhat_xhat)  # (..., C)
    ### END SOLUTION


class RMSNorm(Module):
    """y = x / sqrt(mean(x^2) + eps) * weight, over the last axis (Zhang & Sennrich 2019, eq. 4).

    LayerNorm without centring or shift; Llama's norm (eps = 1e-5 in Llama 2, the default here).
    Shapes: x ``(..., C)`` -> ``(..., C)``; backward dout -> dx, adds dweight ``(C,)``.
    Cache: xhat = x * rrms ``(..., C)``, rrms = 1 / sqrt(mean(x^2) + eps) ``(..., 1)``. Backward:
        dx = rrms / C * (C dxhat - xhat * sum(dxhat * xhat)),   dxhat = dout * weight
    Raises ValueError: ``d_model < 1``, ``eps <= 0``; the last axis of x is not ``d_model``.
    """

    _caches = ("_xhat", "_rrms")  # what backward reads; dropped under no_grad()

    def __init__(self, d_model, eps=1e-5, *, dtype=np.float32):
        if d_model < 1:  # as the torch twin
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:
            raise ValueError(f"eps: must be positive, got {eps}")
        self.d_model, self.eps = d_model, eps
        self.weight = Parameter(np.ones(d_model, dtype))
        self._xhat = self._rrms = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x, "x", self.weight.dtype)
        check_last_dim(x, self.d_model, "x", "d_model")
        ### BEGIN SOLUTION ch14
        ### TODO: x (..., C) -> y (..., C): rrms = 1 / sqrt(mean(x^2) + eps) per row (..., 1),
        ###   xhat = x * rrms, y = xhat * weight; cache xhat and rrms in self._xhat, self._rrms
        rrms = 1.0 / np.sqrt((x**2).mean(axis=-1, keepdims=True) + self.eps)  # (..., 1)
        xhat = x * rrms  # (..., C)
        self._xhat, self._rrms = xhat, rrms
        return xhat * self.weight.data
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: ADD dweight = sum of dout * xhat over every row, (C,), into weight.grad; return
        ###   dx (..., C) = rrms / C * (C dxhat - xhat sum(dxhat xhat)), dxhat = dout * weight.
        ###   Hint: LayerNorm's backward without its sum(dxhat) term
        xhat, rrms, C = self._xhat, self._rrms, self.d_model
        self.weight.grad += (dout * xhat).reshape(-1, C).sum(axis=0)  # (N, C) -> (C,)
        dxhat = dout * self.weight.data  # (..., C)
        sum_dxhat_xhat = (dxhat * xhat).sum(axis=-1, keepdims=True)  # (..., 1)
        dx = rrms / C * (C * dxhat - xhat * sum_dxhat_xhat)  # (..., C)
        self._xhat = self._rrms = None
        return dx
        ### END SOLUTION
