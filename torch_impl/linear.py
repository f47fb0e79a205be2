"""Affine map ``y = x W^T + b``: the twin of ``numpy_impl/linear.py``.

PyTorch already ships this layer, so the torch side only subclasses
:class:`torch.nn.Linear` to add the input check both backends share.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Linear(nn.Linear):
    """Fully connected layer, ``y = x W^T + b``.

    Same layout as ``torch.nn.Linear`` (and as the NumPy twin), so a state dict
    crosses between backends with no transposes.

    Args:
        in_features: size of the last input dimension.
        out_features: size of the last output dimension.
        bias: learn an additive bias ``b`` when True.
        dtype: parameter dtype (``None``: torch's default, usually float32).

    Parameters:
        weight: ``(out_features, in_features)``, float.
        bias: ``(out_features,)``, float, or ``None`` when ``bias=False``.

    Shapes:
        x: ``(..., in_features)`` -> y: ``(..., out_features)``, x's dtype.

    Raises:
        ValueError: ``in_features`` or ``out_features`` below 1; ``x`` with no
            dimensions or a last dimension that is not ``in_features``.

    Initialisation is torch's default (Kaiming-uniform); :class:`~torch_impl.gpt.GPT`
    re-draws it with the GPT-2 scheme.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype: torch.dtype | None = None,
    ):
        if in_features < 1 or out_features < 1:  # nn.Linear itself accepts 0
            raise ValueError(
                "in_features and out_features must be positive, "
                f"got in_features={in_features}, out_features={out_features}"
            )
        super().__init__(in_features, out_features, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 1 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"x: expected shape (..., in_features={self.in_features}), got {tuple(x.shape)}"
            )
        return super().forward(x)  # F.linear(x, weight, bias) = x @ weight.T + bias


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None):
    """TEMPORARY (lead's stand-in until the formula branch merges)."""
    return F.linear(x, weight, bias)
