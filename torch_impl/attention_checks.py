"""The input checks of attention: shapes, dtypes, scale and sizes, said once.

Twin of ``numpy_impl/attention_checks.py``: the same errors with the same
exception types (the fused kernel would raise its own RuntimeError otherwise).
"""

from __future__ import annotations

import math
import numbers

import torch

from .linear import check_float


def check_qkv(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    """q, k, v are 4-D with matching batch, heads, T_k and d_k, and one floating dtype.

    Raises:
        ValueError: a rank other than 4, mismatched shapes, T_k = 0 or d_k = 0.
        TypeError: mixed or non-floating dtypes (the fused kernel would raise RuntimeError).
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"{name}: expected shape (B, n_heads, T, d_k) (4 dimensions), got {tuple(t.shape)}"
            )
    B, H, _, d_k = q.shape
    T_k = k.shape[2]
    if k.shape != (B, H, T_k, d_k):
        raise ValueError(
            f"k: expected shape (B={B}, n_heads={H}, Tk, d_k={d_k}), got {tuple(k.shape)}"
        )
    if d_k == 0:
        raise ValueError(f"q: expected a head dimension d_k >= 1, got shape {tuple(q.shape)}")
    if T_k == 0:
        raise ValueError(f"k: expected at least one key (T_k >= 1), got shape {tuple(k.shape)}")
    if v.shape[:3] != (B, H, T_k):
        raise ValueError(
            f"v: expected shape (B={B}, n_heads={H}, Tk={T_k}, d_v), got {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype and q.is_floating_point()):
        raise TypeError(
            f"q, k, v: expected one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )


def check_scale(scale) -> None:
    """Raise ``ValueError`` unless ``scale`` is None or a finite number > 0."""
    if scale is None:
        return
    number = isinstance(scale, numbers.Real) and not isinstance(scale, bool)
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
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if head_dim is None and d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    if n_heads % n_kv_heads:
        raise ValueError(f"n_kv_heads={n_kv_heads} must divide n_heads={n_heads}")
    return int(n_kv_heads), int(d_model // n_heads if head_dim is None else head_dim)


def check_layer_inputs(x, kv, attn_mask, kv_cache, d_model: int, dtype, rope: bool) -> None:
    """The inputs of ``SelfAttention.forward``: x (and kv) of the layer's dtype, kv of
    x's batch size, no RoPE (``rope``) or kv_cache with kv, no ``attn_mask`` with a
    kv_cache.

    Shapes: x ``(B, T>=1, d_model)``, kv ``(B, S>=1, d_model)`` or None. Returns None.
    Source: the checks ``torch.nn.MultiheadAttention.forward`` makes of its query and key.

    Raises:
        ValueError: a shape, or a combination of arguments, the layer does not take.
        TypeError: x or kv not of ``dtype`` (the layer's parameters').
    """
    for name, a in (("x", x), ("kv", kv)):
        if a is None:
            continue
        if a.dim() != 3 or a.shape[1] < 1 or a.shape[-1] != d_model:
            raise ValueError(
                f"{name}: expected shape (B, T>=1, d_model={d_model}), got {tuple(a.shape)}"
            )
    if kv is not None and kv.shape[0] != x.shape[0]:
        raise ValueError(
            f"kv: expected batch size B={x.shape[0]} (that of x), got {tuple(kv.shape)}"
        )
    for name, a in (("x", x), ("kv", kv)):  # cross-attention projects with bare linear()
        if a is not None:
            check_float(a, name, dtype)
    if kv is not None and (rope or kv_cache is not None):
        raise ValueError("kv: cross-attention takes neither RoPE nor a kv_cache")
    if kv_cache is not None and attn_mask is not None:
        raise ValueError("attn_mask: decoding with a kv_cache builds its own causal mask")
