"""Scaled dot-product attention and causal multi-head self-attention.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V      (Vaswani et al. 2017, eq. 1)

The scores are written out explicitly as a ``(B, n_heads, T_q, T_k)`` array,
masked, and normalised with a softmax over the key axis (the last one): each
query gets a probability distribution over the keys it may see.
"""

from __future__ import annotations

import math

import numpy as np

from .dropout import Dropout
from .linear import Linear
from .module import Module, check_last_dim
from .rope import RotaryEmbedding


def _check_qkv(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> None:
    """q, k, v are 4-D with matching batch, heads, T_k and d_k (the torch twin's checks:
    a 3-D q, or k with another batch size, is a mistake, not something to broadcast)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(
                f"{name}: expected shape (B, n_heads, T, d_k) (4 dimensions), got {t.shape}"
            )
    B, H, _, d_k = q.shape
    T_k = k.shape[2]
    if k.shape != (B, H, T_k, d_k):
        raise ValueError(f"k: expected shape (B={B}, n_heads={H}, Tk, d_k={d_k}), got {k.shape}")
    if v.shape[:3] != (B, H, T_k):
        raise ValueError(f"v: expected shape (B={B}, n_heads={H}, Tk={T_k}, d_v), got {v.shape}")
    if not (q.dtype == k.dtype == v.dtype and np.issubdtype(q.dtype, np.floating)):
        # the torch twin's kernel refuses mixed or integer dtypes; NumPy would upcast silently
        raise TypeError(
            f"q, k, v: expected one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )


# -- masks ----------------------------------------------------------------------------------
# One convention throughout twinformer, F.scaled_dot_product_attention's: a boolean
# attn_mask is True where a query MAY attend to a key. docs/masks.md compares it
# with nn.MultiheadAttention's (True = masked) and the 0/1 keep-mask of many
# tutorials, and to_attn_mask converts both.

MASK_CONVENTIONS = ("attend", "masked", "keep")


def causal_attn_mask(T_q: int, T_k: int) -> np.ndarray:
    """Boolean ``(T_q, T_k)``, True where query i may attend to key j, i.e. j <= i.

    Top-left aligned, like ``F.scaled_dot_product_attention(is_causal=True)``:
    query 0 sees key 0 whatever T_k is, so no row is ever fully masked.
    """
    return np.tri(T_q, T_k, dtype=bool)


def key_padding_attn_mask(token_mask: np.ndarray) -> np.ndarray:
    """A batch's padding as an attention mask: ``(B, T_k)`` -> ``(B, 1, 1, T_k)``.

    Args:
        token_mask: bool ``(B, T_k)``, True for a real token, False for padding.

    Returns:
        bool ``(B, 1, 1, T_k)``, True = may attend; it broadcasts over heads and
        queries, so every query of sequence b ignores b's padding keys.

    Raises:
        TypeError: ``token_mask`` is not boolean.
        ValueError: ``token_mask`` is not 2-D.
    """
    token_mask = np.asarray(token_mask)
    check_token_mask(token_mask)
    return token_mask[:, None, None, :]


def check_token_mask(
    token_mask: np.ndarray, shape: tuple[int, int] | None = None, name: str = "token_mask"
) -> None:
    """Validate a ``(B, T)`` padding mask (True = real token); errors name it ``name``.

    Raises:
        TypeError: not boolean. ValueError: not 2-D, or not ``shape`` when given.
    """
    if token_mask.dtype != np.bool_:
        raise TypeError(
            f"{name}: expected dtype bool (True = real token, False = padding), "
            f"got {token_mask.dtype}"
        )
    if token_mask.ndim != 2 or (shape is not None and tuple(token_mask.shape) != tuple(shape)):
        want = "(B, T)" if shape is None else f"(B, T)={tuple(shape)}"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(token_mask.shape)}")


def to_attn_mask(mask: np.ndarray, convention: str) -> np.ndarray:
    """Convert a mask written in another convention to twinformer's (bool, True = attend).

    Args:
        mask: the mask, any shape.
        convention: what ``mask`` means.

            * ``"attend"``: bool, True = may attend (``F.scaled_dot_product_attention``);
              returned as is.
            * ``"masked"``: bool, True = may NOT attend (``nn.MultiheadAttention``'s
              ``attn_mask`` and ``key_padding_mask``); returns ``~mask``.
            * ``"keep"``: numbers, 1 = keep and 0 = masked, applied as
              ``scores.masked_fill(mask == 0, -1e9)`` (the Annotated Transformer,
              many tutorials); returns ``mask != 0``.

    Raises:
        ValueError: unknown ``convention``.
        TypeError: a non-bool mask for ``"attend"`` or ``"masked"`` (a 0/1 float
            mask there would be read as an additive mask, or inverted).
    """
    mask = np.asarray(mask)
    if convention not in MASK_CONVENTIONS:
        raise ValueError(f"convention: expected one of {MASK_CONVENTIONS}, got {convention!r}")
    if convention == "keep":
        return mask != 0
    if mask.dtype != np.bool_:
        raise TypeError(f"mask: the {convention!r} convention needs dtype bool, got {mask.dtype}")
    return mask if convention == "attend" else ~mask


def check_attn_mask(attn_mask: np.ndarray, target: tuple[int, ...]) -> None:
    """Validate ``attn_mask`` against the scores' shape ``target`` = ``(..., T_q, T_k)``.

    Raises:
        TypeError: neither bool nor floating.
        ValueError: not broadcastable to ``target``.
    """
    if attn_mask.dtype != np.bool_ and not np.issubdtype(attn_mask.dtype, np.floating):
        raise TypeError(
            f"attn_mask: expected dtype bool (True = attend) or a floating dtype "
            f"(added to the scores), got {attn_mask.dtype}"
        )
    try:
        ok = np.broadcast_shapes(attn_mask.shape, target) == tuple(target)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            f"attn_mask: expected a shape broadcastable to (B, n_heads, T_q, T_k)="
            f"{tuple(target)}, got {tuple(attn_mask.shape)}"
        )


def combine_attn_mask(
    attn_mask: np.ndarray | None, is_causal: bool, T_q: int, T_k: int
) -> np.ndarray | None:
    """``attn_mask`` and ``is_causal`` folded into ONE explicit mask (or None for neither).

    * bool ``attn_mask`` (True = attend) and causal: ``attn_mask & causal``;
    * float ``attn_mask`` (added to the scores) and causal: ``-inf`` where the
      causal mask forbids;
    * causal alone: :func:`causal_attn_mask` ``(T_q, T_k)``.

    The result broadcasts to ``(..., T_q, T_k)``. No validation: the callers
    validate ``attn_mask`` first (:func:`check_attn_mask`).
    """
    if not is_causal:
        return attn_mask
    causal = causal_attn_mask(T_q, T_k)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == np.bool_:
        return attn_mask & causal
    return np.where(causal, attn_mask, -np.inf).astype(attn_mask.dtype, copy=False)


def scaled_dot_product_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_mask: np.ndarray | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    rng: np.random.Generator | None = None,
) -> tuple[np.ndarray, tuple]:
    """softmax(q k^T * scale + mask) v, returning the output and a cache for backward.

    Args:
        q: ``(B, n_heads, T_q, d_k)`` queries.
        k: ``(B, n_heads, T_k, d_k)`` keys.
        v: ``(B, n_heads, T_k, d_v)`` values.
        attn_mask: broadcastable to ``(B, n_heads, T_q, T_k)``. Boolean: True = may
            attend (the ``F.scaled_dot_product_attention`` convention; see
            :func:`to_attn_mask` for the others). Float: added to the scores
            (``-inf`` forbids).
        is_causal: forbid keys j > i (top-left aligned). Together with
            ``attn_mask`` the two are folded into one explicit mask
            (:func:`combine_attn_mask`): a key is seen only if both allow it.
        scale: defaults to ``1 / sqrt(d_k)`` (Vaswani et al. 2017, sec. 3.2.1).
        dropout_p: dropout on the attention probabilities (training only).
        rng: generator for the dropout mask.

    Returns:
        out ``(..., T_q, d_v)``, and the cache ``(q * scale, k, v, out, probs, drop_scale, scale)``
        (it keeps a reference to ``out``: do not modify ``out`` in place before backward).

    A query whose keys are all masked gets probabilities of zero, hence an
    output of zeros and finite gradients, as the fused PyTorch kernel does
    (a plain softmax would give 0/0 = NaN).

    Raises:
        ValueError: q, k, v not 4-D or with mismatched shapes, ``attn_mask`` not
            broadcastable to ``(B, n_heads, T_q, T_k)``, ``dropout_p`` outside ``[0, 1)``.
        TypeError: ``attn_mask`` is neither bool nor float; q, k, v not of one float dtype.
    """
    _check_qkv(q, k, v)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p: must lie in [0, 1), got {dropout_p}")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if attn_mask is not None:
        attn_mask = np.asarray(attn_mask)
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2])
        check_attn_mask(attn_mask, (*lead, T_q, T_k))
    # one explicit mask: bool (True = attend), float (added), or None
    attn_mask = combine_attn_mask(attn_mask, is_causal, T_q, T_k)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    ### BEGIN SOLUTION ch03
    ### TODO: scores = q k^T * scale, shape (..., T_q, T_k); keep q * scale as q_scaled (the
    ###   cache returned below holds it)
    # (q * scale) k^T = q k^T / sqrt(d_k): scaling q touches T_q * d_k numbers, the scores T_q * T_k
    q_scaled = q * scale
    scores = q_scaled @ np.swapaxes(
        k, -1, -2
    )  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)
    ### END SOLUTION
    forbidden = None  # bool, True where a key is masked
    if attn_mask is not None and attn_mask.dtype == np.bool_:
        forbidden = ~attn_mask
    elif attn_mask is not None:
        scores += attn_mask
    ### BEGIN SOLUTION ch03
    ### TODO: scores -> probs: -inf where `forbidden` (if not None) is True, then a stable
    ###   softmax over the key axis (the last): subtract the row max, exp, divide by the row
    ###   sum; a fully masked row must give probabilities 0, not NaN
    if forbidden is not None:
        np.copyto(scores, -np.inf, where=forbidden)

    # numerically stable softmax over the key axis, written into `scores` in place
    row_max = scores.max(axis=-1, keepdims=True)
    row_max[~np.isfinite(row_max)] = 0.0  # fully masked row: avoid -inf - (-inf)
    scores -= row_max
    np.exp(scores, out=scores)
    denom = scores.sum(axis=-1, keepdims=True)
    denom[denom == 0.0] = 1.0  # fully masked row: probabilities stay 0, not NaN
    scores /= denom
    probs = scores  # (..., T_q, T_k), rows sum to 1 (or 0 if fully masked)
    ### END SOLUTION

    drop_scale = None
    if dropout_p > 0.0:
        rng = np.random.default_rng() if rng is None else rng
        drop_scale = (rng.random(probs.shape) >= dropout_p).astype(probs.dtype)
        drop_scale /= 1.0 - dropout_p
        out = (probs * drop_scale) @ v
    else:
        out = probs @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out, (q_scaled, k, v, out, probs, drop_scale, scale)


def scaled_dot_product_attention_backward(
    dout: np.ndarray, cache: tuple
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gradients of :func:`scaled_dot_product_attention`.

    With S = q k^T * scale, P = softmax(S) (rows), out = P v:
        dv = P^T dout
        dP = dout v^T
        dS = P * (dP - D),  D_i = sum_j dP_ij P_ij       (softmax Jacobian-vector product)
        dq = dS k * scale,   dk = dS^T q * scale

    D_i is computed as ``sum(dout_i * out_i)``: since out_i = sum_j P_ij v_j,
    sum_j P_ij (dout_i . v_j) = dout_i . out_i. That sums over d_v instead of
    over T_k, a (T_q, d_v) product instead of a (T_q, T_k) one (the same trick
    as the FlashAttention backward, Dao et al. 2022, Algorithm 4). It also holds
    with dropout, where out_i = sum_j P_ij M_ij v_j and dP carries the mask M.

    Args:
        dout: ``(..., T_q, d_v)``.
        cache: the second return value of the forward.

    Returns:
        dq ``(..., T_q, d_k)``, dk ``(..., T_k, d_k)``, dv ``(..., T_k, d_v)``.
    """
    ### BEGIN SOLUTION ch03
    ### TODO: unpack the cache and return dq, dk, dv by the formulas above; with dropout
    ###   (drop_scale not None) the output used P * drop_scale, so dv and dP carry the mask
    q_scaled, k, v, out, probs, drop_scale, scale = cache
    p_used = probs if drop_scale is None else probs * drop_scale
    dv = np.swapaxes(p_used, -1, -2) @ dout  # (..., T_k, T_q) @ (..., T_q, d_v)
    dP = dout @ np.swapaxes(v, -1, -2)  # (..., T_q, d_v) @ (..., d_v, T_k)
    if drop_scale is not None:
        dP *= drop_scale
    D = np.sum(dout * out, axis=-1, keepdims=True)  # (..., T_q, 1) = rowsum(dP * P)
    dP -= D  # softmax backward, in place: dS = P * (dP - D)
    dP *= probs
    dS = dP
    dq = dS @ k  # (..., T_q, T_k) @ (..., T_k, d_k)
    dq *= scale
    dk = np.swapaxes(dS, -1, -2) @ q_scaled  # (..., T_k, T_q) @ (..., T_q, d_k), scale included
    return dq, dk, dv
    ### END SOLUTION


class CausalSelfAttention(Module):
    """Causal multi-head self-attention with one combined QKV projection.

    For each head h: head_h = Attention(x W_q^h, x W_k^h, x W_v^h), then
    out = concat(head_1 .. head_H) W_o   (Vaswani et al. 2017, sec. 3.2.2).
    The three projections live in one ``qkv_proj`` weight ``(3 d_model, d_model)``
    whose output splits in the order q, k, v, as in nanoGPT.

    Args:
        d_model: model width C; ``d_k = d_model // n_heads``.
        n_heads: number of heads.
        bias: biases in both projections.
        dropout: dropout on the attention probabilities and on the output.
        rope: ``None`` (no positions here: the GPT adds learned ones to the
            embeddings), or a RoPE layout, ``"interleaved"`` or ``"half"``: q and
            k are rotated by their positions (Su et al. 2021; ``numpy_impl/rope.py``).
        rope_base: RoPE's frequency base.

    Shapes:
        forward: x ``(B, T, C)``, start_pos (int, default 0: the position of x's
        first token, for RoPE) -> ``(B, T, C)``; scores ``(B, n_heads, T, T)``.
        backward: dout ``(B, T, C)`` -> dx ``(B, T, C)``.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``; an odd ``d_k`` with
            RoPE; x of the wrong shape.
    """

    def __init__(
        self,
        d_model,
        n_heads,
        bias=True,
        dropout=0.0,
        dtype=np.float32,
        rng=None,
        rope=None,
        rope_base=10000.0,
    ):
        if d_model < 1 or n_heads < 1:
            raise ValueError(
                f"d_model and n_heads must be positive, got d_model={d_model}, n_heads={n_heads}"
            )
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias, dtype=dtype, rng=rng)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.resid_dropout = Dropout(dropout)
        self.rope = None if rope is None else RotaryEmbedding(self.d_k, rope, rope_base)
        self._rng = np.random.default_rng()
        self._cache = None

    def forward(self, x: np.ndarray, start_pos: int = 0, kv_cache=None) -> np.ndarray:
        if x.ndim != 3 or x.shape[1] < 1:
            raise ValueError(f"x: expected shape (B, T>=1, d_model={self.d_model}), got {x.shape}")
        check_last_dim(x, self.d_model, "x", "d_model")
        if kv_cache is not None:
            return self._forward_cached(x, kv_cache, start_pos)
        ### BEGIN SOLUTION ch04
        ### TODO: qkv_proj(x) (B, T, 3C) -> q, k, v, each (B, H, T, d_k), split in that order;
        ###   with RoPE (chapter 13) rotate q and k: q, k = self.rope(q, k, start_pos);
        ###   causal scaled_dot_product_attention (dropout_p = self.dropout in training, else 0;
        ###   rng=self._rng; its cache in self._cache); merge the heads back to (B, T, C);
        ###   then out_proj and resid_dropout
        B, T, C = x.shape
        H, d_k = self.n_heads, self.d_k
        qkv = self.qkv_proj(x)  # (B, T, C) -> (B, T, 3C)
        # (B, T, 3C) -> (B, T, 3, H, d_k) -> (3, B, H, T, d_k): one view, no copy
        q, k, v = qkv.reshape(B, T, 3, H, d_k).transpose(2, 0, 3, 1, 4)
        if self.rope is not None:  # positions enter here, by rotating q and k (not v)
            q, k = self.rope(q, k, start_pos)
        p = self.dropout if self.training else 0.0
        y, self._cache = scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=p, rng=self._rng
        )  # (B, H, T, d_k)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # re-assemble heads: (B, T, C)
        return self.resid_dropout(self.out_proj(y))
        ### END SOLUTION

    def _forward_cached(self, x: np.ndarray, kv_cache, start_pos: int) -> np.ndarray:
        """Inference with a :class:`~numpy_impl.kv_cache.LayerKVCache` (chapter 12).

        x ``(B, T, C)`` holds the tokens at positions ``start_pos .. start_pos + T - 1``;
        the cache holds keys and values of positions ``0 .. start_pos - 1`` and gains
        these. Query ``start_pos + i`` may attend to keys ``0 .. start_pos + i`` (the
        causal mask, bottom-right aligned). With RoPE, q and k are rotated by their
        absolute positions before ``kv_cache.update``, so cached keys stay rotated. No backward.
        """
        B, T, C = x.shape
        H, d_k = self.n_heads, self.d_k
        qkv = self.qkv_proj(x)  # (B, T, 3C): only the new positions
        q, k, v = qkv.reshape(B, T, 3, H, d_k).transpose(2, 0, 3, 1, 4)  # 3 x (B, H, T, d_k)
        if self.rope is not None:  # rotate by the absolute positions, before caching k
            q, k = self.rope(q, k, start_pos)
        k, v = kv_cache.update(k, v, start_pos)  # (B, H, start_pos + T, d_k), cached + new
        # one new query sees every cached key; a prefill (start_pos 0) is plain causal;
        # otherwise query start_pos + i sees keys 0 .. start_pos + i
        allowed, is_causal = None, T > 1 and start_pos == 0
        if T > 1 and start_pos > 0:
            allowed = np.arange(start_pos + T)[None, :] <= start_pos + np.arange(T)[:, None]
        p = self.dropout if self.training else 0.0
        y, _ = scaled_dot_product_attention(q, k, v, allowed, is_causal, dropout_p=p, rng=self._rng)
        self._cache = None  # nothing to differentiate: backward raises
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # (B, H, T, d_k) -> (B, T, C)
        return self.resid_dropout(self.out_proj(y))

    def backward(self, dout: np.ndarray) -> np.ndarray:
        if self._cache is None:
            raise RuntimeError(
                "backward: no forward to differentiate (a forward with a kv_cache is "
                "inference-only, and each forward allows one backward)"
            )
        ### BEGIN SOLUTION ch04
        ### TODO: the forward in reverse: resid_dropout and out_proj backward, split dy into heads
        ###   (B, H, T, d_k), scaled_dot_product_attention_backward(dy, self._cache) (with RoPE,
        ###   then dq, dk = self.rope.backward(dq, dk)), then put dq, dk, dv back into one
        ###   (B, T, 3C) gradient, in the forward's layout, for qkv_proj
        B, T, C = dout.shape
        H, d_k = self.n_heads, self.d_k
        dy = self.out_proj.backward(self.resid_dropout.backward(dout))  # (B, T, C)
        dy = dy.reshape(B, T, H, d_k).transpose(0, 2, 1, 3)  # (B, H, T, d_k)
        dq, dk, dv = scaled_dot_product_attention_backward(dy, self._cache)
        self._cache = None
        if self.rope is not None:
            dq, dk = self.rope.backward(dq, dk)
        dqkv = np.empty((B, T, 3, H, d_k), dtype=dout.dtype)
        dqkv[:, :, 0] = dq.transpose(0, 2, 1, 3)  # the inverse of the forward's split
        dqkv[:, :, 1] = dk.transpose(0, 2, 1, 3)
        dqkv[:, :, 2] = dv.transpose(0, 2, 1, 3)
        return self.qkv_proj.backward(dqkv.reshape(B, T, 3 * C))
        ### END SOLUTION


class MultiHeadAttention(Module):
    """Multi-head attention with separate query, key and value projections.

    ``MultiHead(Q, K, V) = concat(head_1 .. head_H) W_o``, ``head_h = Attention(Q W_q^h,
    K W_k^h, V W_v^h)`` (Vaswani et al. 2017, sec. 3.2.2), written as seed 004
    writes it: three projections ``q_proj``, ``k_proj``, ``v_proj``, and the
    attention weights returned next to the output. Queries and keys/values may
    come from different sequences (cross-attention). No mask unless given.

    The same function as :class:`CausalSelfAttention` (with ``is_causal=True``
    and ``query = key = value``): :func:`merge_qkv_state_dict` and
    :func:`split_qkv_state_dict` move the weights between the two layouts.

    Args:
        d_model: width C of queries, keys, values and output.
        n_heads: heads; must divide ``d_model``.
        bias: biases in the four projections.
        dropout: dropout on the attention probabilities (as ``nn.MultiheadAttention``;
            no dropout on the output).

    Shapes:
        forward: query ``(B, T_q, C)``, key ``(B, T_k, C)``, value ``(B, T_k, C)``;
        ``attn_mask`` bool (True = may attend, the ``F.scaled_dot_product_attention``
        convention) or float (added to the scores), broadcastable to
        ``(B, n_heads, T_q, T_k)``; returns ``(out, weights)``: out ``(B, T_q, C)``;
        weights ``(B, n_heads, T_q, T_k)``, or ``(B, T_q, T_k)`` averaged over the
        heads with ``average_attn_weights``, or None without ``need_weights``.
        The weights are the softmax probabilities before dropout.
        backward: dout ``(B, T_q, C)`` -> ``(dquery, dkey, dvalue)``. The weights
        are an output for inspection only: no gradient flows back through them.
        For self-attention (one x passed three times), dx = dquery + dkey + dvalue.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``; inputs that are not
            ``(B, T, d_model)`` with T >= 1 and matching B (and T_k); the mask
            errors of :func:`scaled_dot_product_attention`.
        TypeError: a mask neither bool nor float.
    """

    def __init__(self, d_model, n_heads, bias=True, dropout=0.0, dtype=np.float32, rng=None):
        if d_model < 1 or n_heads < 1:
            raise ValueError(
                f"d_model and n_heads must be positive, got d_model={d_model}, n_heads={n_heads}"
            )
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: must lie in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.k_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.v_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self._rng = np.random.default_rng()
        self._cache = None

    def _check(self, query, key, value) -> None:
        for name, a in (("query", query), ("key", key), ("value", value)):
            if a.ndim != 3 or a.shape[1] < 1 or a.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name}: expected shape (B, T>=1, d_model={self.d_model}), got {a.shape}"
                )
        if key.shape[0] != query.shape[0] or value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"key, value: expected shapes (B={query.shape[0]}, T_k, d_model) with the same "
                f"T_k, got {key.shape} and {value.shape}"
            )

    def forward(
        self,
        query: np.ndarray,
        key: np.ndarray,
        value: np.ndarray,
        attn_mask: np.ndarray | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        average_attn_weights: bool = False,
    ) -> tuple[np.ndarray, np.ndarray | None]:
        self._check(query, key, value)
        B, T_q, C = query.shape
        T_k, H, d_k = key.shape[1], self.n_heads, self.d_k
        # (B, T, C) -> (B, T, H, d_k) -> (B, H, T, d_k): each head gets its slice of the features
        q = self.q_proj(query).reshape(B, T_q, H, d_k).transpose(0, 2, 1, 3)
        k = self.k_proj(key).reshape(B, T_k, H, d_k).transpose(0, 2, 1, 3)
        v = self.v_proj(value).reshape(B, T_k, H, d_k).transpose(0, 2, 1, 3)
        p = self.dropout if self.training else 0.0
        y, self._cache = scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal, dropout_p=p, rng=self._rng
        )  # (B, H, T_q, d_k)
        y = y.transpose(0, 2, 1, 3).reshape(B, T_q, C)  # re-join the heads
        weights = None
        if need_weights:
            probs = self._cache[4]  # (B, H, T_q, T_k); a copy below: backward still needs it
            weights = probs.mean(axis=1) if average_attn_weights else probs.copy()
        return self.out_proj(y), weights

    def backward(self, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        B, T_q, C = dout.shape
        H, d_k = self.n_heads, self.d_k
        dy = self.out_proj.backward(dout).reshape(B, T_q, H, d_k).transpose(0, 2, 1, 3)
        dq, dk, dv = scaled_dot_product_attention_backward(dy, self._cache)
        self._cache = None

        def merge(d):  # (B, H, T, d_k) -> (B, T, C), the inverse of the forward's split
            return d.transpose(0, 2, 1, 3).reshape(d.shape[0], d.shape[2], C)

        return (
            self.q_proj.backward(merge(dq)),
            self.k_proj.backward(merge(dk)),
            self.v_proj.backward(merge(dv)),
        )


def split_qkv_state_dict(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A :class:`CausalSelfAttention` state dict -> the :class:`MultiHeadAttention` one.

    ``qkv_proj.weight (3C, C)`` is three stacked ``(C, C)`` blocks, q then k then v
    (and likewise its bias): they become ``q_proj``, ``k_proj``, ``v_proj``.
    ``out_proj`` and any other key are passed through. Arrays are copies.

    Raises:
        ValueError: ``qkv_proj.weight`` missing or its first axis not divisible by 3.
    """
    w = state_dict.get("qkv_proj.weight")
    if w is None or w.ndim != 2 or w.shape[0] % 3:
        raise ValueError(
            "state_dict: expected 'qkv_proj.weight' of shape (3 d_model, d_model), got "
            f"{None if w is None else w.shape}"
        )
    out = {}
    for key, value in state_dict.items():
        if key.startswith("qkv_proj."):
            kind = key.removeprefix("qkv_proj.")  # weight or bias
            for name, part in zip(("q", "k", "v"), np.split(value, 3, axis=0), strict=True):
                out[f"{name}_proj.{kind}"] = part.copy()
        else:
            out[key] = np.array(value, copy=True)
    return out


def merge_qkv_state_dict(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A :class:`MultiHeadAttention` state dict -> the :class:`CausalSelfAttention` one.

    The inverse of :func:`split_qkv_state_dict`: ``q_proj``, ``k_proj``, ``v_proj``
    rows stacked into ``qkv_proj`` in the order q, k, v (which is also the layout
    of ``nn.MultiheadAttention.in_proj_weight``). Other keys pass through.

    Raises:
        ValueError: some of the q/k/v projections present and others missing.
    """
    out = {}
    for kind in ("weight", "bias"):
        parts = [state_dict.get(f"{n}_proj.{kind}") for n in ("q", "k", "v")]
        if all(p is None for p in parts):
            continue
        if any(p is None for p in parts):
            raise ValueError(f"state_dict: q_proj, k_proj and v_proj must all have a {kind}")
        out[f"qkv_proj.{kind}"] = np.concatenate(parts, axis=0)
    if "qkv_proj.weight" not in out:
        raise ValueError("state_dict: expected 'q_proj.weight', 'k_proj.weight', 'v_proj.weight'")
    for key, value in state_dict.items():
        if key.split(".")[0] not in ("q_proj", "k_proj", "v_proj"):
            out[key] = np.array(value, copy=True)
    return out
