"""Scaled dot-product attention and causal multi-head self-attention.

Twin of ``numpy_impl/attention.py``. Two implementations of the same function
live here side by side:

* :func:`scaled_dot_product_attention_explicit` writes the formula out
  (scores, mask, softmax over keys, weighted sum of values);
* ``F.scaled_dot_product_attention`` is PyTorch's fused kernel.

:class:`CausalSelfAttention` can use either, chosen by its ``attn_impl``
attribute, so the two can be checked against each other and timed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from .dropout import Dropout, check_probability
from .linear import Linear
from .rope import RotaryEmbedding

ATTN_IMPLS = ("sdpa", "explicit")
#: Kernels ``F.scaled_dot_product_attention`` can be restricted to
#: (``torch.nn.attention.SDPBackend``); "auto" leaves PyTorch's own choice.
#: On CPU only "math" and "flash" exist.
SDPA_BACKENDS = ("auto", "flash", "efficient", "math", "cudnn")


@contextlib.contextmanager
def use_sdpa_backend(backend: str = "auto") -> Iterator[None]:
    """Force the kernel behind ``F.scaled_dot_product_attention`` inside a ``with`` block.

    A thin wrapper of ``torch.nn.attention.sdpa_kernel`` (PyTorch >= 2.3) that
    takes a name: ``"flash"`` (FlashAttention-2, Dao 2023), ``"efficient"``
    (memory-efficient attention, Rabe & Staats 2021, the xFormers kernel),
    ``"math"`` (the unfused reference, in C++), ``"cudnn"``, or ``"auto"``
    (no restriction: PyTorch picks the fastest eligible one). Every
    ``F.scaled_dot_product_attention`` call inside the block, including those of
    :class:`CausalSelfAttention` with ``attn_impl="sdpa"``, uses only that kernel;
    when the kernel cannot take the inputs (``"efficient"`` on CPU, ``"flash"``
    with an ``attn_mask`` on CUDA, float64 on CUDA's fused kernels...) the call
    raises ``RuntimeError`` ("No available kernel"), never silently falls back.

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


# -- masks ----------------------------------------------------------------------------------
# One convention throughout twinformer, F.scaled_dot_product_attention's: a boolean
# attn_mask is True where a query MAY attend to a key. docs/masks.md compares it
# with nn.MultiheadAttention's (True = masked) and the 0/1 keep-mask of many
# tutorials, and to_attn_mask converts both.

MASK_CONVENTIONS = ("attend", "masked", "keep")


def causal_attn_mask(T_q: int, T_k: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``(T_q, T_k)``, True where query i may attend to key j, i.e. j <= i.

    Top-left aligned, like ``F.scaled_dot_product_attention(is_causal=True)``:
    query 0 sees key 0 whatever T_k is, so no row is ever fully masked.
    """
    return torch.ones(T_q, T_k, dtype=torch.bool, device=device).tril()


def key_padding_attn_mask(token_mask: torch.Tensor) -> torch.Tensor:
    """A batch's padding as an attention mask: ``(B, T_k)`` -> ``(B, 1, 1, T_k)``.

    Args:
        token_mask: bool ``(B, T_k)``, True for a real token, False for padding
            (the opposite of ``nn.MultiheadAttention``'s ``key_padding_mask``).

    Returns:
        bool ``(B, 1, 1, T_k)``, True = may attend; it broadcasts over heads and
        queries, so every query of sequence b ignores b's padding keys.

    Raises:
        TypeError: ``token_mask`` is not boolean.
        ValueError: ``token_mask`` is not 2-D.
    """
    check_token_mask(token_mask)
    return token_mask[:, None, None, :]


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


def to_attn_mask(mask: torch.Tensor, convention: str) -> torch.Tensor:
    """Convert a mask written in another convention to twinformer's (bool, True = attend).

    Args:
        mask: the mask, any shape.
        convention: ``"attend"`` (bool, True = may attend: ``F.scaled_dot_product_attention``;
            returned as is), ``"masked"`` (bool, True = may NOT attend:
            ``nn.MultiheadAttention``'s ``attn_mask`` and ``key_padding_mask``;
            returns ``~mask``) or ``"keep"`` (numbers, 0 = masked, applied as
            ``scores.masked_fill(mask == 0, -1e9)``; returns ``mask != 0``).

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


def check_attn_mask(attn_mask: torch.Tensor, target: tuple[int, ...]) -> None:
    """Validate ``attn_mask`` against the scores' shape ``target`` = ``(B, H, T_q, T_k)``.

    Raises:
        TypeError: neither bool nor floating.
        ValueError: not broadcastable to ``target``.
    """
    if attn_mask.dtype != torch.bool and not attn_mask.is_floating_point():
        raise TypeError(
            f"attn_mask: expected dtype bool (True = attend) or a floating dtype "
            f"(added to the scores), got {attn_mask.dtype}"
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


def _check_attention_inputs(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None,
    is_causal: bool,
    dropout_p: float,
) -> None:
    """Shared validation, so both implementations fail in the same way."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"{name}: expected shape (B, n_heads, T, d_k) (4 dimensions), got {tuple(t.shape)}"
            )
    B, H, Tq, d_k = q.shape
    Tk = k.shape[2]
    if k.shape != (B, H, Tk, d_k):
        raise ValueError(
            f"k: expected shape (B={B}, n_heads={H}, Tk, d_k={d_k}), got {tuple(k.shape)}"
        )
    if v.shape[:3] != (B, H, Tk):
        raise ValueError(
            f"v: expected shape (B={B}, n_heads={H}, Tk={Tk}, d_v), got {tuple(v.shape)}"
        )
    if not (q.dtype == k.dtype == v.dtype and q.is_floating_point()):
        # the fused kernel's own message is a RuntimeError; the NumPy twin raises TypeError
        raise TypeError(
            f"q, k, v: expected one floating dtype, got {q.dtype}, {k.dtype}, {v.dtype}"
        )
    if attn_mask is not None:
        check_attn_mask(attn_mask, (B, H, Tq, Tk))
    check_probability(dropout_p, "dropout_p")


def attention_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention probabilities ``softmax(q k^T * scale + mask)`` (Vaswani et al. 2017, eq. 1).

    This is the first half of :func:`scaled_dot_product_attention_explicit`,
    exposed on its own so the attention pattern can be inspected or have
    dropout applied to it. No input validation: the public attention functions
    validate before calling it.

    Args:
        q: ``(B, n_heads, Tq, d_k)``, float.
        k: ``(B, n_heads, Tk, d_k)``, q's dtype.
        attn_mask: ``None``; a bool tensor where ``True`` means "may attend"
            (the ``F.scaled_dot_product_attention`` convention); or a float
            tensor added to the scores. Broadcastable to ``(B, n_heads, Tq, Tk)``.
        is_causal: mask key ``j`` for query ``i`` whenever ``j > i``
            (top-left aligned, as in ``F.scaled_dot_product_attention``);
            with ``attn_mask``, both apply (:func:`combine_attn_mask`).
        scale: multiplier for the scores; ``None`` means ``1 / sqrt(d_k)``.

    Returns:
        ``(B, n_heads, Tq, Tk)``: each row sums to 1 over the key axis, except
        rows whose keys are all masked, which are all zeros (not NaN), with
        zero (finite) gradients.
    """
    d_k = q.shape[-1]
    scale = 1.0 / math.sqrt(d_k) if scale is None else scale
    # (B, H, Tq, d_k) @ (B, H, d_k, Tk) -> (B, H, Tq, Tk)
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal and attn_mask is None:
        Tq, Tk = scores.shape[-2:]
        allowed = causal_attn_mask(Tq, Tk, device=q.device)
        scores = scores.masked_fill(~allowed, float("-inf"))
    elif attn_mask is not None:
        attn_mask = combine_attn_mask(attn_mask, is_causal, *scores.shape[-2:])
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    # A row with every key masked would give softmax(-inf, ..., -inf) = NaN, and NaN
    # poisons the backward pass even if zeroed afterwards. Give such rows finite scores,
    # then zero their probabilities: the output is 0 and no gradient flows into them.
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (B, H, Tq, 1)
    scores = scores.masked_fill(dead, 0.0)
    attn = F.softmax(scores, dim=-1)  # over the key axis: one distribution per query
    return attn.masked_fill(dead, 0.0)


def scaled_dot_product_attention_explicit(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    training: bool = True,
) -> torch.Tensor:
    """Attention written out: ``softmax(Q K^T / sqrt(d_k)) V`` (Vaswani et al. 2017, eq. 1).

    Same semantics as ``F.scaled_dot_product_attention`` for these arguments,
    except that a query whose keys are all masked returns zeros with finite
    gradients (see :func:`attention_weights`).

    Args:
        q: ``(B, n_heads, Tq, d_k)``, float.
        k: ``(B, n_heads, Tk, d_k)``, q's dtype.
        v: ``(B, n_heads, Tk, d_v)``, q's dtype (``d_v`` is usually ``d_k``).
        attn_mask: bool (``True`` = attend) or float (added to the scores),
            broadcastable to ``(B, n_heads, Tq, Tk)``; or ``None``.
        is_causal: apply the causal mask (``j > i`` masked); with
            ``attn_mask``, a key is seen only if both allow it.
        scale: score multiplier; ``None`` means ``1 / sqrt(d_k)``.
        dropout_p: dropout probability on the attention weights, in ``[0, 1)``.
        training: apply ``dropout_p`` only when True (``F.dropout`` semantics).

    Returns:
        out: ``(B, n_heads, Tq, d_v)``, q's dtype.

    Raises:
        ValueError: inputs that are not 4-D or whose shapes disagree, an
            ``attn_mask`` not broadcastable to ``(B, n_heads, Tq, Tk)``, or
            ``dropout_p`` outside ``[0, 1)``.
        TypeError: an ``attn_mask`` that is neither bool nor floating; q, k, v not of one
            floating dtype.
    """
    _check_attention_inputs(q, k, v, attn_mask, is_causal, dropout_p)
    attn = attention_weights(q, k, attn_mask, is_causal, scale)  # (B, H, Tq, Tk)
    attn = F.dropout(attn, dropout_p, training=training)
    return attn @ v  # (B, H, Tq, Tk) @ (B, H, Tk, d_v) -> (B, H, Tq, d_v)


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
    dropout_p: float = 0.0,
    impl: str = "sdpa",
    sdpa_backend: str = "auto",
) -> torch.Tensor:
    """Scaled dot-product attention (Vaswani et al. 2017, eq. 1) by the chosen implementation.

    Args:
        q, k, v, attn_mask, is_causal, scale: as in
            :func:`scaled_dot_product_attention_explicit`.
        dropout_p: dropout on the attention weights, applied whenever it is
            positive (as in ``F.scaled_dot_product_attention``: pass 0.0 at
            evaluation time).
        impl: ``"sdpa"`` for PyTorch's fused ``F.scaled_dot_product_attention``,
            ``"explicit"`` for the written-out version.
        sdpa_backend: with ``impl="sdpa"``, the kernel to force (see
            :func:`use_sdpa_backend`); ``"auto"`` lets PyTorch choose.

    Returns:
        out: ``(B, n_heads, Tq, d_v)``, q's dtype.

    Raises:
        ValueError: an unknown ``impl`` or ``sdpa_backend``, or any input error listed for
            :func:`scaled_dot_product_attention_explicit` (checked up front for
            both implementations, so they fail identically).
        TypeError: an ``attn_mask`` that is neither bool nor floating; q, k, v not of one
            floating dtype.
        RuntimeError: the forced ``sdpa_backend`` cannot take these inputs.
    """
    if impl not in ATTN_IMPLS:
        raise ValueError(f"impl: expected one of {ATTN_IMPLS}, got {impl!r}")
    if sdpa_backend not in SDPA_BACKENDS:
        raise ValueError(f"sdpa_backend: expected one of {SDPA_BACKENDS}, got {sdpa_backend!r}")
    _check_attention_inputs(q, k, v, attn_mask, is_causal, dropout_p)
    if impl == "explicit":
        return scaled_dot_product_attention_explicit(
            q, k, v, attn_mask, is_causal, scale, dropout_p, training=True
        )
    with use_sdpa_backend(sdpa_backend):
        if attn_mask is None:
            return F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=is_causal, scale=scale
            )
        # One explicit mask: the fused kernels reject (math backend) or handle
        # inconsistently an attn_mask together with is_causal=True.
        mask = combine_attn_mask(attn_mask, is_causal, q.shape[-2], k.shape[-2])
        # A query with every key masked: torch 2.13's CPU kernels return zeros with zero
        # gradients, but older versions and some CUDA kernels give NaN. Let such rows
        # see every key (finite), then zero their output, which also stops their gradient.
        if mask.dtype == torch.bool:
            dead = ~mask.any(dim=-1, keepdim=True)  # (..., Tq, 1)
            mask = mask | dead
        else:
            dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
            mask = mask.masked_fill(dead, 0.0)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=False, scale=scale
        )
    return out.masked_fill(dead, 0.0)


class CausalSelfAttention(nn.Module):
    """Masked multi-head self-attention (Vaswani et al. 2017, sec. 3.2.2; Radford et al. 2019).

    ``MultiHead(x) = Concat(head_1, ..., head_h) W_O^T``, with
    ``head_i = Attention(x W_Q,i, x W_K,i, x W_V,i)`` under the causal mask,
    so position ``i`` only mixes positions ``0 .. i``. The three input
    projections of all heads are one ``Linear(d_model, 3 * d_model)``; its
    output splits into q, k, v in that order, and each is cut into
    ``n_heads`` heads of width ``d_k = d_model / n_heads``.

    Args:
        d_model: model width ``C``.
        n_heads: number of heads; must divide ``d_model``.
        bias: give both projections a bias.
        dropout: probability for ``attn_dropout`` (on the attention weights)
            and ``resid_dropout`` (on the output), in ``[0, 1)``.
        attn_impl: ``"sdpa"`` or ``"explicit"``; see
            :func:`scaled_dot_product_attention`. Can be reassigned later.
        dtype: parameter dtype (``None``: torch's default).
        rope: ``None`` (no positions here), or a RoPE layout, ``"interleaved"``
            or ``"half"``: q and k are rotated by their positions (Su et al. 2021;
            ``torch_impl/rope.py``). ``d_k`` must then be even.
        rope_base: RoPE's frequency base.

    Attributes:
        d_model, n_heads, d_k: the widths above.
        rope: the :class:`~torch_impl.rope.RotaryEmbedding`, or None.

    Submodules (in this order, matching the NumPy twin):
        qkv_proj: ``Linear(d_model, 3 * d_model)``, weight ``(3 d_model, d_model)``.
        out_proj: ``Linear(d_model, d_model)``, weight ``(d_model, d_model)``.
        attn_dropout, resid_dropout: ``Dropout(dropout)``.

    Shapes:
        x: ``(B, T, C)`` with ``C = d_model``, ``T >= 1`` -> ``(B, T, C)``;
        ``start_pos`` (int, default 0) is the position of x's first token (for RoPE).

    Dropout on the attention weights: the explicit path applies
    ``attn_dropout`` (so a mask can be injected there); the sdpa path passes
    ``attn_dropout.p`` as ``dropout_p``, which draws its own mask.

    Raises:
        ValueError: ``d_model`` not divisible by ``n_heads``, non-positive
            sizes, a bad ``dropout`` or ``attn_impl``, or an input that is not
            ``(B, T, d_model)`` with ``T >= 1``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
        rope: str | None = None,
        rope_base: float = 10000.0,
    ):
        super().__init__()
        if d_model < 1 or n_heads < 1:
            raise ValueError(
                f"d_model and n_heads must be positive, got d_model={d_model}, n_heads={n_heads}"
            )
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.attn_impl = attn_impl
        self.qkv_proj = Linear(d_model, 3 * d_model, bias=bias, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.attn_dropout = Dropout(dropout)
        self.resid_dropout = Dropout(dropout)
        self.rope = None if rope is None else RotaryEmbedding(self.d_k, rope, rope_base)

    @property
    def attn_impl(self) -> str:
        """``"sdpa"`` or ``"explicit"``; assigning anything else raises ``ValueError``."""
        return self._attn_impl

    @attn_impl.setter
    def attn_impl(self, value: str) -> None:
        if value not in ATTN_IMPLS:
            raise ValueError(f"attn_impl: expected one of {ATTN_IMPLS}, got {value!r}")
        self._attn_impl = value

    def forward(self, x: torch.Tensor, start_pos: int = 0, kv_cache=None) -> torch.Tensor:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x: expected shape (B, T, d_model={self.d_model}), got {tuple(x.shape)}"
            )
        B, T, C = x.shape
        if T < 1:
            raise ValueError(f"x: sequence length T must be at least 1, got T={T}")
        if kv_cache is not None:
            return self._forward_cached(x, kv_cache, start_pos)
        H, d_k = self.n_heads, self.d_k

        q, k, v = self.qkv_proj(x).split(self.d_model, dim=-1)  # (B, T, 3C) -> 3 x (B, T, C)
        q = q.view(B, T, H, d_k).transpose(1, 2)  # (B, T, C) -> (B, H, T, d_k)
        k = k.view(B, T, H, d_k).transpose(1, 2)
        v = v.view(B, T, H, d_k).transpose(1, 2)
        if self.rope is not None:  # positions enter here, by rotating q and k (not v)
            q, k = self.rope(q, k, start_pos)

        if self.attn_impl == "sdpa":
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
        else:
            attn = attention_weights(q, k, is_causal=True)  # (B, H, T, T)
            y = self.attn_dropout(attn) @ v  # (B, H, T, T) @ (B, H, T, d_k) -> (B, H, T, d_k)

        # Re-join the heads: (B, H, T, d_k) -> (B, T, H, d_k) -> (B, T, C).
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.out_proj(y))

    def _forward_cached(self, x: torch.Tensor, kv_cache, start_pos: int) -> torch.Tensor:
        """Inference with a :class:`~torch_impl.kv_cache.LayerKVCache` (chapter 12).

        x ``(B, T, C)`` holds the tokens at positions ``start_pos .. start_pos + T - 1``;
        the cache holds keys and values of positions ``0 .. start_pos - 1`` and gains
        these. Query ``start_pos + i`` may attend to keys ``0 .. start_pos + i`` (the
        causal mask, bottom-right aligned). With RoPE, q and k are rotated by their
        absolute positions before ``kv_cache.update``, so cached keys stay rotated.
        """
        B, T, C = x.shape
        H, d_k = self.n_heads, self.d_k
        q, k, v = self.qkv_proj(x).split(self.d_model, dim=-1)  # 3 x (B, T, C), new positions
        q = q.view(B, T, H, d_k).transpose(1, 2)  # (B, H, T, d_k)
        k = k.view(B, T, H, d_k).transpose(1, 2)
        v = v.view(B, T, H, d_k).transpose(1, 2)
        if self.rope is not None:  # rotate by the absolute positions, before caching k
            q, k = self.rope(q, k, start_pos)
        k, v = kv_cache.update(k, v, start_pos)  # (B, H, start_pos + T, d_k), cached + new
        # one new query sees every cached key; a prefill (start_pos 0) is plain causal (which
        # the flash kernel takes; it takes no mask); otherwise query start_pos + i sees keys
        # 0 .. start_pos + i
        allowed, is_causal = None, T > 1 and start_pos == 0
        if T > 1 and start_pos > 0:
            pos_k = torch.arange(start_pos + T, device=x.device)
            allowed = pos_k[None, :] <= start_pos + torch.arange(T, device=x.device)[:, None]
        if self.attn_impl == "sdpa":
            p = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p, is_causal=is_causal
            )
        else:
            attn = attention_weights(q, k, attn_mask=allowed, is_causal=is_causal)
            y = self.attn_dropout(attn) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, H, T, d_k) -> (B, T, C)
        return self.resid_dropout(self.out_proj(y))

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, attn_impl={self.attn_impl!r}"


class MultiHeadAttention(nn.Module):
    """Multi-head attention with separate q, k, v projections (Vaswani et al. 2017, sec. 3.2.2).

    Seed 004's layer, twin of ``numpy_impl.attention.MultiHeadAttention``:
    ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``, and the attention weights
    returned next to the output, as ``nn.MultiheadAttention`` returns them.
    Loading ``in_proj_weight = cat(q_proj.weight, k_proj.weight, v_proj.weight)``
    (and the biases, and ``out_proj``) into ``nn.MultiheadAttention(batch_first=True)``
    gives the same function, with its mask inverted: there a bool ``True``
    means *masked*, here (as in ``F.scaled_dot_product_attention``) it means
    *may attend*.

    Args:
        d_model, n_heads, bias: as in :class:`CausalSelfAttention`.
        dropout: on the attention probabilities only (``attn_dropout``), as in
            ``nn.MultiheadAttention``.
        attn_impl: ``"sdpa"`` or ``"explicit"``; with ``need_weights`` the
            explicit path runs whatever this says, since the fused kernel does
            not return the weights.
        dtype: parameter dtype.

    Submodules (in this order): ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``
    (each ``Linear(d_model, d_model)``), ``attn_dropout``.

    Shapes:
        query ``(B, T_q, C)``, key and value ``(B, T_k, C)``; ``attn_mask`` bool
        (True = may attend) or float, broadcastable to ``(B, n_heads, T_q, T_k)``;
        returns ``(out (B, T_q, C), weights)``, weights ``(B, n_heads, T_q, T_k)``
        (softmax probabilities before dropout), ``(B, T_q, T_k)`` with
        ``average_attn_weights``, or None without ``need_weights``.

    Raises:
        ValueError: bad sizes, inputs that are not ``(B, T, d_model)`` with T >= 1
            and matching B and T_k, or the mask errors of
            :func:`scaled_dot_product_attention`.
        TypeError: a mask that is neither bool nor floating.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        bias: bool = True,
        dropout: float = 0.0,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        if d_model < 1 or n_heads < 1:
            raise ValueError(
                f"d_model and n_heads must be positive, got d_model={d_model}, n_heads={n_heads}"
            )
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if attn_impl not in ATTN_IMPLS:
            raise ValueError(f"attn_impl: expected one of {ATTN_IMPLS}, got {attn_impl!r}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.attn_impl = attn_impl
        self.q_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.k_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.v_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.out_proj = Linear(d_model, d_model, bias=bias, dtype=dtype)
        self.attn_dropout = Dropout(dropout)

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
        B, T_q, C = query.shape
        T_k, H, d_k = key.shape[1], self.n_heads, self.d_k
        q = self.q_proj(query).view(B, T_q, H, d_k).transpose(1, 2)  # (B, H, T_q, d_k)
        k = self.k_proj(key).view(B, T_k, H, d_k).transpose(1, 2)  # (B, H, T_k, d_k)
        v = self.v_proj(value).view(B, T_k, H, d_k).transpose(1, 2)
        p = self.attn_dropout.p if self.training else 0.0
        _check_attention_inputs(q, k, v, attn_mask, is_causal, p)
        weights = None
        if need_weights:
            attn = attention_weights(q, k, attn_mask, is_causal)  # (B, H, T_q, T_k)
            y = self.attn_dropout(attn) @ v
            weights = attn.mean(dim=1) if average_attn_weights else attn
        else:
            y = scaled_dot_product_attention(
                q, k, v, attn_mask, is_causal, dropout_p=p, impl=self.attn_impl
            )
        y = y.transpose(1, 2).reshape(B, T_q, C)  # (B, H, T_q, d_k) -> (B, T_q, C)
        return self.out_proj(y), weights

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, attn_impl={self.attn_impl!r}"


def split_qkv_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A :class:`CausalSelfAttention` state dict -> the :class:`MultiHeadAttention` one.

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
    """A :class:`MultiHeadAttention` state dict -> the :class:`CausalSelfAttention` one.

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
