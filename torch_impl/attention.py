"""Scaled dot-product attention and the one multi-head attention module of twinformer.

Twin of ``numpy_impl/attention.py``. :func:`scaled_dot_product_attention` is
the formula written out, or (``impl="sdpa"``) PyTorch's fused
``F.scaled_dot_product_attention``; :class:`SelfAttention` serves the GPT
(causal, RoPE, KV cache), the encoder (padding mask) and the decoder's
cross-attention (``kv``), choosing between the two by its ``attn_impl``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .attention_checks import check_layer_inputs, check_qkv, check_scale, check_sizes
from .dropout import Dropout, check_probability
from .linear import Linear, check_float, linear
from .masks import cached_attn_mask, check_attn_mask, check_is_causal, combine_attn_mask
from .rope import RotaryEmbedding

ATTN_IMPLS = ("sdpa", "explicit")
#: Kernels ``F.scaled_dot_product_attention`` can be restricted to
#: (``torch.nn.attention.SDPBackend``); "auto" leaves PyTorch's own choice.
#: On CPU only "math" and "flash" exist.
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")


@contextlib.contextmanager
def use_sdpa_backend(backend: str = "auto") -> Iterator[None]:
    """Force the kernel behind ``F.scaled_dot_product_attention`` inside a ``with`` block.

    A thin wrapper of ``torch.nn.attention.sdpa_kernel`` that takes a name:
    ``"flash"`` (FlashAttention-2, Dao 2023), ``"efficient"`` (memory-efficient
    attention, Rabe & Staats 2021), ``"math"`` (the unfused reference, in C++),
    ``"cudnn"``, or ``"auto"`` (PyTorch picks the fastest eligible one). When the
    kernel cannot take the inputs (``"efficient"`` on CPU, ``"flash"`` with an
    ``attn_mask`` on CUDA, float64 on CUDA's fused kernels...) the call raises
    ``RuntimeError`` ("No available kernel"), never silently falls back.

    Raises:
        ValueError: ``backend`` not in :data:`SDPA_BACKENDS`.
    """
    if backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend: expected one of {SDPA_BACKENDS}, got {backend!r}")
    if backend == "auto":
        yield
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kernel = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
    }[backend]
    with sdpa_kernel(kernel):
        yield


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, T, C)`` -> ``(B, n_heads, T, d_k)``.

    Head h gets features ``h d_k .. (h + 1) d_k - 1`` of every position.
    """
    B, T, C = x.shape
    return x.view(B, T, n_heads, C // n_heads).transpose(1, 2)  # (B, H, T, d_k)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``(B, n_heads, T, d_k)`` -> ``(B, T, n_heads d_k)``: the inverse of :func:`split_heads`."""
    B, H, T, d_k = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * d_k)  # (B, T, C)


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """``(B, H_kv, S, d)`` -> ``(B, H_kv n_rep, S, d)``: each K/V head serves n_rep query heads."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """softmax over the last axis; a row that is all ``-inf`` gives zeros, not NaN.

    ``F.softmax`` of such a row is NaN, and NaN poisons the backward pass even
    if zeroed afterwards: give the row finite scores first, then zero it.
    """
    check_float(scores, "scores")
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., 1): no key to see
    return F.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    *,
    impl: str = "sdpa",
    sdpa_backend: str = "auto",
    need_weights: bool = False,
):
    """softmax(q k^T * scale + mask) v (Vaswani et al. 2017, eq. 1).

    Args:
        q, k, v: ``(B, n_heads, T_q, d_k)``, ``(B, n_heads, T_k, d_k)``, ``(B, n_heads, T_k, d_v)``.
        attn_mask: bool (True = may attend) or float of q's dtype (added to the
            scores), broadcastable to ``(B, n_heads, T_q, T_k)``; or None.
        is_causal: forbid keys j > i (top-left aligned); with ``attn_mask``, a key
            is seen only if both allow it.
        scale: score multiplier; None means ``1 / sqrt(d_k)``.
        dropout_p: dropout on the attention probabilities, applied whenever it is
            positive (pass 0 at evaluation time, as with ``F.scaled_dot_product_attention``).
        impl: ``"sdpa"`` (PyTorch's fused kernel) or ``"explicit"`` (written out below).
        sdpa_backend: with ``"sdpa"``, the kernel to force (:func:`use_sdpa_backend`).
        need_weights: also return the probabilities (explicit path only).

    Returns:
        out ``(B, n_heads, T_q, d_v)``; with ``need_weights``, ``(out, probs)``.
        A query whose keys are all masked gets zeros with finite gradients.

    Raises:
        ValueError: mismatched shapes, no key or d_k = 0, a mask that does not
            broadcast, ``scale`` not a finite number > 0, ``dropout_p`` outside
            ``[0, 1)``, an unknown ``impl`` or ``sdpa_backend``, or ``need_weights``
            with ``impl="sdpa"``.
        TypeError: a mask neither bool nor q's float dtype; q, k, v not of one float
            dtype; ``is_causal`` not a bool.
        RuntimeError: the forced ``sdpa_backend`` cannot take these inputs.
    """
    check_qkv(q, k, v)
    is_causal = check_is_causal(is_causal)
    check_scale(scale)
    T_q, T_k = q.shape[-2], k.shape[-2]
    if attn_mask is not None:
        check_attn_mask(attn_mask, (*q.shape[:2], T_q, T_k), q.dtype)
    check_probability(dropout_p, "dropout_p")
    if impl not in ATTN_IMPLS:
        raise ValueError(f"impl: expected one of {ATTN_IMPLS}, got {impl!r}")
    if impl == "sdpa":
        if need_weights:
            raise ValueError("need_weights: the fused kernel returns no weights; impl='explicit'")
        return fused_attention(q, k, v, attn_mask, is_causal, scale, dropout_p, sdpa_backend)
    mask = combine_attn_mask(attn_mask, is_causal, T_q, T_k)  # bool, float or None
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B,H,T_q,d_k) @ (B,H,d_k,T_k) -> (B,H,T_q,T_k)
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))  # a masked key gets probability 0
    elif mask is not None:
        scores = scores + mask
    probs = softmax(scores)  # (B, H, T_q, T_k): each row a distribution over keys
    out = F.dropout(probs, dropout_p) @ v  # (B, H, T_q, T_k) @ (B, H, T_k, d_v)
    return (out, probs) if need_weights else out


def fused_attention(
    q, k, v, attn_mask=None, is_causal=False, scale=None, dropout_p=0.0, sdpa_backend="auto"
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` with twinformer's guarantees; inputs already validated.

    ``attn_mask`` and ``is_causal`` are folded into one explicit mask (the fused
    kernels reject or handle inconsistently the two together). A query with
    every key masked gets zeros: torch 2.13's CPU kernels do that already, but
    older versions and some CUDA kernels give NaN, so such rows are let see
    every key (finite) and their output is zeroed, which also stops their gradient.
    """
    with use_sdpa_backend(sdpa_backend):
        if attn_mask is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale
            )
        mask = combine_attn_mask(attn_mask, is_causal, q.shape[-2], k.shape[-2])
        if mask.dim() < 2:  # (T_k,) or (): broadcast as in NumPy (the kernel wants 2 dims)
            mask = mask.expand(q.shape[-2], k.shape[-2])
        if mask.dtype == torch.bool:
            dead = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
            mask = mask | dead
        else:
            dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
            mask = mask.masked_fill(dead, 0.0)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=False, scale=scale
        )
    return out.masked_fill(dead, 0.0)


class SelfAttention(nn.Module):
    """Multi-head attention with one packed q/k/v projection (Vaswani et al. 2017, sec. 3.2.2).

    Twin of ``numpy_impl.attention.SelfAttention``: ``qkv_proj`` ``((H + 2 H_kv) d_k, d_model)``
    holds W_Q, W_K, W_V stacked; each K/V head serves H / H_kv query heads (GQA).

    Args:
        d_model, n_heads, n_kv_heads, bias, dropout, rope, rope_base, rope_scaling, head_dim,
            qkv_bias: as the NumPy twin.
        attn_impl: ``"sdpa"`` or ``"explicit"`` (PyTorch only; can be reassigned later).
        dtype: parameter dtype (PyTorch only; None: torch's default).

    Shapes:
        forward: x ``(B, T, C)``, kv ``(B, S, C)`` or None, attn_mask, is_causal,
        start_pos, kv_cache -> ``(B, T, C)``.

    Raises:
        ValueError: as the NumPy twin, and an unknown ``attn_impl``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        rope: str | None = None,
        rope_base: float = 10000.0,
        rope_scaling: dict | None = None,
        head_dim: int | None = None,
        qkv_bias: bool | None = None,
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.n_kv_heads, self.d_k = check_sizes(d_model, n_heads, n_kv_heads, head_dim)
        check_probability(dropout, "dropout")
        self.d_model, self.n_heads, self.dropout = d_model, n_heads, dropout
        self.attn_impl = attn_impl
        qkv_bias = bias if qkv_bias is None else qkv_bias
        d_qkv = (n_heads + 2 * self.n_kv_heads) * self.d_k
        self.qkv_proj = Linear(d_model, d_qkv, bias=qkv_bias, dtype=dtype)
        self.out_proj = Linear(n_heads * self.d_k, d_model, bias=bias, dtype=dtype)
        self.resid_dropout = Dropout(dropout)
        self.rope = None
        if rope is not None:
            self.rope = RotaryEmbedding(self.d_k, rope, rope_base, rope_scaling)

    @property
    def attn_impl(self) -> str:
        """``"sdpa"`` or ``"explicit"``; assigning anything else raises ``ValueError``."""
        return self._attn_impl

    @attn_impl.setter
    def attn_impl(self, value: str) -> None:
        if value not in ATTN_IMPLS:
            raise ValueError(f"attn_impl: expected one of {ATTN_IMPLS}, got {value!r}")
        self._attn_impl = value

    def forward(
        self,
        x: torch.Tensor,
        kv: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        start_pos: int = 0,
        kv_cache=None,
    ) -> torch.Tensor:
        dtype, rope = self.qkv_proj.weight.dtype, self.rope is not None
        check_layer_inputs(x, kv, attn_mask, kv_cache, self.d_model, dtype, rope)
        q, k, v = self.project(x, kv)  # (B, H, T, d_k), (B, H_kv, S, d_k), (B, H_kv, S, d_k)
        if self.rope is not None:  # positions enter here, by rotating q and k (never v)
            q, k = self.rope(q, k, start_pos)
        y, _ = self.attend(q, k, v, attn_mask, is_causal, start_pos, kv_cache)  # (B, T, C)
        return self.resid_dropout(y)

    def project(self, x: torch.Tensor, kv: torch.Tensor | None = None):
        """q from x; k, v from x (self-attention) or from kv (cross-attention); split in heads."""
        H, H_kv, d_k = self.n_heads, self.n_kv_heads, self.d_k
        if kv is None:
            q, k, v = self.qkv_proj(x).split([H * d_k, H_kv * d_k, H_kv * d_k], dim=-1)
        else:
            W, b = self.qkv_proj.weight, self.qkv_proj.bias
            Q = H * d_k  # rows of W_q
            b_q, b_kv = (None, None) if b is None else (b[:Q], b[Q:])
            q = linear(x, W[:Q], b_q)  # (B, T, C) -> (B, T, H d_k)
            k, v = linear(kv, W[Q:], b_kv).chunk(2, dim=-1)  # (B, S, 2 H_kv d_k) -> 2 x
        return split_heads(q, H), split_heads(k, H_kv), split_heads(v, H_kv)

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
        """Attention over heads, heads joined, ``out_proj``: ``((B, T, C), weights or None)``."""
        if kv_cache is not None:  # decoding (chapter 12): the cached keys and values join these
            k, v, attn_mask, is_causal = self.use_cache(k, v, start_pos, kv_cache)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H_kv, S, d_k) -> (B, H, S, d_k)
        p = self.dropout if self.training else 0.0
        impl = "explicit" if need_weights else self.attn_impl  # the fused kernel has no weights
        y = scaled_dot_product_attention(
            q, k, v, attn_mask, is_causal, dropout_p=p, impl=impl, need_weights=need_weights
        )  # (B, H, T, d_k), or with the weights (B, H, T, S)
        y, weights = y if need_weights else (y, None)
        return self.out_proj(merge_heads(y)), weights  # (B, H, T, d_k) -> (B, T, C)

    # -- decoding with a KV cache (chapter 12) ---------------------------------------------
    def use_cache(self, k, v, start_pos: int, kv_cache):
        """Store this step's keys and values in ``kv_cache``; return all of them and the mask."""
        k, v = kv_cache.update(k, v, start_pos)  # (B, H_kv, start_pos + T, d_k), cached + new
        attn_mask, is_causal = cached_attn_mask(k.shape[-2] - start_pos, start_pos, device=k.device)
        return k, v, attn_mask, is_causal

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, "
            f"attn_impl={self.attn_impl!r}"
        )
