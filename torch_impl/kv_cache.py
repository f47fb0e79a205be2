"""The key/value cache: decoding without recomputing the past (Pope et al. 2022, sec. 2).

Twin of ``numpy_impl/kv_cache.py``, which gives the reasoning. Inference only:
use it under ``torch.no_grad()`` (``generate`` does).
"""

from __future__ import annotations

import numbers

import torch


def _check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return int(value)


class LayerKVCache:
    """Keys and values of one attention layer, for positions ``0 .. length - 1``.

    ``k``, ``v``: ``(B, n_heads, max_len, d_k)`` buffers, allocated at the first update.
    ``ValueError`` unless ``max_len`` is a positive int.
    """

    def __init__(self, max_len: int):
        self.max_len = _check_positive_int(max_len, "max_len")
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None
        self.length = 0

    def reset(self) -> None:
        """Forget every position (the buffers are kept for reuse)."""
        self.length = 0

    def update(
        self, k_new: torch.Tensor, v_new: torch.Tensor, start_pos: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store positions ``start_pos .. start_pos + T - 1`` (overwriting); return all held.

        k_new ``(B, H, T, d_k)``, v_new ``(B, H, T, d_v)`` -> views ``(B, H, start_pos + T, d)``,
        valid until the next update. ``TypeError`` for a non-int ``start_pos``;
        ``ValueError`` for ``start_pos`` outside ``[0, length]``, overflow, or mismatched shapes.
        """
        if k_new.dim() != 4 or v_new.dim() != 4 or k_new.shape[:3] != v_new.shape[:3]:
            raise ValueError(
                f"k_new, v_new: expected (B, n_heads, T, d_k) and (B, n_heads, T, d_v), "
                f"got {tuple(k_new.shape)} and {tuple(v_new.shape)}"
            )
        if isinstance(start_pos, bool) or not isinstance(start_pos, numbers.Integral):
            raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
        start_pos = int(start_pos)  # np.int64 too: torch's kernels want a Python int
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
        fits = (
            self.k is not None
            and (tuple(self.k.shape), tuple(self.v.shape)) == (shape_k, shape_v)
            and (self.k.dtype, self.k.device) == (k_new.dtype, k_new.device)
        )
        if not fits:
            if start_pos != 0:
                raise ValueError(
                    f"k_new: shape {tuple(k_new.shape)} / dtype {k_new.dtype} does not match the "
                    f"cached {None if self.k is None else tuple(self.k.shape)}; "
                    "start again at start_pos=0"
                )
            self.k = k_new.new_empty(shape_k)  # allocated once, filled in place
            self.v = v_new.new_empty(shape_v)
        self.k[:, :, start_pos:end] = k_new
        self.v[:, :, start_pos:end] = v_new
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


class KVCache:
    """One :class:`LayerKVCache` per GPT block, in ``layers``; ``ValueError`` for a size < 1."""

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
