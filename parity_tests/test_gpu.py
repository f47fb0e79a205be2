"""GPU: PyTorch's fused attention kernels in float16 / bfloat16 against NumPy in float64.

Each fused kernel behind ``F.scaled_dot_product_attention`` is forced in turn
with ``torch_impl.use_sdpa_backend`` (``torch.nn.attention.sdpa_kernel``):
``flash`` (FlashAttention-2, Dao 2023), ``efficient`` (memory-efficient
attention, the xFormers kernel) and ``cudnn``, plus PyTorch's own choice
(``auto``). Forward and backward (random ``dout``), causal and not, head dims
64 and 128, and lengths that are multiples of every kernel's tiles (256) and
lengths that are not (77: less than one tile; 333: a ragged last tile). The
inputs are rounded to the low-precision dtype first and the reference computed
from those same rounded values in float64, so only the kernel's own error is
measured. Tolerance: ``tolerances.low_precision_tol``, a few dtype eps times
sqrt(reduction length), relative to each tensor's scale.

The GPU tests (marker ``gpu``) skip cleanly without CUDA; no chapter marker selects this
file (it tests PyTorch's kernels, not a learner's code); ``scripts/gpu_check.sh``
runs them and the GPU benchmark in one go. The comparison itself is also run on
CPU (PyTorch's CPU flash kernel, bfloat16, one small case), so a broken check
cannot wait for a GPU to be noticed.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numpy_impl as N  # noqa: E402
import torch_impl as T  # noqa: E402
from parity_tests.strategies import SeededRng  # noqa: E402
from parity_tests.tolerances import assert_close, low_precision_tol  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

B, H = 2, 4
FUSED_BACKENDS = ["auto", "flash", "efficient", "cudnn"]
LENGTHS = [256, 77, 333]  # a multiple of the 64/128-row tiles; shorter than one; ragged


def _rounded(rng: SeededRng, shape, device: str, dtype):
    """(low-precision tensor on ``device``, its exact value in float64 NumPy)."""
    x = torch.from_numpy(rng.normal(shape)).to(device=device, dtype=dtype)
    return x, x.double().cpu().numpy()


def _run_or_skip(fn):
    """Run a forced kernel; skip (with PyTorch's reason) if it does not exist here."""
    try:
        return fn()
    except RuntimeError as e:
        if "No available kernel" in str(e) or "No viable backend" in str(e):
            pytest.skip(f"this kernel cannot run these inputs on this machine: {e}")
        raise


def check_fused_attention(
    device: str,
    dtype_name: str,
    is_causal: bool,
    head_dim: int,
    T_: int = 128,
    sdpa_backend: str = "auto",
    key_padding: bool = False,
) -> None:
    """The whole check, for any device and kernel: output and dq, dk, dv of
    ``torch_impl.scaled_dot_product_attention(..., sdpa_backend=...)`` in ``dtype_name``
    against the NumPy float64 reference (the explicit formula, and NumPy-flash with
    ``key_padding``)."""
    dtype = getattr(torch, dtype_name)
    rng = SeededRng(head_dim + 2 * is_causal + (dtype_name == "bfloat16") + 7 * T_)
    (q, q64), (k, k64), (v, v64), (dout, dout64) = (
        _rounded(rng, (B, H, T_, head_dim), device, dtype) for _ in range(4)
    )
    mask = mask64 = None
    if key_padding:  # (B, 1, 1, T): the second sequence is padded after 2/3 of its keys
        mask64 = np.ones((B, 1, 1, T_), dtype=bool)
        mask64[1, ..., (2 * T_) // 3 :] = False
        mask = torch.from_numpy(mask64).to(device)
    for x in (q, k, v):
        x.requires_grad_(True)

    def run():
        return T.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, sdpa_backend=sdpa_backend
        )

    out = _run_or_skip(run)
    out.backward(dout)
    if key_padding:
        ref, cache = N.flash_attention(q64, k64, v64, attn_mask=mask64, tile_q=64, tile_k=64)
        grads = N.flash_attention_backward(dout64, cache)
    else:
        ref, cache = N.scaled_dot_product_attention(q64, k64, v64, is_causal=is_causal)
        grads = N.scaled_dot_product_attention_backward(dout64, cache)

    tol = low_precision_tol(dtype_name, max(T_, head_dim))  # reductions over keys and d_k
    what = f"sdpa[{sdpa_backend}]({dtype_name}, causal={is_causal}, d_k={head_dim}, T={T_}" + (
        ", key padding)" if key_padding else ")"
    )
    check = {"tol": tol, "scale_atol": True, "kind": "low_precision"}
    assert out.dtype == dtype
    assert_close(f"output of {what}", out, ref, dtype_name, **check)
    for name, x, g in zip(("dq", "dk", "dv"), (q, k, v), grads, strict=True):
        assert torch.isfinite(x.grad).all(), f"{name} of {what} is not finite"
        assert_close(f"{name} of {what}", x.grad, g, dtype_name, **check)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("T_", LENGTHS, ids=[f"T{t}" for t in LENGTHS])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("sdpa_backend", FUSED_BACKENDS)
def test_fused_sdpa_low_precision_matches_numpy_float64(
    sdpa_backend, dtype_name, is_causal, head_dim, T_
):
    check_fused_attention("cuda", dtype_name, is_causal, head_dim, T_, sdpa_backend)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("T_", [256, 333])
@pytest.mark.parametrize("dtype_name", ["float16", "bfloat16"])
@pytest.mark.parametrize("sdpa_backend", ["auto", "efficient"])
def test_fused_sdpa_key_padding_matches_numpy_flash(sdpa_backend, dtype_name, T_):
    """A boolean key-padding mask (the flash kernel takes no mask; efficient does), against
    the NumPy FlashAttention in float64."""
    check_fused_attention("cuda", dtype_name, False, 64, T_, sdpa_backend, key_padding=True)


def check_kv_cache_low_precision(device: str, dtype_name: str, sdpa_backend: str) -> None:
    """A GPT in ``dtype_name`` on ``device`` with a forced kernel: each step's cached
    next-token logits against the whole window recomputed, past block_size (where the
    cache is refilled)."""
    from torch_impl.sampling import _cached_next_logits

    torch.manual_seed(0)
    config = T.GPTConfig(vocab_size=65, block_size=32, n_layers=2, n_heads=2, d_model=128)
    model = T.GPT(config, dtype=getattr(torch, dtype_name)).to(device).eval()
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 65, (2, 16), generator=gen).to(device)
    cache = model.new_kv_cache()
    tol = low_precision_tol(dtype_name, config.d_model * config.n_layers)
    with T.use_sdpa_backend(sdpa_backend), torch.no_grad():
        for step in range(24):
            full = _run_or_skip(lambda idx=idx: model(idx[:, -config.block_size :])[:, -1, :])
            cached = _cached_next_logits(model, idx, cache)
            assert_close(
                f"cached vs recomputed logits, step {step}, sdpa[{sdpa_backend}], {dtype_name}",
                cached, full, dtype_name, tol=tol, scale_atol=True, kind="low_precision",
            )  # fmt: skip
            new = torch.randint(0, 65, (2, 1), generator=gen).to(device)
            idx = torch.cat([idx, new], dim=1)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("sdpa_backend", ["auto", "flash", "efficient"])
def test_gpt_kv_cache_on_cuda_float16(sdpa_backend):
    check_kv_cache_low_precision("cuda", "float16", sdpa_backend)


@pytest.mark.parametrize("is_causal", [False, True], ids=["full", "causal"])
def test_the_gpu_check_itself_on_cpu(is_causal):
    """The same comparison with PyTorch's CPU flash kernel in bfloat16 (one small case), so
    the GPU tests' code runs in every CI run."""
    check_fused_attention("cpu", "bfloat16", is_causal, 64, 77, "flash")
    check_fused_attention("cpu", "bfloat16", False, 64, 77, "auto", key_padding=True)


def test_the_gpu_kv_cache_check_itself_on_cpu():
    check_kv_cache_low_precision("cpu", "bfloat16", "flash")
