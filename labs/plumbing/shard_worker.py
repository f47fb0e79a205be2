"""The worker process of ``shard_process.py``: the batch's second shard, a command at a time.

Started as ``python -m labs.plumbing.shard_worker SOCKET DATA GRAD N DTYPE`` would
start it (with the caller's ``sys.path``: ``shard_process._BOOT``) by
``shard_process.ProcessDataParallel`` (the numbers are file descriptors it
inherits, the buffers' size and dtype). It ignores SIGINT (a terminal's Ctrl-C
reaches the whole process group: the caller decides) and leaves quietly when its
reply meets a closed socket (the caller is gone). It maps the weights' flat buffer and
its own gradients' buffer, then answers commands on the socket until the
socket closes: ``("forward", model pickle or None, x, seeds, settings)`` and
``("backward", dout)``, each answered ``(status, value, warnings)``. The model
arrives as ``shard_process._ModulePickler`` wrote it: each parameter's array
and gradient a view of the shared buffers, each generator reseeded at every
forward. It never writes the weights; it zeroes its gradients at each forward
that will be differentiated (the caller adds them into the model's).
"""

from __future__ import annotations

import contextlib
import io
import mmap
import os
import pickle
import signal
import sys
import warnings
from multiprocessing.connection import Connection

if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group: the caller decides what an
    # interrupt stops (and closes this worker's socket when it stops it), not the worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)

import numpy as np  # noqa: E402 (after the signal: numpy's import takes a while)


def _map_shared(fd: int, n: int, dtype) -> np.ndarray:
    nbytes = max(1, n * np.dtype(dtype).itemsize)
    array = np.frombuffer(mmap.mmap(fd, nbytes), dtype=dtype, count=n)
    os.close(fd)  # the mapping keeps the memory
    return array


class _ModuleUnpickler(pickle.Unpickler):
    """Reads ``shard_process._ModulePickler``'s pickle: arrays named by their place become
    views of this process's mappings, generators fresh ones (reseeded before use)."""

    def __init__(self, file, data: np.ndarray, grad: np.ndarray):
        super().__init__(file)
        self.buffers = {"data": data, "grad": grad}
        self.generators: list = []

    def persistent_load(self, pid):
        if pid[0] == "generator":  # a stream of its own: seeded at every forward
            if pid[1] == len(self.generators):
                self.generators.append(np.random.Generator(getattr(np.random, pid[2])(0)))
            return self.generators[pid[1]]
        kind, lo, hi, shape = pid
        return self.buffers[kind][lo:hi].reshape(shape)


def _serve(sock_fd: int, data_fd: int, grad_fd: int, n: int, dtype: str) -> None:
    """The worker's loop: a command in, a reply out, until its socket closes."""
    from labs.plumbing.runtime import tune_malloc

    tune_malloc()
    from numpy_impl import fused
    from numpy_impl.data_parallel import seed_generators
    from numpy_impl.module import no_grad

    data = _map_shared(data_fd, n, dtype)
    grad = _map_shared(grad_fd, n, dtype)
    conn = Connection(sock_fd)
    model = generators = None
    flags = {"grad": False, "fused": False, "errors": np.geterr()}
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the main process closed its end (or is gone)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # all of them: the caller's filters decide
            try:
                if message[0] == "forward":
                    _, blob, x, seeds, flags = message
                    if blob is not None:
                        model = None
                        unpickler = _ModuleUnpickler(io.BytesIO(blob), data, grad)
                        model, generators = unpickler.load(), unpickler.generators
                    if seeds:
                        seed_generators(generators, seeds)
                    if flags["grad"]:
                        grad[...] = 0.0  # this shard's gradients alone: added in by the caller
                with (  # the caller's settings, for the forward and for its backward
                    fused.kernels(flags["fused"]),
                    np.errstate(**flags["errors"]),
                    contextlib.nullcontext() if flags["grad"] else no_grad(),
                ):
                    reply = model(x) if message[0] == "forward" else model.backward(message[1])
                status = "ok"
            except Exception as e:  # the caller raises it (or the whole batch's error)
                status, reply = ("error", e) if model is not None else ("unusable", repr(e))
        found = [(str(w.message), w.category, w.filename, w.lineno) for w in caught]
        try:
            try:
                conn.send((status, reply, found))
            except OSError:
                raise
            except Exception as e:  # an error or a warning that does not pickle: said in words
                conn.send(("error", RuntimeError(f"{type(reply).__name__}: {reply} ({e})"), []))
        except OSError:
            return  # the main process is gone (killed mid-step): nobody to answer


if __name__ == "__main__":
    _serve(*(int(a) for a in sys.argv[1:5]), sys.argv[5])
