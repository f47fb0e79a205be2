"""Chapter 14's pieces beyond the registry's parity properties (registry.py's entries, run by
test_components.py: RMSNorm, SiLU, SwiGLUFeedForward and the Block options, NumPy vs
torch, finite differences, accumulation).

* RMSNorm against a third witness, ``torch.nn.RMSNorm`` (torch >= 2.4), and what it
  does: unit root mean square, no centring, invariance to the input's scale;
* SiLU far in its tails, without overflow warnings;
* SwiGLU's hidden width: Llama's rounding rule (d_model 4096 -> 11008), and the
  parameter count it was chosen for;
* the post-norm block: its output rows are normalised (the pre-norm block's are not).
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
from labs.plumbing.checkpoint_format import expected_shapes
from parity_tests.harness import copy_weights, randomize_, tensor
from parity_tests.strategies import DTYPES, SeededRng, batch_sizes, lengths, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch14
FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]


@pytest.mark.skipif(not hasattr(torch.nn, "RMSNorm"), reason="torch.nn.RMSNorm needs torch >= 2.4")
@given(rng=rngs, B=batch_sizes, T_=lengths, C=st.integers(2, 16), eps=st.sampled_from([1e-5, 1e-2]))
def test_rmsnorm_matches_torch_nn_rmsnorm(rng: SeededRng, B, T_, C, eps):
    """eps passed explicitly: nn.RMSNorm's default (None) is the dtype's machine epsilon."""
    ref = torch.nn.RMSNorm(C, eps=eps, dtype=torch.float64)
    ours = randomize_(N.RMSNorm(C, eps=eps, dtype=np.float64), rng)
    ref.load_state_dict({"weight": torch.from_numpy(ours.weight.data.copy())})
    x = rng.uniform((B, T_, C), bound=2.0)
    x_t = tensor(x, requires_grad=True)
    out_ref = ref(x_t)
    assert_close("NumPy RMSNorm vs torch.nn.RMSNorm", ours(x), out_ref)
    torch_ours = T.RMSNorm(C, eps=eps, dtype=torch.float64)
    torch_ours.load_state_dict(ref.state_dict())
    assert_close("torch_impl RMSNorm vs torch.nn.RMSNorm", torch_ours(tensor(x)), out_ref)
    dout = rng.normal(x.shape)
    (out_ref * tensor(dout)).sum().backward()
    ours.zero_grad()
    assert_close("NumPy RMSNorm dx vs torch.nn.RMSNorm's", ours.backward(dout), x_t.grad)
    assert_close("NumPy RMSNorm dweight vs torch.nn.RMSNorm's", ours.weight.grad, ref.weight.grad)


@given(rng=rngs, B=batch_sizes, C=st.integers(2, 16), scale=st.floats(0.5, 50.0))
def test_rmsnorm_rescales_without_centring(rng: SeededRng, B, C, scale):
    """Weight 1: every row comes out with root mean square ~1 (eps aside), its mean is
    not removed (a constant row stays constant, not zero), and scaling the input
    does not change the output."""
    norm = N.RMSNorm(C, eps=1e-12, dtype=np.float64)
    x = rng.uniform((B, C)) + 1.5  # rows well away from zero, with a mean of their own
    y = norm(x)
    assert_close("RMS of RMSNorm's rows", np.sqrt(np.mean(y**2, axis=-1)), np.ones(B))
    assert np.all(y.mean(axis=-1) > 0.5), "RMSNorm must not subtract the mean"
    assert_close("RMSNorm(scale * x) vs RMSNorm(x)", norm(scale * x), y)
    constant = np.full((1, C), 3.0)
    assert_close("RMSNorm of a constant row", norm(constant), np.ones((1, C)))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_silu_far_in_the_tails(dtype):
    """SiLU is 0 far left and x far right, forward and backward, with no overflow warnings."""
    x = np.array([-200.0, -100.0, -30.0, -10.0, 10.0, 30.0, 100.0, 200.0], dtype)
    x_t = tensor(x, requires_grad=True)
    out_t = T.SiLU()(x_t)
    out_t.sum().backward()
    silu = N.SiLU()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = silu(x)
        dx = silu.backward(np.ones_like(x))
    assert_close("SiLU far in the tails", out, out_t, dtype)
    assert_close("dx of SiLU far in the tails", dx, x_t.grad, dtype)


def test_swiglu_hidden_width_is_llamas_rule():
    # Llama 7B: dim 4096, multiple_of 256 -> 11008; ours by default rounds to 8
    for module in (N, T):
        assert module.swiglu_hidden_dim(4096, multiple_of=256) == 11008
        assert module.swiglu_hidden_dim(128) == 344  # int(341.33) = 341 -> 344
        assert module.swiglu_hidden_dim(12, multiple_of=1) == 32
    for C in range(1, 200):
        F = N.swiglu_hidden_dim(C)
        assert F == T.swiglu_hidden_dim(C) and F % 8 == 0 and F >= 8 * C / 3
        ffn = N.SwiGLUFeedForward(C)
        assert (ffn.w1.weight.shape, ffn.w2.weight.shape, ffn.w3.weight.shape) == (
            (F, C),
            (C, F),
            (F, C),
        )
        shapes = expected_shapes({"vocab_size": 5, "d_model": C, "n_heads": 1, "ffn": "swiglu"})
        assert shapes["blocks.0.ffn.w1.weight"] == (F, C), (
            "labs/plumbing/checkpoint_format.py disagrees"
        )
    # 2/3 * 4C is the width at which three matrices hold what the 4C MLP's two hold
    C = 384  # 2/3 * 4 * 384 = 1024 exactly
    assert 3 * C * N.swiglu_hidden_dim(C) == 2 * C * 4 * C


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@given(rng=rngs, B=batch_sizes, T_=lengths)
def test_post_norm_block_outputs_normalised_rows(norm, rng: SeededRng, B, T_):
    """Post-norm ends in ln2, so (norm weights 1, no bias) each output row has mean 0 and
    std 1 (LayerNorm) or root mean square 1 (RMSNorm). A pre-norm block's output is
    the raw residual stream, which is not normalised."""
    C, H = 16, 2
    x = 3.0 * rng.uniform((B, T_, C)) + 2.0
    post_t = T.Block(C, H, norm=norm, norm_position="post", bias=False, dtype=torch.float64)
    with torch.no_grad():
        post_t.attn.qkv_proj.weight.copy_(torch.from_numpy(rng.uniform((3 * C, C)) / 4.0))
    post = N.Block(C, H, norm=norm, norm_position="post", bias=False, dtype=np.float64)
    copy_weights(post_t, post)
    with torch.no_grad():
        outs = {"NumPy": post(x), "torch": post_t(tensor(x)).numpy()}
    # eps = 1e-5 inside the square root makes the spread 1 - O(eps / var), not exactly 1:
    # compared with the float32 tolerance (1e-4), which that leaves far behind
    for side, y in outs.items():
        if norm == "layernorm":
            assert_close(f"{side} post-norm row means", y.mean(-1), np.zeros((B, T_)))
            assert_close(f"{side} post-norm row stds", y.std(-1), np.ones((B, T_)), np.float32)
        else:
            rms = np.sqrt(np.mean(y**2, axis=-1))
            assert_close(f"{side} post-norm row RMS", rms, np.ones((B, T_)), np.float32)
    pre = N.Block(C, H, norm=norm, norm_position="pre", bias=False, dtype=np.float64)
    pre.load_state_dict(post.state_dict())
    assert not np.allclose(pre(x).std(-1), 1.0, atol=1e-2)
