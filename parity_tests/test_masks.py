"""Attention masks: an attn_mask combined with is_causal into one explicit mask, key-padding
masks, fully masked queries, and the three mask conventions in circulation.

twinformer's convention is ``F.scaled_dot_product_attention``'s: a bool
``attn_mask`` is True where a query may attend (docs/masks.md). Here:

* ``attn_mask`` (bool or float) together with ``is_causal=True``: NumPy vs
  torch's written-out attention vs torch's fused kernel, outputs and every
  gradient, T_q != T_k included; and the combination is exactly the explicit
  mask ``attn_mask & tril`` (top-left aligned): the registry's
  ``scaled_dot_product_attention[bool+causal]`` entries and their kin
  (registry.py, run by test_components.py);
* key-padding masks ``(B, T_k)`` -> ``(B, 1, 1, T_k)``: values at padded keys
  change nothing;
* a query row whose keys are all masked (by padding, by the causal mask and
  padding together, or by -inf) returns zeros with zero, finite gradients, in
  all three implementations;
* one test per convention: nn.MultiheadAttention (True = masked), the
  F.scaled_dot_product_attention one (True = attend) and the tutorial's 0/1
  keep-mask (``scores.masked_fill(mask == 0, -1e9)``), each converted with
  ``to_attn_mask`` and compared with the library or tutorial code it comes from.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import numpy_impl.masks as NA
import torch_impl as T
import torch_impl.masks as TA
from parity_tests.harness import tensor
from parity_tests.strategies import (
    SeededRng,
    batch_sizes,
    lengths,
    rngs,
)
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch15


def torch_attention(q, k, v, mask, is_causal, impl):
    qt, kt, vt = (tensor(a, requires_grad=True) for a in (q, k, v))
    out = T.scaled_dot_product_attention(
        qt, kt, vt, attn_mask=torch.from_numpy(np.array(mask)), is_causal=is_causal, impl=impl
    )
    return out, (qt, kt, vt)


@pytest.mark.parametrize("backend", ["numpy", "explicit", "sdpa"])
@pytest.mark.parametrize("kind", ["padding", "padding+causal", "-inf row"])
def test_fully_masked_queries_give_zeros_and_zero_gradients(backend, kind):
    """Fixed case, B=2, one head, T_q=3, T_k=4. Sequence 1 is all padding: all its queries
    are dead. With the causal mask too, sequence 0 (keys 1..3 real, key 0 padding) also
    has a dead query 0. Dead rows: output exactly 0, gradients exactly 0, never NaN; the
    live rows match attention restricted by hand to their allowed keys."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(2, 1, n, 2)) for n in (3, 4, 4))
    is_causal = kind == "padding+causal"
    if kind == "-inf row":
        mask = np.zeros((2, 1, 3, 4))
        mask[1] = -np.inf
        mask[0, 0, 1, 2:] = -np.inf
        allowed = np.isfinite(mask)
    else:
        keep = np.array([[False, True, True, True], [False] * 4])
        mask = NA.key_padding_attn_mask(keep)
        allowed = np.broadcast_to(mask, (2, 1, 3, 4)) & (
            np.tri(3, 4, dtype=bool) if is_causal else True
        )
    dead = ~allowed.any(axis=-1)  # (2, 1, 3)
    assert dead[1].all() and (dead[0, 0, 0] == is_causal)

    dout = rng.normal(size=(2, 1, 3, 2))
    if backend == "numpy":
        out, cache = N.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)
        dq, dk, dv = N.scaled_dot_product_attention_backward(dout, cache)
    else:
        out_t, leaves = torch_attention(q, k, v, mask, is_causal, backend)
        (out_t * tensor(dout)).sum().backward()
        out = out_t.detach().numpy()
        dq, dk, dv = (leaf.grad.numpy() for leaf in leaves)
    np.testing.assert_array_equal(out[dead], 0.0)
    np.testing.assert_array_equal(dq[dead], 0.0)
    np.testing.assert_array_equal(dk[1], 0.0)  # nobody attends to sequence 1's keys
    np.testing.assert_array_equal(dv[1], 0.0)
    for a in (out, dq, dk, dv):
        assert np.all(np.isfinite(a))
    for b, h, i in zip(*np.nonzero(~dead), strict=True):  # live rows: softmax over allowed keys
        s = q[b, h, i] @ k[b, h].T / np.sqrt(2)
        s = np.where(allowed[b, h, i], s + (mask[b, h, i] if mask.dtype != bool else 0), -np.inf)
        w = np.exp(s - s.max())
        np.testing.assert_allclose(out[b, h, i], (w / w.sum()) @ v[b, h], rtol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@given(rng=rngs, B=batch_sizes, Tq=lengths, Tk=st.integers(2, 9))
def test_padded_keys_change_nothing(backend, rng: SeededRng, B, Tq, Tk):
    """Keys and values at padded positions may hold anything: the output is the same."""
    keep = rng.mask((B, Tk), p_true=0.6)
    keep[:, 0] = True
    q = rng.uniform((B, 2, Tq, 3))
    k, v = rng.uniform((B, 2, Tk, 3)), rng.uniform((B, 2, Tk, 3))
    k2, v2 = k.copy(), v.copy()
    pad = np.broadcast_to(~keep[:, None, :, None], k.shape)
    k2[pad], v2[pad] = 100.0, -100.0
    if backend == "numpy":
        mask = NA.key_padding_attn_mask(keep)
        a = N.scaled_dot_product_attention(q, k, v, mask)[0]
        b = N.scaled_dot_product_attention(q, k2, v2, mask)[0]
    else:
        mask = TA.key_padding_attn_mask(torch.from_numpy(keep))
        a, b = (
            T.scaled_dot_product_attention(*map(tensor, (q, kk, vv)), mask)
            for kk, vv in ((k, v), (k2, v2))
        )
    assert mask.shape == (B, 1, 1, Tk)
    assert_close(f"{backend}: attention with other values at padded keys", b, a, np.float64)


# -- the three conventions --------------------------------------------------------------------
def test_convention_true_means_masked_nn_multihead_attention():
    """nn.MultiheadAttention (the source material's GPTStyleModel block): ``attn_mask`` and
    ``key_padding_mask`` are
    True where attention is NOT allowed. ``to_attn_mask(mask, "masked")`` (= ~mask) and
    ``key_padding_attn_mask(~key_padding_mask)`` give twinformer's masks; with the module's
    own weights, NumPy attention then reproduces its output."""
    torch.manual_seed(0)
    B, Tq, d_model, H = 2, 5, 8, 2
    mha = torch.nn.MultiheadAttention(d_model, H, batch_first=True, dtype=torch.float64)
    x = torch.randn(B, Tq, d_model, dtype=torch.float64)
    # the GPTStyleModel's mask: True = a future position, not allowed
    gptstyle_mask = torch.triu(torch.ones(Tq, Tq), diagonal=1).bool()
    key_padding_mask = torch.tensor([[False] * 5, [False, False, False, True, True]])  # True = pad
    expected, _ = mha(x, x, x, attn_mask=gptstyle_mask, key_padding_mask=key_padding_mask)

    attn_mask = NA.to_attn_mask(gptstyle_mask.numpy(), "masked")
    np.testing.assert_array_equal(attn_mask, NA.causal_attn_mask(Tq, Tq))
    allowed = attn_mask & NA.key_padding_attn_mask(~key_padding_mask.numpy())  # (B, 1, Tq, Tq)
    w_qkv = mha.in_proj_weight.detach().numpy()  # (3 d_model, d_model): the combined layout
    b_qkv = mha.in_proj_bias.detach().numpy()
    qkv = x.numpy() @ w_qkv.T + b_qkv
    q, k, v = (
        a.reshape(B, Tq, H, d_model // H).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, -1)
    )
    y = N.scaled_dot_product_attention(q, k, v, attn_mask=allowed)[0]
    y = y.transpose(0, 2, 1, 3).reshape(B, Tq, d_model)
    out = y @ mha.out_proj.weight.detach().numpy().T + mha.out_proj.bias.detach().numpy()
    assert_close(
        "nn.MultiheadAttention vs NumPy with the converted masks", out, expected, np.float64
    )
    # the same via the torch twin's helpers
    t_mask = TA.to_attn_mask(gptstyle_mask, "masked") & TA.key_padding_attn_mask(~key_padding_mask)
    np.testing.assert_array_equal(t_mask.numpy(), allowed)


def test_convention_true_means_attend_sdpa():
    """F.scaled_dot_product_attention: True = may attend, twinformer's own convention:
    ``to_attn_mask(mask, "attend")`` returns it unchanged and both backends agree with F."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 2, n, 3)) for n in (4, 5, 5))
    mask = rng.random((2, 1, 4, 5)) < 0.6
    mask[..., 0] = True
    expected = F.scaled_dot_product_attention(
        *map(tensor, (q, k, v)), attn_mask=torch.from_numpy(mask)
    )
    assert NA.to_attn_mask(mask, "attend") is mask
    out = N.scaled_dot_product_attention(q, k, v, attn_mask=NA.to_attn_mask(mask, "attend"))[0]
    assert_close(
        "F.scaled_dot_product_attention vs NumPy, same bool mask", out, expected, np.float64
    )
    got_t = T.scaled_dot_product_attention(
        *map(tensor, (q, k, v)), TA.to_attn_mask(torch.from_numpy(mask), "attend")
    )
    assert_close("F.scaled_dot_product_attention vs torch twin", got_t, expected, np.float64)


def test_convention_keep_mask_compared_with_zero():
    """The tutorial: ``scores.masked_fill(mask == 0, -1e9)`` with a 0/1 mask (1 = keep).
    ``to_attn_mask(mask, "keep")`` (= mask != 0) gives the same attention wherever a query
    keeps a key; a query that keeps none differs on purpose: -1e9 everywhere is a uniform
    average of all values there, twinformer returns zeros."""
    rng = np.random.default_rng(2)
    q, k, v = (rng.normal(size=(1, 2, n, 4)) for n in (3, 6, 6))
    keep = (rng.random((1, 1, 3, 6)) < 0.5).astype(np.int64)
    keep[..., 0, 0], keep[..., 1, :] = 1, 1
    keep[..., 2, :] = 0  # query 2 keeps nothing

    def keep_mask_attention(q_, k_, v_, keep_):  # the tutorials' idiom: fill keep == 0 with -1e9
        scores = (q_ @ k_.transpose(-2, -1)) / math.sqrt(q_.shape[-1])
        scores = scores.masked_fill(keep_ == 0, -1e9)
        return scores.softmax(dim=-1) @ v_

    expected = keep_mask_attention(*map(tensor, (q, k, v, keep)))
    mask = NA.to_attn_mask(keep, "keep")
    assert mask.dtype == np.bool_
    out = N.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0]
    assert_close(
        "0/1 keep-mask attention vs NumPy, queries 0 and 1",
        out[..., :2, :],
        expected[..., :2, :],
        np.float64,
    )
    np.testing.assert_array_equal(out[..., 2, :], 0.0)
    assert_close(
        "the tutorial's fully masked query: the mean of the values",
        expected[..., 2, :],
        v.mean(axis=2),
        np.float64,
    )
    t_mask = TA.to_attn_mask(torch.from_numpy(keep), "keep")
    np.testing.assert_array_equal(t_mask.numpy(), mask)


def test_the_causal_mask_attention_combines_is_shared_read_only_and_the_public_one_fresh():
    """``combine_attn_mask`` gives every attention layer one read-only causal mask per shape
    (kept up to ``SHARED_MASK_MAX_ENTRIES`` entries, made afresh beyond); the public
    ``causal_attn_mask`` stays a new writable array each call."""
    from numpy_impl import masks

    first, again = (masks.combine_attn_mask(None, True, 5, 7) for _ in range(2))
    assert first is again and not first.flags.writeable
    assert np.array_equal(first, masks.causal_attn_mask(5, 7))
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0] = False
    side = math.isqrt(masks.SHARED_MASK_MAX_ENTRIES) + 1  # side^2 entries: past the limit
    big, big_again = (masks.combine_attn_mask(None, True, side, side) for _ in range(2))
    assert big is not big_again and not big.flags.writeable
    assert np.array_equal(big, np.tri(side, side, dtype=bool))
    public = masks.causal_attn_mask(5, 7)
    assert public.flags.writeable and public is not masks.causal_attn_mask(5, 7)
