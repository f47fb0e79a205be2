"""Every registered pair (registry.py), NumPy twin against PyTorch twin: the same properties.

* ``test_forward_backward_parity``: same weights (drawn at random, copied
  torch -> NumPy through the state dict), same inputs -> same outputs; then a
  random upstream gradient per output: torch backpropagates ``sum(out * dout)``,
  NumPy runs ``backward(*douts)`` after ``zero_grad()``; the gradient of every
  float input and every parameter gradient, by name, must agree; inputs and
  upstream gradients are left unchanged. float64 tightly, float32 loosely (the
  tolerances of tolerances.py), for every torch implementation of the pair.
* ``test_backward_accumulates``: ``backward`` adds into ``.grad``, never assigns.
* ``test_finite_differences``: each NumPy backward on its own against central
  differences (float64, h = 1e-6), in random coordinates of every float input
  and of every parameter. Reached at worst (HYPOTHESIS_PROFILE=thorough): 0.65 of
  the FINITE_DIFF tolerance; NumPy vs torch 0.45 of FLOAT64's and 0.42 of FLOAT32's
  (the session summary prints them).

Then checks of single components that are not parity: LayerNorm over one
feature, causal attention ignoring the future, GELU far in its tails, positions
from a start_pos, linear maps on row blocks of one weight.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests import hints as H
from parity_tests.harness import (
    as_tuple,
    assert_param_grads_close,
    assert_unchanged,
    copy_weights,
    copy_weights_to_torch,
    finite_difference_check,
    randomize_,
    tensor,
    to_torch,
    torch_dtype,
    torch_grad,
)
from parity_tests.registry import BY_NAME, PAIRS, Example, Pair, leading_dims, marks
from parity_tests.strategies import SeededRng, batch_sizes, n_heads, rngs
from parity_tests.tolerances import assert_close

PARITY = [
    pytest.param(
        pair, impl, dtype, id=f"{pair.label(impl)}-{np.dtype(dtype).name}", marks=marks(pair)
    )
    for pair in PAIRS
    for impl in pair.impls
    for dtype in pair.dtypes
]
#: The NumPy-side properties run once per pair, against its first torch implementation.
ACCUMULATION = [
    pytest.param(pair, id=pair.label(pair.impls[0]), marks=marks(pair))
    for pair in PAIRS
    if pair.has_params
]
FINITE_DIFFERENCES = [
    pytest.param(pair, id=pair.name, marks=marks(pair)) for pair in PAIRS if pair.fd_coords
]
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in (np.float64, np.float32)]


def build_twins(pair: Pair, config: dict, rng: SeededRng, dtype):
    """The two twins with the same random weights (drawn for torch, copied to NumPy)."""
    torch_twin = randomize_(pair.torch_twin(config, torch_dtype(dtype)), rng)
    numpy_twin = pair.numpy_twin(config, dtype)
    copy_weights(torch_twin, numpy_twin)
    return numpy_twin, torch_twin


def upstream_gradient(out, rng: SeededRng, dtype):
    """A random ``dout`` shaped like ``out``; a Python float for a scalar output (the loss:
    NumPy returns a float, and its backward takes ``dloss`` as one)."""
    if not isinstance(out, np.ndarray):
        return float(rng.normal(()))
    return rng.normal(out.shape, dtype)


def backpropagate(outputs_t: tuple, douts: tuple) -> None:
    """torch: the gradient of ``sum(out * dout)`` over the outputs that have a dout."""
    terms = [
        (o * (d if isinstance(d, float) else tensor(d))).sum()
        for o, d in zip(outputs_t[: len(douts)], douts, strict=True)
        if o is not None and o.requires_grad
    ]
    if terms:
        sum(terms).backward()


def check_output(what: str, out, out_t, dtype) -> None:
    """The NumPy output's type and dtype: an array of the layer's dtype, or a Python float
    where torch returns a 0-d tensor (the loss)."""
    if out_t.dim() == 0:
        assert isinstance(out, float), f"{what}: NumPy returned {type(out).__name__}, not a float"
        return
    assert isinstance(out, np.ndarray) and out.dtype == np.dtype(dtype), (
        f"{what}: NumPy returned {type(out).__name__} of dtype "
        f"{getattr(out, 'dtype', None)}, expected {np.dtype(dtype).name}"
    )
    assert out_t.dtype == torch_dtype(dtype), f"{what}: torch returned {out_t.dtype}"


# -- the properties ------------------------------------------------------------------------
@pytest.mark.parametrize(("pair", "impl", "dtype"), PARITY)
@given(data=st.data(), rng=rngs)
def test_forward_backward_parity(pair: Pair, impl: str, dtype, data, rng: SeededRng):
    config = pair.draw(data, impl)
    name = pair.label(impl)
    numpy_twin, torch_twin = build_twins(pair, config, rng, dtype)
    floats, extras = pair.inputs(config, rng, dtype)
    ex = Example(name, config, dtype, rng, numpy_twin, torch_twin, floats, extras)
    given_arrays = {k: v.copy() for k, v in {**floats, **extras}.items() if hasattr(v, "copy")}
    floats_t = {k: tensor(v, requires_grad=True) for k, v in floats.items()}

    ex.outputs_t = as_tuple(torch_twin(**floats_t, **{k: to_torch(v) for k, v in extras.items()}))
    ex.outputs = as_tuple(numpy_twin(**floats, **extras))
    assert len(ex.outputs) == len(pair.outputs), f"{name}: {len(ex.outputs)} outputs"
    hints = pair.hints(numpy_twin, **floats, **extras) if pair.hints else None
    for i, (what, out, out_t) in enumerate(
        zip(pair.outputs, ex.outputs, ex.outputs_t, strict=True)
    ):
        if out_t is None:
            assert out is None, f"{what} of {name}: torch returns None, NumPy does not"
            continue
        check_output(f"{what} of {name}", out, out_t, dtype)
        assert_close(f"{what} of {name}", out, out_t, dtype, hints=hints if i == 0 else None)
        assert np.all(np.isfinite(out)), f"{what} of {name}: NaN or inf"

    ex.douts = tuple(upstream_gradient(o, rng, dtype) for o in ex.outputs[: pair.n_differentiable])
    douts_before = [np.copy(d) for d in ex.douts]
    backpropagate(ex.outputs_t, ex.douts)
    numpy_twin.zero_grad()
    grads = numpy_twin.backward(*ex.douts)
    if not floats:
        assert grads is None, f"{name}: backward returned {type(grads).__name__}, not None"
    ex.grads = as_tuple(grads)
    ex.grads_t = tuple(torch_grad(x_t) for x_t in floats_t.values())
    assert len(ex.grads) == len(floats), f"{name}: backward returned {len(ex.grads)} gradients"
    for x, g, g_t in zip(floats, ex.grads, ex.grads_t, strict=True):
        what = f"input gradient d{x} of {name}"
        assert isinstance(g, np.ndarray) and g.dtype == np.dtype(dtype), (
            f"{what}: dtype {getattr(g, 'dtype', type(g).__name__)}, expected {np.dtype(dtype)}"
        )
        assert np.all(np.isfinite(g)) and np.all(np.isfinite(g_t)), f"{what}: NaN or inf"
        assert_close(what, g, g_t, dtype)
    for _, p in numpy_twin.named_parameters():
        assert p.grad.dtype == np.dtype(dtype)
    grad_hints = pair.grad_hints(ex) if pair.grad_hints else None
    assert_param_grads_close(numpy_twin, torch_twin, dtype, name, hints=grad_hints)

    for before, after in zip(douts_before, ex.douts, strict=True):
        assert_unchanged(f"dout given to {name}.backward", before, after)
    for key, before in given_arrays.items():
        assert_unchanged(f"input {key} given to {name}", before, {**floats, **extras}[key])
    if pair.invariants:
        pair.invariants(ex)


@pytest.mark.parametrize("pair", ACCUMULATION)
@given(data=st.data(), rng=rngs)
def test_backward_accumulates(pair: Pair, data, rng: SeededRng):
    """Gradients already in ``.grad`` are added to, not overwritten (llm.c's ``+=``)."""
    dtype, impl = np.float64, pair.impls[0]
    config = pair.draw(data, impl)
    numpy_twin, torch_twin = build_twins(pair, config, rng, dtype)
    floats, extras = pair.inputs(config, rng, dtype)
    ex = Example(pair.label(impl), config, dtype, rng, numpy_twin, torch_twin, floats, extras)
    inputs_t = {k: to_torch(v) for k, v in {**floats, **extras}.items()}
    ex.outputs_t = as_tuple(torch_twin(**inputs_t))
    ex.outputs = as_tuple(numpy_twin(**floats, **extras))
    ex.douts = tuple(upstream_gradient(o, rng, dtype) for o in ex.outputs[: pair.n_differentiable])
    backpropagate(ex.outputs_t, ex.douts)
    before = {}
    for name, p in numpy_twin.named_parameters():
        p.grad[...] = rng.normal(p.shape)
        before[name] = p.grad.copy()
    numpy_twin.backward(*ex.douts)
    grad_hints = pair.grad_hints(ex) if pair.grad_hints else None
    what = f"{ex.label}, minus prior .grad"
    assert_param_grads_close(numpy_twin, torch_twin, dtype, what, before, grad_hints)


@pytest.mark.parametrize("pair", FINITE_DIFFERENCES)
@given(data=st.data(), rng=rngs)
def test_finite_differences(pair: Pair, data, rng: SeededRng):
    """NumPy backward alone vs central differences; no torch involved.

    Weights are drawn straight into the NumPy module. A scalar output (the loss) is
    differentiated as it is (dloss = 1): the rounding error of a difference of two
    losses, eps |L| / h, would only grow with a random factor.
    """
    config = pair.draw(data, pair.impls[0], for_fd=True)
    numpy_twin = randomize_(pair.numpy_twin(config, np.float64), rng)
    floats, extras = pair.inputs(config, rng, np.float64)
    n = pair.n_differentiable

    def forward() -> tuple:
        return as_tuple(numpy_twin(**floats, **extras))[:n]

    # the forward first, against torch's: a wrong forward is not the backward's fault
    torch_twin = pair.torch_twin(config, torch.float64)
    copy_weights_to_torch(numpy_twin, torch_twin)
    with torch.no_grad():
        outs_t = as_tuple(torch_twin(**{k: to_torch(v) for k, v in {**floats, **extras}.items()}))
    for what, out, out_t in zip(pair.outputs, forward(), outs_t[:n], strict=False):
        if out_t is not None:
            assert_close(
                f"{what} of {pair.name} (the forward, before its backward)", out, out_t, np.float64
            )
    douts = tuple(rng.normal(o.shape) if isinstance(o, np.ndarray) else 1.0 for o in forward())
    numpy_twin.zero_grad()
    grads = as_tuple(numpy_twin.backward(*douts))
    assert len(grads) == len(floats), f"{pair.name}: backward returned {len(grads)} gradients"
    for (x, value), g in zip(floats.items(), grads, strict=True):
        finite_difference_check(
            f"d{x} of {pair.name}", forward, value, g, douts, rng, pair.fd_coords
        )
    for name, p in numpy_twin.named_parameters():
        grad = p.grad.copy()
        finite_difference_check(
            f"grad of {name} in {pair.name}", forward, p.data, grad, douts, rng, pair.fd_coords
        )


# -- single components: what parity alone does not show --------------------------------------
@pytest.mark.ch07
@given(rng=rngs, lead=leading_dims)
def test_layernorm_single_feature(rng: SeededRng, lead):
    """d_model = 1: every row normalises to 0, so the output is the bias and dx = 0."""
    numpy_mod, torch_mod = build_twins(
        BY_NAME["LayerNorm"], {"dim": 1, "eps": 1e-5, "bias": True}, rng, np.float64
    )
    x = rng.uniform((*lead, 1))
    x_t = tensor(x, requires_grad=True)
    out_t = torch_mod(x_t)
    out = numpy_mod(x)
    np.testing.assert_array_equal(out, np.broadcast_to(numpy_mod.bias.data, out.shape))
    assert_close("output of LayerNorm(1)", out, out_t, np.float64)
    dout = rng.normal(out.shape)
    (out_t * tensor(dout)).sum().backward()
    numpy_mod.zero_grad()
    dx = numpy_mod.backward(dout)
    np.testing.assert_array_equal(dx, np.zeros_like(x))
    assert_close("dx of LayerNorm(1)", dx, x_t.grad, np.float64)
    assert_param_grads_close(numpy_mod, torch_mod, np.float64, "LayerNorm(1)")


@pytest.mark.ch04
@pytest.mark.parametrize("impl", ["explicit", "sdpa"])
@given(rng=rngs, B=batch_sizes, T_=st.integers(2, 9), H=n_heads, d_k=st.integers(1, 4))
def test_causal_self_attention_ignores_the_future(impl, rng: SeededRng, B, T_, H, d_k):
    """Changing tokens after position t leaves outputs 0..t unchanged, in both backends."""
    C = H * d_k
    torch_mod = T.SelfAttention(C, H, attn_impl=impl, dtype=torch.float64)
    numpy_mod = N.SelfAttention(C, H, dtype=np.float64)
    copy_weights(randomize_(torch_mod, rng), numpy_mod)
    t = int(rng.gen.integers(0, T_ - 1))  # the last position that must not change
    x = rng.uniform((B, T_, C))
    x2 = x.copy()
    x2[:, t + 1 :] = rng.uniform(x2[:, t + 1 :].shape, bound=3.0)
    for side, f in (
        ("NumPy", lambda a: numpy_mod(a, is_causal=True)),
        ("torch", lambda a: torch_mod(tensor(a), is_causal=True).detach().numpy()),
    ):
        a, b = f(x), f(x2)
        assert_close(f"{side} outputs 0..{t} with the future changed", b[:, : t + 1], a[:, : t + 1])
        assert not np.allclose(a[:, t + 1 :], b[:, t + 1 :]), f"{side}: the future had no effect"


@pytest.mark.ch06
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_gelu_large_inputs_no_overflow(dtype):
    """Far into the tails GELU is 0 (left) or x (right): no overflow warnings on the way
    (at 1e13 the tanh form's x**3 is beyond float32: tanh(inf) = 1 is the right limit)."""
    x = np.array([-1e13, -100.0, -30.0, -12.0, -10.6, -8.0, 8.0, 10.6, 12.0, 30.0, 100.0, 1e13])
    x = x.astype(dtype)
    for form in ("tanh", "none"):
        numpy_mod = N.GELU(form)
        x_t = tensor(x, requires_grad=True)
        out_t = T.GELU(form)(x_t)
        out_t.sum().backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an overflow warning fails the test
            out = numpy_mod(x)
            dx = numpy_mod.backward(np.ones_like(x))
        assert_close(f"GELU[{form}] far in the tails", out, out_t, dtype)
        assert_close(f"dx of GELU[{form}] far in the tails", dx, x_t.grad, dtype)


@pytest.mark.ch05
@given(
    rng=rngs,
    block_size=st.integers(1, 12),
    data=st.data(),
    dim=st.integers(1, 6),
)
def test_learned_positions_from_start_pos(rng: SeededRng, block_size, data, dim):
    """forward(T, start_pos) reads rows start_pos .. start_pos + T - 1 (a KV cache's positions);
    backward adds into exactly those rows, in both backends."""
    T_ = data.draw(st.integers(1, block_size), label="T")
    start_pos = data.draw(st.integers(0, block_size - T_), label="start_pos")
    numpy_mod, torch_mod = build_twins(
        BY_NAME["LearnedPositionalEmbedding"],
        {"block_size": block_size, "dim": dim},
        rng,
        np.float64,
    )
    out = numpy_mod(T_, start_pos)
    out_t = torch_mod(T_, start_pos)
    rows = numpy_mod.weight.data
    assert np.array_equal(out, rows[start_pos : start_pos + T_]), (
        f"forward({T_}, start_pos={start_pos}) did not return rows {start_pos} .. "
        f"{start_pos + T_ - 1} of the table"
        + (
            f"; hint: {H.POSITIONS_FROM_ZERO}"
            if start_pos and out.shape == rows[:T_].shape and np.array_equal(out, rows[:T_])
            else ""
        )
    )
    assert_close(f"positions {start_pos} .. {start_pos + T_ - 1}", out, out_t, np.float64)
    dout = rng.normal(out.shape)
    (out_t * tensor(dout)).sum().backward()
    numpy_mod.zero_grad()
    assert numpy_mod.backward(dout) is None
    assert_param_grads_close(numpy_mod, torch_mod, np.float64, f"positions from {start_pos}")
    untouched = np.delete(numpy_mod.weight.grad, np.s_[start_pos : start_pos + T_], axis=0)
    assert not untouched.any(), "backward wrote into rows that forward did not read"


@pytest.mark.ch13
@pytest.mark.parametrize("start_pos", [0, 3])
def test_sinusoidal_positions_from_start_pos(start_pos):
    """The sinusoidal table answers forward(T, start_pos) like the learned one."""
    numpy_mod = N.SinusoidalPositionalEncoding(8, 6, dtype=np.float64)
    torch_mod = T.SinusoidalPositionalEncoding(8, 6, dtype=torch.float64)
    expected = N.positional.sinusoidal_table(8, 6)[start_pos : start_pos + 5]
    np.testing.assert_array_equal(numpy_mod(5, start_pos), expected)
    assert_close(
        f"sinusoidal positions from {start_pos}", numpy_mod(5, start_pos), torch_mod(5, start_pos)
    )


@pytest.mark.ch02
@given(rng=rngs, n_q=st.integers(1, 5), n_kv=st.integers(1, 5), C=st.integers(1, 6))
def test_linear_functions_on_row_blocks_of_one_weight(rng: SeededRng, n_q, n_kv, C):
    """linear / linear_backward applied to row blocks of one packed (3C, C) weight, q from one
    input and k, v from another (cross-attention's in-projection), against torch's autograd."""
    from numpy_impl.linear import linear, linear_backward
    from torch_impl.linear import linear as torch_linear

    w, b = rng.normal((3 * C, C)), rng.normal((3 * C,))
    x_q, x_kv = rng.normal((2, n_q, C)), rng.normal((2, n_kv, C))
    q = linear(x_q, w[:C], b[:C])  # (2, n_q, C)
    kv = linear(x_kv, w[C:], b[C:])  # (2, n_kv, 2C)
    w_t, b_t = tensor(w, requires_grad=True), tensor(b, requires_grad=True)
    xq_t, xkv_t = tensor(x_q, requires_grad=True), tensor(x_kv, requires_grad=True)
    q_t = torch_linear(xq_t, w_t[:C], b_t[:C])
    kv_t = torch_linear(xkv_t, w_t[C:], b_t[C:])
    assert_close("q of the first row block", q, q_t)
    assert_close("k, v of the other rows", kv, kv_t)

    dq, dkv = rng.normal(q.shape), rng.normal(kv.shape)
    ((q_t * tensor(dq)).sum() + (kv_t * tensor(dkv)).sum()).backward()
    dx_q, dw_q, db_q = linear_backward(dq, x_q, w[:C], b[:C])
    dx_kv, dw_kv, db_kv = linear_backward(dkv, x_kv, w[C:], b[C:])
    assert_close("dx of the q input", dx_q, xq_t.grad)
    assert_close("dx of the k, v input", dx_kv, xkv_t.grad)
    assert_close("dweight, blocks stacked", np.concatenate([dw_q, dw_kv]), w_t.grad)
    assert_close("dbias, blocks stacked", np.concatenate([db_q, db_kv]), b_t.grad)
    assert linear_backward(dq, x_q, w[:C])[2] is None, "dbias must be None without a bias"
