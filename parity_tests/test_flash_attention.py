"""FlashAttention: the tiled NumPy version against the explicit one; its memory growing with
T, not T^2.

``numpy_impl.flash_attention`` computes softmax(q k^T * scale + mask) v one
``(tile_q, tile_k)`` block at a time with the online softmax (Dao et al. 2022,
Algorithm 1) and recomputes the blocks in its backward (Algorithm 4). It must be
the same function as the explicit ``numpy_impl.scaled_dot_product_attention``
for every mask the latter accepts (none, causal, boolean with fully masked
rows, key padding, additive float), for tile lengths that do not divide T and
for T_q != T_k: float64 within FLOAT64 (1e-10 relative; reached ~1e-15), and
float32. Against torch, and against central differences, it is the registry's
``flash_attention[...]`` entries (registry.py, run by test_components.py):
``torch_impl.flash_attention`` (``F.scaled_dot_product_attention``) with each CPU
kernel forced in turn (``use_sdpa_backend``: PyTorch's choice, its C++ "math"
reference, its CPU flash kernel), outputs and every gradient.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
from parity_tests.harness import assert_unchanged
from parity_tests.hints import online_softmax_hints
from parity_tests.strategies import (
    ATTENTION_MASKS,
    DTYPES,
    SeededRng,
    attention_inputs,
    attention_problems,
    fully_masked_queries,
    rngs,
    tiles,
)
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch12

MASK_KINDS = list(ATTENTION_MASKS)
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]


def flash_problem(data, mask_kind: str, rng: SeededRng, dtype):
    """q, k, v, mask, is_causal, scale and two tile lengths, drawn."""
    p = data.draw(attention_problems(), label="problem")
    q, k, v, mask = attention_inputs(p, mask_kind, rng, dtype)
    tile_q, tile_k = data.draw(tiles, label="tile_q"), data.draw(tiles, label="tile_k")
    # a mask and is_causal together: a key is seen only where both allow it
    is_causal = mask_kind == "causal" or data.draw(st.booleans(), label="is_causal")
    return q, k, v, mask, is_causal, p["scale"], tile_q, tile_k


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(data=st.data(), rng=rngs)
def test_flash_matches_explicit_attention(mask_kind, dtype, data, rng: SeededRng):
    """NumPy flash vs NumPy explicit: output and dq, dk, dv (random dout)."""
    q, k, v, mask, is_causal, scale, tile_q, tile_k = flash_problem(data, mask_kind, rng, dtype)
    before = [a.copy() for a in (q, k, v)]
    what = f"flash_attention[mask={mask_kind}, tile_q={tile_q}, tile_k={tile_k}]"
    out, cache = N.flash_attention(q, k, v, mask, is_causal, scale, tile_q, tile_k)
    ref, ref_cache = N.scaled_dot_product_attention(q, k, v, mask, is_causal, scale)
    assert out.dtype == np.dtype(dtype)
    hints = online_softmax_hints(q, k, v, mask, is_causal, scale, tile_k)
    assert_close(f"output of {what} vs explicit", out, ref, dtype, hints=hints)

    dead = fully_masked_queries(mask, out.shape)
    assert np.all(np.where(dead, out, 0.0) == 0.0), f"{what}: a fully masked query is not 0"

    dout = rng.normal(out.shape, dtype)
    grads = N.flash_attention_backward(dout, cache)
    ref_grads = N.scaled_dot_product_attention_backward(dout, ref_cache)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads, strict=True):
        assert np.all(np.isfinite(g)), f"{name} of {what} has NaN/inf"
        assert_close(f"{name} of {what} vs explicit", g, r, dtype)
    if dead.any():
        dq = grads[0]
        assert np.all(np.where(dead, dq, 0.0) == 0.0), f"{what}: dq of a dead query is not 0"
    for name, b, a in zip("qkv", before, (q, k, v), strict=True):
        assert_unchanged(f"{name} given to flash_attention", b, a)


@pytest.mark.parametrize(
    ("T_q", "T_k", "tile_q", "tile_k", "is_causal"),
    [(130, 130, 64, 64, True), (130, 130, 48, 80, False), (100, 157, 32, 50, False)],
    ids=["causal-130-64", "130-tiles-48x80", "cross-100x157"],
)
def test_flash_many_tiles(T_q, T_k, tile_q, tile_k, is_causal):
    """Lengths of a few tiles, none dividing T: still the explicit result."""
    rng = SeededRng(T_q + T_k)
    q, k, v = (rng.normal((2, 3, t, 16), scale=2.0) for t in (T_q, T_k, T_k))
    out, cache = N.flash_attention(q, k, v, is_causal=is_causal, tile_q=tile_q, tile_k=tile_k)
    ref, ref_cache = N.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    what = f"flash_attention[{T_q}x{T_k}, tiles {tile_q}x{tile_k}, causal={is_causal}]"
    assert_close(f"output of {what}", out, ref, np.float64)
    dout = rng.normal(out.shape)
    grads = N.flash_attention_backward(dout, cache)
    ref_grads = N.scaled_dot_product_attention_backward(dout, ref_cache)
    for name, g, r in zip(("dq", "dk", "dv"), grads, ref_grads, strict=True):
        assert_close(f"{name} of {what}", g, r, np.float64)


def traced_peak(fn) -> int:
    """Peak bytes NumPy allocates during ``fn()`` (tracemalloc sees NumPy's buffers)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def forward_backward(attention, backward, q, k, v, dout, **kw):
    def run():
        out, cache = attention(q, k, v, is_causal=True, **kw)
        backward(dout, cache)

    return run


def test_flash_memory_grows_with_T_not_T_squared():
    """Peak extra memory of forward + backward: doubling T doubles flash's (output, lse,
    gradients: O(T d)) and quadruples explicit's (scores: O(T^2)). At T = 512 with
    d_k = 16, flash needs under 1/8 of explicit (``python -m labs bench-attention``
    measures T = 4096)."""
    peaks = {}
    for T_ in (256, 512):
        rng = SeededRng(T_)
        q, k, v, dout = (rng.normal((1, 1, T_, 16)) for _ in range(4))
        peaks["flash", T_] = traced_peak(
            forward_backward(
                N.flash_attention, N.flash_attention_backward, q, k, v, dout, tile_q=64, tile_k=64
            )  # fmt: skip
        )
        peaks["explicit", T_] = traced_peak(
            forward_backward(
                N.scaled_dot_product_attention,
                N.scaled_dot_product_attention_backward,
                q,
                k,
                v,
                dout,
            )  # fmt: skip
        )
    report = {key: f"{value / 1024:.0f} KiB" for key, value in peaks.items()}
    assert peaks["flash", 512] < 2.5 * peaks["flash", 256], f"flash grows faster than T: {report}"
    assert peaks["explicit", 512] > 3.5 * peaks["explicit", 256], f"explicit not T^2? {report}"
    assert peaks["flash", 512] < peaks["explicit", 512] / 8, f"flash not < 1/8: {report}"


def test_flash_fully_masked_rows_give_zeros_and_zero_gradients():
    rng = SeededRng(7)
    q, k, v = (rng.normal((1, 2, 5, 3)) for _ in range(3))
    mask = np.ones((5, 5), dtype=bool)
    mask[[1, 3]] = False  # queries 1 and 3 see nothing
    out, cache = N.flash_attention(q, k, v, attn_mask=mask, tile_q=2, tile_k=2)
    dq, dk, dv = N.flash_attention_backward(rng.normal(out.shape), cache)
    assert np.all(out[:, :, [1, 3]] == 0.0) and np.all(dq[:, :, [1, 3]] == 0.0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))
    assert np.all(np.isinf(cache[4][:, :, [1, 3]])), "a dead row's log-sum-exp should be +inf"


# -- the GPT's attention by tiles: attn_impl="flash" ------------------------------------------
def _attention_pair(attn_impl: str, dropout: float = 0.0, n_heads: int = 2, n_kv_heads=None):
    rng = SeededRng(3)
    layer = N.SelfAttention(
        8, n_heads, n_kv_heads, dropout=dropout, attn_impl=attn_impl, dtype=np.float64
    )
    layer.flash_tile = 4  # T = 6: two tiles (at the default 128 the explicit formula runs)
    return layer, rng.normal((2, 6, 8))


@pytest.mark.parametrize("heads", [(2, None), (4, 2), (4, 1)])  # MHA, GQA, MQA
def test_flash_self_attention_is_the_explicit_one(heads):
    """Same weights, same x: the tiles give the explicit formula's output and gradients."""
    flash, x = _attention_pair("flash", 0.0, *heads)
    explicit, _ = _attention_pair("explicit", 0.0, *heads)
    explicit.load_state_dict(flash.state_dict())
    dout = SeededRng(4).normal(x.shape)
    outs = []
    for layer in (flash, explicit):
        layer.zero_grad()
        y = layer(x, is_causal=True)
        outs.append((y, layer.backward(dout), layer.qkv_proj.weight.grad.copy()))
    for name, a, b in zip(("out", "dx", "qkv_proj.weight.grad"), *outs, strict=True):
        assert_close(f"flash vs explicit SelfAttention: {name}", a, b)


def test_flash_runs_the_explicit_path_where_tiles_do_not_apply():
    layer, x = _attention_pair("flash", dropout=0.5)
    layer(x, is_causal=True)  # training with attention dropout: explicit, like torch's dispatch
    assert isinstance(layer._cache, N.attention.AttentionCache)
    layer.eval()
    layer(x, is_causal=True)  # evaluation: no dropout, the tiles
    assert not isinstance(layer._cache, N.attention.AttentionCache)
    _, weights = layer.attend(*layer.project(x), is_causal=True, need_weights=True)
    assert weights.shape == (2, 2, 6, 6)  # the weights need the explicit probabilities
    layer(x, is_causal=True)  # the plain layer takes the tiles even when one tile holds the keys
    assert not isinstance(layer._cache, N.attention.AttentionCache)
    from numpy_impl.fast import accelerate

    accelerate(layer).flash_tile = 6  # the fast backend knows when tiles pay: not for one tile
    layer(x, is_causal=True)
    assert isinstance(layer._cache, N.attention.AttentionCache)
    layer.flash_tile = 4
    layer(x, is_causal=True)
    assert not isinstance(layer._cache, N.attention.AttentionCache)


@pytest.mark.parametrize("bad", ["sdpa", "Flash", None, 1])
def test_an_unknown_attn_impl_is_named(bad):
    with pytest.raises(ValueError, match="attn_impl: expected one of"):
        N.SelfAttention(8, 2, attn_impl=bad)
    model = N.GPT(N.GPTConfig(vocab_size=5, n_layers=1, n_heads=1, d_model=4))
    with pytest.raises(ValueError, match="attn_impl: expected one of"):
        model.attn_impl = bad


@pytest.mark.parametrize("bad", [0, -3, "a", None, 2.5, True])
def test_a_bad_flash_tile_is_refused_when_set_naming_it(bad):
    # a plain attribute took anything, then failed at the next long enough forward, as a
    # TypeError comparing with a string or a ValueError naming tile_q (an argument not given)
    from numpy_impl.multihead_attention import MultiHeadAttention

    for layer in (N.SelfAttention(8, 2), MultiHeadAttention(8, 2)):
        with pytest.raises(ValueError, match="flash_tile: expected a positive int"):
            layer.flash_tile = bad
        assert layer.flash_tile == 128
