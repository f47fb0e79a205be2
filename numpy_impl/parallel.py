"""Keep every core busy: the one place where NumPy work runs on several threads.

NumPy's ufuncs and its BLAS calls release the GIL while they compute, so
Python threads that each run NumPy on their own block of an array run at the
same time. A layer that wants its elementwise pass on every core (GELU and
LayerNorm, forward and backward) writes the formula once, as a function of
one block of rows, and hands it to :func:`map_rows`::

    y = map_rows(gelu_tanh, x)        # gelu_tanh(x_block) -> y_block, the same rows

FlashAttention hands its batch rows to :func:`for_blocks` (each block writes
its own part of the output). ``data_parallel.DataParallel`` goes one level up,
with :func:`for_blocks` too, as ``torch.nn.DataParallel`` does across GPUs: a
training step's (or an evaluation's) batch cut in two shards, each shard's
whole forward and backward on a thread of its own (on a copy of the model that
shares its weights), the gradients summed. That is the main use of the second
core at small sizes, where one array per NumPy call is too short to share out.

The layer still reads as its formula; this module is plumbing, and it and
``data_parallel.py`` (which runs on this module's pool) are the only places in
``numpy_impl`` that know about threads. It has no twin:
PyTorch runs its kernels on its own thread pool (``torch.get_num_threads()``).

Blocks are cut by the array's shape alone (at most about
:data:`BLOCK_ELEMENTS` elements each, whole rows, shared out evenly), never by
the thread count, and every block is computed by the same NumPy calls
whichever thread runs it: the result is bit-identical with 1 thread or 16.
Blocks of up to 1 MiB (float32) keep each
NumPy call long against the hand-offs between threads: every call of a
formula gives the GIL up and takes it back, and smaller blocks mean more
calls. On a 2-core VM, a GELU forward and backward over a (16384, 512) array
took 40-60 ms with 32 K-element blocks (128 KiB, chosen first to stay in L2)
and 25-31 ms with 256 K; LayerNorm's over (16384, 128), 16-21 ms and 10-11 ms
(each block size in its own process, three rounds alternated).

Threads and BLAS: a block that calls a matrix product (attention's tiles, a
shard's layers) would start BLAS's own threads inside each of ours, two pools
fighting for the same cores. While such blocks run (``for_blocks(...,
blas=True)``), BLAS keeps to the threads the blocks leave free (one each on a
2-core machine) with threadpoolctl (the well-kept library for exactly this),
and gets its own count back after. OpenBLAS computes each entry of a product
on one thread, whatever their number, so this changes no bit either.

``set_num_threads(n)`` or the environment variable ``TWINFORMER_NUM_THREADS``
chooses the thread count (default: the cores this process may use).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from . import fused
from .module import is_grad_enabled, no_grad

BLOCK_ELEMENTS = 262144  # per block: 1 MiB of float32, few GIL hand-offs per formula
# Below this many elements an array is one block: handing out blocks costs a few microseconds
# of Python each, more than a small array's whole formula (the default model's LayerNorm
# inputs, (12 * 64, 128), run faster in one piece)
PARALLEL_MIN_ELEMENTS = 1 << 19

_pool: ThreadPoolExecutor | None = None
_pool_threads = 0
_num_threads: int | None = None
_blas = None  # threadpoolctl's controller, made once (finding the libraries costs ~0.3 ms)
_blas_limit = None  # while blocks run: [(BLAS library, its count before)] for those lowered
_blas_users = 0  # how many callers are inside the BLAS-limited region now
_lock = threading.Lock()
_inside = threading.local()  # .busy: this thread is running a block (the pool's or the caller's)


def _default_threads() -> int:
    env = os.environ.get("TWINFORMER_NUM_THREADS")
    if env is not None:
        return _check_threads(int(env) if env.strip().isdigit() else env, "TWINFORMER_NUM_THREADS")
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _check_threads(n, name: str) -> int:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: expected a positive integer (a thread count), got {n!r}")
    return int(n)


def num_threads() -> int:
    """How many threads :func:`map_rows` and :func:`for_blocks` use.

    Raises:
        ValueError: ``TWINFORMER_NUM_THREADS`` is set but not a positive integer (named).
    """
    global _num_threads
    if _num_threads is None:
        _num_threads = _default_threads()
    return _num_threads


def set_num_threads(n: int) -> None:
    """Use ``n`` threads from now on (1: everything in the calling thread).

    Raises:
        ValueError: ``n`` is not a positive integer (bools and floats included).
    """
    global _num_threads
    _num_threads = _check_threads(n, "n")


def _executor(n: int) -> ThreadPoolExecutor:
    global _pool, _pool_threads
    with _lock:
        if _pool is None or _pool_threads != n:
            if _pool is not None:
                _pool.shutdown(wait=True)
            # n - 1 pool threads: the calling thread works too
            _pool = ThreadPoolExecutor(n - 1, thread_name_prefix="twinformer")
            _pool_threads = n
        return _pool


def _forget_pool_after_fork() -> None:
    """In a forked child: the pool's threads stayed in the parent. A pool object that
    believes it still has them would queue every block for threads that never run it
    (the child waits for ever), so the child starts a pool of its own when it needs one."""
    global _pool, _pool_threads, _blas_limit, _blas_users, _lock
    _pool, _pool_threads = None, 0
    _blas_limit, _blas_users = None, 0
    _lock = threading.Lock()  # it may have been held by a thread that is not here


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


@contextlib.contextmanager
def _blas_limited(limit: int):
    """BLAS on at most ``limit`` threads inside the ``with`` (threadpoolctl): a library
    on more is lowered to ``limit``, one on fewer keeps its count.

    The limit is process-wide, so callers in several threads share it: the
    first one in sets it, the last one out restores the original count (each
    restoring its own would leave BLAS limited after overlapping calls)."""
    global _blas, _blas_limit, _blas_users
    with _lock:
        if _blas is None:
            from threadpoolctl import ThreadpoolController

            _blas = ThreadpoolController()
        if _blas_users == 0:
            _blas_limit = []  # (library, its count before): those lowered, to restore
            for lib in _blas.lib_controllers:
                if lib.user_api != "blas":
                    continue
                before = lib.get_num_threads()
                # a ceiling, never a raise: a BLAS the user keeps on fewer threads (a notebook's
                # OPENBLAS_NUM_THREADS=1, threadpool_limits(1) around the caller) stays there
                if before is not None and before > limit:
                    lib.set_num_threads(limit)
                    _blas_limit.append((lib, before))
        _blas_users += 1
    try:
        yield
    finally:
        with _lock:
            _blas_users -= 1
            if _blas_users == 0:
                for lib, before in _blas_limit:
                    lib.set_num_threads(before)
                _blas_limit = None


@contextlib.contextmanager
def as_block(n_blocks: int):
    """Run the ``with`` body as :func:`for_blocks` runs each of ``n_blocks`` blocks: the
    body's own ``map_rows`` and ``for_blocks`` calls in this thread, BLAS on the threads
    the blocks leave (``num_threads() // n_blocks``, at least one). For a block whose
    siblings run elsewhere: ``labs/plumbing/shard_process.py`` runs a batch's first shard
    here while a worker process runs the second.

    Shapes: none. Raises nothing of its own.
    """
    was, _inside.busy = getattr(_inside, "busy", False), True
    try:
        with _blas_limited(max(1, num_threads() // max(1, n_blocks))):
            yield
    finally:
        _inside.busy = was


def row_blocks(n_rows: int, row_elements: int, block_elements: int = BLOCK_ELEMENTS) -> list:
    """``[(start, stop), ...]``: ``n_rows`` rows cut into blocks of at most about
    ``block_elements`` elements (at least one row each), as few as that allows and of
    equal size but for the last (768 rows of which 512 fit a block: two of 384, so two
    threads share the work evenly, not 512 and 256). Depends on the shape only."""
    most = max(1, block_elements // max(1, row_elements))  # rows that fit in one block
    n_blocks = -(-n_rows // most)  # ceil
    rows = max(1, -(-n_rows // max(1, n_blocks)))  # the rows shared out evenly
    return [(r, min(r + rows, n_rows)) for r in range(0, n_rows, rows)]


def map_rows(
    f: Callable,
    *arrays: np.ndarray,
    axes: int = 1,
    block_elements: int | None = None,
    min_elements: int | None = None,
):
    """``f`` applied to blocks of rows of ``arrays``, the blocks' results stitched together.

    Every array is read as rows: its leading axes flattened, its last ``axes``
    axes kept (``axes=1``: rows of the last axis, as a LayerNorm or a softmax
    sees them; ``axes=2`` for ``(..., T, d)`` attention heads). All arrays must
    have the same leading shape. ``f(*blocks)`` gets one block of each (same
    rows) and returns an array, or a tuple of arrays, with one row per input row
    (any trailing shape); the result has the inputs' leading shape.

    ``f`` must treat rows independently (a row's output depends on that row
    alone): then the result does not depend on how the rows were cut. Blocks hold
    about ``block_elements`` elements each (default :data:`BLOCK_ELEMENTS`). When the
    first array has fewer than ``min_elements`` elements (default
    :data:`PARALLEL_MIN_ELEMENTS`) the arrays go to ``f`` whole: as they are, with
    their own leading axes, when every array is C-ordered (so ``f`` takes any number
    of leading axes, as a formula over the last axis does), else as C-ordered rows
    ``(N, ...)``.

    Shapes: arrays ``(*lead, *row)`` (``row`` the last ``axes`` axes, per array) ->
    each result ``(*lead, *row_out)``.

    Raises:
        ValueError: the arrays' leading shapes differ, or ``f`` returns other than one
            row per input row. Whatever ``f`` raises, in the caller.
    """
    lead = arrays[0].shape[: max(0, arrays[0].ndim - axes)]  # () for a 0-d or 1-d array
    c_order = arrays[0].flags.c_contiguous
    for a in arrays[1:]:
        if a.shape[: max(0, a.ndim - axes)] != lead:
            raise ValueError(f"map_rows: leading shapes differ: {arrays[0].shape} vs {a.shape}")
        c_order = c_order and a.flags.c_contiguous
    least = PARALLEL_MIN_ELEMENTS if min_elements is None else min_elements
    if arrays[0].size < least and lead and c_order:  # one block, most calls: f on the arrays
        # as they are (no reshapes: each costs a call holding the GIL, ~1 us). C order only:
        # the (N, ...) rows are then views of the same memory, so f's bits are the same; any
        # other layout is copied in C order by the reshape below, as it always was (a sum
        # over the last axis of Fortran-ordered rows runs in another order: other bits)
        return _check_rows(f(*arrays), lead)
    n = math.prod(lead)  # math.prod: exact ints, a microsecond faster than np.prod
    flat = [a.reshape(n, *a.shape[len(lead) :]) for a in arrays]  # (N, ...); 0-d: (1,)
    row_elements = math.prod(flat[0].shape[1:])
    blocks = row_blocks(n, row_elements, block_elements or BLOCK_ELEMENTS)
    if flat[0].size < least or len(blocks) <= 1:  # one block: no pool, no copies
        return _unflatten(f(*flat), lead)

    # the outputs' row shapes and dtypes, from f on zero rows (microseconds)
    probe = f(*(a[:0] for a in flat))
    single = not isinstance(probe, tuple)
    outs = [np.empty((n, *r.shape[1:]), dtype=r.dtype) for r in ((probe,) if single else probe)]

    def run(lo: int, hi: int) -> None:
        results = f(*(a[lo:hi] for a in flat))
        for out, r in zip(outs, (results,) if single else results, strict=True):
            if r.shape != (hi - lo, *out.shape[1:]):  # out[lo:hi] = r would broadcast one row
                raise ValueError(
                    f"map_rows: f must return one row per input row; {hi - lo} rows gave "
                    f"shape {r.shape}"
                )
            out[lo:hi] = r

    _run_blocks(run, blocks)
    outs = tuple(o.reshape((*lead, *o.shape[1:])) for o in outs)
    return outs[0] if single else outs


def _check_rows(result, lead: tuple):
    """``result`` (f's array, or tuple of arrays) when each has the leading shape ``lead``."""
    for r in result if isinstance(result, tuple) else (result,):
        if r.shape[: len(lead)] != lead:  # the reshape of the other paths would raise too
            raise ValueError(
                f"map_rows: f must return one row per input row; rows {lead} gave shape {r.shape}"
            )
    return result


def _unflatten(result, lead: tuple):  # a shape tuple, not *args: lead and the rest may be ()
    if isinstance(result, tuple):
        return tuple(r.reshape((*lead, *r.shape[1:])) for r in result)
    return result.reshape((*lead, *result.shape[1:]))


def for_blocks(run: Callable[[int, int], None], blocks: list, *, blas: bool = False) -> None:
    """Call ``run(start, stop)`` for every block, on the pool; ``run`` writes its own output.

    ``blas=True``: ``run`` calls matrix products; meanwhile BLAS keeps to the threads
    the blocks leave free: one when there are as many blocks as threads (attention's
    tiles), ``n // 2`` for two blocks on ``n`` threads (:class:`DataParallel`'s shards).
    ``blocks`` is a list of ``(start, stop)`` pairs (:func:`row_blocks`).

    Raises:
        whatever ``run`` raised in a block, re-raised in the caller once every thread
        has stopped.
    """
    _run_blocks(run, blocks, blas)


def _run_blocks(run: Callable[[int, int], None], blocks: list, blas: bool = False) -> None:
    # a block that itself calls map_rows (a layer inside a layer) runs its blocks in its own
    # thread: waiting for the pool from inside the pool would wait for ever (all busy waiting)
    nested = getattr(_inside, "busy", False)
    n = 1 if nested else max(1, min(num_threads(), len(blocks)))

    # the caller's floating-point error handling (np.errstate), no_grad() and fused.kernels()
    # are per thread: every thread runs its blocks under the caller's, as the caller itself
    # would (its np.seterrcall function too: "call" and "log" without it raise NameError)
    errors = {**np.geterr(), "call": np.geterrcall()}
    grad, kernels = is_grad_enabled(), fused.active()

    def worker(t: int) -> None:  # thread t takes blocks t, t + n, t + 2n, ...: one task each
        was, _inside.busy = getattr(_inside, "busy", False), True
        try:
            with (
                np.errstate(**errors),
                contextlib.nullcontext() if grad else no_grad(),
                fused.kernels(kernels),
            ):
                for lo, hi in blocks[t::n]:
                    run(lo, hi)
        finally:
            _inside.busy = was

    # BLAS gets the threads the blocks leave (one each when every thread runs a block): a BLAS
    # pool started inside each of ours would fight them for the cores, and one that wakes its
    # threads for every small product (attention's tiles) loses more than it gains
    with _blas_limited(max(1, num_threads() // n)) if blas else contextlib.nullcontext():
        if n == 1:
            worker(0)
            return
        # one pool for the thread count, whatever this call's share of it: a pool sized to
        # each call's blocks was shut down and started again whenever that number changed
        pool = _executor(num_threads())
        futures = [pool.submit(worker, t) for t in range(1, n)]
        try:
            worker(0)  # the calling thread is one of the n
        finally:
            wait(futures)  # every block done (or failed) before the caller goes on
        for fut in futures:
            fut.result()  # re-raises a block's exception here, in the caller
