"""The thread pool of ``numpy_impl/parallel.py``: same answers, bit for bit, on any thread count.

The pool cuts arrays into blocks by their shape alone, so the thread count
can change who computes a block, never what it computes. These tests hold it
to that: :func:`map_rows` against the function on the whole array,
FlashAttention and whole training runs with 1, 2 and 3 threads compared with
``np.array_equal`` (not a tolerance), errors raised in a block reaching the
caller, and BLAS's own thread count restored after each parallel region.
"""

from __future__ import annotations

import math
import os
import platform
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numpy_impl import parallel
from numpy_impl.attention import split_heads
from numpy_impl.flash_attention import flash_attention, flash_attention_backward

THREADS = (1, 2, 3)


@pytest.fixture(autouse=True)
def restore_threads():
    before = parallel.num_threads()
    yield
    parallel.set_num_threads(before)


def gelu_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    t = np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x)))
    return 0.5 * x * (1 + t), t


def layernorm_rows(x: np.ndarray) -> np.ndarray:
    return (x - x.mean(axis=-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + 1e-5)


@given(
    lead=st.lists(st.integers(0, 9), min_size=1, max_size=3),
    width=st.integers(1, 40),
    block=st.sampled_from([1, 7, 64, 1000, parallel.BLOCK_ELEMENTS]),
    dtype=st.sampled_from([np.float32, np.float64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_map_rows_is_the_function_on_the_whole_array(lead, width, block, dtype, seed):
    x = np.random.default_rng(seed).standard_normal((*lead, width)).astype(dtype)
    whole_y, whole_t = gelu_rows(x)
    whole_norm = layernorm_rows(x)
    for n in THREADS:
        parallel.set_num_threads(n)
        y, t = parallel.map_rows(gelu_rows, x, block_elements=block, min_elements=0)
        assert y.shape == t.shape == x.shape and y.dtype == dtype
        # elementwise: the same bits however the rows were cut
        assert np.array_equal(y, whole_y) and np.array_equal(t, whole_t), n
        norm = parallel.map_rows(layernorm_rows, x, block_elements=block, min_elements=0)
        np.testing.assert_allclose(norm, whole_norm, rtol=1e-5 if dtype == np.float32 else 1e-12)
        parallel.set_num_threads(1)
        again = parallel.map_rows(layernorm_rows, x, block_elements=block, min_elements=0)
        assert np.array_equal(norm, again)


def test_map_rows_with_two_axes_per_row_and_several_arrays():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3, 4, 6)), rng.standard_normal((5, 3, 4, 2))
    parallel.set_num_threads(2)
    out = parallel.map_rows(
        lambda a, b: a[..., :2] * b, a, b, axes=2, block_elements=8, min_elements=0
    )
    assert np.array_equal(out, a[..., :2] * b)


def test_map_rows_rejects_mismatched_rows():
    with pytest.raises(ValueError, match="leading shapes differ"):
        parallel.map_rows(np.add, np.zeros((3, 4)), np.zeros((2, 4)))


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", None])
def test_set_num_threads_names_the_argument(bad):
    with pytest.raises(ValueError, match="n: expected a positive integer"):
        parallel.set_num_threads(bad)


@pytest.mark.parametrize("bad", ["0", "two", "-3", ""])
def test_a_bad_environment_variable_is_named(monkeypatch, bad):
    monkeypatch.setattr(parallel, "_num_threads", None)
    monkeypatch.setenv("TWINFORMER_NUM_THREADS", bad)
    with pytest.raises(ValueError, match="TWINFORMER_NUM_THREADS: expected a positive integer"):
        parallel.num_threads()


def test_an_error_in_a_block_reaches_the_caller_once_every_thread_stopped():
    done = []

    def run(lo, hi):
        time.sleep(0.002)
        done.append(lo)
        if lo == 3:
            raise ZeroDivisionError("block 3")

    parallel.set_num_threads(2)
    with pytest.raises(ZeroDivisionError, match="block 3"):
        parallel.for_blocks(run, [(i, i + 1) for i in range(8)])
    seen = list(done)
    time.sleep(0.05)
    assert done == seen, "a block still ran after the error reached the caller"
    assert 0 in done and 3 in done


def _wait_until_no_caller_holds_blas(timeout: float = 10.0) -> None:
    """BLAS's thread count is process-wide: a thread another test left running a block
    (one that ended on a timeout) could still hold it at one when this test reads the
    count "before". Wait for it to leave the region first."""
    import time

    deadline = time.monotonic() + timeout
    while parallel._blas_users and time.monotonic() < deadline:
        time.sleep(0.01)
    assert parallel._blas_users == 0, "a caller is still inside the BLAS-on-one-thread region"


def test_blas_gets_its_threads_back():
    from threadpoolctl import threadpool_info

    _wait_until_no_caller_holds_blas()
    before = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    parallel.set_num_threads(2)
    seen = []

    def run(lo, hi):  # inside the region BLAS runs on one thread
        seen.extend(lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas")

    parallel.for_blocks(run, [(0, 1)], blas=True)
    after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
    assert after == before
    assert all(n == 1 for n in seen)


@pytest.mark.parametrize("causal", [True, False])
def test_flash_attention_is_bit_identical_for_any_thread_count(causal):
    rng = np.random.default_rng(1)
    B, H, T, d = 5, 3, 37, 8
    qkv = rng.standard_normal((B, T, 3 * H * d)).astype(np.float32)
    q, k, v = (split_heads(a, H) for a in np.split(qkv, 3, axis=-1))  # strided views
    dout = rng.standard_normal((B, H, T, d)).astype(np.float32)
    results = []
    for n in THREADS:
        parallel.set_num_threads(n)
        out, cache = flash_attention(q, k, v, is_causal=causal, tile_q=16, tile_k=8)
        results.append((out, *flash_attention_backward(dout, cache)))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            assert np.array_equal(a, b)


@pytest.mark.parametrize("attn_impl", ["flash", "explicit"])
def test_training_losses_are_bit_identical_for_1_and_2_threads(attn_impl, monkeypatch):
    """The same seed gives the same losses whatever the thread count (the model is
    small, so blocks are made small too: every GELU and LayerNorm runs in blocks)."""
    from labs.plumbing.backends import make_backend

    monkeypatch.setattr(parallel, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "BLOCK_ELEMENTS", 256)

    config = {"vocab_size": 11, "block_size": 24, "n_layers": 2, "n_heads": 2, "d_model": 16}
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 11, (6, 24)), rng.integers(0, 11, (6, 24))) for _ in range(4)]
    runs = []
    for n in (1, 2):
        parallel.set_num_threads(n)
        backend = make_backend("numpy", config, seed=3, attn_impl=attn_impl)
        for block in backend.model.blocks:
            block.attn.flash_tile = 8  # T = 24: three tiles
        losses = [backend.train_step(x, y)["loss"] for x, y in batches]
        runs.append((losses, backend.state_dict()))
    assert runs[0][0] == runs[1][0]
    for name, w in runs[0][1].items():
        assert np.array_equal(w, runs[1][1][name]), name


def test_map_rows_takes_0d_and_1d_arrays():  # GELU is elementwise: any shape, a scalar too
    from numpy_impl.activations import GELU, gelu_tanh

    for x in (np.array(1.5), np.array([0.5, -2.0, 3.0])):
        y = parallel.map_rows(gelu_tanh, x)
        assert y.shape == x.shape
        assert np.array_equal(y, gelu_tanh(x))
        gelu = GELU()
        assert gelu(x).shape == x.shape and gelu.backward(np.ones_like(x)).shape == x.shape


def test_map_rows_inside_a_block_does_not_wait_for_itself():
    # a block whose function calls map_rows again (a layer inside a layer) used to wait for
    # a pool whose every thread was busy waiting: a deadlock. Nested blocks run in place.
    import threading

    parallel.set_num_threads(2)
    x = np.random.default_rng(0).standard_normal((64, 8))

    def outer(rows):  # rows: (r, 8) -> (r, 8), through an inner map_rows on 8 blocks
        wide = np.repeat(rows, 8, axis=0)  # (8r, 8)
        inner = parallel.map_rows(lambda a: a * 2.0, wide, block_elements=8, min_elements=0)
        return inner[::8]

    result = []
    worker = threading.Thread(
        target=lambda: result.append(
            parallel.map_rows(outer, x, block_elements=64, min_elements=0)
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "map_rows inside map_rows deadlocked"
    assert np.array_equal(result[0], x * 2.0)


def test_blas_gets_its_threads_back_after_overlapping_callers():
    # the BLAS limit is process-wide: two callers whose blocks overlap in time must leave
    # BLAS with its original thread count (restoring each one's own saved count did not)
    import threading

    from threadpoolctl import threadpool_info

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    _wait_until_no_caller_holds_blas()
    before = blas_threads()
    parallel.set_num_threads(1)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first(lo, hi):  # enters first, leaves while the second caller is still inside
        first_in.set()
        assert second_in.wait(5)

    def second(lo, hi):
        assert first_in.wait(5)
        second_in.set()
        assert first_out.wait(5)

    other = threading.Thread(
        target=parallel.for_blocks, args=(second, [(0, 1)]), kwargs={"blas": True}
    )
    other.start()
    parallel.for_blocks(first, [(0, 1)], blas=True)
    first_out.set()
    other.join(5)
    assert blas_threads() == before


def test_a_bad_environment_variable_stops_train_before_out_is_touched(
    monkeypatch, tmp_path, capsys
):
    # the pool reads the variable at its first use, deep in a step: the command line checks it
    # first, so a typo is one line naming it, and --out is neither created nor locked
    from labs.__main__ import main

    monkeypatch.setattr(parallel, "_num_threads", None)
    monkeypatch.setenv("TWINFORMER_NUM_THREADS", "0")
    out = tmp_path / "run"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 40)
    argv = ["train", "--backend", "numpy", "--data", str(corpus), "--out", str(out)]
    assert main([*argv, "--max-iters", "1", "--sample-tokens", "0"]) == 2
    assert "TWINFORMER_NUM_THREADS" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("value", ["abc", "-3", "4.5"])
def test_a_bad_openblas_timeout_stops_train_before_out_is_touched(
    value, monkeypatch, tmp_path, capsys
):
    # OpenBLAS reads a value that is not a whole number as 0 (its long default): said at once
    from labs.__main__ import main

    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", value)
    out = tmp_path / "run"
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 40)
    argv = ["train", "--backend", "numpy", "--data", str(corpus), "--out", str(out)]
    assert main([*argv, "--max-iters", "1", "--sample-tokens", "0"]) == 2
    err = capsys.readouterr().err
    assert "OPENBLAS_THREAD_TIMEOUT" in err and repr(value) in err
    assert not out.exists()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_gets_a_pool_of_its_own():
    # the pool's threads stay in the parent: a child forked after the pool started (a test
    # runner, multiprocessing's default start on Linux) queued its blocks for threads that
    # never ran them, and waited for ever
    parallel.set_num_threads(2)
    x = np.random.default_rng(0).standard_normal((64, 8))
    double = lambda a: a * 2.0  # noqa: E731
    parallel.map_rows(double, x, block_elements=8, min_elements=0)  # the pool exists now
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the blocks ran and were right
        ok = np.array_equal(parallel.map_rows(double, x, block_elements=8, min_elements=0), 2 * x)
        os._exit(0 if ok else 1)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's map_rows never finished")
    assert os.waitstatus_to_exitcode(status) == 0


def test_calls_with_different_block_counts_share_one_pool(monkeypatch):
    # n = min(threads, blocks) threads work on a call; the pool used to be sized to n, so
    # alternating 3-block and 16-block calls stopped and started threads on every call
    made = []

    class CountingPool(parallel.ThreadPoolExecutor):
        def __init__(self, *args, **kwargs):
            made.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(parallel, "ThreadPoolExecutor", CountingPool)
    monkeypatch.setattr(parallel, "_pool", None)
    monkeypatch.setattr(parallel, "_pool_threads", 0)
    parallel.set_num_threads(8)
    for rows in (3, 16, 3, 16, 5):
        x = np.arange(rows * 8.0).reshape(rows, 8)
        y = parallel.map_rows(np.negative, x, block_elements=8, min_elements=0)
        assert np.array_equal(y, -x)
    assert len(made) == 1


def test_a_function_that_drops_rows_is_refused_not_broadcast():
    # f must keep its rows; one that returned a single row per block was broadcast over
    # the block's rows into the output, silently
    x = np.arange(64.0).reshape(8, 8)
    with pytest.raises(ValueError, match="one row per input row"):
        parallel.map_rows(lambda a: a[:1], x, block_elements=16, min_elements=0)


def _python_with(code: str, variable: str, value: str | None) -> list[str]:
    """The words ``python -c code`` prints in a fresh process, with the environment
    ``variable`` set to ``value`` (None: removed)."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if value is not None:
        env[variable] = value
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator only")
@pytest.mark.parametrize("setting", [None, "default"])
def test_the_allocator_keeps_freed_memory_unless_told_not_to(setting):
    # labs/plumbing/runtime.py: every labs command keeps freed blocks for the next step's
    # temporaries; TWINFORMER_MALLOC=default leaves glibc as it is (to measure the difference)
    code = (
        "import numpy as np; from labs.plumbing.runtime import tune_malloc; "
        "applied = tune_malloc(); "
        "x = np.arange(1 << 23, dtype=np.float32); "  # 32 MiB: above any mmap threshold
        "print(applied, float((x * x).sum(dtype=np.float64)))"
    )
    out = _python_with(code, "TWINFORMER_MALLOC", setting)
    n = 1 << 23
    expected_sum = (n - 1) * n * (2 * n - 1) / 6  # sum of k^2, k < n: exact in float64 here
    applied = out[0] == "True"
    assert applied == (setting is None and platform.libc_ver()[0] == "glibc")  # musl: nothing
    assert math.isclose(float(out[1]), expected_sum, rel_tol=1e-6)  # results do not change


@pytest.mark.parametrize("preset", [None, "28", "", "  "])
def test_labs_lets_idle_blas_threads_sleep_unless_told_otherwise(preset):
    # labs/plumbing/runtime.py: `python -m labs` sets OPENBLAS_THREAD_TIMEOUT before NumPy
    # loads OpenBLAS (which reads it then), and keeps a value the user set
    code = (
        "import os, sys; import labs.__main__; "
        "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), 'numpy' in sys.modules)"
    )
    out = _python_with(code, "OPENBLAS_THREAD_TIMEOUT", preset)
    from labs.plumbing.runtime import BLAS_THREAD_TIMEOUT

    # set, and NumPy loaded after it; an empty value is OpenBLAS's default, as if unset: ours
    assert out == [(preset or "").strip() or BLAS_THREAD_TIMEOUT, "True"]


def test_idle_blas_threads_setting_is_refused_once_numpy_is_loaded(monkeypatch):
    from labs.plumbing import runtime

    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    assert "numpy" in sys.modules  # as in this process: too late for OpenBLAS to read it
    assert runtime.let_idle_blas_threads_sleep() is False
    assert "OPENBLAS_THREAD_TIMEOUT" not in os.environ
