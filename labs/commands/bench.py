"""``python -m labs bench``: how much slower is NumPy than PyTorch, and why.

One training step (forward, backward, AdamW update) is timed at two sizes:
nanoGPT's CPU default (B=12, T=64) and a larger one (B=64, T=256), where
attention's T^2 terms start to dominate. The model is GPTConfig's default
(4 layers, 4 heads, d_model 128) with a 65-character vocabulary; batches are
random tokens, so no corpus is needed. Four rows per size:

* ``numpy``: the NumPy backend as one process of ``labs train`` runs it: the fast
  backend (``numpy_impl/fast.py``: fused kernels, FlashAttention's tiles, the
  flat-buffer AdamW);
* ``numpy-explicit``: the formulas the chapters write (``attn_impl="explicit"``,
  ``fast=False``), the learner's reading path;
* ``torch``: the PyTorch backend as the project trains it (biases, tanh GELU,
  ``F.scaled_dot_product_attention``);
* ``torch-nanogpt``: nanoGPT's configuration, the fastest eager PyTorch
  reference: no biases, exact GELU, ``scaled_dot_product_attention``.

Each (variant, size) runs in a fresh subprocess (``bench --worker``), so one
measurement's memory and thread pools cannot leak into the next. Reported:

* the median step time over ``--iters`` steps (a quarter as many, at least 3,
  at the larger size), after ``--warmup`` untimed ones, and tokens/s;
* the model's FLOPs per step, by PaLM's estimate (Chowdhery et al. 2022,
  appendix B; nanoGPT's ``estimate_mfu``)::

      flops = B T (6 N + 12 n_layers d_model T)

  6 N per token for the matrix products (2 in the forward, 4 in the backward),
  where N counts every matrix a GEMM multiplies: the weights of the Linear
  layers, attention's and the FFN's, plus the LM head's (V x d_model) even when
  tied to the embedding (the head is a real GEMM; the embedding lookups, the
  position table, biases and norm gains are not). The second term is
  attention's QK^T and PV, forward and backward, counted for all T^2 pairs as
  nanoGPT does (the causal mask would halve the useful ones). Achieved GFLOP/s
  is flops / median step;
* sgemm GFLOP/s: float32 matrix products of the step's shapes, timed in the
  same worker, before the steps, with the same threads, by the backend's own
  library (``np.matmul`` or ``torch.matmul``): (BT, C) @ (C, 3C) (q, k, v),
  (BT, C) @ (C, C) (attention's output), (BT, C) @ (C, d_ff) and
  (BT, d_ff) @ (d_ff, C) (the FFN), each n_layers times, and (BT, C) @ (C, V)
  (the head) once; the rate is their total FLOPs over their total time (each
  shape's median call). MFU is achieved GFLOP/s over this rate: the fraction of
  what this machine's GEMM delivers at these shapes that the whole step
  achieves, not a fraction of the hardware's peak;
* peak RSS growth: resident memory before the first step (from
  ``/proc/self/statm``) subtracted from the peak afterwards
  (``getrusage(RUSAGE_SELF).ru_maxrss``): activations, gradients, optimizer
  moments and allocator slack;
* for NumPy, the ``tracemalloc`` peak of one extra step (NumPy reports its
  buffers to tracemalloc; PyTorch does not), measured after the timed steps
  so its bookkeeping does not slow them;
* each worker's threads (torch's ``get_num_threads``; NumPy's BLAS threads, from
  ``threadpoolctl``) and the attention implementation that ran;
* the paired ratio: ``numpy`` and ``torch`` in one more worker, their steps in
  turns on the same batches, each timed step after one of its own backend
  (:func:`measure_paired`): the ratio a drifting machine's speed moves least.

``--profile`` adds where one step's time goes, layer kind by phase, at each
size, for NumPy (timing wrappers) and torch (``torch.profiler``), and the two
side by side by kind (``bench_profile.py``). ``--train-iters N`` (default 0: skipped) adds
the whole run: ``python -m labs train --max-iters N`` on each backend, in a
fresh temporary directory, with its wall time next to its training steps' time
(``bench_train.py``), so the share of start-up, evaluation, checkpoints and the
final sample shows.

Run it on an idle machine: PyTorch's thread pool waits for all its threads at
every operation, so another process on one core can slow a two-thread step
tenfold (seen on a 2-core box); NumPy's own pool (GELU, LayerNorm, attention's
tiles) and its BLAS threads share the cores the same way.
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

SIZES = ((12, 64), (64, 256))  # (batch, block): the default, and a larger one
VOCAB = 65  # Tiny Shakespeare's character count
MiB = 1024 * 1024
#: variant -> (backend, GPTConfig fields over the defaults, backend keyword arguments)
VARIANTS: dict[str, tuple[str, dict, dict]] = {
    "numpy": ("numpy", {}, {}),  # as `labs train` runs it in one process: the fast backend
    # the learner's reading path: the formulas as the chapters write them
    "numpy-explicit": ("numpy", {}, {"attn_impl": "explicit", "fast": False}),
    "torch": ("torch", {}, {}),
    "torch-nanogpt": (
        "torch",
        {"bias": False, "gelu_approximate": "none"},
        {"attn_impl": "sdpa"},
    ),
}
#: the table's and the ratios' rows: numpy over each torch variant
RATIO_PREFIXES = {"torch": "numpy_over_torch", "torch-nanogpt": "numpy_over_torch_nanogpt"}
SGEMM_REPS = 5  # timed repetitions of each GEMM shape (the median is kept)
ROUNDS = 3  # each variant measured this many times, in turns (--rounds)
PAIRED = ("numpy", "torch")  # the two whose steps measure_paired alternates in one process
PAIRED_TURN = 4  # measure_paired's steps per backend per turn, the first one untimed
PAIRED_ITERS_FACTOR = 2  # measure_paired times this many times --iters pairs of steps


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench`` command's options."""
    p.epilog = (
        "Rows (variants), each at B=12, T=64 and B=64, T=256: numpy (one process of `labs "
        "train`: the fast backend); numpy-explicit (the chapters' formulas: --attn-impl "
        "explicit --no-fast); torch (the project's PyTorch model); torch-nanogpt (nanoGPT's "
        "settings: "
        "no biases, exact GELU). Takes a few minutes on both cores; run it on an idle "
        "machine. The columns: docs/speed.md."
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")
    p.add_argument(
        "--iters",
        type=int,
        default=20,
        help="timed steps at B=12, T=64; a quarter of that (at least 3) at B=64, T=256; "
        "shared out among the rounds, rounded up",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=ROUNDS,
        help="measure every variant this many times, in turns, the timed steps shared out "
        "among the rounds and pooled: a machine whose speed drifts slows every variant alike",
    )
    p.add_argument("--warmup", type=int, default=2, help="untimed steps first, in every round")
    p.add_argument("--seed", type=int, default=0, help="weights and random batches")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for torch and for NumPy's BLAS (default: each library's own choice)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="also break one step down by layer kind and phase (forward, backward, "
        "optimizer), at each size, for NumPy and for torch (torch.profiler), and compare "
        "the two kind by kind",
    )
    p.add_argument(
        "--train-iters",
        type=int,
        default=0,
        metavar="N",
        help="also run `labs train --max-iters N` on each backend (in a temporary "
        "directory, removed afterwards) and compare the whole run's wall time with its "
        "training steps' time (default 0: skip)",
    )
    p.add_argument(
        "--data",
        metavar="PATH",
        help="the corpus for --train-iters (default: as `labs train` finds it: "
        "$TWINFORMER_DATA, the cache, or a download)",
    )
    p.add_argument(
        "--train-args",
        default=None,
        metavar="ARGS",
        help="more options for the --train-iters runs, one string (e.g. "
        "'--eval-batches 5 --sample-tokens 0')",
    )
    # Internal: the sizes (tests use tiny ones), and one measurement, run by the parent
    # in a subprocess.
    p.add_argument("--sizes", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--variant", choices=tuple(VARIANTS), help=argparse.SUPPRESS)
    p.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--batch-size", type=int, default=12, help=argparse.SUPPRESS)
    p.add_argument("--block-size", type=int, default=64, help=argparse.SUPPRESS)


# -- the model's arithmetic -----------------------------------------------------------------
def _config(model_config: dict):
    """The full GPTConfig (defaults filled in) of ``model_config``."""
    from numpy_impl.gpt import GPTConfig

    return GPTConfig.from_dict(dict(model_config))


def matmul_parameters(model_config: dict) -> int:
    """N of the FLOP estimate: the entries of every matrix a GEMM multiplies.

    Per block: q, k, v and the output projection (4 d_model^2) and the FFN's two
    matrices (three for SwiGLU) of d_model x d_ff; plus the LM head (V x d_model),
    counted even when tied to the token embedding. Biases, norm gains and the
    embedding lookups are not matrix products and are left out.
    """
    c = _config(model_config)
    C = c.d_model
    d_ff = c.d_ff if c.d_ff is not None else 4 * C
    ffn_matrices = 3 if c.ffn == "swiglu" else 2
    return c.n_layers * (4 * C * C + ffn_matrices * C * d_ff) + C * c.vocab_size


def model_flops_per_step(model_config: dict, B: int, T: int) -> int:
    """FLOPs of one training step (forward and backward) on a (B, T) batch.

    ``B T (6 N + 12 n_layers d_model T)``, N from :func:`matmul_parameters`
    (PaLM's appendix B, as in nanoGPT's ``estimate_mfu``). The optimizer's
    elementwise work is not counted.
    """
    c = _config(model_config)
    N = matmul_parameters(model_config)
    return B * T * (6 * N + 12 * c.n_layers * c.d_model * T)


def gemm_shapes(model_config: dict, B: int, T: int) -> list[tuple[int, int, int, int]]:
    """``(count, M, K, N)``: the forward GEMMs of one step, (M, K) @ (K, N), and how
    many times each runs (the backward's have the same FLOPs, operands transposed)."""
    c = _config(model_config)
    C, M, L = c.d_model, B * T, c.n_layers
    d_ff = c.d_ff if c.d_ff is not None else 4 * C
    return [
        (L, M, C, 3 * C),  # qkv_proj
        (L, M, C, C),  # out_proj
        (L, M, C, d_ff),  # fc1
        (L, M, d_ff, C),  # fc2
        (1, M, C, c.vocab_size),  # the head
    ]


def measure_sgemm(shapes, library: str, seed: int = 0) -> dict:
    """Float32 GEMM throughput at ``shapes`` (from :func:`gemm_shapes`).

    Each shape: one untimed call, then :data:`SGEMM_REPS` timed repetitions of
    enough calls to last about 2 ms; its time is the median repetition per call.

    Returns:
        ``{"sgemm_gflops": total FLOPs / total time, counts included,
        "sgemm_shapes": [{"m", "k", "n", "count", "gflops"}, ...]}``.
    """
    rng = np.random.default_rng(seed)
    if library == "torch":
        import torch

        def operands(M, K, N):
            a = torch.from_numpy(rng.standard_normal((M, K), dtype=np.float32))
            b = torch.from_numpy(rng.standard_normal((K, N), dtype=np.float32))
            out = torch.empty(M, N)
            return lambda: torch.matmul(a, b, out=out)
    else:

        def operands(M, K, N):
            a = rng.standard_normal((M, K), dtype=np.float32)
            b = rng.standard_normal((K, N), dtype=np.float32)
            out = np.empty((M, N), np.float32)
            return lambda: np.matmul(a, b, out=out)

    total_flops = total_time = 0.0
    per_shape = []
    for count, M, K, N in shapes:
        call = operands(M, K, N)
        t0 = time.perf_counter()
        call()
        calls = max(1, min(1000, round(2e-3 / max(time.perf_counter() - t0, 1e-7))))
        reps = []
        for _ in range(SGEMM_REPS):
            t0 = time.perf_counter()
            for _ in range(calls):
                call()
            reps.append((time.perf_counter() - t0) / calls)
        seconds, flops = statistics.median(reps), 2.0 * M * K * N
        total_flops += count * flops
        total_time += count * seconds
        per_shape.append({"m": M, "k": K, "n": N, "count": count, "gflops": flops / seconds / 1e9})
    return {"sgemm_gflops": total_flops / total_time / 1e9, "sgemm_shapes": per_shape}


# -- one measurement (in a worker process) ------------------------------------------------
def _rss_bytes() -> int:
    """Current resident set size, from /proc/self/statm (field 2, in pages)."""
    with open("/proc/self/statm") as f:
        resident_pages = int(f.read().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def thread_pools() -> list[dict]:
    """This process's native thread pools (BLAS, OpenMP), as ``threadpoolctl`` sees them."""
    from threadpoolctl import threadpool_info

    keys = ("user_api", "internal_api", "num_threads")
    return [{k: pool.get(k) for k in keys} for pool in threadpool_info()]


def _blas_threads(pools: list[dict]) -> int | None:
    return next((p["num_threads"] for p in pools if p["user_api"] == "blas"), None)


def measure(variant: str, B: int, T: int, iters: int, warmup: int, seed: int = 0) -> dict:
    """Time ``iters`` training steps of a default-sized GPT at batch B, block T.

    Args:
        variant: a key of :data:`VARIANTS` (``"numpy"``, ``"torch"``, ``"torch-nanogpt"``).

    Returns:
        a JSON-serialisable dict: ``backend``, ``variant``, ``median_step_s``,
        ``min_step_s``, ``tokens_per_s``, ``model_flops_per_step``,
        ``achieved_gflops``, ``sgemm_gflops``, ``mfu``, ``rss_before_mib``,
        ``peak_rss_growth_mib``, ``tracemalloc_peak_mib`` (NumPy only, else None),
        ``threads``, ``thread_pools``, ``attn_impl``, ``model_config``...
    """
    from ..plumbing.backends import make_backend

    backend_name, overrides, kwargs = VARIANTS[variant]
    model_config = {"vocab_size": VOCAB, "block_size": T, **overrides}  # the rest: defaults
    backend = make_backend(backend_name, model_config, seed=seed, **kwargs)
    sgemm = measure_sgemm(gemm_shapes(model_config, B, T), backend_name, seed)
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

    pools = thread_pools()
    if backend_name == "torch":
        import torch

        threads = torch.get_num_threads()
        attn_impl = backend.model.attn_impl
    else:
        threads = _blas_threads(pools)  # NumPy's own: BLAS (OPENBLAS_NUM_THREADS, ...)
        attn_impl = getattr(backend, "attn_impl", None)  # None: one attention, no setting
    median = statistics.median(times)
    flops = model_flops_per_step(model_config, B, T)
    achieved = flops / median / 1e9
    return {
        "backend": backend_name,
        "variant": "default" if variant == backend_name else variant.split("-", 1)[1],
        "name": variant,
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "median_step_s": median,
        "min_step_s": min(times),
        "step_times_s": times,
        "tokens_per_s": B * T / median,
        "model_flops_per_step": flops,
        "achieved_gflops": achieved,
        **sgemm,
        "mfu": achieved / sgemm["sgemm_gflops"],
        "rss_before_mib": rss_before / MiB,
        "peak_rss_growth_mib": peak_growth / MiB,
        "tracemalloc_peak_mib": traced_peak,
        "threads": threads,
        "thread_pools": pools,
        "attn_impl": attn_impl,
        "model_config": model_config,
        "num_parameters": backend.num_parameters(),
    }


def measure_paired(B: int, T: int, iters: int, warmup: int, seed: int = 0) -> dict:
    """numpy and torch (:data:`PAIRED`) in one process, their training steps alternated
    in turns of :data:`PAIRED_TURN` steps.

    Each turn runs a few steps of one backend, then the same batches on the other (numpy
    first in even turns, torch first in odd ones); each backend's first step in a turn is
    not timed, so every timed step follows a step of its own backend, as in training. The
    two backends' k-th timed steps in a turn make a pair: a drift in the machine's
    speed slows both alike, and the median of the pairs' ratios is the run's most
    drift-proof numpy / torch ratio. Why turns and not single steps: torch's OpenMP
    threads keep spinning for a few milliseconds after its step, on the cores the next
    step needs; a NumPy step right after a torch step ran its forward 3.3-4.3 ms slower
    (docs/speed.md, "The paired ratio"). Memory and MFU are not measured here (two
    models share the process): :func:`measure`'s workers report them.

    Returns:
        a JSON-serialisable dict: ``variants``, ``batch_size``, ``block_size``,
        ``iters`` (pairs), ``turn_steps``, ``step_times_s`` and ``median_step_s`` per
        variant (timed steps, in order), and ``median_pair_ratio`` (median over the
        pairs of numpy's time / torch's).
    """
    from ..plumbing.backends import make_backend

    backends = {}
    for variant in PAIRED:
        backend_name, overrides, kwargs = VARIANTS[variant]
        model_config = {"vocab_size": VOCAB, "block_size": T, **overrides}
        backends[variant] = make_backend(backend_name, model_config, seed=seed, **kwargs)
    rng = np.random.default_rng(seed)
    times: dict[str, list] = {variant: [] for variant in PAIRED}
    for _ in range(warmup):
        x, y = rng.integers(0, VOCAB, (B, T)), rng.integers(0, VOCAB, (B, T))
        for variant in PAIRED:
            backends[variant].train_step(x, y)
    turn = 0
    while len(times[PAIRED[0]]) < iters:
        timed = min(PAIRED_TURN - 1, iters - len(times[PAIRED[0]]))
        # one untimed batch, then the timed ones: the same batches for both backends
        batches = [rng.integers(0, VOCAB, (2, B, T)) for _ in range(timed + 1)]
        for variant in PAIRED[:: -1 if turn % 2 else 1]:
            for j, (x, y) in enumerate(batches):  # x, y: (B, T) each
                t0 = time.perf_counter()
                backends[variant].train_step(x, y)
                if j:  # its first step in the turn: untimed (the other's threads settle)
                    times[variant].append(time.perf_counter() - t0)
        turn += 1
    first, second = PAIRED
    ratios = [a / b for a, b in zip(times[first], times[second], strict=True)]
    return {
        "name": "paired",
        "variants": list(PAIRED),
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "turn_steps": PAIRED_TURN,
        "step_times_s": times,
        "median_step_s": {variant: statistics.median(t) for variant, t in times.items()},
        "median_pair_ratio": statistics.median(ratios),
    }


# -- the parent: workers, ratios, table ---------------------------------------------------
def parse_sizes(text: str | None) -> tuple[tuple[int, int], ...]:
    """``"12x64,64x256"`` -> ``((12, 64), (64, 256))``; None -> :data:`SIZES`.

    Raises:
        UserError: naming ``--sizes`` and the expected form.
    """
    if text is None:
        return SIZES
    sizes = []
    for part in text.split(","):
        b, sep, t = part.strip().lower().partition("x")
        if not (sep and b.isdigit() and t.isdigit() and int(b) > 0 and int(t) > 0):
            raise UserError(
                f"--sizes: expected BxT[,BxT...] with positive integers (e.g. 12x64,64x256), "
                f"got {text!r}"
            )
        sizes.append((int(b), int(t)))
    return tuple(sizes)


def size_key(B: int, T: int) -> str:
    return f"b{B}_t{T}"


def _iters_at(args: argparse.Namespace, index: int) -> int:
    """``--iters`` at the first size; a quarter (at least 3, at most --iters) beyond it."""
    return args.iters if index == 0 else min(args.iters, max(3, args.iters // 4))


def _worker_env(args: argparse.Namespace) -> dict:
    env = dict(os.environ)
    if args.threads is not None:
        # Read by the thread pools when they start, so set before the worker imports numpy.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(args.threads)
    return env


def _run_worker(variant: str, B: int, T: int, iters: int, args, profile: bool = False) -> dict:
    """One measurement in a fresh process: ``variant`` a key of :data:`VARIANTS`, or
    ``"paired"`` (:func:`measure_paired`). A failed worker gives ``{..., "error": its
    last line of stderr}``."""
    cmd = [sys.executable, "-m", "labs", "bench", "--worker"]
    cmd += ["--paired"] if variant == "paired" else ["--variant", variant]
    cmd += ["--batch-size", str(B), "--block-size", str(T), "--iters", str(iters)]
    cmd += ["--warmup", str(args.warmup), "--seed", str(args.seed)]
    if profile:
        cmd.append("--profile")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_worker_env(args))
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        backend = "numpy+torch" if variant == "paired" else VARIANTS[variant][0]
        return {
            "backend": backend,
            "name": variant,
            "batch_size": B,
            "block_size": T,
            "error": last,
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


def pool_rounds(rounds: list[dict], sgemm_runs: list[dict] | None = None) -> dict:
    """One variant's result from its rounds (:func:`measure`'s dicts, in order).

    The step times of every round are pooled: ``median_step_s`` and ``min_step_s`` are
    theirs, ``iters`` their count, and the rates follow from the pooled median. The sgemm
    rate is the median of ``sgemm_runs``' (default: these rounds; ``bench`` passes every
    round of every variant of the same library at this size, so the two NumPy rows and
    the two torch rows each share one rate, from six timings instead of three), with that
    run's ``sgemm_shapes``: MFU compares the pooled step with a typical GEMM rate of the
    same run. Memory is the largest round's. ``round_median_step_s`` keeps each round's
    own median. A round that failed makes the result that round's error.
    """
    failed = [r for r in rounds if "error" in r]
    if failed:
        return failed[0]
    pooled = dict(rounds[0])
    times = [t for r in rounds for t in r["step_times_s"]]
    median = statistics.median(times)
    by_sgemm = sorted(sgemm_runs or rounds, key=lambda r: r["sgemm_gflops"])
    typical = by_sgemm[(len(by_sgemm) - 1) // 2]  # the median run (the lower of two)
    achieved = pooled["model_flops_per_step"] / median / 1e9
    traced = [r["tracemalloc_peak_mib"] for r in rounds if r["tracemalloc_peak_mib"] is not None]
    pooled.update(
        iters=len(times),
        rounds=len(rounds),
        median_step_s=median,
        min_step_s=min(times),
        step_times_s=times,
        round_median_step_s=[r["median_step_s"] for r in rounds],
        tokens_per_s=pooled["batch_size"] * pooled["block_size"] / median,
        achieved_gflops=achieved,
        sgemm_gflops=typical["sgemm_gflops"],
        sgemm_shapes=typical["sgemm_shapes"],
        mfu=achieved / typical["sgemm_gflops"],
        peak_rss_growth_mib=max(r["peak_rss_growth_mib"] for r in rounds),
        tracemalloc_peak_mib=max(traced) if traced else None,
    )
    return pooled


def _result(results: list[dict], name: str, B: int, T: int) -> dict | None:
    for r in results:
        if (r["name"], r["batch_size"], r["block_size"]) == (name, B, T) and "error" not in r:
            return r
    return None


def _ratio(results: list[dict], other: str, B: int, T: int) -> float | None:
    numpy_, torch_ = _result(results, "numpy", B, T), _result(results, other, B, T)
    if numpy_ is None or torch_ is None:
        return None
    return numpy_["median_step_s"] / torch_["median_step_s"]


def ratio_key(prefix: str, index: int, B: int, T: int) -> str:
    """The first size's ratio is unsuffixed (``numpy_over_torch_step_ratio``), the
    others name their size (``numpy_over_torch_step_ratio_b64_t256``)."""
    return f"{prefix}_step_ratio" + ("" if index == 0 else f"_{size_key(B, T)}")


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _check_args(args: argparse.Namespace) -> None:
    if args.iters < 1:
        raise UserError(f"--iters must be >= 1, got {args.iters}")
    if args.warmup < 0:
        raise UserError(f"--warmup must be >= 0, got {args.warmup}")
    if args.rounds < 1:
        raise UserError(f"--rounds must be >= 1, got {args.rounds}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    if args.train_iters < 0:
        raise UserError(
            f"--train-iters must be >= 0 (0 skips the training runs), got {args.train_iters}"
        )
    if (args.data is not None or args.train_args is not None) and args.train_iters == 0:
        given = "--data" if args.data is not None else "--train-args"
        raise UserError(f"{given} is for the training runs: give --train-iters N too")
    for option, value in (("--batch-size", args.batch_size), ("--block-size", args.block_size)):
        if args.worker and value < 1:  # the worker's own size (the parent's come from --sizes)
            raise UserError(f"{option} must be >= 1, got {value}")
    parse_sizes(args.sizes)


def main(args: argparse.Namespace) -> int:
    _check_args(args)
    if args.worker:
        if args.variant is None and not args.paired:
            raise UserError("bench --worker needs --variant or --paired")
        B, T = args.batch_size, args.block_size
        if args.paired:
            result = measure_paired(B, T, args.iters, args.warmup, args.seed)
        elif args.profile:
            from .bench_profile import profile_numpy_step, profile_torch_step

            profiler = profile_torch_step if args.variant == "torch" else profile_numpy_step
            result = profiler(B, T, args.iters, args.warmup, args.seed)
        else:
            result = measure(args.variant, B, T, args.iters, args.warmup, args.seed)
        print(json.dumps(result))
        return 0

    sizes = parse_sizes(args.sizes)
    train_setup = None
    if args.train_iters:
        from .bench_train import prepare_training

        train_setup = prepare_training(args)  # bad --data or --train-args: before any timing

    def say(message: str) -> None:
        if not args.json:
            print(message, file=sys.stderr, flush=True)

    load_before = os.getloadavg()[0]
    results, paired = [], []
    for index, (B, T) in enumerate(sizes):
        per_round = -(-_iters_at(args, index) // args.rounds)  # the steps shared out, rounded up
        runs: dict[str, list] = {variant: [] for variant in VARIANTS}
        for r in range(args.rounds):
            # in turns, the order reversed every other round: a drift in the machine's speed
            # reaches every variant alike, and none is always first after the previous size
            for variant in list(VARIANTS)[:: -1 if r % 2 else 1]:
                say(f"measuring {variant} at B={B}, T={T} (round {r + 1} of {args.rounds}) ...")
                runs[variant].append(_run_worker(variant, B, T, per_round, args))
        for variant in VARIANTS:  # each library's GEMM rate: all its rounds at this size
            library = VARIANTS[variant][0]
            same = [r for v in VARIANTS if VARIANTS[v][0] == library for r in runs[v]]
            results.append(pool_rounds(runs[variant], [r for r in same if "error" not in r]))
        say(f"measuring numpy and torch at B={B}, T={T}, their steps alternated in turns ...")
        paired.append(
            _run_worker("paired", B, T, PAIRED_ITERS_FACTOR * _iters_at(args, index), args)
        )
    profiles, torch_profiles = {}, {}
    if args.profile:
        for index, (B, T) in enumerate(sizes):
            for backend, found in (("numpy", profiles), ("torch", torch_profiles)):
                say(f"profiling a {backend} step at B={B}, T={T} ...")
                found[size_key(B, T)] = _run_worker(
                    backend, B, T, _iters_at(args, index), args, profile=True
                )
    train = None
    if train_setup is not None:
        from .bench_train import run_training

        train = run_training(train_setup, args, _worker_env(args), say)

    import torch

    summary: dict = {"results": results, "rounds": args.rounds, "paired": paired}
    for index, ((B, T), pair) in enumerate(zip(sizes, paired, strict=True)):
        key = ratio_key("numpy_over_torch_paired", index, B, T)
        summary[key] = pair.get("median_pair_ratio")  # None if the worker failed
    for prefix_of in ("torch", "torch-nanogpt"):
        for index, (B, T) in enumerate(sizes):
            key = ratio_key(RATIO_PREFIXES[prefix_of], index, B, T)
            summary[key] = _ratio(results, prefix_of, B, T)
    for name in VARIANTS:
        mfus = {}
        for B, T in sizes:
            r = _result(results, name, B, T)
            mfus[size_key(B, T)] = None if r is None else r["mfu"]
        summary[f"{name.replace('-', '_')}_mfu"] = mfus
    if args.profile:
        from .bench_profile import compare_profiles

        summary["profile"] = profiles
        summary["profile_torch"] = torch_profiles
        summary["profile_comparison"] = {
            key: compare_profiles(profiles[key], torch_profiles[key])
            for key in profiles
            if "error" not in profiles[key] and "error" not in torch_profiles[key]
        }
    if train is not None:
        summary.update(train)
    summary["machine"] = {
        "cpus": os.cpu_count(),
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "torch": torch.__version__,
        # labs/plumbing/runtime.py: how long OpenBLAS's idle threads poll (2^N cycles)
        "openblas_thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT"),
    }
    if args.json:
        print(json.dumps(summary, allow_nan=False))
        return 0
    _print_table(summary, sizes, load_before)
    return 0


def _print_table(summary: dict, sizes, load_before: float) -> None:
    header = (
        f"{'size':<14}{'variant':<15}{'median step':>13}{'tokens/s':>11}{'GFLOP/s':>9}"
        f"{'sgemm':>8}{'MFU':>7}{'peak RSS +':>12}{'tracemalloc':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in summary["results"]:
        size = f"B={r['batch_size']} T={r['block_size']}"
        if "error" in r:
            print(f"{size:<14}{r['name']:<15}  failed: {r['error']}")
            continue
        traced = r["tracemalloc_peak_mib"]
        traced = "-" if traced is None else f"{traced:.0f} MiB"
        print(
            f"{size:<14}{r['name']:<15}{r['median_step_s'] * 1e3:>10.1f} ms"
            f"{r['tokens_per_s']:>11,.0f}{r['achieved_gflops']:>9.1f}{r['sgemm_gflops']:>8.1f}"
            f"{r['mfu']:>7.0%}{r['peak_rss_growth_mib']:>8.0f} MiB{traced:>13}"
        )
    flops = {(r["batch_size"], r["block_size"]): r for r in summary["results"] if "error" not in r}
    for B, T in sizes:
        if (B, T) in flops:
            print(
                f"model FLOPs per step at B={B}, T={T}: "
                f"{flops[B, T]['model_flops_per_step'] / 1e9:.2f} GFLOP"
            )
    for prefix_of, label in (("torch", "torch"), ("torch-nanogpt", "torch-nanogpt")):
        for index, (B, T) in enumerate(sizes):
            key = ratio_key(RATIO_PREFIXES[prefix_of], index, B, T)
            print(f"numpy / {label} step time at B={B}, T={T}: {_fmt(summary[key], '.2f')}x")
    for index, ((B, T), pair) in enumerate(zip(sizes, summary["paired"], strict=True)):
        ratio = summary[ratio_key("numpy_over_torch_paired", index, B, T)]
        label = f"numpy / torch at B={B}, T={T}, steps alternated in turns in one process"
        if "error" in pair:
            print(f"{label}: failed: {pair['error']}")
        else:
            print(f"{label} (median of {pair['iters']} pairs): {_fmt(ratio, '.2f')}x")
    print(
        "(the paired ratio, steps alternated in turns in one process, is the one to compare "
        "when the machine's speed drifts: docs/speed.md, 'The paired ratio')"
    )
    if "profile" in summary:
        from .bench_profile import format_comparison, format_profile

        for key, profile in summary["profile"].items():
            torch_profile = summary["profile_torch"][key]
            for name, found in (("numpy", profile), ("torch", torch_profile)):
                print()
                if "error" in found:
                    print(f"{name} profile {key} failed: {found['error']}")
                else:
                    print("\n".join(format_profile(found)))
            if key in summary["profile_comparison"]:
                print()
                print("\n".join(format_comparison(profile, torch_profile)))
    if "train" in summary:
        from .bench_train import format_training

        print()
        print("\n".join(format_training(summary)))
    ok = [r for r in summary["results"] if "error" not in r]
    if any(r["mfu"] > 1 for r in ok):
        print(
            "note: an MFU above 100% means the machine was busier while that worker timed its "
            "matrix products than during its steps (docs/speed.md); compare MFUs from a quiet run"
        )
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(
            f"warning: the machine was busy before the benchmark (load average {load_before:.1f} "
            f"on {os.cpu_count()} cores). Multi-threaded torch suffers most from sharing cores: "
            "rerun on an idle machine, or compare with --threads 1."
        )
