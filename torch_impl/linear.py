"""Affine map ``y = x W^T + b``: the twin of ``numpy_impl/linear.py``.

PyTorch already ships this layer, so the torch side only subclasses
:class:`torch.nn.Linear` to add the input check both backends share, and
offers the functional form :func:`linear` (``F.linear`` with that check), which
a layer applying row blocks of one packed weight to different inputs calls
directly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``y = x W^T + b`` over the last axis of ``x``: ``F.linear`` with a clear shape error.

    Args:
        x: ``(..., in)``.
        weight: ``(out, in)``.
        bias: ``(out,)`` or None.

    Returns:
        y ``(..., out)``; autograd provides the backward (the NumPy twin's
        ``linear_backward``).

    Raises:
        ValueError: ``x`` with no dimensions or a last axis that is not ``in``.
    """
    if x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"x: expected shape (..., in_features={weight.shape[1]}), got {tuple(x.shape)}"
        )
    return F.linear(x, weight, bias)


def check_float(x: torch.Tensor, name: str = "x", dtype=None) -> None:
    """As the NumPy twin's (``numpy_impl/module.py``): ``TypeError`` unless ``x`` is a
    floating-point tensor, of ``dtype`` (a layer's parameters') when given. Under
    ``torch.autocast`` (mixed precision) a float of another width is autocast's to
    choose, so only the floating-point check applies there."""
    if not x.is_floating_point():
        raise TypeError(f"{name}: expected a floating-point tensor, got dtype {x.dtype}")
    autocast = torch.is_autocast_enabled(x.device.type)
    if dtype is not None and x.dtype != dtype and not autocast:
        raise TypeError(
            f"{name}: dtype {x.dtype} differs from the layer's parameters ({dtype}); "
            "cast the input or the layer (.to)"
        )


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
