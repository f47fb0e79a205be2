"""FlashAttention in NumPy: exact attention without the ``(T_q, T_k)`` score matrix.

    out = softmax(q k^T * scale + mask) v            (Vaswani et al. 2017, eq. 1)

computed tile by tile (Dao et al. 2022, Algorithm 1, in the loop order of FlashAttention-2,
Dao 2023). Key/value tiles stream past a tile of queries; each query row keeps m, the
largest score so far, l = sum exp(score - m) and acc = sum exp(score - m) v. When a tile
raises m to m', alpha = exp(m - m') rescales l and acc (the "online softmax", Milakov &
Gimelshein 2018). At the end out = acc / l; only the row log-sum-exp L = m + log(l) is
kept for the backward. Memory grows with T, not T^2.
Twin: ``torch_impl/flash_attention.py``, PyTorch's fused ``F.scaled_dot_product_attention``.
"""

from __future__ import annotations

import math

import numpy as np

from .attention_checks import check_qkv, check_scale
from .masks import check_attn_mask, check_is_causal


def check_tile(value, name: str) -> int:
    """``value`` as an int tile length; ``ValueError`` naming ``name`` unless a positive int."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}: expected a positive int (a tile length), got {value!r}")
    return int(value)


def _check_flash_inputs(q, k, v, attn_mask, is_causal, tile_q, tile_k):
    """Check as the explicit attention does; return lead shape, broadcast mask view, tiles."""
    # as the torch twin: a 3-D q or a k of another batch size is a mistake, not a broadcast
    check_qkv(q, k, v)
    check_is_causal(is_causal)
    lead = q.shape[:-2]
    target = (*lead, q.shape[-2], k.shape[-2])
    if attn_mask is not None:
        attn_mask = np.asarray(attn_mask)
        check_attn_mask(attn_mask, target, q.dtype)
    tile_q, tile_k = check_tile(tile_q, "tile_q"), check_tile(tile_k, "tile_k")
    mask = None if attn_mask is None else np.broadcast_to(attn_mask, target)  # a view, no copy
    return lead, mask, tile_q, tile_k


def _mask_tile(s, mask, is_causal, r0, r1, c0, c1) -> None:
    """Apply the mask to the score tile ``s`` = rows ``r0:r1``, columns ``c0:c1``, in place."""
    if is_causal and c1 - 1 > r0:  # the tile reaches above the diagonal (key j > query i)
        future = np.arange(c0, c1)[None, :] > np.arange(r0, r1)[:, None]  # (Br, Bc)
        np.copyto(s, -np.inf, where=future)
    if mask is not None:
        tile = mask[..., r0:r1, c0:c1]
        if tile.dtype == np.bool_:
            np.copyto(s, -np.inf, where=~tile)  # True = may attend
        else:
            s += tile  # additive float mask, -inf forbids


def flash_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    tile_q: int = 128,
    tile_k: int = 128,
) -> tuple[np.ndarray, tuple]:
    """softmax(q k^T * scale + mask) v, one tile at a time (Dao et al. 2022, Algorithm 1).

    Same function and masks as :func:`numpy_impl.attention.scaled_dot_product_attention`
    (no dropout). q ``(B, n_heads, T_q, d_k)``, k ``(B, n_heads, T_k, d_k)``, v
    ``(B, n_heads, T_k, d_v)``, one float dtype. ``tile_q``, ``tile_k``: queries and keys
    per tile (B_r, B_c in the paper); need not divide T. Wholly future key tiles are skipped.

    Returns out ``(..., T_q, d_v)`` and the cache for :func:`flash_attention_backward`
    (inputs, out, row log-sum-exp ``lse`` ``(..., T_q, 1)``, settings). A query with every
    key masked gets zeros (its lse is +inf).

    Raises ValueError: mismatched shapes, a mask that does not broadcast, a tile length not a
    positive int, ``scale`` not finite > 0. TypeError: a mask neither bool nor float; q, k, v
    not of one float dtype; ``is_causal`` not a bool.
    """
    lead, mask, tile_q, tile_k = _check_flash_inputs(q, k, v, attn_mask, is_causal, tile_q, tile_k)
    check_scale(scale)
    T_q, d_v = q.shape[-2], v.shape[-1]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    dtype = np.result_type(q, k, v)
    out = np.empty((*lead, T_q, d_v), dtype=dtype)
    lse = np.empty((*lead, T_q, 1), dtype=dtype)  # log-sum-exp per query row: all we keep
    T_k = k.shape[-2]
    k_t = np.swapaxes(k, -1, -2)  # (..., d_k, T_k), a view

    for r0 in range(0, T_q, tile_q):
        r1 = min(r0 + tile_q, T_q)
        q_i = q[..., r0:r1, :] * scale  # (..., Br, d_k)
        m = np.full((*lead, r1 - r0, 1), -np.inf, dtype=dtype)  # running row max
        l = np.zeros((*lead, r1 - r0, 1), dtype=dtype)  # running sum of exp(s - m)
        acc = np.zeros((*lead, r1 - r0, d_v), dtype=dtype)  # running sum of exp(s - m) v
        # causal: row i sees keys 0..i, so this tile's rows see nothing past key r1 - 1
        c_end = min(T_k, r1) if is_causal else T_k
        for c0 in range(0, c_end, tile_k):
            c1 = min(c0 + tile_k, c_end)
            s = q_i @ k_t[..., c0:c1]  # (..., Br, d_k) @ (..., d_k, Bc) -> (..., Br, Bc)
            _mask_tile(s, mask, is_causal, r0, r1, c0, c1)
            ### BEGIN SOLUTION ch12
            ### TODO: the online-softmax update for this tile of scores s (..., Br, Bc):
            ###   m_new = max(m, row max of s); alpha = exp(m - m_new) rescales what l and acc
            ###   hold; p = exp(s - m_new); l = alpha l + rowsum(p); acc = alpha acc + p v_j
            ###   (v_j = v[..., c0:c1, :]); m = m_new. A row whose scores are all -inf so far
            ###   has m_new = -inf: subtract 0 instead, so exp gives 0, not NaN (-inf - -inf)
            m_new = np.maximum(m, s.max(axis=-1, keepdims=True))  # (..., Br, 1)
            m_safe = np.where(np.isfinite(m_new), m_new, 0.0)  # all -inf so far: exp(-inf) = 0
            alpha = np.exp(m - m_safe)  # rescales the old sums to the new max (1 if unchanged)
            s -= m_safe
            p = np.exp(s, out=s)  # (..., Br, Bc), in place of the scores
            l *= alpha
            l += p.sum(axis=-1, keepdims=True)
            acc *= alpha
            acc += p @ v[..., c0:c1, :]  # (..., Br, Bc) @ (..., Bc, d_v) -> (..., Br, d_v)
            m = m_new
            ### END SOLUTION
        dead = l == 0.0  # no key to attend to: output 0, lse +inf (backward's P = 0)
        np.divide(acc, np.where(dead, 1.0, l), out=out[..., r0:r1, :])
        with np.errstate(divide="ignore"):
            lse[..., r0:r1, :] = np.where(dead, np.inf, m + np.log(l))
    return out, (q, k, v, out, lse, mask, is_causal, scale, tile_q, tile_k)


def flash_attention_backward(
    dout: np.ndarray, cache: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`flash_attention`, recomputing the probabilities tile by tile.

    Dao et al. 2022, Algorithm 4, in FlashAttention-2's loop order (Dao 2023, Algorithm 2):
    the outer loop over key tiles j owns dk_j, dv_j; the inner loop over query tiles i does

        S = q_i k_j^T * scale,  P = exp(S - lse_i)           (the forward's probabilities)
        dv_j += P^T dout_i,     dP = dout_i v_j^T
        dS = P * (dP - D_i),    D_i = rowsum(dout_i * out_i)  (= rowsum(dP * P): out_i = P v)
        dq_i += dS k_j * scale, dk_j += dS^T q_i * scale

    dout ``(..., T_q, d_v)`` -> dq ``(..., T_q, d_k)``, dk ``(..., T_k, d_k)``, dv
    ``(..., T_k, d_v)``. Raises ValueError if dout's shape is not out's.
    """
    q, k, v, out, lse, mask, is_causal, scale, tile_q, tile_k = cache
    if dout.shape != out.shape:
        raise ValueError(f"dout: expected shape {out.shape}, got {dout.shape}")
    dq, dk, dv = (
        np.zeros(q.shape, out.dtype),
        np.zeros(k.shape, out.dtype),
        np.zeros(v.shape, out.dtype),
    )
    T_q, T_k = q.shape[-2], k.shape[-2]
    q_s = q * scale  # (..., T_q, d_k): scaled once, used by every tile
    D = np.sum(dout * out, axis=-1, keepdims=True)  # (..., T_q, 1)

    for c0 in range(0, T_k, tile_k):
        c1 = min(c0 + tile_k, T_k)
        k_j, v_j = k[..., c0:c1, :], v[..., c0:c1, :]  # (..., Bc, d_k), (..., Bc, d_v)
        # causal: rows i < c0 see none of these keys; start at the query tile holding row c0
        first = (c0 // tile_q) * tile_q if is_causal else 0
        for r0 in range(first, T_q, tile_q):
            r1 = min(r0 + tile_q, T_q)
            s = q_s[..., r0:r1, :] @ np.swapaxes(k_j, -1, -2)  # (..., Br, Bc)
            _mask_tile(s, mask, is_causal, r0, r1, c0, c1)
            s -= lse[..., r0:r1, :]
            p = np.exp(s, out=s)  # the forward's probabilities, recomputed (0 where masked)
            dout_i = dout[..., r0:r1, :]
            dv[..., c0:c1, :] += np.swapaxes(p, -1, -2) @ dout_i  # (..., Bc, Br) @ (Br, d_v)
            dp = dout_i @ np.swapaxes(v_j, -1, -2)  # (..., Br, d_v) @ (..., d_v, Bc)
            dp -= D[..., r0:r1, :]
            dp *= p  # dS = P * (dP - D), in place
            dq[..., r0:r1, :] += (dp @ k_j) * scale  # (..., Br, Bc) @ (..., Bc, d_k)
            dk[..., c0:c1, :] += np.swapaxes(dp, -1, -2) @ q_s[..., r0:r1, :]  # scale in q_s
    return dq, dk, dv
