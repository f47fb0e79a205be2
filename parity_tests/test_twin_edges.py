"""The twins at the edges: tiny temperatures, ties, dtypes and integer widths.

* Sampling: any positive temperature gives finite probabilities (the largest logit is
  shifted to 0 before the division; a temperature below the dtype's smallest normal
  number is taken as that number), so a tiny one draws the greedy token, in both
  backends, from the same uniform numbers. Non-finite logits are refused.
* Ties, one rule in both backends: greedy decoding takes the lowest id among tied
  logits (the first maximum); top-k keeps every token tied with the k-th; the top-p
  boundary falls between tied tokens in id order (a stable sort), so the lower id is
  kept; a tied draw at a tiny temperature splits the mass equally.
* Dtypes: a layer's input must be floating and of its parameters' dtype (TypeError
  naming ``x`` in both, where NumPy used to cast silently and PyTorch to raise its
  own RuntimeError), swept over the layers; ids and targets of every integer width
  are accepted. The single cases (a 0-d or integer logits, a uint64 target of 2**63,
  a NaN or infinite temperature) are rows of test_bad_inputs.py.
* ``torch_impl.flash_attention``: a query whose keys are all masked gives zeros and
  finite gradients, as the NumPy twin.
* Masks of rank below 2 (``(T_k,)``, 0-d) broadcast, and ``is_causal`` may be a NumPy
  bool, in the NumPy twin, the explicit torch path and the fused kernel alike.

No chapter marker: the chapters' own tests are in test_sampling.py and friends; these
are the corners a learner's first solution need not handle.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import numpy_impl as N
import numpy_impl.sampling as NS
import torch_impl as T
import torch_impl.sampling as TS
from parity_tests.harness import copy_weights, tensor
from parity_tests.test_sampling import FixedLogits

CFG = {"vocab_size": 11, "block_size": 6, "n_layers": 1, "n_heads": 2, "d_model": 8}


def twins(dtype=np.float64):
    torch_model = T.GPT(T.GPTConfig(**CFG), dtype=getattr(torch, np.dtype(dtype).name))
    numpy_model = N.GPT(N.GPTConfig(**CFG), dtype=dtype)
    copy_weights(torch_model, numpy_model)
    return numpy_model, torch_model


def both(logits: np.ndarray, n: int, uniforms=None, **settings) -> tuple[np.ndarray, np.ndarray]:
    """The tokens each backend draws after a 1-token prompt from fixed ``logits``."""
    prompt = np.zeros((logits.shape[0], 1), np.int64)
    rows = logits[:, None, :]  # (B, 1, V): row b's logits for every position of sequence b
    a = NS.generate(FixedLogits(rows, "numpy"), prompt, n, uniforms=uniforms, **settings)
    b = TS.generate(FixedLogits(rows, "torch"), tensor(prompt), n, uniforms=uniforms, **settings)
    return a[:, 1:], b.numpy()[:, 1:]


# -- tiny temperatures ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("temperature", [1e-40, 5e-324, 1e-300, 1e-30, 1e-8])
def test_a_tiny_temperature_samples_the_greedy_tokens(temperature, dtype):
    numpy_model, torch_model = twins(dtype)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    greedy = NS.generate(numpy_model, prompt, 8, temperature=0.0)
    u = np.random.default_rng(0).random((8, 2))
    for name, out in (
        ("NumPy", NS.generate(numpy_model, prompt, 8, temperature, uniforms=u)),
        ("torch", T.generate(torch_model, tensor(prompt), 8, temperature, uniforms=u).numpy()),
        ("torch multinomial", T.generate(torch_model, tensor(prompt), 8, temperature).numpy()),
    ):
        np.testing.assert_array_equal(out, greedy, err_msg=f"{name}, temperature {temperature}")


@pytest.mark.parametrize("poison", [np.nan, np.inf])
def test_non_finite_logits_are_refused_not_sampled(poison):
    """A NaN row used to draw id 0 (NumPy) or raise inside torch.multinomial."""
    logits = np.array([[0.0, poison, 1.0]])
    prompt = np.zeros((1, 1), np.int64)
    for temperature in (0.0, 1.0):
        with pytest.raises(ValueError, match=r"^logits: .* NaN or infinity"):
            NS.generate(FixedLogits(logits, "numpy"), prompt, 1, temperature)
        with pytest.raises(ValueError, match=r"^logits: .* NaN or infinity"):
            TS.generate(FixedLogits(logits, "torch"), tensor(prompt), 1, temperature)


def test_max_new_tokens_may_be_a_numpy_integer():
    logits = np.array([[0.0, 2.0, 1.0]])
    a, b = both(logits, np.int64(3), temperature=0.0)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (1, 3)


# -- ties ---------------------------------------------------------------------------------------
def test_greedy_ties_take_the_lowest_id_in_both():
    logits = np.array([[0.0, 3.0, 1.0, 3.0, 3.0], [5.0, 5.0, 5.0, 5.0, 5.0]])
    a, b = both(logits, 2, temperature=0.0)
    np.testing.assert_array_equal(a, [[1, 1], [0, 0]])
    np.testing.assert_array_equal(b, a)


def test_tied_draws_at_a_tiny_temperature_split_the_mass_equally():
    """Tokens 1 and 3 tie for the largest logit: u < 1/2 draws 1, u >= 1/2 draws 3."""
    logits = np.array([[0.0, 3.0, 1.0, 3.0]])
    u = np.array([[0.0], [0.49], [0.5], [0.99]])
    a, b = both(logits, 4, uniforms=u, temperature=1e-30)
    np.testing.assert_array_equal(a, [[1, 1, 3, 3]])
    np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("order", [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]])
def test_the_top_p_boundary_between_tied_tokens_keeps_the_lower_id(order):
    """Probabilities 0.4, 0.2, 0.2, 0.2 and top_p 0.5: the top token (0.4) and one of the
    three tied tokens reach it; the kept one is the tied token with the lowest id."""
    probs = np.array([0.4, 0.2, 0.2, 0.2])[order]
    logits = np.log(probs)[None, :]
    tied = sorted(i for i, p in enumerate(probs) if p == 0.2)
    expected = {int(np.argmax(probs)), tied[0]}
    for side, out in (
        ("NumPy", NS.filter_logits(logits, top_p=0.5)),
        ("torch", T.filter_logits(tensor(logits), top_p=0.5).numpy()),
    ):
        assert set(np.flatnonzero(~np.isneginf(out[0]))) == expected, side


def test_top_k_keeps_every_token_tied_with_the_kth_in_both():
    logits = np.array([[1.0, 2.0, 2.0, 2.0, 0.0]])
    for side, out in (
        ("NumPy", NS.filter_logits(logits, top_k=2)),
        ("torch", T.filter_logits(tensor(logits), top_k=2).numpy()),
    ):
        assert list(np.flatnonzero(~np.isneginf(out[0]))) == [1, 2, 3], side


# -- dtypes and integer widths -----------------------------------------------------------------
LAYERS = {
    "Linear": (
        lambda: N.Linear(8, 4, dtype=np.float64), lambda: T.Linear(8, 4, dtype=torch.float64)
    ),
    "LayerNorm": (
        lambda: N.LayerNorm(8, dtype=np.float64), lambda: T.LayerNorm(8, dtype=torch.float64)
    ),
    "RMSNorm": (lambda: N.RMSNorm(8, dtype=np.float64), lambda: T.RMSNorm(8, dtype=torch.float64)),
    "FeedForward": (
        lambda: N.FeedForward(8, dtype=np.float64), lambda: T.FeedForward(8, dtype=torch.float64)
    ),
    "SelfAttention": (
        lambda: N.SelfAttention(8, 2, dtype=np.float64),
        lambda: T.SelfAttention(8, 2, dtype=torch.float64),
    ),
    "Block": (lambda: N.Block(8, 2, dtype=np.float64), lambda: T.Block(8, 2, dtype=torch.float64)),
    "GELU": (lambda: N.GELU(), lambda: T.GELU()),
    "ReLU": (lambda: N.ReLU(), lambda: T.ReLU()),
    "SiLU": (lambda: N.SiLU(), lambda: T.SiLU()),
    "Dropout": (lambda: N.Dropout(0.1), lambda: T.Dropout(0.1)),
    "MeanPool": (lambda: N.MeanPool(), lambda: T.MeanPool()),
}  # fmt: skip
PARAMETER_FREE = {"GELU", "ReLU", "SiLU", "Dropout", "MeanPool"}


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool", "float16", "float32"])
def test_a_layer_refuses_an_input_it_would_cast(layer, dtype):
    """Integers and bools are refused everywhere; a float of another width than the
    parameters' is refused by the layers that have parameters (the others keep it)."""
    x = (np.arange(2 * 3 * 8) % 3).reshape(2, 3, 8).astype(dtype)
    make_numpy, make_torch = LAYERS[layer]
    floating = np.issubdtype(x.dtype, np.floating)
    if floating and layer in PARAMETER_FREE:
        assert make_numpy()(x).dtype == x.dtype
        assert make_torch()(tensor(x)).dtype == getattr(torch, dtype)
        return
    match = r"^x: expected a floating-point" if not floating else r"^x: dtype .* differs"
    with pytest.raises(TypeError, match=match):
        make_numpy()(x)
    with pytest.raises(TypeError, match=match):
        make_torch()(tensor(x))


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int16", "uint16", "int32", "uint32", "int64"])
def test_ids_and_targets_of_any_integer_width_are_accepted(dtype):
    numpy_model, torch_model = twins()
    ids = np.array([[1, 2, 3]], dtype=dtype)
    np.testing.assert_allclose(numpy_model(ids), torch_model(tensor(ids)).detach().numpy())
    logits = np.zeros((1, 3, 11))
    assert N.CrossEntropyLoss()(logits, ids) == pytest.approx(
        float(T.CrossEntropyLoss()(tensor(logits), tensor(ids)))
    )


# -- flash attention's masks ------------------------------------------------------------------
def test_torch_flash_attention_gives_zeros_for_a_query_that_sees_no_key():
    """It once handed the mask to F.scaled_dot_product_attention as is: NaN rows."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    mask = np.ones((5, 5), dtype=bool)
    mask[[1, 3]] = False  # queries 1 and 3 see nothing
    tq, tk, tv = (tensor(a, requires_grad=True) for a in (q, k, v))
    out = T.flash_attention(tq, tk, tv, attn_mask=torch.from_numpy(mask), tile_q=2, tile_k=2)
    out.backward(torch.ones_like(out))
    ref, _ = N.flash_attention(q, k, v, attn_mask=mask, tile_q=2, tile_k=2)
    assert torch.all(out[:, :, [1, 3]] == 0.0)
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-12)
    assert all(bool(torch.isfinite(t.grad).all()) for t in (tq, tk, tv))
    assert torch.all(tq.grad[:, :, [1, 3]] == 0.0)


# -- masks and is_causal of any rank or NumPy type --------------------------------------------
@pytest.mark.parametrize(
    "mask",
    [np.array([True, False, True]), np.array(True), np.array([0.0, -np.inf, 0.5])],
    ids=["1-D bool (T_k,)", "0-d bool", "1-D float (T_k,)"],
)
@pytest.mark.parametrize("is_causal", [False, np.bool_(True)])
def test_a_mask_of_rank_below_2_broadcasts_in_every_attention(mask, is_causal):
    """A ``(T_k,)`` or 0-d mask broadcasts to ``(B, H, T_q, T_k)``, and ``is_causal`` may be
    a NumPy bool: the NumPy twin, the explicit torch path and the fused kernel (which once
    raised IndexError, or TypeError for the NumPy bool) give the same output."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 3, 4)) for _ in range(3))
    expected, _ = N.scaled_dot_product_attention(q, k, v, mask, is_causal)
    for impl in ("sdpa", "explicit"):
        out = T.scaled_dot_product_attention(
            tensor(q), tensor(k), tensor(v), tensor(mask), is_causal, impl=impl
        )
        np.testing.assert_allclose(out.numpy(), expected, atol=1e-12, err_msg=impl)
    x = rng.standard_normal((2, 3, 8))
    numpy_layer = N.SelfAttention(8, 2, dtype=np.float64, rng=np.random.default_rng(1))
    expected = numpy_layer(x, attn_mask=mask, is_causal=is_causal)
    for impl in ("sdpa", "explicit"):
        torch_layer = T.SelfAttention(8, 2, attn_impl=impl, dtype=torch.float64)
        torch_layer.load_state_dict({n: tensor(a) for n, a in numpy_layer.state_dict().items()})
        out = torch_layer(tensor(x), attn_mask=tensor(mask), is_causal=is_causal)
        np.testing.assert_allclose(out.detach().numpy(), expected, atol=1e-12, err_msg=impl)
