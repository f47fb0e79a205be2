"""Data parallelism on ``torch.distributed``, for the NumPy twin and shared with the torch one.

Each rank runs its rows of the batch through its own copy of the model.
:class:`GradientAllReduce` is the NumPy twin's ``DistributedDataParallel``: the gradients
summed over the ranks by gloo's all-reduce, as ``torch.from_numpy`` views (no copy).
Both backends share :func:`eval_mean`, :func:`with_ranks` and :func:`own_state`.

Source: Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data Parallel
Training", sec. 3 (broadcast at construction, gradient buckets all-reduced in the order
backward finishes them, no reduction while accumulating).
"""

from __future__ import annotations

import sys

import numpy as np


def rank_and_world() -> tuple[int, int]:
    """``(rank, world size)`` of the process group; ``(0, 1)`` without one."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def eval_mean(eval_loss, batches: list) -> float:
    """``eval_loss(batches)`` (a mean over equal batches), each rank evaluating
    ``batches[rank::world]`` (a collective: every rank calls it, with the same batches)."""
    rank, world = rank_and_world()
    if world == 1:
        return eval_loss(batches)
    import torch.distributed as dist

    mine = batches[rank::world]
    parts = [None] * world
    dist.all_gather_object(parts, (eval_loss(mine) * len(mine) if mine else 0.0, len(mine)))
    return sum(s for s, _ in parts) / sum(n for _, n in parts)


def with_ranks(state: dict) -> dict:
    """``state`` (this rank's generator state, JSON-ready) plus ``"by_rank"``, every
    rank's, when there are several (a collective: every rank calls it)."""
    rank, world = rank_and_world()
    if world == 1:
        return state
    import torch.distributed as dist

    by_rank = [None] * world
    dist.all_gather_object(by_rank, state)
    return {**state, "by_rank": by_rank}


def own_state(state: dict) -> dict | None:
    """This rank's entry of a :func:`with_ranks` state (the state itself when it has
    no ``"by_rank"``); None when the saved run had fewer ranks (seed it afresh)."""
    rank, _ = rank_and_world()
    by_rank = state.get("by_rank") or [state]
    return by_rank[rank] if rank < len(by_rank) else None


def buckets(model, cap_bytes: float) -> list[tuple[object, list]]:
    """The parameters in the order backward finishes their gradients: ``(module, params)``
    per bucket, ``module`` the top-level child (a block of a ``ModuleList``) whose backward
    completes it. Children in reverse forward order, consecutive ones merged until a bucket
    holds ``cap_bytes``; a shared parameter (the tied head) belongs to its earliest owner
    in the forward, whose backward adds its last gradient.
    """
    from numpy_impl.module import Module, ModuleList

    units, owner = [], {}
    for child in vars(model).values():
        for unit in child if isinstance(child, ModuleList) else [child]:
            if isinstance(unit, Module):
                mine = [p for p in unit.parameters() if owner.setdefault(id(p), unit) is unit]
                units.append((unit, mine))
    out, size = [], cap_bytes
    for unit, params in reversed(units):
        if not params:
            continue
        if size >= cap_bytes:  # the last bucket is full: open a new one
            out.append((unit, []))
            size = 0
        out[-1] = (unit, out[-1][1] + params)
        size += sum(p.data.nbytes for p in params)
    out[-1][1].extend(p for p in model.parameters() if id(p) not in owner)  # the model's own
    return out


class GradientAllReduce:
    """Sum a NumPy model's gradients over the ranks, DistributedDataParallel's way.

    Broadcasts rank 0's weights at construction. After :meth:`arm` (the last micro-batch),
    each bucket (:func:`buckets`) starts its asynchronous all-reduce when the backward of
    its last module returns; :meth:`finish` waits and divides by the number of ranks. A
    bucket that is one run of a flat gradient buffer is reduced in place.

    Args:
        model: a ``numpy_impl`` Module; its top-level children's ``backward`` are wrapped
            (instance attributes).
        bucket_mb: bucket size, MiB (DDP's ``bucket_cap_mb``); 0: one bucket per child.
    """

    def __init__(self, model, bucket_mb: float):
        import torch
        import torch.distributed as dist

        self.torch, self.dist = torch, dist
        self.world = dist.get_world_size()
        for p in model.parameters():
            dist.broadcast(torch.from_numpy(p.data), src=0)
        self.buckets = buckets(model, bucket_mb * 2**20)
        self.armed, self.flat, self.pending = False, None, []
        for i, (unit, _) in enumerate(self.buckets):
            unit.backward = self._hooked(unit.backward, i)

    def _hooked(self, backward, i: int):
        def wrapped(*args, **kwargs):
            dx = backward(*args, **kwargs)
            if self.armed:
                self._start(self.buckets[i][1])
            return dx

        return wrapped

    def arm(self, flat=None) -> None:
        """Reduce during the next backward (the step's last micro-batch); ``flat``: the
        parameters' flat buffers, if they have them."""
        self.armed, self.flat = True, flat

    def _start(self, params: list) -> None:
        runs = self.flat.runs(params) if self.flat is not None else []
        if len(runs) == 1:  # one slice of the flat gradient buffer: reduced in place
            buf, grads = self.flat.grad[runs[0][0] : runs[0][1]], None
        elif len(params) == 1 and params[0].grad.flags.c_contiguous:  # its own array
            buf, grads = params[0].grad.reshape(-1), None
        else:
            grads = [p.grad for p in params]
            buf = np.concatenate([g.ravel() for g in grads])
        work = self.dist.all_reduce(self.torch.from_numpy(buf), async_op=True)
        self.pending.append((work, buf, grads))

    def finish(self, loss: float) -> float:
        """Wait for every bucket, divide by the number of ranks; return the mean of the
        ranks' ``loss`` (the whole batch's)."""
        self.armed = False
        total = self.torch.tensor([loss], dtype=self.torch.float64)
        self.dist.all_reduce(total)
        for work, buf, grads in self.pending:
            work.wait()
            buf /= self.world
            lo = 0
            for g in grads or ():  # back from the bucket's own buffer
                g[...] = buf[lo : lo + g.size].reshape(g.shape)
                lo += g.size
        self.pending.clear()
        return float(total) / self.world
