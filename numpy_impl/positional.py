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

    def forward(self, T: int) -> np.ndarray:
        if isinstance(T, bool) or not isinstance(T, (int, np.integer)):
            raise TypeError(f"T: sequence length must be an int, got {type(T).__name__}")
        if not 1 <= T <= self.block_size:
            raise ValueError(
                f"T: sequence length must lie in [1, block_size={self.block_size}], got {T}"
            )
        ### BEGIN SOLUTION ch05
        ### TODO: the vectors of positions 0 .. T-1: the first T rows of the table, (T, d_model)
        return self.weight.data[:T]  # (T, d_model)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> None:
        ### BEGIN SOLUTION ch05
        ### TODO: ADD dout (T, d_model) into the first T rows of weight.grad; return None
        self.weight.grad[: dout.shape[0]] += dout
        ### END SOLUTION
