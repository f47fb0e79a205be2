"""The bidirectional (BERT-style) encoder and a transformer classifier on top of it.

An encoder block is the GPT's :class:`~numpy_impl.block.Block` without the causal mask:
each position attends to every real position, before or after it (Devlin et al. 2019).
The classifier is that of the tutorial "Getting Started with Transformers in PyTorch":

    logits = head(mean_pool(ln_f(blocks(drop(tok_emb(idx) + PE)))))

with PE the sinusoids of Vaswani et al. 2017 (sec. 3.5). Padding is kept out of attention
and of the mean by ``token_mask``, bool ``(B, T)``, True for a real token (docs/masks.md).
"""

from __future__ import annotations

import math

import numpy as np

from .activations import ReLU
from .block import Block
from .dropout import Dropout
from .embedding import Embedding
from .linear import Linear
from .masks import check_token_mask, key_padding_attn_mask
from .module import Module, ModuleList, check_float, check_ids
from .norm import LayerNorm
from .positional import SinusoidalPositionalEncoding


def check_model_sizes(**sizes) -> None:
    """Raise ``ValueError`` naming the first size that is not a positive int, or a
    ``d_model`` not divisible by ``n_heads``."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if "d_model" in sizes and "n_heads" in sizes and sizes["d_model"] % sizes["n_heads"]:
        raise ValueError(
            f"d_model={sizes['d_model']} must be divisible by n_heads={sizes['n_heads']}"
        )


class Encoder(Module):
    """Bidirectional pre-norm blocks (``is_causal=False``), then the final LayerNorm.

    ``d_model``, ``n_heads``, ``d_ff`` (default ``4 * d_model``), ``bias``, ``dropout``: as in
    :class:`~numpy_impl.block.Block`. ``gelu_approximate``: ``"none"`` (exact, as the
    tutorial) or ``"tanh"``. x ``(B, T, C)``, attn_mask broadcastable to
    ``(B, n_heads, T, T)`` (bool True = attend, or float added) -> ``(B, T, C)``.
    """

    def __init__(
        self,
        n_layers,
        d_model,
        n_heads,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="none",
        *,
        dtype=np.float32,
        rng=None,
    ):
        check_model_sizes(n_layers=n_layers, d_model=d_model, n_heads=n_heads)
        self.blocks = ModuleList(
            Block(d_model, n_heads, d_ff, bias, dropout, gelu_approximate, dtype=dtype, rng=rng)
            for _ in range(n_layers)
        )
        self.ln_f = LayerNorm(d_model, bias=bias, dtype=dtype)

    def forward(self, x: np.ndarray, attn_mask=None) -> np.ndarray:
        for block in self.blocks:
            x = block(x, attn_mask=attn_mask, is_causal=False)  # bidirectional
        return self.ln_f(x)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx = self.ln_f.backward(dout)
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        return dx


class MeanPool(Module):
    """Mean of each sequence's vectors over its real tokens (m_bt = token_mask):

        pooled_b = sum_t m_bt x_bt / max(n_b, 1),   n_b = sum_t m_bt

    A row with no real token gives zeros, not NaN; no mask is the plain mean over T.
    x ``(B, T, C)``, token_mask bool ``(B, T)`` or None -> ``(B, C)``.
    Raises ValueError: x not 3-D, token_mask not ``(B, T)``; TypeError: token_mask not bool.
    """

    _caches = ("_weights",)  # what backward reads; dropped under no_grad()

    def __init__(self):
        self._weights = None

    def forward(self, x: np.ndarray, token_mask=None) -> np.ndarray:
        check_float(x)
        if x.ndim != 3:
            raise ValueError(f"x: expected shape (B, T, d_model), got {x.shape}")
        B, T, _ = x.shape
        if token_mask is not None:
            token_mask = np.asarray(token_mask)
            check_token_mask(token_mask, (B, T))
        else:
            token_mask = np.ones((B, T), dtype=bool)
        ### BEGIN SOLUTION ch15
        ### TODO: the mean over the real tokens: weights w_bt = m_bt / max(n_b, 1) (B, T),
        ###   pooled_b = sum_t w_bt x_bt (B, C); keep w in self._weights for backward
        counts = token_mask.sum(axis=1, keepdims=True)  # (B, 1): real tokens per row
        weights = token_mask / np.maximum(counts, 1)  # (B, T); an all-padding row is all 0
        self._weights = weights.astype(x.dtype)
        return np.einsum("bt,btc->bc", self._weights, x)  # (B, T) . (B, T, C) -> (B, C)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> np.ndarray:
        ### BEGIN SOLUTION ch15
        ### TODO: each position gets its weight times its row's upstream gradient: (B, T, C)
        dx = self._weights[:, :, None] * dout[:, None, :]  # (B, T, 1) * (B, 1, C)
        self._weights = None
        return dx
        ### END SOLUTION


class ClassifierHead(Module):
    """Linear - ReLU - Dropout - Linear, the tutorial's head (its ``hidden`` is ``d_model // 2``).

    x ``(B, d_model)`` -> logits ``(B, num_classes)``.
    """

    def __init__(
        self, d_model, hidden, num_classes, dropout=0.0, bias=True, *, dtype=np.float32, rng=None
    ):
        check_model_sizes(d_model=d_model, hidden=hidden, num_classes=num_classes)
        self.fc1 = Linear(d_model, hidden, bias=bias, dtype=dtype, rng=rng)
        self.act = ReLU()
        self.dropout = Dropout(dropout)
        self.fc2 = Linear(hidden, num_classes, bias=bias, dtype=dtype, rng=rng)

    def forward(self, x: np.ndarray) -> np.ndarray:
        h = self.dropout(self.act(self.fc1(x)))  # (B, d_model) -> (B, hidden)
        return self.fc2(h)  # (B, hidden) -> (B, num_classes)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dh = self.dropout.backward(self.fc2.backward(dout))  # (B, hidden)
        return self.fc1.backward(self.act.backward(dh))  # (B, d_model)


class TransformerClassifier(Module):
    """Encoder-only transformer classifier (the tutorial's; Vaswani et al. 2017 encoder, pre-norm).

        x = drop(tok_emb(idx) + PE[:T])            (B, T, C)
        x = encoder(x, key-padding mask)           blocks, then ln_f
        logits = head(mean over the real tokens)   (B, num_classes)

    Init: :func:`init_transformer_weights`, the same scheme in both backends. Defaults are
    the tutorial's (3 layers, 4 heads, d_model 256, d_ff 512, dropout 0.1, exact GELU);
    ``block_size`` is the longest sequence. idx ``(B, T)`` int, token_mask bool ``(B, T)`` or
    None -> logits ``(B, num_classes)``; backward: dlogits -> None, fills every ``.grad``.

    Raises ValueError: a size not a positive int, ``d_model`` not divisible by ``n_heads``,
    idx not ``(B, T)`` with ``1 <= T <= block_size``, an id out of range, token_mask not
    ``(B, T)``. TypeError: non-integer idx, non-boolean token_mask.
    """

    def __init__(
        self,
        vocab_size,
        num_classes,
        block_size=256,
        n_layers=3,
        n_heads=4,
        d_model=256,
        d_ff=512,
        dropout=0.1,
        bias=True,
        gelu_approximate="none",
        *,
        seed=None,
        dtype=np.float32,
    ):
        check_model_sizes(
            vocab_size=vocab_size,
            num_classes=num_classes,
            block_size=block_size,
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
        )
        rng = np.random.default_rng(seed)
        self.vocab_size, self.num_classes, self.block_size = vocab_size, num_classes, block_size
        self.n_layers = n_layers
        self.tok_emb = Embedding(vocab_size, d_model, dtype=dtype, rng=rng)
        self.pos_enc = SinusoidalPositionalEncoding(block_size, d_model, dtype=dtype)
        self.drop = Dropout(dropout)
        self.encoder = Encoder(
            n_layers, d_model, n_heads, d_ff, bias, dropout, gelu_approximate, dtype=dtype, rng=rng
        )
        self.pool = MeanPool()
        head_width = max(1, d_model // 2)
        self.head = ClassifierHead(
            d_model, head_width, num_classes, dropout, bias, dtype=dtype, rng=rng
        )
        init_transformer_weights(self, n_layers, rng=rng)

    def forward(self, idx: np.ndarray, token_mask=None) -> np.ndarray:
        idx = check_sequence_ids(idx, self.vocab_size, self.block_size, "idx")
        B, T = idx.shape
        attn_mask = None
        if token_mask is not None:
            token_mask = np.asarray(token_mask)
            check_token_mask(token_mask, (B, T))
            attn_mask = key_padding_attn_mask(token_mask)  # (B, 1, 1, T)
        ### BEGIN SOLUTION ch15
        ### TODO: token embeddings + positional encodings, drop, encoder (with attn_mask), pool
        ###   over the real tokens (token_mask), head: idx (B, T) -> logits (B, num_classes)
        x = self.tok_emb(idx) + self.pos_enc(T)  # (B, T, C) + (T, C) -> (B, T, C)
        x = self.encoder(self.drop(x), attn_mask=attn_mask)  # (B, T, C), ln_f applied
        pooled = self.pool(x, token_mask)  # (B, C): padding left out of the mean
        return self.head(pooled)  # (B, num_classes)
        ### END SOLUTION

    def backward(self, dlogits: np.ndarray) -> None:
        ### BEGIN SOLUTION ch15
        ### TODO: the forward in reverse, down to the token embedding (the encoding is fixed)
        dx = self.pool.backward(self.head.backward(dlogits))  # (B, C) -> (B, T, C)
        dx = self.drop.backward(self.encoder.backward(dx))
        self.tok_emb.backward(dx)
        ### END SOLUTION


# -- shared by the encoder models ---------------------------------------------------------------
def check_sequence_ids(idx, vocab_size: int, block_size: int, name: str) -> np.ndarray:
    """Validate a ``(B, T)`` batch of ids, ``1 <= T <= block_size``; return int64. Raises
    ValueError (rank, T, ids outside ``[0, vocab_size)``), TypeError (non-integer ids)."""
    idx = np.asarray(idx)
    if idx.ndim != 2:
        raise ValueError(f"{name}: expected shape (B, T), got {idx.shape}")
    if not 1 <= idx.shape[1] <= block_size:
        raise ValueError(
            f"{name}: sequence length T={idx.shape[1]} must lie in [1, block_size={block_size}]"
        )
    return check_ids(idx, vocab_size, name)


def init_transformer_weights(model: Module, n_layers: int, *, rng: np.random.Generator) -> None:
    """The initialisation of :class:`TransformerClassifier` and the seq2seq model.

    Embeddings N(0, 1) (``nn.Embedding``'s, on the sinusoids' scale); every Linear
    N(0, 0.02), biases 0; residual projections (every ``out_proj``, ``fc2``)
    N(0, 0.02 / sqrt(2 n_layers)), as GPT-2; LayerNorms 1, 0. State-dict order, so a seed
    gives the same weights every time.
    """
    resid_std = 0.02 / math.sqrt(2 * n_layers)
    for name, mod in model.named_modules():
        if isinstance(mod, Embedding):
            mod.weight.data[...] = rng.standard_normal(mod.weight.shape)
        elif isinstance(mod, Linear):
            residual = name.endswith(("attn.out_proj", "ffn.fc2"))
            std = resid_std if residual else 0.02
            mod.weight.data[...] = rng.normal(0.0, std, mod.weight.shape)
            if mod.bias is not None:
                mod.bias.data[...] = 0.0
