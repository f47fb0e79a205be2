"""``python -m labs bench-attention``: time and memory of explicit vs tiled/fused attention.

Forward + backward of causal attention on random ``(B, n_heads, T, d_k)``
inputs, at several T. The explicit formula writes the ``(T, T)`` scores (and
their softmax, and their gradient); FlashAttention never does. Implementations:

* ``numpy-explicit``: ``numpy_impl.scaled_dot_product_attention`` and its backward;
* ``numpy-flash``: ``numpy_impl.flash_attention`` (tiled, online softmax) and its backward;
* ``torch-explicit``: ``torch_impl.scaled_dot_product_attention(impl="explicit")`` + autograd;
* ``torch-fused``: ``F.scaled_dot_product_attention`` with PyTorch's choice of kernel;
* on CUDA also each kernel forced (``torch-flash``, ``torch-efficient``,
  ``torch-cudnn``, ``torch-math``) with ``torch_impl.use_sdpa_backend``.

Memory is the peak *extra* memory of one forward + backward, beyond the inputs:

* NumPy: the ``tracemalloc`` peak (NumPy reports its buffers to tracemalloc);
* PyTorch on CPU: peak RSS growth (``ru_maxrss`` minus the RSS before), so each
  (implementation, T) runs in a fresh subprocess (``--worker``);
* CUDA: ``torch.cuda.max_memory_allocated`` minus what was allocated before.

Times are medians over ``--iters`` runs after one warm-up. On a shared machine
compare the ratios printed at the end, which are measured in the same run.
``scripts/gpu_check.sh`` runs ``--device cuda`` at T = 1k, 4k, 16k.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from .. import UserError
from .bench import MiB, _peak_rss_bytes, _rss_bytes

CPU_IMPLS = ("numpy-explicit", "numpy-flash", "torch-explicit", "torch-fused")
CUDA_IMPLS = (
    "torch-explicit",
    "torch-fused",
    "torch-flash",
    "torch-efficient",
    "torch-cudnn",
    "torch-math",
)
DEFAULTS = {  # device -> (lengths, batch, heads, head dim, dtype)
    "cpu": ((256, 1024, 4096), 1, 4, 64, "float32"),
    "cuda": ((1024, 4096, 16384), 1, 8, 64, "bfloat16"),
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench-attention`` command's options."""
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=None,
        help="sequence lengths T (default: 256 1024 4096 on cpu, 1024 4096 16384 on cuda)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="B (default: 1)")
    p.add_argument("--heads", type=int, default=None, help="n_heads (default: 4 cpu, 8 cuda)")
    p.add_argument("--head-dim", type=int, default=None, help="d_k (default: 64)")
    p.add_argument(
        "--dtype",
        choices=("float32", "float64", "float16", "bfloat16"),
        default=None,
        help="default: float32 on cpu (NumPy has no bfloat16), bfloat16 on cuda",
    )
    p.add_argument("--impls", nargs="+", default=None, help="a subset of the implementations")
    p.add_argument("--iters", type=int, default=3, help="timed runs per measurement")
    p.add_argument("--tile", type=int, default=128, help="numpy-flash tile length (both axes)")
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)


def _settings(args: argparse.Namespace) -> dict:
    lengths, B, H, d_k, dtype = DEFAULTS[args.device]
    s = {
        "device": args.device,
        "lengths": args.lengths or list(lengths),
        "B": args.batch_size or B,
        "H": args.heads or H,
        "d_k": args.head_dim or d_k,
        "dtype": args.dtype or dtype,
        "iters": args.iters,
        "tile": args.tile,
    }
    impls = CPU_IMPLS if args.device == "cpu" else CUDA_IMPLS
    s["impls"] = args.impls or list(impls)
    unknown = sorted(set(s["impls"]) - set(impls))
    if unknown:
        raise UserError(f"--impls: unknown on {args.device}: {unknown}; choose from {impls}")
    if any(T < 1 for T in s["lengths"]) or min(s["B"], s["H"], s["d_k"], s["iters"]) < 1:
        raise UserError("--lengths, --batch-size, --heads, --head-dim and --iters must be >= 1")
    if args.device == "cpu" and s["dtype"] in ("float16", "bfloat16"):
        if any(i.startswith("numpy") for i in s["impls"]):
            raise UserError(f"--dtype {s['dtype']}: NumPy has no such dtype; use float32")
    return s


def _traced_peak_bytes(fn) -> int:
    import tracemalloc

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _numpy_step(impl: str, q, k, v, dout, tile: int):
    import numpy_impl as N

    def step():
        if impl == "numpy-flash":
            out, cache = N.flash_attention(q, k, v, is_causal=True, tile_q=tile, tile_k=tile)
            N.flash_attention_backward(dout, cache)
        else:
            out, cache = N.scaled_dot_product_attention(q, k, v, is_causal=True)
            N.scaled_dot_product_attention_backward(dout, cache)

    return step


def _torch_step(impl: str, q, k, v, dout):
    import torch_impl as T

    backend = impl.removeprefix("torch-")

    def step():
        for x in (q, k, v):
            x.grad = None
        if impl == "torch-explicit":
            out = T.scaled_dot_product_attention(q, k, v, is_causal=True, impl="explicit")
        else:
            sdpa_backend = "auto" if backend == "fused" else backend
            out = T.scaled_dot_product_attention(q, k, v, is_causal=True, sdpa_backend=sdpa_backend)
        out.backward(dout)

    return step


def measure_attention(
    impl: str,
    T: int,
    B: int = 1,
    H: int = 4,
    d_k: int = 64,
    dtype: str = "float32",
    device: str = "cpu",
    iters: int = 3,
    tile: int = 128,
    seed: int = 0,
) -> dict:
    """Time and peak extra memory of one causal attention forward + backward.

    Returns:
        a JSON-ready dict: ``impl``, ``T``, ``median_ms``, ``peak_mib`` and
        ``memory_method`` (``"tracemalloc"``, ``"rss"`` or ``"cuda"``); for
        NumPy also ``peak_rss_mib``. ``error`` instead of the numbers when the
        kernel cannot run the inputs (a forced CUDA kernel) or memory runs out.
    """
    rng = np.random.default_rng(seed)
    shape = (B, H, T, d_k)
    result = {"impl": impl, "T": T, "B": B, "H": H, "d_k": d_k, "dtype": dtype, "device": device}
    if impl.startswith("numpy"):
        q, k, v, dout = (rng.standard_normal(shape).astype(dtype) for _ in range(4))
        step = _numpy_step(impl, q, k, v, dout, tile)
        _numpy_step(impl, *(x[..., :8, :] for x in (q, k, v, dout)), tile)()  # warm the code
        rss_before = _rss_bytes()
        step()  # warm-up; also sets the RSS peak
        result["peak_rss_mib"] = (_peak_rss_bytes() - rss_before) / MiB
        times = []
        for _ in range(iters):
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        result["peak_mib"] = _traced_peak_bytes(step) / MiB
        result["memory_method"] = "tracemalloc"
    else:
        import torch

        tdtype = getattr(torch, dtype)
        q, k, v, dout = (
            torch.from_numpy(rng.standard_normal(shape)).to(device=device, dtype=tdtype)
            for _ in range(4)
        )
        for x in (q, k, v):
            x.requires_grad_(True)
        step = _torch_step(impl, q, k, v, dout)
        sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        # a tiny run first: PyTorch's one-off costs (code paged in, thread pools, kernel
        # selection) must not count as the measured step's memory
        tiny = [x[..., :8, :].detach().clone().requires_grad_(x.requires_grad) for x in (q, k, v)]
        _torch_step(impl, *tiny, dout[..., :8, :])()
        try:
            if device == "cuda":
                sync()
                torch.cuda.reset_peak_memory_stats()
                before = torch.cuda.memory_allocated()
            else:
                rss_before = _rss_bytes()
            step()  # warm-up; also sets the memory peak
            sync()
            if device == "cuda":
                result["peak_mib"] = (torch.cuda.max_memory_allocated() - before) / MiB
                result["memory_method"] = "cuda"
            else:
                result["peak_mib"] = (_peak_rss_bytes() - rss_before) / MiB
                result["memory_method"] = "rss"
            times = []
            for _ in range(iters):
                t0 = time.perf_counter()
                step()
                sync()
                times.append(time.perf_counter() - t0)
        except (RuntimeError, MemoryError) as e:  # a forced kernel that cannot run, or OOM
            result["error"] = str(e).strip().splitlines()[0][:120]
            if device == "cuda":
                torch.cuda.empty_cache()
            return result
    result["median_ms"] = statistics.median(times) * 1e3
    return result


def _run_worker(impl: str, T: int, s: dict) -> dict:
    cmd = [sys.executable, "-m", "labs", "bench-attention", "--worker", "--impl", impl]
    cmd += ["--lengths", str(T), "--batch-size", str(s["B"]), "--heads", str(s["H"])]
    cmd += ["--head-dim", str(s["d_k"]), "--dtype", s["dtype"], "--iters", str(s["iters"])]
    cmd += ["--tile", str(s["tile"])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"impl": impl, "T": T, "error": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratios(results: list[dict], pairs) -> list[tuple[str, int, float, float]]:
    """(label, T, time ratio, memory ratio) of ``new`` over ``old`` for each pair and T."""
    by = {(r["impl"], r["T"]): r for r in results if "error" not in r}
    out = []
    for new, old in pairs:
        for T in sorted({r["T"] for r in results}):
            a, b = by.get((new, T)), by.get((old, T))
            if a and b and b["peak_mib"] > 0:
                time_ratio = a["median_ms"] / b["median_ms"]
                out.append((f"{new} / {old}", T, time_ratio, a["peak_mib"] / b["peak_mib"]))
    return out


def main(args: argparse.Namespace) -> int:
    s = _settings(args)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: CUDA is not available on this machine")
    if args.worker:
        if args.impl is None:
            raise UserError("bench-attention --worker needs --impl")
        shape = (s["lengths"][0], s["B"], s["H"], s["d_k"], s["dtype"])
        print(json.dumps(measure_attention(args.impl, *shape, "cpu", s["iters"], s["tile"])))
        return 0

    load_before = os.getloadavg()[0]
    results = []
    for T in s["lengths"]:
        for impl in s["impls"]:
            if not args.json:
                print(f"measuring {impl} at T={T} ...", file=sys.stderr, flush=True)
            if args.device == "cpu":
                results.append(_run_worker(impl, T, s))
            else:
                shape = (T, s["B"], s["H"], s["d_k"], s["dtype"])
                results.append(measure_attention(impl, *shape, "cuda", s["iters"]))
    pairs = [("numpy-flash", "numpy-explicit"), ("torch-fused", "torch-explicit")]
    if args.device == "cuda":
        pairs = [(i, "torch-explicit") for i in CUDA_IMPLS if i != "torch-explicit"]
    ratios = _ratios(results, pairs)
    summary = {
        "settings": {k: v for k, v in s.items() if k != "impls"},
        "results": results,
        "ratios": [
            {"pair": p, "T": T, "time_ratio": tr, "memory_ratio": mr} for p, T, tr, mr in ratios
        ],
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    tiles = f", numpy-flash tiles {s['tile']}" if args.device == "cpu" else ""
    print(
        f"causal attention forward + backward, B={s['B']}, n_heads={s['H']}, d_k={s['d_k']}, "
        f"{s['dtype']}, {args.device}{tiles}"
    )
    header = f"{'T':>6}  {'implementation':<16}{'fwd+bwd':>12}{'peak extra memory':>22}"
    print(header)
    print("-" * len(header))
    for r in results:
        if "error" in r:
            print(f"{r['T']:>6}  {r['impl']:<16}  n/a: {r['error']}")
            continue
        print(
            f"{r['T']:>6}  {r['impl']:<16}{r['median_ms']:>9.1f} ms"
            f"{r['peak_mib']:>11,.1f} MiB  {r['memory_method']}"
        )
    if ratios:
        print("\nratios (same run):")
        for pair, T, tr, mr in ratios:
            print(f"  {pair:<34} T={T:<6} time {tr:6.2f}x   peak memory {mr:7.4f}x")
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(
            f"note: the machine was busy (load average {load_before:.1f} on {os.cpu_count()} "
            "cores): absolute times are inflated; the ratios are measured side by side."
        )
    return 0
