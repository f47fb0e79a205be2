"""Learned absolute positional embedding (GPT-2; Radford et al. 2019)."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter


def _check_positions(T, start_pos: int, block_size: int) -> tuple[int, int]:
    """Validate positions ``start_pos .. start_pos + T - 1`` of a ``block_size``-row table."""
    if isinstance(T, bool) or not isinstance(T, (int, np.integer)):
        raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
    if isinstance(start_pos, bool) or not isinstance(start_pos, (int, np.integer)):
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


class LearnedPositionalEmbedding(Module):
    """One learned vector per position: pos[t] = weight[start_pos + t] (GPT-2; Radford et al. 2019).

    Init N(0, 1), PyTorch's default (the GPT re-initialises with N(0, 0.02)).
    Shapes: forward T, start_pos -> ``(T, d_model)``, broadcast over the batch by the caller;
    backward dout ``(T, d_model)`` (summed over the batch) -> None, adds into those rows of dW
    ``(block_size, d_model)``. Cache: start_pos.
    Raises TypeError: ``T`` or ``start_pos`` not an int; ValueError: a size below 1, ``T`` not
    in ``[1, block_size]``, ``start_pos < 0`` or ``start_pos + T > block_size``.
    """

    _caches = ("_start_pos",)  # what backward reads; dropped under no_grad()

    def __init__(self, block_size, d_model, *, dtype=np.float32, rng=None):
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        rng = np.random.default_rng() if rng is None else rng
        self.block_size, self.d_model = block_size, d_model
        self.weight = Parameter(rng.standard_normal((block_size, d_model)).astype(dtype))
        self._start_pos = None

    def forward(self, T: int, start_pos: int = 0) -> np.ndarray:
        T, start_pos = _check_positions(T, start_pos, self.block_size)
        self._start_pos = start_pos  # backward adds into the rows forward read
        ### BEGIN SOLUTION ch05
        ### TODO: the vectors of positions start_pos .. start_pos + T - 1: T rows of the table,
        ###   (block_size, d_model) -> (T, d_model)
        return self.weight.data[start_pos : start_pos + T]  # (T, d_model)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> None:
        start_pos, T = self._start_pos, dout.shape[0]
        ### BEGIN SOLUTION ch05
        ### TODO: ADD dout (T, d_model) into rows start_pos .. start_pos + T - 1 of weight.grad
        ###   (the rows forward read); return None
        self.weight.grad[start_pos : start_pos + T] += dout
        ### END SOLUTION


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The sinusoidal encodings of positions ``0 .. n_positions-1`` (Vaswani et al. 2017, sec. 3.5).

        PE[pos, 2i]     = sin(pos / base^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))

    Returns float64 ``(n_positions, d_model)``; an odd ``d_model`` ends with a sine column.
    """
    ### BEGIN SOLUTION ch13
    ### TODO: the (n_positions, d_model) table above, in float64: sines in the even columns,
    ###   cosines in the odd ones, frequency base^(-2i/d_model) for column pair i
    pos = np.arange(n_positions, dtype=np.float64)[:, None]  # (P, 1)
    freq = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (ceil(d/2),)
    angle = pos * freq  # (P, ceil(d/2)): position times frequency, one column per pair
    pe = np.empty((n_positions, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])  # odd d_model: one cosine fewer
    return pe
    ### END SOLUTION


class SinusoidalPositionalEncoding(Module):
    """Fixed sinusoidal position vectors, not trained (Vaswani et al. 2017, sec. 3.5).

    PE[pos + k] is a fixed rotation of PE[pos], which may let the model attend by relative
    position. ``pe`` is a buffer: in no state dict, no gradient. The interface of
    :class:`LearnedPositionalEmbedding`: forward T, start_pos -> ``(T, d_model)``, added by the
    caller to the token embeddings; backward -> None. Raises as that class does.
    """

    def __init__(self, block_size, d_model, base=10000.0, *, dtype=np.float32):
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        self.block_size, self.d_model, self.base = block_size, d_model, base
        self.pe = sinusoidal_table(block_size, d_model, base).astype(dtype)  # a buffer

    def _on_astype(self, dtype: np.dtype) -> None:
        self.pe = self.pe.astype(dtype)

    def forward(self, T: int, start_pos: int = 0) -> np.ndarray:
        T, start_pos = _check_positions(T, start_pos, self.block_size)
        return self.pe[start_pos : start_pos + T]  # (T, d_model), a view: callers add, never write

    def backward(self, dout: np.ndarray) -> None:
        return None  # a fixed table: no parameter, and positions are not an input
