"""Hypothesis strategies for the parity suite, all in one module (minitorch style).

Shapes are drawn by Hypothesis so it can shrink a failure to the smallest one
(T = 1, one head, ...). Array *values* come from a NumPy generator seeded by a
drawn integer: far faster than Hypothesis' own array strategies, and a failing
example still prints everything needed to replay it (``SeededRng(seed=...)``).

Single letters as everywhere in twinformer: B batch, T time (sequence length),
C = d_model channels, H heads, V vocabulary.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

#: The two dtypes every component is checked in (pytest-parametrized, so a failure
#: names its dtype and the tolerance follows from it).
DTYPES = (np.float64, np.float32)

batch_sizes = st.integers(1, 4)  # B
lengths = st.integers(1, 9)  # T; T = 1 (a single token) is included on purpose
n_heads = st.integers(1, 4)  # H
head_dims = st.integers(1, 4)  # d_k = C / H
vocab_sizes = st.integers(2, 50)  # V
float_dtypes = st.sampled_from(DTYPES)
seeds = st.integers(0, 2**32 - 1)
gelu_forms = st.sampled_from(["tanh", "none"])


class SeededRng:
    """A ``np.random.Generator`` that remembers its seed, for readable failures.

    Every value it makes is bounded, so no test depends on a lucky tail draw.
    """

    def __init__(self, seed: int):
        self.seed = seed
        self.gen = np.random.default_rng(seed)

    def __repr__(self) -> str:
        return f"SeededRng(seed={self.seed})"

    def uniform(self, shape, dtype=np.float64, bound: float = 1.0) -> np.ndarray:
        """U(-bound, bound), of ``dtype``."""
        return self.gen.uniform(-bound, bound, shape).astype(dtype)

    def normal(self, shape, dtype=np.float64, scale: float = 1.0) -> np.ndarray:
        """N(0, scale^2) clipped to +-4 scale, of ``dtype``."""
        x = np.clip(self.gen.standard_normal(shape), -4.0, 4.0) * scale
        return x.astype(dtype)

    def ids(self, high: int, shape) -> np.ndarray:
        """int64 ids in ``[0, high)``."""
        return self.gen.integers(0, high, shape, dtype=np.int64)

    def mask(self, shape, p_true: float = 0.5) -> np.ndarray:
        """Bool array, True with probability ``p_true``."""
        return self.gen.random(shape) < p_true

    def choice(self, n: int, size: int) -> np.ndarray:
        """``size`` distinct integers from ``range(n)`` (all of them if ``size >= n``)."""
        return self.gen.choice(n, size=min(size, n), replace=False)


rngs = seeds.map(SeededRng)


@st.composite
def heads_and_width(draw, max_head_dim: int = 4, min_width: int = 1) -> tuple[int, int]:
    """``(n_heads, d_model)`` with ``d_model`` a multiple of ``n_heads``, ``>= min_width``."""
    h = draw(n_heads)
    d_k = draw(st.integers(-(-min_width // h), max(max_head_dim, -(-min_width // h))))
    return h, h * d_k


@st.composite
def gpt_configs(draw, max_layers: int = 2, min_width: int = 1, **fixed) -> dict:
    """Small GPTConfig field dicts; ``fixed`` overrides any field.

    ``block_size`` is at least 9, so every drawn length T fits.
    """
    h, c = draw(heads_and_width(min_width=min_width))
    config = {
        "vocab_size": draw(vocab_sizes),
        "block_size": draw(st.integers(9, 12)),
        "n_layers": draw(st.integers(1, max_layers)),
        "n_heads": h,
        "d_model": c,
        "d_ff": draw(st.one_of(st.none(), st.integers(1, 12))),
        "dropout": 0.0,
        "bias": draw(st.booleans()),
        "tie_weights": draw(st.booleans()),
        "gelu_approximate": draw(gelu_forms),
    }
    config.update(fixed)
    return config


# -- the Llama-style options (chapters 13 and 14) ------------------------------------------
rope_layouts = st.sampled_from(["interleaved", "half"])


@st.composite
def even_heads_and_width(draw, max_head_dim: int = 6) -> tuple[int, int]:
    """``(n_heads, d_model)`` with an even ``d_k = d_model / n_heads`` (RoPE rotates pairs)."""
    h = draw(n_heads)
    d_k = 2 * draw(st.integers(1, max_head_dim // 2))
    return h, h * d_k


@st.composite
def block_options(draw) -> dict:
    """Block / GPTConfig options beyond GPT-2's: norm, FFN, norm position, RoPE (or not)."""
    return {
        "norm": draw(st.sampled_from(["layernorm", "rmsnorm"])),
        "ffn": draw(st.sampled_from(["gelu", "relu", "swiglu"])),
        "norm_position": draw(st.sampled_from(["pre", "post"])),
        "rope": draw(st.one_of(st.none(), rope_layouts)),
    }
