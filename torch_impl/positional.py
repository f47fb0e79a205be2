"""Absolute position vectors, learned (GPT-2) or sinusoidal; twin of numpy_impl/positional.py."""

from __future__ import annotations

import numbers

import torch
from torch import nn


def _check_positions(T, start_pos: int, block_size: int) -> tuple[int, int]:
    """``(T, start_pos)`` as ints, checked to fit a table of ``block_size`` rows: ``TypeError``
    for a non-int, ``ValueError`` for ``T < 1``, ``start_pos < 0`` or past the table."""
    if isinstance(T, bool) or not isinstance(T, numbers.Integral):
        raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
    if isinstance(start_pos, bool) or not isinstance(start_pos, numbers.Integral):
        raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
    T, start_pos = int(T), int(start_pos)
    if not 1 <= T <= block_size:
        raise ValueError(f"T: sequence length must lie in [1, block_size={block_size}], got {T}")
    if not 0 <= start_pos <= block_size - T:
        raise ValueError(
            f"start_pos: positions start_pos .. start_pos + T - 1 must lie in [0, "
            f"block_size={block_size}), so start_pos in [0, {block_size - T}] for T={T}, "
            f"got {start_pos}"
        )
    return T, start_pos


class LearnedPositionalEmbedding(nn.Module):
    """One learned ``d_model``-vector per position (Radford et al. 2019); weight
    ``(block_size, d_model)``, init N(0, 1) (GPT re-draws it with std 0.02).

    ``forward(T, start_pos=0)`` -> ``(T, d_model)``, the rows of positions ``start_pos ..
    start_pos + T - 1``; raises as :func:`_check_positions`.
    """

    def __init__(self, block_size: int, d_model: int, *, dtype: torch.dtype | None = None):
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
        T, start_pos = _check_positions(T, start_pos, self.block_size)
        return self.weight[start_pos : start_pos + T]  # (T, d_model)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, d_model={self.d_model}"


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """float64 ``(n_positions, d_model)`` (Vaswani et al. 2017, sec. 3.5): ``PE[pos, 2i] =
    sin(pos / base^(2i / d_model))``, ``PE[pos, 2i + 1] = cos(...)``; odd d ends with a sine."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (ceil(d/2),)
    angle = pos * freq  # (P, ceil(d/2))
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return pe


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed :func:`sinusoidal_table` rows, not trained; the interface of
    :class:`LearnedPositionalEmbedding`. The table ``pe`` is a buffer left out of the state dict.
    """

    def __init__(
        self,
        block_size: int,
        d_model: int,
        base: float = 10000.0,
        *,
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
        T, start_pos = _check_positions(T, start_pos, self.block_size)
        return self.pe[start_pos : start_pos + T]  # (T, d_model)

    def extra_repr(self) -> str:
        return f"block_size={self.block_size}, d_model={self.d_model}, base={self.base}"
