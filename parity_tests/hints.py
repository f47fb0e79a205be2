"""What a wrong result looks like: the usual mistakes, computed, for readable failures.

Each function here returns ``{label: wrong result}`` (the wrong result a callable,
computed only when a comparison fails). :func:`tolerances.assert_close` tries
them on a failing tensor and, when one matches, ends its message with
``hint: label``; ``python -m labs check`` prints that line under the failed
comparison. The registry (registry.py) attaches them to its pairs.
"""

from __future__ import annotations

import numpy as np


# -- scaled dot-product attention, the function (chapter 03) ----------------------------------
def sdpa_variant(q, k, v, mask, is_causal, scale, axis=-1, scaled=True, masked=True):
    """Plain attention with one thing changed, as a bug would: the softmax over
    ``axis``, no ``scale``, no mask."""
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * (s if scaled else 1.0)
    if masked and is_causal:
        scores = np.where(np.triu(np.ones(scores.shape[-2:], bool), 1), -np.inf, scores)
    elif masked and mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    top = np.max(scores, axis=axis, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = np.sum(e, axis=axis, keepdims=True)
    return (e / np.where(total == 0.0, 1.0, total)) @ v


def sdpa_hints(q, k, v, attn_mask=None, is_causal=False, scale=None, **_) -> dict:
    """The output of scaled_dot_product_attention after the usual mistakes."""
    args = (q, k, v, attn_mask, is_causal, scale)
    hints = {
        "wrong softmax axis: your probabilities sum to 1 over the queries (axis -2); "
        "each query's row must sum to 1 over the keys (axis -1)": lambda: sdpa_variant(
            *args, axis=-2
        ),
        "scores not scaled: multiply q k^T by scale (1 / sqrt(d_k) by default)": lambda: (
            sdpa_variant(*args, scaled=False)
        ),
    }
    if attn_mask is not None or is_causal:
        hints["the mask is not applied: forbidden scores must become -inf"] = lambda: sdpa_variant(
            *args, masked=False
        )
    return hints


# -- causal self-attention, the layer (chapter 04) ---------------------------------------------
def self_attention_variant(module, x: np.ndarray, split=True, merge=True, causal=True):
    """Causal SelfAttention's output computed plainly from ``module``'s weights, with a bug:
    heads split (``split=False``) or merged (``merge=False``) by a bare reshape, where the
    head axis must be moved; or no causal mask."""
    sd = module.state_dict()
    B, T, C = x.shape
    H = module.n_heads
    d = C // H

    def linear(a, name):
        bias = sd.get(f"{name}.bias")
        return a @ sd[f"{name}.weight"].T + (0.0 if bias is None else bias)

    def heads(a):  # (B, T, C) -> (B, H, T, d)
        return a.reshape(B, T, H, d).transpose(0, 2, 1, 3) if split else a.reshape(B, H, T, d)

    q, k, v = (heads(a) for a in np.split(linear(x, "qkv_proj"), 3, axis=-1))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        scores = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (p / p.sum(axis=-1, keepdims=True)) @ v
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C) if merge else y.reshape(B, T, C)
    return linear(y, "out_proj")


def self_attention_hints(module, x, **_) -> dict:
    """The output of causal SelfAttention after the usual mistakes of chapter 04."""
    return {
        "heads merged with a bare reshape: move the head axis back first, (B, H, T, d_k) "
        "-> (B, T, H, d_k), then reshape to (B, T, C)": lambda: self_attention_variant(
            module, x, merge=False
        ),
        "heads split (and merged) with a bare reshape: (B, T, C) -> (B, T, H, d_k), then "
        "swap the T and H axes": lambda: self_attention_variant(
            module, x, split=False, merge=False
        ),
        "no causal mask: position t must not see the positions after it": lambda: (
            self_attention_variant(module, x, causal=False)
        ),
    }


# -- the online softmax (chapter 12) ------------------------------------------------------------
def online_softmax_variant(q, k, v, scale, tile_k: int, mistake: str) -> np.ndarray:
    """Unmasked tiled attention with one classic online-softmax mistake."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    m = np.full((*q.shape[:-1], 1), -np.inf)
    l, acc = np.zeros_like(m), np.zeros((*q.shape[:-1], v.shape[-1]))
    for c0 in range(0, k.shape[-2], tile_k):
        s = (q * scale) @ np.swapaxes(k[..., c0 : c0 + tile_k, :], -1, -2)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        alpha = 1.0 if mistake == "no_rescale" else np.exp(m - m_new)
        p = np.exp(s - m_new)
        if mistake == "overwrite":
            l, acc = p.sum(axis=-1, keepdims=True), p @ v[..., c0 : c0 + tile_k, :]
        else:
            l = alpha * l + p.sum(axis=-1, keepdims=True)
            acc = alpha * acc + p @ v[..., c0 : c0 + tile_k, :]
        m = m_new
    return acc / l


def online_softmax_hints(q, k, v, attn_mask, is_causal, scale, tile_k, **_) -> dict:
    """What a flash output looks like after the usual online-softmax mistakes (no mask)."""
    if attn_mask is not None or is_causal or k.shape[-2] <= tile_k:
        return {}
    args = (q, k, v, scale, tile_k)
    return {
        "the old sums are not rescaled: multiply l and acc by alpha = exp(m - m_new) "
        "before adding the new tile": lambda: online_softmax_variant(*args, "no_rescale"),
        "only the last key tile counts: accumulate l and acc over the tiles "
        "(l = alpha l + ..., acc = alpha acc + ...), do not overwrite them": lambda: (
            online_softmax_variant(*args, "overwrite")
        ),
    }


# -- the embedding's gradient (chapter 02) ------------------------------------------------------
REPEATED_IDS = (
    "repeated ids keep one gradient: `grad[idx] += dout` writes each row once; "
    "np.add.at(grad, idx, dout) adds every occurrence"
)


def buffered_scatter(idx: np.ndarray, dout: np.ndarray, num_embeddings: int) -> np.ndarray:
    """The table gradient ``grad[idx] += dout`` gives from zeros: one write per repeated id."""
    grad = np.zeros((num_embeddings, dout.shape[-1]), dtype=np.float64)
    grad[np.asarray(idx).reshape(-1)] += dout.reshape(-1, dout.shape[-1])
    return grad
