"""MultiHeadAttention with separate W_q, W_k, W_v (the tutorial's layer), in its three witnesses.

* NumPy vs torch_impl: the registry's ``MultiHeadAttention[...]`` entries
  (registry.py, run by test_components.py): output, attention weights (per head
  and averaged, rows summing to 1) and every gradient, for self- and
  cross-attention shapes (T_q != T_k), without a mask, causal, and with a boolean
  mask (True = may attend, passed straight to scaled_dot_product_attention), with
  and without the weights (torch's fused path); the NumPy backward against
  central differences.
* The combined layout: ``split_qkv_state_dict`` / ``merge_qkv_state_dict`` move
  weights between SelfAttention and MultiHeadAttention, exactly, and the
  two layers then compute the same function and the same gradients.
* ``torch.nn.MultiheadAttention(batch_first=True)`` loaded with the same weights
  (its ``in_proj_weight`` is the combined q, k, v layout): the same outputs and
  weights, without a mask and with a causal mask in its own convention
  (bool True = *masked*).

No chapter marker here: the class is not an exercise (its parts are chapters 03 and 04's;
the registry marks its parity checks ch04, whose stubs they fail).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import (
    copy_weights,
    randomize_,
    tensor,
    torch_dtype,
)
from parity_tests.strategies import SeededRng, batch_sizes, heads_and_width, lengths, rngs
from parity_tests.tolerances import assert_close


def build(rng: SeededRng, C: int, H: int, bias: bool, dtype=np.float64, impl="explicit"):
    torch_mod = T.MultiHeadAttention(C, H, bias=bias, attn_impl=impl, dtype=torch_dtype(dtype))
    randomize_(torch_mod, rng)
    numpy_mod = N.MultiHeadAttention(C, H, bias=bias, dtype=dtype)
    copy_weights(torch_mod, numpy_mod)
    return numpy_mod, torch_mod


def inputs(rng: SeededRng, B, T_q, T_k, C, dtype=np.float64):
    query = rng.uniform((B, T_q, C), dtype, bound=2.0)
    key = rng.uniform((B, T_k, C), dtype, bound=2.0)
    value = rng.uniform((B, T_k, C), dtype, bound=2.0)
    return query, key, value


# -- the combined QKV layout ------------------------------------------------------------------
@given(rng=rngs, B=batch_sizes, T_=lengths, hc=heads_and_width(), bias=st.booleans())
def test_separate_and_combined_layouts_are_the_same_layer(rng: SeededRng, B, T_, hc, bias):
    H, C = hc
    csa_t = randomize_(T.SelfAttention(C, H, bias=bias, dtype=torch.float64), rng)
    csa_sd = {k: v.detach().numpy().copy() for k, v in csa_t.state_dict().items()}
    mha_sd = N.split_qkv_state_dict(csa_sd)
    assert sorted(mha_sd) == sorted(
        k for k, _ in N.MultiHeadAttention(C, H, bias=bias).named_parameters()
    )
    mha_sd_t = T.split_qkv_state_dict(csa_t.state_dict())
    for name, value in mha_sd.items():
        np.testing.assert_array_equal(value, mha_sd_t[name].numpy(), err_msg=name)
    back = N.merge_qkv_state_dict(mha_sd)
    back_t = T.merge_qkv_state_dict(mha_sd_t)
    assert sorted(back) == sorted(csa_sd)
    for name, value in csa_sd.items():  # exact round trips, both backends
        np.testing.assert_array_equal(back[name], value, err_msg=name)
        np.testing.assert_array_equal(back_t[name].numpy(), value, err_msg=name)

    mha = N.MultiHeadAttention(C, H, bias=bias, dtype=np.float64)
    mha.load_state_dict(mha_sd)
    csa = N.SelfAttention(C, H, bias=bias, dtype=np.float64)
    csa.load_state_dict(csa_sd)
    mha_t = T.MultiHeadAttention(C, H, bias=bias, dtype=torch.float64)
    mha_t.load_state_dict(mha_sd_t)
    x = rng.uniform((B, T_, C))
    expected = csa(x, is_causal=True)
    out, _ = mha(x, x, x, is_causal=True)
    assert_close(
        "NumPy MultiHeadAttention(x, x, x, causal) vs SelfAttention(x, causal)", out, expected
    )
    with torch.no_grad():
        out_t, _ = mha_t(tensor(x), tensor(x), tensor(x), is_causal=True)
    assert_close(
        "torch MultiHeadAttention(x, x, x, causal) vs SelfAttention(x, causal)", out_t, expected
    )

    dout = rng.normal(expected.shape)
    csa.zero_grad()
    dx = csa.backward(dout)
    mha.zero_grad()
    dq, dk, dv = mha.backward(dout)
    assert_close("dquery + dkey + dvalue vs SelfAttention's dx", dq + dk + dv, dx)
    merged_grads = N.merge_qkv_state_dict({n: p.grad for n, p in mha.named_parameters()})
    for name, p in csa.named_parameters():
        assert_close(
            f"merged MultiHeadAttention grad vs SelfAttention's {name}",
            merged_grads[name],
            p.grad,
        )


# -- torch.nn.MultiheadAttention -------------------------------------------------------------
def nn_multihead(mha: T.MultiHeadAttention, bias: bool) -> torch.nn.MultiheadAttention:
    """nn.MultiheadAttention holding ``mha``'s weights: in_proj = cat(q, k, v) rows."""
    C, H = mha.d_model, mha.n_heads
    ref = torch.nn.MultiheadAttention(C, H, bias=bias, batch_first=True, dtype=torch.float64)
    merged = T.merge_qkv_state_dict(mha.state_dict())
    sd = {"in_proj_weight": merged["qkv_proj.weight"], "out_proj.weight": merged["out_proj.weight"]}
    if bias:
        sd |= {"in_proj_bias": merged["qkv_proj.bias"], "out_proj.bias": merged["out_proj.bias"]}
    ref.load_state_dict(sd)
    return ref.eval()


@pytest.mark.parametrize("mask_kind", ["none", "causal"])
@given(rng=rngs, B=batch_sizes, T_q=lengths, T_k=lengths, hc=heads_and_width(), bias=st.booleans())
def test_matches_torch_nn_multiheadattention(mask_kind, rng: SeededRng, B, T_q, T_k, hc, bias):
    H, C = hc
    if mask_kind == "causal":
        T_k = T_q  # self-attention shapes
    numpy_mod, torch_mod = build(rng, C, H, bias)
    ref = nn_multihead(torch_mod, bias)
    query, key, value = inputs(rng, B, T_q, T_k, C)
    ts = [tensor(a, requires_grad=True) for a in (query, key, value)]
    ref_ts = [tensor(a, requires_grad=True) for a in (query, key, value)]
    causal = mask_kind == "causal"
    # nn.MultiheadAttention's bool mask: True = NOT allowed (the triu mask of the source
    # material's GPTStyleModel)
    ref_mask = torch.ones(T_q, T_k, dtype=torch.bool).triu(1) if causal else None
    for average in (True, False):
        ref_out, ref_w = ref(*ref_ts, attn_mask=ref_mask, average_attn_weights=average)
        out, w = numpy_mod(query, key, value, is_causal=causal, average_attn_weights=average)
        out_t, w_t = torch_mod(*ts, is_causal=causal, average_attn_weights=average)
        what = f"vs nn.MultiheadAttention, mask={mask_kind}, average_attn_weights={average}"
        assert_close(f"NumPy output {what}", out, ref_out)
        assert_close(f"NumPy weights {what}", w, ref_w)
        assert_close(f"torch output {what}", out_t, ref_out)
        assert_close(f"torch weights {what}", w_t, ref_w)
    dout = rng.normal(out.shape)
    (ref_out * tensor(dout)).sum().backward()
    (out_t * tensor(dout)).sum().backward()
    for name, t, r in zip(("dquery", "dkey", "dvalue"), ts, ref_ts, strict=True):
        assert_close(f"torch {name} vs nn.MultiheadAttention's, mask={mask_kind}", t.grad, r.grad)
