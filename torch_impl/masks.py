"""Attention masks: one convention, the causal mask, padding, and decoding with a cache.

Twin of ``numpy_impl/masks.py``. A boolean ``attn_mask`` is True where a query
MAY attend to a key (``F.scaled_dot_product_attention``'s convention); a
floating ``attn_mask`` is added to the scores. ``docs/masks.md`` compares the
conventions in circulation; :func:`to_attn_mask` converts them.
"""

from __future__ import annotations

import numpy as np
import torch

MASK_CONVENTIONS = ("attend", "masked", "keep")


def causal_attn_mask(T_q: int, T_k: int, *, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``(T_q, T_k)``, True where query i may attend to key j, i.e. j <= i.

    Top-left aligned, like ``F.scaled_dot_product_attention(is_causal=True)``.
    """
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()


def cached_attn_mask(
    T_new: int, start_pos: int, *, device: torch.device | None = None
) -> tuple[torch.Tensor | None, bool]:
    """The causal mask of a decoding step: ``T_new`` queries after ``start_pos`` cached keys.

    Query ``start_pos + i`` may attend to keys ``0 .. start_pos + i``. Returned as
    ``(attn_mask, is_causal)``: ``(None, False)`` for one new query, ``(None, True)``
    for a prefill (``start_pos == 0``: the fused flash kernel takes no mask), else
    the explicit bool mask ``(T_new, start_pos + T_new)``.
    """
    if T_new == 1:
        return None, False
    if start_pos == 0:
        return None, True
    keys = torch.arange(start_pos + T_new, device=device)  # (S,)
    queries = start_pos + torch.arange(T_new, device=device)  # (T_new,)
    return keys[None, :] <= queries[:, None], False  # (T_new, S)


def check_token_mask(
    token_mask: torch.Tensor, shape: tuple[int, int] | None = None, name: str = "token_mask"
) -> None:
    """Validate a ``(B, T)`` padding mask (True = real token); errors name it ``name``.

    Raises:
        TypeError: not boolean. ValueError: not 2-D, or not ``shape`` when given.
    """
    if not isinstance(token_mask, torch.Tensor) or token_mask.dtype != torch.bool:
        got = token_mask.dtype if isinstance(token_mask, torch.Tensor) else type(token_mask)
        raise TypeError(
            f"{name}: expected dtype bool (True = real token, False = padding), got {got}"
        )
    if token_mask.dim() != 2 or (shape is not None and tuple(token_mask.shape) != tuple(shape)):
        want = "(B, T)" if shape is None else f"(B, T)={tuple(shape)}"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(token_mask.shape)}")


def key_padding_attn_mask(token_mask: torch.Tensor) -> torch.Tensor:
    """A batch's padding as an attention mask: ``(B, T_k)`` -> ``(B, 1, 1, T_k)``.

    Args:
        token_mask: bool ``(B, T_k)``, True for a real token, False for padding
            (the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``).

    Raises:
        TypeError: ``token_mask`` is not boolean.
        ValueError: ``token_mask`` is not 2-D.
    """
    check_token_mask(token_mask)
    return token_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k)


def to_attn_mask(mask: torch.Tensor, convention: str) -> torch.Tensor:
    """Convert a mask written in another convention to twinformer's (bool, True = attend).

    ``convention``: ``"attend"`` (bool, True = may attend; returned as is),
    ``"masked"`` (bool, True = may NOT attend, ``nn.MultiheadAttention``'s;
    returns ``~mask``) or ``"keep"`` (numbers, 0 = masked; returns ``mask != 0``).

    Raises:
        ValueError: unknown ``convention``.
        TypeError: a non-bool mask for ``"attend"`` or ``"masked"``.
    """
    if convention not in MASK_CONVENTIONS:
        raise ValueError(f"convention: expected one of {MASK_CONVENTIONS}, got {convention!r}")
    if convention == "keep":
        return mask != 0
    if mask.dtype != torch.bool:
        raise TypeError(f"mask: the {convention!r} convention needs dtype bool, got {mask.dtype}")
    return mask if convention == "attend" else ~mask


def check_attn_mask(attn_mask: torch.Tensor, target: tuple[int, ...], dtype=None) -> None:
    """Validate ``attn_mask`` against the scores' shape ``target`` = ``(B, H, T_q, T_k)``.

    Raises:
        TypeError: neither bool nor floating; a floating mask whose dtype is not ``dtype``.
        ValueError: not broadcastable to ``target``.
    """
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise TypeError(
            f"attn_mask: expected dtype bool (True = attend) or a floating dtype "
            f"(added to the scores), got {attn_mask.dtype}"
        )
    if dtype is not None and attn_mask.dtype != torch.bool and attn_mask.dtype != dtype:
        raise TypeError(
            f"attn_mask: a floating mask must have the dtype of q ({dtype}), got {attn_mask.dtype}"
        )
    try:
        ok = torch.broadcast_shapes(attn_mask.shape, target) == tuple(target)
    except RuntimeError:
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
    attn_mask: torch.Tensor | None, is_causal: bool, T_q: int, T_k: int
) -> torch.Tensor | None:
    """``attn_mask`` and ``is_causal`` folded into ONE explicit mask (or None for neither).

    Bool ``attn_mask`` and causal: ``attn_mask & causal``; float ``attn_mask``
    and causal: ``-inf`` where the causal mask forbids; causal alone:
    :func:`causal_attn_mask`. No validation (callers use :func:`check_attn_mask`).
    """
    if not is_causal:
        return attn_mask
    device = None if attn_mask is None else attn_mask.device
    causal = causal_attn_mask(T_q, T_k, device=device)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))
