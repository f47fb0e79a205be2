"""Rotary position embeddings, RoPE (Su et al. 2021, eq. 15), twin of ``numpy_impl/rope.py``.

Each layout is written as its home codebase writes it: ``"interleaved"`` pairs (2i, 2i+1)
as RoFormer; ``"half"`` pairs (i, i + d_k/2) as GPT-NeoX and Hugging Face's Llama.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

ROPE_LAYOUTS = ("interleaved", "half")
ROPE_SCALINGS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def check_rope_scaling(scaling) -> dict | None:
    """None, or the checked ``rope_scaling`` dict of floats, as the NumPy twin."""
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


def scale_frequencies(theta: torch.Tensor, scaling: dict | None) -> torch.Tensor:
    """The frequencies theta ``(d_k/2,)`` scaled (linear or llama3) as in the NumPy twin."""
    if scaling is None:
        return theta
    if scaling["rope_type"] == "linear":
        return theta / scaling["factor"]
    lo, hi = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / theta
    s = ((scaling["original_max_position_embeddings"] / wavelength - lo) / (hi - lo)).clamp(0, 1)
    return (1 - s) * theta / scaling["factor"] + s * theta


def _check_layout(layout: str, name: str = "layout") -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"{name}: expected one of {ROPE_LAYOUTS}, got {layout!r}")


def _check_head_dim(d_k: int) -> None:
    if isinstance(d_k, bool) or not isinstance(d_k, numbers.Integral) or d_k < 2 or d_k % 2:
        raise ValueError(
            f"d_k: RoPE rotates pairs of features, so the head dimension must be a positive "
            f"even integer, got {d_k!r}"
        )


def _check_start_pos(start_pos: int) -> int:
    if isinstance(start_pos, bool) or not isinstance(start_pos, numbers.Integral):
        raise TypeError(f"start_pos: expected an int, got {type(start_pos).__name__}")
    if not 0 <= start_pos < 2**53:  # positions exact in float64 (the angles are float64)
        raise ValueError(f"start_pos: expected a position in [0, 2**53), got {start_pos}")
    return int(start_pos)


def rope_cos_sin(
    T: int,
    d_k: int,
    start_pos: int = 0,
    base: float = 10000.0,
    scaling: dict | None = None,
    *,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin ``(T, d_k/2)`` of angles ``(start_pos + t) * base^(-2i/d_k)``, computed in
    float64 (as the NumPy twin) then cast to ``dtype``. ``ValueError`` for an odd ``d_k`` or
    ``start_pos`` outside ``[0, 2**53)``; ``TypeError`` for a non-int ``start_pos``."""
    _check_head_dim(d_k)
    start_pos = _check_start_pos(start_pos)
    theta = base ** (-torch.arange(0, d_k, 2, dtype=torch.float64, device=device) / d_k)
    theta = scale_frequencies(theta, scaling)  # (d_k/2,)
    positions = torch.arange(start_pos, start_pos + T, dtype=torch.float64, device=device)
    angles = torch.outer(positions, theta)  # (T, d_k/2)
    dtype = torch.get_default_dtype() if dtype is None else dtype
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``[x1, x2] -> [-x2, x1]`` over the halves of the last axis (GPT-NeoX, Hugging Face)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate each plane of ``x (..., T, d_k)`` by the angles of ``cos, sin (T, d_k/2)``."""
    if layout == "interleaved":
        x_even, x_odd = x[..., 0::2], x[..., 1::2]  # plane i = features (2i, 2i+1)
        out_even = x_even * cos - x_odd * sin
        out_odd = x_even * sin + x_odd * cos
        return torch.stack((out_even, out_odd), dim=-1).flatten(-2)  # re-interleave
    cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)  # (T, d_k)
    return x * cos + rotate_half(x) * sin  # plane i = features (i, i + d_k/2)


def rope_permutation(d_k: int, from_layout: str, to_layout: str) -> torch.Tensor:
    """int64 ``(d_k,)``: feature j of ``to_layout`` is feature ``perm[j]`` of ``from_layout``
    (interleaved -> half: ``[0, 2, 4, ..., 1, 3, 5, ...]``). ``ValueError``: odd d_k, bad layout."""
    _check_head_dim(d_k)
    _check_layout(from_layout, "from_layout")
    _check_layout(to_layout, "to_layout")
    if from_layout == to_layout:
        return torch.arange(d_k)
    to_half = torch.cat((torch.arange(0, d_k, 2), torch.arange(1, d_k, 2)))
    return to_half if to_layout == "half" else torch.argsort(to_half)


def permute_qkv_for_rope(
    qkv: torch.Tensor, n_heads: int, from_layout: str, to_layout: str
) -> torch.Tensor:
    """Put each head's q and k rows of a QKV weight ``(3C, C)`` or bias ``(3C,)`` in
    :func:`rope_permutation` order. ``ValueError`` for a bad first axis, d_k or layout."""
    if qkv.dim() not in (1, 2) or qkv.shape[0] % (3 * n_heads):
        raise ValueError(
            f"qkv: expected shape (3 d_model, ...) with d_model divisible by "
            f"n_heads={n_heads}, got {tuple(qkv.shape)}"
        )
    d_k = qkv.shape[0] // (3 * n_heads)
    perm = rope_permutation(d_k, from_layout, to_layout)
    rows = torch.arange(qkv.shape[0]).view(3, n_heads, d_k)
    rows = torch.cat((rows[:2, :, perm], rows[2:]))  # q and k only: v is not rotated
    return qkv[rows.flatten()]


class RotaryEmbedding(nn.Module):
    """RoPE for the queries and keys of one attention layer; no parameters (tables per call).

    q, k ``(..., T, d_k)`` -> rotated q, k; row t is at position ``start_pos + t``.
    ``ValueError`` for odd d_k, a bad layout, wrong widths or lengths, negative ``start_pos``.
    """

    def __init__(self, d_k: int, layout: str = "interleaved", base: float = 10000.0, scaling=None):
        super().__init__()
        _check_head_dim(d_k)
        _check_layout(layout)
        if not base > 1.0:
            raise ValueError(f"base: expected a frequency base > 1, got {base!r}")
        self.d_k, self.layout, self.base = int(d_k), layout, float(base)
        self.scaling = check_rope_scaling(scaling)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, start_pos: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        for name, a in (("q", q), ("k", k)):
            if a.dim() < 2 or a.shape[-1] != self.d_k:
                raise ValueError(
                    f"{name}: expected shape (..., T, d_k={self.d_k}), got {tuple(a.shape)}"
                )
        if q.shape[-2] != k.shape[-2]:
            raise ValueError(
                f"k: expected the same length T as q ({q.shape[-2]}), got {tuple(k.shape)}"
            )
        cos, sin = rope_cos_sin(
            q.shape[-2],
            self.d_k,
            start_pos,
            self.base,
            self.scaling,
            dtype=q.dtype,
            device=q.device,
        )
        return apply_rope(q, cos, sin, self.layout), apply_rope(k, cos, sin, self.layout)

    def extra_repr(self) -> str:
        return f"d_k={self.d_k}, layout={self.layout!r}, base={self.base}"
