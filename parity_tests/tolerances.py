"""The one place the parity suite's tolerances live, and the one assertion that uses them.

Every comparison in ``parity_tests`` goes through :func:`assert_close`, so a
failure always reads the same way: which tensor, which shapes, how far apart,
and where the worst element is. A learner should know what broke without
opening the test.

An element passes when ``|actual - expected| <= atol + rtol * |expected|``
(the rule of ``numpy.isclose`` and ``torch.testing.assert_close``), and NaN or
infinity must appear in the same places in both tensors. A failure also says
what the wrong result looks like, when it recognises it (see :func:`diagnose`):
the reference transposed, negated or scaled, all zeros, or one of the test's own
``hints`` (e.g. attention with the softmax over the wrong axis).

Every comparison, passed or failed, is also handed to :data:`ON_COMPARISON`
when that is set: ``python -m labs check`` uses it (through conftest.py) to
report each tensor's errors to a learner.

Tolerances (the project's table, below). Tighten them when the code allows;
never loosen one to make a test pass without saying why, here. The last column
is the worst the suite reached (HYPOTHESIS_PROFILE=thorough), as a fraction of
the tolerance; conftest.py prints it after every run.

    comparison                                  rtol    atol    worst reached
    float64, hand-written vs autograd           1e-10   1e-12   ~1e-14 rel (0.23)
    float64, central differences, h = 1e-6      1e-6    1e-8    ~3e-8 rel (0.24)
    float32, NumPy vs torch                     1e-4    1e-5    ~3e-5 rel (0.70)
    float64 training run (per step, weights)    1e-9    1e-12   ~2e-16 rel (0.23)
    float32 logits, Hugging Face GPT-2/Llama    1e-5    1e-5 x max|logits|   see test_interop
    float16 / bfloat16 fused kernels on GPU     2 eps sqrt(n), scale-relative
                                                (CPU flash kernel, bfloat16: 0.03)

float32's 0.70 came from one thorough run; others stay below 0.4. The closest
checks are LayerNorm and Block gradients: 1/std of a row with little spread
multiplies float32 rounding in both backends alike.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tol:
    """An elementwise tolerance: ``|a - e| <= atol + rtol * |e|``."""

    rtol: float
    atol: float


#: float64, NumPy hand-written backward (or forward) vs PyTorch autograd.
FLOAT64 = Tol(rtol=1e-10, atol=1e-12)
#: float64 central differences with step FD_STEP against the hand-written backward.
#: The truncation error is O(h^2) ~ 1e-12 and the rounding error O(eps / h) ~ 1e-10
#: relative to the output, so 1e-6 leaves a wide margin while still catching any
#: wrong term (those show up as errors of order 1).
FINITE_DIFF = Tol(rtol=1e-6, atol=1e-8)
FD_STEP = 1e-6
#: float32, both backends: each carries O(1e-7) relative rounding error per op.
FLOAT32 = Tol(rtol=1e-4, atol=1e-5)
#: float64 training: losses, learning rates and gradient norms at every step of two
#: AdamW runs, and their final weights and moments. Reached: ~2e-16 relative per step.
#: The weights need the absolute part: the key bias of every attention layer has a
#: gradient that is zero in exact arithmetic (adding a constant to all of a query's
#: scores leaves its softmax unchanged), so in both backends it is rounding noise of
#: ~1e-17, which Adam turns into updates of up to lr * 1e-17 / eps. After 25 steps
#: those biases hold ~1e-13 of noise, different on each side (0.2 of atol); they
#: cannot change the loss, by the same invariance.
TRAINING = Tol(rtol=1e-9, atol=1e-12)
#: float32 logits of a Hugging Face GPT-2 against either backend (labs/plumbing/interop_gpt2.py,
#: parity_tests/test_interop.py): the bar set for the Hugging Face comparison, 1e-5, relative
#: to the logits' scale.
#: Use with ``scale_atol=True`` (atol is multiplied by max |logits|), so that a logit near
#: zero is not held to a relative error that float32 sums cannot give it. Tighter than
#: FLOAT32 because logits are one forward pass, not a gradient. (float64 uses FLOAT64.)
#: Also the bar of a float64 Hugging Face Llama as shipped (kind "hf-unpatched"): its RoPE
#: angles and RMSNorm are computed in float32 whatever the dtype (test_interop.py).
INTEROP_FLOAT32 = Tol(rtol=1e-5, atol=1e-5)

#: Machine epsilon of the low-precision GPU dtypes (the spacing of numbers near 1).
LOW_PRECISION_EPS = {
    "float16": 2.0**-10,  # 9.8e-4, 10 stored mantissa bits
    "bfloat16": 2.0**-7,  # 7.8e-3, 7 stored mantissa bits
}
#: The "few" in "a few eps * sqrt(reduction length)".
LOW_PRECISION_FACTOR = 2.0


def low_precision_tol(dtype_name: str, reduction_length: int) -> Tol:
    """Tolerance for a fused float16/bfloat16 kernel against a float64 reference.

    The rule: ``LOW_PRECISION_FACTOR * eps * sqrt(n)``, relative to the tensor's
    scale. Why: the inputs are rounded to the low-precision dtype *before* the
    float64 reference sees them, so only the kernel's own rounding is measured.
    The fused kernels accumulate in float32, but they round the probabilities
    (and, in the backward, dS) to the input dtype before the second matrix
    product, and the result once more at the end; each rounding is at most
    eps / 2 relative, and the rounding errors of a length-n reduction, when
    independent, add up like sqrt(n) eps. n is the longest reduction: max(T, d_k)
    for attention (keys for the output and dq, queries for dk and dv, d_k for
    the scores); d_model * n_layers for a whole model's logits. The absolute part
    is the same number; :func:`assert_close` with ``scale_atol=True`` multiplies
    it by the largest ``|expected|``, which makes it relative to the tensor's
    scale (gradients are not O(1), and elementwise relative errors of entries
    near 0 mean nothing). Reached with PyTorch's CPU flash kernel in bfloat16
    (``test_the_gpu_check_itself_on_cpu``): 0.03 of the tolerance.
    """
    tol = LOW_PRECISION_FACTOR * LOW_PRECISION_EPS[dtype_name] * math.sqrt(reduction_length)
    return Tol(rtol=tol, atol=tol)


def tol_for(dtype, kind: str = "autograd") -> Tol:
    """The tolerance of a comparison of ``kind`` at ``dtype``.

    Args:
        dtype: numpy or torch dtype (or its name) of the tensors compared.
        kind: ``"autograd"`` (NumPy vs PyTorch, outputs or gradients),
            ``"finite_diff"`` (NumPy backward vs central differences) or
            ``"training"`` (losses and weights along a training run).
    """
    name = _dtype_name(dtype)
    if name == "float32":
        return FLOAT32
    if name != "float64":
        raise ValueError(f"dtype: no tolerance for {name}; use low_precision_tol")
    return {"autograd": FLOAT64, "finite_diff": FINITE_DIFF, "training": TRAINING}[kind]


# -- what was reached ----------------------------------------------------------------
#: Worst errors seen this session per (kind, dtype): printed at the end of the run by
#: conftest.py, so the tolerances actually reached are visible (and can be tightened).
REACHED: dict[tuple[str, str], dict[str, float]] = defaultdict(
    lambda: {
        "max_abs": 0.0,
        "max_normwise_rel": 0.0,
        "worst_fraction_of_tol": 0.0,
        "worst_check": "",
        "checks": 0,
    }
)


def _record(
    name: str, kind: str, dtype: str, max_abs: float, normwise: float, fraction: float
) -> None:
    """Keep the worst max-abs difference, the worst ``max|a - e| / max|e|`` (a
    relative error that stays meaningful when some elements are near zero),
    and the worst fraction of the tolerance used, with the check's name."""
    r = REACHED[(kind, dtype)]
    r["max_abs"] = max(r["max_abs"], max_abs)
    r["max_normwise_rel"] = max(r["max_normwise_rel"], normwise)
    if fraction >= r["worst_fraction_of_tol"]:
        r["worst_fraction_of_tol"], r["worst_check"] = fraction, name
    r["checks"] += 1


def export_reached() -> list:
    """REACHED as plain lists and dicts (what an xdist worker can send back)."""
    return [[kind, dtype, dict(r)] for (kind, dtype), r in REACHED.items()]


def merge_reached(exported: list) -> None:
    """Fold another process's :func:`export_reached` into REACHED (worst of both)."""
    for kind, dtype, other in exported:
        r = REACHED[(kind, dtype)]
        r["max_abs"] = max(r["max_abs"], other["max_abs"])
        r["max_normwise_rel"] = max(r["max_normwise_rel"], other["max_normwise_rel"])
        if other["worst_fraction_of_tol"] >= r["worst_fraction_of_tol"]:
            r["worst_fraction_of_tol"] = other["worst_fraction_of_tol"]
            r["worst_check"] = other["worst_check"]
        r["checks"] += other["checks"]


#: Called with one dict per :func:`assert_close` call, passed or failed: ``name``,
#: ``actual_shape``, ``expected_shape``, ``dtype``, ``kind``, ``rtol``, ``atol``,
#: ``passed``, ``max_abs``, ``max_rel`` (elementwise ``|a - e| / |e|``), ``rel``
#: (``max|a - e| / max|e|``), ``fraction`` (of the tolerance), ``hint``; for a comparison
#: of two numbers also ``actual_value`` and ``expected_value``. The errors are
#: None when the shapes differ. conftest.py sets it when a report is asked for.
ON_COMPARISON: Callable[[dict], None] | None = None


def _emit(record: dict) -> None:
    if ON_COMPARISON is not None:
        ON_COMPARISON(record)


# -- what a wrong result looks like ------------------------------------------------------
#: A hint for :func:`assert_close`: label -> the wrong result it describes, or a
#: callable that computes it (only called when the comparison fails).
Hints = Mapping[str, object]

_MAX_PERMUTED_NDIM = 6  # 720 axis orders at most


def _matches(a: np.ndarray, candidate, tol: Tol, atol: float) -> bool:
    c = np.asarray(candidate, dtype=np.float64)
    if c.shape != a.shape:
        return False
    with np.errstate(invalid="ignore", over="ignore"):
        return bool(np.all(np.isclose(a, c, rtol=tol.rtol, atol=atol, equal_nan=True)))


def _describe_permutation(perm: tuple[int, ...]) -> str:
    moved = [i for i, p in enumerate(perm) if p != i]
    if len(moved) == 2:
        return f"axes {moved[0]} and {moved[1]} swapped"
    return f"axes in the order {perm}"


#: How :func:`diagnose`'s hints from the symptom alone begin (the others name a mistake).
SYMPTOMS = ("missing transpose", "NaN or inf where", "your result is all zeros", "sign flipped",
            "off by a constant factor")  # fmt: skip


def diagnose(a: np.ndarray, e: np.ndarray, tol: Tol, atol: float, hints: Hints | None = None):
    """What a failing ``actual`` looks like, in one line, or None if nothing recognised.

    In order: one of the caller's ``hints``; the reference with its axes permuted
    ("missing transpose"); NaN or inf where the reference is finite; all zeros;
    the reference negated; the reference times a constant.
    """
    a = np.asarray(a, dtype=np.float64)
    e = np.asarray(e, dtype=np.float64)
    for label, candidate in (hints or {}).items():
        try:
            value = candidate() if callable(candidate) else candidate
            if _matches(a, value, tol, atol):
                return label
        except Exception:  # a hint must never hide the real failure
            continue
    if a.size == e.size and 2 <= a.ndim <= _MAX_PERMUTED_NDIM and a.size > 1:
        for perm in itertools.permutations(range(a.ndim)):
            if perm == tuple(range(a.ndim)) or tuple(a.shape[i] for i in perm) != e.shape:
                continue
            if _matches(np.transpose(a, perm), e, tol, atol):
                return (
                    "missing transpose: your result is the reference with "
                    f"{_describe_permutation(perm)}"
                )
    if a.shape != e.shape:
        return None
    if not np.all(np.isfinite(a)) and np.all(np.isfinite(e)):
        return (
            "NaN or inf where the reference is finite: an overflow (subtract the row max "
            "before exp) or a 0/0 (a row with nothing to normalise?)"
        )
    if not np.all(np.isfinite(a)) or not np.all(np.isfinite(e)):
        return None
    e_scale = float(np.max(np.abs(e))) if e.size else 0.0
    if e_scale > atol and not np.any(a):
        return "your result is all zeros (nothing computed, or written into a copy?)"
    if e_scale > atol and _matches(-a, e, tol, atol):
        return "sign flipped: your result is minus the reference"
    denom = float(np.sum(e * e))
    if e_scale > atol and np.count_nonzero(e) >= 2:  # one number fits any factor
        factor = float(np.sum(a * e)) / denom
        if abs(factor - 1.0) > 1e-6 and _matches(a, factor * e, tol, atol):
            return (
                f"off by a constant factor: your result is {factor:.6g} x the reference "
                "(a missing or doubled scale?)"
            )
    return None


# -- the assertion ---------------------------------------------------------------------
def _dtype_name(dtype) -> str:
    text = str(dtype)  # "torch.float64", "float64", "<class 'numpy.float64'>"
    for name in ("bfloat16", "float16", "float32", "float64"):
        if name in text:
            return name
    return text


def to_numpy(x) -> np.ndarray:
    """A float64-or-lower numpy copy of a numpy array, torch tensor or Python number."""
    if hasattr(x, "detach"):  # a torch tensor; no torch import needed here
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":  # numpy has no bfloat16
            x = x.float()
        return x.numpy().copy()
    return np.array(x, copy=True)


def _fmt_index(idx: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(i) for i in idx) + "]"


def assert_close(
    name: str,
    actual,
    expected,
    dtype=None,
    *,
    kind: str = "autograd",
    tol: Tol | None = None,
    scale_atol: bool = False,
    hints: Hints | None = None,
) -> float:
    """Assert ``actual`` matches ``expected`` elementwise, or fail with a readable report.

    Args:
        name: what is compared, e.g. ``"dW of blocks.1.attn.qkv_proj.weight"``;
            the first line of the failure message.
        actual: the NumPy side's result (array, tensor or number).
        expected: the reference, usually PyTorch's (array, tensor or number).
        dtype: the dtype the computation ran in; picks the tolerance. Defaults to
            ``expected``'s dtype.
        kind: ``"autograd"``, ``"finite_diff"`` or ``"training"``; see :func:`tol_for`.
        tol: an explicit tolerance instead of the table's.
        scale_atol: multiply ``tol.atol`` by ``max |expected|`` (scale-relative;
            used for low-precision kernels).
        hints: ``{label: wrong result}`` (or a callable returning it): if the
            comparison fails and ``actual`` matches one of them, the failure says
            ``hint: label``. Computed only on failure.

    Returns:
        the largest elementwise ``|actual - expected| / (atol + rtol |expected|)``:
        the fraction of the tolerance used (< 1 when the check passes).

    The failure message names the tensor, its shapes, the tolerance, the max abs
    and max rel differences, how many elements fail, the worst element's index
    with both values, and a hint when :func:`diagnose` recognises the mistake.
    """
    a, e = to_numpy(actual), to_numpy(expected)
    dtype_name = _dtype_name(dtype if dtype is not None else e.dtype)
    if tol is None:
        tol = tol_for(dtype_name, kind)
    header = f"{name}: NumPy side (actual) vs reference (expected), {dtype_name}"
    record = {
        "name": name,
        "actual_shape": list(a.shape),
        "expected_shape": list(e.shape),
        "dtype": dtype_name,
        "kind": kind,
        "rtol": tol.rtol,
        "atol": tol.atol,
        "passed": False,
        "max_abs": None,
        "max_rel": None,
        "rel": None,
        "fraction": None,
        "hint": None,
    }
    if a.size == 1 and e.size == 1:  # a number: the report shows both values
        record["actual_value"] = float(a.astype(np.float64).ravel()[0])
        record["expected_value"] = float(e.astype(np.float64).ravel()[0])
    if a.shape != e.shape:
        record["hint"] = diagnose(a, e, tol, tol.atol, hints) or (
            f"shape mismatch: yours {a.shape}, the reference's {e.shape}"
        )
        _emit(record)
        raise AssertionError(
            f"{header}\n  shape mismatch: actual {a.shape}, expected {e.shape}"
            + _hint_line(record["hint"])
        )
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    shape = f"  shape {a.shape}, tolerance rtol={tol.rtol:g} atol={tol.atol:g}"
    if a.size == 0:
        record.update(passed=True, max_abs=0.0, max_rel=0.0, rel=0.0, fraction=0.0)
        _emit(record)
        return 0.0
    finite_a, finite_e = np.isfinite(a64), np.isfinite(e64)
    same_special = np.array_equal(finite_a, finite_e) and np.array_equal(
        a64[~finite_a], e64[~finite_e], equal_nan=True
    )
    if not same_special:
        bad = np.argwhere(finite_a != finite_e)
        where = _fmt_index(tuple(bad[0])) if len(bad) else "(same positions, different values)"
        record["hint"] = diagnose(a64, e64, tol, tol.atol, hints)
        _emit(record)
        raise AssertionError(
            f"{header}\n{shape}\n  non-finite values differ: "
            f"{int((~finite_a).sum())} in actual, {int((~finite_e).sum())} in expected; "
            f"first difference at {where}" + _hint_line(record["hint"])
        )
    both = finite_a & finite_e
    diff = np.abs(np.subtract(a64, e64, out=np.zeros_like(a64), where=both))
    mag = np.abs(np.where(both, e64, 0.0))
    atol = tol.atol * (float(mag.max()) if scale_atol else 1.0)
    allowed = atol + tol.rtol * mag
    fraction = diff / np.where(allowed > 0, allowed, np.finfo(np.float64).tiny)
    max_abs = float(diff.max())
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mag > 0, diff / mag, np.where(diff > 0, np.inf, 0.0))
    max_rel = float(rel.max())
    worst_fraction = float(fraction.max())
    # relative to the tensor's largest element, but never to less than atol / rtol:
    # a gradient that is zero in exact arithmetic is judged on the absolute scale
    normwise = max_abs / max(float(mag.max()), tol.atol / tol.rtol)
    _record(name, kind, dtype_name, max_abs, normwise, worst_fraction)
    passed = worst_fraction <= 1.0
    record.update(
        passed=passed,
        max_abs=max_abs,
        max_rel=max_rel,
        rel=max_abs / float(mag.max()) if mag.max() > 0 else (0.0 if max_abs == 0 else math.inf),
        fraction=worst_fraction,
    )
    if passed:
        _emit(record)
        return worst_fraction
    record["hint"] = diagnose(a64, e64, tol, atol, hints)
    _emit(record)
    worst = np.unravel_index(int(np.argmax(fraction)), a.shape) if a.ndim else ()
    n_bad = int((fraction > 1.0).sum())
    raise AssertionError(
        f"{header}\n{shape}\n"
        f"  {n_bad} of {a.size} elements out of tolerance\n"
        f"  max abs diff {max_abs:.3e}, max rel diff {max_rel:.3e}\n"
        f"  worst element {_fmt_index(tuple(int(i) for i in worst))}: "
        f"actual {a64[worst]!r}, expected {e64[worst]!r}, "
        f"diff {diff[worst]:.3e} (allowed {allowed[worst]:.3e})\n"
        f"  actual (first values):   {np.array2string(a64.ravel()[:6], precision=6)}\n"
        f"  expected (first values): {np.array2string(e64.ravel()[:6], precision=6)}"
        + _hint_line(record["hint"])
    )


def _hint_line(hint: str | None) -> str:
    return f"\n  hint: {hint}" if hint else ""


class Collected:
    """:func:`assert_close` that keeps going: every comparison runs (and is reported to
    :data:`ON_COMPARISON`), and :meth:`raise_failures` raises them together at the end.

    A training run whose loss differs at step 1 still compares every final weight and
    moment by name, which is what tells a learner *which* update went wrong.
    """

    def __init__(self) -> None:
        self.failures: list[str] = []
        self._failed: set[str] = set()

    def assert_close(self, *args, once: str | None = None, **kwargs) -> None:
        """:func:`assert_close`, its failure kept; with ``once``, a series (``"loss"``)
        stops being compared after its first failure (step 2 adds nothing to step 1)."""
        if once is not None and once in self._failed:
            return
        try:
            assert_close(*args, **kwargs)
        except AssertionError as e:
            self.failures.append(str(e))
            if once is not None:
                self._failed.add(once)

    def raise_failures(self) -> None:
        if not self.failures:
            return
        n = len(self.failures)
        shown = "\n".join(self.failures[:3])
        more = f"\n... and {n - 3} more" if n > 3 else ""
        raise AssertionError(f"{n} comparison{'s' * (n != 1)} failed:\n{shown}{more}")
