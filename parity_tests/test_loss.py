"""Cross-entropy over logits, with ``ignore_index``: loss and dlogits in both backends.

NumPy fuses softmax and cross-entropy into one backward,
``dlogits = dloss * (softmax - onehot) / N_kept`` (llm.c); torch differentiates
``F.cross_entropy``. Ignored positions count neither in the sum nor in
N_kept; when every position is ignored both return 0 with a zero gradient
(where plain ``F.cross_entropy`` would give NaN). Central differences check
the NumPy backward alone (worst error reached ~5e-10 absolute, 0.05 of the
FINITE_DIFF tolerance).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import finite_difference_check, tensor
from parity_tests.strategies import DTYPES, SeededRng, rngs, vocab_sizes
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch09

FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]
lead_shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)


@st.composite
def problems(draw, max_logit_scale: float = 10.0) -> dict:
    V = draw(vocab_sizes)
    return {
        "lead": draw(lead_shapes),
        "V": V,
        # torch's default, another negative, or a real class id (then that class is skipped)
        "ignore_index": draw(st.sampled_from([-100, -1, None])) or draw(st.integers(0, V - 1)),
        "p_ignore": draw(st.sampled_from([0.0, 0.3, 1.0])),  # 1.0: every position ignored
        "logit_scale": draw(st.floats(0.1, max_logit_scale)),
        "dloss": draw(st.floats(-3.0, 3.0)),
    }


def make(p: dict, rng: SeededRng, dtype):
    logits = rng.normal((*p["lead"], p["V"]), dtype, scale=p["logit_scale"])
    targets = rng.ids(p["V"], p["lead"])
    targets[rng.mask(p["lead"], p_true=p["p_ignore"])] = p["ignore_index"]
    return logits, targets


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(data=st.data(), rng=rngs)
def test_cross_entropy_parity(dtype, data, rng: SeededRng):
    p = data.draw(problems(), label="problem")
    logits, targets = make(p, rng, dtype)
    what = f"CrossEntropyLoss(ignore_index={p['ignore_index']})"

    loss_np = N.CrossEntropyLoss(ignore_index=p["ignore_index"])
    loss = loss_np(logits, targets)
    logits_t = tensor(logits, requires_grad=True)
    loss_t = T.CrossEntropyLoss(ignore_index=p["ignore_index"])(logits_t, torch.from_numpy(targets))
    assert isinstance(loss, float), f"NumPy loss is {type(loss).__name__}, not a Python float"
    assert_close(f"loss of {what}", loss, loss_t, dtype)

    (loss_t * p["dloss"]).backward()
    dlogits = loss_np.backward(p["dloss"])
    assert dlogits.shape == logits.shape and dlogits.dtype == np.dtype(dtype)
    assert_close(f"dlogits of {what}", dlogits, logits_t.grad, dtype)

    kept = targets != p["ignore_index"]
    assert np.all(dlogits[~kept] == 0), "an ignored position received a gradient"
    if not kept.any():
        assert loss == 0.0 and float(loss_t.detach()) == 0.0, (
            "all ignored: the loss must be 0, not NaN"
        )
        assert np.all(dlogits == 0) and torch.all(logits_t.grad == 0)


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


@given(data=st.data(), rng=rngs)
def test_cross_entropy_finite_differences(data, rng: SeededRng):
    """dloss = 1 and logits of at most +-12: a central difference of a scalar loss L
    carries a rounding error of about eps |L| / h, which must stay below FINITE_DIFF's
    atol of 1e-8 (|L| <= ~40). Worst error reached: ~1e-9 absolute."""
    p = data.draw(problems(max_logit_scale=3.0), label="problem")
    logits, targets = make(p, rng, np.float64)
    loss_fn = N.CrossEntropyLoss(ignore_index=p["ignore_index"])
    loss_fn(logits, targets)
    dloss = np.asarray(1.0)
    dlogits = loss_fn.backward(1.0)
    finite_difference_check(
        "dlogits of CrossEntropyLoss",
        lambda: np.asarray(loss_fn(logits, targets)),
        logits,
        dlogits,
        dloss,
        rng,
    )
