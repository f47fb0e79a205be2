"""Activations with backward: GELU (exact and tanh), ReLU, SiLU (the gate of SwiGLU)."""

from __future__ import annotations

import math

import numpy as np

from .module import Module, check_float


def sigmoid(x: np.ndarray) -> np.ndarray:
    """sigma(x) = 1 / (1 + exp(-x)), as exp(-log(1 + exp(-x))): ``np.logaddexp`` computes
    log(1 + exp(-x)) without overflow, so neither tail warns."""
    return np.exp(-np.logaddexp(0.0, -x))


def erf(x: np.ndarray) -> np.ndarray:
    """The error function in ``x``'s dtype: scipy's if installed (the ``exact-gelu`` extra),
    else ``math.erf`` per element (the same values, slower)."""
    try:
        from scipy.special import erf as scipy_erf
    except ImportError:
        x = np.asarray(x)
        dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
        return np.vectorize(math.erf, otypes=[dtype])(x)
    return scipy_erf(x)


class GELU(Module):
    """Gaussian Error Linear Unit, y = x Phi(x) (Hendrycks & Gimpel 2016, sec. 2); elementwise.

    Phi is the standard normal CDF, phi its density. ``approximate``: ``"tanh"`` (GPT-2's
    form, the default; see :func:`gelu_tanh`) or ``"none"``, the exact form:
        y = 0.5 x (1 + erf(x / sqrt 2)),   dy/dx = Phi(x) + x phi(x),
        phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
    Cache: x, and Phi(x) for the exact form.
    Raises ValueError if ``approximate`` is not ``"tanh"`` or ``"none"``.
    """

    _caches = ("_x", "_cdf")  # what backward reads; dropped under no_grad()

    def __init__(self, approximate: str = "tanh"):
        if approximate not in ("tanh", "none"):
            raise ValueError(f"approximate: expected 'tanh' or 'none', got {approximate!r}")
        self.approximate = approximate
        self._x = self._cdf = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x)
        self._x = x
        if self.approximate == "tanh":
            return gelu_tanh(x)
        ### BEGIN SOLUTION ch06
        ### TODO: the exact form, y = x Phi(x) with Phi = 0.5 (1 + erf(x / sqrt 2)); cache Phi
        ###   in self._cdf. Hint: erf(...) is this module's error function (scipy's when installed)
        self._cdf = 0.5 * (1 + erf(x / math.sqrt(2)))  # Phi(x)
        return x * self._cdf
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        x = self._x
        if self.approximate == "tanh":
            dx = gelu_tanh_backward(dout, x)
        else:
            ### BEGIN SOLUTION ch06
            ### TODO: dx = dout * (Phi(x) + x phi(x)), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
            with np.errstate(over="ignore"):  # x**2 is inf beyond |x| ~ 1e19: phi = 0
                pdf = np.exp(-0.5 * x**2) / math.sqrt(2 * math.pi)  # phi(x)
            dx = dout * (self._cdf + x * pdf)
            ### END SOLUTION
        self._x = self._cdf = None
        return dx


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU's tanh form, y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
    (Hendrycks & Gimpel 2016, sec. 2). Elementwise, in x's shape and dtype."""
    ### BEGIN SOLUTION ch06
    ### TODO: u, then y = 0.5 x (1 + tanh(u)), x's shape. Write x^3 as x * x * x (x**3 calls
    ###   pow(), ~200x slower) inside np.errstate(over="ignore") (x^3 overflows past ~7e12)
    # x * x * x, as PyTorch's kernel: x**3 calls pow(), far slower. Overflow gives tanh = +-1
    with np.errstate(over="ignore"):
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
    return 0.5 * x * (1 + np.tanh(u))
    ### END SOLUTION


def gelu_tanh_backward(dout: np.ndarray, x: np.ndarray) -> np.ndarray:
    """dx = dout * dy/dx for :func:`gelu_tanh`, from x alone (t recomputed, as PyTorch does):

        dy/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) du/dx,   t = tanh(u),
        du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)

    dout, x one shape -> dx, a new array."""
    ### BEGIN SOLUTION ch06
    ### TODO: u and t = tanh(u) again (as in gelu_tanh: x * x * x, np.errstate), du/dx, dy/dx,
    ###   then dout * dy/dx (a new array: never write into dout)
    with np.errstate(over="ignore"):
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))
        du_dx = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x**2)
    t = np.tanh(u)
    dy_dx = 0.5 * (1 + t) + 0.5 * x * (1 - t**2) * du_dx
    return dout * dy_dx
    ### END SOLUTION


class ReLU(Module):
    """y = max(x, 0) (Nair & Hinton 2010), the original transformer's FFN activation
    (Vaswani et al. 2017, eq. 2). dx = dout where x > 0, else 0 (0 at x = 0, as torch).
    Caches the bool mask x > 0; elementwise."""

    _caches = ("_positive",)  # what backward reads; dropped under no_grad()

    def __init__(self):
        self._positive = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x)
        self._positive = x > 0
        return np.maximum(x, 0.0, dtype=x.dtype)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx = dout * self._positive
        self._positive = None
        return dx


class SiLU(Module):
    """SiLU / Swish-1: y = x sigma(x) (Elfwing et al. 2017, eq. 1; Ramachandran et al. 2017).

    The gate of SwiGLU (Shazeer 2020). With s = sigma(x), dy/dx = s (1 + x (1 - s)).
    Caches x and s; elementwise."""

    _caches = ("_x", "_s")  # what backward reads; dropped under no_grad()

    def __init__(self):
        self._x = self._s = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x)
        ### BEGIN SOLUTION ch14
        ### TODO: s = sigmoid(x) (the stable one above), y = x * s; cache x and s in self._x,
        ###   self._s for backward
        s = sigmoid(x)
        self._x, self._s = x, s
        return x * s
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: dx = dout * dy/dx, dy/dx = s (1 + x (1 - s)) with the cached x and s
        x, s = self._x, self._s
        self._x = self._s = None
        return dout * s * (1 + x * (1 - s))
        ### END SOLUTION
