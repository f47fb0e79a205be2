"""The parameters in two flat buffers (``numpy_impl/flat_buffers.py``) train as the formulas do.

``adamw_step`` over the buffers gives AdamW's bits, parameter by parameter, on
drawn shapes, both dtypes and any thread count, or declines and changes nothing;
``clip_grad_norm_`` over the buffers is the formula's clip to rounding, with the
same non-finite results and the same overflow boundary; ``FlatParameters``
moves values and gradients and says when a rebinding broke its layout; and the
NumPy backend lays its parameters out at its first fast step only.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
from numpy_impl import flat_buffers
from numpy_impl.fast import adamw_step
from parity_tests.strategies import rngs
from parity_tests.tolerances import assert_close

DTYPES = st.sampled_from([np.float64, np.float32])


def _grouped_parameters(shapes, dtype, seed=0):
    """Parameters of ``shapes`` and AdamW's two groups (matrices decayed, the rest not),
    and the groups' order (the order ``FlatParameters`` lays them out in)."""
    gen = np.random.default_rng(seed)
    params = [N.Parameter(gen.standard_normal(shape).astype(dtype)) for shape in shapes]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return params, groups, [p for g in groups for p in g["params"]]


shape_lists = st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3), min_size=1, max_size=5)


@given(shapes=shape_lists, dtype=DTYPES, rng=rngs)
def test_flat_adamw_takes_the_formulas_steps_bit_for_bit(shapes, dtype, rng):
    """One update over the flat buffers is AdamW's formula, parameter by parameter, to the
    bit; also with a state stepped in another layout or loaded from elsewhere (the moments
    move into the flat layout, values kept)."""
    flat_adamw_against_the_formula(shapes, dtype, rng)


def flat_adamw_against_the_formula(shapes, dtype, rng):
    plain, plain_groups, _ = _grouped_parameters(shapes, dtype)
    fast, fast_groups, order = _grouped_parameters(shapes, dtype)
    before = [p.data.copy() for p in fast]
    flat = flat_buffers.FlatParameters(order)
    assert flat.intact() and all(
        np.array_equal(p.data, b) for p, b in zip(fast, before, strict=True)
    )
    opts = [N.AdamW(groups, lr=3e-3) for groups in (plain_groups, fast_groups)]
    for step in range(4):
        grads = [rng.gen.standard_normal(p.data.shape).astype(dtype) for p in plain]
        for ps in (plain, fast):
            for p, g in zip(ps, grads, strict=True):
                p.grad[...] = g
        if step == 1:  # a new layout, the state stepped in the old one (a resumed run's first)
            flat = flat_buffers.FlatParameters(order)
        if step == 2:  # a checkpoint's moments, arrays of their own: taken in, same values
            for p in fast:
                state = opts[1].state[p]
                state["exp_avg"], state["exp_avg_sq"] = (
                    state[k].copy() for k in ("exp_avg", "exp_avg_sq")
                )
        opts[0].step()
        assert adamw_step(opts[1], flat)
        assert flat.intact()
        for i, (a, b) in enumerate(zip(plain, fast, strict=True)):
            assert np.array_equal(a.data, b.data), (step, i)
            assert np.array_equal(b.grad, grads[i]), (step, i)  # the gradient is not written
            for key in ("exp_avg", "exp_avg_sq"):
                assert np.array_equal(opts[0].state[a][key], opts[1].state[b][key]), key
            assert opts[0].state[a]["step"] == opts[1].state[b]["step"] == step + 1


def test_flat_adamw_declines_what_it_cannot_do_and_then_changes_nothing():
    """Each case returns False with the weights, gradients and state as they were (the
    backend then runs ``optimizer.step()``, which steps or raises as it always did)."""
    shapes = [(3, 4), (4,), (2, 2)]

    def setup():
        params, groups, order = _grouped_parameters(shapes, np.float32)
        flat = flat_buffers.FlatParameters(order)
        opt = N.AdamW(groups, lr=1e-3)
        for p in params:
            p.grad[...] = 0.5
        assert adamw_step(opt, flat)  # a state to keep
        return params, flat, opt

    def breakers():
        yield (
            "a parameter's array rebound",
            lambda ps, fl, opt: setattr(ps[0], "data", ps[0].data.copy()),
        )
        yield "a gradient rebound", lambda ps, fl, opt: setattr(ps[1], "grad", ps[1].grad.copy())
        yield "step counts differ", lambda ps, fl, opt: opt.state[ps[0]].update(step=7)
        yield "a parameter without state", lambda ps, fl, opt: opt.state.pop(ps[2])
        yield (
            "a float64 learning rate",
            lambda ps, fl, opt: opt.param_groups[0].update(lr=np.float64(1e-3)),
        )
        yield (
            "a moment of another dtype",
            lambda ps, fl, opt: opt.state[ps[0]].update(exp_avg=np.zeros((3, 4), np.float64)),
        )
        yield (
            "a moment of another shape",
            lambda ps, fl, opt: opt.state[ps[1]].update(exp_avg_sq=np.zeros((5,), np.float32)),
        )
        yield (
            "a parameter in two groups (the formula steps it twice)",
            lambda ps, fl, opt: opt.param_groups.append({**opt.param_groups[1], "params": [ps[1]]}),
        )
        yield (
            "a NumPy integer step count (its bias corrections are float64 scalars)",
            lambda ps, fl, opt: [opt.state[p].update(step=np.int64(1)) for p in ps],
        )
        yield (
            "a parameter not in the buffer",
            lambda ps, fl, opt: opt.param_groups[1]["params"].append(
                N.Parameter(np.zeros(2, np.float32))
            ),
        )

    for what, breaker in breakers():
        params, flat, opt = setup()
        breaker(params, flat, opt)
        data = [p.data.copy() for p in params]
        grads = [p.grad.copy() for p in params]
        state = {id(p): {k: np.copy(v) for k, v in s.items()} for p, s in opt.state.items()}
        assert not adamw_step(opt, flat), what
        assert all(np.array_equal(p.data, d) for p, d in zip(params, data, strict=True)), what
        assert all(np.array_equal(p.grad, g) for p, g in zip(params, grads, strict=True)), what
        for p, s in opt.state.items():
            assert all(np.array_equal(v, state[id(p)][k]) for k, v in s.items()), what


def test_flat_parameters_moves_values_and_gradients_and_refuses_what_it_cannot_hold():
    gen = np.random.default_rng(1)
    a, b = N.Parameter(gen.standard_normal((2, 3))), N.Parameter(gen.standard_normal(4))
    a_data, b_data, a_grad = a.data.copy(), b.data.copy(), gen.standard_normal((2, 3))
    a.grad[...] = a_grad  # allocated: moved in; b's is not yet: zeros
    flat = flat_buffers.FlatParameters([b, a])
    assert flat.data.shape == flat.grad.shape == (10,) and flat.bounds == [0, 4, 10]
    assert np.array_equal(a.data, a_data) and np.array_equal(b.data, b_data)
    assert np.array_equal(a.grad, a_grad) and not b.grad.any()
    assert np.shares_memory(a.data, flat.data) and np.shares_memory(b.grad, flat.grad)
    assert flat.runs([b, a]) == [(0, 10)] and flat.runs([a]) == [(4, 10)]
    assert flat.runs([a, b]) == [(0, 10)] and flat.runs([]) == []
    assert flat_buffers.flat_parameters(flat, [b, a]) is flat  # intact: kept
    a.data = a.data + 0.0  # rebound (as Module.to does): a new layout, the same values
    assert not flat.intact()
    again = flat_buffers.flat_parameters(flat, [b, a])
    assert again is not flat and again.intact() and np.array_equal(a.data, a_data)
    with pytest.raises(ValueError, match="params: expected at least one"):
        flat_buffers.FlatParameters([])
    with pytest.raises(ValueError, match="params: a Parameter appears twice"):
        flat_buffers.FlatParameters([a, b, a])
    with pytest.raises(ValueError, match="params: expected one floating dtype"):
        flat_buffers.FlatParameters([a, N.Parameter(np.zeros(3, np.float32))])
    with pytest.raises(ValueError, match="params: expected one floating dtype"):
        flat_buffers.FlatParameters([N.Parameter(np.zeros(3, np.int64))])


@given(shapes=shape_lists, dtype=DTYPES, scale=st.sampled_from([1e-3, 1.0, 1e3]), rng=rngs)
def test_flat_clip_is_the_formulas_clip(shapes, dtype, scale, rng):
    from numpy_impl.optim import clip_grad_norm_

    plain, _, _ = _grouped_parameters(shapes, dtype)
    fast, _, order = _grouped_parameters(shapes, dtype)
    flat = flat_buffers.FlatParameters(order)
    for p, q in zip(plain, fast, strict=True):
        p.grad[...] = q.grad[...] = scale * rng.gen.standard_normal(p.data.shape)
    expected = clip_grad_norm_(plain, 1.0)
    actual = flat_buffers.clip_grad_norm_(flat, 1.0)
    assert isinstance(actual, float)
    assert_close("global norm", actual, expected, dtype)
    for p, q in zip(plain, fast, strict=True):
        assert_close("clipped gradient", q.grad, p.grad, dtype)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_flat_clip_of_a_non_finite_gradient_is_the_formulas(bad):
    from numpy_impl.optim import clip_grad_norm_

    plain, _, _ = _grouped_parameters([(2, 3), (3,)], np.float32)
    fast, _, order = _grouped_parameters([(2, 3), (3,)], np.float32)
    flat = flat_buffers.FlatParameters(order)
    for p, q in zip(plain, fast, strict=True):
        p.grad[...] = q.grad[...] = 2.0
        p.grad.flat[1] = q.grad.flat[1] = bad
    with np.errstate(invalid="ignore"):
        expected, actual = clip_grad_norm_(plain, 1.0), flat_buffers.clip_grad_norm_(flat, 1.0)
    assert np.array_equal(expected, actual, equal_nan=True)
    for p, q in zip(plain, fast, strict=True):
        assert np.array_equal(p.grad, q.grad, equal_nan=True)


def test_the_numpy_backend_lays_its_parameters_flat_at_its_first_fast_step():
    """Not before (a backend that only samples allocates no gradients), not with
    ``fast=False``; the flat run trains as the per-parameter one (float64)."""
    from labs.plumbing.backends import make_backend

    config = {"vocab_size": 11, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 8}
    x = np.random.default_rng(0).integers(0, 11, (4, 8))
    flat, per_param = (make_backend("numpy", config, dtype="float64") for _ in range(2))
    per_param._flat_parameters = lambda: None
    assert flat._flat is None and all(p._grad is None for p in flat.model.parameters())
    for _ in range(3):
        losses = [be.train_step(x, x)["loss"] for be in (flat, per_param)]
        assert_close("loss, flat vs per parameter", losses[0], losses[1], np.float64)
    assert flat._flat is not None and flat._flat.intact()
    assert all(np.shares_memory(p.data, flat._flat.data) for p in flat.model.parameters())
    for (name, a), b in zip(
        flat.state_dict().items(), per_param.state_dict().values(), strict=True
    ):
        assert_close(name, a, b, np.float64)
    off = make_backend("numpy", config, dtype="float64", fast=False)
    off.train_step(x, x)
    assert off._flat is None


@pytest.mark.parametrize("path", ["per parameter", "flat"])
def test_flat_adamw_with_a_numpy_integer_step_count_is_the_formulas_bits(path):
    """A state whose ``step`` is a NumPy integer (``np.int64``, as a user or a loader may
    write it) makes the formula's bias corrections float64 scalars: the flat form must
    then decline (``adamw_exact``) and the formula run, not round after every operation."""
    results = []
    for use_flat in (False, True):
        gen = np.random.default_rng(0)
        p = N.Parameter(gen.standard_normal(4096).astype(np.float32))
        opt = N.AdamW([p], lr=1e-2, weight_decay=0.1)
        opt.state[p] = {
            "step": np.int64(1),
            "exp_avg": 0.1 * gen.standard_normal(4096).astype(np.float32),
            "exp_avg_sq": 0.01 * gen.random(4096).astype(np.float32),
        }
        flat = flat_buffers.FlatParameters([p]) if path == "flat" and use_flat else None
        for _ in range(3):
            p.grad[...] = gen.standard_normal(4096).astype(np.float32)
            if flat is None or not adamw_step(opt, flat):
                opt.step()
        results.append((p.data.copy(), opt.state[p]["exp_avg"].copy()))
    (formula, m_formula), (fast, m_fast) = results
    assert np.array_equal(formula, fast) and np.array_equal(m_formula, m_fast)


def test_flat_clip_of_finite_gradients_whose_squares_overflow_float32_together():
    """Each parameter's sum of squares (2e38) is finite in float32, their total (4e38) is
    not: the formula (per-parameter float32 sums added as Python floats) reports a finite
    norm and clips, and so does the flat clip, which sums per parameter too (summed in
    float32 blocks across parameters it overflowed, and the backend raised NonFiniteError
    where ``fast=False`` trains on)."""
    from numpy_impl.optim import clip_grad_norm_

    plain, _, _ = _grouped_parameters([(2,), (2,)], np.float32)
    fast, _, order = _grouped_parameters([(2,), (2,)], np.float32)
    flat = flat_buffers.FlatParameters(order)
    for p, q in zip(plain, fast, strict=True):
        p.grad[...] = q.grad[...] = 1e19
    with np.errstate(over="ignore", invalid="ignore"):
        expected, actual = clip_grad_norm_(plain, 1.0), flat_buffers.clip_grad_norm_(flat, 1.0)
    assert math.isfinite(expected) and math.isfinite(actual)
    assert_close("global norm", actual, expected, np.float32)
    for p, q in zip(plain, fast, strict=True):
        assert_close("clipped gradient", q.grad, p.grad, np.float32)
    for p, q in zip(plain, fast, strict=True):  # one parameter's own sum overflows: both inf
        p.grad[...] = q.grad[...] = 3e19
    with np.errstate(over="ignore", invalid="ignore"):
        expected, actual = clip_grad_norm_(plain, 1.0), flat_buffers.clip_grad_norm_(flat, 1.0)
    assert expected == actual == math.inf


def test_flat_adamw_takes_a_state_it_did_not_lay_out_yet():
    """A state the layout holds no views of yet (a checkpoint loaded at resume, a new
    layout after a rebinding, steps taken by the formula first) comes into the buffers and
    steps: the formula's bits, not an error from the check that skips the layout's own."""
    shapes = [(3, 4), (4,), (2, 2), (5,)]
    plain, plain_groups, _ = _grouped_parameters(shapes, np.float32)
    fast, fast_groups, order = _grouped_parameters(shapes, np.float32)
    opts = [N.AdamW(groups, lr=1e-2) for groups in (plain_groups, fast_groups)]
    gen = np.random.default_rng(3)
    flat = None
    for step in range(5):
        grads = [gen.standard_normal(p.data.shape).astype(np.float32) for p in plain]
        for ps in (plain, fast):
            for p, g in zip(ps, grads, strict=True):
                p.grad[...] = g
        opts[0].step()
        if step < 2:
            opts[1].step()  # the formula's steps first: a state of arrays of its own
        else:
            if step == 3:  # the layout rebuilt: the state holds the old layout's views
                fast[0].data = fast[0].data.copy()
            flat = flat_buffers.flat_parameters(flat, order)
            assert adamw_step(opts[1], flat), step
        for a, b in zip(plain, fast, strict=True):
            assert np.array_equal(a.data, b.data), step
            for key in ("exp_avg", "exp_avg_sq"):
                assert np.array_equal(opts[0].state[a][key], opts[1].state[b][key]), (step, key)
