"""Chapter 17's exercise: GPT-2's and nanoGPT's state dicts in this GPT's layout
(``numpy_impl/pretrained.py``: the key renames, GPT-2's Conv1D transposes).

Checked three ways: the key table names exactly the parameters a model of that
config has (``checkpoint_format.expected_shapes``, written independently from the
architecture); a GPT-2 layout built by hand from a NumPy GPT's weights (Conv1D:
``y = x @ W + b`` with ``W`` stored ``(in, out)``) computes the same projections
and converts back exactly, while nanoGPT's (``nn.Linear``) needs no transpose; and
a random ``transformers`` ``GPT2LMHeadModel`` converted with these functions gives
HF's logits in the NumPy GPT (float64 within FLOAT64). Nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest

from labs.plumbing.checkpoint_format import expected_shapes
from numpy_impl import pretrained
from numpy_impl.gpt import GPT, GPTConfig
from parity_tests.harness import randomize_
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch17

SMALL = {"vocab_size": 29, "block_size": 12, "n_layers": 2, "n_heads": 3, "d_model": 24}


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("n_layers", [1, 3])
def test_the_key_table_names_every_parameter_once(n_layers, tied, bias):
    config = {**SMALL, "n_layers": n_layers, "tie_weights": tied, "bias": bias}
    table = pretrained.gpt2_key_table(n_layers, tied, bias)
    ours = [o for o, _, _ in table]
    theirs = [t for _, t, _ in table]
    wanted = set(expected_shapes(config)) - ({"head.weight"} if tied else set())
    extra, missing = sorted(set(ours) - wanted), sorted(wanted - set(ours))
    assert not extra, f"rows for parameters the model does not have ({bias=}, {tied=}): {extra}"
    assert not missing, f"rows missing ({bias=}, {tied=}): {missing}"
    assert sorted(ours) == sorted(wanted) and len(set(theirs)) == len(theirs)
    assert all(t.startswith(("transformer.", "lm_head.")) for t in theirs)
    conv = {o for o, _, c in table if c}
    expected_conv = {
        f"blocks.{n}.{m}.weight"
        for n in range(n_layers)
        for m in ("attn.qkv_proj", "attn.out_proj", "ffn.fc1", "ffn.fc2")
    }
    assert conv == expected_conv, "exactly the four projections' weights are Conv1D"
    row = dict((o, t) for o, t, _ in table)
    assert row["blocks.0.attn.qkv_proj.weight"] == "transformer.h.0.attn.c_attn.weight"
    assert row["blocks.0.ffn.fc2.weight"] == "transformer.h.0.mlp.c_proj.weight"
    assert row["blocks.0.ln1.weight"] == "transformer.h.0.ln_1.weight"


def numpy_gpt(seed: int, **changes) -> GPT:
    model = GPT(GPTConfig(**{**SMALL, **changes}), seed=seed, dtype=np.float64)
    return randomize_(model, SeededRng(seed))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_conv1d_weights_compute_the_same_projection_and_convert_back_exactly(tied):
    model = numpy_gpt(1, tie_weights=tied)
    state = model.state_dict()
    hf = pretrained.to_gpt2_state(state, SMALL["n_layers"], tied)
    x = SeededRng(2).normal((5, SMALL["d_model"]))
    for ours, theirs in (("attn.qkv_proj", "attn.c_attn"), ("ffn.fc1", "mlp.c_fc")):
        W, b = state[f"blocks.1.{ours}.weight"], state[f"blocks.1.{ours}.bias"]
        W_conv = hf[f"transformer.h.1.{theirs}.weight"]
        assert W_conv.shape == W.shape[::-1], (
            f"{theirs}.weight of shape {W_conv.shape}, ours {W.shape}: a forgotten transpose, "
            "Conv1D stores (in, out), Linear (out, in)"
        )
        assert W_conv.flags.c_contiguous
        # Conv1D computes x @ W + b; nn.Linear computes x @ W.T + b: the same numbers
        assert_close(f"Conv1D {theirs} vs Linear {ours}", x @ W_conv + b, x @ W.T + b, np.float64)
    if tied:
        assert hf["lm_head.weight"] is hf["transformer.wte.weight"]
    back = pretrained.from_gpt2_state(hf, SMALL["n_layers"], tied)
    assert back.keys() == state.keys()
    for k in state:
        np.testing.assert_array_equal(back[k], state[k], err_msg=k)
        assert back[k].flags.c_contiguous, k
    if tied:
        assert back["head.weight"] is back["tok_emb.weight"]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_nanogpt_weights_are_renamed_not_transposed(bias):
    """nanoGPT's Linear layers store (out, in) like ours: its state dict (under
    torch.compile, every key behind ``_orig_mod.``) loads with conv1d=False and
    gives the model's own logits."""
    model = numpy_gpt(3, bias=bias)
    state = model.state_dict()
    nano = pretrained.to_gpt2_state(state, SMALL["n_layers"], True, bias, conv1d=False)
    W = state["blocks.0.attn.qkv_proj.weight"]
    got = nano["transformer.h.0.attn.c_attn.weight"]
    assert got.shape == W.shape, (
        f"c_attn.weight of shape {got.shape}, ours {W.shape}: nanoGPT's weights transposed; "
        "its Linear layers store (out, in) like ours: transpose only Conv1D's (conv1d=True)"
    )
    np.testing.assert_array_equal(got, W)
    compiled = {pretrained.COMPILED_PREFIX + k: v for k, v in nano.items()}
    plain = pretrained.strip_compiled_prefix(compiled)
    back = pretrained.from_gpt2_state(plain, SMALL["n_layers"], True, bias, conv1d=False)
    other = GPT(GPTConfig(**{**SMALL, "bias": bias}), seed=9, dtype=np.float64)
    other.load_state_dict(back)
    x = SeededRng(4).ids(SMALL["vocab_size"], (2, 7))
    model.eval(), other.eval()
    assert_close("GPT from nanoGPT's names vs the original", other(x), model(x), np.float64)


def test_missing_and_unexpected_keys_are_listed():
    state = pretrained.to_gpt2_state(numpy_gpt(5).state_dict(), SMALL["n_layers"])
    del state["transformer.h.1.mlp.c_fc.bias"]
    state["transformer.h.2.ln_1.weight"] = np.ones(SMALL["d_model"])
    state["transformer.h.0.attn.bias"] = np.ones((1, 1, 4, 4))  # a causal-mask buffer: ignored
    with pytest.raises(
        ValueError,
        match=r"missing keys \['transformer\.h\.1\.mlp\.c_fc\.bias'\], "
        r"unexpected keys \['transformer\.h\.2\.ln_1\.weight'\]",
    ):
        pretrained.from_gpt2_state(state, SMALL["n_layers"])
    with pytest.raises(ValueError, match="same tensor's names"):
        pretrained.strip_compiled_prefix({"a": 1, "_orig_mod.a": 2})


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_a_transformers_gpt2_gives_its_logits_in_the_numpy_gpt(tied):
    transformers = pytest.importorskip("transformers")
    import torch

    hf_config = transformers.GPT2Config(
        vocab_size=SMALL["vocab_size"],
        n_positions=SMALL["block_size"],
        n_embd=SMALL["d_model"],
        n_layer=SMALL["n_layers"],
        n_head=SMALL["n_heads"],
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        tie_word_embeddings=tied,
    )
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(hf_config).double().eval()
    randomize_(hf, SeededRng(6))
    hf_state = {k: v.detach().numpy() for k, v in hf.state_dict().items()}
    state = pretrained.from_gpt2_state(hf_state, SMALL["n_layers"], tied)
    model = GPT(GPTConfig(**SMALL, tie_weights=tied), seed=0, dtype=np.float64)
    model.load_state_dict(state)
    model.eval()
    x = SeededRng(7).ids(SMALL["vocab_size"], (2, SMALL["block_size"]))
    with torch.no_grad():
        expected = hf(torch.from_numpy(x)).logits.numpy()
    assert_close("numpy GPT of GPT-2's weights vs GPT2LMHeadModel", model(x), expected, np.float64)
