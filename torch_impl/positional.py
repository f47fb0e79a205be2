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

    def forward(self, T: int, start_pos: int = 0) -> torch.Tensor:
        if isinstance(T, bool) or not isinstance(T, numbers.Integral):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        T = int(T)
        if T < 1:
            raise ValueError(f"T: sequence length must be at least 1, got T={T}")
        if T > self.block_size:
            raise ValueError(f"T: sequence length T={T} exceeds block_size={self.block_size}")
        return self.weight[start_pos : start_pos + T]  # TEMPORARY stand-in

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, d_model={self.d_model}"


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The sinusoidal encodings of positions ``0 .. n_positions-1`` (Vaswani et al. 2017, sec. 3.5).

    ``PE[pos, 2i] = sin(pos / base^(2i / d_model))``,
    ``PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))``; an odd ``d_model``
    ends with one last sine column.

    Returns:
        float64 ``(n_positions, d_model)``.
    """
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d/2),)
    angle = pos * freq  # (P, ceil(d/2))
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal position vectors, not trained (Vaswani et al. 2017, sec. 3.5).

    The table is a non-persistent buffer, ``pe`` ``(block_size, d_model)``: it
    follows ``.to(device/dtype)`` but is neither a parameter nor in the state
    dict (it is recomputed, never loaded), exactly as on the NumPy side. Same
    interface as :class:`LearnedPositionalEmbedding`.

    Args:
        block_size: the longest sequence the model accepts.
        d_model: vector size (odd sizes end with a sine column).
        base: the wavelength scale, 10000 in the paper.
        dtype: the buffer's dtype (``None``: torch's default).

    Shapes:
        forward(T) -> ``(T, d_model)``.

    Raises:
        TypeError: if ``T`` is not an int.
        ValueError: non-positive sizes, ``T < 1`` or ``T > block_size``.
    """

    def __init__(
        self,
        block_size: int,
        d_model: int,
        base: float = 10000.0,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        self.block_size, self.d_model, self.base = block_size, d_model, base
        table = sinusoidal_table(block_size, d_model, base)
        self.register_buffer("pe", table.to(dtype or torch.get_default_dtype()), persistent=False)

    def forward(self, T: int, start_pos: int = 0) -> torch.Tensor:
        if isinstance(T, bool) or not isinstance(T, numbers.Integral):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        T = int(T)
        if not 1 <= T <= self.block_size:
            raise ValueError(
                f"T: sequence length must lie in [1, block_size={self.block_size}], got {T}"
            )
        return self.pe[:T]  # (T, d_model)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, d_model={self.d_model}, base={self.base}"
