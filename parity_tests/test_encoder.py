"""The encoder side beyond the registry's parity properties: the sinusoidal encoding, mean
pooling over real tokens, and the TransformerClassifier of the tutorial ("Getting Started
with Transformers in PyTorch").

Every component (masked self-attention, encoder blocks, the Encoder, MeanPool, the
classifier head, the TransformerClassifier, the sinusoidal table): NumPy twin vs torch
twin and the NumPy backward against central differences are the registry's entries
(registry.py, run by test_components.py). Here: the sinusoid table's formula and
fixed values, means over real tokens, an all-padding row (zeros, zero gradients,
never NaN), padding that changes nothing, and the tutorial's synthetic step
(initial loss close to ln 2 in both backends).
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
from numpy_impl.loss import CrossEntropyLoss
from numpy_impl.optim import AdamW, configure_param_groups
from parity_tests import hints as H
from parity_tests.harness import copy_weights, tensor, twins
from parity_tests.strategies import rngs
from parity_tests.tolerances import assert_close


# -- the sinusoidal encoding (chapter 13) ------------------------------------------------------
@pytest.mark.ch13
@given(block_size=st.integers(1, 40), d_model=st.integers(1, 17))
def test_sinusoidal_encoding_parity_and_formula(block_size, d_model):
    """Both twins give the table of Vaswani et al. 2017, sec. 3.5, element by element,
    odd d_model included; it is a buffer, in no state dict, with no gradient."""
    enc_np = N.SinusoidalPositionalEncoding(block_size, d_model, dtype=np.float64)
    enc_t = T.SinusoidalPositionalEncoding(block_size, d_model, dtype=torch.float64)
    expected = np.array(
        [
            [
                math.sin(p / 10000 ** (i / d_model))
                if i % 2 == 0
                else math.cos(p / 10000 ** ((i - 1) / d_model))
                for i in range(d_model)
            ]
            for p in range(block_size)
        ]
    )
    for T_ in sorted({1, block_size, (block_size + 1) // 2}):
        got = enc_np(T_)
        assert got.shape == (T_, d_model) and got.dtype == np.float64
        assert_close(f"NumPy PE[:{T_}] vs the formula", got, expected[:T_], np.float64)
        assert_close(f"NumPy vs torch PE[:{T_}]", got, enc_t(T_), np.float64)
    assert enc_np.backward(np.ones((block_size, d_model))) is None
    assert list(enc_np.named_parameters()) == [] and enc_np.state_dict() == {}
    assert list(enc_t.parameters()) == [] and dict(enc_t.state_dict()) == {}
    assert dict(enc_t.named_buffers())["pe"].shape == (block_size, d_model)
    assert not enc_t(1).requires_grad


@pytest.mark.ch13
def test_sinusoidal_fixed_values_and_the_tutorials_formula():
    """Position 0 is (0, 1, 0, 1, ...); position 1 starts sin 1, cos 1; the tutorial's
    exp/log form (its ``div_term``) gives the same table; float32 follows."""
    d = 8
    pe = N.SinusoidalPositionalEncoding(16, d, dtype=np.float64).pe
    np.testing.assert_array_equal(pe[0], np.tile([0.0, 1.0], d // 2))
    assert pe[1, 0] == pytest.approx(math.sin(1.0)) and pe[1, 1] == pytest.approx(math.cos(1.0))
    assert pe[3, 6] == pytest.approx(math.sin(3.0 / 10000 ** (6 / 8)))
    position = torch.arange(0, 16, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).double() * (-math.log(10000.0) / d))
    tutorial = torch.zeros(16, d, dtype=torch.float64)
    tutorial[:, 0::2] = torch.sin(position * div_term)
    tutorial[:, 1::2] = torch.cos(position * div_term)
    assert_close("PE vs the tutorial's PositionalEncoding", pe, tutorial, np.float64)
    enc32 = N.SinusoidalPositionalEncoding(16, d)  # float32 by default, like the models
    assert enc32(4).dtype == np.float32
    assert T.SinusoidalPositionalEncoding(16, d)(4).dtype == torch.float32
    assert enc32.astype(np.float64)(4).dtype == np.float64


@pytest.mark.ch13
@given(k=st.integers(0, 30), d_model=st.sampled_from([2, 6, 16]))
def test_sinusoidal_shift_is_a_rotation(k, d_model):
    """PE[pos + k] = R_k PE[pos] for every pos, with R_k a fixed rotation per (sin, cos)
    pair (angle k * frequency): the property Vaswani et al. give for choosing it."""
    pe = N.SinusoidalPositionalEncoding(64, d_model, dtype=np.float64).pe
    freq = 10000.0 ** (-np.arange(0, d_model, 2) / d_model)
    c, s = np.cos(k * freq), np.sin(k * freq)
    sin_, cos_ = pe[: 64 - k, 0::2], pe[: 64 - k, 1::2]
    shifted = np.empty_like(pe[: 64 - k])
    shifted[:, 0::2] = sin_ * c + cos_ * s  # sin(a + b)
    shifted[:, 1::2] = cos_ * c - sin_ * s  # cos(a + b)
    assert_close(f"R_{k} PE[pos] vs PE[pos + {k}]", shifted, pe[k:], np.float64)


# -- pooling ------------------------------------------------------------------------------------
@pytest.mark.ch15
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_mean_pool_fixed_values_and_all_padding_row(backend):
    """Row 0: mean of its 2 real tokens; row 1: all 3 real; row 2: no real token, so
    zeros (not 0/0 = NaN) and a zero gradient everywhere in it."""
    x = np.arange(2 * 3 * 3 * 1.0).reshape(3, 3, 2)  # (B=3, T=3, C=2)
    mask = np.array([[True, False, True], [True, True, True], [False, False, False]])
    expected = np.array([[(0 + 4) / 2, (1 + 5) / 2], [8.0, 9.0], [0.0, 0.0]])
    dout = np.array([[1.0, 2.0], [3.0, 6.0], [5.0, 7.0]])
    expected_dx = np.zeros_like(x)
    expected_dx[0, [0, 2]] = dout[0] / 2
    expected_dx[1] = dout[1] / 3
    if backend == "numpy":
        pool = N.MeanPool()
        out = pool(x, mask)
        dx = pool.backward(dout)
    else:
        x_t = tensor(x, requires_grad=True)
        out_t = T.MeanPool()(x_t, torch.from_numpy(mask))
        (out_t * tensor(dout)).sum().backward()
        out, dx = out_t.detach().numpy(), x_t.grad.numpy()
    assert np.all(np.isfinite(out)), (
        f"{backend}: the all-padding row gave {out[2]}: 0 / 0; divide by max(n, 1), so that "
        "a row of nothing but padding pools to 0"
    )
    np.testing.assert_allclose(out, expected, rtol=1e-15)  # 1/3 is not exact in binary
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-15)
    np.testing.assert_array_equal(out[2], 0.0)  # exactly zero, not NaN
    np.testing.assert_array_equal(dx[2], 0.0)


# -- the whole classifier -----------------------------------------------------------------------
@pytest.mark.ch15
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@given(rng=rngs, T_=st.integers(1, 6), extra=st.integers(1, 3))
def test_padding_changes_nothing(backend, rng, T_, extra):
    """A sequence padded with `extra` arbitrary tokens, masked, gets the logits it gets
    alone; a row of nothing but padding gets finite logits (the head's bias path)."""
    kwargs = {
        "block_size": 9,
        "n_layers": 2,
        "n_heads": 2,
        "d_model": 8,
        "d_ff": 12,
        "dropout": 0.0,
    }
    numpy_mod, torch_mod = twins(
        N.TransformerClassifier, T.TransformerClassifier, 11, 3, rng=rng, **kwargs
    )
    idx = rng.ids(11, (1, T_))
    padded = np.concatenate([idx, rng.ids(11, (1, extra))], axis=1)
    both = np.concatenate([padded, rng.ids(11, (1, T_ + extra))])  # row 1: all padding
    mask = np.zeros((2, T_ + extra), dtype=bool)
    mask[0, :T_] = True
    if backend == "numpy":
        alone, batch = numpy_mod(idx), numpy_mod(both, mask)
    else:
        alone = torch_mod(torch.from_numpy(idx)).detach().numpy()
        batch = torch_mod(torch.from_numpy(both), torch.from_numpy(mask)).detach().numpy()
    hints = None
    if backend == "numpy":
        hints = {
            H.PADDED_QUERIES_MASKED: lambda: H.classifier_queries_masked(numpy_mod, both, mask)[:1]
        }
    assert_close(
        f"{backend}: padded sequence vs the sequence alone",
        batch[:1],
        alone,
        np.float64,
        hints=hints,
    )
    assert np.all(np.isfinite(batch[1])), f"{backend}: all-padding row gave {batch[1]}"


@pytest.mark.ch15
def test_the_tutorials_synthetic_step_in_both_backends():
    """The tutorial's end-to-end check: vocab 10000, 2 classes, batch 8, length 32, d_model
    128, 4 heads, 2 layers (d_ff 512, dropout 0.1): forward, cross-entropy, backward
    and one AdamW step (lr 1e-3, weight decay 1e-2) in each backend. The initial loss
    is close to ln 2 (the logits start near 0), and with the same weights the two
    backends' losses agree (float32, eval mode so dropout draws no random masks)."""
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 10000, (8, 32))
    labels = rng.integers(0, 2, 8)
    kwargs = {"d_model": 128, "n_heads": 4, "n_layers": 2}

    torch.manual_seed(0)
    model_t = T.TransformerClassifier(10000, 2, **kwargs)
    optimizer = torch.optim.AdamW(model_t.parameters(), lr=1e-3, weight_decay=1e-2)
    optimizer.zero_grad()
    loss_t = torch.nn.functional.cross_entropy(
        model_t(torch.from_numpy(tokens)), torch.from_numpy(labels)
    )
    loss_t.backward()
    optimizer.step()

    model_np = N.TransformerClassifier(10000, 2, **kwargs, seed=0)
    loss_fn = CrossEntropyLoss()
    opt_np = AdamW(configure_param_groups(model_np, 1e-2), lr=1e-3, weight_decay=1e-2)
    opt_np.zero_grad()
    logits = model_np(tokens)
    loss_np = loss_fn(logits, labels)
    model_np.backward(loss_fn.backward())
    before = model_np.tok_emb.weight.data.copy()
    opt_np.step()

    assert logits.shape == (8, 2)
    for name, loss in (("numpy", loss_np), ("torch", loss_t.item())):
        assert abs(loss - math.log(2)) < 0.05, f"{name}: initial loss {loss:.4f}, ln 2 = 0.6931"
    assert not np.array_equal(before, model_np.tok_emb.weight.data), "AdamW did not move"

    model_np2 = N.TransformerClassifier(10000, 2, **kwargs)
    torch.manual_seed(0)
    model_t2 = T.TransformerClassifier(10000, 2, **kwargs)
    copy_weights(model_t2, model_np2)
    model_np2.eval(), model_t2.eval()
    with torch.no_grad():
        logits_t = model_t2(torch.from_numpy(tokens))
    assert_close(
        "the tutorial's logits, NumPy vs torch (same weights)",
        model_np2(tokens),
        logits_t,
        np.float32,
    )
