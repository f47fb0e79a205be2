"""Scaled dot-product attention and the one multi-head attention module of twinformer.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V           (Vaswani et al. 2017, eq. 1)
    MultiHead(x) = Concat(head_1 .. head_H) W_O,  head_h = Attention(x W_Q^h, x W_K^h, x W_V^h)
    grouped-query: head h uses K/V head h // (H / H_kv)   (Ainslie et al. 2023, GQA; H_kv = 1: MQA)

:class:`SelfAttention` serves every model: causal (GPT), bidirectional with padding (encoder)
and cross-attention (``kv``: the encoder's output). ``multihead_attention.py`` puts it behind
``nn.MultiheadAttention``'s interface. Twin of ``torch_impl/attention.py``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .attention_checks import check_layer_inputs, check_qkv, check_scale, check_sizes
from .dropout import Dropout
from .flash_attention import check_tile, flash_attention, flash_attention_backward
from .linear import Linear, linear, linear_backward
from .masks import cached_attn_mask, check_attn_mask, check_is_causal, combine_attn_mask
from .module import Module, check_float
from .rope import RotaryEmbedding

ATTN_IMPLS = ("explicit", "flash")
# flash's tile: 128 x 128 scores (64 KiB float32 per head); fewer keys run the explicit formula
FLASH_TILE = 128


class AttentionCache(NamedTuple):
    """What :func:`scaled_dot_product_attention_backward` needs from the forward."""

    q: np.ndarray  # (B, H, T_q, d_k)
    k: np.ndarray  # (B, H, T_k, d_k)
    v: np.ndarray  # (B, H, T_k, d_v)
    probs: np.ndarray  # (B, H, T_q, T_k), the softmax probabilities (before dropout)
    keep: np.ndarray | None  # the dropout's scaled mask, or None
    scale: float


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """``(B, T, C)`` -> ``(B, n_heads, T, d_k)``; head h: features ``h d_k .. (h+1) d_k - 1``."""
    ### BEGIN SOLUTION ch04
    ### TODO: cut the last axis into (n_heads, d_k), then move the head axis before T
    B, T, C = x.shape
    return x.reshape(B, T, n_heads, C // n_heads).transpose(0, 2, 1, 3)  # (B, H, T, d_k)
    ### END SOLUTION


def merge_heads(x: np.ndarray) -> np.ndarray:
    """``(B, n_heads, T, d_k)`` -> ``(B, T, n_heads d_k)``: the inverse of :func:`split_heads`."""
    ### BEGIN SOLUTION ch04
    ### TODO: move the head axis back after T, then join (n_heads, d_k) into one axis
    B, H, T, d_k = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * d_k)  # (B, T, C)
    ### END SOLUTION


def repeat_kv(x: np.ndarray, n_rep: int) -> np.ndarray:
    """``(B, H_kv, S, d)`` -> ``(B, H_kv n_rep, S, d)``: each K/V head serves n_rep query heads."""
    return x if n_rep == 1 else np.repeat(x, n_rep, axis=1)  # heads g n_rep .. (g+1) n_rep - 1


def repeat_kv_backward(dx: np.ndarray, n_rep: int) -> np.ndarray:
    """``(B, H_kv n_rep, S, d)`` -> ``(B, H_kv, S, d)``: a shared head sums its group's grads."""
    B, H, S, d = dx.shape
    return dx if n_rep == 1 else dx.reshape(B, H // n_rep, n_rep, S, d).sum(axis=2)


def softmax(scores: np.ndarray) -> np.ndarray:
    """softmax over the last axis, ``exp(s - max s) / sum exp(s - max s)``.

    The max keeps exp from overflowing. An all ``-inf`` row (a query that may see no key)
    gives zeros, not 0/0 = NaN, as PyTorch's fused kernels do.
    """
    check_float(scores, "scores")
    ### BEGIN SOLUTION ch03
    ### TODO: subtract each row's max (0 for a row that is all -inf), exponentiate, divide by
    ###   the row sum (1 where that sum is 0, so a fully masked row stays 0)
    row_max = scores.max(axis=-1, keepdims=True)  # (..., 1)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # all -inf: exp(-inf - 0) = 0
    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)  # (..., 1)
    return e / np.where(total > 0.0, total, 1.0)
    ### END SOLUTION


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, tuple]:
    """softmax(q k^T * scale + mask) v (Vaswani et al. 2017, eq. 1), and a cache for backward.

    q ``(B, n_heads, T_q, d_k)``, k ``(B, n_heads, T_k, d_k)``, v ``(B, n_heads, T_k, d_v)``
    -> out ``(B, n_heads, T_q, d_v)``, and an :class:`AttentionCache` (``probs``: the weights).

    attn_mask: broadcastable to ``(B, n_heads, T_q, T_k)``; bool True = may attend
    (``numpy_impl/masks.py``), or float in q's dtype, added to the scores.
    is_causal: forbid keys j > i (top-left aligned); with a mask too, a key must pass both.
    scale: default ``1 / sqrt(d_k)`` (sec. 3.2.1: keeps the scores' variance ~1).
    dropout_p: on the probabilities (0 at evaluation), masks drawn from ``rng``.
    A query whose keys are all masked gets zeros and finite gradients.

    Raises ValueError: q, k, v not 4-D or mismatched, no key or d_k = 0, a mask that does not
    broadcast, ``scale`` not finite > 0, ``dropout_p`` outside ``[0, 1)``. TypeError: a mask
    neither bool nor q's dtype; q, k, v not of one float dtype; ``is_causal`` not a bool.
    """
    mask, scale, keep = attention_inputs(q, k, v, attn_mask, is_causal, scale, dropout_p, rng)
    ### BEGIN SOLUTION ch03
    ### TODO: scores = q k^T * scale (B, H, T_q, T_k); where a bool mask is False the score
    ###   is -inf, a float mask is added; probs = softmax(scores) over the keys;
    ###   out = probs v, with probs * keep instead of probs when keep is not None
    scores = q @ k.swapaxes(-1, -2) * scale  # (B,H,T_q,d_k) @ (B,H,d_k,T_k) -> (B,H,T_q,T_k)
    if mask is not None and mask.dtype == np.bool_:
        scores = np.where(mask, scores, -np.inf)  # a masked key gets probability 0
    elif mask is not None:
        scores = scores + mask
    probs = softmax(scores)  # (B, H, T_q, T_k): each row a distribution over keys
    out = (probs if keep is None else probs * keep) @ v  # (B, H, T_q, T_k) @ (B, H, T_k, d_v)
    ### END SOLUTION
    return out, AttentionCache(q, k, v, probs, keep, scale)


def attention_inputs(q, k, v, attn_mask, is_causal, scale, dropout_p, rng):
    """Check :func:`scaled_dot_product_attention`'s arguments, raising as it does. Returns the
    one mask of ``attn_mask`` and ``is_causal`` (bool, float or None), the scale as a float,
    and the dropout's scaled keep-mask ``(B, H, T_q, T_k)`` or None."""
    check_qkv(q, k, v)
    is_causal = check_is_causal(is_causal)
    check_scale(scale)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: must lie in [0, 1), got {dropout_p}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if attn_mask is not None:
        attn_mask = np.asarray(attn_mask)
        check_attn_mask(attn_mask, (*q.shape[:2], T_q, T_k), q.dtype)
    mask = combine_attn_mask(attn_mask, is_causal, T_q, T_k)  # bool, float or None
    # a NumPy float64 scale would make float32 scores float64 (NEP 50)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    keep = None
    if dropout_p > 0.0:
        rng = np.random.default_rng() if rng is None else rng
        keep = (rng.random((*q.shape[:-1], T_k)) >= dropout_p) / (1.0 - dropout_p)
        keep = keep.astype(q.dtype)  # (B, H, T_q, T_k): 0, or 1 / (1 - p)
    return mask, scale, keep


def scaled_dot_product_attention_backward(
    dout: np.ndarray, cache: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`scaled_dot_product_attention` with respect to q, k and v.

    With S = q k^T * scale, P = softmax(S) row by row, out = P v:
        dv = P^T dout
        dP = dout v^T
        dS = P * (dP - rowsum(dP * P))            the softmax's Jacobian-vector product
        dq = dS k * scale,   dk = dS^T q * scale
    With dropout, out = (P * keep) v: dv uses P * keep, and dP is multiplied by keep.

    dout ``(B, n_heads, T_q, d_v)`` -> dq, dk, dv, the shapes of q, k, v.
    """
    q, k, v, probs, keep, scale = cache
    ### BEGIN SOLUTION ch03
    ### TODO: the five lines of the docstring, in that order (dv uses the probabilities that
    ###   forward multiplied by v; dP is multiplied by keep when keep is not None)
    dv = (probs if keep is None else probs * keep).swapaxes(-1, -2) @ dout  # (B, H, T_k, d_v)
    dP = dout @ v.swapaxes(-1, -2)  # (B, H, T_q, d_v) @ (B, H, d_v, T_k) -> (B, H, T_q, T_k)
    if keep is not None:
        dP = dP * keep
    dS = probs * (dP - (dP * probs).sum(axis=-1, keepdims=True))  # (B, H, T_q, T_k)
    dq = dS @ k * scale  # (B, H, T_q, T_k) @ (B, H, T_k, d_k) -> (B, H, T_q, d_k)
    dk = dS.swapaxes(-1, -2) @ q * scale  # (B, H, T_k, T_q) @ (B, H, T_q, d_k) -> (B, H, T_k, d_k)
    return dq, dk, dv
    ### END SOLUTION


class SelfAttention(Module):
    """Multi-head attention with one packed q/k/v projection (Vaswani et al. 2017, sec. 3.2.2).

    ``qkv_proj`` ``((H + 2 H_kv) d_k, d_model)`` stacks W_Q, W_K, W_V (nanoGPT's ``c_attn``,
    ``nn.MultiheadAttention``'s ``in_proj_weight``). Self-attention: q, k, v =
    split(qkv_proj(x)), one matrix product. Cross-attention (``kv`` given): q from x with the
    first rows, k and v from kv with the others. ``n_heads`` H query heads of ``head_dim`` d_k
    (default ``d_model / n_heads``); ``n_kv_heads`` H_kv key/value heads (default H; H_kv must
    divide H), each shared by a group of H / H_kv query heads (GQA); the KV cache holds H_kv.
    ``qkv_bias`` (default ``bias``): biases of q, k, v (Qwen2); ``bias``: of ``out_proj``.

    rope: None or a RoPE layout, ``"interleaved"`` or ``"half"`` (``numpy_impl/rope.py``);
    rope_base, rope_scaling: its frequencies.
    attn_impl: ``"explicit"`` (the formula) or ``"flash"`` (the same by tiles of ``flash_tile``,
    ``numpy_impl/flash_attention.py``); flash gives no weights and no dropout, so with
    ``need_weights`` or dropout in training the formula runs. dropout: on the probabilities
    (training only) and on the output.
    x ``(B, T, C)``, kv ``(B, S, C)`` or None, attn_mask broadcastable to ``(B, n_heads, T, S)``,
    start_pos (x's first position, for RoPE and ``kv_cache``, a
    :class:`~numpy_impl.kv_cache.LayerKVCache`) -> ``(B, T, C)``. backward: dout -> dx, or
    ``(dx, dkv)`` for cross-attention.

    Raises ValueError: bad sizes; x or kv not ``(B, T>=1, C)``; RoPE with ``kv``; a mask with
    ``kv_cache``; the errors of :func:`scaled_dot_product_attention`.
    """

    _caches = ("_cache", "_inputs")  # what backward reads; dropped under no_grad()

    def __init__(
        self,
        d_model,
        n_heads,
        n_kv_heads=None,
        bias=True,
        dropout=0.0,
        rope=None,
        rope_base=10000.0,
        rope_scaling=None,
        head_dim=None,
        qkv_bias=None,
        *,
        attn_impl="explicit",
        dtype=np.float32,
        rng=None,
    ):
        self.n_kv_heads, self.d_k = check_sizes(d_model, n_heads, n_kv_heads, head_dim)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: must lie in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        qkv_bias = bias if qkv_bias is None else qkv_bias
        d_qkv = (n_heads + 2 * self.n_kv_heads) * self.d_k  # q, k, v rows
        self.qkv_proj = Linear(d_model, d_qkv, bias=qkv_bias, dtype=dtype, rng=rng)
        self.out_proj = Linear(n_heads * self.d_k, d_model, bias=bias, dtype=dtype, rng=rng)
        self.resid_dropout = Dropout(dropout)
        self.rope = None
        if rope is not None:
            self.rope = RotaryEmbedding(self.d_k, rope, rope_base, rope_scaling)
        self._rng = np.random.default_rng()  # the GPT replaces it with its own (dropout masks)
        self.attn_impl = attn_impl
        self.flash_tile = FLASH_TILE  # queries and keys per tile with attn_impl="flash"
        self._cache = self._inputs = None

    @property
    def attn_impl(self) -> str:
        """``"explicit"`` or ``"flash"``: how :meth:`attend` computes attention."""
        return self._attn_impl

    @attn_impl.setter
    def attn_impl(self, value: str) -> None:
        if value not in ATTN_IMPLS:
            raise ValueError(f"attn_impl: expected one of {ATTN_IMPLS}, got {value!r}")
        self._attn_impl = value

    @property
    def flash_tile(self) -> int:
        """Queries and keys per tile with ``attn_impl="flash"`` (fewer keys: explicit)."""
        return self._flash_tile

    @flash_tile.setter
    def flash_tile(self, value: int) -> None:
        self._flash_tile = check_tile(value, "flash_tile")  # flash_attention's own check

    def forward(
        self,
        x: np.ndarray,
        kv: np.ndarray | None = None,
        attn_mask: np.ndarray | None = None,
        is_causal: bool = False,
        start_pos: int = 0,
        kv_cache=None,
    ) -> np.ndarray:
        dtype, rope = self.qkv_proj.weight.dtype, self.rope is not None
        check_layer_inputs(x, kv, attn_mask, kv_cache, self.d_model, dtype, rope)
        ### BEGIN SOLUTION ch04
        ### TODO: q, k, v = self.project(x, kv); with RoPE (chapter 13) q, k = self.rope(q, k,
        ###   start_pos); then y, _ = self.attend(...) (y is (B, T, C)) and resid_dropout
        q, k, v = self.project(x, kv)  # (B, H, T, d_k), (B, H_kv, S, d_k), (B, H_kv, S, d_k)
        if self.rope is not None:  # positions enter here, by rotating q and k (never v)
            q, k = self.rope(q, k, start_pos)
        y, _ = self.attend(q, k, v, attn_mask, is_causal, start_pos, kv_cache)  # (B, T, C)
        return self.resid_dropout(y)
        ### END SOLUTION

    def project(self, x: np.ndarray, kv: np.ndarray | None = None):
        """q from x; k, v from x (self-attention) or from kv (cross-attention); split in heads."""
        self._inputs = (x, kv)
        if kv is None:
            ### BEGIN SOLUTION ch04
            ### TODO: one projection qkv_proj(x) (B, T, (H + 2 H_kv) d_k), cut after the
            ###   H d_k q features and the H_kv d_k k features (then v); split into heads below
            q, k, v = np.split(self.qkv_proj(x), self._qkv_cuts(), axis=-1)  # (B, T, H d_k), ...
            ### END SOLUTION
        else:
            ### BEGIN SOLUTION ch16
            ### TODO: the rows of qkv_proj.weight (and bias) hold W_q, W_k, W_v: q = linear(x, W_q,
            ###   b_q) (B, T, H d_k); k, v from linear(kv, W_kv, b_kv) (B, S, 2 H_kv d_k), halved
            Q = self._qkv_cuts()[0]  # H d_k rows of W_q
            W, b = self.qkv_proj.weight.data, self.qkv_proj.bias
            b_q, b_kv = (None, None) if b is None else (b.data[:Q], b.data[Q:])
            q = linear(x, W[:Q], b_q)  # (B, T, C) -> (B, T, H d_k)
            k, v = np.split(linear(kv, W[Q:], b_kv), 2, axis=-1)  # (B, S, 2 H_kv d_k) -> 2 x
            ### END SOLUTION
        H, H_kv = self.n_heads, self.n_kv_heads
        return split_heads(q, H), split_heads(k, H_kv), split_heads(v, H_kv)

    def _qkv_cuts(self) -> list[int]:
        """Where qkv_proj's output splits into q, k, v: after H d_k, then H_kv d_k features."""
        return [self.n_heads * self.d_k, (self.n_heads + self.n_kv_heads) * self.d_k]

    def attend(
        self,
        q,
        k,
        v,
        attn_mask=None,
        is_causal=False,
        start_pos=0,
        kv_cache=None,
        need_weights=False,
    ):
        """Attention over heads, heads joined, ``out_proj``: ``((B, T, C), weights or None)``.

        ``weights`` (with ``need_weights``) are the probabilities ``(B, H, T, S)``, a copy.
        """
        if kv_cache is not None:  # decoding (chapter 12): the cached keys and values join these
            k, v, attn_mask, is_causal = self.use_cache(k, v, start_pos, kv_cache)
        n_rep = self.n_heads // self.n_kv_heads  # query heads per K/V head
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H_kv, S, d_k) -> (B, H, S, d_k)
        p = self.dropout if self.training else 0.0
        if self.attn_impl == "flash" and not need_weights and p == 0.0:  # the same, by tiles
            y, self._cache = flash_attention(
                q, k, v, attn_mask, is_causal, tile_q=self.flash_tile, tile_k=self.flash_tile
            )  # (B, H, T, d_k)
            if kv_cache is not None:
                self._cache = None  # decoding is inference only: nothing to differentiate
            return self.out_proj(merge_heads(y)), None  # (B, T, C)
        ### BEGIN SOLUTION ch04
        ### TODO: scaled_dot_product_attention of q, k, v (attn_mask, is_causal, dropout_p=p,
        ###   rng=self._rng), keeping its cache in self._cache; merge the heads; out_proj
        y, self._cache = scaled_dot_product_attention(
            q, k, v, attn_mask, is_causal, dropout_p=p, rng=self._rng
        )  # (B, H, T, d_k)
        y = self.out_proj(merge_heads(y))  # (B, H, T, d_k) -> (B, T, C) -> (B, T, C)
        ### END SOLUTION
        weights = self._cache.probs.copy() if need_weights else None
        if kv_cache is not None:
            self._cache = None  # decoding is inference only: nothing to differentiate
        return y, weights

    def backward(self, dout: np.ndarray):
        dq, dk, dv = self.attend_backward(self.resid_dropout.backward(dout))
        if self.rope is not None:
            dq, dk = self.rope.backward(dq, dk)
        return self.project_backward(dq, dk, dv)

    def attend_backward(self, dy: np.ndarray):
        """dy ``(B, T, C)`` (the gradient of :meth:`attend`'s output) -> dq, dk, dv, in heads."""
        if self._cache is None:
            raise RuntimeError(
                "backward: no forward to differentiate (a forward with a kv_cache is "
                "inference-only, and each forward allows one backward)"
            )
        if not isinstance(self._cache, AttentionCache):  # the forward ran flash's tiles
            cache, self._cache = self._cache, None
            dy = split_heads(self.out_proj.backward(dy), self.n_heads)  # (B, H, T, d_k)
            return self.repeat_backward(*flash_attention_backward(dy, cache))
        ### BEGIN SOLUTION ch04
        ### TODO: out_proj's backward, split the gradient into heads, then the attention's
        ###   backward with self._cache (and forget the cache)
        dy = split_heads(self.out_proj.backward(dy), self.n_heads)  # (B, T, C) -> (B, H, T, d_k)
        dq, dk, dv = scaled_dot_product_attention_backward(dy, self._cache)
        self._cache = None
        return self.repeat_backward(dq, dk, dv)
        ### END SOLUTION

    def repeat_backward(self, dq, dk, dv):
        """dq, dk, dv over H heads -> dq, and dk, dv summed over each group: H_kv heads."""
        n_rep = self.n_heads // self.n_kv_heads
        return dq, repeat_kv_backward(dk, n_rep), repeat_kv_backward(dv, n_rep)

    def project_backward(self, dq: np.ndarray, dk: np.ndarray, dv: np.ndarray):
        """The inverse of :meth:`project`: dx, or ``(dx, dkv)`` for cross-attention."""
        x, kv = self._inputs
        self._inputs = None
        if kv is None:
            ### BEGIN SOLUTION ch04
            ### TODO: merge the heads of dq, dk, dv and put them side by side (q, k, v), the
            ###   layout qkv_proj produced, (B, T, (H + 2 H_kv) d_k); qkv_proj's backward gives dx
            dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)
            return self.qkv_proj.backward(dqkv)  # (B, T, (H + 2 H_kv) d_k) -> (B, T, C)
            ### END SOLUTION
        ### BEGIN SOLUTION ch16
        ### TODO: linear_backward for the q rows (input x) and for the k, v rows (input kv);
        ###   ADD the weight (and bias) gradients into the matching rows of qkv_proj's .grad
        Q = self._qkv_cuts()[0]  # H d_k rows of W_q
        W, b = self.qkv_proj.weight, self.qkv_proj.bias
        dkv_out = np.concatenate([merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, S, 2 H_kv d_k)
        b_q, b_kv = (None, None) if b is None else (b.data[:Q], b.data[Q:])
        dx, dW_q, db_q = linear_backward(merge_heads(dq), x, W.data[:Q], b_q)  # x: (B, T, C)
        dkv, dW_kv, db_kv = linear_backward(dkv_out, kv, W.data[Q:], b_kv)  # kv: (B, S, C)
        W.grad[:Q] += dW_q  # (H d_k, C)
        W.grad[Q:] += dW_kv  # (2 H_kv d_k, C)
        if b is not None:
            b.grad[:Q] += db_q
            b.grad[Q:] += db_kv
        return dx, dkv
        ### END SOLUTION

    # -- decoding with a KV cache (chapter 12) ---------------------------------------------
    def use_cache(self, k, v, start_pos: int, kv_cache):
        """Store this step's keys and values in ``kv_cache``; return all of them and the mask.

        Query ``start_pos + i`` sees keys ``0 .. start_pos + i``. With RoPE, k was rotated by
        its absolute positions before caching, so cached keys stay valid.
        """
        k, v = kv_cache.update(k, v, start_pos)  # (B, H_kv, start_pos + T, d_k), cached + new
        attn_mask, is_causal = cached_attn_mask(k.shape[-2] - start_pos, start_pos)
        return k, v, attn_mask, is_causal
