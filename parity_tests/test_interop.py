"""Hugging Face interop: a GPT-2 from ``transformers`` and both backends give the same logits.

Models are built from small random ``GPT2Config`` objects (nothing is
downloaded), every weight randomised (LayerNorm gains and biases included, so
a swapped or untransposed tensor cannot hide), converted by ``labs/interop.py``
(GPT-2's Conv1D weights are stored ``(in, out)``: transposed there), loaded
into the NumPy and the PyTorch backend, and run on the same ids. Then the
other way: the project's weights exported into a fresh ``GPT2LMHeadModel``.

Tolerances (issue 7): float64 within FLOAT64 (1e-10 relative), float32 within
INTEROP_FLOAT32 (1e-5 of the logits' scale). Skipped without ``transformers``
(``pip install -e ".[interop]"``; the dev extra has it, so CI runs this).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labs.backends import make_backend
from labs.interop import from_gpt2, from_gpt2_config, gpt2_config, to_gpt2
from parity_tests.harness import randomize_
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import INTEROP_FLOAT32, assert_close

transformers = pytest.importorskip("transformers")

# No chapter marker: interop is plumbing (labs/interop.py), not an exercise.
SMALL = {  # odd sizes: 3 heads of 8, a vocabulary of 53, 2 layers
    "vocab_size": 53,
    "n_positions": 16,
    "n_embd": 24,
    "n_layer": 2,
    "n_head": 3,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
    "bos_token_id": None,
    "eos_token_id": None,
}
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def hf_gpt2(dtype: str, tie: bool, seed: int = 0, **changes):
    config = transformers.GPT2Config(**{**SMALL, **changes}, tie_word_embeddings=tie)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).to(DTYPES[dtype]).eval()
    # GPT-2's own init leaves LayerNorm at 1 and 0 and biases at 0: randomise everything
    randomize_(model, SeededRng(seed))
    if tie:
        assert model.lm_head.weight is model.transformer.wte.weight
    return model


def hf_logits(model, idx: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(idx)).logits.numpy()


def backend_logits(name: str, model_config: dict, state: dict, dtype: str, idx) -> np.ndarray:
    backend = make_backend(name, model_config, dtype=dtype)
    backend.load_state_dict(state)
    if name == "numpy":
        backend.model.eval()
        return backend.model(idx)
    backend.model.eval()
    with torch.no_grad():
        return backend.model(torch.from_numpy(idx)).numpy()


def compare(what: str, ours: np.ndarray, theirs: np.ndarray, dtype: str) -> float:
    """assert_close at the issue's tolerance; returns max |a - e| / max |e|."""
    if dtype == "float64":
        assert_close(what, ours, theirs, np.float64)
    else:
        assert_close(what, ours, theirs, np.float32, tol=INTEROP_FLOAT32, scale_atol=True)
    return float(np.max(np.abs(ours - theirs)) / np.max(np.abs(theirs)))


def ids(rng: SeededRng, T: int) -> np.ndarray:
    return rng.ids(SMALL["vocab_size"], (3, T)).astype(np.int64)


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_gpt2_weights_give_hf_logits(backend, dtype, tie):
    hf = hf_gpt2(dtype, tie)
    model_config, state = from_gpt2(hf)
    assert model_config["gelu_approximate"] == "tanh"  # GPT-2's gelu_new
    assert model_config["tie_weights"] == tie
    rng = SeededRng(1)
    for T in (1, 7, SMALL["n_positions"]):
        x = ids(rng, T)
        ours = backend_logits(backend, model_config, state, dtype, x)
        theirs = hf_logits(hf, x)
        assert ours.dtype == theirs.dtype == np.dtype(dtype)
        compare(f"{backend} logits vs GPT2LMHeadModel's, {dtype}, T={T}", ours, theirs, dtype)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_gpt2_with_the_exact_gelu(backend):
    """activation_function="gelu" (erf) maps to gelu_approximate="none"."""
    hf = hf_gpt2("float64", True, activation_function="gelu")
    model_config, state = from_gpt2(hf)
    assert model_config["gelu_approximate"] == "none"
    x = ids(SeededRng(4), 9)
    ours = backend_logits(backend, model_config, state, "float64", x)
    compare(f"{backend} logits vs GPT-2 with the erf GELU", ours, hf_logits(hf, x), "float64")


@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_export_then_import_is_exact_and_hf_agrees_with_our_model(tie):
    """GPT-2 -> ours -> GPT-2 gives the original logits bit for bit; and a model of
    ours (NumPy backend's own random init) exported to GPT-2 gives our logits."""
    hf = hf_gpt2("float64", tie)
    model_config, state = from_gpt2(hf)
    x = ids(SeededRng(2), 11)
    back = to_gpt2(model_config, state)
    assert isinstance(back, transformers.GPT2LMHeadModel) and not back.training
    np.testing.assert_array_equal(hf_logits(back, x), hf_logits(hf, x))

    ours = make_backend("numpy", model_config, seed=5, dtype="float64")
    rng = SeededRng(3)
    for p in ours.model.parameters():  # LayerNorm and biases too
        p.data[...] = rng.normal(p.shape, scale=0.3)
    exported = to_gpt2(model_config, ours.state_dict())
    ours.model.eval()
    compare("GPT2LMHeadModel of our weights vs the numpy backend", hf_logits(exported, x),
            ours.model(x), "float64")  # fmt: skip


def test_configs_round_trip_and_unsupported_settings_are_named():
    config = transformers.GPT2Config(**SMALL)
    ours = from_gpt2_config(config)
    assert from_gpt2_config(gpt2_config(ours)) == ours
    assert ours["d_ff"] is None and ours["block_size"] == SMALL["n_positions"]
    for change, name in (
        ({"activation_function": "relu"}, "activation_function"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"attn_pdrop": 0.1}, "attn_pdrop"),
    ):
        with pytest.raises(ValueError, match=f"^{name}|, {name}"):
            from_gpt2_config(transformers.GPT2Config(**{**SMALL, **change}))
    with pytest.raises(ValueError, match="^bias"):
        gpt2_config({**ours, "bias": False})


def test_state_dict_of_another_depth_lists_the_keys():
    hf = hf_gpt2("float32", True)
    model_config = {**from_gpt2_config(hf.config), "n_layers": 1}
    from labs.interop import from_gpt2_state

    with pytest.raises(ValueError, match=r"unexpected keys \['transformer\.h\.1\.attn"):
        from_gpt2_state(hf.state_dict(), model_config)
