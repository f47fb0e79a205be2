"""Transformer block: pre-norm (GPT-2; Radford et al. 2019, sec. 2.3) or post-norm (Vaswani et al.
2017), with a choice of norm (LayerNorm, RMSNorm) and feed-forward network (GELU, ReLU, SwiGLU)."""

from __future__ import annotations

import numpy as np

from .attention import CausalSelfAttention
from .ffn import FeedForward, SwiGLUFeedForward
from .module import Module
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


class Block(Module):
    """Pre-norm: x = x + attn(ln1(x)); x = x + ffn(ln2(x)).  Post-norm: x = ln1(x + attn(x)); ...

    Pre-norm (the default): each sub-layer reads a normalised copy of the
    residual stream and adds its result back, so the stream itself is never
    normalised and gradients reach early layers through the identity path
    unchanged. Post-norm (the original transformer's
    "LayerNorm(x + Sublayer(x))", Vaswani et al. 2017, sec. 3.1) normalises the stream after each
    add: every gradient passes through every norm on its way down.

    Args:
        d_model, n_heads: width and head count of the attention.
        d_ff: FFN hidden width (default ``4 * d_model``; SwiGLU: 2/3 of that, rounded).
        bias: biases in every Linear and LayerNorm.
        dropout: dropout probability inside attention and FFN.
        gelu_approximate: ``"tanh"`` (default) or ``"none"``.
        norm: ``"layernorm"`` (default) or ``"rmsnorm"`` (Zhang & Sennrich 2019; no bias).
        ffn: ``"gelu"`` (default), ``"relu"`` or ``"swiglu"`` (Shazeer 2020).
        norm_position: ``"pre"`` (default) or ``"post"``.
        rope: None or a RoPE layout for the attention (``"interleaved"``, ``"half"``).
        rope_base: RoPE's frequency base.

    The sub-modules are ``ln1``, ``attn``, ``ln2``, ``ffn`` whatever the options,
    so state-dict names only change inside them.

    Shapes:
        forward: x ``(B, T, C)``, start_pos (int, for RoPE) -> ``(B, T, C)``;
        backward: dout -> dx, same shape.

    ``forward(x, start_pos=p, kv_cache=layer_cache)`` decodes with a
    :class:`~numpy_impl.kv_cache.LayerKVCache` (x = the tokens at positions
    ``p .. p + T - 1``); inference only.

    Raises:
        ValueError: an unknown option (named), or the sub-modules' errors.
    """

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="tanh",
        dtype=np.float32,
        rng=None,
        norm="layernorm",
        ffn="gelu",
        norm_position="pre",
        rope=None,
        rope_base=10000.0,
    ):
        check_block_options(norm, ffn, norm_position)
        self.norm_position = norm_position

        def make_norm():
            if norm == "rmsnorm":
                return RMSNorm(d_model, dtype=dtype)
            return LayerNorm(d_model, bias=bias, dtype=dtype)

        self.ln1 = make_norm()
        self.attn = CausalSelfAttention(
            d_model, n_heads, bias, dropout, dtype=dtype, rng=rng, rope=rope, rope_base=rope_base
        )
        self.ln2 = make_norm()
        if ffn == "swiglu":
            self.ffn = SwiGLUFeedForward(d_model, d_ff, bias, dropout, dtype=dtype, rng=rng)
        else:
            self.ffn = FeedForward(
                d_model, d_ff, bias, dropout, gelu_approximate, dtype, rng, activation=ffn
            )

    def forward(self, x: np.ndarray, start_pos: int = 0, kv_cache=None) -> np.ndarray:
        if kv_cache is not None:  # decoding with a LayerKVCache (chapter 12): inference only
            if self.norm_position == "post":
                x = self.ln1(x + self.attn(x, start_pos, kv_cache))
                return self.ln2(x + self.ffn(x))
            x = x + self.attn(self.ln1(x), start_pos, kv_cache)
            return x + self.ffn(self.ln2(x))
        if self.norm_position == "post":
            ### BEGIN SOLUTION ch14
            ### TODO: post-norm: x = ln1(x + attn(x, start_pos)), then return ln2(x + ffn(x));
            ###   never modify x in place
            x = self.ln1(x + self.attn(x, start_pos))  # the stream itself is normalised
            return self.ln2(x + self.ffn(x))
            ### END SOLUTION
        ### BEGIN SOLUTION ch07
        ### TODO: x = x + attn(ln1(x), start_pos), then x = x + ffn(ln2(x)); never modify x in
        ###   place
        x = x + self.attn(self.ln1(x), start_pos)  # read from the stream, write back
        x = x + self.ffn(self.ln2(x))
        return x
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        if self.norm_position == "post":
            ### BEGIN SOLUTION ch14
            ### TODO: the forward in reverse: through ln2 first, then the residual add sends the
            ###   gradient down the identity and the FFN branch (they add); then ln1, and the
            ###   add around the attention
            d = self.ln2.backward(dout)  # every gradient passes through the norm first
            d = d + self.ffn.backward(d)  # then splits at the residual add
            d = self.ln1.backward(d)
            return d + self.attn.backward(d)
            ### END SOLUTION
        ### BEGIN SOLUTION ch07
        ### TODO: the forward in reverse: each residual add sends dout down both of its branches
        ###   (the identity and the sub-layer), so their gradients add up
        # each residual add sends the gradient down both branches, so they sum
        dx = dout + self.ln2.backward(self.ffn.backward(dout))
        dx += self.ln1.backward(self.attn.backward(dx))
        return dx
        ### END SOLUTION
