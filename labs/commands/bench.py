"""``python -m labs bench``: one training step, NumPy against torch, each as ``labs train`` runs it.

A step (forward, backward, gradient all-reduce, AdamW) of the default model (4 layers,
4 heads, d_model 128, vocabulary 65) on random tokens, at B=12, T=64 (nanoGPT's CPU
default) and B=64, T=256. ``numpy`` runs as ``labs train --backend numpy`` does: one rank
per core (``--processes``), started by train's own launcher, each on its rows of the batch,
the gradients all-reduced by gloo; ``torch`` as ``labs train --backend torch``: one process.
``--variants`` adds ``numpy-explicit`` (the chapters' formulas) and ``torch-nanogpt``
(nanoGPT's settings: no biases, exact GELU).

Each (variant, size) runs ``--rounds`` times in a fresh process, the variants in turns
(the order reversed every other round); the timed steps of the rounds are pooled.
Reported: the median step, tokens/s, GFLOP/s (PaLM's estimate, as nanoGPT's
``estimate_mfu``), the peak resident memory growth summed over the ranks, NumPy's
``tracemalloc`` peak (one more step), and the NumPy/torch ratios. ``--profile`` adds
``cProfile``'s view of a few steps (rank 0): the functions with the most time of their own.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np

from .shared import at_least, int_range, seed_int
from .train_distributed import launch, processes_to_start

SIZES = ((12, 64), (64, 256))  # (batch, context): nanoGPT's CPU default, and a larger one
VOCAB = 65  # Tiny Shakespeare's characters
MiB = 2**20
#: variant -> (backend, GPTConfig fields over the defaults, backend keyword arguments)
VARIANTS = {
    "numpy": ("numpy", {}, {}),
    "numpy-explicit": ("numpy", {}, {"attn_impl": "explicit", "fast": False}),
    "torch": ("torch", {}, {}),
    "torch-nanogpt": ("torch", {"bias": False, "gelu_approximate": "none"}, {}),
}
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PROFILE_ROWS = 15


def sizes_type(text: str) -> tuple[tuple[int, int], ...]:
    """``--sizes``: ``"12x64,64x256"`` -> ``((12, 64), (64, 256))`` (argparse ``type=``)."""
    try:
        sizes = tuple(tuple(int(n) for n in part.lower().split("x")) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or any(len(s) != 2 or min(s) < 1 for s in sizes):
        raise argparse.ArgumentTypeError(f"expected BxT[,BxT...], positive, got {text!r}")
    return sizes


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench`` command's options."""
    p.epilog = "Run it on an idle machine; compare ratios from one run. See docs/speed.md."
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")
    p.add_argument(
        "--variants",
        nargs="+",
        choices=tuple(VARIANTS),
        default=["numpy", "torch"],
        metavar="VARIANT",
        help=f"of {', '.join(VARIANTS)} (default: numpy torch)",
    )
    p.add_argument("--sizes", type=sizes_type, default=SIZES, metavar="BxT,...",
                   help="batch x context (default: 12x64,64x256)")  # fmt: skip
    p.add_argument(
        "--iters", type=at_least(1), default=20, help="timed steps (a quarter at size 2+)"
    )
    p.add_argument("--warmup", type=at_least(0), default=2, help="untimed steps in each process")
    p.add_argument("--rounds", type=at_least(1), default=3, help="fresh processes per variant")
    p.add_argument("--processes", type=at_least(1), help="NumPy's ranks (default: as train)")
    p.add_argument(
        "--threads", type=int_range(1, 1024), help="threads per process (default: as train)"
    )
    p.add_argument("--seed", type=seed_int, default=0, help="weights and batches")
    p.add_argument("--profile", action="store_true", help="list the busiest functions (cProfile)")
    p.add_argument("--worker", choices=tuple(VARIANTS), help=argparse.SUPPRESS)


def model_flops_per_step(model_config: dict, B: int, T: int) -> int:
    """FLOPs of one training step: ``B T (6 N + 12 n_layers d_model T)``.

    PaLM's estimate (Chowdhery et al. 2022, appendix B; nanoGPT's ``estimate_mfu``):
    N counts every matrix a GEMM multiplies (attention's four, the FFN's, the LM head even
    when tied); the second term is attention's QK^T and PV for all T^2 pairs.
    """
    from numpy_impl.gpt import GPTConfig

    c = GPTConfig.from_dict(dict(model_config))
    C, d_ff = c.d_model, c.d_ff or 4 * c.d_model
    N = c.n_layers * (4 * C * C + (3 if c.ffn == "swiglu" else 2) * C * d_ff) + C * c.vocab_size
    return B * T * (6 * N + 12 * c.n_layers * C * T)


def table(records: list[dict], columns: dict[str, tuple[str, str]]) -> str:
    """``records`` as a Markdown table, one row each: ``columns`` maps each header to the
    record's key and its format; a record with an ``error`` shows it after its known cells."""
    rows = [list(columns)]
    for r in records:
        cells = ["-" if r.get(k) is None else f.format(r[k]) for k, f in columns.values()]
        if "error" in r:
            known = [c for c, (k, _) in zip(cells, columns.values(), strict=True) if k in r]
            cells = (known + [f"failed: {r['error']}"] + [""] * len(cells))[: len(cells)]
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = []
    for first, *rest in rows:
        numbers = (c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))
        lines.append("| " + " | ".join([first.ljust(widths[0]), *numbers]) + " |")
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:  # field 2: resident pages
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


# -- one measurement: a worker process, or one rank of the group train's launcher starts ----
def measure(variant: str, B: int, T: int, iters: int, warmup: int, seed: int, profile: bool):
    """Time ``iters`` training steps after ``warmup``; under a process group each rank runs
    its rows of every batch, as ``labs train`` does. Returns rank 0's JSON-ready result
    (None on the other ranks)."""
    from ..plumbing.backends import make_backend
    from .train_distributed import _init_distributed, _shutdown_distributed

    rank, world = _init_distributed(SimpleNamespace(device="cpu"))
    name, overrides, kwargs = VARIANTS[variant]
    model_config = {"vocab_size": VOCAB, "block_size": T, **overrides}
    backend = make_backend(name, model_config, seed=seed, **kwargs)
    if world > 1:
        backend.distribute()  # as train_steps.build_backend: rank 0's weights, all-reduce
    rng, b = np.random.default_rng(seed), B // world
    batches = [
        rng.integers(0, VOCAB, (2, B, T))[:, rank * b : (rank + 1) * b]
        for _ in range(warmup + iters + 1)
    ]
    profiler = cProfile.Profile() if profile and rank == 0 else None
    rss_before, times = _rss_bytes(), []
    for i, (x, y) in enumerate(batches[:-1]):
        if profiler is not None and i == warmup:
            profiler.enable()
        t0 = time.perf_counter()
        backend.train_step(x, y)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    if profiler is not None:
        profiler.disable()
    memory = [_peak_rss_bytes() - rss_before, None]
    if name == "numpy":  # NumPy reports its buffers to tracemalloc (PyTorch does not)
        tracemalloc.start()
        backend.train_step(*batches[-1])
        memory[1] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    ranks = [memory]
    if world > 1:
        import torch.distributed as dist

        ranks = [None] * world
        dist.all_gather_object(ranks, memory)
    threads = _threads(name)
    _shutdown_distributed()
    if rank:
        return None
    result = {"variant": variant, "backend": name, "batch_size": B, "block_size": T,
              "processes": world, "threads": threads, "attn_impl": backend.model.attn_impl,
              "model_config": model_config, "step_times_s": times,
              "peak_rss_growth_mib": sum(r[0] for r in ranks) / MiB}  # fmt: skip
    if memory[1] is not None:  # summed over the ranks, as the resident memory
        result["tracemalloc_peak_mib"] = sum(r[1] for r in ranks) / MiB
    if profiler is not None:
        result["profile"] = _profile_rows(profiler, iters)
    return result


def _threads(backend: str) -> int | None:
    if backend == "torch":
        import torch

        return torch.get_num_threads()
    from threadpoolctl import threadpool_info

    return next((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), None)


def _profile_rows(profiler: cProfile.Profile, steps: int) -> list[dict]:
    """The functions with the most time of their own, per step (``pstats``)."""
    stats = pstats.Stats(profiler).strip_dirs().stats  # {function: (cc, calls, own, cum, ...)}
    top = sorted(stats.items(), key=lambda item: -item[1][2])[:PROFILE_ROWS]
    return [{"function": pstats.func_std_string(function), "calls": calls / steps,
             "own_ms": own * 1e3 / steps, "cumulative_ms": cum * 1e3 / steps}
            for function, (_, calls, own, cum, _) in top]  # fmt: skip


def _worker(args: argparse.Namespace) -> int:
    (B, T), iters = args.sizes[0], args.iters
    n = args.processes or 1
    if n > 1 and "WORLD_SIZE" not in os.environ:
        return launch(args, n)  # the ranks run this same command line
    result = measure(args.worker, B, T, iters, args.warmup, args.seed, args.profile)
    if result is not None:
        print(json.dumps(result, allow_nan=False))
    return 0


# -- the parent: workers in turns, pooled, the table ---------------------------------------
def _run_worker(args, variant: str, B: int, T: int, iters: int, profile: bool = False) -> dict:
    """One measurement in fresh processes; a failed one is ``{..., "error": its last line}``."""
    processes = 1
    if VARIANTS[variant][0] == "numpy":  # train's count: lowered to divide the batch (said)
        like_train = SimpleNamespace(processes=args.processes, backend="numpy", batch_size=B)
        with contextlib.redirect_stdout(sys.stderr):
            processes = processes_to_start(SimpleNamespace(**vars(like_train), resume=None))
    cmd = [sys.executable, "-m", "labs", "bench", "--worker", variant, "--sizes", f"{B}x{T}"]
    cmd += ["--iters", str(iters), "--warmup", str(args.warmup), "--seed", str(args.seed)]
    cmd += ["--processes", str(processes)] + (["--profile"] if profile else [])
    env = dict(os.environ)
    if args.threads is not None:
        env.update({var: str(args.threads) for var in THREAD_VARS})
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode == 0:
        with contextlib.suppress(ValueError, IndexError):
            return json.loads(proc.stdout.strip().splitlines()[-1])
    last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
    return {"variant": variant, "batch_size": B, "block_size": T, "error": last}


def pool(rounds: list[dict]) -> dict:
    """One variant's result at one size: its rounds' step times pooled; memory the
    largest round's; a failed round makes the result that round's error."""
    failed = [r for r in rounds if "error" in r]
    if failed:
        return failed[0]
    times = [t for r in rounds for t in r["step_times_s"]]
    median, r = statistics.median(times), rounds[0]
    flops = model_flops_per_step(r["model_config"], r["batch_size"], r["block_size"])
    traced = [r["tracemalloc_peak_mib"] for r in rounds if "tracemalloc_peak_mib" in r]
    return {**r, "rounds": len(rounds), "iters": len(times), "step_times_s": times,
            "median_step_s": median, "median_step_ms": median * 1e3, "min_step_s": min(times),
            "layout": f"{r['processes']} x {r['threads']}",
            "tokens_per_s": r["batch_size"] * r["block_size"] / median,
            "model_flops_per_step": flops, "achieved_gflops": flops / median / 1e9,
            "peak_rss_growth_mib": max(r["peak_rss_growth_mib"] for r in rounds),
            "tracemalloc_peak_mib": max(traced) if traced else None}  # fmt: skip


def _ratio(results: list[dict], key: str, B: int, T: int) -> float | None:
    """numpy's ``key`` over torch's at (B, T); None if either is missing or failed."""
    found = {r["variant"]: r for r in results if (r["batch_size"], r["block_size"]) == (B, T)}
    numpy_, torch_ = found.get("numpy", {}), found.get("torch", {})
    if key not in numpy_ or key not in torch_ or not torch_[key]:
        return None
    return numpy_[key] / torch_[key]


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args)

    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    load_before = os.getloadavg()[0]
    results, profiles = [], []
    for index, (B, T) in enumerate(args.sizes):
        iters = args.iters if index == 0 else min(args.iters, max(3, args.iters // 4))
        runs: dict[str, list] = {v: [] for v in args.variants}
        for r in range(args.rounds):  # in turns: a drifting machine slows every variant alike
            for v in args.variants[:: -1 if r % 2 else 1]:
                say(f"measuring {v} at B={B}, T={T} (round {r + 1} of {args.rounds}) ...")
                runs[v].append(_run_worker(args, v, B, T, -(-iters // args.rounds)))
        results += [pool(runs[v]) for v in args.variants]
        for v in args.variants if args.profile else ():
            say(f"profiling {v} at B={B}, T={T} ...")
            profiles.append(_run_worker(args, v, B, T, max(1, iters // args.rounds), True))
    import torch

    summary: dict = {"results": results, "rounds": args.rounds}
    for index, (B, T) in enumerate(args.sizes):
        suffix = "" if index == 0 else f"_b{B}_t{T}"  # the first size's keys unsuffixed
        summary[f"numpy_over_torch_step_ratio{suffix}"] = _ratio(results, "median_step_s", B, T)
        rss = _ratio(results, "peak_rss_growth_mib", B, T)
        summary[f"numpy_over_torch_peak_rss_ratio{suffix}"] = rss
    if args.profile:
        summary["profile"] = profiles
    load = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    summary["machine"] = {"cpus": os.cpu_count(), "python": sys.version.split()[0],
                          "numpy": np.__version__, "torch": torch.__version__,
                          "load_avg_1min": load}  # fmt: skip
    if args.json:
        print(json.dumps(summary, allow_nan=False))
    else:
        _print_table(summary, args.sizes, load_before)
    return 0


COLUMNS = {  # the table: header -> (result key, format)
    "B": ("batch_size", "{}"), "T": ("block_size", "{}"), "variant": ("variant", "{}"),
    "ranks x threads": ("layout", "{}"), "median step": ("median_step_ms", "{:.1f} ms"),
    "tokens/s": ("tokens_per_s", "{:,.0f}"), "GFLOP/s": ("achieved_gflops", "{:.1f}"),
    "peak RSS +": ("peak_rss_growth_mib", "{:.0f} MiB"),
    "tracemalloc": ("tracemalloc_peak_mib", "{:.0f} MiB"),
}  # fmt: skip
PROFILE_COLUMNS = {
    "function": ("function", "{}"), "own ms": ("own_ms", "{:.2f}"),
    "cumulative ms": ("cumulative_ms", "{:.2f}"), "calls": ("calls", "{:.0f}"),
}  # fmt: skip


def _print_table(summary: dict, sizes, load_before: float) -> None:
    print(table(summary["results"], COLUMNS))
    for index, (B, T) in enumerate(sizes):
        suffix = "" if index == 0 else f"_b{B}_t{T}"
        for what, key in (("step time", "step"), ("peak RSS growth", "peak_rss")):
            value = summary[f"numpy_over_torch_{key}_ratio{suffix}"]
            shown = "-" if value is None else f"{value:.2f}x"
            print(f"numpy / torch {what} at B={B}, T={T}: {shown}")
    for p in summary.get("profile", ()):
        where = f"{p['variant']} at B={p['batch_size']}, T={p['block_size']}"
        print(f"\ncProfile of {where}, rank 0, per step:")
        print(table(p.get("profile", [p]), PROFILE_COLUMNS))
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(f"warning: busy machine (load average {load_before:.1f}): rerun it on an idle one")
