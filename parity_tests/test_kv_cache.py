"""The KV cache: cached decoding is full recomputation, in both backends, at every step.

With a cache the GPT computes q, k, v for the new tokens only and reads the
earlier keys and values from ``KVCache``. The logits must be those of running
the whole context window again (float64, FLOAT64's 1e-10 relative; reached
~1e-15), at every step of a generation that runs past ``block_size``, where
the window slides and the cache has to be refilled (learned absolute positions
move with the window). Also: a prompt fed in chunks (queries ``p .. p + T - 1``
against cached keys, the causal mask bottom-right aligned), NumPy's cached
logits against torch's (both ``attn_impl``s), ``generate(use_cache=True)``
giving the tokens of ``use_cache=False``, and the cache's own bookkeeping.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import numpy_impl.sampling as NS
import torch_impl as T
import torch_impl.sampling as TS
from parity_tests.harness import copy_weights, randomize_, tensor
from parity_tests.registry import ROPE_SCALINGS
from parity_tests.strategies import (
    SeededRng,
    batch_sizes,
    even_heads_and_width,
    gpt_configs,
    rngs,
    rope_layouts,
)
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch12

ATTN_IMPLS = ["sdpa", "explicit"]


def twin_models(config: dict, rng: SeededRng, attn_impl: str = "sdpa"):
    torch_model = randomize_(
        T.GPT(T.GPTConfig(**config), attn_impl=attn_impl, dtype=torch.float64), rng
    )
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    return numpy_model.eval(), torch_model.eval()


@pytest.mark.parametrize("attn_impl", ATTN_IMPLS)
@given(data=st.data(), rng=rngs, B=batch_sizes, T0=st.integers(1, 12), steps=st.integers(1, 10))
def test_cached_decoding_equals_full_recomputation_at_every_step(
    attn_impl, data, rng: SeededRng, B, T0, steps
):
    """Each step's next-token logits, cached vs the whole window recomputed, in both backends;
    prompts up to 12 and up to 10 steps against a block_size of 9..12, so most examples
    pass block_size (the window slides, the cache is refilled)."""
    config = data.draw(gpt_configs(), label="config")
    numpy_model, torch_model = twin_models(config, rng, attn_impl)
    block = config["block_size"]
    idx = rng.ids(config["vocab_size"], (B, T0))
    cache, cache_t = numpy_model.new_kv_cache(), torch_model.new_kv_cache()
    for step in range(steps):
        full = numpy_model.forward(idx[:, -block:])[:, -1, :]  # (B, V): no cache
        cached = NS._cached_next_logits(numpy_model, idx, cache)
        with torch.no_grad():
            cached_t = TS._cached_next_logits(torch_model, tensor(idx), cache_t)
        what = f"next-token logits at step {step} (T={idx.shape[1]}, block_size={block})"
        assert_close(f"NumPy, cached vs recomputed: {what}", cached, full, np.float64)
        assert_close(f"NumPy cached vs torch cached ({attn_impl}): {what}", cached, cached_t)
        assert cache.length == cache_t.length == min(idx.shape[1], block)
        idx = np.concatenate([idx, rng.ids(config["vocab_size"], (B, 1))], axis=1)


@given(data=st.data(), rng=rngs, B=batch_sizes, T0=st.integers(1, 12), steps=st.integers(1, 6))
def test_cached_decoding_of_llama_style_and_post_norm_models(data, rng: SeededRng, B, T0, steps):
    """The same, for the options of chapters 13 and 14: RoPE (q and k rotated at their absolute
    positions before they enter the cache), RMSNorm, SwiGLU, post-norm, and a modern decoder's
    config: grouped-query attention (the cache holds the n_kv_heads K/V heads only), an
    explicit head_dim, q/k/v biases, the norms' eps, RoPE scaling."""
    h, c = data.draw(even_heads_and_width(), label="n_heads, d_model")
    options = {
        "n_heads": h,
        "n_kv_heads": data.draw(st.sampled_from([d for d in range(1, h + 1) if h % d == 0])),
        "d_model": c,
        "pos_emb": data.draw(st.sampled_from(["learned", "rope"]), label="pos_emb"),
        "rope_layout": data.draw(rope_layouts, label="rope_layout"),
        "norm": data.draw(st.sampled_from(["layernorm", "rmsnorm"]), label="norm"),
        "ffn": data.draw(st.sampled_from(["gelu", "relu", "swiglu"]), label="ffn"),
        "norm_position": data.draw(st.sampled_from(["pre", "post"]), label="norm_position"),
        "head_dim": data.draw(st.sampled_from([None, 2, 4]), label="head_dim"),
        "qkv_bias": data.draw(st.sampled_from([None, True, False]), label="qkv_bias"),
        "norm_eps": data.draw(st.sampled_from([1e-5, 1e-6]), label="norm_eps"),
    }
    if options["pos_emb"] == "rope":
        options["rope_scaling"] = data.draw(st.sampled_from(ROPE_SCALINGS), label="rope_scaling")
    config = data.draw(gpt_configs(**options), label="config")
    c_kv = options["n_kv_heads"]
    numpy_model, torch_model = twin_models(config, rng)
    block = config["block_size"]
    idx = rng.ids(config["vocab_size"], (B, T0))
    cache, cache_t = numpy_model.new_kv_cache(), torch_model.new_kv_cache()
    for step in range(steps):
        full = numpy_model.forward(idx[:, -block:])[:, -1, :]
        cached = NS._cached_next_logits(numpy_model, idx, cache)
        with torch.no_grad():
            cached_t = TS._cached_next_logits(torch_model, tensor(idx), cache_t)
        what = f"next-token logits at step {step} ({options}, T={idx.shape[1]})"
        assert_close(f"NumPy, cached vs recomputed: {what}", cached, full, np.float64)
        assert_close(f"NumPy cached vs torch cached: {what}", cached, cached_t)
        assert cache.layers[0].k.shape[1] == cache_t.layers[0].k.shape[1] == c_kv
        idx = np.concatenate([idx, rng.ids(config["vocab_size"], (B, 1))], axis=1)


@pytest.mark.parametrize("attn_impl", ATTN_IMPLS)
@given(data=st.data(), rng=rngs, B=batch_sizes)
def test_prompt_in_chunks_gives_the_logits_of_one_pass(attn_impl, data, rng: SeededRng, B):
    """Feeding a sequence in chunks of several tokens (each chunk's queries against the
    cached keys, causal mask bottom-right aligned) gives every position's logits of one pass."""
    config = data.draw(gpt_configs(), label="config")
    numpy_model, torch_model = twin_models(config, rng, attn_impl)
    T_ = data.draw(st.integers(1, config["block_size"]), label="T")
    cuts = sorted(set(data.draw(st.lists(st.integers(1, T_), max_size=4), label="cuts")) | {T_})
    idx = rng.ids(config["vocab_size"], (B, T_))
    full = numpy_model.forward(idx)
    cache, cache_t = numpy_model.new_kv_cache(), torch_model.new_kv_cache()
    start = 0
    for end in cuts:
        chunk = idx[:, start:end]
        logits = numpy_model.forward(chunk, kv_cache=cache, start_pos=start)
        with torch.no_grad():
            logits_t = torch_model(tensor(chunk), kv_cache=cache_t)  # start_pos=None: append
        what = f"logits of positions {start}..{end - 1} fed after {start} cached"
        assert_close(f"NumPy, chunked vs one pass: {what}", logits, full[:, start:end], np.float64)
        assert_close(f"NumPy vs torch ({attn_impl}): {what}", logits, logits_t)
        start = end
    assert cache.length == cache_t.length == T_


@given(data=st.data(), rng=rngs, B=batch_sizes, T0=st.integers(1, 14), new=st.integers(1, 16))
def test_generate_with_cache_gives_the_same_tokens(data, rng: SeededRng, B, T0, new):
    """use_cache=True vs False, greedy and with an injected stream of uniform numbers, in
    both backends: the same tokens everywhere, also once the context is cropped."""
    config = data.draw(gpt_configs(min_width=2), label="config")
    numpy_model, torch_model = twin_models(config, rng)
    prompt = rng.ids(config["vocab_size"], (B, T0))
    uniforms = rng.gen.random((new, B))
    for settings in ({"temperature": 0.0}, {"temperature": 1.0, "uniforms": uniforms}):
        runs = {
            f"NumPy, use_cache={c}": NS.generate(numpy_model, prompt, new, use_cache=c, **settings)
            for c in (False, True)
        }
        settings_t = dict(settings)
        if "uniforms" in settings:
            settings_t["uniforms"] = torch.from_numpy(uniforms)
        for c in (False, True):
            out = T.generate(torch_model, tensor(prompt), new, use_cache=c, **settings_t)
            runs[f"torch, use_cache={c}"] = out.numpy()
        first = runs["NumPy, use_cache=False"]
        for name, tokens in runs.items():
            np.testing.assert_array_equal(tokens, first, err_msg=f"{name} differs ({settings})")


def test_cached_step_does_one_token_of_work():
    """Inside block_size, a cached step feeds the model one token, not the window."""
    config = {"vocab_size": 11, "block_size": 8, "n_layers": 1, "n_heads": 1, "d_model": 4}
    model = N.GPT(N.GPTConfig(**config), seed=0, dtype=np.float64)
    seen = []
    forward = model.forward
    model.forward = lambda idx, **kw: seen.append(idx.shape[1]) or forward(idx, **kw)
    NS.generate(model, np.zeros((1, 3), np.int64), 8, temperature=0.0, use_cache=True)
    # prompt (3), then 1 token per step while T <= 8, then the whole window (8) once T > 8
    assert seen == [3, 1, 1, 1, 1, 1, 8, 8], seen


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_layer_cache_bookkeeping(backend):
    """update writes in place at start_pos, returns the views of positions 0..end-1, drops
    what lay past start_pos, and refuses gaps and overflows, naming start_pos."""
    if backend == "numpy":
        cache, make = N.LayerKVCache(5), (lambda *s: np.arange(np.prod(s), dtype=float).reshape(s))
    else:
        cache, make = T.LayerKVCache(5), (lambda *s: torch.arange(float(np.prod(s))).reshape(s))
    k, v = make(2, 1, 3, 4), make(2, 1, 3, 2) + 100
    k_all, v_all = cache.update(k, v, 0)
    assert tuple(k_all.shape) == (2, 1, 3, 4) and tuple(v_all.shape) == (2, 1, 3, 2)
    assert cache.length == 3 and (k_all == k).all() and (v_all == v).all()
    k_all, _ = cache.update(k[:, :, :1] - 1, v[:, :, :1], 3)  # append one
    assert cache.length == 4 and (k_all[:, :, 3] == k[:, :, 0] - 1).all()
    k_all, _ = cache.update(k[:, :, :1] + 7, v[:, :, :1], 1)  # rewrite position 1, drop 2..3
    assert cache.length == 2 and (k_all[:, :, 1] == k[:, :, 0] + 7).all()
    assert (k_all[:, :, 0] == k[:, :, 0]).all()
    with pytest.raises(ValueError, match=r"^start_pos\b"):
        cache.update(k[:, :, :1], v[:, :, :1], 3)  # a gap: position 2 was never cached
    with pytest.raises(ValueError, match=r"^start_pos\b.*max_len=5"):
        cache.update(make(2, 1, 4, 4), make(2, 1, 4, 2), 2)  # positions 2..5: one too many
    cache.reset()
    assert cache.length == 0


def test_numpy_backward_after_a_cached_forward_raises():
    model = N.GPT(N.GPTConfig(vocab_size=5, block_size=4, n_layers=1, n_heads=1, d_model=2))
    logits = model.forward(np.zeros((1, 2), np.int64), kv_cache=model.new_kv_cache())
    with pytest.raises(RuntimeError, match="inference-only"):
        model.backward(np.ones_like(logits))


def test_numpy_integer_start_pos_is_an_int_in_both_backends():
    """A position read from a NumPy array (np.int64) is as good as an int, on both sides
    (torch's GPT once refused it, NumPy's accepted it)."""
    config = {"vocab_size": 7, "block_size": 6, "n_layers": 1, "n_heads": 2, "d_model": 8}
    numpy_model, torch_model = twin_models(config, SeededRng(0))
    idx = np.array([[1, 2, 3]])
    n_cache, t_cache = numpy_model.new_kv_cache(), torch_model.new_kv_cache()
    numpy_model.forward(idx, kv_cache=n_cache, start_pos=np.int64(0))
    with torch.no_grad():
        torch_model(tensor(idx), kv_cache=t_cache, start_pos=np.int64(0))
        got = torch_model(tensor(idx[:, :1]), kv_cache=t_cache, start_pos=np.int64(3))
    want = numpy_model.forward(idx[:, :1], kv_cache=n_cache, start_pos=np.int64(3))
    assert_close("logits at start_pos=np.int64(3)", want, got, np.float64)
