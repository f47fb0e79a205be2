"""FlashAttention: exact attention without materialising the ``(T_q, T_k)`` scores.

Twin of ``numpy_impl/flash_attention.py``, which writes the tiled algorithm out
(Dao et al. 2022; Dao 2023, FlashAttention-2). Here it is PyTorch's fused
``F.scaled_dot_product_attention``: on CUDA its flash and memory-efficient
kernels run that algorithm inside one kernel, keeping each score tile in
on-chip memory; on CPU PyTorch has a tiled flash kernel too. Autograd supplies
the backward, so there is no ``flash_attention_backward`` here: the NumPy
side's backward is compared with ``out.backward(dout)``.
"""

from __future__ import annotations

import torch

from .attention import check_qkv, check_scale, fused_attention
from .masks import check_attn_mask, check_is_causal


def _check_tile(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}: expected a positive int (a tile length), got {value!r}")
    return value


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    tile_q: int = 128,
    tile_k: int = 128,
) -> torch.Tensor:
    """softmax(q k^T * scale + mask) v by PyTorch's fused kernel (Dao et al. 2022).

    Same arguments as the NumPy twin. ``tile_q`` and ``tile_k`` are validated
    and otherwise ignored: the kernel chooses its own tiles (FlashAttention-2 on
    CUDA uses 64 to 128 rows per tile depending on the head dimension). To
    force one kernel, call it inside ``with use_sdpa_backend("flash"):``
    (:func:`torch_impl.attention.use_sdpa_backend`).

    Args:
        q: ``(B, n_heads, T_q, d_k)``, float.
        k: ``(B, n_heads, T_k, d_k)``, q's dtype.
        v: ``(B, n_heads, T_k, d_v)``, q's dtype.
        attn_mask: bool (True = may attend) or float (added to the scores),
            broadcastable to ``(B, n_heads, T_q, T_k)``; or None.
        is_causal: forbid keys j > i (top-left aligned); with ``attn_mask``, both apply.
        scale: score multiplier; None means ``1 / sqrt(d_k)``.
        tile_q, tile_k: positive ints (see above).

    Returns:
        out ``(B, n_heads, T_q, d_v)``, q's dtype. A query whose keys are all
        masked gets zeros and zero (finite) gradients.

    Raises:
        ValueError: shapes that do not fit, a mask that does not broadcast, a tile length
            that is not a positive int,
            ``scale`` not a finite number > 0.
        TypeError: an ``attn_mask`` that is neither bool nor floating; q, k, v not of one
            floating dtype; ``is_causal`` not a bool.
        RuntimeError: a kernel forced by ``use_sdpa_backend`` cannot take these inputs.
    """
    check_qkv(q, k, v)
    is_causal = check_is_causal(is_causal)
    check_scale(scale)
    if attn_mask is not None:
        check_attn_mask(attn_mask, (*q.shape[:2], q.shape[-2], k.shape[-2]), q.dtype)
    _check_tile(tile_q, "tile_q")
    _check_tile(tile_k, "tile_k")
    # the fused kernel, with the guard for queries that may see no key (zeros, not NaN)
    return fused_attention(q, k, v, attn_mask, is_causal, scale)
