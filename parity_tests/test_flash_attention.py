"""FlashAttention: the tiled NumPy version against explicit attention, torch's fused kernels,
and central differences; and its memory growing with T, not T^2.

``numpy_impl.flash_attention`` computes softmax(q k^T * scale + mask) v one
``(tile_q, tile_k)`` block at a time with the online softmax (Dao et al. 2022,
Algorithm 1) and recomputes the blocks in its backward (Algorithm 4). It must be
the same function as the explicit ``numpy_impl.scaled_dot_product_attention``
for every mask the latter accepts (none, causal, boolean with fully masked
rows, key padding, additive float), for tile lengths that do not divide T and
for T_q != T_k: float64 within FLOAT64 (1e-10 relative; reached ~1e-15).
Against torch it is compared with ``torch_impl.flash_attention``
(``F.scaled_dot_product_attention``), with each CPU kernel forced in turn
(``use_sdpa_backend``: PyTorch's choice, its C++ "math" reference, its CPU flash
kernel), outputs and every gradient.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import assert_unchanged, finite_difference_check, tensor
from parity_tests.strategies import DTYPES, SeededRng, rngs
from parity_tests.test_attention import attention_problems, fully_masked_queries, make_problem
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch12

MASK_KINDS = ["none", "causal", "bool", "bool_fully_masked_rows", "float", "key_padding"]
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]
#: torch kernels that run on CPU: "auto" is PyTorch's own choice.
CPU_SDPA_BACKENDS = ["auto", "math", "flash"]
tiles = st.integers(1, 11)  # lengths are 1..9: tiles smaller, equal and larger than T


def flash_problem(data, mask_kind: str, rng: SeededRng, dtype):
    """q, k, v, mask, is_causal, scale and two tile lengths, drawn."""
    kind = "bool" if mask_kind == "key_padding" else mask_kind
    p = data.draw(attention_problems(kind), label="problem")
    q, k, v, mask = make_problem(p, kind, rng, dtype)
    if mask_kind == "key_padding":  # (B, 1, 1, T_k): the last keys of some rows are padding
        B, Tk = q.shape[0], k.shape[-2]
        lengths = rng.gen.integers(1, Tk + 1, B)
        mask = (np.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]
    tile_q, tile_k = data.draw(tiles, label="tile_q"), data.draw(tiles, label="tile_k")
    return q, k, v, mask, mask_kind == "causal", p["scale"], tile_q, tile_k


def online_softmax_variant(q, k, v, scale, tile_k: int, mistake: str) -> np.ndarray:
    """Unmasked tiled attention with one classic online-softmax mistake, for hints."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    m = np.full((*q.shape[:-1], 1), -np.inf)
    l, acc = np.zeros_like(m), np.zeros((*q.shape[:-1], v.shape[-1]))
    for c0 in range(0, k.shape[-2], tile_k):
        s = (q * scale) @ np.swapaxes(k[..., c0 : c0 + tile_k, :], -1, -2)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        alpha = 1.0 if mistake == "no_rescale" else np.exp(m - m_new)
        p = np.exp(s - m_new)
        if mistake == "overwrite":
            l, acc = p.sum(axis=-1, keepdims=True), p @ v[..., c0 : c0 + tile_k, :]
        else:
            l = alpha * l + p.sum(axis=-1, keepdims=True)
            acc = alpha * acc + p @ v[..., c0 : c0 + tile_k, :]
        m = m_new
    return acc / l


def online_softmax_hints(q, k, v, mask, is_causal, scale, tile_k) -> dict:
    """What a flash output looks like after the usual online-softmax mistakes (no mask)."""
    if mask is not None or is_causal or k.shape[-2] <= tile_k:
        return {}
    args = (q, k, v, scale, tile_k)
    return {
        "the old sums are not rescaled: multiply l and acc by alpha = exp(m - m_new) "
        "before adding the new tile": lambda: online_softmax_variant(*args, "no_rescale"),
        "only the last key tile counts: accumulate l and acc over the tiles "
        "(l = alpha l + ..., acc = alpha acc + ...), do not overwrite them": lambda: (
            online_softmax_variant(*args, "overwrite")
        ),
    }


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


@pytest.mark.parametrize("sdpa_backend", CPU_SDPA_BACKENDS)
@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@given(data=st.data(), rng=rngs)
def test_flash_parity_with_torch_fused_kernels(sdpa_backend, mask_kind, data, rng: SeededRng):
    """NumPy flash vs torch's F.scaled_dot_product_attention with a forced CPU kernel (float64),
    and torch's explicit formula vs the same kernel: fused = explicit = NumPy-flash."""
    q, k, v, mask, is_causal, scale, tile_q, tile_k = flash_problem(
        data, mask_kind, rng, np.float64
    )
    if sdpa_backend == "flash" and v.shape[-1] != q.shape[-1]:  # the CPU kernel needs d_v == d_k
        v = rng.uniform((*v.shape[:-1], q.shape[-1]), bound=2.0)
    what = f"flash_attention[mask={mask_kind}] vs torch sdpa_backend={sdpa_backend}"
    out, cache = N.flash_attention(q, k, v, mask, is_causal, scale, tile_q, tile_k)
    mask_t = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    qt, kt, vt = (tensor(a, requires_grad=True) for a in (q, k, v))
    with T.use_sdpa_backend(sdpa_backend):
        out_t = T.flash_attention(qt, kt, vt, mask_t, is_causal, scale, tile_q, tile_k)
    assert_close(f"output of {what}", out, out_t, np.float64)
    explicit = T.scaled_dot_product_attention(qt, kt, vt, mask_t, is_causal, scale, impl="explicit")
    assert_close(f"torch explicit vs sdpa_backend={sdpa_backend}", explicit, out_t, np.float64)

    dout = rng.normal(out.shape)
    (out_t * tensor(dout)).sum().backward()
    grads = N.flash_attention_backward(dout, cache)
    for name, g, ref in zip(("dq", "dk", "dv"), grads, (qt, kt, vt), strict=True):
        assert torch.all(torch.isfinite(ref.grad)), f"{name} of torch {what} has NaN/inf"
        assert_close(f"{name} of {what}", g, ref.grad, np.float64)


@pytest.mark.parametrize("mask_kind", MASK_KINDS)
@given(data=st.data(), rng=rngs)
def test_flash_backward_finite_differences(mask_kind, data, rng: SeededRng):
    """The tiled backward alone vs central differences of the tiled forward (float64)."""
    q, k, v, mask, is_causal, scale, tile_q, tile_k = flash_problem(
        data, mask_kind, rng, np.float64
    )

    def forward():
        return N.flash_attention(q, k, v, mask, is_causal, scale, tile_q, tile_k)[0]

    out, cache = N.flash_attention(q, k, v, mask, is_causal, scale, tile_q, tile_k)
    dout = rng.normal(out.shape)
    dq, dk, dv = N.flash_attention_backward(dout, cache)
    for name, x, g in (("dq", q, dq), ("dk", k, dk), ("dv", v, dv)):
        what = f"{name} of flash_attention[mask={mask_kind}]"
        finite_difference_check(what, forward, x, g, dout, rng)


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
