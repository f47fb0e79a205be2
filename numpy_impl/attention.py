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


def _causal_mask(T_q: int, T_k: int) -> np.ndarray:
    """Boolean ``(T_q, T_k)``, True where key j lies in query i's future (j > i).

    Top-left aligned, like ``F.scaled_dot_product_attention(is_causal=True)``.
    """
    return np.triu(np.ones((T_q, T_k), dtype=bool), k=1)


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
        q: ``(..., T_q, d_k)`` queries, usually ``(B, n_heads, T_q, d_k)``.
        k: ``(..., T_k, d_k)`` keys.
        v: ``(..., T_k, d_v)`` values.
        attn_mask: broadcastable to ``(..., T_q, T_k)``. Boolean: True = may
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
        ValueError: mismatched shapes, ``attn_mask`` not broadcastable to
            ``(..., T_q, T_k)``, ``dropout_p`` outside ``[0, 1)``.
        TypeError: ``attn_mask`` is neither bool nor float.
    """
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"q, k, v: expected q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v); "
            f"got {q.shape}, {k.shape}, {v.shape}"
        )
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

    Shapes:
        forward: x ``(B, T, C)`` -> ``(B, T, C)``; scores ``(B, n_heads, T, T)``.
        backward: dout ``(B, T, C)`` -> dx ``(B, T, C)``.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``; x of the wrong shape.
    """

    def __init__(self, d_model, n_heads, bias=True, dropout=0.0, dtype=np.float32, rng=None):
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias, dtype=dtype, rng=rng)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.resid_dropout = Dropout(dropout)
        self._rng = np.random.default_rng()
        self._cache = None

    def forward(self, x: np.ndarray) -> np.ndarray:
        if x.ndim != 3 or x.shape[1] < 1:
            raise ValueError(f"x: expected shape (B, T>=1, d_model={self.d_model}), got {x.shape}")
        check_last_dim(x, self.d_model, "x", "d_model")
        ### BEGIN SOLUTION ch04
        ### TODO: qkv_proj(x) (B, T, 3C) -> q, k, v, each (B, H, T, d_k), split in that order;
        ###   causal scaled_dot_product_attention (dropout_p = self.dropout in training, else 0;
        ###   rng=self._rng; its cache in self._cache); merge the heads back to (B, T, C);
        ###   then out_proj and resid_dropout
        B, T, C = x.shape
        H, d_k = self.n_heads, self.d_k
        qkv = self.qkv_proj(x)  # (B, T, C) -> (B, T, 3C)
        # (B, T, 3C) -> (B, T, 3, H, d_k) -> (3, B, H, T, d_k): one view, no copy
        q, k, v = qkv.reshape(B, T, 3, H, d_k).transpose(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        y, self._cache = scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=p, rng=self._rng
        )  # (B, H, T, d_k)
        y = y.transpose(0, 2, 1, 3).reshape(B, T, C)  # re-assemble heads: (B, T, C)
        return self.resid_dropout(self.out_proj(y))
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch04
        ### TODO: the forward in reverse: resid_dropout and out_proj backward, split dy into heads
        ###   (B, H, T, d_k), scaled_dot_product_attention_backward(dy, self._cache), then put
        ###   dq, dk, dv back into one (B, T, 3C) gradient, in the forward's layout, for qkv_proj
        B, T, C = dout.shape
        H, d_k = self.n_heads, self.d_k
        dy = self.out_proj.backward(self.resid_dropout.backward(dout))  # (B, T, C)
        dy = dy.reshape(B, T, H, d_k).transpose(0, 2, 1, 3)  # (B, H, T, d_k)
        dq, dk, dv = scaled_dot_product_attention_backward(dy, self._cache)
        self._cache = None
        dqkv = np.empty((B, T, 3, H, d_k), dtype=dout.dtype)
        dqkv[:, :, 0] = dq.transpose(0, 2, 1, 3)  # the inverse of the forward's split
        dqkv[:, :, 1] = dk.transpose(0, 2, 1, 3)
        dqkv[:, :, 2] = dv.transpose(0, 2, 1, 3)
        return self.qkv_proj.backward(dqkv.reshape(B, T, 3 * C))
        ### END SOLUTION
