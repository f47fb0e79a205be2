"""Sampling: filtered logits agree, greedy and stream-driven generation give the same tokens.

``filter_logits`` (temperature, then top-k, then top-p) must remove exactly the
same tokens in both backends and leave the others equal; top-p keeps the token
whose probability crosses the threshold. Greedy decoding (temperature 0) of
the same weights must produce identical token sequences, the context cropped
to ``block_size`` once the sequence outgrows it. Random sampling from each
backend's own generator cannot be compared token by token (the generators
differ), so it is compared in distribution, and a filtered-out token must never
be drawn; given the same stream of uniform numbers (``uniforms=``), both
backends draw by inverse CDF and must give identical tokens.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

import numpy_impl as N
import numpy_impl.sampling as NS
import torch_impl as T
from parity_tests import hints as H
from parity_tests.harness import copy_weights, randomize_, tensor
from parity_tests.strategies import SeededRng, batch_sizes, gpt_configs, rngs, vocab_sizes
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.ch10


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@st.composite
def filter_settings(draw, V: int) -> dict:
    return {
        "temperature": draw(st.floats(0.3, 3.0)),
        "top_k": draw(st.one_of(st.none(), st.integers(1, V + 3))),
        "top_p": draw(st.one_of(st.none(), st.floats(0.05, 1.0))),
    }


def _min_distance_to_threshold(logits: np.ndarray, s: dict) -> float:
    """How close any token's preceding mass comes to top_p (rounding could flip it)."""
    if s["top_p"] is None:
        return np.inf
    z = NS.filter_logits(logits, s["temperature"], s["top_k"], None)
    p = -np.sort(-softmax(z), axis=-1)
    before = np.cumsum(p, axis=-1) - p
    return float(np.min(np.abs(before - s["top_p"])))


@given(data=st.data(), rng=rngs, B=batch_sizes, V=vocab_sizes, scale=st.floats(0.1, 5.0))
def test_filter_logits_parity(data, rng: SeededRng, B, V, scale):
    s = data.draw(filter_settings(V), label="settings")
    logits = rng.normal((B, V), scale=scale)
    before = logits.copy()
    # a mass within rounding of top_p could be kept on one side and not the other
    assume(_min_distance_to_threshold(logits, s) > 1e-9)
    out = NS.filter_logits(logits, **s)
    out_t = T.filter_logits(tensor(logits), **s)
    assert np.array_equal(logits, before), (
        "filter_logits modified its input: divide into a new array, "
        "logits = logits / temperature, not logits /= temperature"
    )
    what = f"filter_logits({s})"
    removed, removed_t = np.isneginf(out), torch.isneginf(out_t).numpy()
    late = T.filter_logits(tensor(logits), 1.0, s["top_k"], s["top_p"]).isneginf().numpy()
    why = f"; hint: {H.TEMPERATURE_AFTER_FILTER}" if np.array_equal(removed, late) else ""
    assert np.array_equal(removed, removed_t), (
        f"{what}: removed tokens differ{why}\n  NumPy: {np.argwhere(removed).tolist()}\n"
        f"  torch: {np.argwhere(removed_t).tolist()}"
    )
    assert_close(what, out, out_t, np.float64)
    np.testing.assert_array_equal(out[~removed], logits[~removed] / s["temperature"])
    # the distributions sampled from agree too (0 exactly where a token was removed)
    assert_close(f"softmax of {what}", softmax(out), torch.softmax(out_t, dim=-1), np.float64)

    kept = ~removed
    assert kept[np.arange(B), logits.argmax(axis=-1)].all(), "the most likely token was removed"
    if s["top_k"] is not None:
        assert np.all(kept.sum(axis=-1) <= min(s["top_k"], V))
    if s["top_p"] is not None and s["top_p"] < 1.0:
        # nucleus: the kept tokens reach top_p, and without the least likely of them they
        # would not (the token crossing the threshold is kept, nothing after it)
        z = NS.filter_logits(logits, s["temperature"], s["top_k"], None)
        p = softmax(z)
        for b in range(B):
            mass = p[b, kept[b]].sum()
            smallest = p[b, kept[b]].min()
            assert mass >= s["top_p"] - 1e-12, f"row {b}: kept mass {mass} < top_p"
            assert mass - smallest < s["top_p"], f"row {b}: more tokens kept than the nucleus needs"


@pytest.mark.parametrize(
    ("top_p", "kept"),
    [  # probabilities 0.5, 0.3, 0.15, 0.05: cumulative 0.5, 0.8, 0.95, 1.0
        (0.45, [0]),  # the top token alone (0.5) already reaches 0.45
        (0.6, [0, 1]),  # token 1 crosses 0.6 (0.5 -> 0.8) and is kept
        (0.85, [0, 1, 2]),  # token 2 crosses 0.85 (0.8 -> 0.95) and is kept
        (0.97, [0, 1, 2, 3]),  # the last token crosses 0.97
        (1.0, [0, 1, 2, 3]),  # everything
    ],
)
@pytest.mark.parametrize("permute", [False, True])
def test_top_p_keeps_the_token_that_crosses_the_threshold(top_p, kept, permute):
    """``kept`` lists probability ranks; the vocabulary order may be scrambled."""
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    order = np.array([2, 0, 3, 1]) if permute else np.arange(4)
    logits = np.log(probs)[order][None, :]  # token j has probability probs[order[j]]
    expected = np.isin(order, kept)
    for side, out in (
        ("NumPy", NS.filter_logits(logits, top_p=top_p)),
        ("torch", T.filter_logits(tensor(logits), top_p=top_p).numpy()),
    ):
        got = ~np.isneginf(out[0])
        assert np.array_equal(got, expected), (
            f"{side}, top_p={top_p}: kept {got}, expected {expected}"
            + _top_p_hint(got, order, kept)
        )


def _top_p_hint(got: np.ndarray, order: np.ndarray, kept: list) -> str:
    """What a wrong top-p mask of test_top_p_keeps_the_token_that_crosses_the_threshold
    looks like: the mask left in sorted order, or the crossing token dropped."""
    if np.array_equal(got, np.arange(len(order)) < len(kept)) and not np.array_equal(
        order, np.arange(len(order))
    ):
        return (
            "; hint: the mask left in sorted order: put it back in vocabulary order "
            "(np.put_along_axis(remove, order, remove_sorted, axis=-1))"
        )
    if np.array_equal(got, np.isin(order, kept[:-1])):
        return (
            "; hint: the token that crosses top_p was dropped: remove a token when the mass "
            "of the tokens before it is >= top_p, not when its running sum is"
        )
    return ""


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_top_k_keeps_ties(top_k):
    logits = np.array([[1.0, 3.0, 2.0, 2.0, 2.0, -1.0]])
    expected = logits[0] >= np.sort(logits[0])[::-1][top_k - 1]
    for side, out in (
        ("NumPy", NS.filter_logits(logits, top_k=top_k)),
        ("torch", T.filter_logits(tensor(logits), top_k=top_k).numpy()),
    ):
        got = ~np.isneginf(out[0])
        ties = (
            "; hint: exactly k tokens kept: the tokens tied with the k-th largest logit stay "
            "(remove only the logits < the k-th largest)"
            if got.sum() == top_k < expected.sum()
            else ""
        )
        assert np.array_equal(got, expected), f"{side}, top_k={top_k}: kept {got}{ties}"


@given(data=st.data(), rng=rngs, B=batch_sizes, T0=st.integers(1, 14), new=st.integers(0, 16))
def test_greedy_generation_gives_identical_tokens(data, rng: SeededRng, B, T0, new):
    """Temperature 0 in both backends: the same weights give the same tokens, also once
    the sequence is longer than block_size (9..12) and the context is cropped."""
    # d_model >= 2: with one feature every LayerNorm output is constant, the logits of
    # all tokens tie, and "the" argmax is a matter of convention
    config = data.draw(gpt_configs(min_width=2), label="config")
    torch_model = randomize_(T.GPT(T.GPTConfig(**config), dtype=torch.float64), rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    prompt = rng.ids(config["vocab_size"], (B, T0))

    out = NS.generate(numpy_model, prompt, new, temperature=0.0)
    out_t = T.generate(torch_model, tensor(prompt), new, temperature=0.0)
    assert out.shape == tuple(out_t.shape) == (B, T0 + new)
    assert out.dtype == np.int64 and out_t.dtype == torch.long
    np.testing.assert_array_equal(out[:, :T0], prompt, err_msg="the prompt was changed")
    np.testing.assert_array_equal(out, out_t.numpy(), err_msg="greedy tokens differ")
    assert numpy_model.training and torch_model.training, "generate() left the model in eval mode"

    # top_k = 1 leaves one token to draw: sampling at any temperature is greedy decoding
    sampled = NS.generate(numpy_model, prompt, new, 1.0, top_k=1, rng=np.random.default_rng(0))
    sampled_t = T.generate(torch_model, tensor(prompt), new, 1.0, top_k=1)
    np.testing.assert_array_equal(sampled, out, err_msg="NumPy: top_k=1 differs from greedy")
    np.testing.assert_array_equal(sampled_t.numpy(), out, err_msg="torch: top_k=1 differs")


class FixedLogits:
    """A stand-in model whose next-token logits are always ``logits``: the sampler alone."""

    def __init__(self, logits: np.ndarray, backend: str):
        self.logits, self.backend, self.training = logits, backend, True
        self.config = N.GPTConfig(vocab_size=logits.shape[-1], block_size=4, n_heads=1, d_model=1)

    def train(self, mode: bool = True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def forward(self, idx):
        B, T_ = idx.shape
        out = np.broadcast_to(self.logits, (B, T_, self.logits.shape[-1])).copy()
        return out if self.backend == "numpy" else torch.from_numpy(out)

    __call__ = forward


@pytest.mark.parametrize(
    "settings",
    [
        {"temperature": 1.0},
        {"temperature": 0.7, "top_k": 3},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 1.0, "top_k": 4, "top_p": 0.6},
    ],
    ids=["plain", "top_k", "top_p", "top_k+top_p"],
)
def test_sampling_distributions_agree(settings):
    """4000 draws per backend: frequencies within 5 standard errors of the filtered
    softmax, and no filtered-out token ever drawn. Fixed seeds: deterministic."""
    logits = np.array([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0]])
    probs = softmax(NS.filter_logits(logits, **settings))[0]
    n = 4000
    prompt = np.zeros((n, 1), dtype=np.int64)
    draws = {
        "NumPy": NS.generate(
            FixedLogits(logits, "numpy"), prompt, 1, rng=np.random.default_rng(1), **settings
        )[:, 1],
        "torch": T.generate(
            FixedLogits(logits, "torch"),
            tensor(prompt),
            1,
            generator=torch.Generator().manual_seed(1),
            **settings,
        )[:, 1].numpy(),
    }
    for side, tokens in draws.items():
        freq = np.bincount(tokens, minlength=len(probs)) / n
        assert np.all(freq[probs == 0] == 0), (
            f"{side} drew a filtered-out token: sample from the filtered distribution, "
            f"softmax(filter_logits(logits, temperature, top_k, top_p)); frequencies {freq}"
        )
        stderr = np.sqrt(probs * (1 - probs) / n)
        same = (
            "; hint: every row drew the same token: one u for the whole batch; draw one "
            "per row, rng.random((B, 1))"
            if np.count_nonzero(freq) == 1 and np.count_nonzero(probs) > 1
            else ""
        )
        assert np.all(np.abs(freq - probs) <= 5 * stderr + 1e-12), (
            f"{side}: frequencies {np.round(freq, 3)} vs probabilities {np.round(probs, 3)}" + same
        )


@given(
    data=st.data(),
    rng=rngs,
    B=batch_sizes,
    T0=st.integers(1, 14),
    new=st.integers(1, 12),
    use_cache=st.booleans(),
)
def test_sampling_with_injected_uniforms_gives_identical_tokens(
    data, rng: SeededRng, B, T0, new, use_cache
):
    """The same stream of uniform numbers, ``uniforms`` (max_new_tokens, B), in both
    backends: inverse-CDF sampling from the same filtered probabilities draws the same
    tokens, with or without top-k / top-p, with or without the KV cache."""
    config = data.draw(gpt_configs(min_width=2), label="config")
    settings = data.draw(filter_settings(config["vocab_size"]), label="settings")
    torch_model = randomize_(T.GPT(T.GPTConfig(**config), dtype=torch.float64), rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    prompt = rng.ids(config["vocab_size"], (B, T0))
    uniforms = rng.gen.random((new, B))

    out = NS.generate(numpy_model, prompt, new, uniforms=uniforms, use_cache=use_cache, **settings)
    out_t = T.generate(
        torch_model,
        tensor(prompt),
        new,
        uniforms=torch.from_numpy(uniforms),
        use_cache=use_cache,
        **settings,
    )
    np.testing.assert_array_equal(out, out_t.numpy(), err_msg=f"sampled tokens differ ({settings})")
    # the stream alone decides: the same numbers again, the same tokens
    again = NS.generate(numpy_model, prompt, new, uniforms=uniforms, **settings)
    np.testing.assert_array_equal(again, out, err_msg="the same stream drew different tokens")


def test_injected_uniforms_pick_by_inverse_cdf():
    """Probabilities 0.1, ~0, 0.6, 0.3 (cumulative 0.1, 0.1, 0.7, 1.0): u in [0, 0.1) picks
    token 0, [0.1, 0.7) token 2 (never the zero-probability token 1), [0.7, 1) token 3;
    identical in both backends, at temperature 1 with no filter."""
    probs = np.array([0.1, 0.0, 0.6, 0.3])
    logits = np.log(np.where(probs > 0, probs, 1e-300))[None, :]
    u = np.array([[0.0, 0.05, 0.0999, 0.1001, 0.4, 0.6999, 0.7001, 0.99]])
    expected = np.array([0, 0, 0, 2, 2, 2, 3, 3])  # (exactly 0.1 would be up to rounding)
    B = u.shape[1]
    prompt = np.zeros((B, 1), dtype=np.int64)
    tokens = NS.generate(FixedLogits(logits, "numpy"), prompt, 1, uniforms=u)[:, 1]
    tokens_t = T.generate(FixedLogits(logits, "torch"), tensor(prompt), 1, uniforms=tensor(u))
    np.testing.assert_array_equal(tokens, expected, err_msg="NumPy inverse CDF")
    np.testing.assert_array_equal(tokens_t[:, 1].numpy(), expected, err_msg="torch inverse CDF")
    draw = T.sample_inverse_cdf(torch.from_numpy(probs).expand(B, -1), torch.from_numpy(u[0]))
    np.testing.assert_array_equal(draw[:, 0].numpy(), expected)


@given(data=st.data(), rng=rngs, B=batch_sizes, T0=st.integers(1, 12), new=st.integers(1, 8))
def test_temperature_zero_is_the_argmax_of_each_step(data, rng: SeededRng, B, T0, new):
    """Greedy decoding, spelled out: each new token is the argmax of the model's logits
    for the (cropped) sequence so far; top-k and top-p cannot change it."""
    config = data.draw(gpt_configs(min_width=2), label="config")
    torch_model = randomize_(T.GPT(T.GPTConfig(**config), dtype=torch.float64), rng)
    numpy_model = N.GPT(N.GPTConfig(**config), dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    idx = rng.ids(config["vocab_size"], (B, T0))
    out = NS.generate(numpy_model, idx, new, temperature=0.0, top_k=2, top_p=0.5)
    out_t = T.generate(torch_model, tensor(idx), new, temperature=0.0, top_k=2, top_p=0.5)
    for step in range(new):
        context = out[:, : T0 + step][:, -config["block_size"] :]
        expected = numpy_model.forward(context)[:, -1, :].argmax(axis=-1)
        np.testing.assert_array_equal(out[:, T0 + step], expected, err_msg=f"step {step}")
    np.testing.assert_array_equal(out, out_t.numpy(), err_msg="greedy tokens differ")


def test_float32_logits_over_a_large_vocabulary_draw_the_same_tokens():
    """float32 logits over GPT-2's 50,257 tokens and hundreds of uniform numbers: both
    twins sum the cumulative probabilities in float64 (the draw's and top-p's), so they
    keep the same nucleus and draw the same tokens. Summed in float32, the running sums
    drift by ~1e-3 over such a vocabulary, differently in NumPy and PyTorch: about one
    draw in fifty and a nucleus boundary now and then differed."""
    rng = np.random.default_rng(0)
    V, B = 50257, 100
    for _ in range(3):
        logits = (rng.standard_normal((1, V)) * 3).astype(np.float32)
        for top_p in (rng.uniform(0.05, 0.99), rng.uniform(0.9, 0.999)):
            kept = np.isfinite(NS.filter_logits(logits, top_p=top_p))
            kept_t = torch.isfinite(T.filter_logits(torch.from_numpy(logits), top_p=top_p))
            assert kept.sum() == kept_t.sum().item(), f"top_p={top_p}: nuclei differ"
            np.testing.assert_array_equal(kept, kept_t.numpy())
        prompt = np.zeros((B, 1), dtype=np.int64)
        for settings in ({}, {"top_p": 0.95}):
            u = rng.random((1, B))
            tokens = NS.generate(FixedLogits(logits, "numpy"), prompt, 1, uniforms=u, **settings)
            tokens_t = T.generate(
                FixedLogits(logits, "torch"), tensor(prompt), 1, uniforms=tensor(u), **settings
            )
            np.testing.assert_array_equal(
                tokens[:, 1], tokens_t[:, 1].numpy(), err_msg=f"draws differ ({settings})"
            )
