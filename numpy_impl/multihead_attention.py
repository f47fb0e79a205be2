"""Multi-head attention with separate q, k, v projections: ``torch.nn.MultiheadAttention``'s form.

Also the form of the tutorial "Getting Started with Transformers in PyTorch": ``W_q``, ``W_k``,
``W_v``, and the attention weights returned next to the output. Twin of torch_impl's.
"""

from __future__ import annotations

import numpy as np

from .attention import FLASH_TILE, SelfAttention, check_sizes, merge_heads, split_heads
from .linear import Linear


class MultiHeadAttention(SelfAttention):
    """:class:`SelfAttention`'s core behind separate ``q_proj``, ``k_proj``, ``v_proj`` ``(C, C)``.

    ``nn.MultiheadAttention(batch_first=True)`` with ``in_proj_weight = concat(q, k, v)`` computes
    the same, its mask inverted (True = masked there). dropout: on the probabilities only.
    Shapes: forward query ``(B, T_q, C)``, key, value ``(B, T_k, C)`` -> out ``(B, T_q, C)``,
    weights ``(B, n_heads, T_q, T_k)`` before dropout (the head mean ``(B, T_q, T_k)`` with
    ``average_attn_weights``; None without ``need_weights``); backward dout -> dquery, dkey,
    dvalue (nothing flows back through the weights).
    Raises ValueError: bad sizes; inputs not ``(B, T>=1, C)`` with matching B and T_k; the
    mask errors of :func:`scaled_dot_product_attention`.
    """

    def __init__(
        self, d_model, n_heads, bias=True, dropout=0.0, *, attn_impl="explicit", dtype=np.float32,
        rng=None,
    ):  # fmt: skip
        check_sizes(d_model, n_heads)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: must lie in [0, 1), got {dropout}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_heads
        self.dropout = dropout
        self.q_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.k_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.v_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng)
        self.rope = None
        self.attn_impl = attn_impl  # "explicit" or "flash", as SelfAttention's
        self.flash_tile = FLASH_TILE
        self._rng = np.random.default_rng()
        self._cache = None

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
        H = self.n_heads
        q = split_heads(self.q_proj(query), H)  # (B, H, T_q, d_k)
        k = split_heads(self.k_proj(key), H)  # (B, H, T_k, d_k)
        v = split_heads(self.v_proj(value), H)
        out, weights = self.attend(q, k, v, attn_mask, is_causal, need_weights=need_weights)
        if weights is not None and average_attn_weights:
            weights = weights.mean(axis=1)  # (B, H, T_q, T_k) -> (B, T_q, T_k)
        return out, weights

    def backward(self, dout: np.ndarray):
        dq, dk, dv = self.attend_backward(dout)
        return (
            self.q_proj.backward(merge_heads(dq)),
            self.k_proj.backward(merge_heads(dk)),
            self.v_proj.backward(merge_heads(dv)),
        )


def split_qkv_state_dict(state_dict: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A :class:`SelfAttention` state dict -> :class:`MultiHeadAttention`'s, as copies.

    ``qkv_proj`` rows ``(3C, ...)`` split into q, k, v blocks; other keys pass through.
    Raises ValueError: ``qkv_proj.weight`` missing or its first axis not divisible by 3.
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
    """The inverse of :func:`split_qkv_state_dict`: q, k, v rows stacked into ``qkv_proj``.

    Raises ValueError: some of the q/k/v projections present and others missing.
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
