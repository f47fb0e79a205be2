"""Attention masks, twin of ``numpy_impl/masks.py``: a bool ``attn_mask`` is True where a
query MAY attend (``F.scaled_dot_product_attention``'s convention); a float one is added to
the scores. ``docs/masks.md`` compares conventions; :func:`to_attn_mask` converts them.
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
    """``(attn_mask, is_causal)`` for ``T_new`` queries after ``start_pos`` cached keys.

    ``(None, False)`` for one query, ``(None, True)`` from position 0 (the flash kernel takes
    no mask), else bool ``(T_new, start_pos + T_new)``: query ``start_pos + i`` sees keys ``<=`` it.
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
    """Validate a ``(B, T)`` padding mask (True = real token): ``TypeError`` if not bool,
    ``ValueError`` if not 2-D or not ``shape``."""
    if not isinstance(token_mask, torch.Tensor) or token_mask.dtype != torch.bool:
        got = token_mask.dtype if isinstance(token_mask, torch.Tensor) else type(token_mask)
        raise TypeError(
            f"{name}: expected dtype bool (True = real token, False = padding), got {got}"
        )
    if token_mask.dim() != 2 or (shape is not None and tuple(token_mask.shape) != tuple(shape)):
        want = "(B, T)" if shape is None else f"(B, T)={tuple(shape)}"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(token_mask.shape)}")


def key_padding_attn_mask(token_mask: torch.Tensor) -> torch.Tensor:
    """Padding as an attention mask: bool ``(B, T_k)`` (True = real token, the opposite of
    ``nn.MultiheadAttention``'s ``key_padding_mask``) -> ``(B, 1, 1, T_k)``."""
    check_token_mask(token_mask)
    return token_mask[:, None, None, :]  # (B, T_k) -> (B, 1, 1, T_k)


def to_attn_mask(mask: torch.Tensor, convention: str) -> torch.Tensor:
    """A mask in ``convention`` as twinformer's (bool, True = attend): ``"attend"`` as is,
    ``"masked"`` (True = may NOT attend) inverted, ``"keep"`` (0 = masked) as ``mask != 0``.
    ``ValueError`` for another convention; ``TypeError`` for a non-bool attend/masked mask."""
    if convention not in MASK_CONVENTIONS:
        raise ValueError(f"convention: expected one of {MASK_CONVENTIONS}, got {convention!r}")
    if convention == "keep":
        return mask != 0
    if mask.dtype != torch.bool:
        raise TypeError(f"mask: the {convention!r} convention needs dtype bool, got {mask.dtype}")
    return mask if convention == "attend" else ~mask


def check_attn_mask(attn_mask: torch.Tensor, target: tuple[int, ...], dtype=None) -> None:
    """Validate ``attn_mask`` against the scores' shape ``target`` = ``(B, H, T_q, T_k)``."""
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
    """``is_causal`` as a bool; ``TypeError`` for 1, "no", None or any other non-bool."""
    if not isinstance(is_causal, (bool, np.bool_)):
        raise TypeError(f"is_causal: expected a bool, got {is_causal!r}")
    return bool(is_causal)


def combine_attn_mask(
    attn_mask: torch.Tensor | None, is_causal: bool, T_q: int, T_k: int
) -> torch.Tensor | None:
    """``attn_mask`` and ``is_causal`` as ONE mask (None for neither): bool ``&``, float
    ``-inf`` where causal forbids. Unvalidated: callers use :func:`check_attn_mask`."""
    if not is_causal:
        return attn_mask
    device = None if attn_mask is None else attn_mask.device
    causal = causal_attn_mask(T_q, T_k, device=device)
    if attn_mask is None:
        return causal
    if attn_mask.dtype == torch.bool:
        return attn_mask & causal
    return attn_mask.masked_fill(~causal, float("-inf"))
