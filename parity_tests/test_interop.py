"""Hugging Face interop: a GPT-2 or a Llama from ``transformers`` and both backends agree.

Models are built from small random ``GPT2Config`` objects (nothing is
downloaded), every weight randomised (LayerNorm gains and biases included, so
a swapped or untransposed tensor cannot hide), converted by ``labs/plumbing/interop_gpt2.py``
(GPT-2's Conv1D weights are stored ``(in, out)``: transposed there), loaded
into the NumPy and the PyTorch backend, and run on the same ids. Then the
other way: the project's weights exported into a fresh ``GPT2LMHeadModel``.

Llama the same way, from small random ``LlamaConfig`` objects, imported in
both RoPE layouts ("half", HF's, and "interleaved", through
``permute_qkv_for_rope``) and exported from both; plus greedy generations of
20 tokens, HF's ``generate`` against both backends' ``generate``.

Tolerances (the bar set for the Hugging Face comparison): float64 within FLOAT64 (1e-10
relative), float32 within INTEROP_FLOAT32 (1e-5 of the logits' scale). Skipped without
``transformers`` (``pip install -e ".[interop]"``; the dev extra has it, so CI runs this).

A float64 ``LlamaForCausalLM`` is not float64 throughout: transformers computes
the RoPE angles in float32 (``LlamaRotaryEmbedding.forward`` casts the positions
and ``inv_freq`` with ``.float()``; ``inv_freq`` itself is computed in float32)
and ``LlamaRMSNorm`` normalises in float32 (``hidden_states.to(torch.float32)``),
whatever the model's dtype. That caps the agreement with a float64 model at
~1e-7. So each float64 Llama comparison is made twice: against HF as shipped,
at the float32 bar (recorded under the kind ``hf-unpatched``), and against HF
with exactly those two forwards replaced by float64 ones (:func:`hf_in_float64`:
the same formulas, computed in the model's dtype), at FLOAT64. Nothing else of
HF's model is touched.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from labs.plumbing.backends import make_backend
from labs.plumbing.interop_gpt2 import from_gpt2, from_gpt2_config, gpt2_config, to_gpt2
from labs.plumbing.interop_llama import (
    from_llama,
    from_llama_config,
    from_llama_state,
    llama_config,
    to_llama,
)
from parity_tests.harness import randomize_
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import INTEROP_FLOAT32, assert_close

transformers = pytest.importorskip("transformers")

# No chapter marker: interop is plumbing (labs/plumbing/interop*.py), not an exercise.
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
    """assert_close at the Hugging Face comparison's tolerance; returns max |a - e| / max |e|."""
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
    # a post-norm (or RoPE, RMSNorm, SwiGLU) model must not export as a GPT-2 that computes
    # something else: post-norm has exactly GPT-2's weights, so only this check stops it
    for name, value in (("norm_position", "post"), ("pos_emb", "rope"), ("norm", "rmsnorm"),
                        ("ffn", "swiglu")):  # fmt: skip
        with pytest.raises(ValueError, match=f"^{name}: GPT-2 needs"):
            gpt2_config({**ours, name: value})


def test_state_dict_of_another_depth_lists_the_keys():
    hf = hf_gpt2("float32", True)
    model_config = {**from_gpt2_config(hf.config), "n_layers": 1}
    from labs.plumbing.interop_gpt2 import from_gpt2_state

    with pytest.raises(ValueError, match=r"unexpected keys \['transformer\.h\.1\.attn"):
        from_gpt2_state(hf.state_dict(), model_config)


# -- Llama ---------------------------------------------------------------------------------------
LLAMA_SMALL = {  # 3 heads of 8, an odd d_ff and vocabulary, 2 layers
    "vocab_size": 53,
    "hidden_size": 24,
    "intermediate_size": 37,
    "num_hidden_layers": 2,
    "num_attention_heads": 3,
    "num_key_value_heads": 3,
    "max_position_embeddings": 32,
    "rms_norm_eps": 1e-5,  # LlamaConfig's default is 1e-6; this GPT's RMSNorm has 1e-5
    "rope_theta": 10000.0,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
}
LAYOUTS = ["half", "interleaved"]


def hf_llama(dtype: str, tie: bool, seed: int = 0, **changes):
    config = transformers.LlamaConfig(**{**LLAMA_SMALL, **changes}, tie_word_embeddings=tie)
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(config).to(DTYPES[dtype]).eval()
    randomize_(model, SeededRng(seed))  # the RMSNorm gains too (HF's init leaves them at 1)
    if tie:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


@contextlib.contextmanager
def hf_in_float64(model):
    """``model`` with its RoPE tables and RMSNorms computed in the model's dtype.

    Patched, on this model's module instances only (restored on exit):
    ``LlamaRotaryEmbedding.forward``, whose float32 ``inv_freq`` and
    ``.float()`` angles are replaced by the same formula
    ``theta_i = base^(-2i/d_k)``, angles ``p theta_i``, ``cat(angles, angles)``
    in float64; and ``LlamaRMSNorm.forward``, whose ``.to(torch.float32)`` is
    dropped (``weight * x / sqrt(mean(x^2) + eps)`` in x's dtype). Why: those
    two casts are HF's deliberate choices for float16/bfloat16 training, and
    they limit a float64 model to float32 accuracy; with them removed, the
    remaining computation is the architecture itself, which is what the
    FLOAT64 comparison is meant to check.
    """
    rotary = model.model.rotary_emb
    d_k = model.config.hidden_size // model.config.num_attention_heads
    params = getattr(model.config, "rope_parameters", None)  # transformers 5; 4.x: rope_theta
    base = params["rope_theta"] if params else model.config.rope_theta
    inv_freq = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)

    def rope_forward(x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * inv_freq  # (B, T, d_k/2)
        emb = torch.cat((angles, angles), dim=-1)  # "half" layout: plane i is (i, i + d_k/2)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rms_forward(norm):
        def forward(x):
            rms = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon)
            return norm.weight * (x * rms)

        return forward

    norms = [m for m in model.modules() if type(m).__name__ == "LlamaRMSNorm"]
    assert len(norms) == 2 * model.config.num_hidden_layers + 1
    rotary.forward = rope_forward
    for norm in norms:
        norm.forward = rms_forward(norm)
    try:
        yield model
    finally:
        for module in (rotary, *norms):
            del module.forward  # back to the class's


def compare_llama(what: str, ours: np.ndarray, hf, x: np.ndarray, dtype: str) -> None:
    """Our logits against HF's: float32 at INTEROP_FLOAT32; float64 at FLOAT64 against
    :func:`hf_in_float64` and at INTEROP_FLOAT32 against HF as shipped."""
    theirs = hf_logits(hf, x)
    assert ours.dtype == theirs.dtype == np.dtype(dtype)
    if dtype == "float32":
        compare(what, ours, theirs, "float32")
        return
    assert_close(f"{what} (HF unpatched: float32 RoPE angles and RMSNorm)", ours, theirs,
                 np.float64, kind="hf-unpatched", tol=INTEROP_FLOAT32, scale_atol=True)  # fmt: skip
    with hf_in_float64(hf):
        compare(f"{what} (HF's RoPE and RMSNorm in float64)", ours, hf_logits(hf, x), "float64")


def llama_ids(rng: SeededRng, T: int) -> np.ndarray:
    return rng.ids(LLAMA_SMALL["vocab_size"], (3, T)).astype(np.int64)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_llama_weights_give_hf_logits(backend, dtype, tie, layout):
    hf = hf_llama(dtype, tie)
    model_config, state = from_llama(hf, rope_layout=layout)
    assert (model_config["rope_layout"], model_config["tie_weights"]) == (layout, tie)
    rng = SeededRng(1)
    for T in (1, 7, LLAMA_SMALL["max_position_embeddings"]):
        x = llama_ids(rng, T)
        ours = backend_logits(backend, model_config, state, dtype, x)
        compare_llama(f"{backend} logits vs LlamaForCausalLM's, {layout}, {dtype}, T={T}",
                      ours, hf, x, dtype)  # fmt: skip


def test_the_float64_patch_changes_only_the_rounding():
    """:func:`hf_in_float64` moves HF's float64 logits by float32 rounding only (it is
    the same formula), and the patch is gone afterwards."""
    hf = hf_llama("float64", False)
    x = llama_ids(SeededRng(6), 20)
    shipped = hf_logits(hf, x)
    with hf_in_float64(hf):
        patched = hf_logits(hf, x)
    assert 0 < np.max(np.abs(patched - shipped)) <= 1e-5 * np.max(np.abs(shipped))
    np.testing.assert_array_equal(hf_logits(hf, x), shipped)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("tie", [True, False], ids=["tied", "untied"])
def test_llama_export_then_import_and_hf_agrees_with_our_model(tie, layout):
    """Llama -> ours (either layout) -> Llama gives the original logits bit for bit;
    a model of ours (the torch backend's own init, then randomised) exported to
    Llama gives our logits; and the check can fail: "interleaved" weights exported
    as if they were "half" (no permutation) give other logits."""
    hf = hf_llama("float64", tie)
    model_config, state = from_llama(hf, rope_layout=layout)
    x = llama_ids(SeededRng(2), 11)
    back = to_llama(model_config, state)
    assert isinstance(back, transformers.LlamaForCausalLM) and not back.training
    assert back.config.tie_word_embeddings == tie
    np.testing.assert_array_equal(hf_logits(back, x), hf_logits(hf, x))

    ours = make_backend("torch", model_config, seed=5, dtype="float64")
    randomize_(ours.model, SeededRng(3))  # RMSNorm gains too
    ours.model.eval()
    with torch.no_grad():
        expected = ours.model(torch.from_numpy(x)).numpy()
    exported = to_llama(model_config, ours.state_dict())
    compare_llama(f"LlamaForCausalLM of our {layout} weights vs the torch backend",
                  expected, exported, x, "float64")  # fmt: skip
    if layout == "interleaved":
        wrong = to_llama({**model_config, "rope_layout": "half"}, ours.state_dict())
        assert np.max(np.abs(hf_logits(wrong, x) - expected)) > 1e-3


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_llama_greedy_generations_are_identical(dtype):
    """20 greedy tokens: HF's ``generate(do_sample=False)`` (with its KV cache), and both
    backends' ``generate(temperature=0)`` with and without theirs, on an interleaved
    import (the layout conversion is inside the loop too). HF as shipped, no patch."""
    hf = hf_llama(dtype, tie=False, seed=7)
    model_config, state = from_llama(hf, rope_layout="interleaved")
    prompts = llama_ids(SeededRng(8), 5)
    with torch.no_grad():
        expected = hf.generate(
            torch.from_numpy(prompts),
            attention_mask=torch.ones(prompts.shape, dtype=torch.long),
            do_sample=False,
            max_new_tokens=20,
            min_new_tokens=20,
            pad_token_id=0,  # silences the "no pad token" notice; nothing is padded
        ).numpy()
    assert expected.shape == (3, 25)
    assert len(np.unique(expected[:, 5:])) > 3, "a degenerate model would prove little"
    import numpy_impl.sampling as NS
    import torch_impl.sampling as TS

    for backend in ("numpy", "torch"):
        b = make_backend(backend, model_config, dtype=dtype)
        b.load_state_dict(state)
        b.model.eval()
        for use_cache in (False, True):
            if backend == "numpy":
                got = NS.generate(b.model, prompts, 20, temperature=0.0, use_cache=use_cache)
            else:
                with torch.no_grad():
                    got = TS.generate(b.model, torch.from_numpy(prompts), 20, temperature=0.0,
                                      use_cache=use_cache).numpy()  # fmt: skip
            np.testing.assert_array_equal(
                got, expected, err_msg=f"{backend}, {dtype}, use_cache={use_cache}"
            )


def test_llama_configs_round_trip_and_unsupported_settings_are_named():
    config = transformers.LlamaConfig(**LLAMA_SMALL)
    ours = from_llama_config(config)
    assert from_llama_config(llama_config(ours)) == ours
    assert from_llama_config(config.to_dict()) == ours
    assert (ours["d_ff"], ours["block_size"], ours["rope_base"]) == (37, 32, 10000.0)
    assert (
        from_llama_config(transformers.LlamaConfig(**{**LLAMA_SMALL, "rope_theta": 500.0}))[
            "rope_base"
        ]
        == 500.0
    )
    for change, name in (
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}},
            "rope_parameters",
        ),  # fmt: skip
        ({"attention_bias": True}, "attention_bias"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"attention_dropout": 0.1}, "attention_dropout"),
    ):
        with pytest.raises(ValueError, match=f"^{name}"):
            from_llama_config(transformers.LlamaConfig(**{**LLAMA_SMALL, **change}))
    # a transformers 4.x config.json: rope_theta and rope_scaling, no rope_parameters
    old = {k: v for k, v in config.to_dict().items() if k != "rope_parameters"}
    assert from_llama_config({**old, "rope_theta": 10000.0, "rope_scaling": None}) == ours
    with pytest.raises(ValueError, match="^rope_scaling"):
        from_llama_config({**old, "rope_theta": 1e4, "rope_scaling": {"type": "linear"}})
    with pytest.raises(ValueError, match="^rms_norm_eps"):
        from_llama_config({**old, "rms_norm_eps": "1e-6"})
    with pytest.raises(ValueError, match="^sliding_window"):  # Mistral v0.1's window
        from_llama_config({**old, "model_type": "mistral", "sliding_window": 4096})
    with pytest.raises(ValueError, match="^rope_layout"):
        from_llama_config(config, rope_layout="neox")
    for change, name in (
        ({"bias": True}, "bias"),
        ({"ffn": "gelu"}, "ffn"),
        ({"norm": "layernorm"}, "norm"),
        ({"pos_emb": "learned"}, "pos_emb"),
        ({"norm_position": "post"}, "norm_position"),
    ):
        with pytest.raises(ValueError, match=f"^{name}"):
            llama_config({**ours, **change})
    with pytest.raises(ValueError, match="^pos_emb"):
        llama_config({"vocab_size": 53})  # the GPT-2 defaults


def test_llama_state_dict_of_another_depth_lists_the_keys():
    hf = hf_llama("float32", False)
    model_config = {**from_llama_config(hf.config), "n_layers": 1}
    with pytest.raises(ValueError, match=r"unexpected keys \['model\.layers\.1\.input_layernorm"):
        from_llama_state(hf.state_dict(), model_config)
