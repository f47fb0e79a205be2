"""A GPT-2 style decoder-only language model (Radford et al. 2019), twin of ``numpy_impl/gpt.py``.

With RoPE, RMSNorm, SwiGLU and no biases it is a Llama-style decoder
(Touvron et al. 2023, sec. 2.2).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .activations import GELU_APPROXIMATIONS
from .attention_checks import check_sizes
from .block import Block, check_block_options
from .dropout import Dropout
from .embedding import Embedding, check_token_ids
from .ffn import SwiGLUFeedForward
from .kv_cache import KVCache
from .linear import Linear
from .norm import LayerNorm, RMSNorm
from .positional import LearnedPositionalEmbedding
from .rope import ROPE_LAYOUTS, check_rope_scaling

POS_EMBS = ("learned", "rope")
#: The largest vocab_size, block_size, d_model... a config accepts (an int32 index).
MAX_SIZE = 2**31 - 1


@dataclass
class GPTConfig:
    """Hyperparameters of :class:`GPT`, field for field the NumPy twin's (described there).

    Llama-style: ``pos_emb="rope", norm="rmsnorm", ffn="swiglu", bias=False``.
    ``ValueError`` names the first field out of range (RoPE needs an even head dimension).
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
    pos_emb: str = "learned"
    rope_layout: str = "interleaved"
    rope_base: float = 10000.0
    norm: str = "layernorm"
    ffn: str = "gelu"
    norm_position: str = "pre"
    n_kv_heads: int | None = None
    head_dim: int | None = None
    qkv_bias: bool | None = None
    norm_eps: float = 1e-5
    rope_scaling: dict | None = None

    def __post_init__(self) -> None:
        optional = ("d_ff", "n_kv_heads", "head_dim")  # None: 4 d_model, n_heads, d_model / n_heads
        for name in ("vocab_size", "block_size", "n_layers", "n_heads", "d_model", *optional):
            value = getattr(self, name)
            if name in optional and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SIZE:
                raise ValueError(
                    f"{name}: expected an integer in [1, 2**31 - 1]"
                    f"{' or None' if name in optional else ''}, got {value!r}"
                )
        for name in ("bias", "tie_weights", "qkv_bias"):  # "false" would read as True
            value = getattr(self, name)
            if not isinstance(value, bool) and not (name == "qkv_bias" and value is None):
                raise ValueError(f"{name}: expected True or False, got {value!r}")
        _, d_k = check_sizes(self.d_model, self.n_heads, self.n_kv_heads, self.head_dim)
        eps = self.norm_eps
        if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0 < eps < 1:
            raise ValueError(f"norm_eps: expected a number in (0, 1), got {eps!r}")
        self.rope_scaling = check_rope_scaling(self.rope_scaling)
        if self.rope_scaling is not None and self.pos_emb != "rope":
            raise ValueError("rope_scaling: scales RoPE's frequencies; needs pos_emb='rope'")
        dropout = self.dropout  # "0.1" from a config.json is not a number
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, int | float)
            or not 0 <= dropout < 1
        ):
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
        if self.gelu_approximate not in GELU_APPROXIMATIONS:
            raise ValueError(
                f"gelu_approximate: expected 'tanh' or 'none', got {self.gelu_approximate!r}"
            )
        if self.pos_emb not in POS_EMBS:
            raise ValueError(f"pos_emb: expected one of {POS_EMBS}, got {self.pos_emb!r}")
        if self.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(
                f"rope_layout: expected one of {ROPE_LAYOUTS}, got {self.rope_layout!r}"
            )
        if not self.rope_base > 1.0:
            raise ValueError(f"rope_base: expected a frequency base > 1, got {self.rope_base!r}")
        if self.pos_emb == "rope" and d_k % 2:
            raise ValueError(
                f"d_model={self.d_model}, n_heads={self.n_heads}: RoPE needs an even head "
                f"dimension d_k (head_dim or d_model / n_heads), got {d_k}"
            )
        check_block_options(self.norm, self.ffn, self.norm_position)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain, JSON-ready dict (field order preserved)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GPTConfig:
        """Build a config from :meth:`to_dict` output (or an older, shorter one).

        Raises:
            ValueError: keys that are not fields (all listed), a missing
                ``vocab_size``, or any error of the field checks.
        """
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(
                f"GPTConfig.from_dict: unknown keys {unknown}; expected a subset of {names}"
            )
        if "vocab_size" not in d:
            raise ValueError("GPTConfig.from_dict: missing required key 'vocab_size'")
        return cls(**d)


class GPT(nn.Module):
    """GPT-2 style language model (Radford et al. 2019), submodules in the NumPy twin's order.

    ``logits = head(ln_f(blocks(drop(tok_emb(idx) + pos_emb(T)))))``; ``pos_emb`` is None
    with RoPE. With ``tie_weights`` ``head.weight`` *is* ``tok_emb.weight`` (Press & Wolf 2017).
    Init: GPT-2's, as in nanoGPT (see :meth:`reset_parameters`); seed with ``torch.manual_seed``.

    Shapes: idx ``(B, T)`` integer, ``1 <= T <= block_size`` -> logits ``(B, T, vocab_size)``.
    With ``kv_cache=model.new_kv_cache()``, ``model(idx, kv_cache=cache, start_pos=p)`` scores
    positions ``p .. p + T - 1`` against cached ``0 .. p - 1`` (``start_pos=None``: append).
    Raises ``TypeError`` for non-integer ids or ``start_pos``; ``ValueError`` for a bad shape,
    ids outside ``[0, vocab_size)``, or ``start_pos`` outside ``[0, kv_cache.length]``.
    """

    def __init__(
        self, config: GPTConfig, *, attn_impl: str = "sdpa", dtype: torch.dtype | None = None
    ):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config: expected a GPTConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.tok_emb = Embedding(c.vocab_size, c.d_model, dtype=dtype)
        self.pos_emb = None
        if c.pos_emb == "learned":
            self.pos_emb = LearnedPositionalEmbedding(c.block_size, c.d_model, dtype=dtype)
        self.drop = Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            [
                Block(
                    c.d_model,
                    c.n_heads,
                    c.d_ff,
                    c.bias,
                    c.dropout,
                    c.gelu_approximate,
                    c.norm,
                    c.ffn,
                    c.norm_position,
                    c.rope_layout if c.pos_emb == "rope" else None,
                    c.rope_base,
                    c.n_kv_heads,
                    c.rope_scaling,
                    c.head_dim,
                    c.qkv_bias,
                    c.norm_eps,
                    attn_impl=attn_impl,
                    dtype=dtype,
                )
                for _ in range(c.n_layers)
            ]
        )
        if c.norm == "rmsnorm":
            self.ln_f = RMSNorm(c.d_model, c.norm_eps, dtype=dtype)
        else:
            self.ln_f = LayerNorm(c.d_model, c.norm_eps, bias=c.bias, dtype=dtype)
        self.head = Linear(c.d_model, c.vocab_size, bias=False, dtype=dtype)
        if c.tie_weights:
            self.head.weight = self.tok_emb.weight  # one tensor, two roles
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 init: weights N(0, 0.02), biases 0, norm gains 1;
        residual output projections std 0.02 / sqrt(2 n_layers)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (Embedding, LearnedPositionalEmbedding)):
                nn.init.normal_(module.weight, mean=0.0, std=0.02)
            elif isinstance(module, LayerNorm):
                nn.init.ones_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RMSNorm):
                nn.init.ones_(module.weight)
        # two residual branches per block: keep the stream's variance flat with depth (GPT-2)
        residual_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.out_proj.weight, mean=0.0, std=residual_std)
            ffn_out = block.ffn.w2 if isinstance(block.ffn, SwiGLUFeedForward) else block.ffn.fc2
            nn.init.normal_(ffn_out.weight, mean=0.0, std=residual_std)

    @property
    def attn_impl(self) -> str:
        """The attention implementation of the blocks; assigning sets it on every block."""
        return self.blocks[0].attn.attn_impl

    @attn_impl.setter
    def attn_impl(self, value: str) -> None:
        for block in self.blocks:
            block.attn.attn_impl = value

    def forward(
        self, idx: torch.Tensor, kv_cache: KVCache | None = None, start_pos: int | None = None
    ) -> torch.Tensor:
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"idx: expected an integer torch.Tensor, got {type(idx).__name__}")
        if idx.dim() != 2:
            raise ValueError(f"idx: expected shape (B, T), got {tuple(idx.shape)}")
        B, T = idx.shape
        if not 1 <= T <= self.config.block_size:
            raise ValueError(
                f"idx: sequence length T={T} must lie in [1, block_size={self.config.block_size}]"
            )
        idx = check_token_ids(idx, self.config.vocab_size, bound="vocab_size")
        start_pos = self._check_decoding(T, kv_cache, start_pos)  # 0 without a cache
        caches = [None] * len(self.blocks) if kv_cache is None else kv_cache.layers

        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        if self.pos_emb is not None:  # positions start_pos .. start_pos + T - 1, over the batch
            x = x + self.pos_emb(T, start_pos)  # (B, T, C) + (T, C)
        x = self.drop(x)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, is_causal=True, start_pos=start_pos, kv_cache=cache)
        x = self.ln_f(x)
        return self.head(x)  # (B, T, C) -> (B, T, vocab_size)

    # -- decoding with a KV cache (chapter 12) ---------------------------------------------
    def new_kv_cache(self) -> KVCache:
        """An empty :class:`~torch_impl.kv_cache.KVCache` for this model (one layer per block)."""
        return KVCache(self.config.n_layers, self.config.block_size)

    def _check_decoding(self, T: int, kv_cache: KVCache | None, start_pos: int | None) -> int:
        """The position of idx's first token: 0 without a cache; validated with one."""
        if kv_cache is None and start_pos is None:
            return 0
        if not isinstance(kv_cache, KVCache) or len(kv_cache.layers) != len(self.blocks):
            raise ValueError(
                f"kv_cache: expected a KVCache with n_layers={len(self.blocks)} "
                "(model.new_kv_cache())"
            )
        start_pos = kv_cache.length if start_pos is None else start_pos
        if isinstance(start_pos, bool) or not isinstance(start_pos, numbers.Integral):
            raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
        start_pos = int(start_pos)  # np.int64 too: torch's kernels want a Python int
        if not 0 <= start_pos <= kv_cache.length:
            raise ValueError(
                f"start_pos: must lie in [0, kv_cache.length={kv_cache.length}], got {start_pos}"
            )
        if start_pos + T > self.config.block_size:
            raise ValueError(
                f"idx: positions {start_pos} .. {start_pos + T - 1} exceed "
                f"block_size={self.config.block_size}"
            )
        return start_pos

    def num_parameters(self) -> int:
        """Number of scalar parameters; the tied embedding/head matrix is counted once."""
        return sum(p.numel() for p in self.parameters())
