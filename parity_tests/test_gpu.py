"""GPU: PyTorch's fused attention in float16 / bfloat16 against the NumPy float64 reference.

``F.scaled_dot_product_attention`` on CUDA (flash or memory-efficient kernels
at these shapes) forward and backward, causal and not, head dims 64 and 128.
The inputs are rounded to the low-precision dtype first and the reference
computed from those same rounded values in float64, so only the kernel's own
error is measured. Tolerance: ``tolerances.low_precision_tol``, a few dtype
eps times sqrt(reduction length), relative to each tensor's scale.

Skipped cleanly without CUDA (``pytest -m gpu`` selects these tests).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import numpy_impl as N  # noqa: E402
from parity_tests.strategies import SeededRng  # noqa: E402
from parity_tests.tolerances import assert_close, low_precision_tol  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.ch03,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

B, H, T = 2, 4, 128


def check_fused_attention(device: str, dtype_name: str, is_causal: bool, head_dim: int) -> None:
    """The whole check, for any device (the CPU kernels take the same path in a pinch)."""
    dtype = getattr(torch, dtype_name)
    rng = SeededRng(head_dim + 2 * is_causal + (dtype_name == "bfloat16"))

    def rounded(shape):  # (low-precision tensor on device, its exact float64 value)
        x = torch.from_numpy(rng.normal(shape)).to(device=device, dtype=dtype)
        return x, x.double().cpu().numpy()

    (q, q64), (k, k64), (v, v64) = (rounded((B, H, T, head_dim)) for _ in range(3))
    dout, dout64 = rounded((B, H, T, head_dim))
    for x in (q, k, v):
        x.requires_grad_(True)

    out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    out.backward(dout)
    ref, cache = N.scaled_dot_product_attention(q64, k64, v64, is_causal=is_causal)
    grads = N.scaled_dot_product_attention_backward(dout64, cache)

    tol = low_precision_tol(dtype_name, max(T, head_dim))  # reductions over keys and d_k
    what = f"F.scaled_dot_product_attention({dtype_name}, causal={is_causal}, d_k={head_dim})"
    check = {"tol": tol, "scale_atol": True, "kind": "low_precision"}
    assert_close(f"output of {what}", out, ref, dtype_name, **check)
    for name, x, g in zip(("dq", "dk", "dv"), (q, k, v), grads, strict=True):
        assert torch.isfinite(x.grad).all(), f"{name} of {what} is not finite"
        assert_close(f"{name} of {what}", x.grad, g, dtype_name, **check)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
def test_fused_sdpa_low_precision_matches_numpy_float64(dtype_name, is_causal, head_dim):
    check_fused_attention("cuda", dtype_name, is_causal, head_dim)
