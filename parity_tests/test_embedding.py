"""Token embedding: a repeated id collects the sum of its upstream gradients.

``dW[idx] += dout`` with NumPy fancy indexing keeps only the *last* write for a
repeated index; the scatter-add must be unbuffered (``np.add.at``). Checked here
against an explicit loop, an oracle independent of both backends; against torch
it is the registry's ``Embedding`` entry (registry.py, run by test_components.py),
whose small vocabulary makes ids repeat, with the same hint.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
from parity_tests.harness import randomize_
from parity_tests.hints import REPEATED_IDS, buffered_scatter
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
    numpy_mod = randomize_(N.Embedding(vocab, dim, dtype=dtype), rng)
    out = numpy_mod(idx)
    np.testing.assert_array_equal(out, numpy_mod.weight.data[idx])  # the lookup
    dout = rng.normal(out.shape, dtype)
    numpy_mod.zero_grad()
    assert numpy_mod.backward(dout) is None  # ids have no gradient

    oracle = np.zeros((vocab, dim), dtype=np.float64)
    for b in range(B):
        for t in range(T_):
            oracle[idx[b, t]] += dout[b, t]
    hints = {REPEATED_IDS: buffered_scatter(idx, dout, vocab)}  # one write per repeated id
    assert_close(
        "grad of weight vs per-token loop", numpy_mod.weight.grad, oracle, dtype, hints=hints
    )
    unused = np.setdiff1d(np.arange(vocab), idx)
    assert np.all(numpy_mod.weight.grad[unused] == 0), "rows of unused ids got a gradient"
