"""Cross-entropy far from the origin: logits of 1e4 give a finite loss in both backends.

The parity of loss and dlogits, with ``ignore_index`` (ignored positions get no
gradient; every position ignored: a loss of 0, not NaN), and the NumPy backward
against central differences (worst error reached ~1e-9 absolute, 0.1 of the
FINITE_DIFF tolerance) are the registry's ``CrossEntropyLoss`` entry
(registry.py, run by test_components.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import tensor
from parity_tests.strategies import DTYPES, SeededRng, rngs, vocab_sizes
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch09

FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]
lead_shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, lead=lead_shapes, V=vocab_sizes)
def test_cross_entropy_is_stable_for_huge_logits(dtype, rng: SeededRng, lead, V):
    """Logits of 1e4 (exp overflows without the max-subtraction) give a finite loss."""
    logits = rng.normal((*lead, V), dtype) + np.asarray(1e4, dtype)
    targets = rng.ids(V, lead)
    loss_np = N.CrossEntropyLoss()
    loss = loss_np(logits, targets)
    logits_t = tensor(logits, requires_grad=True)
    loss_t = T.CrossEntropyLoss()(logits_t, torch.from_numpy(targets))
    loss_t.backward()
    assert np.isfinite(loss)
    assert_close("loss at logits ~ 1e4", loss, loss_t, dtype)
    assert_close("dlogits at logits ~ 1e4", loss_np.backward(), logits_t.grad, dtype)
