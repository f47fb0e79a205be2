"""Layer normalisation (Ba et al. 2016), forward and backward."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_last_dim


class LayerNorm(Module):
    """y = (x - mean) / sqrt(var + eps) * weight + bias, over the last axis.

    ``var`` is the biased variance (divide by C, not C - 1) and ``eps`` sits
    inside the square root, exactly as ``torch.nn.LayerNorm``. Statistics are
    per token, never across the batch (that would be BatchNorm).

    Args:
        d_model: size of the normalised axis, C.
        eps: added to the variance.
        bias: learn the shift ``bias`` (Llama-style models drop it).

    Shapes:
        forward: x ``(..., C)`` -> ``(..., C)``
        backward: dout ``(..., C)`` -> dx ``(..., C)``; adds dweight, dbias ``(C,)``.

    Cache: the normalised input xhat and 1/std per row (llm.c keeps mean and
    rstd; keeping xhat instead saves recomputing it in backward).

    Backward, with g = dout * weight (per row, means over C):
        dx = rstd * (g - mean(g) - xhat * mean(g * xhat))

    Raises:
        ValueError: ``d_model < 1`` or ``eps <= 0`` (constructor); the last axis
            of ``x`` is not ``d_model``.
    """

    def __init__(self, d_model, eps=1e-5, bias=True, dtype=np.float32):
        if d_model < 1:
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:  # also catches NaN
            raise ValueError(f"eps must be positive, got eps={eps}")
        self.d_model, self.eps = d_model, eps
        self.weight = Parameter(np.ones(d_model, dtype))
        self.bias = Parameter(np.zeros(d_model, dtype)) if bias else None
        self._xhat = self._rstd = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_last_dim(x, self.d_model, "x", "d_model")
        ### BEGIN SOLUTION ch07
        ### TODO: normalise each row over the last axis: xhat = (x - mean) / sqrt(var + eps),
        ###   var biased (divide by C); out = xhat * weight (+ bias); cache xhat and
        ###   rstd = 1 / sqrt(var + eps) in self._xhat, self._rstd for backward
        C = self.d_model
        mean = x.mean(axis=-1, keepdims=True)  # (..., 1)
        xhat = x - mean  # (..., C), a new array we can work in
        var = np.vecdot(xhat, xhat)[..., None] / C  # biased variance; a row dot product, no temp
        rstd = 1.0 / np.sqrt(var + self.eps)  # (..., 1)
        xhat *= rstd
        self._xhat, self._rstd = xhat, rstd
        out = xhat * self.weight.data
        if self.bias is not None:
            out += self.bias.data
        return out
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch07
        ### TODO: ADD dweight = sum over rows of dout * xhat and dbias = sum of dout into .grad;
        ###   return dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * weight
        xhat, rstd = self._xhat, self._rstd
        C = self.d_model
        flat_dout, flat_xhat = dout.reshape(-1, C), xhat.reshape(-1, C)
        self.weight.grad += np.einsum("nc,nc->c", flat_dout, flat_xhat)
        if self.bias is not None:
            self.bias.grad += flat_dout.sum(axis=0)
        g = dout * self.weight.data  # dL/dxhat
        g_dot_xhat = np.vecdot(g, xhat)[..., None] / C  # mean(g * xhat), per row
        dx = g - g.mean(axis=-1, keepdims=True)
        xhat_term = xhat * g_dot_xhat
        dx -= xhat_term
        dx *= rstd
        self._xhat = self._rstd = None
        return dx
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

    Shapes:
        forward: x ``(..., C)`` -> ``(..., C)``
        backward: dout ``(..., C)`` -> dx ``(..., C)``; adds dweight ``(C,)``.

    Cache: xhat = x / rms and rrms = 1 / rms per row, rms = sqrt(mean(x^2) + eps).

    Backward, with g = dout * weight (means over C, per row):
        dx = rrms * (g - xhat * mean(g * xhat))
    LayerNorm's formula less its ``- mean(g)`` term: there is no mean to subtract.

    Raises:
        ValueError: the last axis of ``x`` is not ``d_model``; ``eps <= 0``.
    """

    def __init__(self, d_model, eps=1e-5, dtype=np.float32):
        if d_model < 1:  # as the torch twin
            raise ValueError(f"d_model must be positive, got d_model={d_model}")
        if not eps > 0:
            raise ValueError(f"eps: must be positive, got {eps}")
        self.d_model, self.eps = d_model, eps
        self.weight = Parameter(np.ones(d_model, dtype))
        self._xhat = self._rrms = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_last_dim(x, self.d_model, "x", "d_model")
        ### BEGIN SOLUTION ch14
        ### TODO: rrms = 1 / sqrt(mean(x^2) + eps) per row (over the last axis, keepdims);
        ###   xhat = x * rrms; out = xhat * weight; cache xhat and rrms in self._xhat, self._rrms
        mean_sq = np.vecdot(x, x)[..., None] / self.d_model  # (..., 1), no (..., C) temporary
        rrms = 1.0 / np.sqrt(mean_sq + self.eps)
        xhat = x * rrms  # (..., C), a new array: x is not touched
        self._xhat, self._rrms = xhat, rrms
        return xhat * self.weight.data
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: ADD dweight = sum over rows of dout * xhat into weight.grad; return
        ###   dx = rrms * (g - xhat * mean(g * xhat)) with g = dout * weight
        xhat, rrms = self._xhat, self._rrms
        C = self.d_model
        self.weight.grad += np.einsum("nc,nc->c", dout.reshape(-1, C), xhat.reshape(-1, C))
        g = dout * self.weight.data  # dL/dxhat
        dx = xhat * (np.vecdot(g, xhat)[..., None] / C)  # the part along xhat ...
        np.subtract(g, dx, out=dx)  # ... removed from g
        dx *= rrms
        self._xhat = self._rrms = None
        return dx
        ### END SOLUTION
