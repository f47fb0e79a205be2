"""The GPT language model: embeddings, N pre-norm blocks, final LayerNorm, tied head.

Radford et al. 2019 (GPT-2), in the form of Karpathy's nanoGPT. The same class,
configured with RoPE, RMSNorm, SwiGLU and no biases, is a Llama-style decoder
(Touvron et al. 2023, sec. 2.2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import numpy as np

from .attention_checks import check_sizes
from .block import Block, check_block_options
from .dropout import Dropout
from .embedding import Embedding
from .ffn import SwiGLUFeedForward
from .kv_cache import KVCache
from .linear import Linear
from .module import Module, ModuleList, check_ids
from .norm import LayerNorm, RMSNorm
from .positional import LearnedPositionalEmbedding
from .rope import ROPE_LAYOUTS, check_rope_scaling

POS_EMBS = ("learned", "rope")
#: The largest vocab_size, block_size, d_model... a config accepts (an int32 index).
MAX_SIZE = 2**31 - 1


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
        pos_emb: ``"learned"`` (GPT-2: a learned vector added per position) or
            ``"rope"`` (rotary embeddings of q and k in every attention layer).
        rope_layout: ``"interleaved"`` or ``"half"`` (``numpy_impl/rope.py``).
        rope_base: RoPE's frequency base (10000).
        norm: ``"layernorm"`` or ``"rmsnorm"`` (every norm, ``ln_f`` included).
        ffn: ``"gelu"``, ``"relu"`` or ``"swiglu"``.
        norm_position: ``"pre"`` (GPT-2) or ``"post"`` (Vaswani et al. 2017).
        n_kv_heads: key/value heads, dividing n_heads (None = n_heads; fewer: grouped-query
            attention, Ainslie et al. 2023; 1: multi-query).
        head_dim: per-head width d_k (None = d_model / n_heads).
        qkv_bias: biases of the q/k/v projection (None = ``bias``; Qwen2: True, bias False).
        norm_eps: the eps of every norm.
        rope_scaling: None or ``{"rope_type": "linear" | "llama3", "factor": ...}``
            (``numpy_impl/rope.py``).

    The Llama-style decoder is ``pos_emb="rope", norm="rmsnorm", ffn="swiglu",
    bias=False`` (``labs.commands.train.ARCHS["llama"]``). A config written before these
    fields existed loads with their defaults: the GPT-2 model it described.

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

    def __post_init__(self):
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
        if self.gelu_approximate not in ("tanh", "none"):
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

    def to_dict(self) -> dict:
        """The fields as a plain, JSON-ready dict (field order preserved)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        """Build a config from :meth:`to_dict` output (or an older, shorter one).

        Raises:
            ValueError: keys that are not fields (all listed), a missing
                ``vocab_size``, or any error of the field checks.
        """
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ValueError(
                f"GPTConfig.from_dict: unknown keys {unknown}; expected a subset of {names}"
            )
        if "vocab_size" not in d:
            raise ValueError("GPTConfig.from_dict: missing required key 'vocab_size'")
        return cls(**d)


class GPT(Module):
    """Decoder-only transformer language model.

    logits = head(ln_f(blocks(drop(tok_emb(idx) + pos_emb(T)))))

    With ``pos_emb="rope"`` there is no ``pos_emb`` module (it is None): the
    positions enter each attention layer, which rotates q and k.

    Initialisation (GPT-2, as in nanoGPT): every Linear weight and both
    embeddings N(0, 0.02), biases 0, LayerNorm weight 1; the two projections
    that write into the residual stream (``attn.out_proj`` and ``ffn.fc2``) get
    std 0.02 / sqrt(2 n_layers), so the stream's variance does not grow with depth.

    With ``tie_weights`` the LM head *is* the token-embedding Parameter, so its
    backward adds into the same gradient buffer as the embedding's scatter-add.

    Args:
        config: a :class:`GPTConfig`.
        seed: seed for the initial weights and the dropout masks (NumPy only).
        attn_impl: ``"explicit"`` (the attention formula written out, chapters 03-04)
            or ``"flash"`` (FlashAttention's tiles on every core, what ``labs train``
            uses) for every block; see :class:`~numpy_impl.attention.SelfAttention`.
            Settable later through the :attr:`attn_impl` property (NumPy only).
        dtype: float32 to train, float64 for parity tests (NumPy only).

    Shapes:
        forward: idx ``(B, T)`` integer -> logits ``(B, T, vocab_size)``.
        backward: dlogits ``(B, T, vocab_size)`` -> None; fills every ``.grad``.

    Decoding with a cache (inference only): ``cache = model.new_kv_cache()``, then
    ``model.forward(idx, kv_cache=cache, start_pos=p)`` returns the logits of the
    tokens ``idx`` at positions ``p .. p + T - 1`` while the cache supplies the
    keys and values of positions ``0 .. p - 1`` (``start_pos=None``: append).
    With learned absolute positions the cache stays valid only while the window
    does not slide (see ``numpy_impl/sampling.py``).

    Raises:
        TypeError: idx is not an integer array; start_pos is not an int.
        ValueError: idx not of rank 2, T not in ``[1, block_size]``, or an id
            outside ``[0, vocab_size)``; with a cache, ``start_pos`` outside
            ``[0, kv_cache.length]`` or positions past ``block_size``.
    """

    def __init__(self, config: GPTConfig, *, seed=None, attn_impl="explicit", dtype=np.float32):
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config: expected a GPTConfig, got {type(config).__name__}")
        self.config = config
        rng = np.random.default_rng(seed)
        c = config
        self.tok_emb = Embedding(c.vocab_size, c.d_model, dtype=dtype, rng=rng)
        self.pos_emb = None
        if c.pos_emb == "learned":
            self.pos_emb = LearnedPositionalEmbedding(c.block_size, c.d_model, dtype=dtype, rng=rng)
        self.drop = Dropout(c.dropout)
        rope = c.rope_layout if c.pos_emb == "rope" else None
        self.blocks = ModuleList(
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
                rope,
                c.rope_base,
                c.n_kv_heads,
                c.rope_scaling,
                c.head_dim,
                c.qkv_bias,
                c.norm_eps,
                attn_impl=attn_impl,
                dtype=dtype,
                rng=rng,
            )
            for _ in range(c.n_layers)
        )
        if c.norm == "rmsnorm":
            self.ln_f = RMSNorm(c.d_model, c.norm_eps, dtype=dtype)
        else:
            self.ln_f = LayerNorm(c.d_model, c.norm_eps, bias=c.bias, dtype=dtype)
        self.head = Linear(c.d_model, c.vocab_size, bias=False, dtype=dtype, rng=rng)
        if c.tie_weights:
            ### BEGIN SOLUTION ch08
            ### TODO: tie the LM head to the token embedding: one Parameter object, two uses
            self.head.weight = self.tok_emb.weight  # one Parameter, two uses
            ### END SOLUTION
        self._init_weights(rng)
        # every dropout mask from one generator spawned from `seed` (the weights' stream untouched):
        # a seeded model drops the same units each run; a checkpoint saves its state to resume
        self.dropout_rng = rng.spawn(1)[0]
        for _, mod in self.named_modules():
            if hasattr(mod, "_rng"):
                mod._rng = self.dropout_rng

    @property
    def attn_impl(self) -> str:
        """``"explicit"`` or ``"flash"``: the attention every block runs (assignable)."""
        return self.blocks[0].attn.attn_impl

    @attn_impl.setter
    def attn_impl(self, value: str) -> None:
        for block in self.blocks:
            block.attn.attn_impl = value

    def _init_weights(self, rng: np.random.Generator) -> None:
        for _, mod in self.named_modules():
            if isinstance(mod, (Linear, Embedding, LearnedPositionalEmbedding)):
                mod.weight.data[...] = rng.normal(0.0, 0.02, mod.weight.shape)
            if isinstance(mod, Linear) and mod.bias is not None:
                mod.bias.data[...] = 0.0
        resid_std = 0.02 / math.sqrt(2 * self.config.n_layers)
        for block in self.blocks:  # projections that write into the residual stream
            ffn_out = block.ffn.w2 if isinstance(block.ffn, SwiGLUFeedForward) else block.ffn.fc2
            for p in (block.attn.out_proj.weight, ffn_out.weight):
                p.data[...] = rng.normal(0.0, resid_std, p.shape)

    def forward(self, idx: np.ndarray, kv_cache=None, start_pos: int | None = None) -> np.ndarray:
        idx = np.asarray(idx)
        if idx.ndim != 2:
            raise ValueError(f"idx: expected shape (B, T), got {idx.shape}")
        B, T = idx.shape
        if not 1 <= T <= self.config.block_size:
            raise ValueError(
                f"idx: sequence length T={T} must lie in [1, block_size={self.config.block_size}]"
            )
        idx = check_ids(idx, self.config.vocab_size, "idx")
        start_pos = self._check_decoding(T, kv_cache, start_pos)  # 0 without a cache
        caches = [None] * len(self.blocks) if kv_cache is None else kv_cache.layers
        ### BEGIN SOLUTION ch08
        ### TODO: token + position embeddings (positions start_pos .. start_pos + T - 1; no pos_emb
        ###   when it is None: RoPE, chapter 13), drop, every block in order (with is_causal=True,
        ###   start_pos and its layer's cache from `caches`), ln_f, head
        x = self.tok_emb(idx)  # (B, T) -> (B, T, C)
        if self.pos_emb is not None:
            x = x + self.pos_emb(T, start_pos)  # (B, T, C) + (T, C) -> (B, T, C)
        x = self.drop(x)
        for block, cache in zip(self.blocks, caches, strict=True):
            x = block(x, is_causal=True, start_pos=start_pos, kv_cache=cache)
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
        if self.pos_emb is not None:
            self.pos_emb.backward(dx.sum(axis=0))  # (B, T, C) -> (T, C): shared over the batch
        self.tok_emb.backward(dx)
        ### END SOLUTION

    # -- decoding with a KV cache (chapter 12) ---------------------------------------------
    def new_kv_cache(self) -> KVCache:
        """An empty :class:`~numpy_impl.kv_cache.KVCache` for this model (one layer per block)."""
        return KVCache(self.config.n_layers, self.config.block_size)

    def _check_decoding(self, T: int, kv_cache, start_pos) -> int:
        """The position of idx's first token: 0 without a cache; validated with one.

        The cache holds the keys and values of positions ``0 .. start_pos - 1`` of
        every block; it gains those of idx. ``start_pos=None`` appends
        (``kv_cache.length``); ``start_pos=0`` starts afresh (prefill).
        """
        if kv_cache is None and start_pos is None:
            return 0
        if not isinstance(kv_cache, KVCache) or len(kv_cache.layers) != len(self.blocks):
            raise ValueError(
                f"kv_cache: expected a KVCache with n_layers={len(self.blocks)} "
                "(model.new_kv_cache())"
            )
        start_pos = kv_cache.length if start_pos is None else start_pos
        if isinstance(start_pos, bool) or not isinstance(start_pos, (int, np.integer)):
            raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
        start_pos = int(start_pos)  # np.int64 included: a plain int from here on
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
