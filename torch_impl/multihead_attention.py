"""Multi-head attention with separate q, k, v projections: ``torch.nn.MultiheadAttention``'s form.

Twin of ``numpy_impl/multihead_attention.py``: the layer of the tutorial "Getting
Started with Transformers in PyTorch" (its ``MultiHeadAttention``) over the
core of :class:`~torch_impl.attention.SelfAttention`, and the converters
between its weights and the packed ``qkv_proj`` layout.
"""

from __future__ import annotations

import torch

from .attention import SelfAttention, check_sizes, split_heads
from .dropout import check_probability
from .linear import Linear


class MultiHeadAttention(SelfAttention):
    """:class:`SelfAttention`'s core behind three separate projections, and its weights returned.

    ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` (each ``(C, C)``); loading
    ``in_proj_weight = cat(q_proj, k_proj, v_proj)`` (and the biases, and
    ``out_proj``) into ``nn.MultiheadAttention(batch_first=True)`` gives the same
    function, with its mask inverted (there a bool True means *masked*).

    Args:
        d_model, n_heads, bias: as in :class:`SelfAttention`.
        dropout: on the attention probabilities only (no dropout on the output).
        attn_impl: ``"sdpa"`` or ``"explicit"``; with ``need_weights`` the explicit
            path runs whatever this says (the fused kernel returns no weights).
        dtype: parameter dtype.

    Shapes:
        query ``(B, T_q, C)``, key and value ``(B, T_k, C)``, attn_mask, is_causal ->
        ``(out (B, T_q, C), weights)``: ``(B, n_heads, T_q, T_k)`` (the probabilities
        before dropout), ``(B, T_q, T_k)`` with ``average_attn_weights``, or None
        without ``need_weights``.

    Raises:
        ValueError: bad sizes, inputs that are not ``(B, T>=1, d_model)`` with matching
            B and T_k, or the mask errors of :func:`scaled_dot_product_attention`.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        torch.nn.Module.__init__(self)
        check_sizes(d_model, n_heads)
        check_probability(dropout, "dropout")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.n_kv_heads = n_heads
        self.dropout = dropout
        self.attn_impl = attn_impl
        self.q_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.rope = None

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = True,
        average_attn_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        for name, a in (("query", query), ("key", key), ("value", value)):
            if a.dim() != 3 or a.shape[1] < 1 or a.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name}: expected shape (B, T>=1, d_model={self.d_model}), "
                    f"got {tuple(a.shape)}"
                )
        if key.shape[0] != query.shape[0] or value.shape[:2] != key.shape[:2]:
            raise ValueError(
                f"key, value: expected shapes (B={query.shape[0]}, T_k, d_model) with the same "
                f"T_k, got {tuple(key.shape)} and {tuple(value.shape)}"
            )
        H = self.n_heads
        q = split_heads(self.q_proj(query), H)  # (B, H, T_q, d_k)
        k = split_heads(self.k_proj(key), H)  # (B, H, T_k, d_k)
        v = split_heads(self.v_proj(value), H)
        out, weights = self.attend(q, k, v, attn_mask, is_causal, need_weights=need_weights)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (B, H, T_q, T_k) -> (B, T_q, T_k)
        return out, weights


def split_qkv_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A :class:`SelfAttention` state dict -> the :class:`MultiHeadAttention` one.

    ``qkv_proj.weight (3C, C)`` splits into q, k, v blocks of rows (likewise the
    bias); every other key passes through. Tensors are copies (``clone``).

    Raises:
        ValueError: ``qkv_proj.weight`` missing or its first axis not divisible by 3.
    """
    w = state_dict.get("qkv_proj.weight")
    if w is None or w.dim() != 2 or w.shape[0] % 3:
        raise ValueError(
            "state_dict: expected 'qkv_proj.weight' of shape (3 d_model, d_model), got "
            f"{None if w is None else tuple(w.shape)}"
        )
    out = {}
    for key, value in state_dict.items():
        if key.startswith("qkv_proj."):
            kind = key.removeprefix("qkv_proj.")
            for name, part in zip(("q", "k", "v"), value.chunk(3, dim=0), strict=True):
                out[f"{name}_proj.{kind}"] = part.clone()
        else:
            out[key] = value.clone()
    return out


def merge_qkv_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A :class:`MultiHeadAttention` state dict -> the :class:`SelfAttention` one.

    ``qkv_proj = cat(q_proj, k_proj, v_proj)`` along the rows, the layout of
    ``nn.MultiheadAttention.in_proj_weight`` too. Other keys pass through.

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
        out[f"qkv_proj.{kind}"] = torch.cat(parts, dim=0)
    if "qkv_proj.weight" not in out:
        raise ValueError("state_dict: expected 'q_proj.weight', 'k_proj.weight', 'v_proj.weight'")
    for key, value in state_dict.items():
        if key.split(".")[0] not in ("q_proj", "k_proj", "v_proj"):
            out[key] = value.clone()
    return out
