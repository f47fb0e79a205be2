"""The whole GPT: logits, loss and every parameter gradient, as llm.c's test_gpt2 does.

Tied and untied LM head, both GELU forms, both torch attention implementations,
float64. Then the NumPy backward of the whole model alone against central
differences, and the seed example's model (GPT-2-small-like sizes) built in
both backends with the parameter count its config implies.
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
    assert_param_grads_close,
    copy_weights,
    finite_difference_check,
    randomize_,
    tensor,
    torch_dtype,
)
from parity_tests.strategies import SeededRng, batch_sizes, gpt_configs, lengths, rngs
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch08

TIES = [pytest.param(True, id="tied"), pytest.param(False, id="untied")]
GELUS = ["tanh", "none"]
IMPLS = ["explicit", "sdpa"]


def build_gpts(config: dict, rng: SeededRng, dtype=np.float64, attn_impl="sdpa"):
    """A torch GPT with random weights and its NumPy twin holding the same ones."""
    torch_model = T.GPT(T.GPTConfig(**config), attn_impl=attn_impl, dtype=torch_dtype(dtype))
    randomize_(torch_model, rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=dtype)
    copy_weights(torch_model, numpy_model)
    return numpy_model, torch_model


@pytest.mark.parametrize("attn_impl", IMPLS)
@pytest.mark.parametrize("gelu", GELUS)
@pytest.mark.parametrize("tie", TIES)
@given(data=st.data(), rng=rngs, B=batch_sizes, T_=lengths)
def test_gpt_logits_loss_and_every_gradient(tie, gelu, attn_impl, data, rng: SeededRng, B, T_):
    config = data.draw(gpt_configs(tie_weights=tie, gelu_approximate=gelu), label="config")
    numpy_model, torch_model = build_gpts(config, rng, attn_impl=attn_impl)
    if tie:
        assert numpy_model.head.weight is numpy_model.tok_emb.weight, "NumPy head is not tied"
        assert torch_model.head.weight is torch_model.tok_emb.weight, "torch head is not tied"
    what = f"GPT, {'tied' if tie else 'untied'}, gelu={gelu}, attn_impl={attn_impl}"
    idx = rng.ids(config["vocab_size"], (B, T_))
    targets = rng.ids(config["vocab_size"], (B, T_))
    targets[rng.mask((B, T_), p_true=0.2)] = -100  # some positions ignored

    logits = numpy_model(idx)
    logits_t = torch_model(torch.from_numpy(idx))
    assert_close(f"logits ({what})", logits, logits_t, np.float64)

    loss_fn = N.CrossEntropyLoss()
    loss = loss_fn(logits, targets)
    loss_t = T.CrossEntropyLoss()(logits_t, torch.from_numpy(targets))
    assert_close(f"loss ({what})", loss, loss_t, np.float64)

    loss_t.backward()
    numpy_model.zero_grad()
    assert numpy_model.backward(loss_fn.backward()) is None
    assert_param_grads_close(numpy_model, torch_model, np.float64, what)


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


@pytest.mark.parametrize("tie", TIES)
@given(data=st.data(), rng=rngs, B=st.integers(1, 2), T_=st.integers(1, 4))
def test_gpt_backward_finite_differences(tie, data, rng: SeededRng, B, T_):
    """The NumPy GPT's backward alone vs central differences (float64), 3 random
    coordinates of every parameter, a random dlogits. Worst relative error
    reached: ~1e-7, against FINITE_DIFF's 1e-6.

    d_model >= 4: with 2 features a LayerNorm row deep in the model can have a
    tiny spread; 1/std then makes the loss so curved that the O(h^2) error of
    the central difference itself exceeds 1e-6 (Hypothesis found a gradient of
    150 off by 2.6e-4 at h = 1e-6, and by 2e-6 at h = 1e-7: the backward was right).
    """
    config = data.draw(
        gpt_configs(
            min_width=4, tie_weights=tie, vocab_size=data.draw(st.integers(2, 12), label="V")
        ),
        label="config",
    )
    model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    randomize_(model, rng)
    idx = rng.ids(config["vocab_size"], (B, T_))
    logits = model(idx)
    dlogits = rng.normal(logits.shape)
    model.zero_grad()
    model.backward(dlogits)
    for name, p in model.named_parameters():
        finite_difference_check(
            f"grad of {name} (GPT)", lambda: model(idx), p.data, p.grad.copy(), dlogits, rng, 3
        )


# -- the seed example ---------------------------------------------------------------
SEED_CONFIG = {"vocab_size": 50257, "d_model": 256, "n_heads": 8, "n_layers": 4, "block_size": 512}


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


def test_seed_example_parameter_count_formula():
    """The formula itself, against hand-computed numbers for the seed config."""
    tied = expected_parameter_count(**SEED_CONFIG, tie_weights=True)
    assert tied == 50257 * 256 + 512 * 256 + 4 * (12 * 256 * 256 + 13 * 256) + 2 * 256
    assert tied == 16_156_416
    assert expected_parameter_count(**SEED_CONFIG, tie_weights=False) == tied + 50257 * 256


@pytest.mark.parametrize("tie", TIES)
def test_seed_example_builds_with_the_implied_parameter_count(tie):
    expected = expected_parameter_count(**SEED_CONFIG, tie_weights=tie)
    config = {**SEED_CONFIG, "tie_weights": tie}
    torch_model = T.GPT(T.GPTConfig(**config), dtype=torch.float32)
    numpy_model = N.GPT(N.GPTConfig(**config), seed=0, dtype=np.float32)
    assert torch_model.num_parameters() == expected
    assert sum(p.numel() for p in torch_model.parameters()) == expected
    assert numpy_model.num_parameters() == expected


@torch.no_grad()
def test_seed_example_maps_ids_to_logits():
    """vocab 50257, d_model 256, 8 heads, 4 layers, block 512: a (2, 64) batch of ids
    gives (2, 64, 50257) logits, the same in both backends (float32, one forward each)."""
    rng = SeededRng(0)
    torch_model = T.GPT(T.GPTConfig(**SEED_CONFIG), dtype=torch.float32)
    numpy_model = N.GPT(N.GPTConfig(**SEED_CONFIG), dtype=np.float32)
    copy_weights(torch_model, numpy_model)
    idx = rng.ids(SEED_CONFIG["vocab_size"], (2, 64))
    idx[0, 0], idx[1, -1] = 0, SEED_CONFIG["vocab_size"] - 1  # both ends of the vocabulary
    logits_t = torch_model(tensor(idx))
    logits = numpy_model(idx)
    assert logits.shape == tuple(logits_t.shape) == (2, 64, 50257)
    assert logits.dtype == np.float32 and logits_t.dtype == torch.float32
    assert_close("logits of the seed-example GPT", logits, logits_t, np.float32)
