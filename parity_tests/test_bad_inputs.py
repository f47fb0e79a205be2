"""Bad inputs: both backends raise the same exception type, naming the argument.

One table, one row per mistake a learner (or a data pipeline) makes. Each row
calls the NumPy twin and the torch twin the same way; both must raise exactly
the row's exception type (not a subclass, not a different one), and both
messages must match the row's pattern, which names the offending argument.
PyTorch indexing would wrap a negative id round to the end of the table and
NumPy fancy indexing would too: both twins must reject it instead.

The rows without a chapter drive the plumbing of ``labs/`` with each backend:
``python -m labs train|sample`` (run in this process, so the exception is
seen: ``UserError``, which the command line prints as one ``error:`` line),
checkpoints (``CheckpointError``, a ``ValueError`` listing the offending keys)
and the backends' ``load_state_dict``.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

import numpy_impl as N
import numpy_impl.sampling as NS
import torch_impl as T
from labs import UserError
from labs.plumbing.backends import make_backend
from labs.plumbing.checkpoint import load_checkpoint, save_checkpoint
from labs.plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, CheckpointError

V, BLOCK, C, H = 7, 6, 8, 2  # a tiny GPT: vocabulary, block_size, d_model, heads
GPT_CONFIG = {"vocab_size": V, "block_size": BLOCK, "n_layers": 1, "n_heads": H, "d_model": C}


def np_gpt():
    return N.GPT(N.GPTConfig(**GPT_CONFIG), seed=0, dtype=np.float64)


def torch_gpt():
    return T.GPT(T.GPTConfig(**GPT_CONFIG), dtype=torch.float64)


def ids(*rows, dtype=np.int64):
    return np.array(rows, dtype=dtype)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a))


X = np.zeros((2, 3, C))  # a well-formed (B, T, C) activation
Q = np.zeros((1, H, 3, 4))  # a well-formed (B, H, T, d_k) query/key/value


@dataclass(frozen=True)
class Row:
    chapter: str | None  # None: labs/ plumbing (training, checkpoints), no exercise
    numpy_call: Callable[[], object]
    torch_call: Callable[[], object]
    exception: type[Exception]
    match: str  # regex that must occur in both messages: the argument's name
    known_bug: dict[str, str] | None = None  # backend -> reason: an expected failure


ROWS: dict[str, Row] = {
    # -- ch02: Linear -----------------------------------------------------------------
    "Linear: wrong input width": Row(
        "ch02",
        lambda: N.Linear(3, 2, dtype=np.float64)(np.zeros((2, 4))),
        lambda: T.Linear(3, 2, dtype=torch.float64)(torch.zeros(2, 4, dtype=torch.float64)),
        ValueError,
        r"^x\b.*in_features",
    ),
    # -- ch02: Embedding -----------------------------------------------------------------
    "Embedding: id == num_embeddings": Row(
        "ch02",
        lambda: N.Embedding(V, C)(ids([0, V])),
        lambda: T.Embedding(V, C)(t(ids([0, V]))),
        ValueError,
        r"^idx\b",
    ),
    "Embedding: negative id (must not wrap)": Row(
        "ch02",
        lambda: N.Embedding(V, C)(ids([0, -1])),
        lambda: T.Embedding(V, C)(t(ids([0, -1]))),
        ValueError,
        r"^idx\b",
    ),
    "Embedding: float ids": Row(
        "ch02",
        lambda: N.Embedding(V, C)(ids([0.0, 1.0], dtype=np.float32)),
        lambda: T.Embedding(V, C)(t(ids([0.0, 1.0], dtype=np.float32))),
        TypeError,
        r"^idx\b",
    ),
    # -- ch03: scaled dot-product attention ------------------------------------------------
    "SDPA: attn_mask of an integer dtype (0/1 keep-mask passed as is)": Row(
        "ch03",
        lambda: N.scaled_dot_product_attention(Q, Q, Q, np.ones((3, 3), np.int64), is_causal=True),
        lambda: T.scaled_dot_product_attention(
            t(Q), t(Q), t(Q), torch.ones(3, 3, dtype=torch.long), is_causal=True
        ),
        TypeError,
        r"^attn_mask\b.*bool",
    ),
    "SDPA: attn_mask of the wrong shape": Row(
        "ch03",
        lambda: N.scaled_dot_product_attention(Q, Q, Q, np.ones((3, 2), bool)),
        lambda: T.scaled_dot_product_attention(t(Q), t(Q), t(Q), torch.ones(3, 2, dtype=bool)),
        ValueError,
        r"attn_mask",
    ),
    "SDPA: k of another head size than q": Row(
        "ch03",
        lambda: N.scaled_dot_product_attention(Q, np.zeros((1, H, 3, 5)), Q),
        lambda: T.scaled_dot_product_attention(t(Q), torch.zeros(1, H, 3, 5).double(), t(Q)),
        ValueError,
        r"\bk\b",
    ),
    # -- ch04: multi-head attention ---------------------------------------------------------
    "SelfAttention: d_model not divisible by n_heads": Row(
        "ch04",
        lambda: N.SelfAttention(10, 3),
        lambda: T.SelfAttention(10, 3),
        ValueError,
        r"d_model.*n_heads",
    ),
    "SelfAttention: x of rank 2": Row(
        "ch04",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X[0]),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(t(X[0])),
        ValueError,
        r"^x\b",
    ),
    "SelfAttention: T = 0": Row(
        "ch04",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X[:, :0]),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(t(X[:, :0])),
        ValueError,
        r"^x\b",
    ),
    "SelfAttention: wrong width": Row(
        "ch04",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X[..., :4]),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(t(X[..., :4])),
        ValueError,
        r"^x\b.*d_model",
    ),
    # -- ch05: positions -------------------------------------------------------------------
    "LearnedPositionalEmbedding: T > block_size": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(BLOCK + 1),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(BLOCK + 1),
        ValueError,
        r"^T\b.*block_size",
    ),
    "LearnedPositionalEmbedding: float T": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(3.0),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(3.0),
        TypeError,
        r"^T\b",
    ),
    "LearnedPositionalEmbedding: T = 0": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(0),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(0),
        ValueError,
        r"^T\b",
    ),
    "LearnedPositionalEmbedding: start_pos + T > block_size": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(2, BLOCK - 1),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(2, BLOCK - 1),
        ValueError,
        r"^start_pos\b.*block_size",
    ),
    "LearnedPositionalEmbedding: negative start_pos": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(2, -1),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(2, -1),
        ValueError,
        r"^start_pos\b",
    ),
    "LearnedPositionalEmbedding: float start_pos": Row(
        "ch05",
        lambda: N.LearnedPositionalEmbedding(BLOCK, C)(2, 1.0),
        lambda: T.LearnedPositionalEmbedding(BLOCK, C)(2, 1.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    # -- ch06: FFN, GELU, dropout -----------------------------------------------------------
    "GELU: unknown approximation": Row(
        "ch06",
        lambda: N.GELU("relu"),
        lambda: T.GELU("relu"),
        ValueError,
        r"^approximate\b",
    ),
    "Dropout: p = 1": Row(
        "ch06", lambda: N.Dropout(1.0), lambda: T.Dropout(1.0), ValueError, r"^p\b"
    ),
    "Dropout: p < 0": Row(
        "ch06", lambda: N.Dropout(-0.1), lambda: T.Dropout(-0.1), ValueError, r"^p\b"
    ),
    # -- ch07: LayerNorm, block ---------------------------------------------------------------
    "LayerNorm: wrong width": Row(
        "ch07",
        lambda: N.LayerNorm(C, dtype=np.float64)(X[..., :5]),
        lambda: T.LayerNorm(C, dtype=torch.float64)(t(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "Block: x of rank 2": Row(
        "ch07",
        lambda: N.Block(C, H, dtype=np.float64)(X[0]),
        lambda: T.Block(C, H, dtype=torch.float64)(t(X[0])),
        ValueError,
        r"^x\b",
    ),
    # -- ch08: GPT -----------------------------------------------------------------------------
    "GPT: id == vocab_size": Row(
        "ch08",
        lambda: np_gpt()(ids([0, V])),
        lambda: torch_gpt()(t(ids([0, V]))),
        ValueError,
        r"^idx\b.*vocab_size",
    ),
    "GPT: negative id (must not wrap)": Row(
        "ch08",
        lambda: np_gpt()(ids([3, -1])),
        lambda: torch_gpt()(t(ids([3, -1]))),
        ValueError,
        r"^idx\b",
    ),
    "GPT: float ids": Row(
        "ch08",
        lambda: np_gpt()(ids([1.0, 2.0], dtype=np.float64)),
        lambda: torch_gpt()(t(ids([1.0, 2.0], dtype=np.float64))),
        TypeError,
        r"^idx\b",
    ),
    "GPT: bool ids": Row(
        "ch08",
        lambda: np_gpt()(ids([True, False], dtype=bool)),
        lambda: torch_gpt()(t(ids([True, False], dtype=bool))),
        TypeError,
        r"^idx\b",
    ),
    "GPT: ids of rank 1": Row(
        "ch08",
        lambda: np_gpt()(np.array([1, 2])),
        lambda: torch_gpt()(t(np.array([1, 2]))),
        ValueError,
        r"^idx\b",
    ),
    "GPT: ids of rank 3": Row(
        "ch08",
        lambda: np_gpt()(np.zeros((1, 2, 3), np.int64)),
        lambda: torch_gpt()(torch.zeros(1, 2, 3, dtype=torch.long)),
        ValueError,
        r"^idx\b",
    ),
    "GPT: sequence longer than block_size": Row(
        "ch08",
        lambda: np_gpt()(np.zeros((1, BLOCK + 1), np.int64)),
        lambda: torch_gpt()(torch.zeros(1, BLOCK + 1, dtype=torch.long)),
        ValueError,
        r"^idx\b.*block_size",
    ),
    "GPT: T = 0": Row(
        "ch08",
        lambda: np_gpt()(np.zeros((2, 0), np.int64)),
        lambda: torch_gpt()(torch.zeros(2, 0, dtype=torch.long)),
        ValueError,
        r"^idx\b",
    ),
    "GPTConfig: d_model not divisible by n_heads": Row(
        "ch08",
        lambda: N.GPTConfig(vocab_size=V, d_model=10, n_heads=3),
        lambda: T.GPTConfig(vocab_size=V, d_model=10, n_heads=3),
        ValueError,
        r"d_model.*n_heads",
    ),
    "GPTConfig: vocab_size = 0": Row(
        "ch08",
        lambda: N.GPTConfig(vocab_size=0),
        lambda: T.GPTConfig(vocab_size=0),
        ValueError,
        r"^vocab_size\b",
    ),
    "GPTConfig: dropout = 1": Row(
        "ch08",
        lambda: N.GPTConfig(vocab_size=V, dropout=1.0),
        lambda: T.GPTConfig(vocab_size=V, dropout=1.0),
        ValueError,
        r"^dropout\b",
    ),
    "GPTConfig: unknown gelu_approximate": Row(
        "ch08",
        lambda: N.GPTConfig(vocab_size=V, gelu_approximate="relu"),
        lambda: T.GPTConfig(vocab_size=V, gelu_approximate="relu"),
        ValueError,
        r"^gelu_approximate\b",
    ),
    # -- ch09: loss ----------------------------------------------------------------------------
    "CrossEntropyLoss: float targets": Row(
        "ch09",
        lambda: N.CrossEntropyLoss()(np.zeros((2, V)), np.array([0.0, 1.0])),
        lambda: T.CrossEntropyLoss()(torch.zeros(2, V), torch.tensor([0.0, 1.0])),
        TypeError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: target == V": Row(
        "ch09",
        lambda: N.CrossEntropyLoss()(np.zeros((2, V)), np.array([0, V])),
        lambda: T.CrossEntropyLoss()(torch.zeros(2, V), torch.tensor([0, V])),
        ValueError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: negative target that is not ignore_index": Row(
        "ch09",
        lambda: N.CrossEntropyLoss()(np.zeros((2, V)), np.array([0, -1])),
        lambda: T.CrossEntropyLoss()(torch.zeros(2, V), torch.tensor([0, -1])),
        ValueError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: targets of the wrong shape": Row(
        "ch09",
        lambda: N.CrossEntropyLoss()(np.zeros((2, V)), np.array([0, 1, 2])),
        lambda: T.CrossEntropyLoss()(torch.zeros(2, V), torch.tensor([0, 1, 2])),
        ValueError,
        r"^targets\b",
    ),
    # -- ch10: sampling ------------------------------------------------------------------------
    "filter_logits: temperature = 0": Row(
        "ch10",
        lambda: NS.filter_logits(np.zeros((1, V)), temperature=0.0),
        lambda: T.filter_logits(torch.zeros(1, V), temperature=0.0),
        ValueError,
        r"^temperature\b",
    ),
    "filter_logits: top_k = 0": Row(
        "ch10",
        lambda: NS.filter_logits(np.zeros((1, V)), top_k=0),
        lambda: T.filter_logits(torch.zeros(1, V), top_k=0),
        ValueError,
        r"^top_k\b",
    ),
    "filter_logits: top_p = 0": Row(
        "ch10",
        lambda: NS.filter_logits(np.zeros((1, V)), top_p=0.0),
        lambda: T.filter_logits(torch.zeros(1, V), top_p=0.0),
        ValueError,
        r"^top_p\b",
    ),
    "filter_logits: top_p > 1": Row(
        "ch10",
        lambda: NS.filter_logits(np.zeros((1, V)), top_p=1.5),
        lambda: T.filter_logits(torch.zeros(1, V), top_p=1.5),
        ValueError,
        r"^top_p\b",
    ),
    "generate: empty prompt": Row(
        "ch10",
        lambda: NS.generate(np_gpt(), np.zeros((1, 0), np.int64), 3),
        lambda: T.generate(torch_gpt(), torch.zeros(1, 0, dtype=torch.long), 3),
        ValueError,
        r"^idx\b",
    ),
    "generate: negative temperature": Row(
        "ch10",
        lambda: NS.generate(np_gpt(), ids([1]), 3, temperature=-1.0),
        lambda: T.generate(torch_gpt(), t(ids([1])), 3, temperature=-1.0),
        ValueError,
        r"^temperature\b",
    ),
    "generate: prompt id out of range": Row(
        "ch10",
        lambda: NS.generate(np_gpt(), ids([1, V]), 3, temperature=0.0),
        lambda: T.generate(torch_gpt(), t(ids([1, V])), 3, temperature=0.0),
        ValueError,
        r"^idx\b",
    ),
    "generate: uniforms of the wrong shape": Row(
        "ch10",
        lambda: NS.generate(np_gpt(), ids([1]), 3, uniforms=np.full((2, 1), 0.5)),
        lambda: T.generate(torch_gpt(), t(ids([1])), 3, uniforms=torch.full((2, 1), 0.5)),
        ValueError,
        r"^uniforms\b",
    ),
    "generate: a uniform number of 1": Row(
        "ch10",
        lambda: NS.generate(np_gpt(), ids([1]), 2, uniforms=np.array([[0.5], [1.0]])),
        lambda: T.generate(torch_gpt(), t(ids([1])), 2, uniforms=torch.tensor([[0.5], [1.0]])),
        ValueError,
        r"^uniforms\b",
    ),
    # -- ch12: FlashAttention, the KV cache ------------------------------------------------------
    "flash_attention: tile_q = 0": Row(
        "ch12",
        lambda: N.flash_attention(Q, Q, Q, tile_q=0),
        lambda: T.flash_attention(t(Q), t(Q), t(Q), tile_q=0),
        ValueError,
        r"^tile_q\b",
    ),
    "flash_attention: attn_mask with is_causal": Row(
        "ch12",
        lambda: N.flash_attention(Q, Q, Q, attn_mask=np.ones((3, 3), bool), is_causal=True),
        lambda: T.flash_attention(
            t(Q), t(Q), t(Q), attn_mask=torch.ones(3, 3, dtype=torch.bool), is_causal=True
        ),
        ValueError,
        r"^attn_mask\b",
    ),
    "flash_attention: integer attn_mask": Row(
        "ch12",
        lambda: N.flash_attention(Q, Q, Q, attn_mask=np.ones((3, 3), np.int64)),
        lambda: T.flash_attention(t(Q), t(Q), t(Q), attn_mask=torch.ones(3, 3, dtype=torch.long)),
        TypeError,
        r"^attn_mask\b",
    ),
    "flash_attention: mask that does not broadcast": Row(
        "ch12",
        lambda: N.flash_attention(Q, Q, Q, attn_mask=np.ones((2, 3), bool)),
        lambda: T.flash_attention(t(Q), t(Q), t(Q), attn_mask=torch.ones(2, 3, dtype=torch.bool)),
        ValueError,
        r"^attn_mask\b",
    ),
    "flash_attention: q of rank 3 (NumPy once broadcast it)": Row(
        "ch12",
        lambda: N.flash_attention(Q[0], Q[0], Q[0]),
        lambda: T.flash_attention(t(Q[0]), t(Q[0]), t(Q[0])),
        ValueError,
        r"^q\b.*4 dimensions",
    ),
    "flash_attention: k of another batch size (no broadcasting)": Row(
        "ch12",
        lambda: N.flash_attention(np.zeros((2, H, 3, 4)), Q, Q),
        lambda: T.flash_attention(torch.zeros(2, H, 3, 4).double(), t(Q), t(Q)),
        ValueError,
        r"^k\b",
    ),
    "flash_attention: float32 q with float64 k, v (NumPy once upcast)": Row(
        "ch12",
        lambda: N.flash_attention(Q.astype(np.float32), Q, Q),
        lambda: T.flash_attention(t(Q).float(), t(Q), t(Q)),  # the kernel: RuntimeError
        TypeError,
        r"^q, k, v\b.*floating dtype",
    ),
    "SDPA: integer q, k, v": Row(
        "ch03",
        lambda: N.scaled_dot_product_attention(*(np.ones((1, 1, 2, 2), np.int64),) * 3),
        lambda: T.scaled_dot_product_attention(*(torch.ones(1, 1, 2, 2, dtype=torch.long),) * 3),
        TypeError,
        r"^q, k, v\b.*floating dtype",
    ),
    "GPT with kv_cache: start_pos past the cached positions": Row(
        "ch12",
        lambda: (m := np_gpt()).forward(ids([1]), kv_cache=m.new_kv_cache(), start_pos=1),
        lambda: (m := torch_gpt())(t(ids([1])), kv_cache=m.new_kv_cache(), start_pos=1),
        ValueError,
        r"^start_pos\b",
    ),
    "GPT with kv_cache: float start_pos (once ValueError, RoPE's TypeError)": Row(
        "ch12",
        lambda: (m := np_gpt()).forward(ids([1]), kv_cache=m.new_kv_cache(), start_pos=0.0),
        lambda: (m := torch_gpt())(t(ids([1])), kv_cache=m.new_kv_cache(), start_pos=0.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    "LayerKVCache.update: float start_pos": Row(
        "ch12",
        lambda: N.KVCache(1, BLOCK).layers[0].update(Q, Q, 0.0),
        lambda: T.KVCache(1, BLOCK).layers[0].update(t(Q), t(Q), 0.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    "GPT with kv_cache: a cache of the wrong depth": Row(
        "ch12",
        lambda: np_gpt().forward(ids([1]), kv_cache=N.KVCache(2, BLOCK)),
        lambda: torch_gpt()(t(ids([1])), kv_cache=T.KVCache(2, BLOCK)),
        ValueError,
        r"^kv_cache\b",
    ),
    "KVCache: max_len = 0": Row(
        "ch12",
        lambda: N.KVCache(1, 0),
        lambda: T.KVCache(1, 0),
        ValueError,
        r"^max_len\b",
    ),
    # -- the catalogue: multi-head attention with separate projections (ch04's layer) -------
    "MultiHeadAttention: key of another batch size": Row(
        "ch04",
        lambda: N.MultiHeadAttention(C, H, dtype=np.float64)(X, X[:1], X[:1]),
        lambda: T.MultiHeadAttention(C, H, dtype=torch.float64)(t(X), t(X[:1]), t(X[:1])),
        ValueError,
        r"^key, value\b",
    ),
    "MultiHeadAttention: attn_mask of the wrong shape": Row(
        "ch04",
        lambda: N.MultiHeadAttention(C, H, dtype=np.float64)(X, X, X, np.ones((3, 2), bool)),
        lambda: T.MultiHeadAttention(C, H, dtype=torch.float64)(
            t(X), t(X), t(X), torch.ones(3, 2, dtype=torch.bool)
        ),
        ValueError,
        r"attn_mask",
    ),
    "MultiHeadAttention: integer attn_mask": Row(
        "ch04",
        lambda: N.MultiHeadAttention(C, H, dtype=np.float64)(X, X, X, np.ones((3, 3), np.int64)),
        lambda: T.MultiHeadAttention(C, H, dtype=torch.float64)(
            t(X), t(X), t(X), torch.ones(3, 3, dtype=torch.long)
        ),
        TypeError,
        r"attn_mask",
    ),
    "merge_qkv_state_dict: v_proj missing": Row(
        "ch04",
        lambda: N.merge_qkv_state_dict({"q_proj.weight": np.eye(2), "k_proj.weight": np.eye(2)}),
        lambda: T.merge_qkv_state_dict(
            {"q_proj.weight": torch.eye(2), "k_proj.weight": torch.eye(2)}
        ),
        ValueError,
        r"^state_dict\b",
    ),
    # -- ch13: RoPE ---------------------------------------------------------------------------
    "RotaryEmbedding: odd head dimension": Row(
        "ch13",
        lambda: N.RotaryEmbedding(3),
        lambda: T.RotaryEmbedding(3),
        ValueError,
        r"^d_k\b.*even",
    ),
    "SelfAttention: RoPE with an odd head dimension": Row(
        "ch13",
        lambda: N.SelfAttention(6, 2, rope="half"),
        lambda: T.SelfAttention(6, 2, rope="half"),
        ValueError,
        r"^d_k\b.*even",
    ),
    "GPTConfig: RoPE with an odd head dimension": Row(
        "ch13",
        lambda: N.GPTConfig(vocab_size=V, d_model=6, n_heads=2, pos_emb="rope"),
        lambda: T.GPTConfig(vocab_size=V, d_model=6, n_heads=2, pos_emb="rope"),
        ValueError,
        r"^d_model=6, n_heads=2\b.*even",
    ),
    "RotaryEmbedding: unknown layout": Row(
        "ch13",
        lambda: N.RotaryEmbedding(4, "neox"),
        lambda: T.RotaryEmbedding(4, "neox"),
        ValueError,
        r"^layout\b",
    ),
    "RotaryEmbedding: negative start_pos": Row(
        "ch13",
        lambda: N.RotaryEmbedding(4)(Q, Q, -1),
        lambda: T.RotaryEmbedding(4)(t(Q), t(Q), -1),
        ValueError,
        r"^start_pos\b",
    ),
    "RotaryEmbedding: float start_pos": Row(
        "ch13",
        lambda: N.RotaryEmbedding(4)(Q, Q, 1.0),
        lambda: T.RotaryEmbedding(4)(t(Q), t(Q), 1.0),
        TypeError,
        r"^start_pos\b",
    ),
    "RotaryEmbedding: q of another head dimension": Row(
        "ch13",
        lambda: N.RotaryEmbedding(6)(Q, Q),
        lambda: T.RotaryEmbedding(6)(t(Q), t(Q)),
        ValueError,
        r"^q\b.*d_k=6",
    ),
    "rope_permutation: unknown layout": Row(
        "ch13",
        lambda: N.rope_permutation(4, "interleaved", "neox"),
        lambda: T.rope_permutation(4, "interleaved", "neox"),
        ValueError,
        r"^to_layout\b",
    ),
    "GPTConfig: unknown pos_emb": Row(
        "ch13",
        lambda: N.GPTConfig(vocab_size=V, pos_emb="sinusoid"),
        lambda: T.GPTConfig(vocab_size=V, pos_emb="sinusoid"),
        ValueError,
        r"^pos_emb\b",
    ),
    # -- ch14: RMSNorm, SwiGLU, the block's options ---------------------------------------------
    "RMSNorm: wrong width": Row(
        "ch14",
        lambda: N.RMSNorm(C, dtype=np.float64)(X[..., :5]),
        lambda: T.RMSNorm(C, dtype=torch.float64)(t(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "RMSNorm: eps = 0": Row(
        "ch14", lambda: N.RMSNorm(C, eps=0.0), lambda: T.RMSNorm(C, eps=0.0), ValueError, r"^eps\b"
    ),
    "SwiGLUFeedForward: wrong width": Row(
        "ch14",
        lambda: N.SwiGLUFeedForward(C, dtype=np.float64)(X[..., :5]),
        lambda: T.SwiGLUFeedForward(C, dtype=torch.float64)(t(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "FeedForward: unknown activation": Row(
        "ch14",
        lambda: N.FeedForward(C, activation="swish"),
        lambda: T.FeedForward(C, activation="swish"),
        ValueError,
        r"^activation\b",
    ),
    "Block: unknown norm": Row(
        "ch14",
        lambda: N.Block(C, H, norm="batchnorm"),
        lambda: T.Block(C, H, norm="batchnorm"),
        ValueError,
        r"^norm\b",
    ),
    "Block: unknown ffn": Row(
        "ch14",
        lambda: N.Block(C, H, ffn="geglu"),
        lambda: T.Block(C, H, ffn="geglu"),
        ValueError,
        r"^ffn\b",
    ),
    "Block: unknown norm_position": Row(
        "ch14",
        lambda: N.Block(C, H, norm_position="sandwich"),
        lambda: T.Block(C, H, norm_position="sandwich"),
        ValueError,
        r"^norm_position\b",
    ),
    "GPTConfig: unknown norm": Row(
        "ch14",
        lambda: N.GPTConfig(vocab_size=V, norm="rms"),
        lambda: T.GPTConfig(vocab_size=V, norm="rms"),
        ValueError,
        r"^norm\b",
    ),
    # -- ch11: byte-level BPE ------------------------------------------------------------------
    "BPETokenizer.encode: text not a str": Row(
        "ch11",
        lambda: np_bpe().encode(b"bytes"),
        lambda: torch_bpe().encode(b"bytes"),
        TypeError,
        r"^text\b",
    ),
    "BPETokenizer.encode: a lone surrogate": Row(
        "ch11",
        lambda: np_bpe().encode("a\ud800b"),
        lambda: torch_bpe().encode("a\ud800b"),  # HF itself raises a TypeError
        ValueError,
        r"^text\b.*surrogate",
    ),
    "BPETokenizer.encode: allowed_special not special": Row(
        "ch11",
        lambda: np_bpe().encode("a", allowed_special={"<|pad|>"}),
        lambda: torch_bpe().encode("a", allowed_special={"<|pad|>"}),
        ValueError,
        r"^allowed_special\b",
    ),
    "BPETokenizer.decode: id == vocab_size": Row(
        "ch11",
        lambda: np_bpe().decode([0, np_bpe().vocab_size]),
        lambda: torch_bpe().decode([0, torch_bpe().vocab_size]),  # HF would skip it
        ValueError,
        r"^ids\b",
    ),
    "BPETokenizer.decode: negative id": Row(
        "ch11",
        lambda: np_bpe().decode(np.array([3, -1])),
        lambda: torch_bpe().decode(np.array([3, -1])),
        ValueError,
        r"^ids\b",
    ),
    "BPETokenizer.decode: float id": Row(
        "ch11",
        lambda: np_bpe().decode([1, 2.0]),
        lambda: torch_bpe().decode([1, 2.0]),
        TypeError,
        r"^ids\b",
    ),
    "DecodeStream.step: id out of range": Row(
        "ch11",
        lambda: np_bpe().decode_stream().step(10**6),
        lambda: torch_bpe().decode_stream().step(10**6),
        ValueError,
        r"^ids\b",
    ),
    "BPETokenizer.train: vocab_size below 256 + specials": Row(
        "ch11",
        lambda: N.BPETokenizer.train("abc", 256),
        lambda: T.BPETokenizer.train("abc", 256),
        ValueError,
        r"^vocab_size\b.*257",
    ),
    "BPETokenizer.train: empty special token": Row(
        "ch11",
        lambda: N.BPETokenizer.train("abc", 300, special_tokens=[""]),
        lambda: T.BPETokenizer.train("abc", 300, special_tokens=[""]),
        ValueError,
        r"^special_tokens\b",
    ),
    "BPETokenizer: a pattern a tokenizer.json cannot hold": Row(
        "ch11",
        lambda: N.BPETokenizer.train("abc", 300, pattern=r"\w+"),
        lambda: T.BPETokenizer.train("abc", 300, pattern=r"\w+"),
        ValueError,
        r"^pattern\b",
    ),
    "BPETokenizer: vocab without every byte": Row(
        "ch11",
        lambda: N.BPETokenizer({bytes([b]): b for b in range(255)}, []),
        lambda: T.BPETokenizer({bytes([b]): b for b in range(255)}, []),
        ValueError,
        r"^vocab\b.*256 bytes",
    ),
    "BPETokenizer: merge of unknown tokens": Row(
        "ch11",
        lambda: N.BPETokenizer({bytes([b]): b for b in range(256)}, [(b"a", b"b")]),
        lambda: T.BPETokenizer({bytes([b]): b for b in range(256)}, [(b"a", b"b")]),
        ValueError,
        r"^merges\[0\]",
    ),
    "BPETokenizer.from_json: a normalizer": Row(
        "ch11",
        lambda: N.BPETokenizer.from_json(bpe_json_with(normalizer={"type": "Lowercase"})),
        lambda: T.BPETokenizer.from_json(bpe_json_with(normalizer={"type": "Lowercase"})),
        ValueError,
        r"^tokenizer.json: normalizer\b",
    ),
    # -- sinusoidal positional encoding: marked ch15, not ch13, because the table is built in
    # __init__, which a learner's chapter-13 stub cannot run; chapter 15's models use it
    "SinusoidalPositionalEncoding: T > block_size": Row(
        "ch15",
        lambda: N.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK + 1),
        lambda: T.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK + 1),
        ValueError,
        r"^T\b.*block_size",
    ),
    "SinusoidalPositionalEncoding: float T": Row(
        "ch15",
        lambda: N.SinusoidalPositionalEncoding(BLOCK, C)(2.0),
        lambda: T.SinusoidalPositionalEncoding(BLOCK, C)(2.0),
        TypeError,
        r"^T\b",
    ),
    "SinusoidalPositionalEncoding: start_pos + T > block_size": Row(
        "ch15",
        lambda: N.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK, 1),
        lambda: T.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK, 1),
        ValueError,
        r"^start_pos\b.*block_size",
    ),
    # -- ch15: padding masks, the encoder, the classifier ------------------------------------
    "SelfAttention: attn_mask of the wrong shape": Row(
        "ch15",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X, attn_mask=np.ones((2, 1, 1, 4), bool)),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(
            t(X), attn_mask=torch.ones(2, 1, 1, 4, dtype=torch.bool)
        ),
        ValueError,
        r"^attn_mask\b.*\(B, n_heads, T_q, T_k\)",
    ),
    "SelfAttention: attn_mask of an integer dtype": Row(
        "ch15",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X, attn_mask=np.ones((2, 1, 1, 3), int)),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(
            t(X), attn_mask=torch.ones(2, 1, 1, 3, dtype=torch.long)
        ),
        TypeError,
        r"^attn_mask\b.*bool",
    ),
    "key_padding_attn_mask: 0/1 integers instead of bool": Row(
        "ch15",
        lambda: N.masks.key_padding_attn_mask(np.ones((2, 3), np.int64)),
        lambda: T.masks.key_padding_attn_mask(torch.ones(2, 3, dtype=torch.long)),
        TypeError,
        r"^token_mask\b.*bool",
    ),
    "key_padding_attn_mask: 3-D mask": Row(
        "ch15",
        lambda: N.masks.key_padding_attn_mask(np.ones((2, 1, 3), bool)),
        lambda: T.masks.key_padding_attn_mask(torch.ones(2, 1, 3, dtype=torch.bool)),
        ValueError,
        r"^token_mask\b.*\(B, T\)",
    ),
    "to_attn_mask: unknown convention": Row(
        "ch15",
        lambda: N.masks.to_attn_mask(np.ones(3, bool), "inverted"),
        lambda: T.masks.to_attn_mask(torch.ones(3, dtype=torch.bool), "inverted"),
        ValueError,
        r"^convention\b",
    ),
    "to_attn_mask: a 0/1 float mask read as True = masked": Row(
        "ch15",
        lambda: N.masks.to_attn_mask(np.ones(3), "masked"),
        lambda: T.masks.to_attn_mask(torch.ones(3), "masked"),
        TypeError,
        r"^mask\b.*bool",
    ),
    "MeanPool: token_mask not matching the batch": Row(
        "ch15",
        lambda: N.MeanPool()(X, np.ones((3, 3), bool)),
        lambda: T.MeanPool()(t(X), torch.ones(3, 3, dtype=torch.bool)),
        ValueError,
        r"^token_mask\b.*\(2, 3\)",
    ),
    "MeanPool: float token_mask": Row(
        "ch15",
        lambda: N.MeanPool()(X, np.ones((2, 3))),
        lambda: T.MeanPool()(t(X), torch.ones(2, 3)),
        TypeError,
        r"^token_mask\b",
    ),
    "TransformerClassifier: token_mask of another length": Row(
        "ch15",
        lambda: np_classifier()(ids([1, 2, 3]), np.ones((1, 2), bool)),
        lambda: torch_classifier()(t(ids([1, 2, 3])), torch.ones(1, 2, dtype=torch.bool)),
        ValueError,
        r"^token_mask\b",
    ),
    "TransformerClassifier: sequence longer than block_size": Row(
        "ch15",
        lambda: np_classifier()(np.zeros((1, BLOCK + 1), np.int64)),
        lambda: torch_classifier()(torch.zeros(1, BLOCK + 1, dtype=torch.long)),
        ValueError,
        r"^idx\b.*block_size",
    ),
    "TransformerClassifier: d_model not divisible by n_heads": Row(
        "ch15",
        lambda: N.TransformerClassifier(V, 2, d_model=10, n_heads=3),
        lambda: T.TransformerClassifier(V, 2, d_model=10, n_heads=3),
        ValueError,
        r"d_model.*n_heads",
    ),
    # -- ch16: cross-attention, the encoder-decoder ----------------------------------------------
    "cross-attention: kv of another batch size": Row(
        "ch16",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X, kv=np.zeros((3, 4, C))),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(t(X), kv=torch.zeros(3, 4, C).double()),
        ValueError,
        r"^kv\b",
    ),
    "cross-attention: kv of another width": Row(
        "ch16",
        lambda: N.SelfAttention(C, H, dtype=np.float64)(X, kv=np.zeros((2, 4, C + 1))),
        lambda: T.SelfAttention(C, H, dtype=torch.float64)(
            t(X), kv=torch.zeros(2, 4, C + 1).double()
        ),
        ValueError,
        r"^kv\b.*d_model",
    ),
    "Seq2SeqTransformer: src_mask of the wrong shape": Row(
        "ch16",
        lambda: np_seq2seq()(ids([1, 2, 3]), ids([1, 2]), np.ones((1, 2), bool)),
        lambda: torch_seq2seq()(
            t(ids([1, 2, 3])), t(ids([1, 2])), torch.ones(1, 2, dtype=torch.bool)
        ),
        ValueError,
        r"^src_mask\b",
    ),
    "Seq2SeqTransformer: float tgt_mask": Row(
        "ch16",
        lambda: np_seq2seq()(ids([1, 2, 3]), ids([1, 2]), None, np.ones((1, 2))),
        lambda: torch_seq2seq()(t(ids([1, 2, 3])), t(ids([1, 2])), None, torch.ones(1, 2)),
        TypeError,
        r"^tgt_mask\b",
    ),
    "Seq2SeqTransformer: tgt of another batch size": Row(
        "ch16",
        lambda: np_seq2seq()(ids([1, 2, 3]), ids([1, 2], [2, 1])),
        lambda: torch_seq2seq()(t(ids([1, 2, 3])), t(ids([1, 2], [2, 1]))),
        ValueError,
        r"^tgt\b",
    ),
    "Seq2SeqTransformer.generate: max_new_tokens > block_size": Row(
        "ch16",
        lambda: np_seq2seq().generate(ids([1, 2]), BLOCK + 1, bos_id=0),
        lambda: torch_seq2seq().generate(t(ids([1, 2])), BLOCK + 1, bos_id=0),
        ValueError,
        r"^max_new_tokens\b.*block_size",
    ),
    "BPETokenizer.from_json: merges not a list (NumPy once a bare TypeError)": Row(
        "ch11",
        lambda: N.BPETokenizer.from_json(bpe_json_with(model={**bpe_model(), "merges": 5})),
        lambda: T.BPETokenizer.from_json(bpe_json_with(model={**bpe_model(), "merges": 5})),
        ValueError,
        r"^tokenizer.json\b",
    ),
    "BPETokenizer.from_json: added token without content (NumPy once a KeyError)": Row(
        "ch11",
        lambda: N.BPETokenizer.from_json(bpe_json_with(added_tokens=[{"id": 300}])),
        lambda: T.BPETokenizer.from_json(bpe_json_with(added_tokens=[{"id": 300}])),
        ValueError,
        r"^tokenizer.json\b",
    ),
}


_BPE: dict = {}


def np_bpe():
    """A small from-scratch BPE (trained once), and its HF twin with the same merges."""
    if "numpy" not in _BPE:
        _BPE["numpy"] = N.BPETokenizer.train("hello world, hello there", 270)
    return _BPE["numpy"]


def torch_bpe():
    if "torch" not in _BPE:
        tok = np_bpe()
        _BPE["torch"] = T.BPETokenizer(tok.vocab, tok.merges, tok.special_tokens)
    return _BPE["torch"]


def bpe_model() -> dict:
    return json.loads(np_bpe().to_json())["model"]


def bpe_json_with(**fields) -> str:
    import json

    return json.dumps({**json.loads(np_bpe().to_json()), **fields})


# -- labs/ plumbing: the command line, checkpoints, backends ---------------------------------
# Each backend is driven the way a learner drives it: `python -m labs train|sample` (in this
# process, so the exception itself is seen) and the adapters of labs/plumbing/backends*.py.
_FILES = tempfile.TemporaryDirectory(prefix="twinformer-bad-inputs-")  # removed at exit
CHARS = "abcdefg"  # V = 7 characters


@functools.cache
def files() -> Path:
    """Corpora and checkpoints the plumbing rows point at (written once, never changed)."""
    root = Path(_FILES.name)
    (root / "corpus.txt").write_text(("abc defg gfe dcba\n" * 40).replace(" ", "a"))
    (root / "empty.txt").write_bytes(b"")
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (root / "a-file").write_text("not a directory")
    state = {k: v.copy() for k, v in np_gpt().state_dict().items()}
    config = {"model": GPT_CONFIG, "tokenizer": {"type": "char", "chars": CHARS}}
    for name in ("good", "truncated", "truncated-unhashed", "other-shapes", "other-vocab"):
        save_checkpoint(root / name, state, config, meta={"step": 1})
    for name in ("truncated", "truncated-unhashed"):
        data = (root / name / MODEL_FILE).read_bytes()
        (root / name / MODEL_FILE).write_bytes(data[: len(data) // 2])
    edit_config(root / "truncated-unhashed", lambda c: c.pop("files"))
    edit_config(root / "other-shapes", lambda c: c["model"].update(d_model=2 * C))
    edit_config(root / "other-vocab", lambda c: c["tokenizer"].update(chars=CHARS + "h"))
    return root


def edit_config(directory: Path, change) -> None:
    config = json.loads((directory / CONFIG_FILE).read_text())
    change(config)
    (directory / CONFIG_FILE).write_text(json.dumps(config))


def cli(backend: str, *argv: str):
    """Run ``python -m labs ARGV --backend BACKEND`` here; its errors propagate."""
    from labs.__main__ import build_parser

    args = build_parser().parse_args([*argv, "--backend", backend])
    args.argv = [*argv, "--backend", backend]
    return args.func(args)


def train(backend: str, *extra: str):
    small = ["--max-iters", "1", "--eval-batches", "1", "--eval-batch-size", "2",
             "--batch-size", "2", "--block-size", "4", "--n-layers", "1", "--d-model", "8",
             "--n-heads", "2", "--sample-tokens", "0"]  # fmt: skip
    data = ["--data", str(files() / "corpus.txt"), "--out", str(files() / f"run-{backend}")]
    return cli(backend, "train", *data, *small, *extra)


def sample(backend: str, checkpoint: str, prompt: str = "abc"):
    return cli(backend, "sample", "--checkpoint", str(files() / checkpoint), "--prompt", prompt,
               "--max-new-tokens", "2")  # fmt: skip


def load_into(backend: str, checkpoint: str) -> None:
    """What sample does: read the checkpoint, build the backend, copy the weights in."""
    state, config, _ = load_checkpoint(files() / checkpoint)
    make_backend(backend, config["model"]).load_state_dict(state)


def backend_state(backend: str, change) -> None:
    """Load a state dict edited by ``change`` into a fresh backend."""
    be = make_backend(backend, GPT_CONFIG)
    state = be.state_dict()
    change(state)
    be.load_state_dict(state)


def plumbing(call: Callable[[str], object], exception: type[Exception], match: str) -> Row:
    return Row(None, lambda: call("numpy"), lambda: call("torch"), exception, match)


ROWS.update(
    {
        # -- the catalogue of issue 7: the model ------------------------------------------
        "GPT: uint8 id >= vocab_size (rejected, not wrapped)": Row(
            "ch08",
            lambda: np_gpt()(ids([1, 200], dtype=np.uint8)),
            lambda: torch_gpt()(t(ids([1, 200], dtype=np.uint8))),
            ValueError,
            r"^idx\b.*vocab_size",
        ),
        "GPT: uint64 id >= 2**63 (must not wrap to a negative id)": Row(
            "ch08",
            lambda: np_gpt()(ids([1, 2**64 - 1], dtype=np.uint64)),
            lambda: torch_gpt()(torch.tensor([[1, 2**64 - 1]], dtype=torch.uint64)),
            ValueError,
            r"^idx\b.*vocab_size",
        ),
        "GPT: int8 id -1": Row(
            "ch08",
            lambda: np_gpt()(ids([1, -1], dtype=np.int8)),
            lambda: torch_gpt()(t(ids([1, -1], dtype=np.int8))),
            ValueError,
            r"^idx\b",
        ),
        "Linear: in_features = 0": Row(
            "ch02",
            lambda: N.Linear(0, 3),
            lambda: T.Linear(0, 3),
            ValueError,
            r"in_features",
        ),
        "Linear: out_features = -1": Row(
            "ch02",
            lambda: N.Linear(3, -1),
            lambda: T.Linear(3, -1),
            ValueError,
            r"out_features",
        ),
        "Embedding: num_embeddings = 0": Row(
            "ch02",
            lambda: N.Embedding(0, C),
            lambda: T.Embedding(0, C),
            ValueError,
            r"num_embeddings",
        ),
        "SDPA: q of rank 3": Row(
            "ch03",
            lambda: N.scaled_dot_product_attention(Q[0], Q[0], Q[0]),
            lambda: T.scaled_dot_product_attention(t(Q[0]), t(Q[0]), t(Q[0])),
            ValueError,
            r"^q\b.*4 dimensions",
        ),
        "SDPA: k of another batch size (no broadcasting)": Row(
            "ch03",
            lambda: N.scaled_dot_product_attention(Q, np.zeros((2, H, 3, 4)), Q),
            lambda: T.scaled_dot_product_attention(t(Q), torch.zeros(2, H, 3, 4).double(), t(Q)),
            ValueError,
            r"^k\b",
        ),
        "SDPA: integer attn_mask": Row(
            "ch03",
            lambda: N.scaled_dot_product_attention(Q, Q, Q, np.ones((3, 3), np.int64)),
            lambda: T.scaled_dot_product_attention(t(Q), t(Q), t(Q), torch.ones(3, 3).long()),
            TypeError,
            r"^attn_mask\b",
        ),
        "SelfAttention: n_heads = 0": Row(
            "ch04",
            lambda: N.SelfAttention(C, 0),
            lambda: T.SelfAttention(C, 0),
            ValueError,
            r"n_heads",
        ),
        "SelfAttention: d_model = 0": Row(
            "ch04",
            lambda: N.SelfAttention(0, 1),
            lambda: T.SelfAttention(0, 1),
            ValueError,
            r"d_model",
        ),
        "LearnedPositionalEmbedding: block_size = 0": Row(
            "ch05",
            lambda: N.LearnedPositionalEmbedding(0, C),
            lambda: T.LearnedPositionalEmbedding(0, C),
            ValueError,
            r"block_size",
        ),
        "FeedForward: d_ff = 0": Row(
            "ch06",
            lambda: N.FeedForward(C, 0),
            lambda: T.FeedForward(C, 0),
            ValueError,
            r"d_ff",
        ),
        "Dropout: integer mask": Row(
            "ch06",
            lambda: N.Dropout(0.5)(X, mask=np.ones(X.shape, np.int64)),
            lambda: T.Dropout(0.5)(t(X), mask=torch.ones(X.shape, dtype=torch.long)),
            TypeError,
            r"^mask\b",
        ),
        "Dropout: mask that would broadcast x to a bigger shape": Row(
            "ch06",
            lambda: N.Dropout(0.5)(X, mask=np.ones((3, *X.shape), bool)),
            lambda: T.Dropout(0.5)(t(X), mask=torch.ones((3, *X.shape), dtype=torch.bool)),
            ValueError,
            r"^mask\b",
        ),
        "LayerNorm: d_model = 0": Row(
            "ch07",
            lambda: N.LayerNorm(0),
            lambda: T.LayerNorm(0),
            ValueError,
            r"d_model",
        ),
        "LayerNorm: eps = 0": Row(
            "ch07",
            lambda: N.LayerNorm(C, eps=0.0),
            lambda: T.LayerNorm(C, eps=0.0),
            ValueError,
            r"^eps\b",
        ),
        "LayerNorm: eps = NaN": Row(
            "ch07",
            lambda: N.LayerNorm(C, eps=float("nan")),
            lambda: T.LayerNorm(C, eps=float("nan")),
            ValueError,
            r"^eps\b",
        ),
        "RMSNorm: d_model = 0": Row(
            "ch14", lambda: N.RMSNorm(0), lambda: T.RMSNorm(0), ValueError, r"d_model"
        ),
        "MultiHeadAttention: d_model = 0": Row(
            "ch04",
            lambda: N.MultiHeadAttention(0, 1),
            lambda: T.MultiHeadAttention(0, 1),
            ValueError,
            r"^d_model\b.*positive",
        ),
        # -- the catalogue: sampling ----------------------------------------------------------
        "filter_logits: temperature < 0": Row(
            "ch10",
            lambda: NS.filter_logits(np.zeros((1, V)), temperature=-1.0),
            lambda: T.filter_logits(torch.zeros(1, V), temperature=-1.0),
            ValueError,
            r"^temperature\b",
        ),
        "filter_logits: top_k < 0": Row(
            "ch10",
            lambda: NS.filter_logits(np.zeros((1, V)), top_k=-1),
            lambda: T.filter_logits(torch.zeros(1, V), top_k=-1),
            ValueError,
            r"^top_k\b",
        ),
        "filter_logits: top_p < 0": Row(
            "ch10",
            lambda: NS.filter_logits(np.zeros((1, V)), top_p=-0.5),
            lambda: T.filter_logits(torch.zeros(1, V), top_p=-0.5),
            ValueError,
            r"^top_p\b",
        ),
        "filter_logits: top_p = NaN": Row(
            "ch10",
            lambda: NS.filter_logits(np.zeros((1, V)), top_p=float("nan")),
            lambda: T.filter_logits(torch.zeros(1, V), top_p=float("nan")),
            ValueError,
            r"^top_p\b",
        ),
        "backend.generate: empty prompt": plumbing(
            lambda b: make_backend(b, GPT_CONFIG).generate([], 3), ValueError, r"^idx\b"
        ),
        # -- the catalogue: the command line ----------------------------------------------------
        "train: corpus path missing": plumbing(
            lambda b: train(b, "--data", str(files() / "missing.txt")), UserError, r"missing\.txt"
        ),
        "train: corpus file empty": plumbing(
            lambda b: train(b, "--data", str(files() / "empty.txt")), UserError, r"empty\.txt"
        ),
        "train: corpus not UTF-8": plumbing(
            lambda b: train(b, "--data", str(files() / "latin1.txt")), UserError, r"UTF-8"
        ),
        "train: --out is a file": plumbing(
            lambda b: train(b, "--out", str(files() / "a-file")), UserError, r"^--out\b"
        ),
        "train: negative --seed": plumbing(
            lambda b: train(b, "--seed", "-1"), UserError, r"^--seed\b"
        ),
        "train: --batch-size 0": plumbing(
            lambda b: train(b, "--batch-size", "0"), UserError, r"^--batch-size\b"
        ),
        "train: negative --min-lr (NumPy once trained with it)": plumbing(
            lambda b: train(b, "--min-lr", "-1"), UserError, r"^--min-lr\b"
        ),
        "train: negative --grad-clip (once silently no clipping)": plumbing(
            lambda b: train(b, "--grad-clip", "-1"), UserError, r"^--grad-clip\b"
        ),
        "sample: empty --prompt": plumbing(
            lambda b: sample(b, "good", prompt=""), UserError, r"^--prompt\b"
        ),
        "sample: --prompt with characters outside the vocabulary": plumbing(
            lambda b: sample(b, "good", prompt="abz"), UserError, r"^--prompt\b.*'z'"
        ),
        "sample: --top-p 0": plumbing(
            lambda b: cli(b, "sample", "--checkpoint", str(files() / "good"), "--top-p", "0"),
            UserError,
            r"^--top-p\b",
        ),
        # -- the catalogue: checkpoints -----------------------------------------------------------
        "checkpoint: truncated model.safetensors": plumbing(
            lambda b: load_into(b, "truncated"), CheckpointError, r"model\.safetensors"
        ),
        "checkpoint: truncated model.safetensors, no recorded hash": plumbing(
            lambda b: load_into(b, "truncated-unhashed"),
            CheckpointError,
            r"model\.safetensors: not a valid safetensors file",
        ),
        "checkpoint: config.json's d_model does not match the weights": plumbing(
            lambda b: load_into(b, "other-shapes"),
            CheckpointError,
            r"tok_emb\.weight: model\.safetensors has shape \(7, 8\), config says \(7, 16\)",
        ),
        "checkpoint: the tokenizer's vocabulary does not match vocab_size": plumbing(
            lambda b: load_into(b, "other-vocab"), CheckpointError, r"tokenizer defines 8 ids"
        ),
        "checkpoint: sample with a truncated file": plumbing(
            lambda b: sample(b, "truncated"), UserError, r"model\.safetensors"
        ),
        "load_state_dict: a key missing": plumbing(
            lambda b: backend_state(b, lambda s: s.pop("ln_f.weight")),
            CheckpointError,
            r"missing keys \['ln_f\.weight'\]",
        ),
        "load_state_dict: an unexpected key": plumbing(
            lambda b: backend_state(b, lambda s: s.update({"ln_g.weight": s["ln_f.weight"]})),
            CheckpointError,
            r"unexpected keys \['ln_g\.weight'\]",
        ),
        "load_state_dict: a wrong shape": plumbing(
            lambda b: backend_state(b, lambda s: s.update({"ln_f.weight": np.ones(3)})),
            CheckpointError,
            r"ln_f\.weight: expected shape \(8,\), got \(3,\)",
        ),
    }
)


def np_classifier():
    return N.TransformerClassifier(V, 2, BLOCK, n_layers=1, n_heads=H, d_model=C, dtype=np.float64)


def torch_classifier():
    return T.TransformerClassifier(
        V, 2, BLOCK, n_layers=1, n_heads=H, d_model=C, dtype=torch.float64
    )


SEQ2SEQ = {"block_size": BLOCK, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": H}


def np_seq2seq():
    return N.Seq2SeqTransformer(V, V, **SEQ2SEQ, d_model=C, dtype=np.float64)


def torch_seq2seq():
    return T.Seq2SeqTransformer(V, V, **SEQ2SEQ, d_model=C, dtype=torch.float64)


def _cases():
    for name, row in ROWS.items():
        for backend in ("numpy", "torch"):
            marks = [getattr(pytest.mark, row.chapter)] if row.chapter else []
            if row.known_bug and backend in row.known_bug:
                marks.append(pytest.mark.xfail(strict=True, reason=row.known_bug[backend]))
            yield pytest.param(backend, row, id=f"{backend}-{name}", marks=marks)


@pytest.mark.parametrize(("backend", "row"), list(_cases()))
def test_bad_input_raises_the_same_error_naming_the_argument(backend, row: Row):
    call = row.numpy_call if backend == "numpy" else row.torch_call
    with pytest.raises(Exception) as info:
        call()
    err = info.value
    assert type(err) is row.exception, (
        f"{backend} raised {type(err).__name__} ({err}), expected {row.exception.__name__}"
    )
    assert info.match(row.match), f"{backend}'s message does not name the argument: {err}"


@pytest.mark.ch10
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_narrow_prompt_dtypes_never_wrap_new_ids(backend):
    """A uint8 prompt to a model with 300 ids: the ids generated (up to 299) come back
    as int64, equal to those from the same prompt in int64, never wrapped modulo 256."""
    config = {**GPT_CONFIG, "vocab_size": 300}
    prompt = np.array([[1, 2, 250]], dtype=np.uint8)
    if backend == "numpy":
        model = N.GPT(N.GPTConfig(**config), seed=0, dtype=np.float64)
        model.head.weight.data[299] *= 50.0  # make id 299 the greedy choice everywhere

        def run(idx):
            return NS.generate(model, idx, 4, temperature=0.0)
    else:
        torch.manual_seed(0)
        model = T.GPT(T.GPTConfig(**config), dtype=torch.float64)
        with torch.no_grad():
            model.head.weight[299] *= 50.0

        def run(idx):
            return T.generate(model, t(idx), 4, temperature=0.0).numpy()

    narrow, wide = run(prompt), run(prompt.astype(np.int64))
    assert narrow.dtype == np.int64
    np.testing.assert_array_equal(narrow, wide)
    assert narrow[0, 3:].max() >= 256, "no id above 255 was generated: the test is vacuous"
