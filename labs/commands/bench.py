"""``python -m labs bench``: how much slower is NumPy than PyTorch, and why.

One training step (forward, backward, AdamW update) is timed on each backend
at two sizes: nanoGPT's CPU default (B=12, T=64) and a larger one (B=64,
T=256), where attention's T^2 terms start to dominate. Batches are random
tokens from a 65-character vocabulary, so no corpus is needed.

Each (backend, size) runs in a fresh subprocess (``bench --worker``), so one
measurement's memory and thread pools cannot leak into the next. Reported:

* the median step time over ``--iters`` steps (a quarter as many at the larger
  size), after ``--warmup`` untimed ones;
* peak RSS growth: resident memory before the first step (from
  ``/proc/self/statm``) subtracted from the peak afterwards
  (``getrusage(RUSAGE_SELF).ru_maxrss``): activations, gradients, optimizer
  moments and allocator slack;
* for NumPy, the ``tracemalloc`` peak of one extra step (NumPy reports its
  buffers to tracemalloc; PyTorch does not), measured after the timed steps
  so its bookkeeping does not slow them.

Run it on an idle machine: PyTorch's thread pool waits for all its threads at
every operation, so another process on one core can slow a two-thread step
tenfold (seen on a 2-core box), while NumPy suffered far less there.
``--threads 1`` levels the field; the JSON records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

from .. import UserError
from ..plumbing.backends import BACKENDS, make_backend

SIZES = ((12, 64), (64, 256))  # (batch, block): the default, and a larger one
RATIO_KEYS = ("numpy_over_torch_step_ratio", "numpy_over_torch_step_ratio_b64_t256")
VOCAB = 65  # Tiny Shakespeare's character count
MiB = 1024 * 1024


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench`` command's options."""
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")
    p.add_argument(
        "--iters",
        type=int,
        default=20,
        help="timed steps at B=12, T=64; a quarter of that (at least 3) at B=64, T=256",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    p.add_argument("--seed", type=int, default=0, help="weights and random batches")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for torch and for NumPy's BLAS (default: each library's own choice)",
    )
    # Internal: one measurement, run by the parent in a subprocess.
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--backend", choices=BACKENDS, help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=12, help=argparse.SUPPRESS)
    p.add_argument("--block-size", type=int, default=64, help=argparse.SUPPRESS)


def _rss_bytes() -> int:
    """Current resident set size, from /proc/self/statm (field 2, in pages)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def measure(backend_name: str, B: int, T: int, iters: int, warmup: int, seed: int = 0) -> dict:
    """Time ``iters`` training steps of a default-sized GPT at batch B, block T.

    Returns:
        a JSON-serialisable dict: ``median_step_s``, ``min_step_s``,
        ``tokens_per_s``, ``rss_before_mib``, ``peak_rss_growth_mib``,
        ``tracemalloc_peak_mib`` (NumPy only, else None), ``threads``.
    """
    model_config = {"vocab_size": VOCAB, "block_size": T}  # other fields: GPTConfig defaults
    backend = make_backend(backend_name, model_config, seed=seed)
    rng = np.random.default_rng(seed)
    batches = [
        (rng.integers(0, VOCAB, (B, T)), rng.integers(0, VOCAB, (B, T)))
        for _ in range(warmup + iters + 1)
    ]
    rss_before = _rss_bytes()
    times = []
    for i, (x, y) in enumerate(batches[:-1]):
        t0 = time.perf_counter()
        backend.train_step(x, y)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    peak_growth = _peak_rss_bytes() - rss_before

    traced_peak = None
    if backend_name == "numpy":
        import tracemalloc

        tracemalloc.start()
        backend.train_step(*batches[-1])
        traced_peak = tracemalloc.get_traced_memory()[1] / MiB
        tracemalloc.stop()

    if backend_name == "torch":
        import torch

        threads = torch.get_num_threads()
    else:
        threads = None  # NumPy's BLAS picks its own (OPENBLAS_NUM_THREADS, ...)
    median = statistics.median(times)
    return {
        "backend": backend_name,
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "median_step_s": median,
        "min_step_s": min(times),
        "tokens_per_s": B * T / median,
        "rss_before_mib": rss_before / MiB,
        "peak_rss_growth_mib": peak_growth / MiB,
        "tracemalloc_peak_mib": traced_peak,
        "threads": threads,
        "num_parameters": backend.num_parameters(),
    }


def _run_worker(backend: str, B: int, T: int, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "labs", "bench", "--worker", "--backend", backend]
    iters = args.iters if (B, T) == SIZES[0] else max(3, args.iters // 4)  # big steps are slow
    cmd += ["--batch-size", str(B), "--block-size", str(T), "--iters", str(iters)]
    cmd += ["--warmup", str(args.warmup), "--seed", str(args.seed)]
    env = dict(os.environ)
    if args.threads is not None:
        # Read by the thread pools when they start, so set before the worker imports numpy.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.threads)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"backend": backend, "batch_size": B, "block_size": T, "error": last}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _ratio(results: list[dict], B: int, T: int) -> float | None:
    by_backend = {
        r["backend"]: r
        for r in results
        if (r["batch_size"], r["block_size"]) == (B, T) and "error" not in r
    }
    if set(by_backend) != set(BACKENDS):
        return None
    return by_backend["numpy"]["median_step_s"] / by_backend["torch"]["median_step_s"]


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def main(args: argparse.Namespace) -> int:
    if args.iters < 1 or args.warmup < 0:
        raise UserError("--iters must be >= 1 and --warmup >= 0")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.worker:
        if args.backend is None:
            raise UserError("bench --worker needs --backend")
        result = measure(
            args.backend, args.batch_size, args.block_size, args.iters, args.warmup, args.seed
        )
        print(json.dumps(result))
        return 0

    load_before = os.getloadavg()[0]
    results = []
    for B, T in SIZES:
        for backend in BACKENDS:
            if not args.json:
                print(f"measuring {backend} at B={B}, T={T} ...", file=sys.stderr, flush=True)
            results.append(_run_worker(backend, B, T, args))

    import torch

    summary = {
        "results": results,
        **{key: _ratio(results, B, T) for key, (B, T) in zip(RATIO_KEYS, SIZES, strict=True)},
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "torch": torch.__version__,
        },
    }
    if args.json:
        print(json.dumps(summary))
        return 0

    header = (
        f"{'size':<14}{'backend':<9}{'median step':>13}{'tokens/s':>11}"
        f"{'peak RSS +':>12}{'tracemalloc':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        size = f"B={r['batch_size']} T={r['block_size']}"
        if "error" in r:
            print(f"{size:<14}{r['backend']:<9}  failed: {r['error']}")
            continue
        traced = r["tracemalloc_peak_mib"]
        traced = "-" if traced is None else f"{traced:.0f} MiB"
        print(
            f"{size:<14}{r['backend']:<9}{r['median_step_s'] * 1e3:>10.1f} ms"
            f"{r['tokens_per_s']:>11,.0f}{r['peak_rss_growth_mib']:>8.0f} MiB{traced:>13}"
        )
    for key, (B, T) in zip(RATIO_KEYS, SIZES, strict=True):
        print(f"numpy / torch step time at B={B}, T={T}: {_fmt(summary[key], '.2f')}x")
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(
            f"warning: the machine was busy before the benchmark (load average {load_before:.1f} "
            f"on {os.cpu_count()} cores). Multi-threaded torch suffers most from sharing cores: "
            "rerun on an idle machine, or compare with --threads 1."
        )
    return 0
