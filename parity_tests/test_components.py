"""Every layer, NumPy twin against PyTorch twin: outputs and every gradient.

Each component is registered once, as a :class:`Pair` (minitorch style); three
parametrized properties then run over the whole registry:

* ``test_forward_backward_parity``: same weights (drawn at random, copied
  torch -> NumPy through the state dict), same input -> same output; then a
  random upstream gradient ``dout``: torch backpropagates ``(out * dout).sum()``,
  NumPy runs ``backward(dout)`` after ``zero_grad()``; the input gradient and
  every parameter gradient, by name, must agree. float64 tightly, float32 loosely.
* ``test_backward_accumulates``: ``backward`` adds into ``.grad``, never assigns.
* ``test_finite_differences``: each NumPy backward on its own against central
  differences (float64, h = 1e-6), in random coordinates of the input and of
  every parameter. Reached at worst: |numeric - analytic| ~ 3e-9, a relative
  ~3e-8, about 0.1 of the FINITE_DIFF tolerance (the session summary prints it).
  NumPy vs torch reached ~1e-14 relative in float64 and ~2e-5 in float32.

Then a few checks of single components: LayerNorm over one feature, causal
attention ignoring the future, GELU far in its tails.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import (
    assert_param_grads_close,
    assert_unchanged,
    copy_weights,
    finite_difference_check,
    randomize_,
    tensor,
    torch_dtype,
)
from parity_tests.strategies import (
    DTYPES,
    SeededRng,
    batch_sizes,
    block_options,
    even_heads_and_width,
    gelu_forms,
    heads_and_width,
    lengths,
    n_heads,
    rngs,
    rope_layouts,
)
from parity_tests.tolerances import assert_close


@dataclass(frozen=True, repr=False)
class Pair:
    """One component, twice.

    Attributes:
        name: test id, e.g. ``"SelfAttention[causal, sdpa]"``.
        chapter: pytest marker of the chapter that builds it.
        config: strategy for a dict of hyperparameters and input shape.
        numpy_module: ``(config, np dtype) -> numpy_impl module``.
        torch_module: ``(config, torch dtype) -> torch_impl module``.
        make_input: ``(config, rng, np dtype) -> input`` (array, ids or an int).
        float_input: the input is a float array with a gradient (not ids or T).
        has_params: the component has parameters (GELU has none).
        hints: ``(numpy module, input) -> {label: wrong output}`` for the failure
            message of the output comparison (see tolerances.assert_close).
        call: keyword arguments of every forward call of both twins (``is_causal``).
    """

    name: str
    chapter: str
    config: st.SearchStrategy
    numpy_module: Callable[[dict, Any], Any]
    torch_module: Callable[[dict, torch.dtype], torch.nn.Module]
    make_input: Callable[[dict, SeededRng, Any], Any]
    float_input: bool = True
    has_params: bool = True
    hints: Callable[[Any, Any], dict] | None = None
    call: tuple[tuple[str, Any], ...] = ()

    def __repr__(self) -> str:  # what a failing example prints
        return f"<{self.name} pair>"


def _to_torch_input(pair: Pair, x, requires_grad: bool):
    if isinstance(x, int):
        return x
    return tensor(x, requires_grad=requires_grad and pair.float_input)


# -- the registry ----------------------------------------------------------------------
leading_dims = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)  # (..., C)
bt = st.tuples(batch_sizes, lengths)  # (B, T)


def _layernorm_input(c: dict, rng: SeededRng, dtype) -> np.ndarray:
    """Rows with a mean offset but a spread of at least -1..1 (times ``scale``).

    The spread bounds the conditioning |x| / std of the normalisation: a row of
    nearly equal values has std ~ 0 and 1/sqrt(var + eps) up to 316, which
    multiplies float32 rounding past any fair tolerance in *both* backends. That
    regime is precision, not parity, so it is kept out.
    """
    z = rng.uniform((*c["lead"], c["dim"]))
    z[..., 0], z[..., 1] = -1.0, 1.0
    return (c["scale"] * (z + c["offset"])).astype(dtype)


def attention_variant(module, x: np.ndarray, split=True, merge=True, causal=True):
    """Causal SelfAttention's output computed plainly from ``module``'s weights, with a bug:
    heads split (``split=False``) or merged (``merge=False``) by a bare reshape, where the
    head axis must be moved; or no causal mask."""
    sd = module.state_dict()
    B, T, C = x.shape
    H = module.n_heads
    d = C // H

    def linear(a, name):
        bias = sd.get(f"{name}.bias")
        return a @ sd[f"{name}.weight"].T + (0.0 if bias is None else bias)

    def heads(a):  # (B, T, C) -> (B, H, T, d)
        return a.reshape(B, T, H, d).transpose(0, 2, 1, 3) if split else a.reshape(B, H, T, d)

    q, k, v = (heads(a) for a in np.split(linear(x, "qkv_proj"), 3, axis=-1))
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        scores = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (p / p.sum(axis=-1, keepdims=True)) @ v
    y = y.transpose(0, 2, 1, 3).reshape(B, T, C) if merge else y.reshape(B, T, C)
    return linear(y, "out_proj")


def attention_hints(module, x) -> dict:
    return {
        "heads merged with a bare reshape: move the head axis back first, (B, H, T, d_k) "
        "-> (B, T, H, d_k), then reshape to (B, T, C)": lambda: attention_variant(
            module, x, merge=False
        ),
        "heads split (and merged) with a bare reshape: (B, T, C) -> (B, T, H, d_k), then "
        "swap the T and H axes": lambda: attention_variant(module, x, split=False, merge=False),
        "no causal mask: position t must not see the positions after it": lambda: attention_variant(
            module, x, causal=False
        ),
    }


PAIRS = [
    Pair(
        "Linear",
        "ch02",
        st.fixed_dictionaries(
            {
                "lead": leading_dims,
                "n_in": st.integers(1, 8),
                "n_out": st.integers(1, 8),
                "bias": st.booleans(),
            }
        ),
        lambda c, dt: N.Linear(c["n_in"], c["n_out"], bias=c["bias"], dtype=dt),
        lambda c, dt: T.Linear(c["n_in"], c["n_out"], bias=c["bias"], dtype=dt),
        lambda c, rng, dt: rng.uniform((*c["lead"], c["n_in"]), dt),
    ),
    Pair(
        "Embedding",
        "ch02",
        st.fixed_dictionaries(
            {
                "lead": st.lists(st.integers(1, 5), min_size=1, max_size=3).map(tuple),
                "vocab": st.integers(1, 12),  # small, so ids repeat
                "dim": st.integers(1, 8),
                "id_dtype": st.sampled_from(["int64", "int32", "uint8"]),
            }
        ),
        lambda c, dt: N.Embedding(c["vocab"], c["dim"], dtype=dt),
        lambda c, dt: T.Embedding(c["vocab"], c["dim"], dtype=dt),
        lambda c, rng, dt: rng.ids(c["vocab"], c["lead"]).astype(c["id_dtype"]),
        float_input=False,
    ),
    Pair(
        "LearnedPositionalEmbedding",
        "ch05",
        st.integers(1, 12).flatmap(
            lambda bs: st.fixed_dictionaries(
                {"block_size": st.just(bs), "dim": st.integers(1, 8), "T": st.integers(1, bs)}
            )
        ),
        lambda c, dt: N.LearnedPositionalEmbedding(c["block_size"], c["dim"], dtype=dt),
        lambda c, dt: T.LearnedPositionalEmbedding(c["block_size"], c["dim"], dtype=dt),
        lambda c, rng, dt: c["T"],
        float_input=False,
    ),
    Pair(
        "LayerNorm",
        "ch07",
        st.fixed_dictionaries(
            {
                "lead": leading_dims,
                "dim": st.integers(2, 16),  # d_model = 1: test_layernorm_single_feature
                "bias": st.booleans(),
                "eps": st.sampled_from([1e-5, 1e-3]),
                "scale": st.floats(0.1, 3.0),
                "offset": st.floats(-3.0, 3.0),
            }
        ),
        lambda c, dt: N.LayerNorm(c["dim"], eps=c["eps"], bias=c["bias"], dtype=dt),
        lambda c, dt: T.LayerNorm(c["dim"], eps=c["eps"], bias=c["bias"], dtype=dt),
        lambda c, rng, dt: _layernorm_input(c, rng, dt),
    ),
    *[
        Pair(
            f"GELU[{form}]",
            "ch06",
            st.fixed_dictionaries({"lead": leading_dims}),
            lambda c, dt, form=form: N.GELU(form),
            lambda c, dt, form=form: T.GELU(form),
            # both tails and the curved middle (the far tails:
            # test_gelu_large_inputs_no_overflow)
            lambda c, rng, dt: rng.uniform((*c["lead"], 3), dt, bound=8.0),
            has_params=False,
        )
        for form in ("tanh", "none")
    ],
    Pair(
        "FeedForward",
        "ch06",
        st.fixed_dictionaries(
            {
                "bt": bt,
                "dim": st.integers(1, 8),
                "d_ff": st.one_of(st.none(), st.integers(1, 12)),
                "bias": st.booleans(),
                "gelu": gelu_forms,
            }
        ),
        lambda c, dt: N.FeedForward(
            c["dim"], c["d_ff"], bias=c["bias"], gelu_approximate=c["gelu"], dtype=dt
        ),
        lambda c, dt: T.FeedForward(
            c["dim"], c["d_ff"], bias=c["bias"], gelu_approximate=c["gelu"], dtype=dt
        ),
        lambda c, rng, dt: rng.uniform((*c["bt"], c["dim"]), dt),
    ),
    *[
        Pair(
            f"SelfAttention[causal, {impl}]",
            "ch04",
            st.fixed_dictionaries({"bt": bt, "hc": heads_and_width(), "bias": st.booleans()}),
            lambda c, dt: N.SelfAttention(*c["hc"][::-1], bias=c["bias"], dtype=dt),
            lambda c, dt, impl=impl: T.SelfAttention(
                *c["hc"][::-1], bias=c["bias"], attn_impl=impl, dtype=dt
            ),
            lambda c, rng, dt: rng.uniform((*c["bt"], c["hc"][1]), dt, bound=2.0),
            hints=attention_hints,
            call=(("is_causal", True),),
        )
        for impl in ("explicit", "sdpa")
    ],
    *[
        Pair(
            f"Block[{impl}]",
            "ch07",
            st.fixed_dictionaries(
                {
                    "bt": bt,
                    # d_model >= 4: with 1 or 2 features a LayerNorm row is often
                    # nearly constant, 1/std explodes and float32 rounding in *both*
                    # backends is amplified past 1e-4 (conditioning, not parity;
                    # float64 covers small widths in test_gpt.py)
                    "hc": heads_and_width(min_width=4),
                    "d_ff": st.one_of(st.none(), st.integers(1, 12)),
                    "bias": st.booleans(),
                    "gelu": gelu_forms,
                }
            ),
            lambda c, dt: N.Block(
                c["hc"][1],
                c["hc"][0],
                c["d_ff"],
                bias=c["bias"],
                gelu_approximate=c["gelu"],
                dtype=dt,
            ),
            lambda c, dt, impl=impl: T.Block(
                c["hc"][1],
                c["hc"][0],
                c["d_ff"],
                bias=c["bias"],
                gelu_approximate=c["gelu"],
                attn_impl=impl,
                dtype=dt,
            ),
            lambda c, rng, dt: rng.uniform((*c["bt"], c["hc"][1]), dt, bound=2.0),
        )
        for impl in ("explicit", "sdpa")
    ],
    # -- the catalogue: ReLU FFN (ch06's code), RoPE attention (ch13), RMSNorm, SiLU,
    # SwiGLU and the block's options (ch14) ------------------------------------------------
    Pair(
        "ReLU",
        "ch06",
        st.fixed_dictionaries({"lead": leading_dims}),
        lambda c, dt: N.ReLU(),
        lambda c, dt: T.ReLU(),
        lambda c, rng, dt: rng.uniform((*c["lead"], 3), dt, bound=3.0),
        has_params=False,
    ),
    Pair(
        "FeedForward[relu]",
        "ch06",
        st.fixed_dictionaries(
            {"bt": bt, "dim": st.integers(1, 8), "d_ff": st.integers(1, 12), "bias": st.booleans()}
        ),
        lambda c, dt: N.FeedForward(
            c["dim"], c["d_ff"], bias=c["bias"], dtype=dt, activation="relu"
        ),
        lambda c, dt: T.FeedForward(
            c["dim"], c["d_ff"], bias=c["bias"], dtype=dt, activation="relu"
        ),
        lambda c, rng, dt: rng.uniform((*c["bt"], c["dim"]), dt),
    ),
    *[
        Pair(
            f"SelfAttention[causal, rope, {impl}]",
            "ch13",
            st.fixed_dictionaries(
                {
                    "bt": bt,
                    "hc": even_heads_and_width(),
                    "bias": st.booleans(),
                    "layout": rope_layouts,
                }
            ),
            lambda c, dt: N.SelfAttention(
                c["hc"][1], c["hc"][0], bias=c["bias"], dtype=dt, rope=c["layout"]
            ),
            lambda c, dt, impl=impl: T.SelfAttention(
                c["hc"][1], c["hc"][0], bias=c["bias"], attn_impl=impl, dtype=dt, rope=c["layout"]
            ),
            lambda c, rng, dt: rng.uniform((*c["bt"], c["hc"][1]), dt, bound=2.0),
            call=(("is_causal", True),),
        )
        for impl in ("explicit", "sdpa")
    ],
    Pair(
        "RMSNorm",
        "ch14",
        st.fixed_dictionaries(
            {
                "lead": leading_dims,
                "dim": st.integers(2, 16),
                "eps": st.sampled_from([1e-5, 1e-3]),
                "scale": st.floats(0.1, 3.0),
                "offset": st.floats(-3.0, 3.0),
            }
        ),
        lambda c, dt: N.RMSNorm(c["dim"], eps=c["eps"], dtype=dt),
        lambda c, dt: T.RMSNorm(c["dim"], eps=c["eps"], dtype=dt),
        lambda c, rng, dt: _layernorm_input(c, rng, dt),  # rms >= scale * sqrt(2 / C)
    ),
    Pair(
        "SiLU",
        "ch14",
        st.fixed_dictionaries({"lead": leading_dims}),
        lambda c, dt: N.SiLU(),
        lambda c, dt: T.SiLU(),
        lambda c, rng, dt: rng.uniform((*c["lead"], 3), dt, bound=8.0),
        has_params=False,
    ),
    Pair(
        "SwiGLUFeedForward",
        "ch14",
        st.fixed_dictionaries(
            {
                "bt": bt,
                "dim": st.integers(1, 8),
                "d_ff": st.one_of(st.none(), st.integers(1, 12)),
                "bias": st.booleans(),
            }
        ),
        lambda c, dt: N.SwiGLUFeedForward(c["dim"], c["d_ff"], bias=c["bias"], dtype=dt),
        lambda c, dt: T.SwiGLUFeedForward(c["dim"], c["d_ff"], bias=c["bias"], dtype=dt),
        lambda c, rng, dt: rng.uniform((*c["bt"], c["dim"]), dt, bound=2.0),
    ),
    *[
        Pair(
            f"Block[options, {impl}]",
            "ch14",
            st.fixed_dictionaries(
                {
                    "bt": bt,
                    # d_model >= 4, as for Block[...] above: a 2-feature norm row is often
                    # nearly constant and float32 rounding is amplified in both backends
                    "hc": even_heads_and_width().filter(lambda hc: hc[1] >= 4),
                    "d_ff": st.one_of(st.none(), st.integers(1, 12)),
                    "bias": st.booleans(),
                    "options": block_options(),
                }
            ),
            lambda c, dt: N.Block(
                c["hc"][1], c["hc"][0], c["d_ff"], bias=c["bias"], dtype=dt, **c["options"]
            ),
            lambda c, dt, impl=impl: T.Block(
                c["hc"][1],
                c["hc"][0],
                c["d_ff"],
                bias=c["bias"],
                attn_impl=impl,
                dtype=dt,
                **c["options"],
            ),
            lambda c, rng, dt: rng.uniform((*c["bt"], c["hc"][1]), dt, bound=2.0),
        )
        for impl in ("explicit", "sdpa")
    ],
]

BY_NAME = {p.name: p for p in PAIRS}
REGISTRY = [pytest.param(p, id=p.name, marks=getattr(pytest.mark, p.chapter)) for p in PAIRS]
WITH_PARAMS = [param for param in REGISTRY if param.values[0].has_params]
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]


def build_pair(pair: Pair, config: dict, rng: SeededRng, dtype):
    """The two twins with the same random weights (drawn for torch, copied to NumPy)."""
    torch_mod = randomize_(pair.torch_module(config, torch_dtype(dtype)), rng)
    numpy_mod = pair.numpy_module(config, dtype)
    copy_weights(torch_mod, numpy_mod)
    return numpy_mod, torch_mod


# -- the properties ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("pair", REGISTRY)
@given(data=st.data(), rng=rngs)
def test_forward_backward_parity(pair: Pair, dtype, data, rng: SeededRng):
    config = data.draw(pair.config, label="config")
    numpy_mod, torch_mod = build_pair(pair, config, rng, dtype)
    x = pair.make_input(config, rng, dtype)
    x_np = x if isinstance(x, int) else np.array(x, copy=True)
    x_t = _to_torch_input(pair, x, requires_grad=True)

    out_t = torch_mod(x_t, **dict(pair.call))
    out_np = numpy_mod(x_np, **dict(pair.call))
    assert isinstance(out_np, np.ndarray) and out_np.dtype == np.dtype(dtype), (
        f"{pair.name} forward returned {type(out_np).__name__} of dtype "
        f"{getattr(out_np, 'dtype', None)}, expected {np.dtype(dtype).name}"
    )
    hints = pair.hints(numpy_mod, x) if pair.hints else None
    assert_close(f"output of {pair.name}", out_np, out_t, dtype, hints=hints)

    dout = rng.normal(out_np.shape, dtype)
    dout_before = dout.copy()
    (out_t * tensor(dout)).sum().backward()
    numpy_mod.zero_grad()
    dx = numpy_mod.backward(dout)

    assert_unchanged(f"dout given to {pair.name}.backward", dout_before, dout)
    if not isinstance(x, int):
        assert_unchanged(f"input x given to {pair.name}", x, x_np)
    if pair.float_input:
        assert dx.dtype == np.dtype(dtype), f"{pair.name} backward returned dtype {dx.dtype}"
        assert_close(f"input gradient dx of {pair.name}", dx, x_t.grad, dtype)
    for _, p in numpy_mod.named_parameters():
        assert p.grad.dtype == np.dtype(dtype)
    assert_param_grads_close(numpy_mod, torch_mod, dtype, pair.name)


@pytest.mark.parametrize("pair", WITH_PARAMS)
@given(data=st.data(), rng=rngs)
def test_backward_accumulates(pair: Pair, data, rng: SeededRng):
    """Gradients already in ``.grad`` are added to, not overwritten (llm.c's ``+=``)."""
    dtype = np.float64
    config = data.draw(pair.config, label="config")
    numpy_mod, torch_mod = build_pair(pair, config, rng, dtype)
    x = pair.make_input(config, rng, dtype)
    out_t = torch_mod(_to_torch_input(pair, x, requires_grad=False), **dict(pair.call))
    out_np = numpy_mod(x, **dict(pair.call))
    dout = rng.normal(out_np.shape)
    (out_t * tensor(dout)).sum().backward()
    before = {}
    for name, p in numpy_mod.named_parameters():
        p.grad[...] = rng.normal(p.shape)
        before[name] = p.grad.copy()
    numpy_mod.backward(dout)
    assert_param_grads_close(numpy_mod, torch_mod, dtype, f"{pair.name}, minus prior .grad", before)


@pytest.mark.parametrize("pair", REGISTRY)
@given(data=st.data(), rng=rngs)
def test_finite_differences(pair: Pair, data, rng: SeededRng):
    """NumPy backward alone vs central differences; no torch involved.

    Weights are drawn straight into the NumPy module. Worst relative error
    reached over the registry: ~3e-8 (FINITE_DIFF allows 1e-6).
    """
    config = data.draw(pair.config, label="config")
    numpy_mod = pair.numpy_module(config, np.float64)
    randomize_(numpy_mod, rng)
    x = pair.make_input(config, rng, np.float64)
    out = numpy_mod(x, **dict(pair.call))
    dout = rng.normal(out.shape)
    numpy_mod.zero_grad()
    dx = numpy_mod.backward(dout)

    def forward():
        return numpy_mod(x, **dict(pair.call))

    if pair.float_input:
        finite_difference_check(f"dx of {pair.name}", forward, x, dx, dout, rng)
    for name, p in numpy_mod.named_parameters():
        grad = p.grad.copy()
        finite_difference_check(f"grad of {name} in {pair.name}", forward, p.data, grad, dout, rng)


@pytest.mark.ch07
@given(rng=rngs, lead=leading_dims)
def test_layernorm_single_feature(rng: SeededRng, lead):
    """d_model = 1: every row normalises to 0, so the output is the bias and dx = 0."""
    numpy_mod, torch_mod = build_pair(
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
    numpy_mod, torch_mod = build_pair(
        BY_NAME["LearnedPositionalEmbedding"],
        {"block_size": block_size, "dim": dim},
        rng,
        np.float64,
    )
    out = numpy_mod(T_, start_pos)
    out_t = torch_mod(T_, start_pos)
    np.testing.assert_array_equal(out, numpy_mod.weight.data[start_pos : start_pos + T_])
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
