"""Learned absolute positional embedding (GPT-2; Radford et al. 2019)."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter


class LearnedPositionalEmbedding(Module):
    """One learned vector per position: pos[t] = weight[t], t = 0 .. T-1.

    Args:
        block_size: the longest sequence the model accepts.
        d_model: vector size.

    Shapes:
        forward: T (int) -> ``(T, d_model)``, broadcast over the batch by the caller.
        backward: dout ``(T, d_model)`` (already summed over the batch) -> None;
        adds into rows ``0 .. T-1`` of dW ``(block_size, d_model)``.

    Raises:
        TypeError: ``T`` is not an integer.
        ValueError: a size below 1 (constructor); ``T`` is not in ``[1, block_size]``.
    """

    def __init__(self, block_size, d_model, dtype=np.float32, rng=None):
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        rng = np.random.default_rng() if rng is None else rng
        self.block_size, self.d_model = block_size, d_model
        self.weight = Parameter(rng.standard_normal((block_size, d_model)).astype(dtype))

    def forward(self, T: int, start_pos: int = 0) -> np.ndarray:
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        if not 1 <= T <= self.block_size:
            raise ValueError(
                f"T: sequence length must lie in [1, block_size={self.block_size}], got {T}"
            )
        self._start = start_pos  # TEMPORARY stand-in
        ### BEGIN SOLUTION ch05
        ### TODO: the vectors of positions 0 .. T-1: the first T rows of the table, (T, d_model)
        return self.weight.data[start_pos : start_pos + T]  # (T, d_model)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> None:
        ### BEGIN SOLUTION ch05
        ### TODO: ADD dout (T, d_model) into the first T rows of weight.grad; return None
        self.weight.grad[: dout.shape[0]] += dout
        ### END SOLUTION


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The sinusoidal encodings of positions ``0 .. n_positions-1`` (Vaswani et al. 2017, sec. 3.5).

        PE[pos, 2i]     = sin(pos / base^(2i / d_model))
        PE[pos, 2i + 1] = cos(pos / base^(2i / d_model))

    Pair i turns at angular frequency ``base^(-2i/d_model)``: from 1 radian per
    position (i = 0) down to nearly ``1/base``. An odd ``d_model`` ends with one
    last sine column.

    Returns:
        float64 ``(n_positions, d_model)``.
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

    The table is a buffer (``pe``, not a Parameter): it is in no state dict and
    gets no gradient. The same interface as :class:`LearnedPositionalEmbedding`,
    so a model can use either: ``forward(T)`` returns the first T rows, added by
    the caller to the token embeddings. Vaswani et al. chose it because
    PE[pos + k] is a fixed linear map (a rotation per frequency pair) of PE[pos],
    which may let the model attend by relative position, and because it is
    defined for any position, although this module, like the learned one, stops
    at ``block_size``.

    Args:
        block_size: the longest sequence the model accepts.
        d_model: vector size (any positive int; odd sizes end with a sine column).
        base: the wavelength scale, 10000 in the paper.
        dtype: the buffer's dtype.

    Shapes:
        forward: T (int) -> ``(T, d_model)``, broadcast over the batch by the caller.
        backward: dout ``(T, d_model)`` -> None (nothing to learn).

    Raises:
        TypeError: ``T`` is not an integer.
        ValueError: ``block_size`` or ``d_model`` not positive; ``T`` not in
            ``[1, block_size]``.
    """

    def __init__(self, block_size, d_model, base=10000.0, dtype=np.float32):
        if block_size < 1 or d_model < 1:
            raise ValueError(
                f"block_size and d_model must be positive, got block_size={block_size}, "
                f"d_model={d_model}"
            )
        self.block_size, self.d_model, self.base = block_size, d_model, base
        self.pe = sinusoidal_table(block_size, d_model, base).astype(dtype)  # a buffer

    def _on_astype(self, dtype: np.dtype) -> None:
        self.pe = self.pe.astype(dtype)

    def forward(self, T: int) -> np.ndarray:
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        if not 1 <= T <= self.block_size:
            raise ValueError(
                f"T: sequence length must lie in [1, block_size={self.block_size}], got {T}"
            )
        return self.pe[:T]  # (T, d_model), a view: callers add, never write

    def backward(self, dout: np.ndarray) -> None:
        return None  # a fixed table: no parameter, and positions are not an input
