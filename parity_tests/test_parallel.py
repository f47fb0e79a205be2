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

from numpy_impl import data_parallel, flat_buffers, parallel
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
    seen = {}

    def run(lo, hi):  # inside the region BLAS keeps to the threads the blocks leave
        seen[threads, len(blocks), lo] = [
            lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"
        ]

    for threads, blocks in ((2, [(0, 1), (1, 2)]), (4, [(0, 1), (1, 2)]), (1, [(0, 1)])):
        parallel.set_num_threads(threads)
        parallel.for_blocks(run, blocks, blas=True)
        after = [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]
        assert after == before
    for (threads, n_blocks, _), counts in seen.items():  # a ceiling: a BLAS already on one
        assert all(n <= max(1, threads // n_blocks) for n in counts), (threads, counts)
        assert max(counts) == max(1, threads // n_blocks) or threads // n_blocks > max(before)


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
def test_training_losses_are_bit_identical_for_1_2_and_4_threads(attn_impl, monkeypatch):
    """The same seed gives the same losses whatever the thread count (the model is
    small, so blocks are made small too: every GELU and LayerNorm runs in blocks; the
    batch of 6 runs in two data-parallel shards, one after the other on 1 thread, side
    by side on 2, and with BLAS on two threads each on 4)."""
    from labs.plumbing.backends import make_backend

    monkeypatch.setattr(parallel, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(parallel, "BLOCK_ELEMENTS", 256)
    monkeypatch.setattr(
        flat_buffers, "FLAT_MIN_BLOCK", 16
    )  # AdamW's flat update cut between threads

    config = {"vocab_size": 11, "block_size": 24, "n_layers": 2, "n_heads": 2, "d_model": 16}
    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 11, (6, 24)), rng.integers(0, 11, (6, 24))) for _ in range(4)]
    runs = []
    for n in (1, 2, 4):  # 4: two data-parallel shards, each with BLAS on two threads
        parallel.set_num_threads(n)
        backend = make_backend("numpy", config, seed=3, attn_impl=attn_impl)
        for block in backend.model.blocks:
            block.attn.flash_tile = 8  # T = 24: three tiles
        losses = [backend.train_step(x, y)["loss"] for x, y in batches]
        runs.append((losses, backend.state_dict()))
    for other in runs[1:]:
        assert runs[0][0] == other[0]
        for name, w in runs[0][1].items():
            assert np.array_equal(w, other[1][name]), name


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


# -- DataParallel: shards of a batch on threads of their own ---------------------------------
DP_CONFIG = {"vocab_size": 11, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 8}


def _gpt(dtype=np.float64, **overrides):
    from numpy_impl.gpt import GPT, GPTConfig

    return GPT(GPTConfig.from_dict({**DP_CONFIG, **overrides}), seed=0, dtype=dtype)


def _grads(model) -> dict:
    return {name: p.grad.copy() for name, p in model.named_parameters()}


def test_replicate_shares_the_arrays_not_the_gradients_or_the_modules():
    from numpy_impl.module import replicate

    model = _gpt()
    assert model.parameters()[0].grad.any() == 0  # allocated here: the copy's starts without
    twin = replicate(model)
    assert twin is not model and twin.blocks[0] is not model.blocks[0]
    for (name, p), (twin_name, q) in zip(
        model.named_parameters(), twin.named_parameters(), strict=True
    ):
        assert name == twin_name and q is not p and q.data is p.data, name
        assert q._grad is None, name
    assert twin.head.weight is twin.tok_emb.weight  # tied in the copy as in the original


@given(
    B=st.integers(1, 9),
    T=st.integers(1, 8),
    n_shards=st.integers(2, 4),
    attn_impl=st.sampled_from(["flash", "explicit"]),
    threads=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_data_parallel_gives_the_whole_batch_output_and_gradients(
    B, T, n_shards, attn_impl, threads, seed
):
    """Logits, loss and every parameter's gradient of the sharded step against the model
    on the whole batch, float64, on drawn sizes (the gradients are the shards' sums; the
    unsharded model's own are checked against torch and finite differences elsewhere)."""
    from numpy_impl.loss import CrossEntropyLoss
    from parity_tests.tolerances import assert_close

    parallel.set_num_threads(threads)
    rng = np.random.default_rng(seed)
    x, y = rng.integers(0, 11, (2, B, T))
    results = []
    for shards in (1, n_shards):
        model = _gpt()
        model.attn_impl = attn_impl
        for block in model.blocks:
            block.attn.flash_tile = 4  # T > 4: several tiles, so flash's path runs
        net = data_parallel.DataParallel(model, n_shards=shards)
        loss_fn = CrossEntropyLoss()
        logits = net.forward(x)
        loss = loss_fn.forward(logits, y)
        assert net.backward(loss_fn.backward()) is None  # the GPT's backward returns nothing
        results.append((logits, loss, _grads(model)))
    (logits, loss, grads), (logits2, loss2, grads2) = results
    assert_close("logits", logits2, logits)
    assert_close("loss", loss2, loss)
    for name, g in grads.items():
        assert_close(f"grad of {name}", grads2[name], g)


def test_data_parallel_adds_into_gradients_already_there():
    """As every backward: the shards' gradients are added to what .grad holds."""
    from numpy_impl.loss import CrossEntropyLoss

    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 11, (2, 4, 8))
    model = _gpt()
    net, loss_fn = data_parallel.DataParallel(model), CrossEntropyLoss()
    for _ in range(2):
        loss_fn.forward(net.forward(x), y)
        net.backward(loss_fn.backward())
    twice = _grads(model)
    model.zero_grad()
    loss_fn.forward(net.forward(x), y)
    net.backward(loss_fn.backward())
    for name, g in _grads(model).items():
        np.testing.assert_allclose(twice[name], 2 * g, rtol=1e-12, atol=1e-15, err_msg=name)


def test_data_parallel_shards_by_the_batch_size_alone():
    net = data_parallel.DataParallel(_gpt())
    assert net.shards(1) == [(0, 1)]
    assert net.shards(5) == [(0, 3), (3, 5)]
    assert net.shards(12) == [(0, 6), (6, 12)]
    parallel.set_num_threads(1)
    assert net.shards(12) == [(0, 6), (6, 12)]  # not the thread count
    assert data_parallel.DataParallel(_gpt(), n_shards=3).shards(7) == [(0, 3), (3, 6), (6, 7)]


def test_data_parallel_with_dropout_is_repeatable_and_draws_other_masks_per_shard():
    """Each shard's copy drops units from a stream of its own, seeded from the model's
    generator in the calling thread: the same seed, the same losses, on 1 or 2 threads;
    and the two halves of a batch of twice the same rows get different masks."""
    from numpy_impl.loss import CrossEntropyLoss

    rng = np.random.default_rng(2)
    half = rng.integers(0, 11, (3, 8))
    x, y = np.concatenate([half, half]), np.concatenate([half, half])
    runs = []
    for n in (1, 2):
        parallel.set_num_threads(n)
        model = _gpt(dropout=0.5)
        net, loss_fn = data_parallel.DataParallel(model), CrossEntropyLoss()
        logits = net.forward(x)
        runs.append((logits, loss_fn.forward(logits, y), model.dropout_rng.bit_generator.state))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert runs[0][2] == runs[1][2]
    logits = runs[0][0]
    assert not np.allclose(logits[:3], logits[3:])  # same rows, other masks
    model = _gpt(dropout=0.5).eval()  # no dropout in eval: the halves agree
    logits = data_parallel.DataParallel(model).forward(x)
    np.testing.assert_allclose(logits[:3], logits[3:], rtol=1e-12)


def test_data_parallel_errors_name_the_callers_input():
    from numpy_impl.module import no_grad

    net = data_parallel.DataParallel(_gpt())
    with pytest.raises(ValueError, match=r"sequence length T=9 must lie in \[1, block_size=8\]"):
        net.forward(np.zeros((4, 9), np.int64))
    with pytest.raises(ValueError, match=r"idx: expected shape \(B, T\), got \(4, 2, 3\)"):
        net.forward(np.zeros((4, 2, 3), np.int64))  # the caller's shape, not a shard's (2, 2, 3)
    with pytest.raises(ValueError, match=r"got min=0, max=11"):
        net.forward(np.array([[0, 1], [2, 11]]))  # the bad id sits in the second shard
    with pytest.raises(TypeError, match="token ids must be integers"):
        net.forward(np.zeros((4, 2)))
    logits = net.forward(np.zeros((4, 2), np.int64))
    with pytest.raises(ValueError, match=r"dout: expected shape \(4, 2, 11\), got \(2, 2, 11\)"):
        net.backward(logits[:2])
    net.backward(logits)
    with no_grad():
        logits = net.forward(np.zeros((4, 2), np.int64))
    with pytest.raises(RuntimeError, match="no_grad"):
        net.backward(logits)  # nothing to differentiate, as the model itself says
    with pytest.raises(ValueError, match="n_shards"):
        data_parallel.DataParallel(_gpt(), n_shards=0)


def test_data_parallel_of_one_row_is_the_model_itself():
    model = _gpt()
    net = data_parallel.DataParallel(model)
    x = np.array([[1, 2, 3]])
    np.testing.assert_array_equal(net.forward(x), model.forward(x))


def test_every_thread_runs_under_the_callers_errstate_and_no_grad():
    """np.errstate and no_grad() hold per thread: the pool's threads take the caller's."""
    from numpy_impl.module import is_grad_enabled, no_grad

    parallel.set_num_threads(2)
    seen = {}

    def run(lo, hi):
        seen[lo] = (np.geterr()["over"], is_grad_enabled())

    with np.errstate(over="raise"), no_grad():
        parallel.for_blocks(run, [(0, 1), (1, 2)])
    assert seen == {0: ("raise", False), 1: ("raise", False)}
    parallel.for_blocks(run, [(0, 1), (1, 2)])
    assert seen == {0: (np.geterr()["over"], True), 1: (np.geterr()["over"], True)}


def test_every_thread_calls_the_callers_seterrcall_function():
    """np.errstate(all="call") (or "log") names np.seterrcall's function, per thread too:
    a pool thread given the mode without the function raised NameError in NumPy."""
    parallel.set_num_threads(2)
    calls = []

    def run(lo, hi):
        np.divide(np.ones(1), np.zeros(1))

    old = np.seterrcall(lambda kind, flag: calls.append(kind))
    try:
        with np.errstate(all="call"):
            parallel.for_blocks(run, [(0, 1), (1, 2)])
    finally:
        np.seterrcall(old)
    assert len(calls) == 2 and all("divide" in kind for kind in calls), calls


def test_blas_limit_lowers_the_threads_never_raises_them():
    """Blocks that leave BLAS n // blocks threads keep it under a lower count the caller
    set (threadpool_limits(1), a notebook's OPENBLAS_NUM_THREADS=1): a ceiling only."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_counts() -> list:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    _wait_until_no_caller_holds_blas()
    parallel.set_num_threads(4)  # two blocks on four threads: up to two BLAS threads each
    seen = []
    with threadpool_limits(limits=1, user_api="blas"):
        parallel.for_blocks(lambda lo, hi: seen.append(blas_counts()), [(0, 1), (1, 2)], blas=True)
        after = blas_counts()
    assert len(seen) == 2 and all(n == 1 for counts in seen for n in counts), seen
    assert all(n == 1 for n in after), after


def test_a_refused_batch_leaves_the_dropout_stream_as_the_model_alone_would():
    """A bad id in the second shard only: the shards drew seeds and masks before the
    whole batch was refused; the generator is put back, so the next step's masks are
    those of a model that never saw the batch (as on the model alone, which refuses
    the ids before its first dropout)."""
    bad = np.array([[0, 1, 2, 3], [4, 5, 6, 7], [1, 2, 3, 4], [2, 3, 11, 5]])
    for n in (1, 2):
        parallel.set_num_threads(n)
        model, alone = _gpt(dropout=0.5), _gpt(dropout=0.5)
        with pytest.raises(ValueError, match="vocab_size=11"):
            data_parallel.DataParallel(model).forward(bad)
        with pytest.raises(ValueError, match="vocab_size=11"):
            alone.forward(bad)
        assert model.dropout_rng.bit_generator.state == alone.dropout_rng.bit_generator.state


def test_the_numpy_backend_keeps_one_shard_for_a_model_of_gpt2_size(monkeypatch):
    """A second shard costs a second set of gradients: the course's models get two shards,
    a model whose gradients pass SHARDED_GRADIENTS_MAX_BYTES (GPT-2 124M: 0.5 GB) one."""
    from labs.plumbing import backends_numpy
    from labs.plumbing.backends import make_backend

    assert make_backend("numpy", DP_CONFIG).parallel.n_shards == data_parallel.DATA_PARALLEL_SHARDS
    monkeypatch.setattr(backends_numpy, "SHARDED_GRADIENTS_MAX_BYTES", 1000)
    backend = make_backend("numpy", DP_CONFIG)  # 8-wide: a few KB of gradients, over 1000 B
    assert backend.parallel.n_shards == 1
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 11, (2, 4, 8))
    assert np.isfinite(backend.train_step(x, y)["loss"])  # one shard: the model on its own


def test_data_parallel_gradients_against_central_differences():
    """The sharded backward's gradients (the shards' sums) against central differences of
    the sharded forward's loss, float64, in a few coordinates of every parameter."""
    from numpy_impl.loss import CrossEntropyLoss
    from parity_tests.harness import finite_difference_check
    from parity_tests.strategies import SeededRng

    rng = np.random.default_rng(7)
    x, y = rng.integers(0, 11, (2, 5, 6))  # B = 5: shards of 3 and 2 rows
    model = _gpt()
    net, loss_fn = data_parallel.DataParallel(model), CrossEntropyLoss()
    loss_fn.forward(net.forward(x), y)
    net.backward(loss_fn.backward())

    def loss() -> np.ndarray:
        return np.asarray(loss_fn.forward(net.forward(x), y))

    for name, p in model.named_parameters():
        finite_difference_check(f"grad of {name}", loss, p.data, p.grad, 1.0, SeededRng(3))


@pytest.mark.parametrize("layout", ["fortran", "transposed", "strided"])
def test_map_rows_gives_the_bits_of_c_ordered_rows_on_any_layout(layout):
    """An array of another layout is read as its C-ordered rows, as the reshape to
    ``(N, ...)`` always made them: the formula LayerNorm's mean over the last axis of
    Fortran-ordered rows would otherwise run in another order (other bits), and the
    outputs would keep the input's layout (a Linear after a GELU: another matmul path)."""
    from numpy_impl.norm import LayerNorm

    base = np.random.default_rng(0).standard_normal((3, 5, 64)).astype(np.float32) * 3 + 1
    x = {
        "fortran": np.asfortranarray(base[..., :32]),
        "transposed": base[..., :32].transpose(1, 0, 2),
        "strided": base[..., ::2],
    }[layout]
    assert x.size < parallel.PARALLEL_MIN_ELEMENTS and not x.flags.c_contiguous
    ln, ln_c = LayerNorm(32), LayerNorm(32)
    y, y_c = ln(x), ln_c(np.ascontiguousarray(x))
    assert y.flags.c_contiguous and np.array_equal(y, y_c)
    dout = np.asfortranarray(np.random.default_rng(1).standard_normal(x.shape).astype(np.float32))
    dx, dx_c = ln.backward(dout), ln_c.backward(np.ascontiguousarray(dout))
    assert np.array_equal(dx, dx_c) and np.array_equal(ln.weight.grad, ln_c.weight.grad)
    assert parallel.map_rows(np.negative, x).flags.c_contiguous


def test_a_function_that_drops_rows_is_refused_in_one_block_too():
    x = np.arange(24.0).reshape(2, 3, 4)  # under PARALLEL_MIN_ELEMENTS: one block
    with pytest.raises(ValueError, match="one row per input row"):
        parallel.map_rows(lambda a: a[:1], x)
    with pytest.raises(ValueError, match="one row per input row"):
        parallel.map_rows(lambda a: (a, a.reshape(-1, 4)), x)
    y, t = parallel.map_rows(gelu_rows, x)
    assert y.shape == t.shape == x.shape
