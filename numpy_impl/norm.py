"""Layer normalisation (Ba et al. 2016), forward and backward."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_float, check_last_dim


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, over the last axis.

    Source: Ba et al. 2016, sec. 3, eqs. 3-4: statistics per token, then a
    learned per-feature gain (``weight``) and bias.

    ``var`` is the biased variance (divide by C, not C - 1) and ``eps`` sits
    inside the square root, exactly as ``torch.nn.LayerNorm``. Statistics are
    per token, never across the batch (that would be BatchNorm).

    Args:
        d_model: size of the normalised axis, C.
        eps: added to the variance.
        bias: learn the shift ``bias`` (Llama-style models drop it).
        dtype: parameter dtype.

    Shapes:
        forward: x ``(..., C)`` -> ``(..., C)``
        backward: dout ``(..., C)`` -> dx ``(..., C)``; adds dweight, dbias ``(C,)``.

    Cache: the normalised input xhat ``(..., C)`` and rstd = 1/sqrt(var + eps)
    ``(..., 1)`` (llm.c keeps mean and rstd; keeping xhat saves recomputing it).

    Backward, per row (sums over the C features), with dxhat = dout * weight:
        dx = rstd / C * (C dxhat - sum(dxhat) - xhat * sum(dxhat * xhat))
        dweight = sum over rows of dout * xhat,   dbias = sum over rows of dout

    Raises:
        ValueError: ``d_model < 1`` or ``eps <= 0`` (constructor); the last axis
            of ``x`` is not ``d_model``.
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
    """LayerNorm of each row of x (..., C): returns y (..., C) and the backward's cache,
    xhat (..., C) and rstd = 1 / sqrt(var + eps) (..., 1) (Ba et al. 2016, eqs. 3-4).

    weight, bias: ``(C,)`` (bias may be None). Raises nothing: :class:`LayerNorm`
    checks x's width and dtype.
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
    """dx (..., C) of :func:`layer_norm`, row by row, from its cache xhat (..., C) and
    rstd (..., 1); weight ``(C,)``. The parameter gradients, sums over every row, are
    :meth:`LayerNorm.backward`'s. Ba et al. 2016; the derivation is chapter 07's.
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

    LayerNorm without the mean: no centring and no shift, only a rescaling of
    each token vector to unit root mean square, then a learned per-feature gain.
    Llama's norm (with eps = 1e-5 in Llama 2; the default here).
    ``eps`` sits inside the square root, as in ``torch.nn.RMSNorm`` (whose
    default eps, when None, is the dtype's machine epsilon instead).

    Args:
        d_model: size of the normalised axis, C.
        eps: added to the mean square.
        dtype: parameter dtype.

    Shapes:
        forward: x ``(..., C)`` -> ``(..., C)``
        backward: dout ``(..., C)`` -> dx ``(..., C)``; adds dweight ``(C,)``.

    Cache: xhat = x * rrms ``(..., C)`` and rrms = 1 / sqrt(mean(x^2) + eps) ``(..., 1)``.

    Backward, per row (sums over the C features), with dxhat = dout * weight:
        dx = rrms / C * (C dxhat - xhat * sum(dxhat * xhat))
        dweight = sum over rows of dout * xhat
    LayerNorm's formula less its ``- sum(dxhat)`` term: there is no mean to subtract.

    Raises:
        ValueError: the last axis of ``x`` is not ``d_model``; ``eps <= 0``.
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
