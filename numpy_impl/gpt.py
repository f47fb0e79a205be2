"""The GPT language model: embeddings, N pre-norm blocks, final LayerNorm, tied head.

Radford et al. 2019 (GPT-2), in the form of Karpathy's nanoGPT.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from .attention import CausalSelfAttention
from .block import Block
from .dropout import Dropout
from .embedding import Embedding
from .linear import Linear
from .module import Module, ModuleList, check_ids
from .norm import LayerNorm
from .positional import LearnedPositionalEmbedding


@dataclass
class GPTConfig:
    """Hyperparameters of a GPT; the defaults are nanoGPT's CPU "baby GPT".

    Attributes:
        vocab_size: number of token ids V.
        block_size: longest context T the model accepts.
        n_layers, n_heads, d_model: depth, heads per attention, width C.
        d_ff: FFN hidden width (None = 4 * d_model).
        dropout: dropout probability everywhere (0 = off).
        bias: biases in Linear and LayerNorm layers (GPT-2 has them).
        tie_weights: the LM head reuses the token-embedding matrix.
        gelu_approximate: ``"tanh"`` (GPT-2's form, the default) or ``"none"``.

    Raises:
        ValueError: naming the offending field.
    """

    vocab_size: int
    block_size: int = 64
    n_layers: int = 4
    n_heads: int = 4
    d_model: int = 128
    d_ff: int | None = None
    dropout: float = 0.0
    bias: bool = True
    tie_weights: bool = True
    gelu_approximate: str = "tanh"

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.d_ff is not None and (not isinstance(self.d_ff, int) or self.d_ff < 1):
            raise ValueError(f"d_ff: expected a positive integer or None, got {self.d_ff!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.gelu_approximate not in ("tanh", "none"):
            raise ValueError(
                f"gelu_approximate: expected 'tanh' or 'none', got {self.gelu_approximate!r}"
            )

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"config: unknown GPTConfig keys {unknown}")
        return cls(**d)


class GPT(Module):
    """Decoder-only transformer language model.

    logits = head(ln_f(blocks(tok_emb(idx) + pos_emb(T))))

    Initialisation (GPT-2, as in nanoGPT): every Linear weight and both
    embeddings N(0, 0.02), biases 0, LayerNorm weight 1; the two projections
    that write into the residual stream (``attn.out_proj`` and ``ffn.fc2``) get
    std 0.02 / sqrt(2 n_layers), so the stream's variance does not grow with depth.

    With ``tie_weights`` the LM head *is* the token-embedding Parameter, so its
    backward adds into the same gradient buffer as the embedding's scatter-add.

    Args:
        config: a :class:`GPTConfig`.
        seed: seed for the initial weights.
        dtype: float32 to train, float64 for parity tests.

    Shapes:
        forward: idx ``(B, T)`` integer -> logits ``(B, T, vocab_size)``.
        backward: dlogits ``(B, T, vocab_size)`` -> None; fills every ``.grad``.

    Raises:
        TypeError: idx is not an integer array.
        ValueError: idx not of rank 2, T not in ``[1, block_size]``, or an id
            outside ``[0, vocab_size)``.
    """

    def __init__(self, config: GPTConfig, seed=None, dtype=np.float32):
        self.config = config
        rng = np.random.default_rng(seed)
        c = config
        self.tok_emb = Embedding(c.vocab_size, c.d_model, dtype=dtype, rng=rng)
        self.pos_emb = LearnedPositionalEmbedding(c.block_size, c.d_model, dtype=dtype, rng=rng)
        self.drop = Dropout(c.dropout)
        self.blocks = ModuleList(
            Block(c.d_model, c.n_heads, c.d_ff, c.bias, c.dropout, c.gelu_approximate, dtype, rng)
            for _ in range(c.n_layers)
        )
        self.ln_f = LayerNorm(c.d_model, bias=c.bias, dtype=dtype)
        self.head = Linear(c.d_model, c.vocab_size, bias=False, dtype=dtype, rng=rng)
        if c.tie_weights:
            ### BEGIN SOLUTION ch08
            ### TODO: tie the LM head to the token embedding: one Parameter object, two uses
            self.head.weight = self.tok_emb.weight  # one Parameter, two uses
            ### END SOLUTION
        self._init_weights(rng, dtype)
        # Every dropout mask (the Dropout layers and attention's dropout_p) comes from one
        # generator of the model's own, spawned from `seed` (so the weights' stream is
        # untouched): a seeded model drops the same units on every run, and its state,
        # `dropout_rng.bit_generator.state` (a JSON-ready dict), is what a checkpoint
        # saves to resume a run exactly. The torch twin draws from torch's global generator.
        self.dropout_rng = rng.spawn(1)[0]
        for _, mod in self.named_modules():
            if isinstance(mod, (Dropout, CausalSelfAttention)):
                mod._rng = self.dropout_rng

    def _init_weights(self, rng: np.random.Generator, dtype) -> None:
        for _, mod in self.named_modules():
            if isinstance(mod, (Linear, Embedding, LearnedPositionalEmbedding)):
                mod.weight.data[...] = rng.normal(0.0, 0.02, mod.weight.shape)
            if isinstance(mod, Linear) and mod.bias is not None:
                mod.bias.data[...] = 0.0
        resid_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:  # projections that write into the residual stream
            for p in (block.attn.out_proj.weight, block.ffn.fc2.weight):
                p.data[...] = rng.normal(0.0, resid_std, p.shape)

    def forward(self, idx: np.ndarray) -> np.ndarray:
        idx = np.asarray(idx)
        if idx.ndim != 2:
            raise ValueError(f"idx: expected shape (B, T), got {idx.shape}")
        B, T = idx.shape
        if not 1 <= T <= self.config.block_size:
            raise ValueError(
                f"idx: sequence length T={T} must lie in [1, block_size={self.config.block_size}]"
            )
        idx = check_ids(idx, self.config.vocab_size, "idx")
        ### BEGIN SOLUTION ch08
        ### TODO: token + position embeddings, drop, every block in order, ln_f, head:
        ###   idx (B, T) -> logits (B, T, vocab_size)
        x = self.tok_emb(idx) + self.pos_emb(T)  # (B, T, C) + (T, C) -> (B, T, C)
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        return self.head(x)  # (B, T, C) -> (B, T, vocab_size)
        ### END SOLUTION

    def backward(self, dlogits: np.ndarray) -> None:
        ### BEGIN SOLUTION ch08
        ### TODO: the forward in reverse, down to both embeddings; the position vectors are shared
        ###   by every sequence of the batch, so their gradient is summed over B; return None
        dx = self.head.backward(dlogits)  # (B, T, V) -> (B, T, C)
        dx = self.ln_f.backward(dx)
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        dx = self.drop.backward(dx)
        self.pos_emb.backward(dx.sum(axis=0))  # position vectors are shared over the batch
        self.tok_emb.backward(dx)
        ### END SOLUTION
