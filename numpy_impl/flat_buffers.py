"""The parameters in two flat buffers: zeroing, clipping and AdamW in a few calls each.

AdamW's update and gradient clipping are elementwise (clipping's norm a sum of
squares per parameter): over the default model's 52 separate arrays they cost
52 sets of short NumPy calls, one after the other on one core. Laid out as
consecutive views of one buffer for the values and one for the gradients
(:class:`FlatParameters`, which the NumPy backend builds at its first training
step), the same work is one set of calls over all of them: zeroing one
``fill``; clipping one scaling, after a sum of squares per parameter as in the
formula (:func:`clip_grad_norm_`); AdamW one :func:`fused.adamw_update
<numpy_impl.fused.adamw_update>` per param group, shared among ``parallel.py``'s
threads in one hand-off (halves of the buffer on two cores, each thread stepping its
part of every group; a buffer under :data:`FLAT_MIN_BLOCK` numbers runs whole)
(:func:`adamw_step`). Each thread makes one long call per operation of the
update (over its part of the buffer), and the hand-off between threads is paid
once per step, not once per parameter.

Nothing here is a new formula: :func:`adamw_step` gives the same bits as
``optim.AdamW.step`` one parameter at a time (or declines and changes nothing),
:func:`clip_grad_norm_` equals ``optim.clip_grad_norm_`` to rounding
(``parity_tests/test_flat_buffers.py``). docs/speed.md ("The parameters in one
buffer", stage 6) has the measurements.

No twin: the idea is PyTorch FSDP's ``FlatParameter`` and NVIDIA apex's
multi-tensor ``FusedAdam``; eager PyTorch on a CPU runs its optimizer one tensor
at a time, each operation on its own thread pool.
"""

from __future__ import annotations

import math

import numpy as np

from .fused import adamw_exact, adamw_update
from .parallel import for_blocks, num_threads, row_blocks


class FlatParameters:
    """Parameters whose values and gradients are consecutive views of two flat buffers.

    Building one moves each
    parameter's ``data`` (and its gradient, if allocated) into ``data[lo:hi]`` (and
    ``grad[lo:hi]``), in the given order, reshaped: the same values in new memory. The
    layers never see the difference (they write gradients in place, ``p.grad += ...``),
    and neither do :meth:`Module.load_state_dict` or AdamW's formula path (both write in
    place); whoever rebinds a ``p.data`` or a ``p.grad`` (``Module.astype``) breaks the
    layout, which :meth:`intact` then reports.

    Source: PyTorch FSDP's ``FlatParameter`` (Zhao et al. 2023, "PyTorch FSDP", sec. 3.2)
    and NVIDIA apex's multi-tensor ``FusedAdam``: one flat buffer per set of parameters.

    Args:
        params: distinct Parameters of one floating dtype, in the buffers' order.

    Attributes:
        params: the list. data, grad: the ``(N,)`` buffers, N the parameters' total size.
        bounds: ``params[i]`` is ``data[bounds[i]:bounds[i + 1]]``.
        exp_avg, exp_avg_sq: AdamW's moments laid out as ``data`` (``(N,)``),
            made (zeros) by :func:`adamw_step` when it first steps these parameters; a
            state loaded from elsewhere is copied in, values kept.

    Raises:
        ValueError: ``params`` empty, repeated, or of several dtypes (named).
    """

    def __init__(self, params):
        self.params = list(params)
        if not self.params:
            raise ValueError("params: expected at least one Parameter, got none")
        if len({id(p) for p in self.params}) != len(self.params):
            raise ValueError("params: a Parameter appears twice (tied weights belong once)")
        dtypes = {p.data.dtype for p in self.params}
        if len(dtypes) != 1 or not np.issubdtype(next(iter(dtypes)), np.floating):
            raise ValueError(f"params: expected one floating dtype, got {sorted(map(str, dtypes))}")
        self.bounds = [0]
        for p in self.params:
            self.bounds.append(self.bounds[-1] + p.data.size)
        self.data = np.concatenate([p.data.ravel() for p in self.params])  # (N,)
        self.grad = np.zeros_like(self.data)  # (N,)
        for p, lo, hi in zip(self.params, self.bounds[:-1], self.bounds[1:], strict=True):
            shape, grad = p.data.shape, p._grad
            p.data = self.data[lo:hi].reshape(shape)
            p.grad = self.grad[lo:hi].reshape(shape)
            if grad is not None:
                p.grad[...] = grad
        self._views = [(p, p.data, p._grad) for p in self.params]
        self._index = {id(p): i for i, p in enumerate(self.params)}
        self.exp_avg = self.exp_avg_sq = None
        self._moments: dict[int, tuple] = {}  # id(p) -> the views state[p] should hold

    def move_data(self, buffer: np.ndarray) -> None:
        """Move the values into ``buffer`` (``(N,)``, ``data``'s dtype; shared memory, say:
        ``labs/plumbing/shard_process.py``), every parameter's ``data`` made its view there.

        Shapes: buffer ``(N,)``. Raises: ValueError: another shape or dtype (named).
        """
        if buffer.shape != self.data.shape or buffer.dtype != self.data.dtype:
            raise ValueError(
                f"buffer: expected shape {self.data.shape} and dtype {self.data.dtype}, "
                f"got {buffer.shape} and {buffer.dtype}"
            )
        buffer[...] = self.data
        self.data = buffer
        for p, lo, hi in zip(self.params, self.bounds[:-1], self.bounds[1:], strict=True):
            p.data = buffer[lo:hi].reshape(p.data.shape)
        self._views = [(p, p.data, p._grad) for p in self.params]

    def zero_grad(self) -> None:
        """Every gradient set to zero, in one call (``optim.AdamW.zero_grad``, flat)."""
        self.grad[...] = 0.0

    def intact(self) -> bool:
        """True while every parameter's ``data`` and ``grad`` are still this object's views."""
        return all(p.data is d and p._grad is g for p, d, g in self._views)

    def run_of(self, params) -> tuple[int, int] | None:
        """``(lo, hi)`` when ``params`` are ``self.params[i:j]`` in order (the buffers'
        ``[lo:hi]``), else None."""
        i = self._index.get(id(params[0]), -1) if params else -1
        j = i + len(params)
        if (
            i < 0
            or j > len(self.params)
            or any(a is not b for a, b in zip(params, self.params[i:j], strict=True))
        ):
            return None
        return self.bounds[i], self.bounds[j]


def flat_parameters(flat: FlatParameters | None, params) -> FlatParameters:
    """``flat`` while it is :meth:`~FlatParameters.intact` and holds ``params`` in
    order, else a new :class:`FlatParameters` of ``params`` (their values moved in).

    Shapes: every parameter keeps its own. Raises: :class:`FlatParameters`'s
    ``ValueError`` (no parameters, one twice, several dtypes).
    """
    params = list(params)
    if flat is not None and flat.intact() and flat.run_of(params) == (0, len(flat.data)):
        return flat
    return FlatParameters(params)


def adamw_step(optimizer, flat: FlatParameters) -> bool:
    """``optim.AdamW.step`` (every group) as :func:`adamw_update` calls over ``flat``'s
    buffers: the buffer shared among the pool's threads in one hand-off, each thread
    updating its share of every group's run (one call per group it meets). The same bits
    as the step, one parameter at a time, and as its formula (tested).

    Steps only when every group's parameters are a run of ``flat``'s, ``flat`` is
    :meth:`~FlatParameters.intact`, no parameter is in two groups, each group's
    parameters share one step count (or have no state yet) and :func:`adamw_exact`
    holds; otherwise returns False having changed nothing, and the caller runs
    ``optimizer.step()``. The moments move into
    ``flat.exp_avg`` and ``flat.exp_avg_sq`` (``optimizer.state`` holds views of them,
    values kept: a state loaded from a checkpoint comes in once).

    Shapes: the buffers ``(N,)``. Returns True when it stepped. Raises nothing of its own.
    Source: Loshchilov & Hutter 2019, Algorithm 2 (``optim.AdamW``'s formula); one
    update over many parameters' buffer as in NVIDIA apex's multi-tensor ``FusedAdam``.
    """
    if not flat.intact():
        return False
    plans = []
    seen: set[int] = set()  # a parameter in two groups is stepped twice by the formula
    for group in optimizer.param_groups:
        params = group["params"]
        run = flat.run_of(params) if params else (0, 0)
        if run is None or not seen.isdisjoint(map(id, params)):
            return False
        seen.update(map(id, params))
        states = [optimizer.state.get(p) for p in params]
        steps = {None if s is None else s["step"] for s in states}
        if len(steps) > 1:
            return False
        step = steps.pop() if steps else None
        t = 1 if step is None else step + 1
        lo, hi = run
        beta1, beta2 = group["betas"]
        hyper = group["lr"], beta1, beta2, group["eps"], group["weight_decay"]
        data = flat.data[lo:hi]
        if not adamw_exact(data, data, data, data, *hyper, t=t):
            return False
        for p, s in zip(params, states, strict=True):
            moments = () if s is None else (s["exp_avg"], s["exp_avg_sq"])
            views = flat._moments.get(id(p))  # None until this layout has stepped p
            if (
                s is not None
                and views is not None
                and moments[0] is views[0]
                and moments[1] is views[1]
            ):
                continue  # this layout's own views (every step but the first): shape, dtype right
            if any(np.shape(x) != p.data.shape or np.result_type(x) != data.dtype for x in moments):
                return False  # the formula path raises (or widens) as it always did
        plans.append((params, states, t, lo, hi, hyper))
    if flat.exp_avg is None:
        flat.exp_avg, flat.exp_avg_sq = np.zeros_like(flat.data), np.zeros_like(flat.data)
    for params, states, _, _, _, _ in plans:
        for p, state in zip(params, states, strict=True):
            m, v = flat._moments.get(id(p)) or _moment_views(flat, p)
            if state is None:
                m[...] = 0.0
                v[...] = 0.0
                optimizer.state[p] = {"step": 0, "exp_avg": m, "exp_avg_sq": v}
            elif state["exp_avg"] is not m or state["exp_avg_sq"] is not v:
                m[...] = state["exp_avg"]  # a loaded state: its values, in the flat layout
                v[...] = state["exp_avg_sq"]
                state["exp_avg"], state["exp_avg_sq"] = m, v
            optimizer.state[p]["step"] += 1
    arrays = flat.data, flat.grad, flat.exp_avg, flat.exp_avg_sq
    runs = [(lo, hi, t, hyper) for _, _, t, lo, hi, hyper in plans if hi > lo]

    def run(a: int, b: int) -> None:  # buffer[a:b]: its part of every group's run
        for lo, hi, t, hyper in runs:
            lo, hi = max(lo, a), min(hi, b)
            if lo < hi:  # elementwise: the same bits however the buffer is cut
                p, g, m, v = (x[lo:hi] for x in arrays)
                adamw_update(p, g, m, v, t, *hyper)

    # one hand-off for all the groups: each thread takes a share of the whole buffer
    n = len(flat.data)
    for_blocks(run, row_blocks(n, 1, max(-(-n // num_threads()), FLAT_MIN_BLOCK)))
    return True


#: :func:`adamw_step` cuts the buffer in one piece per thread, of at least this many numbers
FLAT_MIN_BLOCK = 32768


def _moment_views(flat: FlatParameters, p) -> tuple[np.ndarray, np.ndarray]:
    i = flat._index[id(p)]
    lo, hi = flat.bounds[i], flat.bounds[i + 1]
    views = tuple(x[lo:hi].reshape(p.data.shape) for x in (flat.exp_avg, flat.exp_avg_sq))
    flat._moments[id(p)] = views
    return views


def clip_grad_norm_(flat: FlatParameters, max_norm: float) -> float:
    """``optim.clip_grad_norm_`` over all of ``flat``'s gradients: the norm
    ``sqrt(sum g^2)`` (each parameter's sum of squares by one ``np.einsum`` in its dtype,
    the sums added as Python floats, as the formula adds its per-parameter sums: so a
    sum that overflows here overflows there; equal to the formula's to rounding, and the
    same bits on any thread count), then every gradient times ``max_norm / (norm + 1e-6)``
    in one call when that is below 1. Returns the norm before clipping.

    Shapes: ``flat.grad`` ``(N,)``, written. Raises nothing (a NaN norm clips nothing,
    an infinite one makes the gradients NaN, as the formula does). Source: Pascanu et
    al. 2013, "On the difficulty of training recurrent neural networks", Algorithm 1
    (global-norm clipping), with ``torch.nn.utils.clip_grad_norm_``'s ``1e-6``.
    """
    g, bounds = flat.grad, flat.bounds
    total = sum(
        float(np.einsum("i,i->", g[lo:hi], g[lo:hi]))
        for lo, hi in zip(bounds[:-1], bounds[1:], strict=True)
    )
    total_norm = math.sqrt(total)
    clip_coef = max_norm / (total_norm + 1e-6)
    if clip_coef < 1.0:
        g *= clip_coef
    return total_norm
