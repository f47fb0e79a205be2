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


# -- attention problems and masks (chapters 03, 12, 15, 16) ---------------------------------
#: The masks ``scaled_dot_product_attention`` and ``flash_attention`` accept: none, causal
#: (top-left aligned), boolean (True = may attend) without and with fully masked query
#: rows, additive float, and key padding ``(B, 1, 1, T_k)``.
ATTENTION_MASKS = ("none", "causal", "bool", "bool_fully_masked_rows", "float", "key_padding")


@st.composite
def attention_problems(draw) -> dict:
    """Shapes and a scale; T_q and T_k differ in general (cross-attention shapes)."""
    return {
        "B": draw(batch_sizes),
        "H": draw(n_heads),
        "Tq": draw(lengths),
        "Tk": draw(lengths),
        "d_k": draw(head_dims),
        "d_v": draw(head_dims),
        "scale": draw(st.one_of(st.none(), st.floats(0.1, 2.0))),
        # the mask's shape: it broadcasts against (B, H, Tq, Tk)
        "mask_shape": draw(
            st.sampled_from(["(Tq,Tk)", "(B,1,Tq,Tk)", "(B,H,Tq,Tk)", "(1,H,1,Tk)"])
        ),
    }


tiles = st.integers(1, 11)  # FlashAttention's tile lengths; T is 1..9: smaller, equal, larger


def attention_inputs(p: dict, mask_kind: str, rng: SeededRng, dtype, d_v: int | None = None):
    """q, k, v and the mask of ``mask_kind`` (one of ATTENTION_MASKS) for an
    :func:`attention_problems` draw; ``d_v`` overrides the drawn value width."""
    B, H, Tq, Tk = p["B"], p["H"], p["Tq"], p["Tk"]
    q = rng.uniform((B, H, Tq, p["d_k"]), dtype, bound=2.0)
    k = rng.uniform((B, H, Tk, p["d_k"]), dtype, bound=2.0)
    v = rng.uniform((B, H, Tk, d_v or p["d_v"]), dtype, bound=2.0)
    shape = {
        "(Tq,Tk)": (Tq, Tk),
        "(B,1,Tq,Tk)": (B, 1, Tq, Tk),
        "(B,H,Tq,Tk)": (B, H, Tq, Tk),
        "(1,H,1,Tk)": (1, H, 1, Tk),
    }[p["mask_shape"]]
    mask = None
    if mask_kind in ("bool", "bool_fully_masked_rows"):
        mask = rng.mask(shape, p_true=0.7)
        mask[..., 0] = True  # every query sees at least one key ...
        if mask_kind == "bool_fully_masked_rows":  # ... except these, which see none
            rows = rng.choice(shape[-2], max(1, shape[-2] // 2))
            mask[..., rows, :] = False
    elif mask_kind == "float":
        mask = rng.uniform(shape, dtype, bound=2.0)
        mask[rng.mask(shape, p_true=0.2)] = -np.inf  # some forbidden pairs, never a whole row
        mask[..., 0] = 0.0
    elif mask_kind == "key_padding":  # (B, 1, 1, T_k): the last keys of some rows are padding
        n_real = rng.gen.integers(1, Tk + 1, B)
        mask = (np.arange(Tk)[None, :] < n_real[:, None])[:, None, None, :]
    return q, k, v, mask


def fully_masked_queries(mask: np.ndarray | None, out_shape) -> np.ndarray:
    """Bool ``(B, H, Tq, 1)``: queries with no key to attend to."""
    if mask is None or mask.dtype != np.bool_:
        return np.zeros((*out_shape[:-1], 1), dtype=bool)
    dead = ~mask.any(axis=-1, keepdims=True)
    return np.broadcast_to(dead, (*out_shape[:-1], 1))


def padding_mask(rng: SeededRng, B: int, T: int, kind: str = "random") -> np.ndarray:
    """Bool ``(B, T)``, True = real token.

    ``"suffix"``: each row a random length 0..T of real tokens, then padding (row 0
    full, and with B > 1 the last row all padding). ``"random"``: anywhere, with
    row 0 full and, with B > 1, the last row all padding.
    """
    if kind == "suffix":
        n_real = rng.gen.integers(0, T + 1, B)
        mask = np.arange(T)[None, :] < n_real[:, None]
    else:
        mask = rng.mask((B, T), p_true=0.6)
    mask[0] = True
    if B > 1:
        mask[-1] = False
    return mask


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


@st.composite
def gpt_option_configs(draw, **fixed) -> dict:
    """GPTConfig fields with the options of chapters 13 and 14 drawn too (even head dims,
    for RoPE): RoPE or learned positions, LayerNorm or RMSNorm, GELU/ReLU/SwiGLU, pre- or
    post-norm, with or without biases and tied head."""
    h, c = draw(even_heads_and_width())
    options = draw(block_options())
    rope = options.pop("rope")
    config = {
        "vocab_size": draw(vocab_sizes),
        "block_size": draw(st.integers(9, 12)),
        "n_layers": draw(st.integers(1, 2)),
        "n_heads": h,
        "d_model": c,
        "d_ff": draw(st.one_of(st.none(), st.integers(1, 12))),
        "bias": draw(st.booleans()),
        "tie_weights": draw(st.booleans()),
        "pos_emb": "learned" if rope is None else "rope",
        "rope_layout": rope or "interleaved",
        **options,
    }
    config.update(fixed)
    return config


# -- text, for the tokenizers (chapter 11) ------------------------------------------------
#: Pieces that stress GPT-2's pre-tokenization and byte-level BPE: whitespace runs and
#: newlines (``\s+(?!\S)``), contractions in both cases (the pattern knows lower case
#: only), digits, emoji (4 bytes; a skin-tone modifier; a ZWJ family), combining marks,
#: non-Latin scripts, no-break and ideographic spaces, and the end-of-text token's text.
TEXT_PIECES = (
    " ", "  ", "   ", "\n", "\n\n", " \n", "\n ", "\t", "\r\n", "\u00a0", "\u3000",
    "'s", "'S", "'t", "'T", "'re", "'RE", "'ve", "'m", "'ll", "'LL", "'d", "'D", "'",
    "he's", "HE'S", "don't", "DON'T", "the", " the", "The", "THE",
    "0", "7", "42", "1603", " 3.14", "\u0663\u0664",
    "\U0001f600", "\U0001f44d\U0001f3fd", "\U0001f468\u200d\U0001f469\u200d\U0001f467",
    "e\u0301", "\u0301", "a\u0308\u0323", "\u00e9", "\ufb01", "\u0130", "\u00df",
    "\u65e5\u672c\u8a9e", "\u0395\u03bb\u03bb\u03ac\u03b4\u03b1", "\u0645\u0631\u062d\u0628\u0627",
    "...", "?!", "--", "<|endoftext|>", "<|", "|>",
)  # fmt: skip
#: Any character Python's ``unicodedata`` knows to be assigned. Unassigned code points
#: are left out of the *parity* texts: the ``regex`` package reads Unicode 17's tables
#: and HF's Oniguruma an older version, so a letter new in Unicode 17 is ``\p{L}`` to
#: one and not to the other (4,657 such code points with regex 2026.5, tokenizers
#: 0.23). Surrogates (Cs) have no UTF-8 bytes: they are a bad input, not text.
assigned_chars = st.characters(exclude_categories=("Cs", "Cn"))
#: Texts mixing those pieces with arbitrary assigned characters.
tokenizer_texts = st.lists(
    st.one_of(st.sampled_from(TEXT_PIECES), st.text(assigned_chars, max_size=8)), max_size=16
).map("".join)
