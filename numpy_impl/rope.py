"""Rotary position embeddings, RoPE (Su et al. 2021, RoFormer, sec. 3.4), forward and backward.

RoPE encodes a token's position p by rotating its query and key vectors (never
its value) in d_k / 2 planes, plane i by the angle p * theta_i with

    theta_i = base^(-2i / d_k),   i = 0 .. d_k/2 - 1,   base = 10000   (RoFormer, eq. 15)

For one plane holding the pair (a, b) of features:

    a' = a cos(p theta_i) - b sin(p theta_i)
    b' = a sin(p theta_i) + b cos(p theta_i)

Rotations compose by adding angles and preserve dot products, so the score of
query i and key j, R(i theta) q . R(j theta) k = q . R((j - i) theta) k, depends on
the positions only through i - j.

Which two features form plane i is a convention, and two are in circulation:

* ``"interleaved"``: features (2i, 2i + 1). RoFormer's formula, Meta's Llama
  (``view_as_complex``), GPT-J, and the ``x[..., 0::2], x[..., 1::2]`` of the source
  material's ``rotary_embed`` (its chapter on from-scratch transformers).
* ``"half"``: features (i, i + d_k/2), via ``rotate_half``. GPT-NeoX and the
  Hugging Face Llama.

The two are the same model up to a fixed permutation of each head's q and k
features (:func:`rope_permutation`), which is how Hugging Face's conversion
script turns Meta's Llama weights into its own.
"""

from __future__ import annotations

import numpy as np

from .module import Module

ROPE_LAYOUTS = ("interleaved", "half")


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
    T: int, d_k: int, start_pos: int = 0, base: float = 10000.0, *, dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the rotation angles of positions ``start_pos .. start_pos + T - 1``.

    Args:
        T: number of positions.
        d_k: head dimension (even).
        start_pos: the first position (a KV cache passes the number of cached tokens).
        base: the frequency base (10000 in RoFormer and Llama).
        dtype: of the returned tables; the angles are computed in float64 first.

    Returns:
        cos, sin: ``(T, d_k/2)``; entry (t, i) is cos / sin of
        ``(start_pos + t) * base^(-2i / d_k)`` (Su et al. 2021, eq. 15).

    Raises:
        ValueError: odd or non-positive ``d_k``, ``start_pos`` outside ``[0, 2**53)``.
        TypeError: non-integer ``start_pos``.
    """
    _check_head_dim(d_k)
    start_pos = _check_start_pos(start_pos)
    ### BEGIN SOLUTION ch13
    ### TODO: theta_i = base^(-2i / d_k) for i = 0 .. d_k/2 - 1; angles (T, d_k/2) = outer
    ###   product of the positions start_pos .. start_pos + T - 1 and theta, in float64;
    ###   return their cos and sin cast to dtype
    theta = base ** (-np.arange(0, d_k, 2, dtype=np.float64) / d_k)  # (d_k/2,)
    positions = np.arange(start_pos, start_pos + T, dtype=np.float64)  # (T,)
    angles = np.outer(positions, theta)  # (T, d_k/2): angle of plane i at each position
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)
    ### END SOLUTION


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str) -> np.ndarray:
    """Rotate each plane of ``x`` by the angles whose cos and sin are given.

    ``out_a = a cos - b sin``, ``out_b = a sin + b cos`` for every plane (a, b)
    of the layout. Called with ``-sin`` it rotates back: that is the backward
    pass, since a rotation's transpose is its inverse.

    Args:
        x: ``(..., T, d_k)``, e.g. ``(B, n_heads, T, d_k)``; not modified.
        cos, sin: ``(T, d_k/2)`` from :func:`rope_cos_sin`.
        layout: ``"interleaved"`` or ``"half"`` (module docstring).

    Returns:
        a new array, shape and dtype of ``x``.
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

    With ``perm = rope_permutation(d_k, src, dst)``, feature j of the ``dst``
    layout is feature ``perm[j]`` of the ``src`` layout, so plane i holds the
    same pair of numbers in both: ``rope_dst(x[..., perm]) == rope_src(x)[..., perm]``.
    Applying ``perm`` to the rows of every head's q and k projection weights
    (and biases; see :func:`permute_qkv_for_rope`) and switching the layout
    leaves every attention score, hence the whole model, unchanged: q . k is
    a sum over features, which a common permutation does not change.
    interleaved -> half is ``[0, 2, 4, ..., 1, 3, 5, ...]`` (the ``permute`` of
    Hugging Face's convert_llama_weights_to_hf.py); half -> interleaved is its
    inverse, ``[0, h, 1, h + 1, ...]`` with h = d_k/2.

    Args:
        d_k: head dimension (even).
        from_layout, to_layout: ``"interleaved"`` or ``"half"``.

    Returns:
        int64 ``(d_k,)``, a permutation of ``0 .. d_k - 1``.

    Raises:
        ValueError: odd ``d_k``, unknown layout.
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

    Args:
        qkv: ``SelfAttention.qkv_proj`` weight ``(3 d_model, d_model)`` or
            bias ``(3 d_model,)``, rows in the order q, k, v, then heads.
        n_heads: heads; ``d_k = d_model / n_heads`` must be even.
        from_layout, to_layout: the RoPE layouts.

    Returns:
        a new array: each head's q rows and k rows reordered by
        :func:`rope_permutation`; the v rows unchanged.

    Raises:
        ValueError: a first axis that is not ``3 * n_heads * d_k``, odd ``d_k``,
            an unknown layout.
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
    """RoPE for the queries and keys of one attention layer (Su et al. 2021).

    No parameters: the angles are a fixed function of position. Forward and
    backward take q and k together, because RoPE rotates both (with the same
    angles) and never v.

    Args:
        d_k: head dimension; must be even.
        layout: ``"interleaved"`` (pairs (2i, 2i+1), the default) or ``"half"``
            (pairs (i, i + d_k/2)); see the module docstring.
        base: frequency base, 10000 by default.

    Shapes:
        forward: q ``(..., T, d_k)``, k ``(..., T, d_k)``, start_pos (int) ->
        rotated q, k (new arrays, same shapes). Position of row t is
        ``start_pos + t``.
        backward: dq, dk of those shapes -> dq, dk of the inputs.

    Cache: cos and sin ``(T, d_k/2)``.

    Raises:
        ValueError: odd ``d_k`` (in the constructor), an unknown layout, q or k
            whose last axis is not ``d_k`` or whose lengths T differ, a
            negative ``start_pos``.
        TypeError: a non-integer ``start_pos``.
    """

    _caches = ("_cos", "_sin")  # what backward reads; dropped under no_grad()

    def __init__(self, d_k, layout="interleaved", base=10000.0):
        _check_head_dim(d_k)
        _check_layout(layout)
        if not base > 1.0:
            raise ValueError(f"base: expected a frequency base > 1, got {base!r}")
        self.d_k, self.layout, self.base = int(d_k), layout, float(base)
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
        cos, sin = rope_cos_sin(q.shape[-2], self.d_k, start_pos, self.base, dtype=q.dtype)
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
