"""Bad inputs: both backends raise the same exception type, naming the argument.

One table, one row per mistake a learner (or a data pipeline) makes, written once:
``(chapter, call, exception, match)``, where ``call(b)`` receives a :class:`Backend`,
``b``, the NumPy twin's names or the torch twin's (``b.Linear``, ``b.masks``,
``b.float64``), with ``b.array`` turning a NumPy array into the backend's own kind
(an ndarray or a tensor). Each row runs against both backends; both must raise
exactly the row's exception type (not a subclass, not a different one), and both
messages must match the row's pattern, which names the offending argument.
PyTorch indexing would wrap a negative id round to the end of the table and NumPy
fancy indexing would too: both twins must reject it instead.

The command line and checkpoints (``labs/`` plumbing, no exercise) have their own
table: test_bad_inputs_cli.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
import pytest
import torch

import numpy_impl as N
import torch_impl as T

V, BLOCK, C, H = 7, 6, 8, 2  # a tiny GPT: vocabulary, block_size, d_model, heads
GPT_CONFIG = {"vocab_size": V, "block_size": BLOCK, "n_layers": 1, "n_heads": H, "d_model": C}
SEQ2SEQ = {"block_size": BLOCK, "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": H}

X = np.zeros((2, 3, C))  # a well-formed (B, T, C) activation
Q = np.zeros((1, H, 3, 4))  # a well-formed (B, H, T, d_k) query/key/value


@dataclass(frozen=True)
class Backend:
    """One backend as a row sees it: its package's names (``b.Linear``, ``b.masks``,
    ``b.filter_logits``), arrays of its own kind, its dtypes and a few small models."""

    name: str  # "numpy" or "torch"
    package: ModuleType

    def __getattr__(self, attr: str):
        return getattr(self.package, attr)

    @property
    def float64(self):
        return np.float64 if self.name == "numpy" else torch.float64

    def array(self, a, dtype=None):
        """A NumPy array (or nested lists) as this backend's array: an ndarray or a tensor."""
        a = np.array(a, dtype=dtype)  # a copy
        return a if self.name == "numpy" else torch.from_numpy(a)

    def zeros(self, *shape, dtype=np.float64):
        return self.array(np.zeros(shape, dtype))

    def ones(self, *shape, dtype=np.float64):
        return self.array(np.ones(shape, dtype))

    def ids(self, *rows, dtype=np.int64):
        """A ``(B, T)`` batch of ids, one row per argument."""
        return self.array(rows, dtype)

    def gpt(self):
        config = self.package.GPTConfig(**GPT_CONFIG)
        if self.name == "numpy":
            return N.GPT(config, seed=0, dtype=np.float64)
        return T.GPT(config, dtype=torch.float64)

    def classifier(self):
        return self.TransformerClassifier(
            V, 2, BLOCK, n_layers=1, n_heads=H, d_model=C, dtype=self.float64
        )

    def seq2seq(self):
        return self.Seq2SeqTransformer(V, V, **SEQ2SEQ, d_model=C, dtype=self.float64)

    def bpe(self):
        """A small from-scratch BPE (trained once), or its HF twin with the same merges."""
        return _bpe(self.name)


BACKENDS = {"numpy": Backend("numpy", N), "torch": Backend("torch", T)}


_BPE: dict = {}


def _bpe(name: str):
    if "numpy" not in _BPE:
        _BPE["numpy"] = N.BPETokenizer.train("hello world, hello there", 270)
    if name == "torch" and "torch" not in _BPE:
        tok = _BPE["numpy"]
        _BPE["torch"] = T.BPETokenizer(tok.vocab, tok.merges, tok.special_tokens)
    return _BPE[name]


def bpe_model() -> dict:
    return json.loads(_bpe("numpy").to_json())["model"]


def bpe_json_with(**fields) -> str:
    """The small BPE's tokenizer.json with some top-level fields replaced."""
    return json.dumps({**json.loads(_bpe("numpy").to_json()), **fields})


ADDED = {"id": 300, "content": "<|x|>", "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": True}  # fmt: skip
_BOS = {"id": "<|x|>", "ids": [300], "tokens": ["<|x|>"]}
TEMPLATE_BOS = {"type": "TemplateProcessing", "pair": [], "special_tokens": {"<|x|>": _BOS},
                "single": [{"SpecialToken": {"id": "<|x|>", "type_id": 0}},
                           {"Sequence": {"id": "A", "type_id": 0}}]}  # fmt: skip


@dataclass(frozen=True)
class Row:
    chapter: str
    call: Callable[[Backend], object]
    exception: type[Exception]
    match: str  # regex that must occur in both messages: the argument's name
    known_bug: dict[str, str] | None = None  # backend -> reason: an expected failure


ROWS: dict[str, Row] = {
    # -- ch02: Linear, Embedding ------------------------------------------------------------
    "Linear: wrong input width": Row(
        "ch02",
        lambda b: b.Linear(3, 2, dtype=b.float64)(b.zeros(2, 4)),
        ValueError,
        r"^x\b.*in_features",
    ),
    "Linear: in_features = 0": Row("ch02", lambda b: b.Linear(0, 3), ValueError, r"in_features"),
    "Linear: out_features = -1": Row(
        "ch02", lambda b: b.Linear(3, -1), ValueError, r"out_features"
    ),
    "Linear: int64 input (would be cast)": Row(
        "ch02",
        lambda b: b.Linear(3, 2, dtype=b.float64)(b.ones(2, 3, dtype=np.int64)),
        TypeError,
        r"^x: expected a floating-point",
    ),
    "Linear: float32 input into a float64 layer": Row(
        "ch02",
        lambda b: b.Linear(3, 2, dtype=b.float64)(b.ones(2, 3, dtype=np.float32)),
        TypeError,
        r"^x: dtype .* differs",
    ),
    "Embedding: id == num_embeddings": Row(
        "ch02", lambda b: b.Embedding(V, C)(b.ids([0, V])), ValueError, r"^idx\b"
    ),
    "Embedding: negative id (must not wrap)": Row(
        "ch02", lambda b: b.Embedding(V, C)(b.ids([0, -1])), ValueError, r"^idx\b"
    ),
    "Embedding: float ids": Row(
        "ch02",
        lambda b: b.Embedding(V, C)(b.ids([0.0, 1.0], dtype=np.float32)),
        TypeError,
        r"^idx\b",
    ),
    "Embedding: num_embeddings = 0": Row(
        "ch02", lambda b: b.Embedding(0, C), ValueError, r"num_embeddings"
    ),
    # -- ch03: scaled dot-product attention ------------------------------------------------
    "SDPA: attn_mask of an integer dtype (0/1 keep-mask passed as is)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), b.ones(3, 3, dtype=np.int64), is_causal=True
        ),
        TypeError,
        r"^attn_mask\b.*bool",
    ),
    "SDPA: float attn_mask of another dtype than q": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), b.zeros(3, 3, dtype=np.float32)
        ),
        TypeError,
        r"^attn_mask\b",
    ),
    "SDPA: attn_mask of the wrong shape": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), b.ones(3, 2, dtype=bool)
        ),
        ValueError,
        r"attn_mask",
    ),
    "SDPA: k of another head size than q": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(b.array(Q), b.zeros(1, H, 3, 5), b.array(Q)),
        ValueError,
        r"\bk\b",
    ),
    "SDPA: integer q, k, v": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(*(b.ones(1, 1, 2, 2, dtype=np.int64),) * 3),
        TypeError,
        r"^q, k, v\b.*floating dtype",
    ),
    "SDPA: q of rank 3": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(b.array(Q[0]), b.array(Q[0]), b.array(Q[0])),
        ValueError,
        r"^q\b.*4 dimensions",
    ),
    "SDPA: k of another batch size (no broadcasting)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(b.array(Q), b.zeros(2, H, 3, 4), b.array(Q)),
        ValueError,
        r"^k\b",
    ),
    "SDPA: integer attn_mask": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), b.ones(3, 3, dtype=np.int64)
        ),
        TypeError,
        r"^attn_mask\b",
    ),
    "SDPA: is_causal = 1 (NumPy took any truthy value)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(b.array(Q), b.array(Q), b.array(Q), is_causal=1),
        TypeError,
        r"^is_causal: expected a bool",
    ),
    "SDPA: is_causal = 'no' (once read as True)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), is_causal="no"
        ),
        TypeError,
        r"^is_causal: expected a bool",
    ),
    "SDPA: scale = NaN (once NaN out of NumPy, finite out of the fused kernel)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q), b.array(Q), scale=float("nan")
        ),
        ValueError,
        r"^scale: expected a finite number > 0",
    ),
    "SDPA: scale = 0": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(b.array(Q), b.array(Q), b.array(Q), scale=0.0),
        ValueError,
        r"^scale\b",
    ),
    "SDPA: no keys, T_k = 0 (once a raw NumPy error, zeros out of torch)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q), b.array(Q[:, :, :0]), b.array(Q[:, :, :0])
        ),
        ValueError,
        r"^k: expected at least one key",
    ),
    "SDPA: head dimension d_k = 0 (once a ZeroDivisionError in NumPy)": Row(
        "ch03",
        lambda b: b.scaled_dot_product_attention(
            b.array(Q[..., :0]), b.array(Q[..., :0]), b.array(Q)
        ),
        ValueError,
        r"^q: expected a head dimension",
    ),
    # -- ch04: multi-head attention ---------------------------------------------------------
    "SelfAttention: d_model not divisible by n_heads": Row(
        "ch04", lambda b: b.SelfAttention(10, 3), ValueError, r"d_model.*n_heads"
    ),
    "SelfAttention: x of rank 2": Row(
        "ch04",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(b.array(X[0])),
        ValueError,
        r"^x\b",
    ),
    "SelfAttention: T = 0": Row(
        "ch04",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(b.array(X[:, :0])),
        ValueError,
        r"^x\b",
    ),
    "SelfAttention: wrong width": Row(
        "ch04",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(b.array(X[..., :4])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "SelfAttention: n_heads = 0": Row(
        "ch04", lambda b: b.SelfAttention(C, 0), ValueError, r"n_heads"
    ),
    "SelfAttention: d_model = 0": Row(
        "ch04", lambda b: b.SelfAttention(0, 1), ValueError, r"d_model"
    ),
    # multi-head attention with separate projections (the tutorial's layer, ch04's parts)
    "MultiHeadAttention: key of another batch size": Row(
        "ch04",
        lambda b: b.MultiHeadAttention(C, H, dtype=b.float64)(
            b.array(X), b.array(X[:1]), b.array(X[:1])
        ),
        ValueError,
        r"^key, value\b",
    ),
    "MultiHeadAttention: attn_mask of the wrong shape": Row(
        "ch04",
        lambda b: b.MultiHeadAttention(C, H, dtype=b.float64)(
            b.array(X), b.array(X), b.array(X), b.ones(3, 2, dtype=bool)
        ),
        ValueError,
        r"attn_mask",
    ),
    "MultiHeadAttention: integer attn_mask": Row(
        "ch04",
        lambda b: b.MultiHeadAttention(C, H, dtype=b.float64)(
            b.array(X), b.array(X), b.array(X), b.ones(3, 3, dtype=np.int64)
        ),
        TypeError,
        r"attn_mask",
    ),
    "MultiHeadAttention: d_model = 0": Row(
        "ch04", lambda b: b.MultiHeadAttention(0, 1), ValueError, r"^d_model\b.*positive"
    ),
    "merge_qkv_state_dict: v_proj missing": Row(
        "ch04",
        lambda b: b.merge_qkv_state_dict(
            {"q_proj.weight": b.array(np.eye(2)), "k_proj.weight": b.array(np.eye(2))}
        ),
        ValueError,
        r"^state_dict\b",
    ),
    # -- ch05: positions -------------------------------------------------------------------
    "LearnedPositionalEmbedding: T > block_size": Row(
        "ch05",
        lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(BLOCK + 1),
        ValueError,
        r"^T\b.*block_size",
    ),
    "LearnedPositionalEmbedding: float T": Row(
        "ch05", lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(3.0), TypeError, r"^T\b"
    ),
    "LearnedPositionalEmbedding: T = 0": Row(
        "ch05", lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(0), ValueError, r"^T\b"
    ),
    "LearnedPositionalEmbedding: start_pos + T > block_size": Row(
        "ch05",
        lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(2, BLOCK - 1),
        ValueError,
        r"^start_pos\b.*block_size",
    ),
    "LearnedPositionalEmbedding: negative start_pos": Row(
        "ch05",
        lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(2, -1),
        ValueError,
        r"^start_pos\b",
    ),
    "LearnedPositionalEmbedding: float start_pos": Row(
        "ch05",
        lambda b: b.LearnedPositionalEmbedding(BLOCK, C)(2, 1.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    "LearnedPositionalEmbedding: block_size = 0": Row(
        "ch05", lambda b: b.LearnedPositionalEmbedding(0, C), ValueError, r"block_size"
    ),
    # -- ch06: FFN, GELU, dropout -----------------------------------------------------------
    "GELU: unknown approximation": Row(
        "ch06", lambda b: b.GELU("relu"), ValueError, r"^approximate\b"
    ),
    "FeedForward: d_ff = 0": Row("ch06", lambda b: b.FeedForward(C, 0), ValueError, r"d_ff"),
    "Dropout: p = 1": Row("ch06", lambda b: b.Dropout(1.0), ValueError, r"^p\b"),
    "Dropout: p < 0": Row("ch06", lambda b: b.Dropout(-0.1), ValueError, r"^p\b"),
    "Dropout: integer mask": Row(
        "ch06",
        lambda b: b.Dropout(0.5)(b.array(X), mask=b.ones(*X.shape, dtype=np.int64)),
        TypeError,
        r"^mask\b",
    ),
    "Dropout: mask that would broadcast x to a bigger shape": Row(
        "ch06",
        lambda b: b.Dropout(0.5)(b.array(X), mask=b.ones(3, *X.shape, dtype=bool)),
        ValueError,
        r"^mask\b",
    ),
    # -- ch07: LayerNorm, block ---------------------------------------------------------------
    "LayerNorm: wrong width": Row(
        "ch07",
        lambda b: b.LayerNorm(C, dtype=b.float64)(b.array(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "LayerNorm: int64 input (would be cast)": Row(
        "ch07",
        lambda b: b.LayerNorm(C, dtype=b.float64)(b.ones(2, C, dtype=np.int64)),
        TypeError,
        r"^x: expected a floating-point",
    ),
    "LayerNorm: d_model = 0": Row("ch07", lambda b: b.LayerNorm(0), ValueError, r"d_model"),
    "LayerNorm: eps = 0": Row("ch07", lambda b: b.LayerNorm(C, eps=0.0), ValueError, r"^eps\b"),
    "LayerNorm: eps = NaN": Row(
        "ch07", lambda b: b.LayerNorm(C, eps=float("nan")), ValueError, r"^eps\b"
    ),
    "Block: x of rank 2": Row(
        "ch07", lambda b: b.Block(C, H, dtype=b.float64)(b.array(X[0])), ValueError, r"^x\b"
    ),
    # -- ch08: GPT -----------------------------------------------------------------------------
    "GPT: id == vocab_size": Row(
        "ch08", lambda b: b.gpt()(b.ids([0, V])), ValueError, r"^idx\b.*vocab_size"
    ),
    "GPT: negative id (must not wrap)": Row(
        "ch08", lambda b: b.gpt()(b.ids([3, -1])), ValueError, r"^idx\b"
    ),
    "GPT: uint8 id >= vocab_size (rejected, not wrapped)": Row(
        "ch08",
        lambda b: b.gpt()(b.ids([1, 200], dtype=np.uint8)),
        ValueError,
        r"^idx\b.*vocab_size",
    ),
    "GPT: uint64 id >= 2**63 (must not wrap to a negative id)": Row(
        "ch08",
        lambda b: b.gpt()(b.ids([1, 2**64 - 1], dtype=np.uint64)),
        ValueError,
        r"^idx\b.*vocab_size",
    ),
    "GPT: int8 id -1": Row(
        "ch08", lambda b: b.gpt()(b.ids([1, -1], dtype=np.int8)), ValueError, r"^idx\b"
    ),
    "GPT: float ids": Row(
        "ch08", lambda b: b.gpt()(b.ids([1.0, 2.0], dtype=np.float64)), TypeError, r"^idx\b"
    ),
    "GPT: bool ids": Row(
        "ch08", lambda b: b.gpt()(b.ids([True, False], dtype=bool)), TypeError, r"^idx\b"
    ),
    "GPT: ids of rank 1": Row("ch08", lambda b: b.gpt()(b.array([1, 2])), ValueError, r"^idx\b"),
    "GPT: ids of rank 3": Row(
        "ch08", lambda b: b.gpt()(b.zeros(1, 2, 3, dtype=np.int64)), ValueError, r"^idx\b"
    ),
    "GPT: sequence longer than block_size": Row(
        "ch08",
        lambda b: b.gpt()(b.zeros(1, BLOCK + 1, dtype=np.int64)),
        ValueError,
        r"^idx\b.*block_size",
    ),
    "GPT: T = 0": Row(
        "ch08", lambda b: b.gpt()(b.zeros(2, 0, dtype=np.int64)), ValueError, r"^idx\b"
    ),
    "GPTConfig: d_model not divisible by n_heads": Row(
        "ch08",
        lambda b: b.GPTConfig(vocab_size=V, d_model=10, n_heads=3),
        ValueError,
        r"d_model.*n_heads",
    ),
    "GPTConfig: vocab_size = 0": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=0), ValueError, r"^vocab_size\b"
    ),
    "GPTConfig: dropout = 1": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=V, dropout=1.0), ValueError, r"^dropout\b"
    ),
    "GPTConfig: unknown gelu_approximate": Row(
        "ch08",
        lambda b: b.GPTConfig(vocab_size=V, gelu_approximate="relu"),
        ValueError,
        r"^gelu_approximate\b",
    ),
    "GPTConfig: d_ff = True (once accepted by NumPy)": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=V, d_ff=True), ValueError, r"^d_ff\b"
    ),
    "GPTConfig: vocab_size = 2**63": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=2**63), ValueError, r"^vocab_size\b"
    ),
    "GPTConfig: block_size = 2**31": Row(
        "ch08",
        lambda b: b.GPTConfig(vocab_size=V, block_size=2**31),
        ValueError,
        r"^block_size\b",
    ),
    "GPTConfig: bias = 'false' (once read as True)": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=V, bias="false"), ValueError, r"^bias\b"
    ),
    "GPTConfig: bias = None": Row(
        "ch08", lambda b: b.GPTConfig(vocab_size=V, bias=None), ValueError, r"^bias\b"
    ),
    "GPTConfig: tie_weights = 'no'": Row(
        "ch08",
        lambda b: b.GPTConfig(vocab_size=V, tie_weights="no"),
        ValueError,
        r"^tie_weights\b",
    ),
    "GPTConfig.from_dict: bias = 0 (a config.json's number)": Row(
        "ch08",
        lambda b: b.GPTConfig.from_dict({"vocab_size": V, "bias": 0}),
        ValueError,
        r"^bias\b",
    ),
    # -- ch09: loss ----------------------------------------------------------------------------
    "CrossEntropyLoss: float targets": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V), b.array([0.0, 1.0])),
        TypeError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: target == V": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V), b.array([0, V])),
        ValueError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: negative target that is not ignore_index": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V), b.array([0, -1])),
        ValueError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: targets of the wrong shape": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V), b.array([0, 1, 2])),
        ValueError,
        r"^targets\b",
    ),
    "CrossEntropyLoss: 0-d logits": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.array(1.0), b.array(0)),
        ValueError,
        r"^logits\b",
    ),
    "CrossEntropyLoss: integer logits": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V, dtype=np.int64), b.array([0, 1])),
        TypeError,
        r"^logits\b",
    ),
    "CrossEntropyLoss: a uint64 target of 2**63 (reported as itself, not wrapped)": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss()(b.zeros(2, V), b.array([1, 2**63], dtype=np.uint64)),
        ValueError,
        r"^targets\b.*9223372036854775808",
    ),
    "CrossEntropyLoss: ignore_index = 1.5 (NumPy ignored nothing, torch int()ed it)": Row(
        "ch09", lambda b: b.CrossEntropyLoss(ignore_index=1.5), TypeError, r"^ignore_index\b"
    ),
    "CrossEntropyLoss: ignore_index = '1'": Row(
        "ch09", lambda b: b.CrossEntropyLoss(ignore_index="1"), TypeError, r"^ignore_index\b"
    ),
    "CrossEntropyLoss: ignore_index = None": Row(
        "ch09", lambda b: b.CrossEntropyLoss(ignore_index=None), TypeError, r"^ignore_index\b"
    ),
    "CrossEntropyLoss: ignore_index = True": Row(
        "ch09", lambda b: b.CrossEntropyLoss(ignore_index=True), TypeError, r"^ignore_index\b"
    ),
    "CrossEntropyLoss: ignore_index = 2**70": Row(
        "ch09", lambda b: b.CrossEntropyLoss(ignore_index=2**70), ValueError, r"^ignore_index\b"
    ),
    "CrossEntropyLoss: ignore_index = 2**64 - 1 for uint64 targets (outside int64)": Row(
        "ch09",
        lambda b: b.CrossEntropyLoss(ignore_index=2**64 - 1)(
            b.zeros(2, V), b.array([1, 2**64 - 1], dtype=np.uint64)
        ),
        ValueError,
        r"^ignore_index\b",
    ),
    "configure_param_groups: weight_decay = NaN": Row(
        "ch09",
        lambda b: b.configure_param_groups(b.gpt(), float("nan")),
        ValueError,
        r"^weight_decay\b",
    ),
    # -- ch10: sampling ------------------------------------------------------------------------
    "filter_logits: temperature = 0": Row(
        "ch10",
        lambda b: b.filter_logits(b.zeros(1, V), temperature=0.0),
        ValueError,
        r"^temperature\b",
    ),
    "filter_logits: temperature < 0": Row(
        "ch10",
        lambda b: b.filter_logits(b.zeros(1, V), temperature=-1.0),
        ValueError,
        r"^temperature\b",
    ),
    "filter_logits: top_k = 0": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, V), top_k=0), ValueError, r"^top_k\b"
    ),
    "filter_logits: top_k < 0": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, V), top_k=-1), ValueError, r"^top_k\b"
    ),
    "filter_logits: top_p = 0": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, V), top_p=0.0), ValueError, r"^top_p\b"
    ),
    "filter_logits: top_p > 1": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, V), top_p=1.5), ValueError, r"^top_p\b"
    ),
    "filter_logits: top_p < 0": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, V), top_p=-0.5), ValueError, r"^top_p\b"
    ),
    "filter_logits: top_p = NaN": Row(
        "ch10",
        lambda b: b.filter_logits(b.zeros(1, V), top_p=float("nan")),
        ValueError,
        r"^top_p\b",
    ),
    "filter_logits: integer logits (once float64 out of NumPy, float32 out of torch)": Row(
        "ch10",
        lambda b: b.filter_logits(b.ones(1, V, dtype=np.int64), top_k=2),
        TypeError,
        r"^logits\b",
    ),
    "filter_logits: bool logits": Row(
        "ch10", lambda b: b.filter_logits(b.ones(1, V, dtype=bool)), TypeError, r"^logits\b"
    ),
    "filter_logits: an empty vocabulary with top_p": Row(
        "ch10", lambda b: b.filter_logits(b.zeros(1, 0), top_p=0.5), ValueError, r"^logits\b"
    ),
    "filter_logits: top_p of one element, not a number (NumPy once took it)": Row(
        "ch10",
        lambda b: b.filter_logits(b.zeros(1, V), top_p=b.array([0.5])),
        ValueError,
        r"^top_p\b",
    ),
    "filter_logits: top_p as a 0-d array": Row(
        "ch10",
        lambda b: b.filter_logits(b.zeros(1, V), top_p=b.array(0.5)),
        ValueError,
        r"^top_p\b",
    ),
    "generate: empty prompt": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.zeros(1, 0, dtype=np.int64), 3),
        ValueError,
        r"^idx\b",
    ),
    "generate: negative temperature": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1]), 3, temperature=-1.0),
        ValueError,
        r"^temperature\b",
    ),
    "generate: temperature = NaN": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1]), 3, temperature=float("nan")),
        ValueError,
        r"^temperature: must be a finite number",
    ),
    "generate: temperature = inf": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1]), 3, temperature=float("inf")),
        ValueError,
        r"^temperature: must be a finite number",
    ),
    "generate: prompt id out of range": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1, V]), 3, temperature=0.0),
        ValueError,
        r"^idx\b",
    ),
    "generate: uniforms of the wrong shape": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1]), 3, uniforms=b.array(np.full((2, 1), 0.5))),
        ValueError,
        r"^uniforms\b",
    ),
    "generate: a uniform number of 1": Row(
        "ch10",
        lambda b: b.generate(b.gpt(), b.ids([1]), 2, uniforms=b.array([[0.5], [1.0]])),
        ValueError,
        r"^uniforms\b",
    ),
    # -- ch11: byte-level BPE ------------------------------------------------------------------
    "BPETokenizer.encode: text not a str": Row(
        "ch11", lambda b: b.bpe().encode(b"bytes"), TypeError, r"^text\b"
    ),
    "BPETokenizer.encode: a lone surrogate": Row(
        "ch11",
        lambda b: b.bpe().encode("a\ud800b"),  # HF itself raises a TypeError
        ValueError,
        r"^text\b.*surrogate",
    ),
    "BPETokenizer.encode: allowed_special not special": Row(
        "ch11",
        lambda b: b.bpe().encode("a", allowed_special={"<|pad|>"}),
        ValueError,
        r"^allowed_special\b",
    ),
    "BPETokenizer.decode: id == vocab_size": Row(
        "ch11",
        lambda b: b.bpe().decode([0, b.bpe().vocab_size]),  # HF would skip it
        ValueError,
        r"^ids\b",
    ),
    "BPETokenizer.decode: negative id": Row(
        "ch11", lambda b: b.bpe().decode(np.array([3, -1])), ValueError, r"^ids\b"
    ),
    "BPETokenizer.decode: float id": Row(
        "ch11", lambda b: b.bpe().decode([1, 2.0]), TypeError, r"^ids\b"
    ),
    "DecodeStream.step: id out of range": Row(
        "ch11", lambda b: b.bpe().decode_stream().step(10**6), ValueError, r"^ids\b"
    ),
    "BPETokenizer.train: vocab_size below 256 + specials": Row(
        "ch11", lambda b: b.BPETokenizer.train("abc", 256), ValueError, r"^vocab_size\b.*257"
    ),
    "BPETokenizer.train: empty special token": Row(
        "ch11",
        lambda b: b.BPETokenizer.train("abc", 300, special_tokens=[""]),
        ValueError,
        r"^special_tokens\b",
    ),
    "BPETokenizer: a pattern a tokenizer.json cannot hold": Row(
        "ch11",
        lambda b: b.BPETokenizer.train("abc", 300, pattern=r"\w+"),
        ValueError,
        r"^pattern\b",
    ),
    "BPETokenizer: vocab without every byte": Row(
        "ch11",
        lambda b: b.BPETokenizer({bytes([i]): i for i in range(255)}, []),
        ValueError,
        r"^vocab\b.*256 bytes",
    ),
    "BPETokenizer: merge of unknown tokens": Row(
        "ch11",
        lambda b: b.BPETokenizer({bytes([i]): i for i in range(256)}, [(b"a", b"b")]),
        ValueError,
        r"^merges\[0\]",
    ),
    "BPETokenizer.from_json: a normalizer": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(bpe_json_with(normalizer={"type": "Lowercase"})),
        ValueError,
        r"^tokenizer.json: normalizer\b",
    ),
    "BPETokenizer.from_json: merges not a list (NumPy once a bare TypeError)": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(bpe_json_with(model={**bpe_model(), "merges": 5})),
        ValueError,
        r"^tokenizer.json\b",
    ),
    "BPETokenizer.from_json: added token without content (NumPy once a KeyError)": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(bpe_json_with(added_tokens=[{"id": 300}])),
        ValueError,
        r"^tokenizer.json\b",
    ),
    # HF's tokenizers encodes these otherwise: refused, not silently different ids
    "BPETokenizer.from_json: a post-processor that prepends BOS": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(bpe_json_with(post_processor=TEMPLATE_BOS)),
        ValueError,
        r"^tokenizer.json: post_processor\b",
    ),
    "BPETokenizer.from_json: an added token that is not special": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(
            bpe_json_with(added_tokens=[ADDED | {"special": False}])
        ),
        ValueError,
        r"^tokenizer.json: added_tokens\b",
    ),
    "BPETokenizer.from_json: a special token with lstrip": Row(
        "ch11",
        lambda b: b.BPETokenizer.from_json(bpe_json_with(added_tokens=[ADDED | {"lstrip": True}])),
        ValueError,
        r"^tokenizer.json: added_tokens\b",
    ),
    # -- ch12: FlashAttention, the KV cache ------------------------------------------------------
    "flash_attention: tile_q = 0": Row(
        "ch12",
        lambda b: b.flash_attention(b.array(Q), b.array(Q), b.array(Q), tile_q=0),
        ValueError,
        r"^tile_q\b",
    ),
    "flash_attention: integer attn_mask": Row(
        "ch12",
        lambda b: b.flash_attention(
            b.array(Q), b.array(Q), b.array(Q), attn_mask=b.ones(3, 3, dtype=np.int64)
        ),
        TypeError,
        r"^attn_mask\b",
    ),
    "flash_attention: mask that does not broadcast": Row(
        "ch12",
        lambda b: b.flash_attention(
            b.array(Q), b.array(Q), b.array(Q), attn_mask=b.ones(2, 3, dtype=bool)
        ),
        ValueError,
        r"^attn_mask\b",
    ),
    "flash_attention: q of rank 3 (NumPy once broadcast it)": Row(
        "ch12",
        lambda b: b.flash_attention(b.array(Q[0]), b.array(Q[0]), b.array(Q[0])),
        ValueError,
        r"^q\b.*4 dimensions",
    ),
    "flash_attention: k of another batch size (no broadcasting)": Row(
        "ch12",
        lambda b: b.flash_attention(b.zeros(2, H, 3, 4), b.array(Q), b.array(Q)),
        ValueError,
        r"^k\b",
    ),
    "flash_attention: float32 q with float64 k, v (NumPy once upcast)": Row(
        "ch12",
        # torch's kernel alone would raise a RuntimeError
        lambda b: b.flash_attention(b.array(Q, np.float32), b.array(Q), b.array(Q)),
        TypeError,
        r"^q, k, v\b.*floating dtype",
    ),
    "GPT with kv_cache: start_pos past the cached positions": Row(
        "ch12",
        lambda b: (m := b.gpt())(b.ids([1]), kv_cache=m.new_kv_cache(), start_pos=1),
        ValueError,
        r"^start_pos\b",
    ),
    "GPT with kv_cache: float start_pos (once ValueError, RoPE's TypeError)": Row(
        "ch12",
        lambda b: (m := b.gpt())(b.ids([1]), kv_cache=m.new_kv_cache(), start_pos=0.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    "LayerKVCache.update: float start_pos": Row(
        "ch12",
        lambda b: b.KVCache(1, BLOCK).layers[0].update(b.array(Q), b.array(Q), 0.0),
        TypeError,
        r"^start_pos: expected an int, got float",
    ),
    "GPT with kv_cache: a cache of the wrong depth": Row(
        "ch12",
        lambda b: b.gpt()(b.ids([1]), kv_cache=b.KVCache(2, BLOCK)),
        ValueError,
        r"^kv_cache\b",
    ),
    "KVCache: max_len = 0": Row("ch12", lambda b: b.KVCache(1, 0), ValueError, r"^max_len\b"),
    # -- ch13: RoPE ---------------------------------------------------------------------------
    "RotaryEmbedding: odd head dimension": Row(
        "ch13", lambda b: b.RotaryEmbedding(3), ValueError, r"^d_k\b.*even"
    ),
    "SelfAttention: RoPE with an odd head dimension": Row(
        "ch13", lambda b: b.SelfAttention(6, 2, rope="half"), ValueError, r"^d_k\b.*even"
    ),
    "GPTConfig: RoPE with an odd head dimension": Row(
        "ch13",
        lambda b: b.GPTConfig(vocab_size=V, d_model=6, n_heads=2, pos_emb="rope"),
        ValueError,
        r"^d_model=6, n_heads=2\b.*even",
    ),
    # grouped-query attention and the rest of a modern decoder's config; what stays unsupported
    "SelfAttention: n_kv_heads not dividing n_heads": Row(
        "ch13", lambda b: b.SelfAttention(C, 4, 3), ValueError, r"^n_kv_heads=3 must divide"
    ),
    "SelfAttention: n_kv_heads = 0": Row(
        "ch13", lambda b: b.SelfAttention(C, H, 0), ValueError, r"^n_kv_heads\b"
    ),
    "SelfAttention: head_dim = 0": Row(
        "ch13", lambda b: b.SelfAttention(C, H, head_dim=0), ValueError, r"^head_dim\b"
    ),
    "RotaryEmbedding: rope_scaling yarn (unsupported)": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4, scaling={"rope_type": "yarn", "factor": 4.0}),
        ValueError,
        r"^rope_scaling\b",
    ),
    "RotaryEmbedding: rope_type given as a list": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4, scaling={"rope_type": ["linear"], "factor": 2.0}),
        ValueError,
        r"^rope_scaling\b",
    ),
    "RotaryEmbedding: llama3 scaling without its numbers": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4, scaling={"rope_type": "llama3", "factor": 8.0}),
        ValueError,
        r"^rope_scaling\b",
    ),
    "GPTConfig: n_kv_heads not dividing n_heads": Row(
        "ch13",
        lambda b: b.GPTConfig(vocab_size=V, n_heads=4, n_kv_heads=3),
        ValueError,
        r"^n_kv_heads\b",
    ),
    "GPTConfig: rope_scaling with learned positions": Row(
        "ch13",
        lambda b: b.GPTConfig(vocab_size=V, rope_scaling={"rope_type": "linear", "factor": 2}),
        ValueError,
        r"^rope_scaling\b",
    ),
    "GPTConfig: norm_eps = 0": Row(
        "ch14", lambda b: b.GPTConfig(vocab_size=V, norm_eps=0.0), ValueError, r"^norm_eps\b"
    ),
    "GPTConfig: qkv_bias not a bool": Row(
        "ch13", lambda b: b.GPTConfig(vocab_size=V, qkv_bias="yes"), ValueError, r"^qkv_bias\b"
    ),
    "RotaryEmbedding: unknown layout": Row(
        "ch13", lambda b: b.RotaryEmbedding(4, "neox"), ValueError, r"^layout\b"
    ),
    "RotaryEmbedding: negative start_pos": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4)(b.array(Q), b.array(Q), -1),
        ValueError,
        r"^start_pos\b",
    ),
    "RotaryEmbedding: float start_pos": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4)(b.array(Q), b.array(Q), 1.0),
        TypeError,
        r"^start_pos\b",
    ),
    "RotaryEmbedding: start_pos = 2**70 (once an OverflowError in torch only)": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(4)(b.array(Q), b.array(Q), 2**70),
        ValueError,
        r"^start_pos\b",
    ),
    "SelfAttention: RoPE at start_pos = 2**70": Row(
        "ch13",
        lambda b: b.SelfAttention(C, H, rope="half", dtype=b.float64)(b.array(X), start_pos=2**70),
        ValueError,
        r"^start_pos\b",
    ),
    "RotaryEmbedding: q of another head dimension": Row(
        "ch13",
        lambda b: b.RotaryEmbedding(6)(b.array(Q), b.array(Q)),
        ValueError,
        r"^q\b.*d_k=6",
    ),
    "rope_permutation: unknown layout": Row(
        "ch13",
        lambda b: b.rope_permutation(4, "interleaved", "neox"),
        ValueError,
        r"^to_layout\b",
    ),
    "GPTConfig: unknown pos_emb": Row(
        "ch13", lambda b: b.GPTConfig(vocab_size=V, pos_emb="sinusoid"), ValueError, r"^pos_emb\b"
    ),
    # -- ch14: RMSNorm, SwiGLU, the block's options ---------------------------------------------
    "RMSNorm: wrong width": Row(
        "ch14",
        lambda b: b.RMSNorm(C, dtype=b.float64)(b.array(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "RMSNorm: eps = 0": Row("ch14", lambda b: b.RMSNorm(C, eps=0.0), ValueError, r"^eps\b"),
    "RMSNorm: d_model = 0": Row("ch14", lambda b: b.RMSNorm(0), ValueError, r"d_model"),
    "SwiGLUFeedForward: wrong width": Row(
        "ch14",
        lambda b: b.SwiGLUFeedForward(C, dtype=b.float64)(b.array(X[..., :5])),
        ValueError,
        r"^x\b.*d_model",
    ),
    "FeedForward: unknown activation": Row(
        "ch14", lambda b: b.FeedForward(C, activation="swish"), ValueError, r"^activation\b"
    ),
    "Block: unknown norm": Row(
        "ch14", lambda b: b.Block(C, H, norm="batchnorm"), ValueError, r"^norm\b"
    ),
    "Block: unknown ffn": Row("ch14", lambda b: b.Block(C, H, ffn="geglu"), ValueError, r"^ffn\b"),
    "Block: unknown norm_position": Row(
        "ch14", lambda b: b.Block(C, H, norm_position="sandwich"), ValueError, r"^norm_position\b"
    ),
    "GPTConfig: unknown norm": Row(
        "ch14", lambda b: b.GPTConfig(vocab_size=V, norm="rms"), ValueError, r"^norm\b"
    ),
    # -- the sinusoidal positional encoding: marked ch15, not ch13, because the table is built
    # in __init__, which a learner's chapter-13 stub cannot run; chapter 15's models use it
    "SinusoidalPositionalEncoding: T > block_size": Row(
        "ch15",
        lambda b: b.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK + 1),
        ValueError,
        r"^T\b.*block_size",
    ),
    "SinusoidalPositionalEncoding: float T": Row(
        "ch15", lambda b: b.SinusoidalPositionalEncoding(BLOCK, C)(2.0), TypeError, r"^T\b"
    ),
    "SinusoidalPositionalEncoding: start_pos + T > block_size": Row(
        "ch15",
        lambda b: b.SinusoidalPositionalEncoding(BLOCK, C)(BLOCK, 1),
        ValueError,
        r"^start_pos\b.*block_size",
    ),
    # -- ch15: padding masks, the encoder, the classifier ------------------------------------
    "SelfAttention: attn_mask of the wrong shape": Row(
        "ch15",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(
            b.array(X), attn_mask=b.ones(2, 1, 1, 4, dtype=bool)
        ),
        ValueError,
        r"^attn_mask\b.*\(B, n_heads, T_q, T_k\)",
    ),
    "SelfAttention: attn_mask of an integer dtype": Row(
        "ch15",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(
            b.array(X), attn_mask=b.ones(2, 1, 1, 3, dtype=np.int64)
        ),
        TypeError,
        r"^attn_mask\b.*bool",
    ),
    "key_padding_attn_mask: 0/1 integers instead of bool": Row(
        "ch15",
        lambda b: b.masks.key_padding_attn_mask(b.ones(2, 3, dtype=np.int64)),
        TypeError,
        r"^token_mask\b.*bool",
    ),
    "key_padding_attn_mask: 3-D mask": Row(
        "ch15",
        lambda b: b.masks.key_padding_attn_mask(b.ones(2, 1, 3, dtype=bool)),
        ValueError,
        r"^token_mask\b.*\(B, T\)",
    ),
    "to_attn_mask: unknown convention": Row(
        "ch15",
        lambda b: b.masks.to_attn_mask(b.ones(3, dtype=bool), "inverted"),
        ValueError,
        r"^convention\b",
    ),
    "to_attn_mask: a 0/1 float mask read as True = masked": Row(
        "ch15",
        lambda b: b.masks.to_attn_mask(b.ones(3), "masked"),
        TypeError,
        r"^mask\b.*bool",
    ),
    "MeanPool: token_mask not matching the batch": Row(
        "ch15",
        lambda b: b.MeanPool()(b.array(X), b.ones(3, 3, dtype=bool)),
        ValueError,
        r"^token_mask\b.*\(2, 3\)",
    ),
    "MeanPool: float token_mask": Row(
        "ch15", lambda b: b.MeanPool()(b.array(X), b.ones(2, 3)), TypeError, r"^token_mask\b"
    ),
    "TransformerClassifier: token_mask of another length": Row(
        "ch15",
        lambda b: b.classifier()(b.ids([1, 2, 3]), b.ones(1, 2, dtype=bool)),
        ValueError,
        r"^token_mask\b",
    ),
    "TransformerClassifier: sequence longer than block_size": Row(
        "ch15",
        lambda b: b.classifier()(b.zeros(1, BLOCK + 1, dtype=np.int64)),
        ValueError,
        r"^idx\b.*block_size",
    ),
    "TransformerClassifier: d_model not divisible by n_heads": Row(
        "ch15",
        lambda b: b.TransformerClassifier(V, 2, d_model=10, n_heads=3),
        ValueError,
        r"d_model.*n_heads",
    ),
    # -- ch16: cross-attention, the encoder-decoder ----------------------------------------------
    "cross-attention: kv of another batch size": Row(
        "ch16",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(b.array(X), kv=b.zeros(3, 4, C)),
        ValueError,
        r"^kv\b",
    ),
    "cross-attention: kv of another width": Row(
        "ch16",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(b.array(X), kv=b.zeros(2, 4, C + 1)),
        ValueError,
        r"^kv\b.*d_model",
    ),
    "cross-attention: float32 kv into a float64 layer (NumPy once upcast it)": Row(
        "ch16",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(
            b.array(X), kv=b.zeros(2, 4, C, dtype=np.float32)
        ),
        TypeError,
        r"^kv: dtype .* differs",
    ),
    "cross-attention: integer kv": Row(
        "ch16",
        lambda b: b.SelfAttention(C, H, dtype=b.float64)(
            b.array(X), kv=b.zeros(2, 4, C, dtype=np.int64)
        ),
        TypeError,
        r"^kv: expected a floating-point",
    ),
    "Seq2SeqTransformer: src_mask of the wrong shape": Row(
        "ch16",
        lambda b: b.seq2seq()(b.ids([1, 2, 3]), b.ids([1, 2]), b.ones(1, 2, dtype=bool)),
        ValueError,
        r"^src_mask\b",
    ),
    "Seq2SeqTransformer: float tgt_mask": Row(
        "ch16",
        lambda b: b.seq2seq()(b.ids([1, 2, 3]), b.ids([1, 2]), None, b.ones(1, 2)),
        TypeError,
        r"^tgt_mask\b",
    ),
    "Seq2SeqTransformer: tgt of another batch size": Row(
        "ch16",
        lambda b: b.seq2seq()(b.ids([1, 2, 3]), b.ids([1, 2], [2, 1])),
        ValueError,
        r"^tgt\b",
    ),
    "Seq2SeqTransformer.generate: max_new_tokens > block_size": Row(
        "ch16",
        lambda b: b.seq2seq().generate(b.ids([1, 2]), BLOCK + 1, bos_id=0),
        ValueError,
        r"^max_new_tokens\b.*block_size",
    ),
}


def expect_error(backend: str, call: Callable[[], object], exception: type, match: str) -> None:
    """``call()`` raises exactly ``exception`` (not a subclass) with ``match`` in its message."""
    with pytest.raises(Exception) as info:
        call()
    err = info.value
    assert type(err) is exception, (
        f"{backend} raised {type(err).__name__} ({err}), expected {exception.__name__}"
    )
    assert info.match(match), f"{backend}'s message does not name the argument: {err}"


def _cases():
    for name, row in ROWS.items():
        for backend in BACKENDS:
            marks = [getattr(pytest.mark, row.chapter)]
            if row.known_bug and backend in row.known_bug:
                marks.append(pytest.mark.xfail(strict=True, reason=row.known_bug[backend]))
            yield pytest.param(backend, row, id=f"{backend}-{name}", marks=marks)


@pytest.mark.parametrize(("backend", "row"), list(_cases()))
def test_bad_input_raises_the_same_error_naming_the_argument(backend, row: Row):
    expect_error(backend, lambda: row.call(BACKENDS[backend]), row.exception, row.match)


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
            return N.generate(model, idx, 4, temperature=0.0)
    else:
        torch.manual_seed(0)
        model = T.GPT(T.GPTConfig(**config), dtype=torch.float64)
        with torch.no_grad():
            model.head.weight[299] *= 50.0

        def run(idx):
            return T.generate(model, torch.from_numpy(idx), 4, temperature=0.0).numpy()

    narrow, wide = run(prompt), run(prompt.astype(np.int64))
    assert narrow.dtype == np.int64
    np.testing.assert_array_equal(narrow, wide)
    assert narrow[0, 3:].max() >= 256, "no id above 255 was generated: the test is vacuous"
