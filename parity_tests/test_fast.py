"""The fast backend, ``numpy_impl/fast.py``, is the formulas written for speed.

Each kernel is held to the formula it replaces (``norm.layer_norm``,
``activations.gelu_tanh``, ``attention.scaled_dot_product_attention``, the
embedding's scatter-add, AdamW) on drawn shapes, in float64 and float32, with the
project's tolerance table; non-finite and overflowing inputs give the formula's
results in the same places; the inputs are never written; AdamW over a flat buffer
gives the formula's bits; and a whole accelerated GPT (``fast.accelerate``) matches
the plain one. The GPT's training parity with torch runs the fast backend in
``test_training.py``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
from numpy_impl import activations, attention, fast, norm
from numpy_impl.flat_buffers import FlatParameters
from parity_tests.harness import count_calls, finite_difference_check
from parity_tests.strategies import (
    ATTENTION_MASKS,
    SeededRng,
    attention_inputs,
    attention_problems,
    batch_sizes,
    gpt_configs,
    lengths,
    rngs,
)
from parity_tests.tolerances import assert_close

DTYPES = st.sampled_from([np.float64, np.float32])
leads = st.lists(st.integers(0, 7), min_size=0, max_size=3)  # leading axes, empty included


def layer_norm_problem(rng: SeededRng, lead, C, dtype, offset, spread):
    x = (offset + spread * rng.gen.standard_normal((*lead, C))).astype(dtype)
    weight = rng.gen.standard_normal(C).astype(dtype)
    bias = rng.gen.standard_normal(C).astype(dtype)
    dout = rng.gen.standard_normal((*lead, C)).astype(dtype)
    return x, weight, bias, dout


@given(
    lead=leads,
    C=st.integers(1, 80),
    dtype=DTYPES,
    offset=st.floats(-50, 50),
    spread=st.floats(0.1, 10),
    with_bias=st.booleans(),
    rng=rngs,
)
def test_fast_layer_norm_is_the_formula(lead, C, dtype, offset, spread, with_bias, rng):
    x, weight, bias, dout = layer_norm_problem(rng, lead, C, dtype, offset, spread)
    bias = bias if with_bias else None
    inputs = [a.copy() for a in (x, weight, dout)]
    expected = norm.layer_norm(x, weight, bias, 1e-5)
    actual = fast.layer_norm(x, weight, bias, 1e-5)
    xhat, rstd = expected[1], expected[2]
    dx = fast.layer_norm_backward(dout, xhat, rstd, weight)
    dx_formula = norm.layer_norm_backward(dout, xhat, rstd, weight)
    for name, a, e in zip(("y", "xhat", "rstd"), actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype == dtype, name
    assert dx.shape == x.shape and dx.dtype == dtype
    if dtype == np.float64:
        for name, a, e in zip(("y", "xhat", "rstd"), actual, expected, strict=True):
            assert_close(f"fused LayerNorm {name}", a, e, dtype)
        assert_close("fused LayerNorm dx", dx, dx_formula, dtype)
    else:
        # float32 rounds x itself: a row far from zero for its spread (offset / spread up
        # to 500 here) loses digits in the centring, by either form's summation order.
        # Both are held to the float64 formula on the same inputs: the fused form may not
        # be more than twice as far from it as the formula is, plus a few ulps, plus what
        # its own order of summing a row may cost (a row sum of C float32 numbers is off
        # by up to C eps times the sum of their sizes; the formula's pairwise order is
        # often luckier, the einsum's no worse than that bound)
        up = [None if a is None else a.astype(np.float64) for a in (x, weight, bias, dout)]
        truth = norm.layer_norm(up[0], up[1], up[2], 1e-5)
        truth_dx = norm.layer_norm_backward(up[3], xhat.astype(np.float64), rstd, up[1])
        pairs = [*zip(("y", "xhat", "rstd"), actual, expected, truth, strict=True)]
        pairs.append(("dx", dx, dx_formula, truth_dx))
        ceps = C * np.finfo(np.float32).eps
        if x.size:
            r, xh = float(np.max(truth[2])), float(np.max(np.abs(truth[1])))
            centring = ceps * float(np.max(np.abs(up[0]))) * r  # xhat's error from the mean's
            dxhat = float(np.max(np.abs(up[3] * up[1])))
            summation = {
                "y": centring * float(np.max(np.abs(up[1]))),
                "xhat": centring,
                "rstd": ceps * r,
                "dx": ceps * r * dxhat * (1 + xh * xh),  # its two row sums, from one xhat
            }
        for name, a, e, t in pairs:
            if t.size == 0:
                continue
            err_fused, err_formula = np.abs(a - t).max(), np.abs(e - t).max()
            slack = 4 * np.finfo(np.float32).eps * np.abs(t).max() + summation[name]
            assert err_fused <= 2 * err_formula + slack, (name, err_fused, err_formula)
    for before, after in zip(inputs, (x, weight, dout), strict=True):
        assert np.array_equal(before, after)  # nothing the caller passed was written


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
special = st.sampled_from([0.0, -0.0, 1e-30, -1e-30, 8e12, -8e12, 3e19, -3e19, 1e38, -1e38])


@given(
    values=st.lists(st.one_of(finite32, special, st.floats(-8, 8, width=32)), max_size=60),
    dtype=DTYPES,
    rng=rngs,
)
def test_fast_gelu_is_the_formula_overflow_included(values, dtype, rng):
    x = np.array(values, dtype=dtype)
    dout = rng.gen.standard_normal(x.shape).astype(dtype)
    before = (x.copy(), dout.copy())
    with np.errstate(invalid="ignore"):  # 0 * inf in the far tails: the formula's NaN too
        y, y_formula = fast.gelu_tanh(x), activations.gelu_tanh(x)
        dx, dx_formula = (
            fast.gelu_tanh_backward(dout, x),
            activations.gelu_tanh_backward(dout, x),
        )
    assert y.dtype == dx.dtype == dtype and y.shape == dx.shape == x.shape
    assert_close("fused GELU y", y, y_formula, dtype)
    assert_close("fused GELU dx", dx, dx_formula, dtype)  # NaN and inf in the same places
    assert np.array_equal(before[0], x) and np.array_equal(before[1], dout)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_gelu_at_infinities_and_nan(dtype):
    x = np.array([np.inf, -np.inf, np.nan, 0.0], dtype=dtype)
    with np.errstate(invalid="ignore"):
        for f, formula in (
            (fast.gelu_tanh, activations.gelu_tanh),
            (lambda x: fast.gelu_tanh_backward(np.ones_like(x), x),
             lambda x: activations.gelu_tanh_backward(np.ones_like(x), x)),
        ):  # fmt: skip
            got, want = f(x), formula(x)
            assert np.array_equal(got, want, equal_nan=True), (got, want)


def forward_backward(model, x):
    model.zero_grad()
    logits = model(x)
    dx = model.backward(np.ones_like(logits) / logits.size)
    grads = {name: p.grad.copy() for name, p in model.named_parameters()}
    return logits, dx, grads


@given(
    config=gpt_configs(gelu_approximate="tanh"),
    B=batch_sizes,
    T=lengths,
    attn_impl=st.sampled_from(["explicit", "flash"]),
    kv=st.integers(0, 5),
    rng=rngs,
)
def test_an_accelerated_gpt_is_the_plain_gpt(config, B, T, attn_impl, kv, rng):
    """accelerate() swaps every layer with a fast form; outputs, the input's gradient and
    every parameter's gradient stay the formulas' (flash tiles where the keys outgrow one),
    with grouped-query attention too (n_kv_heads: any divisor of n_heads)."""
    divisors = [d for d in range(1, config["n_heads"] + 1) if config["n_heads"] % d == 0]
    config = {**config, "n_kv_heads": divisors[kv % len(divisors)]}

    def build():
        return N.GPT(N.GPTConfig(**config), seed=0, attn_impl=attn_impl, dtype=np.float64)

    plain, accelerated = build(), fast.accelerate(build())
    for module in (m for _, m in accelerated.named_modules()):
        assert type(module) not in fast.FAST_FORMS  # every layer with a fast form has it
    for module in (m for _, m in accelerated.named_modules() if isinstance(m, N.SelfAttention)):
        module.flash_tile = 4  # tiles from T > 4: both paths of FastSelfAttention
    x = rng.gen.integers(0, config["vocab_size"], (B, T))
    logits, dx, grads = forward_backward(plain, x)
    logits_fast, dx_fast, grads_fast = forward_backward(accelerated, x)
    assert_close("logits, accelerated", logits_fast, logits, np.float64)
    for name, g in grads.items():
        assert_close(f"d{name}, accelerated", grads_fast[name], g, np.float64)


def test_the_numpy_backend_is_fast_unless_told_not_to(monkeypatch):
    from labs.plumbing.backends import make_backend

    config = {"vocab_size": 11, "block_size": 8, "n_layers": 1, "n_heads": 2, "d_model": 8}
    x = np.random.default_rng(0).integers(0, 11, (4, 8))
    seen = count_calls(monkeypatch, fast, "layer_norm")
    on = make_backend("numpy", config, dtype="float64")
    off = make_backend("numpy", config, dtype="float64", fast=False)
    results = [b.train_step(x, x) for b in (on, off)]
    assert len(seen) == 3  # two LayerNorms and ln_f
    seen.clear()
    off.train_step(x, x), off.eval_loss([(x, x)])
    assert not seen  # fast=False: the formulas the chapters write
    assert_close("loss, fast vs formulas", results[0]["loss"], results[1]["loss"], np.float64)
    with pytest.raises(TypeError, match="fast: expected True or False"):
        make_backend("numpy", config, fast="no")


@given(
    shapes=st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=3), min_size=1, max_size=4),
    weight_decay=st.sampled_from([0.0, 0.1]),
    dtype=DTYPES,
    rng=rngs,
)
def test_flat_adamw_takes_the_formulas_steps_bit_for_bit(shapes, weight_decay, dtype, rng):
    """adamw_step over a flat buffer holding the parameters in another order (runs cut
    and joined) gives AdamW.step's bits, moments included."""

    def parameters():
        params = []
        for shape in shapes:
            p = N.Parameter(np.random.default_rng(len(params)).standard_normal(shape).astype(dtype))
            params.append(p)
        return params

    plain, flat_ones = parameters(), parameters()
    opts = [N.AdamW(ps, lr=3e-3, weight_decay=weight_decay) for ps in (plain, flat_ones)]
    flat = FlatParameters(list(rng.gen.permutation(np.array(flat_ones, dtype=object))))
    for step in range(3):
        grads = [rng.gen.standard_normal(p.data.shape).astype(dtype) for p in plain]
        for ps in (plain, flat_ones):
            for p, g in zip(ps, grads, strict=True):
                p.grad[...] = g
        opts[0].step()
        assert fast.adamw_step(opts[1], flat)
        for i, (a, b) in enumerate(zip(plain, flat_ones, strict=True)):
            assert np.array_equal(a.data, b.data), (step, i)
            assert np.array_equal(b.grad, grads[i]), (step, i)  # the gradient is not written
            for key in ("exp_avg", "exp_avg_sq"):
                assert np.array_equal(opts[0].state[a][key], opts[1].state[b][key]), key


@given(
    lead=st.lists(st.integers(0, 6), min_size=1, max_size=3),
    V=st.integers(1, 12),
    C=st.integers(1, 9),
    dtype=DTYPES,
    rng=rngs,
)
def test_fast_embedding_backward_is_the_scatter_add(lead, V, C, dtype, rng):
    idx = rng.gen.integers(0, V, lead)  # repeats and ids that never occur, both drawn
    dout = rng.gen.standard_normal((*lead, C)).astype(dtype)
    start = rng.gen.standard_normal((V, C)).astype(dtype)  # a gradient already holding a sum
    expected, grad = start.copy(), start.copy()
    np.add.at(expected, idx.reshape(-1), dout.reshape(-1, C))
    before = dout.copy()
    fast.embedding_backward(grad, idx, dout)
    assert_close("fused embedding backward", grad, expected, dtype)
    assert np.array_equal(dout, before)
    untouched = np.setdiff1d(np.arange(V), idx)
    assert np.array_equal(grad[untouched], start[untouched])  # rows no id names: the same bits


def test_fast_adamw_is_the_formula_with_numpy_scalars_and_non_finite_weights():
    """The same bits also when a hyperparameter is a NumPy scalar wider than the
    weights (an np.float64 learning rate with float32 weights: the formula computes in
    float64) and when a weight is already infinite or NaN without weight decay (the
    formula's 0 * inf is NaN)."""

    def run(on, dtype, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        gen = np.random.default_rng(0)
        first = np.array([np.inf, -np.inf, np.nan, 1.0, -0.0, 3.0])
        p = N.Parameter(first.astype(dtype))
        q = N.Parameter(gen.standard_normal((3, 5)).astype(dtype))
        opt = N.AdamW([p, q], lr=1e-3, betas=betas, eps=eps, weight_decay=weight_decay)
        flat = FlatParameters([q, p]) if on else None
        for step in range(4):
            for group in opt.param_groups:
                group["lr"] = lr * (step + 1)
            for r in (p, q):
                r.grad[...] = gen.standard_normal(r.data.shape).astype(dtype)
            with np.errstate(invalid="ignore"):
                if not (on and fast.adamw_step(opt, flat)):
                    opt.step()
        return [p.data, q.data] + [
            opt.state[r][k] for r in (p, q) for k in ("exp_avg", "exp_avg_sq")
        ]

    for dtype in (np.float32, np.float64, np.float16):
        for lr, weight_decay, betas, eps in [
            (3e-3, 0.0, (0.9, 0.999), 1e-8),
            (3e-3, 0.1, (0.9, 0.999), 1e-8),
            (np.float64(3e-3), 0.1, (0.9, 0.999), 1e-8),
            (3e-3, np.float64(0.1), (0.9, 0.999), 1e-8),
            (3e-3, 0.1, (np.float64(0.9), 0.999), 1e-8),
            (3e-3, 0.0, (0.9, 0.999), np.float64(1e-8)),
            (np.float32(3e-3), 0.1, (0.0, 0.0), 1e-8),
        ]:
            plain = run(False, dtype, lr, weight_decay, betas, eps)
            flat = run(True, dtype, lr, weight_decay, betas, eps)
            for a, b in zip(plain, flat, strict=True):
                assert a.dtype == b.dtype == dtype
                assert np.array_equal(a, b, equal_nan=True), (dtype, lr, weight_decay, a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_layer_norm_rows_are_their_own_whatever_the_layout_or_width(dtype):
    """A row's result depends on that row alone: also for rows that
    are not contiguous (a transposed array: einsum summed them in another order as one
    row or many) and for rows wider than NumPy's buffer (einsum summed a lone row of
    8193 numbers in two pieces, and several such rows whole)."""
    gen = np.random.default_rng(1)
    for x in (
        (3 * gen.standard_normal((17, 9)) + 1).astype(dtype).T,  # (9, 17), column-major
        (3 * gen.standard_normal((4, 8193)) + 1).astype(dtype),
        (3 * gen.standard_normal((3, 20000)) + 1).astype(dtype)[:, ::-1],
    ):
        C = x.shape[-1]
        weight, bias = gen.standard_normal(C).astype(dtype), gen.standard_normal(C).astype(dtype)
        dout = gen.standard_normal(x.shape).astype(dtype).T.copy().T  # column-major too
        whole = fast.layer_norm(x, weight, bias, 1e-5)
        whole_dx = fast.layer_norm_backward(dout, whole[1], whole[2], weight)
        for i in range(x.shape[0]):
            row = fast.layer_norm(x[i : i + 1], weight, bias, 1e-5)
            for a, b in zip(row, whole, strict=True):
                assert np.array_equal(a[0], b[i]), (C, i)
            dx = fast.layer_norm_backward(dout[i : i + 1], whole[1][i : i + 1],
                                           whole[2][i : i + 1], weight)  # fmt: skip
            assert np.array_equal(dx[0], whole_dx[i]), (C, i)
        contiguous = fast.layer_norm(np.ascontiguousarray(x), weight, bias, 1e-5)
        assert all(np.array_equal(a, b) for a, b in zip(contiguous, whole, strict=True))
        formula = norm.layer_norm(x, weight, bias, 1e-5)
        assert_close("fused LayerNorm y, any layout", whole[0], formula[0], dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_gelu_takes_what_the_formula_takes_a_0d_array_too(dtype):
    for x in (np.array(1.5, dtype), dtype(-0.75), np.array([[2.0]], dtype)):
        y, y_formula = fast.gelu_tanh(x), activations.gelu_tanh(x)
        dx = fast.gelu_tanh_backward(np.ones_like(x), x)
        dx_formula = activations.gelu_tanh_backward(np.ones_like(x), x)
        assert np.shape(y) == np.shape(y_formula) and np.shape(dx) == np.shape(dx_formula)
        assert type(y) is type(y_formula) and type(dx) is type(dx_formula)
        assert_close("fused GELU y, 0-d", np.asarray(y), np.asarray(y_formula), dtype)
        assert_close("fused GELU dx, 0-d", np.asarray(dx), np.asarray(dx_formula), dtype)


@given(lead=st.lists(st.integers(1, 5), min_size=1, max_size=2), C=st.integers(2, 24), rng=rngs)
def test_fast_backwards_against_central_differences(lead, C, rng):
    """The fused backwards checked on their own, not only against the formulas' backwards:
    central differences of the fused forwards (float64)."""
    x, weight, bias, dout = layer_norm_problem(rng, lead, C, np.float64, 0.5, 1.5)
    y, xhat, rstd = fast.layer_norm(x, weight, bias, 1e-5)
    dx = fast.layer_norm_backward(dout, xhat, rstd, weight)
    finite_difference_check(
        "fused LayerNorm dx", lambda: fast.layer_norm(x, weight, bias, 1e-5)[0], x, dx, dout, rng
    )
    dx = fast.gelu_tanh_backward(dout, x)
    finite_difference_check("fused GELU dx", lambda: fast.gelu_tanh(x), x, dx, dout, rng)


def attention_both_ways(q, k, v, mask, is_causal, scale, dropout_p, dout, seed):
    """out, probs, dq, dk, dv of ``scaled_dot_product_attention`` and its backward, the
    formulas' and the fused forms' (the dropout masks drawn alike from ``seed``)."""
    out, cache = attention.scaled_dot_product_attention(
        q, k, v, mask, is_causal, scale, dropout_p, rng=np.random.default_rng(seed)
    )
    runs = [(out, cache.probs, *attention.scaled_dot_product_attention_backward(dout, cache))]
    out, cache = fast_attention(q, k, v, mask, is_causal, scale, dropout_p, seed)
    runs.append((out, cache.probs, *fast.attention_backward(dout, cache)))
    return runs


def fast_attention(q, k, v, mask, is_causal=False, scale=None, dropout_p=0.0, seed=0):
    """fast.attention with scaled_dot_product_attention's inputs: (out, AttentionCache)."""
    rng = np.random.default_rng(seed)
    mask, scale, keep = attention.attention_inputs(q, k, v, mask, is_causal, scale, dropout_p, rng)
    out, probs = fast.attention(q, k, v, mask, scale, keep)
    return out, attention.AttentionCache(q, k, v, probs, keep, scale)


@given(
    p=attention_problems(),
    mask_kind=st.sampled_from(ATTENTION_MASKS),
    is_causal=st.booleans(),
    dropout_p=st.sampled_from([0.0, 0.3]),
    dtype=DTYPES,
    rng=rngs,
)
def test_fast_attention_is_the_formula(p, mask_kind, is_causal, dropout_p, dtype, rng):
    """Every mask the explicit attention takes (fully masked rows included), causal or
    not, with and without dropout: the fused forward and backward give the formulas'
    output, probabilities and gradients, and write none of their inputs."""
    q, k, v, mask = attention_inputs(p, mask_kind, rng, dtype)
    mask = None if mask_kind == "causal" else mask
    is_causal = is_causal or mask_kind == "causal"
    dout = rng.gen.standard_normal((*q.shape[:-1], v.shape[-1])).astype(dtype)
    inputs = [a for a in (q, k, v, mask, dout) if a is not None]
    before = [a.copy() for a in inputs]
    formula, fused_run = attention_both_ways(
        q, k, v, mask, is_causal, p["scale"], dropout_p, dout, rng.seed
    )
    for name, a, e in zip(("out", "probs", "dq", "dk", "dv"), fused_run, formula, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype == dtype, name
        assert_close(f"fused attention {name}", a, e, dtype)
    for b, a in zip(before, inputs, strict=True):
        assert np.array_equal(b, a)  # nothing the caller passed was written


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_attention_at_infinities_and_nan(dtype):
    """Non-finite scores: +inf behind a bool mask stays hidden (the formula's where),
    a NaN query and an unmasked +inf give the formula's NaN rows, a row with every key
    masked gives zeros; the same results in the same places."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 4, 3)).astype(dtype) for _ in range(3))
    dout = rng.standard_normal((1, 2, 4, 3)).astype(dtype)
    k[0, 0, 3] = np.inf  # key 3 of head 0: +-inf scores, hidden from queries 0-2 by causality
    q[0, 1, 2, 0] = np.nan  # query 2 of head 1: a row of NaN scores
    mask = np.tril(np.ones((4, 4), bool))
    mask[1] = False  # query 1 sees no key
    with np.errstate(invalid="ignore", over="ignore"):
        formula, fused_run = attention_both_ways(q, k, v, mask, False, None, 0.0, dout, 0)
    for name, a, e in zip(("out", "probs", "dq", "dk", "dv"), fused_run, formula, strict=True):
        assert np.array_equal(np.isnan(a), np.isnan(e)), name
        assert_close(f"fused attention {name}, non-finite", a, e, dtype)


@given(p=attention_problems(), mask_kind=st.sampled_from(ATTENTION_MASKS), rng=rngs)
def test_fast_attention_backward_against_central_differences(p, mask_kind, rng):
    """The fused backward checked on its own: central differences of the fused forward."""
    q, k, v, mask = attention_inputs(p, mask_kind, rng, np.float64)
    dout = rng.gen.standard_normal((*q.shape[:-1], v.shape[-1]))
    out, cache = fast_attention(q, k, v, mask, scale=p["scale"])
    grads = fast.attention_backward(dout, cache)
    for name, x, g in zip(("q", "k", "v"), (q, k, v), grads, strict=True):
        finite_difference_check(
            f"fast attention d{name}",
            lambda: fast_attention(q, k, v, mask, scale=p["scale"])[0],
            x,
            g,
            dout,
            rng,
        )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_attention_at_unmasked_infinities_and_non_finite_float_masks(dtype):
    """Scores that are +inf (not NaN) where a key is visible, and float masks holding
    +inf, -inf and NaN: the formula's inf / inf = NaN at the +inf key and zeros beside
    it, a row with a NaN score left unnormalised with its NaN; the same results in
    the same places, forward and backward."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 4, 3)).astype(dtype) for _ in range(3))
    dout = rng.standard_normal((1, 2, 4, 3)).astype(dtype)
    q[0, 0, :, 0] = np.abs(q[0, 0, :, 0]) + 0.5  # every query of head 0 positive on feature 0
    k[0, 0, 1] = (np.inf, 0.0, 0.0)  # key 1 of head 0: a +inf score for every query of it
    mask = rng.standard_normal((4, 4)).astype(dtype)
    mask[1, 2] = np.inf  # query 1: one +inf key (head 1), two in head 0
    mask[2, 0] = np.nan  # query 2: a NaN score
    mask[3, :] = -np.inf  # query 3 sees no key
    for m in (mask, np.isfinite(mask) | (mask > 0)):  # the float mask, and a bool one
        with np.errstate(invalid="ignore", over="ignore"):
            formula, fused_run = attention_both_ways(q, k, v, m, False, None, 0.0, dout, 0)
        assert np.isnan(formula[1][0, 0, 1, 1]) and formula[1][0, 0, 1, 0] == 0  # inf / inf
        for name, a, e in zip(("out", "probs", "dq", "dk", "dv"), fused_run, formula, strict=True):
            assert np.array_equal(np.isnan(a), np.isnan(e)), name
            assert_close(f"fused attention {name}, non-finite mask", a, e, dtype)


def test_attention_keeps_the_dtype_of_q_whatever_the_type_of_scale():
    """A NumPy float64 (or float32) scale: float32 q gives float32 out, probabilities and
    gradients on both paths, as flash and torch do (NumPy 2 would otherwise promote)."""
    rng = np.random.default_rng(2)
    for dtype, scale in ((np.float32, np.float64(0.3)), (np.float64, np.float32(0.3))):
        q, k, v = (rng.standard_normal((2, 2, 3, 4)).astype(dtype) for _ in range(3))
        dout = rng.standard_normal((2, 2, 3, 4)).astype(dtype)
        formula, fused_run = attention_both_ways(q, k, v, None, True, scale, 0.0, dout, 0)
        for name, a, e in zip(("out", "probs", "dq", "dk", "dv"), fused_run, formula, strict=True):
            assert a.dtype == e.dtype == dtype, name
            assert_close(f"fused attention {name}, NumPy scale", a, e, dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fast_gelu_keeps_the_largest_floats_finite(dtype):
    """x past half the largest float: y = 0.5 x (1 + t) is x, finite, as the formula's
    (0.5 x first); (1 + t) x first overflowed to inf. Found by Hypothesis (2 ** 127)."""
    big = np.finfo(dtype).max
    x = np.array([big, big / 2 * 1.5, -big, 2.0**127], dtype=dtype)
    with np.errstate(invalid="ignore"):
        y, y_formula = fast.gelu_tanh(x), activations.gelu_tanh(x)
    assert np.array_equal(y, y_formula) and np.isfinite(y).all()
