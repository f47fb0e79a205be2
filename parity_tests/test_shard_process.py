"""The second shard in a worker process (``labs/plumbing/shard_process.py``): the threads' bits.

``ProcessDataParallel`` must be ``DataParallel`` run elsewhere: the same losses,
gradients and weights, bit for bit (``np.array_equal``, not a tolerance), with
dropout and gradient accumulation, in training and evaluation; the same errors
for the same bad inputs; and a worker that dies mid-run must cost nothing but
speed (a warning, then the threads, the same bits), leaving no process behind.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from labs.plumbing import shard_process
from labs.plumbing.backends import make_backend

pytestmark = pytest.mark.skipif(
    not shard_process.processes_supported(), reason="worker processes need POSIX"
)


@pytest.fixture(autouse=True)
def two_threads():
    """Two cores' worth: the worker runs (one thread keeps both shards here)."""
    from numpy_impl import parallel

    before = parallel.num_threads()
    parallel.set_num_threads(2)
    yield
    parallel.set_num_threads(before)


CONFIG = {"vocab_size": 11, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 16}


def _batches(n: int, B: int = 6, T: int = 8, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 11, (B, T)), rng.integers(0, 11, (B, T))) for _ in range(n)]


def _run(shard_processes: bool, steps: int = 4, grad_accum: int = 1, **config) -> dict:
    backend = make_backend("numpy", {**CONFIG, **config}, seed=0, shard_processes=shard_processes)
    batches = _batches(steps + 2)
    losses = [backend.train_step(x, y, grad_accum=grad_accum) for x, y in batches[:steps]]
    result = {
        "losses": [(r["loss"], r["grad_norm"]) for r in losses],
        "eval": backend.eval_loss(batches[steps:]),
        "weights": backend.state_dict(),
        "optimizer": backend.optimizer_state(),
        "rng": backend.rng_state(),
        "backend": backend,
    }
    return result


def _assert_same_bits(a: dict, b: dict) -> None:
    assert a["losses"] == b["losses"]
    assert a["eval"] == b["eval"]
    assert a["rng"] == b["rng"]
    for key in ("weights", "optimizer"):
        assert a[key].keys() == b[key].keys()
        for name in a[key]:
            assert np.array_equal(a[key][name], b[key][name]), (key, name)


@pytest.mark.parametrize(
    ("dropout", "grad_accum"), [(0.0, 1), (0.2, 1), (0.2, 2)], ids=["plain", "dropout", "accum"]
)
def test_a_worker_process_gives_the_threads_bits(dropout, grad_accum):
    threads = _run(False, grad_accum=grad_accum, dropout=dropout)
    processes = _run(True, grad_accum=grad_accum, dropout=dropout)
    assert isinstance(processes["backend"].parallel, shard_process.ProcessDataParallel)
    assert processes["backend"].parallel._worker is not None  # it did run
    _assert_same_bits(threads, processes)


def test_the_worker_follows_the_models_changes_between_steps():
    """A setting changed after the first step (the attention's implementation) reaches the
    worker, as it reaches a thread's fresh copy: the same bits, both ways."""
    runs = []
    for shard_processes in (False, True):
        backend = make_backend("numpy", CONFIG, seed=0, shard_processes=shard_processes)
        batches = _batches(4)
        losses = [backend.train_step(*batches[0])["loss"]]
        for block in backend.model.blocks:
            block.attn.attn_impl = "explicit"
        losses += [backend.train_step(x, y)["loss"] for x, y in batches[1:]]
        runs.append((losses, backend.state_dict()))
    assert runs[0][0] == runs[1][0]
    assert all(np.array_equal(runs[0][1][k], runs[1][1][k]) for k in runs[0][1])


def test_the_second_shards_bad_input_raises_the_callers_error():
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1)[0]
    backend.train_step(x, y)  # the worker is running
    bad = x.copy()
    bad[-1, -1] = 11  # only the worker's rows hold the bad id
    with pytest.raises(ValueError, match=r"got min=0, max=11"):
        backend.train_step(bad, y)
    before = backend.state_dict()
    assert backend.train_step(x, y)["loss"] > 0  # and the next step runs as usual
    assert any(not np.array_equal(before[k], v) for k, v in backend.state_dict().items())


def test_dout_of_another_shape_is_refused_as_the_threads_refuse_it():
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1)[0]
    backend.train_step(x, y)
    net = backend.parallel
    logits = net.forward(x)
    with pytest.raises(ValueError, match=r"dout: expected shape \(6, 8, 11\), got \(3, 8, 11\)"):
        net.backward(logits[:3])
    net.backward(np.zeros_like(logits))


STOPPED = r"shard worker process stopped \(killed by SIGKILL\)"  # the words say how


@pytest.mark.parametrize("when", ["between steps", "before the backward"])
def test_a_killed_worker_costs_a_warning_and_no_bits(when):
    threads = _run(False, steps=4, dropout=0.2)
    backend = make_backend("numpy", {**CONFIG, "dropout": 0.2}, seed=0, shard_processes=True)
    batches = _batches(6)
    losses = []
    for i, (x, y) in enumerate(batches[:4]):
        if i == 2:
            worker = backend.parallel._worker
            if when == "between steps":
                _kill(worker.process)
                with pytest.warns(RuntimeWarning, match=STOPPED):
                    r = backend.train_step(x, y)
            else:  # the worker holds the second shard's forward when it dies
                net, original = backend.parallel, backend.parallel.backward

                def kill_then_backward(dout, worker=worker, original=original):
                    _kill(worker.process)
                    return original(dout)

                net.backward = kill_then_backward
                with pytest.warns(RuntimeWarning, match=STOPPED):
                    r = backend.train_step(x, y)
                del net.backward
        else:
            r = backend.train_step(x, y)
        losses.append((r["loss"], r["grad_norm"]))
    assert backend.parallel._worker is None  # the threads from then on
    processes = {
        "losses": losses,
        "eval": backend.eval_loss(batches[4:]),
        "weights": backend.state_dict(),
        "optimizer": backend.optimizer_state(),
        "rng": backend.rng_state(),
    }
    _assert_same_bits(threads, processes)


def test_an_interrupt_while_the_worker_computes_leaves_no_reply_to_read_out_of_turn(monkeypatch):
    """Ctrl-C during the first shard: the worker's reply is never read by a later command
    (the worker is closed and a fresh one starts), so the next steps give the threads' bits."""
    import contextlib

    from numpy_impl import parallel

    threads = make_backend("numpy", CONFIG, seed=0, shard_processes=False)
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    b0, b1, b2 = _batches(3)
    expected = [threads.train_step(*b)["loss"] for b in (b0, b1)]
    got = [backend.train_step(*b0)["loss"]]
    first = backend.parallel._worker.process

    @contextlib.contextmanager
    def interrupted(n_blocks):
        raise KeyboardInterrupt
        yield

    with monkeypatch.context() as m:
        m.setattr(parallel, "as_block", interrupted)
        with pytest.raises(KeyboardInterrupt):
            backend.train_step(*b2)
    assert first.wait(timeout=10) is not None  # closed
    got.append(backend.train_step(*b1)["loss"])
    assert got == expected
    assert backend.parallel._worker.process.pid != first.pid


def test_the_workers_warnings_reach_the_caller_as_the_threads_would_raise_them():
    """Weights that overflow float32: the same warnings, of the same kinds, both ways."""
    import warnings

    seen = []
    for shard_processes in (False, True):
        backend = make_backend("numpy", CONFIG, seed=0, shard_processes=shard_processes)
        x, y = _batches(1)[0]
        backend.train_step(x, y)
        backend.model.blocks[0].ffn.fc1.weight.data[...] = 3e38  # the flat buffer, in place
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn"):
            warnings.simplefilter("always")
            backend.eval_loss([(x, y)])
        seen.append(sorted({(w.category.__name__, str(w.message)) for w in caught}))
    assert seen[0] and seen[0] == seen[1]


def test_a_model_that_cannot_be_sent_runs_on_threads_with_a_warning():
    threads = _run(False, steps=3)
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    backend.model.note = lambda: None  # a learner's attribute that pickle refuses
    batches = _batches(5)
    with pytest.warns(RuntimeWarning, match="the model could not be sent"):
        losses = [backend.train_step(x, y) for x, y in batches[:3]]
    assert [(r["loss"], r["grad_norm"]) for r in losses] == threads["losses"]
    assert backend.parallel._worker is None


def test_closing_stops_the_worker_and_a_new_flat_buffer_starts_another():
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1)[0]
    backend.train_step(x, y)
    process = backend.parallel._worker.process
    backend.parallel.close()
    assert process.wait(timeout=10) == 0  # it saw its socket close and left
    backend.train_step(x, y)  # the next step starts a worker again
    assert backend.parallel._worker.process.pid != process.pid


def test_the_worker_exits_when_its_parent_is_killed(tmp_path):
    """No orphan: a parent killed with SIGKILL closes the socket, and the worker leaves."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import numpy as np, sys, time\n"
        "from labs.plumbing.backends import make_backend\n"
        f"b = make_backend('numpy', {CONFIG!r}, shard_processes=True)\n"
        "x = np.zeros((6, 8), np.int64)\n"
        "b.train_step(x, x)\n"
        "print(b.parallel._worker.process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    env = _env_with_this_checkout()
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, env=env)
    try:
        worker_pid = int(parent.stdout.readline())
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker_pid):
        time.sleep(0.05)
    assert not _alive(worker_pid)


def test_no_worker_where_none_can_help():
    """A batch of one row, one thread, the formulas' path (no flat buffer) and a torch
    backend: threads (or nothing) run, and no process starts."""
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1, B=1)[0]
    backend.train_step(x, y)
    assert backend.parallel._worker is None
    from numpy_impl import parallel

    parallel.set_num_threads(1)
    one = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    one.train_step(*_batches(1)[0])
    assert one.parallel._worker is None
    parallel.set_num_threads(2)
    formulas = make_backend("numpy", CONFIG, seed=0, shard_processes=True, fused=False)
    assert not formulas.shard_processes
    assert make_backend("torch", CONFIG, seed=0, shard_processes=True).name == "torch"
    with pytest.raises(TypeError, match="shard_processes: expected True or False"):
        make_backend("numpy", CONFIG, seed=0, shard_processes=1)


def test_move_data_keeps_the_values_and_refuses_another_layout():
    from numpy_impl import flat_buffers
    from numpy_impl.module import Parameter

    params = [Parameter(np.arange(6.0).reshape(2, 3)), Parameter(np.ones(2))]
    flat = flat_buffers.FlatParameters(params)
    shared, fd = shard_process.shared_array(8, np.float64)
    os.close(fd)
    flat.move_data(shared)
    assert flat.intact() and params[0].data.base is not None
    assert np.array_equal(params[0].data, np.arange(6.0).reshape(2, 3))
    shared[0] = 42.0
    assert params[0].data[0, 0] == 42.0  # a view of the new buffer
    with pytest.raises(ValueError, match=r"buffer: expected shape \(8,\) and dtype float64"):
        flat.move_data(np.zeros(8, np.float32))


def _kill(process) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone but for its parent's wait
        return f.read().split(") ")[-1][0] != "Z"


@pytest.mark.parametrize("to", ["the process group", "the parent alone"])
def test_ctrl_c_stops_the_run_without_a_traceback_from_the_worker(tmp_path, to):
    """Ctrl-C in a terminal signals the whole process group, the worker too; `kill -INT`
    signals the parent alone, which closes the worker's socket while the worker computes
    its shard's forward (raised here where the parent's own shard starts). Either way the
    parent's KeyboardInterrupt is the only thing said: no traceback from the worker, no
    warning that it stopped, and no process left behind."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    config = {**CONFIG, "d_model": 64, "block_size": 32}
    script.write_text(
        "import numpy as np, sys\n"
        "from labs.plumbing.backends import make_backend\n"
        f"b = make_backend('numpy', {config!r}, shard_processes=True)\n"
        "x = np.zeros((12, 32), np.int64)\n"
        "b.train_step(x, x)\n"
        "print(b.parallel._worker.process.pid, flush=True)\n"
        "if sys.argv[1] == 'forward':  # the parent alone, while the worker computes its shard\n"
        "    from numpy_impl import parallel\n"
        "    def as_block(n):\n"
        "        raise KeyboardInterrupt\n"
        "    parallel.as_block = as_block\n"
        "try:\n"
        "    while True:\n"
        "        b.train_step(x, x)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', file=sys.stderr)\n"
    )
    env = _env_with_this_checkout()
    parent = subprocess.Popen(
        [sys.executable, str(script), "forward" if to == "the parent alone" else "group"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # a process group of its own, as a terminal's job
        text=True,
    )
    try:
        worker_pid = int(parent.stdout.readline())
        if to == "the process group":
            time.sleep(0.5)  # steps in flight
            os.killpg(parent.pid, signal.SIGINT)
        _, err = parent.communicate(timeout=30)
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    assert err.strip().splitlines() == ["interrupted"], err
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(worker_pid):
        time.sleep(0.05)
    assert not _alive(worker_pid)


@pytest.mark.parametrize("command", ["forward", "backward"])
def test_an_interrupt_just_after_a_command_is_written_never_desyncs_the_replies(
    command, monkeypatch
):
    """A KeyboardInterrupt that lands inside ``send``, once the command is written (the
    signal handler runs at the next bytecode), leaves the worker's reply unread: the
    next step starts a fresh worker instead of reading it out of turn (which gave the
    wrong loss, then a ValueError from ``np.concatenate``)."""
    threads = make_backend("numpy", CONFIG, seed=0, shard_processes=False)
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    b0, b1, b2, b3 = _batches(4)
    expected = [threads.train_step(*b)["loss"] for b in (b0, b1, b2)]
    got = [backend.train_step(*b0)["loss"]]
    send = shard_process._Worker.send

    def send_then_interrupt(self, message):
        send(self, message)
        if message[0] == command:
            raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(shard_process._Worker, "send", send_then_interrupt)
        with pytest.raises(KeyboardInterrupt):
            backend.train_step(*b3)
    got += [backend.train_step(*b)["loss"] for b in (b1, b2)]
    assert got == expected


def test_a_forked_child_steps_weights_of_its_own_and_leaves_the_parents_worker_alone():
    """After ``os.fork`` the child's weights were the parent's shared pages: its AdamW
    step changed the parent's weights (and it talked to the parent's worker)."""
    import sys

    threads = _run(False, steps=4)
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    batches = _batches(6)
    losses = [backend.train_step(*b) for b in batches[:2]]
    worker = backend.parallel._worker
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a step of its own, then out without pytest's teardown
        code = 1
        try:
            r = backend.train_step(*batches[2])
            os.write(write, repr(r["loss"]).encode())
            code = 0 if backend.parallel._worker is not worker else 3
        finally:
            sys.stdout.flush()
            os._exit(code)
    os.close(write)
    child_loss = os.read(read, 100).decode()
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    losses += [backend.train_step(*b) for b in batches[2:4]]
    assert child_loss == repr(threads["losses"][2][0])  # the child's step was a right one
    assert [(r["loss"], r["grad_norm"]) for r in losses] == threads["losses"]
    assert backend.parallel._worker is worker  # still the parent's, still in step
    for name, value in backend.state_dict().items():
        assert np.array_equal(value, threads["weights"][name]), name


def test_the_worker_ignores_ctrl_c_which_reaches_the_whole_process_group():
    """A terminal's Ctrl-C reaches the worker too: it printed a KeyboardInterrupt
    traceback and died (costing a warning and the rest of the run on threads whenever
    the caller goes on). The caller decides: the worker keeps running."""
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1)[0]
    backend.train_step(x, y)
    worker = backend.parallel._worker
    time.sleep(0.2)  # past its start
    worker.process.send_signal(signal.SIGINT)
    time.sleep(0.2)
    assert worker.process.poll() is None
    backend.train_step(x, y)
    assert backend.parallel._worker is worker


def test_a_worker_whose_caller_is_gone_mid_command_leaves_quietly():
    """The caller killed while the worker computes: its reply meets a closed socket. It
    exits (status 0), without a BrokenPipeError traceback on the terminal."""
    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    x, y = _batches(1, B=64, T=8)[0]
    backend.train_step(x, y)
    worker = backend.parallel._worker
    flags = {"grad": True, "fused": True, "errors": np.geterr()}
    worker.send(("forward", None, x, [], flags))
    worker.conn.close()  # as a killed caller's end closes
    assert worker.process.wait(timeout=10) == 0
    backend.parallel.close()


def test_the_worker_imports_the_numpy_impl_its_caller_imported(tmp_path):
    """A learner's workspace put first on ``sys.path`` (as parity_tests/conftest.py does
    for ``TWINFORMER_WORKSPACE``): the worker ran the reference package's layers for the
    second shard (``-m`` puts the working directory, the repository, first)."""
    import shutil
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ws = tmp_path / "ws"
    shutil.copytree(os.path.join(root, "numpy_impl"), ws / "numpy_impl")
    gpt = ws / "numpy_impl" / "gpt.py"
    source = gpt.read_text()
    line = "        return self.head(x)  # (B, T, C) -> (B, T, vocab_size)"
    assert source.count(line) == 1
    gpt.write_text(source.replace(line, "        return self.head(x) * 2  # the learner's"))
    script = tmp_path / "parent.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {str(ws)!r})\n"
        "import numpy as np, numpy_impl\n"
        f"assert numpy_impl.__file__.startswith({str(ws)!r})\n"
        "numpy_impl.parallel.set_num_threads(2)\n"
        "from labs.plumbing.backends import make_backend\n"
        "x = np.arange(48).reshape(6, 8) % 11\n"
        "outs = []\n"
        "for sp in (False, True):\n"
        f"    b = make_backend('numpy', {CONFIG!r}, shard_processes=sp)\n"
        "    b.train_step(x, x)\n"
        "    outs.append(b.parallel(x))\n"
        "assert b.parallel._worker is not None\n"
        "print(np.array_equal(*outs))\n"
    )
    env = _env_with_this_checkout()
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=root
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


def test_the_run_banner_names_the_worker_only_where_one_runs():
    """One thread asked for (``TWINFORMER_NUM_THREADS=1``): no worker starts, and
    ``labs train``'s first line said "the second shard in a worker process" all the same."""
    from labs.commands.train import _how_it_runs
    from numpy_impl import parallel

    backend = make_backend("numpy", CONFIG, seed=0, shard_processes=True)
    assert "the second shard in a worker process, 2 threads" in _how_it_runs(backend)
    parallel.set_num_threads(1)
    assert "worker process" not in _how_it_runs(backend)


def test_a_warning_both_shards_raise_is_shown_once_as_the_threads_show_it():
    """Under the default filter a warning shows once per place: the threads' two shards
    share the layer's module registry; the worker's was relayed under a registry of its
    own, so every warning showed twice."""
    import warnings

    counts = []
    for shard_processes in (False, True):
        backend = make_backend("numpy", CONFIG, seed=0, shard_processes=shard_processes)
        x, y = _batches(1)[0]
        backend.train_step(x, y)
        backend.model.blocks[0].ffn.fc1.weight.data[...] = 3e38
        with warnings.catch_warnings(record=True) as caught, np.errstate(all="warn"):
            warnings.simplefilter("default")
            backend.eval_loss([(x, y)])
            backend.eval_loss([(x, y)])
        counts.append(sorted((w.category.__name__, str(w.message), w.lineno) for w in caught))
    assert counts[0] and counts[0] == counts[1]


def _env_with_this_checkout() -> dict:
    """The environment for a child Python that must import this checkout's packages."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
