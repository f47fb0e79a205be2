"""The key/value cache: autoregressive decoding without recomputing the past.

A causal model's keys and values at position t depend only on tokens 0..t, so each
attention layer keeps them and computes q, k, v for the new token only: O(T) work per
step instead of O(T^2) (Pope et al. 2022, sec. 2; Hugging Face's ``past_key_values``).
Buffers ``(B, n_kv_heads, max_len, d_k)`` (the K/V heads only) are allocated once, filled in place.
Twin of ``torch_impl/kv_cache.py``. Inference only: no backward.
"""

from __future__ import annotations

import numpy as np


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


class LayerKVCache:
    """Keys and values of one attention layer, for positions ``0 .. length - 1``.

    ``max_len``: the most positions held (a GPT's ``block_size``). Buffers ``k``, ``v``
    are None until the first update. Raises ValueError if ``max_len`` is not a positive int.
    """

    def __init__(self, max_len: int):
        self.max_len = _check_positive_int(max_len, "max_len")
        self.k: np.ndarray | None = None
        self.v: np.ndarray | None = None
        self.length = 0

    def reset(self) -> None:
        """Forget every position (the buffers are kept for reuse)."""
        self.length = 0

    def update(
        self, k_new: np.ndarray, v_new: np.ndarray, start_pos: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """Store keys/values of positions ``start_pos .. start_pos + T - 1``; return all of them.

        ``start_pos`` in ``[0, length]``: 0 starts afresh, ``length`` appends; positions
        after it are dropped. k_new ``(B, n_heads, T, d_k)`` (already rotated, for RoPE),
        v_new ``(B, n_heads, T, d_v)`` -> k, v ``(B, n_heads, start_pos + T, d_*)``,
        views of the buffers valid until the next update.

        Raises TypeError if ``start_pos`` is not an int; ValueError if it lies outside
        ``[0, length]``, past ``max_len``, or shapes do not match each other or the cache.
        """
        if k_new.ndim != 4 or v_new.ndim != 4 or k_new.shape[:3] != v_new.shape[:3]:
            raise ValueError(
                f"k_new, v_new: expected (B, n_heads, T, d_k) and (B, n_heads, T, d_v), "
                f"got {k_new.shape} and {v_new.shape}"
            )
        if isinstance(start_pos, bool) or not isinstance(start_pos, (int, np.integer)):
            raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
        start_pos = int(start_pos)  # np.int64 included: a plain int from here on
        if not 0 <= start_pos <= self.length:
            raise ValueError(
                f"start_pos: must lie in [0, length={self.length}] (the positions cached), "
                f"got {start_pos}"
            )
        B, H, T, _ = k_new.shape
        end = start_pos + T
        if end > self.max_len:
            raise ValueError(
                f"start_pos: {start_pos} + {T} new positions exceed max_len={self.max_len}"
            )
        shape_k = (B, H, self.max_len, k_new.shape[-1])
        shape_v = (B, H, self.max_len, v_new.shape[-1])
        dtype = np.result_type(k_new, v_new)
        fits = self.k is not None and (self.k.shape, self.v.shape) == (shape_k, shape_v)
        if not (fits and self.k.dtype == dtype):
            if start_pos != 0:
                raise ValueError(
                    f"k_new: shape {k_new.shape} / dtype {dtype} does not match the cached "
                    f"{self.k.shape if self.k is not None else None}; start again at start_pos=0"
                )
            self.k = np.empty(shape_k, dtype=dtype)  # allocated once, filled in place
            self.v = np.empty(shape_v, dtype=dtype)
        ### BEGIN SOLUTION ch12
        ### TODO: write k_new and v_new into positions start_pos .. end - 1 of the buffers
        ###   self.k and self.v (axis 2), set self.length = end, and return the views of
        ###   positions 0 .. end - 1 of both buffers (no copies)
        self.k[:, :, start_pos:end] = k_new
        self.v[:, :, start_pos:end] = v_new
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]
        ### END SOLUTION


class KVCache:
    """One :class:`LayerKVCache` per block of a GPT, in ``layers``, in block order.

    Raises ValueError if ``n_layers`` or ``max_len`` is not a positive int.
    """

    def __init__(self, n_layers: int, max_len: int):
        n_layers = _check_positive_int(n_layers, "n_layers")
        self.max_len = _check_positive_int(max_len, "max_len")
        self.layers = [LayerKVCache(max_len) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Positions held (the same in every layer after a model's forward)."""
        return self.layers[0].length

    def reset(self) -> None:
        """Forget every position of every layer."""
        for layer in self.layers:
            layer.reset()
