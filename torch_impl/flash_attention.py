"""FlashAttention: exact attention without materialising the ``(T_q, T_k)`` scores.

Twin of ``numpy_impl/flash_attention.py``, which writes the tiled algorithm out
(Dao et al. 2022; Dao 2023). Here PyTorch's fused ``F.scaled_dot_product_attention``
runs it; autograd gives the backward.
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
    """softmax(q k^T * scale + mask) v; the NumPy twin's arguments, errors and shapes:
    q ``(B, H, T_q, d_k)``, k ``(B, H, T_k, d_k)``, v ``(B, H, T_k, d_v)`` -> ``(B, H, T_q, d_v)``.

    ``tile_q`` and ``tile_k`` are validated, then ignored: the kernel picks its own tiles.
    ``with use_sdpa_backend("flash"):`` forces the flash kernel (``RuntimeError`` if it
    cannot take these inputs). A query with every key masked gets zeros.
    """
    check_qkv(q, k, v)
    is_causal = check_is_causal(is_causal)
    check_scale(scale)
    if attn_mask is not None:
        check_attn_mask(attn_mask, (*q.shape[:2], q.shape[-2], k.shape[-2]), q.dtype)
    _check_tile(tile_q, "tile_q")
    _check_tile(tile_k, "tile_k")
    return fused_attention(q, k, v, attn_mask, is_causal, scale)
