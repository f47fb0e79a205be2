"""``python -m labs train`` in several processes: the process group, and the launcher.

Under ``torchrun`` the ranks exist already. Otherwise :func:`launch` starts them through
torch's own launcher API, meeting at a ``TCPStore`` this process hosts (torchrun's way).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import os
import signal
import sys
import threading
import time
import warnings

from .. import UserError
from .shared import positive_int

PROCESSES_ENV = "TWINFORMER_PROCESSES"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the cores this process may run on
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def processes_to_start(args: argparse.Namespace) -> int:
    """How many ranks ``labs train`` starts itself: 1 under torchrun; else ``--processes``,
    ``$TWINFORMER_PROCESSES`` (UserError: not a count) or (NumPy) one per core, lowered to
    the largest count dividing the batch (a resumed run's, as recorded)."""
    if "WORLD_SIZE" in os.environ:
        return 1
    wanted = args.processes
    if wanted is None and os.environ.get(PROCESSES_ENV, "").strip():
        try:
            wanted = positive_int(os.environ[PROCESSES_ENV])
        except argparse.ArgumentTypeError as e:
            raise UserError(f"{PROCESSES_ENV}: {e}") from None
    backend, batch = args.backend, args.batch_size
    if args.resume is not None and wanted != 1:  # the run's recorded backend and batch
        from ..plumbing.checkpoint import load_checkpoint
        from .train_resume import _given_options

        try:
            with warnings.catch_warnings():  # the ranks say what they load
                warnings.simplefilter("ignore")
                recorded = load_checkpoint(args.resume or args.out or f"runs/{backend}")[1]["train"]
            backend = backend or recorded["backend"]
            batch = batch if "batch_size" in _given_options(args) else int(recorded["batch_size"])
        except (OSError, ValueError, KeyError, TypeError):
            return 1
    if wanted is None:
        wanted = _cores() if backend == "numpy" else 1
    if wanted == 1 or batch < 1:
        return 1  # (run() refuses a batch below 1)
    n = max(d for d in range(1, min(wanted, batch) + 1) if batch % d == 0)
    if n < wanted:
        print(f"{n} processes, not {wanted}: the most that divide --batch-size {batch}")
    return n


def launch(args: argparse.Namespace, n: int) -> int:
    """Run ``args.argv`` in ``n`` spawned ranks; return rank 0's exit status, or the first
    failing rank's. The ranks die with this process; Ctrl-C here ends them (and is raised)."""
    from multiprocessing.connection import wait

    import torch.distributed as dist
    import torch.multiprocessing as mp

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(store.port),
        "WORLD_SIZE": str(n),
        "LOCAL_WORLD_SIZE": str(n),
        "TORCHELASTIC_USE_AGENT_STORE": "True",  # the ranks join this store (torchrun's way)
    }
    threads = str(max(1, _cores() // n))  # the cores shared out, not each rank on all
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[var] = os.environ.get(var, threads)
    saved = dict(os.environ)
    os.environ.update(env)  # what the spawned ranks inherit
    try:
        ctx = mp.start_processes(_rank, (args.argv,), n, join=False, start_method="spawn")
    finally:
        os.environ.clear()
        os.environ.update(saved)
    running = {p.sentinel: p for p in ctx.processes}
    status = 0
    try:
        while running and status == 0:
            for sentinel in wait(list(running)):
                p = running.pop(sentinel)
                p.join()
                if p.exitcode:  # a status, or minus the signal that killed it
                    status = p.exitcode if p.exitcode > 0 else 1
    except KeyboardInterrupt:
        print(file=sys.stderr)  # past rank 0's progress bar, cut mid-line
        raise
    finally:  # a failed rank, or Ctrl-C: the others end now (the run resumes as after a kill)
        deadline = time.monotonic() + (GRACE_S if status else 0.0)
        while running and time.monotonic() < deadline:  # a user error fails every rank:
            for sentinel in wait(list(running), timeout=deadline - time.monotonic()):
                running.pop(sentinel).join()  # let rank 0 say it before the others are killed
        for p in running.values():
            p.kill()
            p.join()
    return status


GRACE_S = 5.0  # how long the other ranks may take to end after one failed


def _rank(rank: int, argv: list[str]) -> None:
    """One rank: ``python -m labs`` with ``argv``, in the group :func:`launch` set up."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's: it ends the ranks
    if sys.platform.startswith("linux"):  # die with the launcher (PR_SET_PDEATHSIG = 1)
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank))
    from tqdm import tqdm

    from ..__main__ import main

    tqdm.set_lock(threading.RLock())  # not a semaphore, which exit_worker's os._exit would leak
    try:
        status = main(argv)
    except BaseException:  # a bug: its traceback, as one process would show it
        import traceback

        traceback.print_exc()
        status = 1
    exit_worker(status)


# -- several processes: the group --------------------------------------------------
def _init_distributed(args: argparse.Namespace) -> tuple[int, int]:
    """``(rank, world_size)``, joining the process group of several processes (gloo on the
    CPU, nccl with ``--device cuda``)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():
        if args.device.startswith("cuda"):  # NVIDIA's collectives for CUDA tensors
            import torch

            torch.cuda.set_device(_device(args, world))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def _device(args: argparse.Namespace, world: int) -> str:
    """``--device``, except under torchrun with cuda: one GPU per process, cuda:LOCAL_RANK."""
    if world > 1 and args.device.startswith("cuda"):
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    return args.device


def _shutdown_distributed() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            # leave together: a rank that tears gloo down while rank 0 still writes its
            # checkpoint and sample can abort ("terminate called without an active exception").
            # The DistributedDataParallel wrapper holds the process group too: collected here,
            # while the interpreter is whole, not during its finalization (see __main__.py)
            gc.collect()
            try:
                dist.barrier()
            finally:
                dist.destroy_process_group()
                gc.collect()


def exit_worker(code: int) -> None:
    """End a rank now, skipping the interpreter's finalization (a plain process exits
    normally): gloo's threads may free tensors after the GIL is gone and abort a run that
    wrote everything (pytorch/pytorch PR 179291). Every file is complete by then."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
