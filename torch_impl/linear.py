"""Affine map ``y = x W^T + b``: the twin of ``numpy_impl/linear.py``.

``torch.nn.Linear`` plus the input check both backends share; :func:`linear` is
``F.linear`` with that check, for a layer that applies row blocks of one packed weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``y = x W^T + b``: x ``(..., in)``, weight ``(out, in)``, bias ``(out,)`` or None
    -> y ``(..., out)``. ``ValueError`` if x's last axis is not ``in``."""
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x: expected shape (..., in_features={weight.shape[1]}), got {tuple(x.shape)}"
        )
    return F.linear(x, weight, bias)


def check_float(x: torch.Tensor, name: str = "x", dtype=None) -> None:
    """``TypeError`` unless ``x`` is floating point, of ``dtype`` when given (as in
    ``numpy_impl/module.py``). Under ``torch.autocast`` (mixed precision) only the first
    check applies."""
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    autocast = torch.is_autocast_enabled(x.device.type)
    if dtype is not None and x.dtype != dtype and not autocast:
        raise TypeError(
            f"{name}: dtype {x.dtype} differs from the layer's parameters ({dtype}); "
            "cast the input or the layer (.to)"
        )


class Linear(nn.Linear):
    """Fully connected layer, ``y = x W^T + b``; weight ``(out_features, in_features)``,
    bias ``(out_features,)`` or None (the NumPy twin's layout: no transposes between them).

    Shapes: x ``(..., in_features)`` -> y ``(..., out_features)``.
    Raises ``ValueError`` for a size below 1 or x's last dimension not ``in_features``.
    Init is torch's Kaiming-uniform; :class:`~torch_impl.gpt.GPT` re-draws it (GPT-2 scheme).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: torch.dtype | None = None,
    ):
        if in_features < 1 or out_features < 1:  # nn.Linear itself accepts 0
            raise ValueError(
                "in_features and out_features must be positive, "
                f"got in_features={in_features}, out_features={out_features}"
            )
        super().__init__(in_features, out_features, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float(x, "x", self.weight.dtype)
        return linear(x, self.weight, self.bias)
