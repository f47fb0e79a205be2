"""Properties the textbook mistakes break, where parity on small random inputs does not see them.

* softmax is shift-invariant: softmax(x + 1000) = softmax(x), finite. An ``exp`` of the raw
  scores overflows (exp(1000) = inf, inf / inf = NaN), yet agrees on inputs of size 1.
* attention on large float32 scores (q = k ~ 10: scores ~ 100 > log(float32 max) ~ 88.7)
  stays finite and matches torch's.
* the decoder's first position reads the whole memory: its output moves when the memory's
  last position changes (a causal mask in the cross-attention hides it).

Causal self-attention ignoring the future is test_components.py's (chapter 04) and
test_seq2seq.py's (the decoder, chapter 16).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import twins
from parity_tests.strategies import SeededRng, rngs
from parity_tests.tolerances import assert_close

OVERFLOW = "NaN or inf: subtract each row's max before exp (exp of a large score overflows)"


@pytest.mark.ch03
@given(rng=rngs, rows=st.integers(1, 4), n=st.integers(1, 9), shift=st.sampled_from([1e3, -1e3]))
def test_softmax_of_shifted_scores_is_the_same(rng: SeededRng, rows, n, shift):
    x = rng.normal((rows, n))
    shifted = N.softmax(x + shift)
    assert np.all(np.isfinite(shifted)), f"softmax(x {shift:+g}): {OVERFLOW}"
    assert_close(f"softmax(x {shift:+g}) vs softmax(x)", shifted, N.softmax(x), np.float64)


@pytest.mark.ch03
@given(rng=rngs, T_=st.integers(1, 6), d_k=st.integers(1, 8), big=st.sampled_from([10.0, 30.0]))
def test_attention_on_large_float32_scores_stays_finite(rng: SeededRng, T_, d_k, big):
    q, v = (rng.uniform((1, 2, T_, d_k), dtype=np.float32) for _ in range(2))
    q = q + np.float32(big)  # scores q k^T / sqrt(d_k) ~ big^2 sqrt(d_k) >= 100
    out, _ = N.scaled_dot_product_attention(q, q, v)
    assert np.all(np.isfinite(out)), f"attention on float32 scores ~{big**2:g}: {OVERFLOW}"
    qt, vt = torch.from_numpy(q), torch.from_numpy(v)
    assert_close(
        "attention on large float32 scores",
        out,
        F.scaled_dot_product_attention(qt, qt, vt),
        np.float32,
    )


@pytest.mark.ch16
@given(rng=rngs, S=st.integers(2, 6), T_=st.integers(1, 5))
def test_the_first_target_position_reads_the_whole_memory(rng: SeededRng, S, T_):
    block, _ = twins(N.DecoderBlock, T.DecoderBlock, 8, 2, rng=rng)
    x, memory = rng.normal((1, T_, 8)), rng.normal((1, S, 8))
    memory2 = memory.copy()
    memory2[:, -1] += 1.0
    a, b = block(x, memory), block(x, memory2)
    assert not np.allclose(a[:, 0], b[:, 0]), (
        "the decoder's first position ignores the memory's last position: the cross-attention "
        "is masked causally (only the self-attention is causal)"
    )
