"""The encoder side: sinusoidal encoding, masked self-attention, encoder blocks, mean
pooling over real tokens, the classifier head and the TransformerClassifier of seed 004.

Every component: NumPy twin vs torch twin (same weights through the state dict,
same inputs, outputs and EVERY gradient under a random upstream gradient),
and each NumPy backward alone against central differences (float64). Shapes
are drawn by Hypothesis, T = 1 and odd sizes included; padding masks are drawn
with rows that are fully real, partly padded and entirely padding. Plus fixed
values: the sinusoid table, means over real tokens, an all-padding row (zeros,
zero gradients, never NaN), padding that changes nothing, and seed 004's
synthetic step (initial loss close to ln 2 in both backends).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import numpy_impl.encoder as NE
import torch_impl as T
import torch_impl.encoder as TE
from numpy_impl.loss import CrossEntropyLoss
from numpy_impl.optim import AdamW, configure_param_groups
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
    heads_and_width,
    lengths,
    rngs,
)
from parity_tests.tolerances import assert_close

FLOAT_DTYPES = [pytest.param(dt, id=np.dtype(dt).name) for dt in DTYPES]
IMPLS = ["explicit", "sdpa"]


# -- helpers shared with test_seq2seq.py -----------------------------------------------------
def padding_mask(rng: SeededRng, B: int, T: int, kind: str = "random") -> np.ndarray:
    """Bool ``(B, T)``, True = real token.

    ``"suffix"``: each row a random length 0..T of real tokens, then padding (row 0
    full, and with B > 1 the last row all padding). ``"random"``: anywhere, with
    row 0 full and, with B > 1, the last row all padding.
    """
    if kind == "suffix":
        n_real = rng.gen.integers(0, T + 1, B)
        mask = np.arange(T)[None, :] < n_real[:, None]
    else:
        mask = rng.mask((B, T), p_true=0.6)
    mask[0] = True
    if B > 1:
        mask[-1] = False
    return mask


def to_torch(value):
    """NumPy arrays -> tensors (a copy); anything else unchanged."""
    return torch.from_numpy(np.array(value, copy=True)) if isinstance(value, np.ndarray) else value


def as_tuple(grads) -> tuple:
    if grads is None:
        return ()
    return grads if isinstance(grads, tuple) else (grads,)


def forward_backward_parity(what, numpy_mod, torch_mod, floats: dict, extras: dict, dtype, rng):
    """Call both twins with the same keyword inputs; compare the output, then push a random
    ``dout`` back and compare the gradient of every float input (in ``floats``' order,
    the order of the NumPy ``backward``'s return value) and of every parameter.

    Returns the NumPy output.
    """
    floats_t = {k: tensor(v, requires_grad=True) for k, v in floats.items()}
    out_t = torch_mod(**floats_t, **{k: to_torch(v) for k, v in extras.items()})
    inputs = {k: v for k, v in {**floats, **extras}.items() if isinstance(v, np.ndarray)}
    before = {k: v.copy() for k, v in inputs.items()}
    out = numpy_mod(**floats, **extras)
    assert isinstance(out, np.ndarray) and out.dtype == np.dtype(dtype), (
        f"{what}: NumPy output of dtype {getattr(out, 'dtype', None)}, expected {dtype}"
    )
    assert_close(f"output of {what}", out, out_t, dtype)
    assert np.all(np.isfinite(out)), f"{what}: non-finite output"

    dout = rng.normal(out.shape, dtype)
    (out_t * tensor(dout)).sum().backward()
    numpy_mod.zero_grad()
    grads = as_tuple(numpy_mod.backward(dout.copy()))
    assert len(grads) == len(floats), f"{what}: backward returned {len(grads)} gradients"
    for (name, x_t), g in zip(floats_t.items(), grads, strict=True):
        assert np.all(np.isfinite(g)), f"d{name} of {what} has NaN/inf"
        assert_close(f"d{name} of {what}", g, x_t.grad, dtype)
    assert_param_grads_close(numpy_mod, torch_mod, dtype, what)
    for name, value in before.items():
        assert_unchanged(f"{name} given to {what}", value, inputs[name])
    return out


def finite_differences(what, numpy_mod, floats: dict, extras: dict, rng, n_coords: int = 4):
    """The NumPy backward alone against central differences: every float input, every
    parameter (``n_coords`` random coordinates each), float64."""
    out = numpy_mod(**floats, **extras)
    dout = rng.normal(out.shape)
    numpy_mod.zero_grad()
    grads = as_tuple(numpy_mod.backward(dout))

    def forward():
        return numpy_mod(**floats, **extras)

    for (name, x), g in zip(floats.items(), grads, strict=True):
        finite_difference_check(f"d{name} of {what}", forward, x, g, dout, rng, n_coords)
    for name, p in numpy_mod.named_parameters():
        grad = p.grad.copy()
        finite_difference_check(
            f"grad of {name} in {what}", forward, p.data, grad, dout, rng, n_coords
        )


def twins(numpy_cls, torch_cls, args: tuple, kwargs: dict, dtype, rng: SeededRng, impl=None):
    """Both twins built with the same arguments, the torch one randomised and copied across."""
    t_kwargs = dict(kwargs) if impl is None else {**kwargs, "attn_impl": impl}
    torch_mod = randomize_(torch_cls(*args, **t_kwargs, dtype=torch_dtype(dtype)), rng)
    numpy_mod = numpy_cls(*args, **kwargs, dtype=dtype)
    copy_weights(torch_mod, numpy_mod)
    return numpy_mod, torch_mod


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
def test_sinusoidal_fixed_values_and_seed_formula():
    """Position 0 is (0, 1, 0, 1, ...); position 1 starts sin 1, cos 1; the tutorial's
    exp/log form (its ``div_term``) gives the same table; float32 follows."""
    d = 8
    pe = N.SinusoidalPositionalEncoding(16, d, dtype=np.float64).pe
    np.testing.assert_array_equal(pe[0], np.tile([0.0, 1.0], d // 2))
    assert pe[1, 0] == pytest.approx(math.sin(1.0)) and pe[1, 1] == pytest.approx(math.cos(1.0))
    assert pe[3, 6] == pytest.approx(math.sin(3.0 / 10000 ** (6 / 8)))
    position = torch.arange(0, 16, dtype=torch.float64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).double() * (-math.log(10000.0) / d))
    seed = torch.zeros(16, d, dtype=torch.float64)
    seed[:, 0::2] = torch.sin(position * div_term)
    seed[:, 1::2] = torch.cos(position * div_term)
    assert_close("PE vs the tutorial's PositionalEncoding", pe, seed, np.float64)
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


# -- masked self-attention and the encoder block ------------------------------------------------
MASK_KINDS = ["none", "padding", "padding+causal", "bool", "float"]


def self_attention_mask(kind: str, rng: SeededRng, B, H, T_, dtype):
    """(attn_mask, is_causal) for SelfAttention.forward."""
    if kind == "none":
        return None, False
    if kind in ("padding", "padding+causal"):
        return N.key_padding_attn_mask(padding_mask(rng, B, T_)), kind.endswith("causal")
    if kind == "bool":
        return rng.mask((B, H, T_, T_), p_true=0.6), False
    mask = rng.uniform((B, 1, T_, T_), dtype)
    mask[rng.mask(mask.shape, p_true=0.3)] = -np.inf
    return mask, False


@pytest.mark.ch15
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, B=batch_sizes, T_=lengths, hc=heads_and_width(), bias=st.booleans())
def test_self_attention_parity(impl, kind, dtype, rng, B, T_, hc, bias):
    H, C = hc
    numpy_mod, torch_mod = twins(
        N.SelfAttention, T.SelfAttention, (C, H), {"bias": bias}, dtype, rng, impl
    )
    attn_mask, is_causal = self_attention_mask(kind, rng, B, H, T_, dtype)
    x = rng.uniform((B, T_, C), dtype, bound=2.0)
    forward_backward_parity(
        f"SelfAttention[{impl}, {kind}]",
        numpy_mod,
        torch_mod,
        {"x": x},
        {"attn_mask": attn_mask, "is_causal": is_causal},
        dtype,
        rng,
    )


@pytest.mark.ch15
@pytest.mark.parametrize("kind", MASK_KINDS)
@given(rng=rngs, B=batch_sizes, T_=lengths, hc=heads_and_width())
def test_self_attention_finite_differences(kind, rng, B, T_, hc):
    H, C = hc
    numpy_mod = randomize_(N.SelfAttention(C, H, dtype=np.float64), rng)
    attn_mask, is_causal = self_attention_mask(kind, rng, B, H, T_, np.float64)
    x = rng.uniform((B, T_, C), bound=2.0)
    extras = {"attn_mask": attn_mask, "is_causal": is_causal}
    finite_differences(f"SelfAttention[{kind}]", numpy_mod, {"x": x}, extras, rng)


block_configs = st.fixed_dictionaries(
    {
        "B": batch_sizes,
        "T": lengths,
        # d_model >= 4: see the Block entry of test_components.py (float32 conditioning)
        "hc": heads_and_width(min_width=4),
        "d_ff": st.one_of(st.none(), st.integers(1, 9)),
        "bias": st.booleans(),
        "gelu": st.sampled_from(["none", "tanh"]),
        "padding": st.sampled_from(["none", "suffix", "random"]),
    }
)


def block_inputs(c: dict, rng: SeededRng, dtype):
    B, T_, C = c["B"], c["T"], c["hc"][1]
    x = rng.uniform((B, T_, C), dtype, bound=2.0)
    mask = None if c["padding"] == "none" else padding_mask(rng, B, T_, c["padding"])
    return x, mask


@pytest.mark.ch15
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, c=block_configs, n_layers=st.integers(1, 2))
def test_encoder_parity(impl, dtype, rng, c, n_layers):
    """An encoder block (the GPT's Block with is_causal=False; float64, float32) and Encoder
    (blocks + ln_f; float64), with padding."""
    H, C = c["hc"]
    x, mask = block_inputs(c, rng, dtype)
    attn_mask = None if mask is None else N.key_padding_attn_mask(mask)
    kwargs = {"d_ff": c["d_ff"], "bias": c["bias"], "gelu_approximate": c["gelu"]}
    numpy_mod, torch_mod = twins(N.Block, T.Block, (C, H), kwargs, dtype, rng, impl)
    what = f"Block[{impl}, bidirectional, padding={c['padding']}]"
    extras = {"attn_mask": attn_mask, "is_causal": False}
    forward_backward_parity(what, numpy_mod, torch_mod, {"x": x}, extras, dtype, rng)
    if dtype != np.float64:
        return  # the stack in float64 only: test_seq2seq.test_decoder_parity says why
    numpy_mod, torch_mod = twins(NE.Encoder, TE.Encoder, (n_layers, C, H), kwargs, dtype, rng, impl)
    what = f"Encoder[{impl}, {n_layers} layers, padding={c['padding']}]"
    forward_backward_parity(
        what, numpy_mod, torch_mod, {"x": x}, {"attn_mask": attn_mask}, dtype, rng
    )


@pytest.mark.ch15
@given(rng=rngs, c=block_configs)
def test_encoder_block_finite_differences(rng, c):
    H, C = c["hc"]
    x, mask = block_inputs(c, rng, np.float64)
    attn_mask = None if mask is None else N.key_padding_attn_mask(mask)
    kwargs = {"d_ff": c["d_ff"], "bias": c["bias"], "gelu_approximate": c["gelu"]}
    numpy_mod = randomize_(N.Block(C, H, **kwargs, dtype=np.float64), rng)
    extras = {"attn_mask": attn_mask, "is_causal": False}
    finite_differences("Block[bidirectional]", numpy_mod, {"x": x}, extras, rng, 3)


# -- pooling and the head -------------------------------------------------------------------------
@pytest.mark.ch15
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, B=batch_sizes, T_=lengths, C=st.integers(1, 6), masked=st.booleans())
def test_mean_pool_parity(dtype, rng, B, T_, C, masked):
    mask = padding_mask(rng, B, T_, "random") if masked else None
    x = rng.uniform((B, T_, C), dtype)
    forward_backward_parity(
        f"MeanPool[masked={masked}]",
        N.MeanPool(),
        T.MeanPool(),
        {"x": x},
        {"token_mask": mask},
        dtype,
        rng,
    )


@pytest.mark.ch15
@given(rng=rngs, B=batch_sizes, T_=lengths, C=st.integers(1, 6))
def test_mean_pool_finite_differences(rng, B, T_, C):
    mask = padding_mask(rng, B, T_, "random")
    x = rng.uniform((B, T_, C))
    finite_differences("MeanPool", N.MeanPool(), {"x": x}, {"token_mask": mask}, rng)


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
    np.testing.assert_allclose(out, expected, rtol=1e-15)  # 1/3 is not exact in binary
    np.testing.assert_allclose(dx, expected_dx, rtol=1e-15)
    np.testing.assert_array_equal(out[2], 0.0)  # exactly zero, not NaN
    np.testing.assert_array_equal(dx[2], 0.0)


@pytest.mark.ch15
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@given(rng=rngs, B=batch_sizes, C=st.integers(1, 8), hidden=st.integers(1, 6), n=st.integers(1, 5))
def test_classifier_head_parity(dtype, rng, B, C, hidden, n):
    numpy_mod, torch_mod = twins(
        NE.ClassifierHead, TE.ClassifierHead, (C, hidden, n), {}, dtype, rng
    )
    x = rng.uniform((B, C), dtype, bound=2.0)
    forward_backward_parity("ClassifierHead", numpy_mod, torch_mod, {"x": x}, {}, dtype, rng)
    finite = NE.ClassifierHead(C, hidden, n, dtype=np.float64)
    randomize_(finite, rng)
    finite_differences("ClassifierHead", finite, {"x": rng.uniform((B, C), bound=2.0)}, {}, rng)


# -- the whole classifier -----------------------------------------------------------------------
def classifier_configs(min_width: int = 2) -> st.SearchStrategy:
    """d_model >= 4 for finite differences (see test_seq2seq.model_configs)."""
    return st.fixed_dictionaries(
        {
            "B": batch_sizes,
            "T": lengths,
            "vocab_size": st.integers(2, 20),
            "num_classes": st.integers(1, 4),
            "n_layers": st.integers(1, 2),
            "hc": heads_and_width(min_width=min_width),
            "d_ff": st.one_of(st.none(), st.integers(1, 9)),
            "bias": st.booleans(),
            "padding": st.sampled_from(["none", "suffix", "random"]),
        }
    )


def classifier_kwargs(c: dict) -> dict:
    H, C = c["hc"]
    return {
        "block_size": 9,
        "n_layers": c["n_layers"],
        "n_heads": H,
        "d_model": C,
        "d_ff": c["d_ff"],
        "dropout": 0.0,
        "bias": c["bias"],
    }


def classifier_inputs(c: dict, rng: SeededRng) -> dict:
    idx = rng.ids(c["vocab_size"], (c["B"], c["T"]))
    mask = None if c["padding"] == "none" else padding_mask(rng, c["B"], c["T"], c["padding"])
    return {"idx": idx, "token_mask": mask}


@pytest.mark.ch15
@pytest.mark.parametrize("impl", IMPLS)
@given(rng=rngs, c=classifier_configs())
def test_transformer_classifier_parity(impl, rng, c):
    """Logits and every parameter gradient (float64), with padding and all-padding rows."""
    args = (c["vocab_size"], c["num_classes"])
    numpy_mod, torch_mod = twins(
        N.TransformerClassifier,
        T.TransformerClassifier,
        args,
        classifier_kwargs(c),
        np.float64,
        rng,
        impl,
    )
    inputs = classifier_inputs(c, rng)
    what = f"TransformerClassifier[{impl}, padding={c['padding']}]"
    logits = forward_backward_parity(what, numpy_mod, torch_mod, {}, inputs, np.float64, rng)
    assert logits.shape == (c["B"], c["num_classes"])


@pytest.mark.ch15
@given(rng=rngs, c=classifier_configs(min_width=4))
def test_transformer_classifier_finite_differences(rng, c):
    args = (c["vocab_size"], c["num_classes"])
    numpy_mod = N.TransformerClassifier(*args, **classifier_kwargs(c), dtype=np.float64)
    randomize_(numpy_mod, rng)
    finite_differences("TransformerClassifier", numpy_mod, {}, classifier_inputs(c, rng), rng, 2)


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
        N.TransformerClassifier, T.TransformerClassifier, (11, 3), kwargs, np.float64, rng
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
    assert_close(f"{backend}: padded sequence vs the sequence alone", batch[:1], alone, np.float64)
    assert np.all(np.isfinite(batch[1])), f"{backend}: all-padding row gave {batch[1]}"


@pytest.mark.ch15
def test_seed_004_synthetic_step_in_both_backends():
    """Seed 004's end-to-end check: vocab 10000, 2 classes, batch 8, length 32, d_model
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
        "seed 004 logits, NumPy vs torch (same weights)", model_np2(tokens), logits_t, np.float32
    )
