"""The second shard of a NumPy step in a worker process: each core with a GIL of its own.

``numpy_impl.data_parallel.DataParallel`` runs a batch's two shards on two
threads of one process. Every NumPy call holds the GIL for its Python part,
and at the default model's size (B = 12, T = 64) a shard's forward and
backward make a few thousand short calls: the two threads keep handing the
GIL to each other, and each hand-off puts a thread to sleep and wakes it,
which a VM pays for in tens of microseconds. Half a batch's forward and
backward took 32.5 ms alone on one core, 36.2 ms beside the other shard's
thread, and 32.5 ms beside another process doing the same (docs/speed.md,
stage 10). So :class:`ProcessDataParallel` runs the second shard in a worker
process, as ``torch.nn.parallel.DistributedDataParallel`` runs one process
per device:

* **The weights are shared, not sent.** The model's parameters live in
  ``numpy_impl/flat_buffers.py``'s flat buffer; that buffer is moved into
  shared memory (an anonymous ``memfd`` on Linux, an unlinked temporary file
  elsewhere: nothing to clean up after a crash), and the worker maps the same
  pages. AdamW's update in this process is what the worker reads at its
  next step. The worker's gradients go to a second shared buffer, added here
  into the model's after its backward, in shard order: the same sums, in the
  same order, as the threads' (tested bit for bit, dropout and gradient
  accumulation included).
* **The model's structure is sent as it is now, at every forward** (a pickle
  of a few KiB that names each parameter's array instead of holding it, as
  ``DataParallel`` copies the model at every forward), and the worker
  unpickles it only when it changed. Each generator gets its stream from
  this process's draws (``data_parallel.shard_seeds``), as a thread's copy does.
* **Nothing is lost when the worker is.** A worker that dies (killed, out of
  memory) makes this process warn once and run the threads' ``DataParallel``
  from then on; the step in flight is finished here from its inputs and its
  seeds: the same bits. The worker exits when this process closes its end
  of the socket (also when this process is killed), and :meth:`close` (or
  garbage collection, or the interpreter's exit) stops it.

Where no worker can run or help (the optimizer's parameters not in one flat
buffer, a batch of one row, one thread asked for with ``parallel.set_num_threads(1)``
or ``TWINFORMER_NUM_THREADS=1``, a platform without ``pass_fds``: Windows) the
threads' ``DataParallel`` runs instead. Its process-wide settings come from
the caller at each command: ``no_grad()``, ``fused.kernels()`` and
``np.errstate`` (a ``"call"`` or ``"log"`` setting keeps the step on threads: the
callback lives here); BLAS in the worker keeps to the threads the shards leave.
The worker's warnings are raised again here, under this process's filters,
and its errors too; a ``KeyboardInterrupt`` while the worker computes (or just
after a command is written: the worker counts the replies it owes) closes it
(a fresh one starts at the next step), so no reply is ever read out of turn.
The worker imports what this process imported (its ``sys.path``, the folders of
``numpy_impl`` and ``labs`` first: a learner's workspace, say). A child of
``os.fork`` copies its weights out of the shared memory and leaves its parent's
worker alone (its own starts at its next step), as a fork copies the threads'.

Source: PyTorch's ``DistributedDataParallel`` (Li et al. 2020, "PyTorch
Distributed", sec. 3: one process per replica, gradients summed across
processes); ``multiprocessing.connection`` for the messages.
"""

from __future__ import annotations

import io
import json
import mmap
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import warnings
import weakref
from multiprocessing.connection import Connection
from typing import NamedTuple

import numpy as np

#: The worker's module (its loop: ``shard_worker.py``), run as ``python -m`` would run it
#: but with this process's import path (:data:`_BOOT`).
WORKER_MODULE = "labs.plumbing.shard_worker"

#: ``python -c`` this: ``sys.path`` set to the list in ``argv[1]`` (JSON) before anything
#: is imported (``-m`` would put the working directory first, where another checkout's
#: ``labs`` or ``numpy_impl`` may lie), then the worker's module run as ``__main__``.
_BOOT = (
    "import json, runpy, sys; sys.path[:] = json.loads(sys.argv.pop(1)); "
    f"runpy.run_module({WORKER_MODULE!r}, run_name='__main__', alter_sys=True)"
)


def processes_supported() -> bool:
    """True where a worker can be started: POSIX (``pass_fds`` and ``socketpair``)."""
    return os.name == "posix"


def shared_array(n: int, dtype) -> tuple[np.ndarray, int]:
    """``(array, fd)``: ``n`` zeros of ``dtype`` in memory another process can map from
    ``fd`` (a ``memfd`` where Linux has one, else an unlinked temporary file: freed when
    the last process holding it exits). The caller closes ``fd`` once it is passed on."""
    nbytes = max(1, n * np.dtype(dtype).itemsize)
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("twinformer-shard", getattr(os, "MFD_CLOEXEC", 0))
    else:
        with tempfile.TemporaryFile() as f:  # unlinked already: nothing left on disk
            fd = os.dup(f.fileno())
    os.ftruncate(fd, nbytes)
    return np.frombuffer(mmap.mmap(fd, nbytes), dtype=dtype, count=n), fd


class _ModulePickler(pickle.Pickler):
    """Pickles a model with each parameter's array (and gradient) named by its place in
    the flat buffers, each random generator named by its order, and no layer's
    backward caches (its ``_caches``, None in the copy): the structure, a few KiB."""

    def __init__(self, file, places: dict):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.places = places  # id(array) -> ("data" | "grad", lo, hi, shape)
        self.generators: list = []  # in the order the pickle first meets them
        self._generator_ids: dict = {}

    def persistent_id(self, obj):
        if isinstance(obj, np.ndarray):
            return self.places.get(id(obj))
        if isinstance(obj, np.random.Generator):
            i = self._generator_ids.setdefault(id(obj), len(self.generators))
            if i == len(self.generators):
                self.generators.append(obj)
            return ("generator", i, type(obj.bit_generator).__name__)
        return None

    def reducer_override(self, obj):
        from numpy_impl.module import Module

        if not isinstance(obj, Module) or not type(obj)._caches:
            return NotImplemented
        state = dict(vars(obj))
        for name in type(obj)._caches:
            if name in state:
                state[name] = None
        return _new_module, (type(obj),), state


def _new_module(cls):
    return object.__new__(cls)


class ProcessDataParallel:
    """``DataParallel``'s two shards, the second in a worker process (see the module's
    docstring); the same ``forward``/``backward`` and the same bits as the threads'.

    Args:
        threads: the ``numpy_impl.data_parallel.DataParallel`` to run where no worker can
            (and whose ``module``'s first shard runs here).

    Call :meth:`use` with the step's ``FlatParameters`` before a training step's forward;
    without one (or with one that no longer holds the model's arrays) the threads run.

    Shapes: as ``DataParallel``. Raises: what ``DataParallel`` raises, for the same inputs.
    """

    def __init__(self, threads):
        self.threads = threads
        self.module = threads.module
        self._flat = None  # the FlatParameters whose data the worker maps
        self._worker = None  # _Worker, once started
        self._broken = False  # a worker died: the threads from then on
        self._pending: _Pending | None = None  # the worker's forward, until its backward
        self._sent = None  # the model's pickle the worker holds
        self._seen: dict = {}  # the worker's warnings already shown (warnings' registry)
        self._shared = None  # the shared buffer the weights were moved into, while they are
        _LIVE.add(self)  # so that a fork's child gets weights of its own (_after_fork_in_child)

    def use(self, flat) -> None:
        """Share ``flat``'s buffers from the next step (a new ``flat`` restarts the worker)."""
        if flat is not self._flat:
            self.close()
            self._flat = flat

    def __call__(self, x):
        return self.forward(x)

    def _ready(self, x) -> bool:
        from numpy_impl import parallel

        flat = self._flat
        if self._broken or flat is None or not processes_supported():
            return False
        if parallel.num_threads() < 2:  # one core asked for: the shards one after the other
            return False
        if np.ndim(x) == 0 or len(self.threads.shards(len(x))) != 2 or not flat.intact():
            return False
        if {"call", "log"} & set(np.geterr().values()):  # a callback lives in this process
            return False
        if self._worker is not None and self._worker.unread:
            self.close()  # an interrupted command's reply is on its way: never read out of turn
        if self._worker is None:
            try:
                self._worker = _Worker(flat)
            except OSError as e:  # no process or no shared memory to be had: threads
                self._warn(f"it could not start: {e}")
                return False
            self._shared = flat.data
        return True

    def forward(self, x: np.ndarray) -> np.ndarray:
        from numpy_impl import fused, parallel
        from numpy_impl.data_parallel import shard_seeds
        from numpy_impl.module import is_grad_enabled

        x = np.asarray(x)
        self._pending = None
        if not self._ready(x):
            return self.threads.forward(x)
        (lo0, hi0), (lo1, hi1) = self.threads.shards(len(x))
        try:
            blob, generators = self._pickle()
        except Exception as e:  # something in the model that cannot travel: threads, from now on
            self._warn(f"the model could not be sent: {type(e).__name__}: {e}")
            return self.threads.forward(x)
        states = [g.bit_generator.state for g in generators]
        seeds = shard_seeds(generators, 1)[0] if self.module.training else []
        grad = is_grad_enabled()
        flags = {"grad": grad, "fused": fused.active(), "errors": np.geterr()}
        sent = None if blob == self._sent else blob  # the worker keeps the last it got
        self._sent = None  # until the worker says it holds this one
        try:
            self._worker.send(("forward", sent, x[lo1:hi1], seeds, flags))
        except OSError as e:
            return self._lost(self._worker.why(e), x, generators, states)
        try:
            with parallel.as_block(2):
                first = self.module(x[lo0:hi0])
        except Exception as shard_error:
            self._reply_or_none()  # the worker's answer, so the next command is in step
            return self._refused(shard_error, x, generators, states)
        except BaseException:  # KeyboardInterrupt: the worker's reply stays unread
            self.close()  # so no later command reads it: a fresh worker next time
            raise
        try:
            second = self._reply()
        except _WorkerLost as e:
            return self._lost(e, x, generators, states)
        except Exception as shard_error:
            return self._refused(shard_error, x, generators, states)
        self._sent = blob
        out = np.concatenate([first, second], axis=0)
        if grad:
            self._pending = _Pending(
                x[lo1:hi1], seeds, generators, flags, out.shape, hi0 - lo0, self._worker
            )
        return out

    def backward(self, dout: np.ndarray):
        from numpy_impl import parallel

        pending = self._pending
        if pending is None:  # the threads ran the forward
            return self.threads.backward(dout)
        if np.shape(dout) != pending.out_shape:  # as DataParallel says it
            raise ValueError(f"dout: expected shape {pending.out_shape}, got {np.shape(dout)}")
        self._pending, h = None, pending.split
        second_sent = False
        if self._worker is not None and self._worker.unread:
            self.close()  # an interrupted command's reply is on its way: never read out of turn
        if self._worker is pending.worker is not None:  # the worker that ran this forward
            try:
                self._worker.send(("backward", dout[h:]))
            except OSError as e:
                self._warn(self._worker.why(e))
            else:
                second_sent = True
        try:
            with parallel.as_block(2):
                first = self.module.backward(dout[:h])
        except BaseException:
            if second_sent:
                self._reply_or_none()
            raise
        second = None
        if second_sent:
            try:
                second = self._reply()
            except _WorkerLost as e:
                self._warn(e)
                second_sent = False
        if second_sent:
            self._flat.grad += self._worker.grad  # shard order: the model's, then the copy's
        else:
            second = self._backward_here(pending, dout[h:])
        return None if first is None else np.concatenate([first, second], axis=0)

    def _pickle(self) -> tuple[bytes, list]:
        flat = self._flat
        places = {}
        for p, lo, hi in zip(flat.params, flat.bounds[:-1], flat.bounds[1:], strict=True):
            places[id(p.data)] = ("data", lo, hi, p.data.shape)
            places[id(p.grad)] = ("grad", lo, hi, p.data.shape)
        f = io.BytesIO()
        pickler = _ModulePickler(f, places)
        pickler.dump(self.module)
        return f.getvalue(), pickler.generators

    def _reply(self):
        """The worker's answer: its value, its warnings raised again here (under this
        process's filters), its error raised here."""
        try:
            status, value, caught = self._worker.recv()
        except BaseException as e:  # KeyboardInterrupt while waiting: a reply may be on its way
            if not isinstance(e, _WorkerLost):
                self.close()
            raise
        for message, category, filename, lineno in caught:  # once per place, as a module's
            registry = _registry_of(filename, self._seen)
            warnings.warn_explicit(message, category, filename, lineno, registry=registry)
        if status == "unusable":  # the worker cannot run this model: as if it were gone
            raise _WorkerLost(value)
        if status == "error":
            raise value
        return value

    def _reply_or_none(self):
        try:
            return self._reply()
        except _WorkerLost as e:
            self._warn(e)
        except Exception:
            pass
        return None

    def _refused(self, shard_error, x, generators, states):
        """A shard raised: the whole batch raises the caller's error, as ``DataParallel``."""
        _restore(generators, states)
        self.module(x)
        raise shard_error

    def _lost(self, error, x, generators, states):
        """The worker is gone before its forward: the threads run this batch, from the same
        generator states (the same draws)."""
        self._warn(error)
        _restore(generators, states)
        return self.threads.forward(x)

    def _backward_here(self, pending: _Pending, dout):
        """The worker died with the second shard's forward in it: run that shard here on a
        copy of the model, from its input and seeds, then its backward; its gradients are
        added as the worker's would have been."""
        from numpy_impl import fused
        from numpy_impl.data_parallel import seed_generators
        from numpy_impl.module import Parameter, replicate_with_twins

        copy, twins = replicate_with_twins(self.module)
        if pending.seeds:  # the streams the worker's generators had: the same draws
            seed_generators([twins[id(g)][1] for g in pending.generators], pending.seeds)
        flags = pending.flags
        with fused.kernels(flags["fused"]), np.errstate(**flags["errors"]):
            copy(pending.x)
            dx = copy.backward(dout)
        for original, twin in twins.values():
            if isinstance(original, Parameter) and twin._grad is not None:
                original.grad += twin._grad
        return dx

    def _warn(self, error) -> None:
        warnings.warn(
            f"the shard worker process stopped ({error}); the second shard runs on a thread "
            "from now on (the same results, slower; `labs train --shard-threads` asks for that)",
            RuntimeWarning,
            stacklevel=3,
        )
        self._broken = True
        self.close()

    def worker_peak_rss_bytes(self) -> int | None:
        """The worker's peak resident memory so far (``VmHWM``, Linux; its share of the
        weights' pages included), or None without a running worker or ``/proc``."""
        try:
            with open(f"/proc/{self._worker.process.pid}/status") as f:
                line = next(line for line in f if line.startswith("VmHWM:"))
        except (AttributeError, OSError, StopIteration):
            return None
        return int(line.split()[1]) * 1024  # kB

    def close(self) -> None:
        """Stop the worker (if any); the threads run until the next :meth:`use`."""
        worker, self._worker, self._sent = self._worker, None, None
        if worker is not None:
            worker.close()

    def _forked(self) -> None:
        """In a child of ``os.fork``: the weights copied out of the shared memory (a fork
        copies a process's memory; a child's steps must not write its parent's weights),
        and the parent's worker left alone, this process's end of its socket closed (so
        the worker still sees its parent go). A worker of its own starts at the next step."""
        worker, self._worker, self._sent, self._pending = self._worker, None, None, None
        if worker is not None:
            worker._finalizer.detach()  # neither waited for nor killed from here
            try:
                worker.conn.close()
            except OSError:
                pass
        flat, shared, self._shared = self._flat, self._shared, None
        if flat is not None and shared is not None and flat.data is shared:
            flat.move_data(np.array(flat.data))  # private pages, the same values


class _Pending(NamedTuple):
    """What a forward run through the worker leaves for its backward."""

    x: np.ndarray  # the second shard's rows
    seeds: list  # one per generator, as the worker's generators were seeded
    generators: list  # the model's generators, in the pickle's order
    flags: dict  # the caller's no_grad, fused.kernels and errstate settings
    out_shape: tuple  # the whole batch's output shape
    split: int  # the first shard's rows
    worker: _Worker  # the worker that ran it


def _restore(generators: list, states: list) -> None:
    """Put each generator back to its state (before the shards drew their seeds)."""
    for g, state in zip(generators, states, strict=True):
        g.bit_generator.state = state


class _WorkerLost(RuntimeError):
    pass


def _registry_of(filename: str, default: dict) -> dict:
    """The ``__warningregistry__`` of this process's module at ``filename`` (where the
    first shard's same warning is recorded: shown once in all, as the threads show it),
    else ``default``."""
    for module in list(sys.modules.values()):
        if getattr(module, "__file__", None) == filename:
            return vars(module).setdefault("__warningregistry__", {})
    return default


_LIVE: weakref.WeakSet = weakref.WeakSet()  # every ProcessDataParallel not yet collected


def _after_fork_in_child() -> None:
    for net in list(_LIVE):
        net._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _Worker:
    """The process, its socket, and the gradient buffer it writes."""

    def __init__(self, flat):
        from numpy_impl import parallel

        data, fd = shared_array(flat.data.size, flat.data.dtype)
        flat.move_data(data)  # the values copied in: the model's arrays are views there
        self.grad, grad_fd = shared_array(data.size, data.dtype)
        here, there = socket.socketpair()
        blas = str(max(1, parallel.num_threads() // 2))
        env = {
            **os.environ,
            "OPENBLAS_NUM_THREADS": blas,
            "OMP_NUM_THREADS": blas,
            "MKL_NUM_THREADS": blas,
            "TWINFORMER_NUM_THREADS": "1",
        }
        fds = (there.fileno(), fd, grad_fd)
        args = [str(a) for a in (*fds, data.size, data.dtype.str)]
        self.process = subprocess.Popen(
            [sys.executable, "-c", _BOOT, json.dumps(_import_path()), *args],
            pass_fds=fds,
            env=env,
            close_fds=True,
            start_new_session=True,  # a terminal's Ctrl-C or Ctrl-Z reaches the caller alone
        )
        there.close()
        os.close(fd)
        os.close(grad_fd)
        self.conn = Connection(here.detach())
        self._finalizer = weakref.finalize(self, _stop, self.conn, self.process)
        # replies owed: counted before a command is written and after its reply is read, so
        # a command cut short anywhere (a KeyboardInterrupt inside ``send``, say) leaves a
        # count that makes the caller close this worker rather than read a reply out of turn
        self.unread = 0

    def send(self, message) -> None:
        self.unread += 1
        self.conn.send(message)

    def recv(self):
        try:
            reply = self.conn.recv()
        except (EOFError, OSError) as e:
            raise _WorkerLost(self.why(e)) from e
        self.unread -= 1
        return reply

    def why(self, error: BaseException) -> str:
        """Words for a lost worker: how it ended (``killed by SIGKILL``, ``exit status 1``)
        once it has (a second at most), else the socket's error."""
        import signal

        try:
            code = self.process.wait(timeout=1)
        except subprocess.TimeoutExpired:
            return str(error) or type(error).__name__
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                pass
        return f"exit status {code}"

    def close(self) -> None:
        self._finalizer()


def _import_path() -> list[str]:
    """The worker's ``sys.path``: the folders this process imported ``numpy_impl`` and
    ``labs`` from (a learner's workspace, say, put first on ``sys.path`` as
    ``parity_tests/conftest.py`` does), then this process's ``sys.path`` (as
    ``multiprocessing``'s spawn passes it on): the worker unpickles the model into the
    very classes this process runs, whatever its working directory holds."""
    import numpy_impl

    here = os.path.dirname(os.path.abspath(__file__))  # .../labs/plumbing
    roots = [os.path.dirname(os.path.dirname(os.path.abspath(numpy_impl.__file__)))]
    roots.append(os.path.dirname(os.path.dirname(here)))
    roots += [p for p in sys.path if isinstance(p, str)]  # as they are (path hooks' names)
    return list(dict.fromkeys(roots))  # each once, in order


def _stop(conn: Connection, process: subprocess.Popen) -> None:
    """Close the socket (the worker exits at its end of file) and wait for the process."""
    try:
        conn.close()
    except OSError:
        pass
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
