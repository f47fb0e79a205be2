"""Transformer block: pre-norm (GPT-2; Radford et al. 2019, sec. 2.3) or post-norm (Vaswani et al.
2017), with a choice of norm (LayerNorm, RMSNorm) and feed-forward network (GELU, ReLU, SwiGLU)."""

from __future__ import annotations

import numpy as np

from .attention import SelfAttention
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

    Pre-norm (the default) never normalises the residual stream itself, so gradients reach
    early layers through the identity path unchanged. Post-norm (the original transformer's
    "LayerNorm(x + Sublayer(x))", Vaswani et al. 2017, sec. 3.1) normalises the stream after
    each add: every gradient passes through every norm on its way down. The GPT uses the
    block causal; the encoder with ``is_causal=False`` and a padding ``attn_mask``.

    Options: ``norm`` ``"layernorm"`` or ``"rmsnorm"`` (Zhang & Sennrich 2019; no bias);
    ``ffn`` ``"gelu"``, ``"relu"`` or ``"swiglu"`` (Shazeer 2020); ``norm_position`` ``"pre"``
    or ``"post"``; ``d_ff`` default ``4 * d_model`` (SwiGLU: 2/3 of that, rounded); the rest
    as in :class:`~numpy_impl.attention.SelfAttention` and the FFNs; ``norm_eps``: both norms'.
    The sub-modules are ``ln1``, ``attn``, ``ln2``, ``ffn`` whatever the options.
    x ``(B, T, C)`` -> ``(B, T, C)``. Raises ValueError: an unknown option (named), or the
    sub-modules' errors.
    """

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="tanh",
        norm="layernorm",
        ffn="gelu",
        norm_position="pre",
        rope=None,
        rope_base=10000.0,
        n_kv_heads=None,
        rope_scaling=None,
        head_dim=None,
        qkv_bias=None,
        norm_eps=1e-5,
        *,
        attn_impl="explicit",
        dtype=np.float32,
        rng=None,
    ):
        check_block_options(norm, ffn, norm_position)
        self.norm_position = norm_position

        def make_norm():
            if norm == "rmsnorm":
                return RMSNorm(d_model, norm_eps, dtype=dtype)
            return LayerNorm(d_model, norm_eps, bias, dtype=dtype)

        self.ln1 = make_norm()
        self.attn = SelfAttention(
            d_model, n_heads, n_kv_heads, bias, dropout, rope, rope_base, rope_scaling, head_dim,
            qkv_bias, attn_impl=attn_impl, dtype=dtype, rng=rng,
        )  # fmt: skip
        self.ln2 = make_norm()
        if ffn == "swiglu":
            self.ffn = SwiGLUFeedForward(d_model, d_ff, bias, dropout, dtype=dtype, rng=rng)
        else:
            self.ffn = FeedForward(
                d_model, d_ff, bias, dropout, gelu_approximate, activation=ffn, dtype=dtype, rng=rng
            )

    def forward(
        self, x: np.ndarray, attn_mask=None, is_causal=True, start_pos=0, kv_cache=None
    ) -> np.ndarray:
        def attn(h):  # the attention sub-layer, with this call's mask, position and cache
            return self.attn(h, None, attn_mask, is_causal, start_pos, kv_cache)

        if self.norm_position == "post":
            ### BEGIN SOLUTION ch14
            ### TODO: post-norm: x = ln1(x + attn(x)), then return ln2(x + ffn(x));
            ###   never modify x in place
            x = self.ln1(x + attn(x))  # the stream itself is normalised
            return self.ln2(x + self.ffn(x))
            ### END SOLUTION
        ### BEGIN SOLUTION ch07
        ### TODO: x = x + attn(ln1(x)) (attn, defined above, carries this call's mask and cache),
        ###   then x = x + ffn(ln2(x)); never modify x in place
        x = x + attn(self.ln1(x))  # read from the stream, write back
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
        dx = dout + self.ln2.backward(self.ffn.backward(dout))  # both branches of the 2nd add
        dx = dx + self.ln1.backward(self.attn.backward(dx))  # and of the 1st
        return dx
        ### END SOLUTION
