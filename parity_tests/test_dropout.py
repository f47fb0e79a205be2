"""Dropout: identity when p = 0 or in eval mode; each backend's own random masks.

The random masks of the two backends come from unrelated generators, so the
training-mode parity check (the registry's ``Dropout[given mask]`` entry,
registry.py, run by test_components.py) hands both the same boolean mask
(True = keep) and compares with ``x * mask / (1 - p)`` too.
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
from parity_tests.strategies import DTYPES, SeededRng, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch06

FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]
shapes = st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple)
probabilities = st.floats(0.05, 0.9)


def _run_both(numpy_mod, torch_mod, x, dout, mask=None):
    x_t = tensor(x, requires_grad=True)
    mask_t = None if mask is None else torch.from_numpy(mask)
    out_t = torch_mod(x_t) if mask is None else torch_mod(x_t, mask_t)
    out = numpy_mod(x) if mask is None else numpy_mod(x, mask)
    (out_t * tensor(dout)).sum().backward()
    dx = numpy_mod.backward(dout)
    return out, out_t, dx, x_t.grad


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, shape=shapes)
def test_p_zero_is_identity_in_training(dtype, rng: SeededRng, shape):
    x, dout = rng.normal(shape, dtype), rng.normal(shape, dtype)
    out, out_t, dx, dx_t = _run_both(N.Dropout(0.0).train(), T.Dropout(0.0).train(), x, dout)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(out_t.detach().numpy(), x)
    np.testing.assert_array_equal(dx, dout)
    np.testing.assert_array_equal(dx_t.numpy(), dout)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, shape=shapes, p=probabilities)
def test_eval_mode_is_identity(dtype, rng: SeededRng, shape, p):
    x, dout = rng.normal(shape, dtype), rng.normal(shape, dtype)
    out, out_t, dx, dx_t = _run_both(N.Dropout(p).eval(), T.Dropout(p).eval(), x, dout)
    np.testing.assert_array_equal(out, x)
    np.testing.assert_array_equal(out_t.detach().numpy(), x)
    np.testing.assert_array_equal(dx, dout)
    np.testing.assert_array_equal(dx_t.numpy(), dout)


@given(rng=rngs, shape=shapes, p=st.floats(0.2, 0.8))
def test_random_masks_scale_kept_and_drop_about_p(rng: SeededRng, shape, p):
    """Without a mask each backend draws its own: every element is 0 or x / (1 - p),
    and the dropped fraction is p within 0.2 (>= 256 draws: over 6 standard deviations)."""
    x = np.abs(rng.normal((256, *shape))) + 1.0  # no zeros in x, so zeros mean "dropped"
    for side, out in (
        ("NumPy", N.Dropout(p, seed=rng.seed).train()(x)),
        ("torch", T.Dropout(p).train()(tensor(x)).numpy()),
    ):
        kept = out != 0
        assert_close(f"{side}: kept elements scaled by 1 / (1 - p)", out[kept], x[kept] / (1 - p))
        dropped = 1.0 - kept.mean()
        assert abs(dropped - p) < 0.2, f"{side}: dropped {dropped:.3f} of the elements, p = {p:.3f}"
