"""Scaled dot-product attention as a function: NumPy vs torch explicit vs torch's fused SDPA.

``softmax(q k^T * scale + mask) v`` (Vaswani et al. 2017, eq. 1), for every kind
of mask the three accept: none, causal (top-left aligned), boolean (True = may
attend) with some rows fully masked, and additive float. A fully masked query
must give zeros and finite gradients in all three. The NumPy backward is also
checked alone against central differences (worst relative error reached
~5e-9, well inside FINITE_DIFF's 1e-6). NumPy vs torch reached ~1e-14 relative
in float64, ~1e-6 in float32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import assert_unchanged, finite_difference_check, tensor
from parity_tests.strategies import (
    DTYPES,
    SeededRng,
    batch_sizes,
    head_dims,
    lengths,
    n_heads,
    rngs,
)
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch03

MASK_KINDS = ["none", "causal", "bool", "bool_fully_masked_rows", "float"]
TORCH_IMPLS = [
    "explicit",
    "sdpa",
]  # torch_impl's written-out version, F.scaled_dot_product_attention
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]


@st.composite
def attention_problems(draw, mask_kind: str) -> dict:
    """Shapes and a scale; T_q and T_k differ in general (cross-attention shapes)."""
    return {
        "B": draw(batch_sizes),
        "H": draw(n_heads),
        "Tq": draw(lengths),
        "Tk": draw(lengths),
        "d_k": draw(head_dims),
        "d_v": draw(head_dims),
        "scale": draw(st.one_of(st.none(), st.floats(0.1, 2.0))),
        # the mask's shape: it broadcasts against (B, H, Tq, Tk)
        "mask_shape": draw(
            st.sampled_from(["(Tq,Tk)", "(B,1,Tq,Tk)", "(B,H,Tq,Tk)", "(1,H,1,Tk)"])
        ),
    }


def make_problem(p: dict, mask_kind: str, rng: SeededRng, dtype):
    B, H, Tq, Tk = p["B"], p["H"], p["Tq"], p["Tk"]
    q = rng.uniform((B, H, Tq, p["d_k"]), dtype, bound=2.0)
    k = rng.uniform((B, H, Tk, p["d_k"]), dtype, bound=2.0)
    v = rng.uniform((B, H, Tk, p["d_v"]), dtype, bound=2.0)
    shape = {
        "(Tq,Tk)": (Tq, Tk),
        "(B,1,Tq,Tk)": (B, 1, Tq, Tk),
        "(B,H,Tq,Tk)": (B, H, Tq, Tk),
        "(1,H,1,Tk)": (1, H, 1, Tk),
    }[p["mask_shape"]]
    mask = None
    if mask_kind in ("bool", "bool_fully_masked_rows"):
        mask = rng.mask(shape, p_true=0.7)
        mask[..., 0] = True  # every query sees at least one key ...
        if mask_kind == "bool_fully_masked_rows":  # ... except these, which see none
            rows = rng.choice(shape[-2], max(1, shape[-2] // 2))
            mask[..., rows, :] = False
    elif mask_kind == "float":
        mask = rng.uniform(shape, dtype, bound=2.0)
        mask[rng.mask(shape, p_true=0.2)] = -np.inf  # some forbidden pairs, never a whole row
        mask[..., 0] = 0.0
    return q, k, v, mask


def attention_variant(q, k, v, mask, is_causal, scale, axis=-1, scaled=True, masked=True):
    """Plain attention with one thing changed, as a bug would: the softmax over
    ``axis``, no ``scale``, no mask. For the hints of a failing comparison."""
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * (s if scaled else 1.0)
    if masked and is_causal:
        scores = np.where(np.triu(np.ones(scores.shape[-2:], bool), 1), -np.inf, scores)
    elif masked and mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    top = np.max(scores, axis=axis, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = np.sum(e, axis=axis, keepdims=True)
    return (e / np.where(total == 0.0, 1.0, total)) @ v


def attention_hints(q, k, v, mask, is_causal, scale) -> dict:
    """What the output looks like after the usual mistakes (see tolerances.assert_close)."""
    args = (q, k, v, mask, is_causal, scale)
    hints = {
        "wrong softmax axis: your probabilities sum to 1 over the queries (axis -2); "
        "each query's row must sum to 1 over the keys (axis -1)": lambda: attention_variant(
            *args, axis=-2
        ),
        "scores not scaled: multiply q k^T by scale (1 / sqrt(d_k) by default)": lambda: (
            attention_variant(*args, scaled=False)
        ),
    }
    if mask is not None or is_causal:
        hints["the mask is not applied: forbidden scores must become -inf"] = lambda: (
            attention_variant(*args, masked=False)
        )
    return hints


def fully_masked_queries(mask: np.ndarray | None, out_shape) -> np.ndarray:
    """Bool ``(B, H, Tq, 1)``: queries with no key to attend to."""
    if mask is None or mask.dtype != np.bool_:
        return np.zeros((*out_shape[:-1], 1), dtype=bool)
    dead = ~mask.any(axis=-1, keepdims=True)
    return np.broadcast_to(dead, (*out_shape[:-1], 1))


@pytest.mark.parametrize("impl", TORCH_IMPLS)
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(data=st.data(), rng=rngs)
def test_sdpa_parity(impl, mask_kind, dtype, data, rng: SeededRng):
    p = data.draw(attention_problems(mask_kind), label="problem")
    q, k, v, mask = make_problem(p, mask_kind, rng, dtype)
    is_causal = mask_kind == "causal"
    inputs_before = [a.copy() for a in (q, k, v)]
    what = f"SDPA[{impl}, mask={mask_kind}]"

    out, cache = N.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=p["scale"]
    )
    qt, kt, vt = (tensor(a, requires_grad=True) for a in (q, k, v))
    out_t = T.scaled_dot_product_attention(
        qt,
        kt,
        vt,
        attn_mask=None if mask is None else torch.from_numpy(mask),
        is_causal=is_causal,
        scale=p["scale"],
        impl=impl,
    )
    assert out.dtype == np.dtype(dtype)
    hints = attention_hints(q, k, v, mask, is_causal, p["scale"])
    assert_close(f"output of {what}", out, out_t, dtype, hints=hints)

    dead = fully_masked_queries(mask, out.shape)
    if dead.any():
        assert np.all(np.where(dead, out, 0.0) == 0.0), f"{what}: fully masked query not zero"
        assert torch.all(out_t.detach()[torch.from_numpy(dead.copy()).expand_as(out_t)] == 0)

    dout = rng.normal(out.shape, dtype)
    (out_t * tensor(dout)).sum().backward()
    grads = N.scaled_dot_product_attention_backward(dout, cache)
    for name, g, ref in zip(("dq", "dk", "dv"), grads, (qt, kt, vt), strict=True):
        assert np.all(np.isfinite(g)), f"{name} of {what} (NumPy) has NaN/inf"
        assert torch.all(torch.isfinite(ref.grad)), f"{name} of {what} (torch) has NaN/inf"
        assert_close(f"{name} of {what}", g, ref.grad, dtype)
    for name, before, after in zip("qkv", inputs_before, (q, k, v), strict=True):
        assert_unchanged(f"{name} given to NumPy attention", before, after)


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@given(data=st.data(), rng=rngs)
def test_sdpa_finite_differences(mask_kind, data, rng: SeededRng):
    """The NumPy attention backward alone vs central differences (float64)."""
    p = data.draw(attention_problems(mask_kind), label="problem")
    q, k, v, mask = make_problem(p, mask_kind, rng, np.float64)
    is_causal = mask_kind == "causal"

    def forward():
        return N.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, scale=p["scale"]
        )[0]

    out, cache = N.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=p["scale"]
    )
    dout = rng.normal(out.shape)
    dq, dk, dv = N.scaled_dot_product_attention_backward(dout, cache)
    for name, x, g in (("dq", q, dq), ("dk", k, dk), ("dv", v, dv)):
        finite_difference_check(f"{name} of SDPA[mask={mask_kind}]", forward, x, g, dout, rng)
