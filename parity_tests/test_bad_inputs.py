"""Bad inputs: both backends raise the same exception type, naming the argument.

One table, one row per mistake a learner (or a data pipeline) makes. Each row
calls the NumPy twin and the torch twin the same way; both must raise exactly
the row's exception type (not a subclass, not a different one), and both
messages must match the row's pattern, which names the offending argument.
PyTorch indexing would wrap a negative id round to the end of the table and
NumPy fancy indexing would too: both twins must reject it instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
import torch

import numpy_impl as N
import numpy_impl.sampling as NS
import torch_impl as T

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
    chapter: str
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
    "CausalSelfAttention: d_model not divisible by n_heads": Row(
        "ch04",
        lambda: N.CausalSelfAttention(10, 3),
        lambda: T.CausalSelfAttention(10, 3),
        ValueError,
        r"d_model.*n_heads",
    ),
    "CausalSelfAttention: x of rank 2": Row(
        "ch04",
        lambda: N.CausalSelfAttention(C, H, dtype=np.float64)(X[0]),
        lambda: T.CausalSelfAttention(C, H, dtype=torch.float64)(t(X[0])),
        ValueError,
        r"^x\b",
    ),
    "CausalSelfAttention: T = 0": Row(
        "ch04",
        lambda: N.CausalSelfAttention(C, H, dtype=np.float64)(X[:, :0]),
        lambda: T.CausalSelfAttention(C, H, dtype=torch.float64)(t(X[:, :0])),
        ValueError,
        r"^x\b",
    ),
    "CausalSelfAttention: wrong width": Row(
        "ch04",
        lambda: N.CausalSelfAttention(C, H, dtype=np.float64)(X[..., :4]),
        lambda: T.CausalSelfAttention(C, H, dtype=torch.float64)(t(X[..., :4])),
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
        lambda: N.attention.key_padding_attn_mask(np.ones((2, 3), np.int64)),
        lambda: T.attention.key_padding_attn_mask(torch.ones(2, 3, dtype=torch.long)),
        TypeError,
        r"^token_mask\b.*bool",
    ),
    "key_padding_attn_mask: 3-D mask": Row(
        "ch15",
        lambda: N.attention.key_padding_attn_mask(np.ones((2, 1, 3), bool)),
        lambda: T.attention.key_padding_attn_mask(torch.ones(2, 1, 3, dtype=torch.bool)),
        ValueError,
        r"^token_mask\b.*\(B, T\)",
    ),
    "to_attn_mask: unknown convention": Row(
        "ch15",
        lambda: N.attention.to_attn_mask(np.ones(3, bool), "inverted"),
        lambda: T.attention.to_attn_mask(torch.ones(3, dtype=torch.bool), "inverted"),
        ValueError,
        r"^convention\b",
    ),
    "to_attn_mask: a 0/1 float mask read as True = masked": Row(
        "ch15",
        lambda: N.attention.to_attn_mask(np.ones(3), "masked"),
        lambda: T.attention.to_attn_mask(torch.ones(3), "masked"),
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
    "CrossAttention: memory of another batch size": Row(
        "ch16",
        lambda: N.CrossAttention(C, H, dtype=np.float64)(X, np.zeros((3, 4, C))),
        lambda: T.CrossAttention(C, H, dtype=torch.float64)(t(X), torch.zeros(3, 4, C).double()),
        ValueError,
        r"^memory\b",
    ),
    "CrossAttention: memory of another width": Row(
        "ch16",
        lambda: N.CrossAttention(C, H, dtype=np.float64)(X, np.zeros((2, 4, C + 1))),
        lambda: T.CrossAttention(C, H, dtype=torch.float64)(
            t(X), torch.zeros(2, 4, C + 1).double()
        ),
        ValueError,
        r"^memory\b.*d_model",
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
}


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
            marks = [getattr(pytest.mark, row.chapter)]
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
