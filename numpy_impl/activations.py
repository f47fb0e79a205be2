"""Activations with backward: GELU (exact and tanh), ReLU, SiLU (the gate of SwiGLU)."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erf, expit

from .module import Module

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_COEF = 0.044715


class GELU(Module):
    """Gaussian Error Linear Unit, y = x * Phi(x).

    Args:
        approximate: ``"tanh"`` (the GPT default, the form GPT-2 used) or
            ``"none"`` for the exact erf form.

    Formulas (Hendrycks & Gimpel 2016, sec. 2):
        exact: y = 0.5 x (1 + erf(x / sqrt 2)),   dy/dx = Phi(x) + x phi(x)
        tanh:  y = 0.5 x (1 + tanh(u)),           u = sqrt(2/pi) (x + 0.044715 x^3)

    The tanh form is computed through the identity 0.5 (1 + tanh(u)) = sigmoid(2u):
        y = x s,   s = 1 / (1 + exp(-2u)),
        dy/dx = s + x s (1 - s) * 2 du/dx,   du/dx = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
    One ``exp`` instead of one ``tanh``: the same function, and on CPUs
    without AVX-512 NumPy's float32 ``exp`` is markedly faster than its ``tanh``.

    Shapes: any; elementwise.

    Raises:
        ValueError: ``approximate`` is not ``"tanh"`` or ``"none"``.
    """

    def __init__(self, approximate: str = "tanh"):
        if approximate not in ("tanh", "none"):
            raise ValueError(f"approximate: expected 'tanh' or 'none', got {approximate!r}")
        self.approximate = approximate
        self._x = self._s = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch06
        ### TODO: y = x Phi(x): the tanh form if self.approximate == "tanh", else the exact erf
        ###   form (formulas above); cache what backward needs (self._x, self._s); no overflow
        ###   warning for large |x| in float32
        self._x = x
        if self.approximate == "tanh":
            s = x * x
            s *= -2.0 * _SQRT_2_OVER_PI * _GELU_COEF
            s -= 2.0 * _SQRT_2_OVER_PI
            s *= x  # -2u = -2 sqrt(2/pi) (x + 0.044715 x^3)
            # far left (x < -10 in float32) exp(-2u) overflows to inf and s becomes
            # exactly 0, the right limit: the overflow is expected, not an error
            with np.errstate(over="ignore"):
                np.exp(s, out=s)
            s += 1.0
            np.reciprocal(s, out=s)  # s = sigmoid(2u) = 0.5 (1 + tanh(u))
        else:
            s = erf(x / _SQRT_2)
            s += 1.0
            s *= 0.5  # s = Phi(x)
        self._s = s  # backward needs s; forward's output is x s
        return x * s
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch06
        ### TODO: dx = dout * dy/dx, with dy/dx from the formulas above for the form in use
        x, s = self._x, self._s
        if self.approximate == "tanh":
            g = x * x
            g *= 2.0 * _SQRT_2_OVER_PI * 3.0 * _GELU_COEF
            g += 2.0 * _SQRT_2_OVER_PI  # 2 du/dx = 2 sqrt(2/pi) (1 + 3 * 0.044715 x^2)
            g *= x
            g *= s
            g *= 1.0 - s  # x s (1 - s) 2 du/dx
            g += s
        else:
            g = np.exp(-0.5 * x * x)
            g *= _INV_SQRT_2PI  # phi(x)
            g *= x
            g += s  # Phi(x) + x phi(x)
        g *= dout
        self._x = self._s = None
        return g
        ### END SOLUTION


class ReLU(Module):
    """y = max(x, 0) (Nair & Hinton 2010), the original transformer's FFN activation
    (Vaswani et al. 2017, eq. 2).

    Backward: dx = dout where x > 0, else 0 (the subgradient 0 at x = 0, as torch).

    Shapes: any; elementwise.
    """

    def __init__(self):
        self._positive = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        self._positive = x > 0  # a bool mask: all backward needs
        return np.maximum(x, 0.0, dtype=x.dtype)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx = dout * self._positive
        self._positive = None
        return dx


class SiLU(Module):
    """SiLU / Swish-1: y = x * sigmoid(x) (Elfwing et al. 2017; Ramachandran et al. 2017).

    The gate of SwiGLU (Shazeer 2020). With s = sigmoid(x):
        dy/dx = s + x s (1 - s) = s (1 + x (1 - s))
    ``scipy.special.expit`` computes s without overflow at either end.

    Shapes: any; elementwise.
    """

    def __init__(self):
        self._x = self._s = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: s = sigmoid(x) (scipy.special.expit: no overflow warning for large |x|);
        ###   cache x and s in self._x, self._s; return x * s
        s = expit(x)
        self._x, self._s = x, s
        return x * s
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch14
        ### TODO: dx = dout * s * (1 + x * (1 - s))
        x, s = self._x, self._s
        g = 1.0 - s
        g *= x
        g += 1.0
        g *= s  # s (1 + x (1 - s))
        g *= dout
        self._x = self._s = None
        return g
        ### END SOLUTION
