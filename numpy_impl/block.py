"""Pre-norm transformer block (GPT-2; Radford et al. 2019, sec. 2.3)."""

from __future__ import annotations

import numpy as np

from .attention import CausalSelfAttention
from .ffn import FeedForward
from .module import Module
from .norm import LayerNorm


class Block(Module):
    """x = x + attn(ln1(x));  x = x + ffn(ln2(x)).

    Each sub-layer reads a normalised copy of the residual stream and adds its
    result back, so the stream itself is never normalised: gradients reach
    early layers through the identity path unchanged.

    Args:
        d_model, n_heads: width and head count of the attention.
        d_ff: FFN hidden width (default ``4 * d_model``).
        bias: biases in every Linear and LayerNorm.
        dropout: dropout probability inside attention and FFN.
        gelu_approximate: ``"tanh"`` (default) or ``"none"``.

    Shapes:
        forward: x ``(B, T, C)`` -> ``(B, T, C)``; backward: dout -> dx, same shape.

    ``forward(x, kv_cache=layer_cache, start_pos=p)`` decodes with a
    :class:`~numpy_impl.kv_cache.LayerKVCache` (x = the tokens at positions
    ``p .. p + T - 1``); inference only.
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
    ):
        self.ln1 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.attn = CausalSelfAttention(d_model, n_heads, bias, dropout, dtype=dtype, rng=rng)
        self.ln2 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.ffn = FeedForward(d_model, d_ff, bias, dropout, gelu_approximate, dtype, rng)

    def forward(self, x: np.ndarray, kv_cache=None, start_pos: int = 0) -> np.ndarray:
        if kv_cache is not None:  # decoding with a LayerKVCache (chapter 12): inference only
            x = x + self.attn(self.ln1(x), kv_cache=kv_cache, start_pos=start_pos)
            return x + self.ffn(self.ln2(x))
        ### BEGIN SOLUTION ch07
        ### TODO: x = x + attn(ln1(x)), then x = x + ffn(ln2(x)); never modify x in place
        x = x + self.attn(self.ln1(x))  # read from the stream, write back
        x = x + self.ffn(self.ln2(x))
        return x
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch07
        ### TODO: the forward in reverse: each residual add sends dout down both of its branches
        ###   (the identity and the sub-layer), so their gradients add up
        # each residual add sends the gradient down both branches, so they sum
        dx = dout + self.ln2.backward(self.ffn.backward(dout))
        dx += self.ln1.backward(self.attn.backward(dx))
        return dx
        ### END SOLUTION
