"""The whole GPT beyond the registry's parity properties.

The registry's ``GPT[...]`` entries (registry.py, run by test_components.py) check
logits, the loss and every parameter gradient, as llm.c's test_gpt2 does: tied
and untied LM head, both GELU forms, both torch attention implementations,
float64; and the NumPy backward of the whole model alone against central
differences. Here: dropout configured but switched off by eval mode, and the
example model of the source material (its GPTStyleModel, GPT-2-small-like sizes)
built in both backends with the parameter count its config implies.
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
    held_arrays,
    randomize_,
    tensor,
    torch_dtype,
)
from parity_tests.strategies import SeededRng, batch_sizes, gpt_configs, lengths, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch08

TIES = [pytest.param(True, id="tied"), pytest.param(False, id="untied")]


def build_gpts(config: dict, rng: SeededRng, dtype=np.float64, attn_impl="sdpa"):
    """A torch GPT with random weights and its NumPy twin holding the same ones."""
    torch_model = T.GPT(T.GPTConfig(**config), attn_impl=attn_impl, dtype=torch_dtype(dtype))
    randomize_(torch_model, rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=dtype)
    copy_weights(torch_model, numpy_model)
    return numpy_model, torch_model


@given(data=st.data(), rng=rngs, B=batch_sizes, T_=lengths, dropout=st.floats(0.1, 0.9))
def test_gpt_with_dropout_in_eval_mode(data, rng: SeededRng, B, T_, dropout):
    """Dropout configured but the models in eval mode: no randomness, same logits."""
    config = data.draw(gpt_configs(dropout=dropout), label="config")
    numpy_model, torch_model = build_gpts(config, rng)
    numpy_model.eval()
    torch_model.eval()
    idx = rng.ids(config["vocab_size"], (B, T_))
    assert_close(
        f"logits in eval mode, dropout={dropout:.2f}",
        numpy_model(idx),
        torch_model(torch.from_numpy(idx)),
        np.float64,
    )


# -- the source material's GPTStyleModel example -------------------------------------
GPTSTYLE_CONFIG = {
    "vocab_size": 50257,
    "d_model": 256,
    "n_heads": 8,
    "n_layers": 4,
    "block_size": 512,
}


def expected_parameter_count(vocab_size, d_model, n_layers, block_size, tie_weights, **_):
    """By formula, from the architecture (biases everywhere but the LM head)."""
    V, C, L = vocab_size, d_model, n_layers
    F = 4 * C  # d_ff default
    embeddings = V * C + block_size * C  # tok_emb, pos_emb
    layernorm = 2 * C  # weight, bias
    per_layer = (
        layernorm  # ln1
        + (C * 3 * C + 3 * C)  # attn.qkv_proj
        + (C * C + C)  # attn.out_proj
        + layernorm  # ln2
        + (C * F + F)  # ffn.fc1
        + (F * C + C)  # ffn.fc2
    )
    head = 0 if tie_weights else V * C  # tied: the embedding matrix, counted once
    return embeddings + L * per_layer + layernorm + head


def test_gptstylemodel_parameter_count_formula():
    """The formula itself, against hand-computed numbers for the GPTStyleModel example."""
    tied = expected_parameter_count(**GPTSTYLE_CONFIG, tie_weights=True)
    assert tied == 50257 * 256 + 512 * 256 + 4 * (12 * 256 * 256 + 13 * 256) + 2 * 256
    assert tied == 16_156_416
    assert expected_parameter_count(**GPTSTYLE_CONFIG, tie_weights=False) == tied + 50257 * 256


@pytest.mark.parametrize("tie", TIES)
def test_gptstylemodel_builds_with_the_implied_parameter_count(tie):
    expected = expected_parameter_count(**GPTSTYLE_CONFIG, tie_weights=tie)
    config = {**GPTSTYLE_CONFIG, "tie_weights": tie}
    torch_model = T.GPT(T.GPTConfig(**config), dtype=torch.float32)
    numpy_model = N.GPT(N.GPTConfig(**config), seed=0, dtype=np.float32)
    assert torch_model.num_parameters() == expected
    assert sum(p.numel() for p in torch_model.parameters()) == expected
    assert numpy_model.num_parameters() == expected


@torch.no_grad()
def test_gptstylemodel_maps_ids_to_logits():
    """vocab 50257, d_model 256, 8 heads, 4 layers, block 512: a (2, 64) batch of ids
    gives (2, 64, 50257) logits, the same in both backends (float32, one forward each)."""
    rng = SeededRng(0)
    torch_model = T.GPT(T.GPTConfig(**GPTSTYLE_CONFIG), dtype=torch.float32)
    numpy_model = N.GPT(N.GPTConfig(**GPTSTYLE_CONFIG), dtype=np.float32)
    copy_weights(torch_model, numpy_model)
    idx = rng.ids(GPTSTYLE_CONFIG["vocab_size"], (2, 64))
    idx[0, 0], idx[1, -1] = 0, GPTSTYLE_CONFIG["vocab_size"] - 1  # both ends of the vocabulary
    logits_t = torch_model(tensor(idx))
    logits = numpy_model(idx)
    assert logits.shape == tuple(logits_t.shape) == (2, 64, 50257)
    assert logits.dtype == np.float32 and logits_t.dtype == torch.float32
    assert_close("logits of the GPTStyleModel example", logits, logits_t, np.float32)


@pytest.mark.parametrize(
    "variant",
    [
        {},
        {"pos_emb": "rope", "norm": "rmsnorm", "ffn": "swiglu", "bias": False},
        {"ffn": "relu", "norm_position": "post", "gelu_approximate": "none", "dropout": 0.1},
    ],
)
@pytest.mark.parametrize("attn_impl", ["explicit", "flash"])
def test_a_forward_under_no_grad_keeps_no_cache_and_gives_the_same_logits(variant, attn_impl):
    # evaluation and sampling (torch.no_grad's counterpart): each layer drops what its
    # backward would read as soon as it returns, and nothing else changes
    config = dict(vocab_size=11, block_size=16, n_layers=2, n_heads=2, d_model=8, **variant)
    model = N.GPT(N.GPTConfig(**config), seed=0, attn_impl=attn_impl, dtype=np.float64)
    for _, layer in model.named_modules():
        if hasattr(layer, "flash_tile"):
            layer.flash_tile = 4  # several tiles at T = 16
    model.eval()
    idx = np.random.default_rng(0).integers(0, 11, (3, 16))
    expected = model(idx)
    assert held_arrays(model), "the plain forward keeps its caches (the test's premise)"
    from numpy_impl.module import no_grad

    with no_grad():
        logits = model(idx)
    assert np.array_equal(logits, expected)
    assert held_arrays(model) == []
    model.backward(np.ones_like(model(idx)))  # a forward outside no_grad: backward works again


def test_no_grad_nests_and_restores_the_mode_after_an_error():
    from numpy_impl.module import is_grad_enabled, no_grad

    with pytest.raises(KeyError):
        with no_grad():
            with no_grad():
                assert not is_grad_enabled()
            assert not is_grad_enabled()
            raise KeyError("inside")
    assert is_grad_enabled()


def _layers_and_inputs():
    """(label, layer, forward, backward) for every layer with a ``_caches`` list."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 8))
    ids = rng.integers(0, 11, (2, 5))
    q = rng.standard_normal((2, 2, 5, 4))
    kw = dict(dtype=np.float64)
    ones = np.ones_like
    cases = [
        ("Linear", N.Linear(8, 4, **kw), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("LayerNorm", N.LayerNorm(8, **kw), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("RMSNorm", N.RMSNorm(8, **kw), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("GELU tanh", N.GELU(), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("GELU none", N.GELU("none"), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("ReLU", N.ReLU(), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("SiLU", N.SiLU(), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("Dropout", N.Dropout(0.5, seed=0), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("Dropout off", N.Dropout(0.0), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        (
            "SwiGLU",
            N.SwiGLUFeedForward(8, 16, **kw),
            lambda m: m(x),
            lambda m, y: m.backward(ones(y)),
        ),
        (
            "SelfAttention",
            N.SelfAttention(8, 2, **kw),
            lambda m: m(x),
            lambda m, y: m.backward(ones(y)),
        ),
        ("MeanPool", N.MeanPool(), lambda m: m(x), lambda m, y: m.backward(ones(y))),
        ("Embedding", N.Embedding(11, 8, **kw), lambda m: m(ids), lambda m, y: m.backward(ones(y))),
        (
            "LearnedPositionalEmbedding",
            N.LearnedPositionalEmbedding(16, 8, **kw),
            lambda m: m(5),
            lambda m, y: m.backward(ones(y)),
        ),
        ("RotaryEmbedding", N.RotaryEmbedding(4), lambda m: m(q, q), lambda m, y: m.backward(*y)),
        (
            "CrossEntropyLoss",
            N.CrossEntropyLoss(),
            lambda m: m(x, ids % 8),
            lambda m, y: m.backward(),
        ),
    ]
    return cases


@pytest.mark.parametrize("case", _layers_and_inputs(), ids=lambda c: c[0])
def test_a_backward_after_a_no_grad_forward_says_why_it_cannot_run(case):
    # as torch refuses to differentiate a torch.no_grad result: a RuntimeError naming
    # no_grad, never a TypeError about None, and never a silent gradient (Dropout's mask)
    from numpy_impl.module import no_grad

    _, layer, forward, backward = case
    assert layer._caches, "every layer listed here keeps caches"
    layer.train()
    with no_grad():
        out = forward(layer)
    with pytest.raises(RuntimeError, match=r"no_grad\(\)"):
        backward(layer, out)
    backward(layer, forward(layer))  # a forward outside no_grad: backward works again


def test_a_model_after_a_no_grad_forward_copies_and_refuses_backward():
    import copy
    import pickle

    from numpy_impl.module import no_grad

    model = N.GPT(N.GPTConfig(vocab_size=11, block_size=16, n_layers=1, n_heads=2, d_model=8))
    idx = np.zeros((1, 4), dtype=np.int64)
    with no_grad():
        logits = model(idx)
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        with pytest.raises(RuntimeError, match=r"no_grad\(\)"):
            clone.backward(np.ones_like(logits))
        clone.backward(np.ones_like(clone(idx)))
