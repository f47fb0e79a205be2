"""Learned absolute positional embedding (GPT-2 style), twin of ``numpy_impl/positional.py``.

Attention by itself ignores token order; GPT-2 adds a learned vector per
position to each token vector (Radford et al. 2019). Because the table has
``block_size`` rows, a model using it cannot see sequences longer than that.
"""

from __future__ import annotations

import numbers

import torch
from torch import nn


class LearnedPositionalEmbedding(nn.Module):
    """One learned ``d_model``-vector per position ``0 .. block_size - 1``.

    Args:
        block_size: the longest sequence the model accepts.
        d_model: embedding width.
        dtype: parameter dtype (``None``: torch's default).

    Parameters:
        weight: ``(block_size, d_model)``, initialised N(0, 1) like
            ``torch.nn.Embedding``; :class:`~torch_impl.gpt.GPT` re-draws it
            with standard deviation 0.02.

    Shapes:
        forward(T) -> ``(T, d_model)``: the first ``T`` rows, which broadcast
        against token embeddings of shape ``(B, T, d_model)``.

    Raises:
        TypeError: if ``T`` is not an int.
        ValueError: if ``T < 1`` or ``T > block_size``.
    """

    def __init__(self, block_size: int, d_model: int, dtype: torch.dtype | None = None):
        super().__init__()
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        self.block_size = block_size
        self.d_model = d_model
        self.weight = nn.Parameter(torch.empty(block_size, d_model, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)

    def forward(self, T: int) -> torch.Tensor:
        if isinstance(T, bool) or not isinstance(T, numbers.Integral):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        T = int(T)
        if T < 1:
            raise ValueError(f"T: sequence length must be at least 1, got T={T}")
        if T > self.block_size:
            raise ValueError(f"T: sequence length T={T} exceeds block_size={self.block_size}")
        return self.weight[:T]  # (T, d_model); slicing keeps the gradient path to weight

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, d_model={self.d_model}"
