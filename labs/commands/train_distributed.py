"""``python -m labs train`` under ``torchrun --nproc_per_node N``: the process group.

Rank 0 alone prints and writes; every rank draws the same batch and keeps its
slice (see ``train.py``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys

from .. import UserError


# -- several processes: torchrun ---------------------------------------------------
def _init_distributed(args: argparse.Namespace) -> tuple[int, int]:
    """``(rank, world_size)``: ``(0, 1)`` in a plain process; under ``torchrun``
    with more than one process, joins the process group: gloo on the CPU, nccl
    with ``--device cuda``.

    Raises:
        UserError: several processes but ``--backend numpy``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if args.backend != "torch":
        raise UserError(
            f"{world} processes (torchrun): multi-process training needs --backend torch"
        )
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
    """End a torchrun worker process now, skipping the interpreter's finalization.

    Gloo's worker threads can still hold work objects whose tensors are freed
    during finalization, after the interpreter can no longer take the GIL; the
    process then aborts with SIGABRT after a run that finished and wrote
    everything (pytorch/pytorch pull request 179291 describes the crash). Every
    file this project writes is complete (atomic writes) before this is called.
    A plain process (no torchrun) exits normally.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
