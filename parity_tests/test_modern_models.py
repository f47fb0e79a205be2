"""Today's small open decoders in and out (labs/plumbing/interop_llama.py): SmolLM2-135M,
TinyLlama-1.1B, Llama 3.2 1B, Qwen2.5-0.5B and Mistral 7B, each as a small random config
with the published model's features (grouped-query heads in its ratio, RoPE base and
scaling, RMSNorm eps, tied head, q/k/v biases, explicit head_dim), built here with
transformers (nothing downloaded). Imported, both twins' float64 logits match
transformers' (RoPE angles and RMSNorm in float64, as test_interop.hf_in_float64 explains),
and the export gives back every tensor bitwise.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from labs.plumbing.interop_llama import from_llama, llama_config_dict, to_llama_state
from parity_tests.harness import randomize_
from parity_tests.strategies import SeededRng
from parity_tests.test_interop import backend_logits, hf_logits
from parity_tests.tolerances import assert_close

transformers = pytest.importorskip("transformers")

LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position_embeddings": 16}  # fmt: skip
#: family -> (config class, fields): the published model's features at a small size
FAMILIES = {
    "smollm2-135m": ("LlamaConfig", dict(num_attention_heads=9, num_key_value_heads=3,
                     hidden_size=36, rope_theta=100000.0, rms_norm_eps=1e-5,
                     tie_word_embeddings=True)),
    "tinyllama-1.1b": ("LlamaConfig", dict(num_attention_heads=8, num_key_value_heads=1,
                       hidden_size=32, rope_theta=10000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False)),
    "llama-3.2-1b": ("LlamaConfig", dict(num_attention_heads=8, num_key_value_heads=2,
                     hidden_size=32, head_dim=8, rms_norm_eps=1e-5, tie_word_embeddings=True,
                     rope_parameters={**LLAMA3, "rope_theta": 500000.0})),
    "qwen2.5-0.5b": ("Qwen2Config", dict(num_attention_heads=7, num_key_value_heads=1,
                     hidden_size=28, rope_theta=1000000.0, rms_norm_eps=1e-6,
                     tie_word_embeddings=True, use_sliding_window=False)),
    "mistral-7b": ("MistralConfig", dict(num_attention_heads=8, num_key_value_heads=2,
                   hidden_size=32, head_dim=6, rope_theta=1000000.0, rms_norm_eps=1e-5,
                   sliding_window=None, tie_word_embeddings=False)),
}  # fmt: skip
SMALL = dict(
    vocab_size=97,
    intermediate_size=40,
    num_hidden_layers=2,
    max_position_embeddings=32,
    bos_token_id=None,
    eos_token_id=None,
    pad_token_id=None,
)  # no EOS suppressed


def hf_model(family: str):
    cls, fields = FAMILIES[family]
    config = getattr(transformers, cls)(**SMALL, **fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).to(torch.float64).eval()
    randomize_(model, SeededRng(3))
    return model


def in_float64(model, model_config: dict):
    """HF's RoPE table and RMSNorms in float64 (they cast to float32 by design); the
    frequencies from numpy_impl.rope (checked against transformers in test_rope)."""
    from numpy_impl.rope import scale_frequencies

    d_k = model_config["head_dim"] or model_config["d_model"] // model_config["n_heads"]
    theta = model_config["rope_base"] ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)
    theta = scale_frequencies(theta, model_config["rope_scaling"])
    inv_freq = torch.from_numpy(theta)

    def rope_forward(x, position_ids):
        angles = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((angles, angles), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def rms_forward(norm):
        return lambda x: (
            norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
        )

    model.model.rotary_emb.forward = rope_forward
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = rms_forward(m)
    return model


@pytest.mark.parametrize("family", FAMILIES)
def test_a_modern_family_imports_exactly_and_exports_bitwise(family):
    hf = hf_model(family)
    model_config, state = from_llama(hf)
    x = (
        SeededRng(1)
        .ids(SMALL["vocab_size"], (2, SMALL["max_position_embeddings"]))
        .astype(np.int64)
    )
    theirs = hf_logits(in_float64(hf, model_config), x)
    for backend in ("numpy", "torch"):
        ours = backend_logits(backend, model_config, state, "float64", x)
        scale = np.abs(theirs).max()
        assert np.abs(ours - theirs).max() <= 1e-12 * scale, (family, backend)
        assert_close(f"{family}: {backend} logits vs transformers", ours, theirs, np.float64)
    back = to_llama_state(state, model_config)
    original = {k: v.numpy() for k, v in hf.state_dict().items()}
    if model_config["tie_weights"]:
        assert np.array_equal(back.pop("lm_head.weight"), original.pop("lm_head.weight"))
    assert back.keys() == original.keys()
    for k, v in original.items():
        assert back[k].tobytes() == v.tobytes(), k
    exported = llama_config_dict(model_config)
    reloaded = transformers.AutoConfig.for_model(
        exported.pop("model_type"), **{k: v for k, v in exported.items() if k != "rope_scaling"}
    )
    assert from_llama(transformers.AutoModelForCausalLM.from_config(reloaded))[0] == model_config


@pytest.mark.parametrize("family", FAMILIES)
def test_a_modern_family_generates_what_transformers_generates(family):
    """16 greedy tokens: HF's ``generate`` (its KV cache; RoPE and RMSNorm in float64) and
    both twins' ``generate(temperature=0)``, cached and not, on an import in the
    "interleaved" layout (q and k rows of every query and key/value head permuted)."""
    import numpy_impl.sampling as NS
    import torch_impl.sampling as TS
    from labs.plumbing.backends import make_backend

    hf = hf_model(family)
    with torch.no_grad():  # blocks over the embedding: a tied head would repeat the token
        for name, p in hf.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                p.mul_(8.0)
            if name.endswith("proj.bias"):  # Qwen2's v bias, the same for every token
                p.mul_(0.1)
    model_config, state = from_llama(hf, rope_layout="interleaved")
    prompts = SeededRng(8).ids(SMALL["vocab_size"], (3, 5)).astype(np.int64)
    with torch.no_grad():
        expected = in_float64(hf, model_config).generate(
            torch.from_numpy(prompts), attention_mask=torch.ones(prompts.shape, dtype=torch.long),
            do_sample=False, max_new_tokens=16, min_new_tokens=16, pad_token_id=0,
        ).numpy()  # fmt: skip
    assert len(np.unique(expected[:, 5:])) > 3, "a degenerate model would prove little"
    for backend in ("numpy", "torch"):
        b = make_backend(backend, model_config, dtype="float64")
        b.load_state_dict(state)
        b.model.eval()
        for use_cache in (False, True):
            if backend == "numpy":
                got = NS.generate(b.model, prompts, 16, temperature=0.0, use_cache=use_cache)
            else:
                with torch.no_grad():
                    got = TS.generate(b.model, torch.from_numpy(prompts), 16, temperature=0.0,
                                      use_cache=use_cache).numpy()  # fmt: skip
            what = f"{family}, {backend}, use_cache={use_cache}"
            np.testing.assert_array_equal(got, expected, err_msg=what)
