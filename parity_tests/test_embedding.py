"""Token embedding: a repeated id collects the sum of its upstream gradients.

``dW[idx] += dout`` with NumPy fancy indexing keeps only the *last* write for a
repeated index; the scatter-add must be unbuffered (``np.add.at``). Checked
against an explicit loop (an oracle independent of both backends) and against
torch.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import copy_weights, randomize_, tensor, torch_dtype
from parity_tests.strategies import DTYPES, SeededRng, batch_sizes, lengths, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch02


@pytest.mark.parametrize("dtype", [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES])
@given(
    rng=rngs,
    B=batch_sizes,
    T_=lengths,
    vocab=st.integers(2, 50),
    used=st.integers(1, 3),  # how many distinct ids appear: few, so they repeat
    dim=st.integers(1, 8),
)
def test_repeated_ids_accumulate(dtype, rng: SeededRng, B, T_, vocab, used, dim):
    ids_pool = rng.choice(vocab, used)
    idx = ids_pool[rng.ids(len(ids_pool), (B, T_))]  # (B, T), values from the pool
    torch_mod = randomize_(T.Embedding(vocab, dim, dtype=torch_dtype(dtype)), rng)
    numpy_mod = N.Embedding(vocab, dim, dtype=dtype)
    copy_weights(torch_mod, numpy_mod)

    out = numpy_mod(idx)
    out_t = torch_mod(torch.from_numpy(idx))
    assert_close("embedding lookup", out, out_t, dtype)
    dout = rng.normal(out.shape, dtype)
    (out_t * tensor(dout)).sum().backward()
    numpy_mod.zero_grad()
    assert numpy_mod.backward(dout) is None  # ids have no gradient

    oracle = np.zeros((vocab, dim), dtype=np.float64)
    for b in range(B):
        for t in range(T_):
            oracle[idx[b, t]] += dout[b, t]
    buffered = np.zeros((vocab, dim), dtype=np.float64)
    buffered[idx.reshape(-1)] += dout.reshape(-1, dim)  # the bug: one write per repeated id
    hints = {
        "repeated ids keep one gradient: `grad[idx] += dout` writes each row once; "
        "np.add.at(grad, idx, dout) adds every occurrence": buffered
    }
    assert_close(
        "grad of weight vs per-token loop", numpy_mod.weight.grad, oracle, dtype, hints=hints
    )
    assert_close(
        "grad of weight (Embedding, repeated ids)",
        numpy_mod.weight.grad,
        torch_mod.weight.grad,
        dtype,
    )
    unused = np.setdiff1d(np.arange(vocab), idx)
    assert np.all(numpy_mod.weight.grad[unused] == 0), "rows of unused ids got a gradient"
