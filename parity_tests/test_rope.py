"""Rotary position embeddings (RoPE, Su et al. 2021): both layouts, both backends.

* parity (the registry's ``RotaryEmbedding[...]`` and ``SelfAttention[causal, rope]``
  entries, registry.py, run by test_components.py): forward and backward, NumPy vs
  torch autograd, with a random ``start_pos``, and the NumPy backward alone against
  central differences;
* exact values on fixed small inputs, written out by hand here, because the
  relative-position property alone cannot tell the layouts apart (both have it);
  and the source material's own ``rotary_embed`` as a third witness for "interleaved";
* the relative-position property: the score of query i and key j depends on i - j only;
* the layout permutation: permuting the q/k projection rows and switching the
  layout gives the same attention output (and not permuting does not);
* in attention: v is not rotated, and a common shift of all positions changes nothing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from parity_tests.harness import copy_weights, randomize_, tensor
from parity_tests.strategies import (
    SeededRng,
    batch_sizes,
    even_heads_and_width,
    lengths,
    rngs,
)
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch13

LAYOUTS = ["interleaved", "half"]
half_head_dims = st.integers(1, 4)  # d_k = 2 * this
start_positions = st.integers(0, 40)


# -- exact values --------------------------------------------------------------------------------
def expected_d4(x, p: int, layout: str, theta1: float = 0.01, sign: float = 1.0) -> list[float]:
    """RoPE of one 4-vector at position p, by hand: theta = (1, 10000^(-2/4) = 0.01)
    (``theta1``, ``sign``: a wrong second frequency, a rotation by -p)."""
    a0, a1 = sign * p * 1.0, sign * p * theta1  # the angles of planes 0 and 1
    c0, s0, c1, s1 = math.cos(a0), math.sin(a0), math.cos(a1), math.sin(a1)
    x0, x1, x2, x3 = x
    if layout == "interleaved":  # planes (0, 1) and (2, 3)
        return [x0 * c0 - x1 * s0, x0 * s0 + x1 * c0, x2 * c1 - x3 * s1, x2 * s1 + x3 * c1]
    # half: planes (0, 2) and (1, 3)
    return [x0 * c0 - x2 * s0, x1 * c1 - x3 * s1, x0 * s0 + x2 * c0, x1 * s1 + x3 * c1]


ROPE_EXPONENT = (
    "the frequencies: theta_i = base^(-2i / d_k) for plane i = 0 .. d_k/2 - 1 (not base^(-i / d_k))"
)
ROPE_LAYOUTS_SWAPPED = (
    "the layouts swapped: interleaved rotates the pairs (2i, 2i + 1), half the pairs (i, i + d_k/2)"
)
ROPE_BACKWARDS = (
    "rotated by -p: out_a = a cos - b sin, out_b = a sin + b cos (a sign of sin is wrong)"
)
ROPE_NO_START_POS = (
    "start_pos ignored: the positions are start_pos .. start_pos + T - 1, not 0 .. T - 1"
)


def _rope_hints(x, positions, layout: str, one_row: bool = False) -> dict:
    """The rotations of (1, 2, 3, 4) after the usual mistakes of chapter 13."""
    other = "half" if layout == "interleaved" else "interleaved"

    def rows(**kw):
        out = np.array([expected_d4(x, p, **kw) for p in positions])
        return out[0] if one_row else out

    return {
        ROPE_EXPONENT: lambda: rows(layout=layout, theta1=10000.0**-0.25),
        ROPE_LAYOUTS_SWAPPED: lambda: rows(layout=other),
        ROPE_BACKWARDS: lambda: rows(layout=layout, sign=-1.0),
    }


@pytest.mark.parametrize("layout", LAYOUTS)
def test_exact_rotations_on_fixed_inputs(layout):
    """(1, 2, 3, 4) at positions 0 .. 10 in one call, and at position p alone via start_pos."""
    x = np.array([1.0, 2.0, 3.0, 4.0])
    expected = np.array([expected_d4(x, p, layout) for p in range(11)])  # (11, 4)
    q = np.tile(x, (1, 1, 11, 1))  # (B=1, H=1, T=11, d_k=4): x at every position
    got = {
        "NumPy": N.RotaryEmbedding(4, layout)(q, q)[0][0, 0],
        "torch": T.RotaryEmbedding(4, layout)(tensor(q), tensor(q))[0][0, 0],
    }
    for side, rotated in got.items():
        assert_close(
            f"{side} RoPE[{layout}] of (1, 2, 3, 4) at positions 0..10",
            rotated,
            expected,
            hints=_rope_hints(x, range(11), layout),
        )
    for p in (1, 3, 10):
        one = q[..., :1, :]  # a single token, placed at position p by start_pos
        assert_close(
            f"NumPy RoPE[{layout}] at start_pos {p}",
            N.RotaryEmbedding(4, layout)(one, one, p)[1][0, 0, 0],
            expected[p],
            hints={ROPE_NO_START_POS: x, **_rope_hints(x, [p], layout, one_row=True)},
        )
        assert_close(
            f"torch RoPE[{layout}] at start_pos {p}",
            T.RotaryEmbedding(4, layout)(tensor(one), tensor(one), p)[1][0, 0, 0],
            expected[p],
        )
    np.testing.assert_array_equal(expected[0], x)  # position 0: no rotation


def test_the_two_layouts_differ_on_the_same_input():
    """A wrong layout is caught by value: the same x at the same position rotates differently."""
    x = np.array([[[[1.0, 2.0, 3.0, 4.0]]]])
    a = N.RotaryEmbedding(4, "interleaved")(x, x, 1)[0]
    b = N.RotaryEmbedding(4, "half")(x, x, 1)[0]
    assert np.abs(a - b).max() > 0.5


def source_rotary_embed(x: torch.Tensor, pos: torch.Tensor, base: float = 10000) -> torch.Tensor:
    """The source material's "library path" RoPE, verbatim (it is the interleaved layout)."""
    d = x.shape[-1]
    half = d // 2
    freqs = base ** (-torch.arange(0, half, device=x.device).float() / half)
    angles = pos[:, None].float() * freqs[None, :]  # (seq_len, half)
    cos, sin = angles.cos(), angles.sin()
    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    out_even = x_even * cos - x_odd * sin
    out_odd = x_even * sin + x_odd * cos
    out = torch.stack([out_even, out_odd], dim=-1).flatten(-2)
    return out


@given(rng=rngs, T_=lengths, half=half_head_dims, pos=start_positions)
def test_interleaved_is_the_source_materials_formula(rng: SeededRng, T_, half, pos):
    d_k = 2 * half
    x = rng.uniform((2, 3, T_, d_k), np.float32)
    expected = source_rotary_embed(torch.from_numpy(x), torch.arange(pos, pos + T_))
    got = N.RotaryEmbedding(d_k, "interleaved")(x, x, pos)[0]
    # the source computes its angles in float32, we in float64: a float32 comparison
    assert_close(
        "NumPy RoPE[interleaved] vs the source material's rotary_embed", got, expected, np.float32
    )


def test_base_is_configurable():
    """theta_i = base^(-2i/d_k): with base 100 and d_k 4 plane 1 turns 0.1 rad per position."""
    cos, sin = N.rope_cos_sin(2, 4, start_pos=0, base=100.0, dtype=np.float64)
    np.testing.assert_allclose(np.arctan2(sin, cos)[1], [1.0, 0.1])
    cos_t, sin_t = T.rope_cos_sin(2, 4, start_pos=0, base=100.0, dtype=torch.float64)
    assert_close("torch rope_cos_sin, base 100", cos, cos_t, np.float64)
    assert_close("torch rope_cos_sin, base 100 (sin)", sin, sin_t, np.float64)


# -- the relative-position property ------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@given(rng=rngs, half=half_head_dims, T_=st.integers(3, 9), shift=start_positions)
def test_scores_depend_only_on_the_offset(layout, rng: SeededRng, half, T_, shift):
    """One query vector and one key vector placed at every position 0..T-1 (plus a common
    shift): score[i, j] = R_i q . R_j k is constant along each diagonal i - j = const."""
    d_k = 2 * half
    q = np.broadcast_to(rng.uniform(d_k), (1, 1, T_, d_k)).copy()
    k = np.broadcast_to(rng.uniform(d_k), (1, 1, T_, d_k)).copy()
    for side in ("NumPy", "torch"):
        if side == "NumPy":
            qr, kr = N.RotaryEmbedding(d_k, layout)(q, k, shift)
        else:
            qr, kr = (
                t.numpy() for t in T.RotaryEmbedding(d_k, layout)(tensor(q), tensor(k), shift)
            )
        scores = qr[0, 0] @ kr[0, 0].T  # (T, T)
        for offset in range(-(T_ - 1), T_):
            diagonal = np.diagonal(scores, offset)
            assert_close(
                f"{side} RoPE[{layout}] scores along i - j = {-offset}, shift {shift}",
                diagonal,
                np.full_like(diagonal, diagonal[0]),
                np.float64,
            )
        unrotated = q[0, 0, 0] @ k[0, 0, 0]
        assert_close(
            f"{side}: the score at i = j is the unrotated q . k",
            np.diagonal(scores),
            np.full(T_, unrotated),
            np.float64,
        )
    # and the positions do matter: the first plane turns by 1 rad per step
    assert not np.allclose(scores[0, 0], scores[0, 1])


# -- the layout permutation -------------------------------------------------------------------
@given(half=half_head_dims)
def test_permutation_maps_planes_onto_planes(half):
    d_k = 2 * half
    to_half = N.rope_permutation(d_k, "interleaved", "half")
    to_inter = N.rope_permutation(d_k, "half", "interleaved")
    np.testing.assert_array_equal(to_half[to_inter], np.arange(d_k))  # inverse of each other
    np.testing.assert_array_equal(to_half, [*range(0, d_k, 2), *range(1, d_k, 2)])
    np.testing.assert_array_equal(N.rope_permutation(d_k, "half", "half"), np.arange(d_k))
    for src, dst in (("interleaved", "half"), ("half", "interleaved")):
        np.testing.assert_array_equal(
            N.rope_permutation(d_k, src, dst), T.rope_permutation(d_k, src, dst).numpy()
        )
    x = np.arange(1.0, d_k + 1.0)[None, None, None]  # (1, 1, 1, d_k)
    rot_inter = N.RotaryEmbedding(d_k, "interleaved")(x, x, 5)[0]
    rot_half = N.RotaryEmbedding(d_k, "half")(x[..., to_half], x[..., to_half], 5)[0]
    assert_close(
        "rope_half(x[perm]) vs rope_interleaved(x)[perm]",
        rot_half,
        rot_inter[..., to_half],
        np.float64,
    )


@pytest.mark.parametrize("src, dst", [("interleaved", "half"), ("half", "interleaved")])
@given(
    rng=rngs, B=batch_sizes, T_=st.integers(2, 9), hc=even_heads_and_width(), pos=start_positions
)
def test_permuted_weights_and_other_layout_give_the_same_attention(src, dst, rng, B, T_, hc, pos):
    H, C = hc
    x = rng.uniform((B, T_, C))
    torch_src = randomize_(T.SelfAttention(C, H, rope=src, dtype=torch.float64), rng)
    sd = {k: v.detach().numpy().copy() for k, v in torch_src.state_dict().items()}
    permuted = dict(sd)
    for kind in ("weight", "bias"):
        permuted[f"qkv_proj.{kind}"] = N.permute_qkv_for_rope(sd[f"qkv_proj.{kind}"], H, src, dst)
    permuted_t = T.permute_qkv_for_rope(torch.from_numpy(sd["qkv_proj.weight"]), H, src, dst)
    np.testing.assert_array_equal(permuted["qkv_proj.weight"], permuted_t.numpy())

    np_src = N.SelfAttention(C, H, rope=src, dtype=np.float64)
    np_src.load_state_dict(sd)
    np_dst = N.SelfAttention(C, H, rope=dst, dtype=np.float64)
    np_dst.load_state_dict(permuted)
    torch_dst = T.SelfAttention(C, H, rope=dst, dtype=torch.float64)
    torch_dst.load_state_dict({k: torch.from_numpy(v) for k, v in permuted.items()})
    reference = np_src(x, is_causal=True, start_pos=pos)
    what = f"{src} -> {dst}, start_pos {pos}"
    assert_close(
        f"NumPy attention, weights permuted {what}",
        np_dst(x, is_causal=True, start_pos=pos),
        reference,
    )
    with torch.no_grad():
        assert_close(
            f"torch attention, weights permuted {what}",
            torch_dst(tensor(x), is_causal=True, start_pos=pos),
            torch_src(tensor(x), is_causal=True, start_pos=pos),
        )
    # the test can fail: the other layout with the *un*permuted weights is another model
    np_dst.load_state_dict(sd)
    if C // H > 2:  # with d_k = 2 the two layouts coincide
        assert not np.allclose(np_dst(x, is_causal=True, start_pos=pos), reference)


# -- RoPE inside attention -------------------------------------------------------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@given(rng=rngs, B=batch_sizes, T_=lengths, hc=even_heads_and_width(), shift=st.integers(1, 40))
def test_a_common_shift_of_positions_changes_nothing(layout, rng, B, T_, hc, shift):
    """Scores depend on i - j only and the causal mask is relative too, so the attention
    output with positions start_pos .. start_pos + T - 1 is the one with 0 .. T - 1."""
    H, C = hc
    x = rng.uniform((B, T_, C))
    torch_mod = randomize_(T.SelfAttention(C, H, rope=layout, dtype=torch.float64), rng)
    numpy_mod = N.SelfAttention(C, H, rope=layout, dtype=np.float64)
    copy_weights(torch_mod, numpy_mod)
    assert_close(
        f"NumPy RoPE[{layout}] attention, positions shifted by {shift}",
        numpy_mod(x, is_causal=True, start_pos=shift),
        numpy_mod(x, is_causal=True, start_pos=0),
    )
    with torch.no_grad():
        assert_close(
            f"torch RoPE[{layout}] attention, positions shifted by {shift}",
            torch_mod(tensor(x), is_causal=True, start_pos=shift),
            torch_mod(tensor(x), is_causal=True, start_pos=0),
        )


@pytest.mark.parametrize("layout", LAYOUTS)
@given(rng=rngs, B=batch_sizes, hc=even_heads_and_width(), pos=st.integers(1, 40))
def test_values_are_not_rotated(layout, rng, B, hc, pos):
    """One token at position pos > 0: q and k are rotated, but with a single key the
    softmax is 1 and the output is out_proj(v): the same as without RoPE, unless v was
    rotated too."""
    H, C = hc
    x = rng.uniform((B, 1, C))
    with_rope = randomize_(N.SelfAttention(C, H, rope=layout, dtype=np.float64), rng)
    without = N.SelfAttention(C, H, dtype=np.float64)
    without.load_state_dict(with_rope.state_dict())
    assert_close(
        f"NumPy RoPE[{layout}] attention of one token at position {pos}",
        with_rope(x, is_causal=True, start_pos=pos),
        without(x, is_causal=True),
    )
    torch_mod = T.SelfAttention(C, H, rope=layout, dtype=torch.float64)
    torch_mod.load_state_dict(
        {k: torch.from_numpy(v.copy()) for k, v in without.state_dict().items()}
    )
    with torch.no_grad():
        assert_close(
            f"torch RoPE[{layout}] attention of one token at position {pos}",
            torch_mod(tensor(x), is_causal=True, start_pos=pos),
            without(x, is_causal=True),
        )


SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
]  # fmt: skip


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["rope_type"])
def test_rope_scaling_is_transformers_and_the_same_in_both_twins(scaling):
    """The scaled frequencies of both twins agree (float64), and are those of
    transformers' rope utilities (computed there in float32)."""
    from numpy_impl.rope import check_rope_scaling, scale_frequencies
    from torch_impl.rope import scale_frequencies as torch_scale

    theta = 500000.0 ** (-np.arange(0, 64, 2, dtype=np.float64) / 64)
    ours = scale_frequencies(theta, check_rope_scaling(scaling))
    theirs_t = torch_scale(torch.from_numpy(theta), check_rope_scaling(scaling)).numpy()
    assert_close("rope frequencies, NumPy vs torch", ours, theirs_t, np.float64)
    hf = pytest.importorskip("transformers")
    from transformers import modeling_rope_utils as R

    config = hf.LlamaConfig(
        hidden_size=256, num_attention_heads=4, rope_parameters={**scaling, "rope_theta": 500000.0}
    )
    init = R.ROPE_INIT_FUNCTIONS[scaling["rope_type"]]
    theirs = init(config)[0].double().numpy()  # computed in float32: float32's tolerance
    assert_close("rope frequencies vs transformers", ours, theirs, np.float32)
