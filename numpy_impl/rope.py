"""Rotary position embeddings, RoPE (Su et al. 2021, RoFormer, sec. 3.4), forward and backward.

Position p rotates plane i of each q and k (never v) by the angle p theta_i (RoFormer, eq. 15):

    theta_i = base^(-2i / d_k),  i = 0 .. d_k/2 - 1
    a' = a cos(p theta_i) - b sin(p theta_i),   b' = a sin(p theta_i) + b cos(p theta_i)

so the score of query i and key j depends on the positions only through i - j. Two layouts
pick plane i's features: ``"interleaved"`` (2i, 2i + 1), RoFormer, Meta's Llama, GPT-J; ``"half"``
(i, i + d_k/2), GPT-NeoX, Hugging Face Llama. They differ by a fixed :func:`rope_permutation`.
``scaling`` stretches the frequencies for contexts longer than training (:func:`scale_frequencies`).
"""

from __future__ import annotations

import math

import numpy as np

from .module import Module

ROPE_LAYOUTS = ("interleaved", "half")
#: ``rope_scaling["rope_type"]`` -> its numbers (the keys of Hugging Face's config.json)
ROPE_SCALINGS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def check_rope_scaling(scaling) -> dict | None:
    """None, or ``{"rope_type": "linear" | "llama3", "factor": ..., ...}`` as a dict of floats.

    Raises ValueError naming ``rope_scaling``: another type (yarn, dynamic...), a missing, extra
    or non-positive number, or llama3's low_freq_factor not below its high_freq_factor.
    """
    if scaling is None:
        return None
    kind = scaling.get("rope_type") if isinstance(scaling, dict) else None
    if not isinstance(kind, str) or kind not in ROPE_SCALINGS:
        raise ValueError(
            f"rope_scaling: expected None or a dict with rope_type in {tuple(ROPE_SCALINGS)}, "
            f"got {scaling!r}"
        )
    keys, got = ROPE_SCALINGS[kind], {k: v for k, v in scaling.items() if k != "rope_type"}
    ok = set(got) == set(keys) and all(
        not isinstance(v, bool) and isinstance(v, int | float) and 0 < v < math.inf
        for v in got.values()
    )
    if ok and kind == "llama3":
        ok = got["low_freq_factor"] < got["high_freq_factor"]
    if not ok:
        raise ValueError(f"rope_scaling: {kind!r} takes the positive numbers {keys}, got {got}")
    return {"rope_type": kind, **{k: float(got[k]) for k in keys}}


def scale_frequencies(theta: np.ndarray, scaling: dict | None) -> np.ndarray:
    """The frequencies theta ``(d_k/2,)`` scaled by a checked ``scaling`` (None: unchanged):

    linear: theta_i / factor                  (position interpolation, Chen et al. 2023)
    llama3: with wavelength w_i = 2 pi / theta_i and L = original_max_position_embeddings,
        s = clip((L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor), 0, 1)
        theta_i' = (1 - s) theta_i / factor + s theta_i   (Llama 3.1: long waves slowed)
    """
    if scaling is None:
        return theta
    if scaling["rope_type"] == "linear":
        return theta / scaling["factor"]
    lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / theta  # (d_k/2,)
    s = np.clip((scaling["original_max_position_embeddings"] / wavelength - lo) / (hi - lo), 0, 1)
    return (1 - s) * theta / scaling["factor"] + s * theta


def _check_layout(layout: str, name: str = "layout") -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"{name}: expected one of {ROPE_LAYOUTS}, got {layout!r}")


def _check_head_dim(d_k: int) -> None:
    if isinstance(d_k, bool) or not isinstance(d_k, (int, np.integer)) or d_k < 2 or d_k % 2:
        raise ValueError(
            f"d_k: RoPE rotates pairs of features, so the head dimension must be a positive "
            f"even integer, got {d_k!r}"
        )


def _check_start_pos(start_pos: int) -> int:
    if isinstance(start_pos, bool) or not isinstance(start_pos, (int, np.integer)):
        raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
    if not 0 <= start_pos < 2**53:  # positions exact in float64 (the angles are float64)
        raise ValueError(f"start_pos: expected a position in [0, 2**53), got {start_pos}")
    return int(start_pos)


def _pairs(x: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Views ``(a, b)`` of ``x (..., d_k)``, each ``(..., d_k/2)``: plane i is (a_i, b_i)."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]  # features 2i and 2i + 1
    h = x.shape[-1] // 2
    return x[..., :h], x[..., h:]  # features i and i + d_k/2


def rope_cos_sin(
    T: int, d_k: int, start_pos: int = 0, base: float = 10000.0, scaling=None, *, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin ``(T, d_k/2)`` of the angles ``(start_pos + t) * theta_i`` (eq. 15).

    A KV cache passes its cached length as start_pos. Raises TypeError: non-integer
    ``start_pos``; ValueError: odd or non-positive ``d_k``, ``start_pos`` outside ``[0, 2**53)``.
    """
    _check_head_dim(d_k)
    start_pos = _check_start_pos(start_pos)
    ### BEGIN SOLUTION ch13
    ### TODO: theta_i = base^(-2i / d_k) for i = 0 .. d_k/2 - 1, in float64, then
    ###   theta = scale_frequencies(theta, scaling); angles (T, d_k/2) = outer product of the
    ###   positions start_pos .. start_pos + T - 1 and theta; return their cos and sin as dtype
    theta = base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)  # (d_k/2,)
    theta = scale_frequencies(theta, scaling)  # unchanged without scaling
    positions = np.arange(start_pos, start_pos + T, dtype=np.float64)  # (T,)
    angles = np.outer(positions, theta)  # (T, d_k/2): angle of plane i at each position
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    ### END SOLUTION


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str) -> np.ndarray:
    """Rotate each plane (a, b) of ``x``: ``a cos - b sin``, ``a sin + b cos``.

    Shapes: x ``(..., T, d_k)``, cos, sin ``(T, d_k/2)`` -> a new array like ``x``. With ``-sin``
    it rotates back: the backward, since a rotation's transpose is its inverse.
    """
    out = np.empty_like(x)
    ### BEGIN SOLUTION ch13
    ### TODO: take the two views (a, b) of x and (out_a, out_b) of out with _pairs(., layout),
    ###   then write out_a = a cos - b sin and out_b = a sin + b cos (cos and sin broadcast
    ###   over the leading axes); return out
    a, b = _pairs(x, layout)  # each (..., T, d_k/2)
    out_a, out_b = _pairs(out, layout)  # views: writing them fills out
    out_a[...] = a * cos - b * sin  # (..., T, d_k/2)
    out_b[...] = a * sin + b * cos
    return out
    ### END SOLUTION


def rope_permutation(d_k: int, from_layout: str, to_layout: str) -> np.ndarray:
    """The order of one head's q/k features that turns one RoPE layout into the other.

    Feature j of ``to_layout`` is feature ``perm[j]`` of ``from_layout``. Permuting the rows of
    q and k alike leaves every q . k, hence the model, unchanged. interleaved -> half is
    ``[0, 2, 4, ..., 1, 3, 5, ...]`` (Hugging Face's convert_llama_weights_to_hf.py).
    Returns int64 ``(d_k,)``. Raises ValueError: odd ``d_k``, unknown layout.
    """
    _check_head_dim(d_k)
    _check_layout(from_layout, "from_layout")
    _check_layout(to_layout, "to_layout")
    ### BEGIN SOLUTION ch13
    ### TODO: the identity if the layouts agree; interleaved -> half puts the first features
    ###   of the pairs (0, 2, 4, ...) first, then the second ones (1, 3, 5, ...);
    ###   half -> interleaved is the inverse permutation (np.argsort of that one)
    if from_layout == to_layout:
        return np.arange(d_k, dtype=np.int64)
    to_half = np.concatenate([np.arange(0, d_k, 2), np.arange(1, d_k, 2)]).astype(np.int64)
    return to_half if to_layout == "half" else np.argsort(to_half).astype(np.int64)
    ### END SOLUTION


def permute_qkv_for_rope(
    qkv: np.ndarray, n_heads: int, from_layout: str, to_layout: str
) -> np.ndarray:
    """Reorder the q and k rows of a combined QKV weight or bias for another RoPE layout.

    qkv: weight ``(3 d_model, d_model)`` or bias ``(3 d_model,)``, rows q, k, v, then heads.
    Each head's q and k rows move by :func:`rope_permutation`; v rows stay. Returns a new array.
    Raises ValueError: first axis not ``3 * n_heads * d_k``, odd ``d_k``, unknown layout.
    """
    if qkv.ndim not in (1, 2) or qkv.shape[0] % (3 * n_heads):
        raise ValueError(
            f"qkv: expected shape (3 d_model, ...) with d_model divisible by "
            f"n_heads={n_heads}, got {qkv.shape}"
        )
    d_k = qkv.shape[0] // (3 * n_heads)
    perm = rope_permutation(d_k, from_layout, to_layout)
    rows = np.arange(qkv.shape[0]).reshape(3, n_heads, d_k)  # (q/k/v, head, feature)
    rows[:2] = rows[:2][..., perm]  # q and k only: v is not rotated
    return qkv[rows.reshape(-1)]


class RotaryEmbedding(Module):
    """RoPE for one attention layer's q and k, rotated by the same angles (Su et al. 2021).

    No parameters. Shapes: forward q, k ``(..., T, d_k)``, start_pos -> rotated q, k (row t at
    position ``start_pos + t``); backward dq, dk -> dq, dk. Cache: cos, sin ``(T, d_k/2)``.
    Raises ValueError: odd ``d_k``, unknown layout, ``base <= 1``, a bad ``scaling``, q or k not
    ``(..., T, d_k)`` or of different T, a negative ``start_pos``; TypeError: non-integer start_pos.
    """

    _caches = ("_cos", "_sin")  # what backward reads; dropped under no_grad()

    def __init__(self, d_k, layout="interleaved", base=10000.0, scaling=None):
        _check_head_dim(d_k)
        _check_layout(layout)
        if not base > 1.0:
            raise ValueError(f"base: expected a frequency base > 1, got {base!r}")
        self.d_k, self.layout, self.base = int(d_k), layout, float(base)
        self.scaling = check_rope_scaling(scaling)
        self._cos = self._sin = None

    def forward(self, q: np.ndarray, k: np.ndarray, start_pos: int = 0):
        for name, a in (("q", q), ("k", k)):
            if a.ndim < 2 or a.shape[-1] != self.d_k:
                raise ValueError(
                    f"{name}: expected shape (..., T, d_k={self.d_k}), got {tuple(a.shape)}"
                )
        if q.shape[-2] != k.shape[-2]:
            raise ValueError(
                f"k: expected the same length T as q ({q.shape[-2]}), got {tuple(k.shape)}"
            )
        T = q.shape[-2]
        cos, sin = rope_cos_sin(T, self.d_k, start_pos, self.base, self.scaling, dtype=q.dtype)
        self._cos, self._sin = cos, sin
        return apply_rope(q, cos, sin, self.layout), apply_rope(k, cos, sin, self.layout)

    def backward(self, dq: np.ndarray, dk: np.ndarray):
        ### BEGIN SOLUTION ch13
        ### TODO: the rotation is orthogonal, so its transpose is the rotation by the opposite
        ###   angle: apply_rope with the cached cos and -sin, to dq and to dk
        cos, neg_sin = self._cos, -self._sin
        self._cos = self._sin = None
        return apply_rope(dq, cos, neg_sin, self.layout), apply_rope(dk, cos, neg_sin, self.layout)
        ### END SOLUTION
