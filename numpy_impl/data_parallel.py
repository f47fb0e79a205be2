"""Shards of a batch on the cores of one CPU: ``torch.nn.DataParallel``'s idea, in NumPy.

:class:`DataParallel` cuts a training step's (or an evaluation's) batch in
shards by its size alone, runs the model on the first and a copy of it that
shares its weights (``module.replicate``) on each other, each on a thread of
``parallel.py``'s pool (:func:`parallel.for_blocks`), and adds the copies'
gradients into the model's, shard by shard in order: the same bits on any
thread count. ``labs/plumbing/backends_numpy.py`` runs its steps through it;
docs/speed.md ("Shards of the batch, one per core") has the measurements.

No twin: PyTorch's ``torch.nn.DataParallel`` shares a batch out across GPUs,
and on a CPU torch uses its own thread pool inside each operation.
"""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, is_grad_enabled, replicate_with_twins
from .parallel import _check_threads, for_blocks, row_blocks

DATA_PARALLEL_SHARDS = 2  # a batch is cut in at most this many shards, by its size alone


class DataParallel(Module):
    """``torch.nn.DataParallel`` on the cores of one CPU: the batch cut in shards,
    each shard's forward and backward on a thread of its own, the gradients summed.

    Layers run a NumPy call after another, and every call is short at a small
    batch: one array per call shared out between threads (``parallel.map_rows``) pays
    a hand-off for each, and a thread woken to help takes longer to start (~0.1 ms
    on a VM) than a small call takes to run. A shard is the whole model's forward
    (or backward) on some rows of the batch: one hand-off per shard, and each
    thread runs its own layers' calls while the other runs its own, on its own
    core; their matrix products share BLAS's threads (one each on 2 cores). On a
    2-core VM the default model's step (B=12, T=64) took 58-60 ms instead of
    72-79 ms (one process, the two settings alternated), and 40 evaluation
    batches of 60 rows 3.1-3.4 s instead of 4.1 s (docs/speed.md, stage 4).

    ``module`` runs the first shard itself; each other shard runs on a
    :func:`~numpy_impl.module.replicate` of it, made at each forward (the same
    weights, caches and gradients of its own). :meth:`backward` adds each copy's
    parameter gradients into ``module``'s, shard by shard in order, after its
    own: the whole batch's gradient, whatever the thread count (one thread runs
    the shards one after the other, the same NumPy calls on the same rows: the
    same bits). Training with dropout draws, in the calling thread, one seed per
    other shard from each of ``module``'s generators for the copy's masks, so a
    seeded run is repeatable and resumes exactly from the generators' states.

    Shards are cut by the batch size alone, never by the thread count
    (:data:`DATA_PARALLEL_SHARDS` at most, one row at least each); a batch of one
    row runs on ``module`` as it is. Calls inside the shards that would use the
    pool (``parallel.map_rows``, ``parallel.for_blocks``) run in the shard's own thread.

    Args:
        module: the model; its ``forward`` takes one array whose first axis is the
            batch and returns one (a :class:`~numpy_impl.gpt.GPT`: ids ``(B, T)`` ->
            logits ``(B, T, V)``); its ``backward`` returns the input's gradient (one array)
            or None.
        n_shards: at most this many shards (a positive int).

    Shapes:
        forward: x ``(B, ...)`` -> ``module``'s output ``(B, ...)``, the shards' outputs
        joined in order. backward: dout, the output's shape -> ``module``'s input
        gradient (shards joined) or None.

    Source: data parallelism as in ``torch.nn.DataParallel`` (PyTorch's docs: scatter
    the batch, replicate the module, run in parallel, gather; gradients summed into
    the original module) and Krizhevsky 2014, "One weird trick for parallelizing
    convolutional neural networks", sec. 2 (a batch's examples shared out between
    workers holding the same weights).

    Raises:
        ValueError: ``n_shards`` not a positive int; a ``dout`` of another shape than
            the output. Whatever ``module`` raises for the whole batch (a shard's error
            is raised again by ``module`` on the whole input, so the message names the
            batch the caller passed).
    """

    def __init__(self, module: Module, n_shards: int = DATA_PARALLEL_SHARDS):
        self.module = module
        self.n_shards = _check_threads(n_shards, "n_shards")
        self._replicas = self._shards = self._out_shape = self._twins = self._params = None

    def shards(self, batch: int) -> list:
        """``[(start, stop), ...]``: the rows of each shard of a batch of ``batch`` rows."""
        return row_blocks(batch, 1, -(-batch // self.n_shards))

    def forward(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        shards = self.shards(len(x)) if x.ndim else []
        self._replicas = self._twins = None
        if len(shards) <= 1:
            return self.module(x)
        copies = [replicate_with_twins(self.module) for _ in shards[1:]]
        replicas = [self.module] + [replica for replica, _ in copies]
        # the originals every copy was made from, in the copies' order: one list for every
        # replica (the same walk), read here instead of walking the model again
        originals = [original for original, _ in copies[0][1].values()]
        generators = _of_type(originals, np.random.Generator) if self.module.training else []
        states = [g.bit_generator.state for g in generators]  # before the shards draw
        if generators:
            _reseed(generators, [twins for _, twins in copies])
        outs: list = [None] * len(shards)

        def run(lo: int, hi: int) -> None:  # under the caller's no_grad() (for_blocks)
            i = shards.index((lo, hi))
            outs[i] = replicas[i](x[lo:hi])

        try:
            for_blocks(run, shards, blas=True)
        except Exception as shard_error:
            # the dropout streams as they were, so that a refused batch draws what the model
            # alone would have drawn (nothing, for ids it refuses before its first dropout)
            for g, state in zip(generators, states, strict=True):
                g.bit_generator.state = state
            self.module(x)  # the whole batch: raises the same error about the caller's input
            raise shard_error  # only a shard failed: its own error
        out = np.concatenate(outs, axis=0)
        if is_grad_enabled():
            self._replicas, self._shards, self._out_shape = replicas, shards, out.shape
            self._twins = [twins for _, twins in copies]
            self._params = _of_type(originals, Parameter)
        return out

    def backward(self, dout: np.ndarray):
        """Each shard's backward on its own thread, then every copy's parameter gradients
        added into ``module``'s, copy by copy in shard order (the parameters shared out
        between the pool's threads by size: each parameter's sum is its own, so the same
        bits on any thread count).

        Shapes: dout, the forward's output shape -> the input's gradient, the shards'
        joined ``(B, ...)``, or None when ``module.backward`` returns None.
        Raises: ValueError: ``dout`` of another shape than the output.
        """
        replicas, shards = self._replicas, self._shards
        if replicas is None:  # one shard: the module ran alone (or says why it cannot)
            return self.module.backward(dout)
        if np.shape(dout) != self._out_shape:
            raise ValueError(f"dout: expected shape {self._out_shape}, got {np.shape(dout)}")
        twins_list = self._twins  # for each replica, its copies of the module's objects
        self._replicas = self._twins = None  # one backward per forward, as every layer
        grads: list = [None] * len(shards)

        def run(lo: int, hi: int) -> None:
            i = shards.index((lo, hi))
            grads[i] = replicas[i].backward(dout[lo:hi])

        for_blocks(run, shards, blas=True)
        params = self._params  # each parameter once (a tied one is one object)

        def add(lo: int, hi: int) -> None:  # params[lo:hi]: each its copies' gradients
            for p in params[lo:hi]:
                for twins in twins_list:  # shard order: the same sums on any thread count
                    q = twins[id(p)][1]  # p's copy in this shard's replica
                    if q._grad is not None:
                        p.grad += q._grad

        for_blocks(add, _halves_by_size(params))  # elementwise: any split, the same bits
        return None if grads[0] is None else np.concatenate(grads, axis=0)  # (B, ...)


def _reseed(own: list, replicas_twins: list) -> None:
    """Give each replica's copies of the module's generators ``own``
    a stream of their own, seeded from ``own`` (one draw each, replica by replica, in
    order), so no two shards drop the same units. ``replicas_twins``: for each replica,
    :func:`~numpy_impl.module.replicate_with_twins`'s map from originals to copies."""
    seeds = shard_seeds(own, len(replicas_twins))
    for twins, replica_seeds in zip(replicas_twins, seeds, strict=True):
        seed_generators([twins[id(g)][1] for g in own], replica_seeds)


def shard_seeds(own: list, n_copies: int) -> list:
    """``[[seed per generator] per copy]``: one draw from each generator of ``own``, copy
    by copy, in order (what :class:`DataParallel` gives each shard past the first)."""
    return [[int(g.integers(2**63)) for g in own] for _ in range(n_copies)]


def seed_generators(generators: list, seeds: list) -> None:
    """Start each generator's stream afresh from its seed (the same kind of bit generator)."""
    for g, seed in zip(generators, seeds, strict=True):
        g.bit_generator.state = type(g.bit_generator)(seed).state


def _halves_by_size(params: list) -> list:
    """``[(0, i), (i, len(params))]``: ``params`` cut where the first part holds about half
    of their numbers (one part for fewer than two parameters). By their sizes alone."""
    sizes = np.cumsum([p.data.size for p in params])
    if len(params) < 2:
        return [(0, len(params))]
    i = int(np.searchsorted(sizes, sizes[-1] / 2))  # the first prefix holding half of them
    i = min(max(i, 1), len(params) - 1)
    return [(0, i), (i, len(params))]


def _of_type(objects: list, kind: type) -> list:
    """The objects of ``objects`` (distinct already: one per id) that are ``kind``s, in order."""
    return [obj for obj in objects if isinstance(obj, kind)]
