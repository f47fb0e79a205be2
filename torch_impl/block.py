"""Transformer block, pre-norm (Radford et al. 2019) or post-norm (Vaswani et al. 2017), twin of
``numpy_impl/block.py``."""

from __future__ import annotations

import torch
from torch import nn

from .attention import SelfAttention
from .ffn import FeedForward, SwiGLUFeedForward
from .norm import LayerNorm, RMSNorm

NORMS = ("layernorm", "rmsnorm")
FFNS = ("gelu", "relu", "swiglu")
NORM_POSITIONS = ("pre", "post")


def check_block_options(norm: str, ffn: str, norm_position: str) -> None:
    """Raise ``ValueError`` naming the first of the three that is not a known choice."""
    for name, value, choices in (
        ("norm", norm, NORMS),
        ("ffn", ffn, FFNS),
        ("norm_position", norm_position, NORM_POSITIONS),
    ):
        if value not in choices:
            raise ValueError(f"{name}: expected one of {choices}, got {value!r}")


class Block(nn.Module):
    """One transformer block: attention then feed-forward, each with a residual add and a norm.

    * ``norm_position="pre"`` (default; GPT-2, Radford et al. 2019, sec. 2.3):
      ``x = x + attn(ln1(x))``, ``x = x + ffn(ln2(x))``. The residual stream
      passes through untouched, which keeps deep stacks trainable.
    * ``norm_position="post"`` (Vaswani et al. 2017, sec. 3.1):
      ``x = ln1(x + attn(x))``, ``x = ln2(x + ffn(x))``.

    Args:
        d_model: width of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: feed-forward hidden width (``None``: ``4 * d_model``; SwiGLU: 2/3 of that).
        bias: biases in the linear layers and LayerNorms.
        dropout: dropout probability used throughout, in ``[0, 1)``.
        gelu_approximate: ``"tanh"`` or ``"none"``.
        norm: ``"layernorm"`` (default) or ``"rmsnorm"``.
        ffn: ``"gelu"`` (default), ``"relu"`` or ``"swiglu"``.
        norm_position: ``"pre"`` (default) or ``"post"``.
        rope: None or a RoPE layout (``"interleaved"``, ``"half"``) for the attention.
        rope_base: RoPE's frequency base.
        n_kv_heads, rope_scaling, head_dim, qkv_bias: of the attention, as the NumPy twin.
        norm_eps: both norms' eps.
        attn_impl: ``"sdpa"`` or ``"explicit"`` (PyTorch only; can be changed later on
            ``block.attn.attn_impl``).
        dtype: parameter dtype (PyTorch only; ``None``: torch's default).

    Submodules (in this order, whatever the options): ``ln1``, ``attn``, ``ln2``, ``ffn``.

    Shapes:
        x: ``(B, T, d_model)``; attn_mask, is_causal (default True: the GPT; the
        encoder passes False), start_pos, kv_cache as in
        :class:`~torch_impl.attention.SelfAttention` -> ``(B, T, d_model)``, x's dtype.

    Raises:
        ValueError: bad hyperparameters (named; see also the submodules) or an
            input that is not ``(B, T, d_model)`` with ``T >= 1``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "tanh",
        norm: str = "layernorm",
        ffn: str = "gelu",
        norm_position: str = "pre",
        rope: str | None = None,
        rope_base: float = 10000.0,
        n_kv_heads: int | None = None,
        rope_scaling: dict | None = None,
        head_dim: int | None = None,
        qkv_bias: bool | None = None,
        norm_eps: float = 1e-5,
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_block_options(norm, ffn, norm_position)
        self.norm_position = norm_position

        def make_norm() -> nn.Module:
            if norm == "rmsnorm":
                return RMSNorm(d_model, norm_eps, dtype=dtype)
            return LayerNorm(d_model, norm_eps, bias=bias, dtype=dtype)

        self.ln1 = make_norm()
        self.attn = SelfAttention(
            d_model, n_heads, n_kv_heads, bias, dropout, rope, rope_base, rope_scaling, head_dim,
            qkv_bias, attn_impl=attn_impl, dtype=dtype,
        )  # fmt: skip
        self.ln2 = make_norm()
        if ffn == "swiglu":
            self.ffn = SwiGLUFeedForward(d_model, d_ff, bias, dropout, dtype=dtype)
        else:
            self.ffn = FeedForward(
                d_model, d_ff, bias, dropout, gelu_approximate, activation=ffn, dtype=dtype
            )

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = True,
        start_pos: int = 0,
        kv_cache=None,
    ) -> torch.Tensor:
        d_model = self.attn.d_model
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise ValueError(f"x: expected shape (B, T, d_model={d_model}), got {tuple(x.shape)}")

        def attn(h: torch.Tensor) -> torch.Tensor:  # with this call's mask, position and cache
            return self.attn(h, None, attn_mask, is_causal, start_pos, kv_cache)

        if self.norm_position == "post":
            x = self.ln1(x + attn(x))  # the stream itself is normalised
            return self.ln2(x + self.ffn(x))
        x = x + attn(self.ln1(x))  # attention reads the stream, writes back
        x = x + self.ffn(self.ln2(x))  # so does the feed-forward network
        return x

    def extra_repr(self) -> str:
        return f"norm_position={self.norm_position!r}"
