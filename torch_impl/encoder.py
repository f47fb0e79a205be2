"""The bidirectional (BERT-style) encoder and a transformer classifier, twin of
``numpy_impl/encoder.py``.

An encoder block is the GPT's :class:`~torch_impl.block.Block` without the
causal mask: every position attends to every real position of its sequence, in
both directions (Devlin et al. 2019). The classifier is the one of the tutorial
"Getting Started with Transformers in PyTorch":

    logits = head(mean_pool(ln_f(blocks(drop(tok_emb(idx) + PE)))))

Masks follow twinformer's convention (docs/masks.md): ``token_mask`` is bool
``(B, T)``, True for a real token; ``attn_mask`` is bool, True = may attend.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from .activations import ReLU
from .block import Block
from .dropout import Dropout
from .embedding import Embedding, check_token_ids
from .linear import Linear, check_float
from .masks import check_token_mask, key_padding_attn_mask
from .norm import LayerNorm
from .positional import SinusoidalPositionalEncoding


def check_model_sizes(**sizes) -> None:
    """Raise ``ValueError`` naming the first size that is not a positive int, or a
    ``d_model`` not divisible by ``n_heads``."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")
    if "d_model" in sizes and "n_heads" in sizes and sizes["d_model"] % sizes["n_heads"]:
        raise ValueError(
            f"d_model={sizes['d_model']} must be divisible by n_heads={sizes['n_heads']}"
        )


class Encoder(nn.Module):
    """A stack of bidirectional pre-norm blocks and the final LayerNorm.

    Args:
        n_layers, d_model, n_heads, d_ff, bias, dropout, gelu_approximate: as the NumPy twin.
        attn_impl, dtype: PyTorch only (see :class:`~torch_impl.attention.SelfAttention`).

    Shapes: x ``(B, T, C)``, attn_mask -> ``(B, T, C)``.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "none",
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_model_sizes(n_layers=n_layers, d_model=d_model, n_heads=n_heads)
        self.blocks = nn.ModuleList(
            Block(
                d_model,
                n_heads,
                d_ff,
                bias,
                dropout,
                gelu_approximate,
                attn_impl=attn_impl,
                dtype=dtype,
            )
            for _ in range(n_layers)
        )
        self.ln_f = LayerNorm(d_model, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, attn_mask=attn_mask, is_causal=False)  # bidirectional
        return self.ln_f(x)


class MeanPool(nn.Module):
    """Mean over each sequence's real tokens: ``sum_t m_bt x_bt / max(n_b, 1)``.

    A row without a real token gives zeros (not NaN). Without a mask, the plain
    mean over T.

    Shapes:
        x ``(B, T, C)``, token_mask bool ``(B, T)`` or None -> ``(B, C)``.

    Raises:
        ValueError: x not 3-D; token_mask not ``(B, T)`` of x. TypeError: not bool.
    """

    def forward(self, x: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        check_float(x)
        if x.dim() != 3:
            raise ValueError(f"x: expected shape (B, T, d_model), got {tuple(x.shape)}")
        if token_mask is None:
            return x.mean(dim=1)
        check_token_mask(token_mask, tuple(x.shape[:2]))
        m = token_mask.to(x.dtype)  # (B, T)
        counts = m.sum(dim=1, keepdim=True).clamp(min=1.0)  # (B, 1)
        return torch.einsum("bt,btc->bc", m / counts, x)


class ClassifierHead(nn.Module):
    """Linear - ReLU - Dropout - Linear (the tutorial's classifier head).

    Shapes: x ``(B, d_model)`` -> logits ``(B, num_classes)``.
    """

    def __init__(
        self,
        d_model: int,
        hidden: int,
        num_classes: int,
        dropout: float = 0.0,
        bias: bool = True,
        *,
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_model_sizes(d_model=d_model, hidden=hidden, num_classes=num_classes)
        self.fc1 = Linear(d_model, hidden, bias=bias, dtype=dtype)
        self.act = ReLU()
        self.dropout = Dropout(dropout)
        self.fc2 = Linear(hidden, num_classes, bias=bias, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(self.act(self.fc1(x)))  # (B, d_model) -> (B, hidden)
        return self.fc2(h)  # (B, hidden) -> (B, num_classes)


class TransformerClassifier(nn.Module):
    """Encoder-only transformer classifier (the tutorial's), twin of the NumPy one.

        x = drop(tok_emb(idx) + PE[:T]);  x = encoder(x, key-padding mask)
        logits = head(mean over the real tokens)

    Initialisation: embedding N(0, 1), every Linear N(0, 0.02) with zero biases,
    residual projections N(0, 0.02 / sqrt(2 n_layers)); from torch's global
    generator (``torch.manual_seed``).

    Args:
        vocab_size, num_classes, block_size, n_layers, n_heads, d_model, d_ff,
        dropout, bias, gelu_approximate: as in the NumPy twin.
        attn_impl: ``"sdpa"`` or ``"explicit"`` for every attention.
        dtype: parameter dtype.

    Shapes:
        idx ``(B, T)`` integer, token_mask bool ``(B, T)`` or None -> ``(B, num_classes)``.

    Raises:
        ValueError / TypeError: as the NumPy twin.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        block_size: int = 256,
        n_layers: int = 3,
        n_heads: int = 4,
        d_model: int = 256,
        d_ff: int | None = 512,
        dropout: float = 0.1,
        bias: bool = True,
        gelu_approximate: str = "none",
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_model_sizes(
            vocab_size=vocab_size,
            num_classes=num_classes,
            block_size=block_size,
            n_layers=n_layers,
            d_model=d_model,
            n_heads=n_heads,
        )
        self.vocab_size, self.num_classes, self.block_size = vocab_size, num_classes, block_size
        self.n_layers = n_layers
        self.tok_emb = Embedding(vocab_size, d_model, dtype=dtype)
        self.pos_enc = SinusoidalPositionalEncoding(block_size, d_model, dtype=dtype)
        self.drop = Dropout(dropout)
        self.encoder = Encoder(
            n_layers,
            d_model,
            n_heads,
            d_ff,
            bias,
            dropout,
            gelu_approximate,
            attn_impl=attn_impl,
            dtype=dtype,
        )
        self.pool = MeanPool()
        head_width = max(1, d_model // 2)
        self.head = ClassifierHead(d_model, head_width, num_classes, dropout, bias, dtype=dtype)
        init_transformer_weights(self, n_layers)

    def forward(self, idx: torch.Tensor, token_mask: torch.Tensor | None = None) -> torch.Tensor:
        idx = check_sequence_ids(idx, self.vocab_size, self.block_size, "idx")
        B, T = idx.shape
        attn_mask = None
        if token_mask is not None:
            check_token_mask(token_mask, (B, T))
            attn_mask = key_padding_attn_mask(token_mask)  # (B, 1, 1, T)
        x = self.tok_emb(idx) + self.pos_enc(T)  # (B, T, C)
        x = self.encoder(self.drop(x), attn_mask=attn_mask)
        return self.head(self.pool(x, token_mask))  # (B, num_classes)


def check_sequence_ids(
    idx: torch.Tensor, vocab_size: int, block_size: int, name: str
) -> torch.Tensor:
    """Validate a ``(B, T)`` batch of ids with ``1 <= T <= block_size``; return them as long.

    Raises:
        ValueError: wrong rank, T out of range, ids outside ``[0, vocab_size)``.
        TypeError: ids that are not an integer tensor.
    """
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"{name}: expected an integer torch.Tensor, got {type(idx).__name__}")
    if idx.dim() != 2:
        raise ValueError(f"{name}: expected shape (B, T), got {tuple(idx.shape)}")
    if not 1 <= idx.shape[1] <= block_size:
        raise ValueError(
            f"{name}: sequence length T={idx.shape[1]} must lie in [1, block_size={block_size}]"
        )
    return check_token_ids(idx, vocab_size, name, bound="vocab_size")


@torch.no_grad()
def init_transformer_weights(model: nn.Module, n_layers: int) -> None:
    """Embeddings N(0, 1); Linear N(0, 0.02), biases 0; residual projections
    (``attn.out_proj``, ``ffn.fc2``) N(0, 0.02 / sqrt(2 n_layers))."""
    resid_std = 0.02 / math.sqrt(2 * n_layers)
    for name, mod in model.named_modules():
        if isinstance(mod, Embedding):
            nn.init.normal_(mod.weight)
        elif isinstance(mod, Linear):
            residual = name.endswith(("attn.out_proj", "ffn.fc2"))
            nn.init.normal_(mod.weight, 0.0, resid_std if residual else 0.02)
            if mod.bias is not None:
                nn.init.zeros_(mod.bias)
