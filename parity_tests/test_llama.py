"""The GPT configured as a Llama-style decoder (and every other mix of the new options).

* (the registry's ``GPT[options]`` entry, registry.py, run by test_components.py:)
  logits, loss and every parameter gradient, NumPy vs torch, for GPTConfigs drawn with
  RoPE or learned positions, LayerNorm or RMSNorm, GELU/ReLU/SwiGLU, pre- or post-norm,
  with or without biases and tied head; the NumPy backward of the Llama-style model
  against central differences;
* neither backend's model sees the future, whatever its options;
* what the Llama configuration builds: no position table, no biases, RMSNorm gains at
  1, the residual projections' smaller init, the parameter count;
* ``labs/plumbing/checkpoint_format.py`` knows every option's parameter names and shapes, a
  Llama checkpoint crosses between backends, and a config.json written before the new
  fields existed still loads (as the GPT-2 model it described);
* ``python -m labs train --arch llama`` with either backend, sampled with the other;
* Hugging Face's ``LlamaForCausalLM`` (slow; skipped without ``transformers``) loaded
  with our weights: the same logits, for the "half" layout directly and for the
  "interleaved" one through ``permute_qkv_for_rope``.
"""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from labs.commands.train import ARCHS, matched_d_ff
from labs.plumbing.checkpoint import load_checkpoint, save_checkpoint
from labs.plumbing.checkpoint_format import CONFIG_FILE, expected_shapes
from numpy_impl.char_tokenizer import CharTokenizer
from parity_tests.harness import (
    copy_weights,
    randomize_,
    tensor,
)
from parity_tests.strategies import (
    SeededRng,
    batch_sizes,
    gpt_option_configs,
    rngs,
)
from parity_tests.test_labs import SMALL, TEXT, run_cli
from parity_tests.tolerances import FLOAT32, assert_close

LLAMA = ARCHS["llama"]


def build_gpts(config: dict, rng: SeededRng, attn_impl: str = "sdpa"):
    torch_model = T.GPT(T.GPTConfig(**config), attn_impl=attn_impl, dtype=torch.float64)
    randomize_(torch_model, rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    return numpy_model, torch_model


@pytest.mark.ch13
@pytest.mark.ch14
@given(data=st.data(), rng=rngs, B=batch_sizes, T_=st.integers(2, 9))
def test_gpt_options_never_see_the_future(data, rng: SeededRng, B, T_):
    """Changing the tokens after position t leaves the logits at 0..t unchanged, in both
    backends (RoPE rotates q and k, it must not undo the causal mask)."""
    config = data.draw(gpt_option_configs(), label="config")
    numpy_model, torch_model = build_gpts(config, rng)
    t = int(rng.gen.integers(0, T_ - 1))
    idx = rng.ids(config["vocab_size"], (B, T_))
    other = idx.copy()
    other[:, t + 1 :] = (idx[:, t + 1 :] + 1) % config["vocab_size"]
    with torch.no_grad():
        for side, f in (("NumPy", numpy_model), ("torch", lambda a: torch_model(tensor(a)))):
            a, b = f(idx), f(other)
            assert_close(
                f"{side} logits 0..{t} with the future changed", b[:, : t + 1], a[:, : t + 1]
            )


# -- what the Llama configuration builds -------------------------------------------------------
def test_llama_configuration_builds_llamas_parts():
    config = {"vocab_size": 65, **LLAMA}  # the other fields: the baby GPT's sizes
    numpy_model = N.GPT(N.GPTConfig(**config), seed=0)
    torch.manual_seed(0)
    torch_model = T.GPT(T.GPTConfig(**config))
    names = [n for n, _ in numpy_model.named_parameters()]
    assert names == [n for n, _ in torch_model.named_parameters()]
    assert numpy_model.pos_emb is None and torch_model.pos_emb is None
    assert not any(n.endswith(".bias") or n.startswith("pos_emb") for n in names)
    assert {n.split(".")[-2] for n in names if ".ffn." in n} == {"w1", "w2", "w3"}
    assert numpy_model.blocks[0].attn.rope.layout == "interleaved"
    assert isinstance(torch_model.ln_f, T.RMSNorm) and isinstance(numpy_model.ln_f, N.RMSNorm)
    for model, std in ((numpy_model, np.std), (torch_model, lambda w: w.std().item())):
        block = model.blocks[0]
        w = {"w1": block.ffn.w1.weight, "w2": block.ffn.w2.weight}
        w = {k: v.data if isinstance(v.data, np.ndarray) else v.detach() for k, v in w.items()}
        # GPT-2's init: N(0, 0.02), the projections into the stream 0.02 / sqrt(2 n_layers)
        assert abs(std(w["w1"]) - 0.02) < 0.002
        assert abs(std(w["w2"]) - 0.02 / math.sqrt(2 * 4)) < 0.001
    # 65 x 128 tied embedding, 4 blocks of (2 x 128 gains, 4 x 128^2 attention,
    # 3 x 128 x 344 SwiGLU), a final gain
    expected = 65 * 128 + 4 * (2 * 128 + 4 * 128 * 128 + 3 * 128 * 344) + 128
    assert numpy_model.num_parameters() == torch_model.num_parameters() == expected == 800_000


def test_llama_width_matched_to_the_gpt2_parameter_count():
    config = {"vocab_size": 65, "block_size": 64, "n_layers": 4, "n_heads": 4, "d_model": 128}
    d_ff, n_llama, n_gpt2 = matched_d_ff({**config, **LLAMA})
    assert n_gpt2 == N.GPT(N.GPTConfig(**config)).num_parameters() == 809_856
    assert (d_ff, n_llama) == (352, 812_288)  # the closest multiple of 8: 350.4 -> 352
    assert n_llama == N.GPT(N.GPTConfig(**config, **LLAMA, d_ff=d_ff)).num_parameters()
    for other in (d_ff - 8, d_ff + 8):
        assert abs(N.GPT(N.GPTConfig(**config, **LLAMA, d_ff=other)).num_parameters() - n_gpt2) > (
            abs(n_llama - n_gpt2)
        )


# -- checkpoints ---------------------------------------------------------------------------------
@given(data=st.data())
def test_checkpoint_shapes_know_every_option(data):
    config = data.draw(gpt_option_configs(), label="config")
    expected = expected_shapes(config)
    for model in (N.GPT(N.GPTConfig(**config)), T.GPT(T.GPTConfig(**config))):
        got = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        assert list(got.items()) == list(expected.items())


def test_llama_checkpoint_crosses_backends_and_old_configs_still_load(tmp_path):
    rng = SeededRng(5)
    config = {"vocab_size": 23, "block_size": 10, "n_layers": 2, "n_heads": 2, "d_model": 12}
    config |= {**LLAMA, "rope_layout": "half"}
    torch_model = randomize_(T.GPT(T.GPTConfig(**config), dtype=torch.float64), rng)
    tokenizer = CharTokenizer("abcdefghijklmnopqrstuvw")
    full = T.GPTConfig(**config).to_dict()
    save_checkpoint(
        tmp_path / "llama",
        {k: v.detach().numpy() for k, v in torch_model.state_dict().items()},
        {"model": full, "tokenizer": tokenizer.to_dict()},
    )
    saved = json.loads((tmp_path / "llama" / CONFIG_FILE).read_text())
    for field in ("pos_emb", "rope_layout", "rope_base", "norm", "ffn", "norm_position"):
        assert saved["model"][field] == full[field], f"config.json lost {field}"
    state, loaded, _ = load_checkpoint(tmp_path / "llama")
    numpy_model = N.GPT(N.GPTConfig.from_dict(loaded["model"]), dtype=np.float64)
    numpy_model.load_state_dict(state)
    idx = rng.ids(23, (2, 10))
    with torch.no_grad():
        expected = torch_model(torch.from_numpy(idx))
    assert_close(
        "logits after torch -> checkpoint -> NumPy (Llama-style)", numpy_model(idx), expected
    )

    # a config.json from before the new fields: the GPT-2 model, loadable by both backends
    old = {
        k: v
        for k, v in N.GPTConfig(vocab_size=23).to_dict().items()
        if k
        in (
            "vocab_size",
            "block_size",
            "n_layers",
            "n_heads",
            "d_model",
            "d_ff",
            "dropout",
            "bias",
            "tie_weights",
            "gelu_approximate",
        )
    }
    gpt2 = N.GPT(N.GPTConfig.from_dict(old), seed=1, dtype=np.float64)
    save_checkpoint(
        tmp_path / "old", gpt2.state_dict(), {"model": old, "tokenizer": tokenizer.to_dict()}
    )
    state, loaded, _ = load_checkpoint(tmp_path / "old")
    assert "pos_emb" not in loaded["model"]
    for cls in (N.GPTConfig, T.GPTConfig):
        c = cls.from_dict(loaded["model"])
        assert (c.pos_emb, c.norm, c.ffn, c.norm_position) == (
            "learned",
            "layernorm",
            "gelu",
            "pre",
        )
    T.GPT(T.GPTConfig.from_dict(loaded["model"])).load_state_dict(
        {k: torch.from_numpy(v) for k, v in state.items()}
    )


# -- the command line ----------------------------------------------------------------------
@pytest.fixture
def corpus(tmp_path):
    p = tmp_path / "tiny.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


def test_train_arch_llama_with_either_backend(tmp_path, corpus):
    """Train with each backend (printing both parameter counts), then sample the torch run's
    checkpoint with the NumPy backend (in-process round trips are tested above)."""
    for backend in ("numpy", "torch"):
        out = tmp_path / backend
        r = run_cli(
            "train", "--backend", backend, "--arch", "llama", "--data", str(corpus),
            "--out", str(out), *SMALL,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        m = re.search(
            r"llama: d_ff (\d+) gives ([\d,]+) parameters; the gpt2 model of the same size has",
            r.stdout,
        )
        assert m, r.stdout[:2000]
        assert f"{m.group(2)} parameters" in r.stdout  # the backend's own count agrees
        _, config, _ = load_checkpoint(out)
        assert {k: config["model"][k] for k in LLAMA} == LLAMA
        assert config["model"]["d_ff"] == int(m.group(1))
    r = run_cli(
        "sample", "--checkpoint", str(tmp_path / "torch"), "--backend", "numpy",
        "--prompt", "All:", "--max-new-tokens", "10", "--temperature", "0",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("All:")


# -- Hugging Face's Llama ---------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_same_logits_as_hugging_face_llama(layout):
    """LlamaForCausalLM with our weights, exported by ``labs.plumbing.interop_llama.to_llama``. HF's
    layout is "half"; "interleaved" (Meta's) weights go through permute_qkv_for_rope
    first, as HF's conversion script does. HF computes its RoPE angles and RMSNorm in
    float32 whatever the model's dtype, so the comparison uses the float32 tolerance
    although both models are float64 (parity_tests/test_interop.py patches those two
    and reaches FLOAT64)."""
    pytest.importorskip("transformers")
    from labs.plumbing.interop_llama import to_llama, to_llama_state

    rng = SeededRng(3)
    V, L, H, C, F, Tb = 29, 2, 2, 16, 40, 12
    config = {"vocab_size": V, "block_size": Tb, "n_layers": L, "n_heads": H, "d_model": C}
    config |= {**LLAMA, "rope_layout": layout, "d_ff": F, "tie_weights": False}
    ours = randomize_(T.GPT(T.GPTConfig(**config), dtype=torch.float64), rng)
    sd = {k: v.detach().numpy() for k, v in ours.state_dict().items()}
    hf = to_llama(config, sd)
    assert hf.config.rms_norm_eps == 1e-5 and hf.config.intermediate_size == F
    idx = torch.from_numpy(rng.ids(V, (2, Tb)))
    with torch.no_grad():
        expected = hf(idx).logits
        got = ours(idx)
    assert_close(f"logits vs Hugging Face LlamaForCausalLM ({layout})", got, expected,
                 kind="hf-unpatched", tol=FLOAT32)  # fmt: skip
    # and the check can fail: the unpermuted interleaved weights are another model
    if layout == "interleaved":
        hf_sd_wrong = to_llama_state(sd, {**config, "rope_layout": "half"})
        hf.load_state_dict({k: torch.from_numpy(v) for k, v in hf_sd_wrong.items()})
        with torch.no_grad():
            assert (hf(idx).logits - got).abs().max() > 1e-3
