"""Attention masks: one convention, the causal mask, padding, and decoding with a cache.

One convention throughout twinformer, ``F.scaled_dot_product_attention``'s: a
boolean ``attn_mask`` is True where a query MAY attend to a key; a floating
``attn_mask`` is added to the scores (``-inf`` forbids). ``docs/masks.md``
compares it with ``nn.MultiheadAttention``'s (True = masked) and with the 0/1
keep-mask of many tutorials; :func:`to_attn_mask` converts both.

Twin of ``torch_impl/masks.py``.
"""

from __future__ import annotations

import functools

import numpy as np

MASK_CONVENTIONS = ("attend", "masked", "keep")


def causal_attn_mask(T_q: int, T_k: int) -> np.ndarray:
    """Boolean ``(T_q, T_k)``, True where query i may attend to key j, i.e. j <= i.

    Top-left aligned, like ``F.scaled_dot_product_attention(is_causal=True)``:
    query 0 sees key 0 whatever T_k is, so no row is ever fully masked.
    """
    return np.tri(T_q, T_k, dtype=bool)  # (T_q, T_k): ones on and below the diagonal


#: causal masks of at most this many entries (1 MiB of bools: T = 1024) are kept for reuse
SHARED_MASK_MAX_ENTRIES = 1 << 20


def _causal_attn_mask_shared(T_q: int, T_k: int) -> np.ndarray:
    """:func:`causal_attn_mask`, read-only; made once per shape up to
    :data:`SHARED_MASK_MAX_ENTRIES` entries (every attention layer's forward asks for the
    same one, and ``np.tri`` costs microseconds holding the GIL that ``DataParallel``'s
    other shard is waiting for), afresh beyond that (a kept mask of a long context would
    hold its T_q T_k bytes for the life of the process)."""
    if T_q * T_k <= SHARED_MASK_MAX_ENTRIES:
        return _causal_attn_mask_kept(T_q, T_k)
    return _causal_attn_mask_kept.__wrapped__(T_q, T_k)  # the same, not kept


@functools.lru_cache(maxsize=8)
def _causal_attn_mask_kept(T_q: int, T_k: int) -> np.ndarray:
    mask = causal_attn_mask(T_q, T_k)
    mask.setflags(write=False)
    return mask


def cached_attn_mask(T_new: int, start_pos: int) -> tuple[np.ndarray | None, bool]:
    """The causal mask of a decoding step: ``T_new`` queries after ``start_pos`` cached keys.

    Query ``start_pos + i`` may attend to keys ``0 .. start_pos + i``: the causal
    mask aligned to the bottom-right of the ``(T_new, start_pos + T_new)`` scores.
    Returned as ``(attn_mask, is_causal)`` for :func:`scaled_dot_product_attention`:

    * one new query (the usual decoding step) sees every key: ``(None, False)``;
    * a prefill (``start_pos == 0``) is the plain causal mask: ``(None, True)``;
    * otherwise the explicit bool mask: ``(mask (T_new, start_pos + T_new), False)``.
    """
    if T_new == 1:
        return None, False
    if start_pos == 0:
        return None, True
    keys = np.arange(start_pos + T_new)  # (S,) absolute positions of the keys
    queries = start_pos + np.arange(T_new)  # (T_new,) absolute positions of the queries
    return keys[None, :] <= queries[:, None], False  # (T_new, S)


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
    return token_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k)


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


def check_attn_mask(attn_mask: np.ndarray, target: tuple[int, ...], dtype=None) -> None:
    """Validate ``attn_mask`` against the scores' shape ``target`` = ``(..., T_q, T_k)``.

    Args:
        attn_mask: the mask.
        target: the shape of the scores it must broadcast to.
        dtype: the scores' dtype; a floating mask must have it (an additive
            mask of another precision is a mistake, and PyTorch refuses it too).

    Raises:
        TypeError: neither bool nor floating; a floating mask of another dtype.
        ValueError: not broadcastable to ``target``.
    """
    if attn_mask.dtype != np.bool_ and not np.issubdtype(attn_mask.dtype, np.floating):
        raise TypeError(
            f"attn_mask: expected dtype bool (True = attend) or a floating dtype "
            f"(added to the scores), got {attn_mask.dtype}"
        )
    if dtype is not None and attn_mask.dtype != np.bool_ and attn_mask.dtype != dtype:
        raise TypeError(
            f"attn_mask: a floating mask must have the dtype of q ({np.dtype(dtype)}), "
            f"got {attn_mask.dtype}"
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


def check_is_causal(is_causal) -> bool:
    """``is_causal`` as a Python bool: True, False or a NumPy bool; anything else (1, "no",
    None) is a mistake, not a truth value.

    Raises:
        TypeError: ``is_causal`` is not a bool.
    """
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError(f"is_causal: expected a bool, got {is_causal!r}")
    return bool(is_causal)


def combine_attn_mask(
    attn_mask: np.ndarray | None, is_causal: bool, T_q: int, T_k: int
) -> np.ndarray | None:
    """``attn_mask`` and ``is_causal`` folded into ONE explicit mask (or None for neither).

    * bool ``attn_mask`` (True = attend) and causal: ``attn_mask & causal``;
    * float ``attn_mask`` (added to the scores) and causal: ``-inf`` where the
      causal mask forbids;
    * causal alone: :func:`causal_attn_mask` ``(T_q, T_k)``.

    The result broadcasts to ``(..., T_q, T_k)``; read-only where it is the causal
    mask alone (one array per shape, shared). No validation: the callers validate
    ``attn_mask`` first (:func:`check_attn_mask`).
    """
    if not is_causal:
        return attn_mask
    causal = _causal_attn_mask_shared(T_q, T_k)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == np.bool_:
        return attn_mask & causal
    return np.where(causal, attn_mask, -np.inf).astype(attn_mask.dtype, copy=False)
