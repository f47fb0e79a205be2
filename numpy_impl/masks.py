"""Attention masks in one convention, ``F.scaled_dot_product_attention``'s. Twin of torch_impl.

Bool ``attn_mask``: True where a query MAY attend to a key; float: added to the scores (``-inf``
forbids). ``docs/masks.md`` compares other conventions; :func:`to_attn_mask` converts them.
"""

from __future__ import annotations

import functools

import numpy as np

MASK_CONVENTIONS = ("attend", "masked", "keep")


def causal_attn_mask(T_q: int, T_k: int) -> np.ndarray:
    """Bool ``(T_q, T_k)``, True where key j <= query i; top-left aligned as ``is_causal=True``."""
    return np.tri(T_q, T_k, dtype=bool)  # (T_q, T_k): ones on and below the diagonal


SHARED_MASK_MAX_ENTRIES = 1 << 20  # causal masks up to 1 MiB of bools (T = 1024) are kept


def _causal_attn_mask_shared(T_q: int, T_k: int) -> np.ndarray:
    """:func:`causal_attn_mask`, read-only; made once per shape up to
    :data:`SHARED_MASK_MAX_ENTRIES` entries, since every attention layer asks for the same one."""
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

    Query ``start_pos + i`` sees keys ``0 .. start_pos + i``. Returns ``(attn_mask, is_causal)``:
    one query: ``(None, False)``; a prefill (``start_pos == 0``): ``(None, True)``; otherwise
    bool ``(T_new, start_pos + T_new)``, the causal mask aligned bottom-right, and False.
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

    Raises TypeError: not boolean; ValueError: not 2-D, or not ``shape`` when given."""
    if token_mask.dtype != np.bool_:
        raise TypeError(
            f"{name}: expected dtype bool (True = real token, False = padding), "
            f"got {token_mask.dtype}"
        )
    if token_mask.ndim != 2 or (shape is not None and tuple(token_mask.shape) != tuple(shape)):
        want = "(B, T)" if shape is None else f"(B, T)={tuple(shape)}"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(token_mask.shape)}")


def key_padding_attn_mask(token_mask: np.ndarray) -> np.ndarray:
    """Padding as an attention mask: bool ``(B, T_k)``, True = real token -> ``(B, 1, 1, T_k)``.

    It broadcasts over heads and queries. Raises as :func:`check_token_mask`.
    """
    token_mask = np.asarray(token_mask)
    check_token_mask(token_mask)
    return token_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k)


def to_attn_mask(mask: np.ndarray, convention: str) -> np.ndarray:
    """Convert a mask (any shape) from ``convention`` to twinformer's (bool, True = attend).

    ``"attend"``: bool, True = may attend (SDPA); returned as is. ``"masked"``: bool, True = may
    NOT attend (``nn.MultiheadAttention``); returns ``~mask``. ``"keep"``: 1 = keep, 0 = masked
    (the Annotated Transformer's ``masked_fill(mask == 0, -1e9)``); returns ``mask != 0``.
    Raises ValueError: unknown ``convention``; TypeError: a non-bool ``"attend"``/``"masked"`` mask.
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

    Raises TypeError: neither bool nor floating, or floating of a dtype other than ``dtype``
    (PyTorch refuses it too); ValueError: not broadcastable to ``target``.
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
    """``is_causal`` as a Python bool. Raises TypeError: not a bool (1, "no", None are mistakes)."""
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError(f"is_causal: expected a bool, got {is_causal!r}")
    return bool(is_causal)


def combine_attn_mask(
    attn_mask: np.ndarray | None, is_causal: bool, T_q: int, T_k: int
) -> np.ndarray | None:
    """``attn_mask`` and ``is_causal`` folded into ONE mask broadcasting to ``(..., T_q, T_k)``.

    Bool mask and causal: ``attn_mask & causal``; float mask and causal: ``-inf`` where causal
    forbids; causal alone: the shared, read-only :func:`causal_attn_mask`; neither: None.
    No validation: callers run :func:`check_attn_mask` first.
    """
    if not is_causal:
        return attn_mask
    causal = _causal_attn_mask_shared(T_q, T_k)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == np.bool_:
        return attn_mask & causal
    return np.where(causal, attn_mask, -np.inf).astype(attn_mask.dtype, copy=False)
