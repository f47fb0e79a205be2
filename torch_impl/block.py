"""Pre-norm transformer block (Radford et al. 2019), twin of ``numpy_impl/block.py``."""

from __future__ import annotations

import torch
from torch import nn

from .attention import CausalSelfAttention
from .ffn import FeedForward
from .norm import LayerNorm


class Block(nn.Module):
    """One GPT block: attention then feed-forward, each wrapped as ``x + f(LayerNorm(x))``.

    Pre-norm, as in GPT-2 (Radford et al. 2019, sec. 2.3), rather than the
    post-norm ``LayerNorm(x + f(x))`` of Vaswani et al. 2017: the residual
    stream ``x`` passes through untouched, which keeps deep stacks trainable.

    Args:
        d_model: width of the residual stream.
        n_heads: attention heads; must divide ``d_model``.
        d_ff: feed-forward hidden width (``None``: ``4 * d_model``).
        bias: biases in the linear layers and LayerNorms.
        dropout: dropout probability used throughout, in ``[0, 1)``.
        gelu_approximate: ``"tanh"`` or ``"none"``.
        attn_impl: ``"sdpa"`` or ``"explicit"`` (can be changed later on
            ``block.attn.attn_impl``).
        dtype: parameter dtype (``None``: torch's default).

    Submodules (in this order): ``ln1``, ``attn``, ``ln2``, ``ffn``.

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``, x's dtype.

    ``forward(x, kv_cache=layer_cache, start_pos=p)`` decodes with a
    :class:`~torch_impl.kv_cache.LayerKVCache` (x = the tokens at positions
    ``p .. p + T - 1``); inference only.

    Raises:
        ValueError: bad hyperparameters (see the submodules) or an input that
            is not ``(B, T, d_model)`` with ``T >= 1``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "tanh",
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        self.ln1 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.attn = CausalSelfAttention(
            d_model, n_heads, bias=bias, dropout=dropout, attn_impl=attn_impl, dtype=dtype
        )
        self.ln2 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.ffn = FeedForward(
            d_model,
            d_ff,
            bias=bias,
            dropout=dropout,
            gelu_approximate=gelu_approximate,
            dtype=dtype,
        )

    def forward(self, x: torch.Tensor, kv_cache=None, start_pos: int = 0) -> torch.Tensor:
        d_model = self.attn.d_model
        if x.dim() != 3 or x.shape[-1] != d_model:
            raise ValueError(f"x: expected shape (B, T, d_model={d_model}), got {tuple(x.shape)}")
        if kv_cache is not None:  # decoding with a LayerKVCache (chapter 12): inference only
            x = x + self.attn(self.ln1(x), kv_cache=kv_cache, start_pos=start_pos)
            return x + self.ffn(self.ln2(x))
        x = x + self.attn(self.ln1(x))  # attention reads the stream and writes back
        x = x + self.ffn(self.ln2(x))  # so does the feed-forward network
        return x
