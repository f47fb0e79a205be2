"""The input checks of attention, said once: shapes, dtypes, scale and sizes.

Used by ``attention.py``, ``flash_attention.py`` and ``multihead_attention.py``. Each error
names the argument and what was expected, with the exception types of the torch twin.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .module import check_float, check_last_dim


def check_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """q, k, v are 4-D with matching batch, heads, T_k and d_k, and one floating dtype.

    Raises:
        ValueError: a rank other than 4, mismatched shapes (a 3-D q, or a k of another
            batch size, is a mistake, not something to broadcast), T_k = 0 or d_k = 0.
        TypeError: mixed or non-floating dtypes (NumPy would upcast silently).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(
                f"{name}: expected shape (B, n_heads, T, d_k) (4 dimensions), got {t.shape}"
            )
    B, H, _, d_k = q.shape
    T_k = k.shape[2]
    if k.shape != (B, H, T_k, d_k):
        raise ValueError(f"k: expected shape (B={B}, n_heads={H}, Tk, d_k={d_k}), got {k.shape}")
    if d_k == 0:
        raise ValueError(f"q: expected a head dimension d_k >= 1, got shape {q.shape}")
    if T_k == 0:
        raise ValueError(f"k: expected at least one key (T_k >= 1), got shape {k.shape}")
    if v.shape[:3] != (B, H, T_k):
        raise ValueError(f"v: expected shape (B={B}, n_heads={H}, Tk={T_k}, d_v), got {v.shape}")
    if not (q.dtype == k.dtype == v.dtype and np.issubdtype(q.dtype, np.floating)):
        raise TypeError(
            f"q, k, v: expected one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )


def check_scale(scale) -> None:
    """Raise ``ValueError`` unless ``scale`` is None or a finite number > 0."""
    if scale is None:
        return
    number = isinstance(scale, numbers.Real) and not isinstance(scale, bool)  # np.float32 too
    if not number or not 0 < scale < math.inf:
        raise ValueError(f"scale: expected a finite number > 0 or None, got {scale!r}")


def check_sizes(d_model, n_heads, n_kv_heads=None, head_dim=None) -> tuple[int, int]:
    """Positive sizes; n_kv_heads divides n_heads; head_dim None needs n_heads | d_model.

    Returns ``(n_kv_heads, head_dim)`` with the defaults filled in (n_heads, d_model / n_heads).
    Raises ``ValueError`` naming the offending argument.
    """
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    sizes = (("d_model", d_model), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads))
    for name, value in (*sizes, ("head_dim", 1 if head_dim is None else head_dim)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if head_dim is None and d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    return int(n_kv_heads), int(d_model // n_heads if head_dim is None else head_dim)


def check_layer_inputs(x, kv, attn_mask, kv_cache, d_model: int, dtype, rope: bool) -> None:
    """The inputs of ``SelfAttention.forward`` (the checks ``nn.MultiheadAttention`` makes).

    x ``(B, T>=1, d_model)``, kv ``(B, S>=1, d_model)`` or None, both of ``dtype`` (the
    layer's). Raises ValueError for other shapes, kv with RoPE or a kv_cache, or an
    ``attn_mask`` with a kv_cache; TypeError for x or kv not of ``dtype``.
    """
    for name, a in (("x", x), ("kv", kv)):
        if a is None:
            continue
        if a.ndim != 3 or a.shape[1] < 1:
            raise ValueError(f"{name}: expected shape (B, T>=1, d_model={d_model}), got {a.shape}")
        check_last_dim(a, d_model, name, "d_model")
    if kv is not None and kv.shape[0] != x.shape[0]:
        raise ValueError(f"kv: expected batch size B={x.shape[0]} (that of x), got {kv.shape}")
    for name, a in (("x", x), ("kv", kv)):  # cross-attention projects with bare linear()
        if a is not None:
            check_float(a, name, dtype)
    if kv is not None and (rope or kv_cache is not None):
        raise ValueError("kv: cross-attention takes neither RoPE nor a kv_cache")
    if kv_cache is not None and attn_mask is not None:
        raise ValueError("attn_mask: decoding with a kv_cache builds its own causal mask")
