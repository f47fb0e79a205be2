"""``python -m labs bench --profile``: where one training step's time goes, NumPy and torch.

Every module of the NumPy model gets a timing wrapper around its ``forward``
and ``backward`` (instance attributes that shadow the class's methods, so
``numpy_impl`` is untouched and the wrappers vanish with the model). So do the
loss, the optimizer's ``zero_grad`` and ``step``, and gradient clipping
(``numpy_impl.optim.clip_grad_norm_``, swapped for the duration: the backend
imports it when each step runs). Modules nest (a Block calls its LayerNorms,
its attention, its FFN), so each call's time is split into its own time and
its callees': a row holds *self* time only, the time in no deeper wrapped call,
and the rows add up to the step. Whatever no wrapper saw (``model.train()``,
the learning-rate schedule, the finiteness checks, the wrappers' own cost) is
the ``other`` row: the step time, measured around ``train_step``, minus the rest.

Rows are layer kinds, columns the phases: forward (loss included), backward
(the loss's gradient included) and the optimizer (``zero_grad``, clipping,
AdamW), in milliseconds. The numbers are those of the median step (the one
whose time is the median of the profiled steps), so that the rows add up to
it exactly; medians taken cell by cell would not, on a busy machine.

The torch step is broken down by ``torch.profiler`` instead (its modules run
inside autograd, where no wrapper sees the backward): every top-level operator
the profiler records is one call of a layer (``aten::layer_norm``,
``aten::linear``) or its backward (``autograd::engine::evaluate_function:
NativeLayerNormBackward0``), and :func:`torch_kind` maps its name to the same
kinds, coarser: torch's four linear layers are one ``aten::linear`` each and
cannot be told apart by name, so the comparison (:func:`compare_profiles`)
puts NumPy's four linear rows together too. The profiler adds a few
microseconds to each of the step's thousands of operator calls: the torch
profile's step is longer than its unprofiled one (both are reported), and its
small rows are inflated most.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np

#: Row order of the table (kinds absent from a model are left out).
KINDS = (
    "embedding",
    "layernorm",
    "attention qkv projection",
    "attention core",
    "attention out projection",
    "rope",
    "ffn linear",
    "gelu",
    "other activation",
    "head",
    "loss",
    "residual adds, dropout, glue",
    "zero_grad",
    "gradient clipping",
    "AdamW update",
    "other",
)
PHASES = ("forward", "backward", "optimizer", "other")
_BY_CLASS = {
    "Embedding": "embedding",
    "LearnedPositionalEmbedding": "embedding",
    "LayerNorm": "layernorm",
    "RMSNorm": "layernorm",
    "SelfAttention": "attention core",  # its self time: heads split/merged, softmax(QK^T)V
    "MultiHeadAttention": "attention core",
    "RotaryEmbedding": "rope",
    "GELU": "gelu",
    "ReLU": "other activation",
    "SiLU": "other activation",
    "CrossEntropyLoss": "loss",
}


def layer_kind(name: str, module) -> str:
    """The profile row of the module called ``name`` in the model (``""``: the GPT)."""
    names = [c.__name__ for c in type(module).__mro__]  # a fast form counts as its layer
    cls = next((n for n in names if n in _BY_CLASS or n == "Linear"), names[0])
    if cls == "Linear":
        last = name.rsplit(".", 1)[-1]
        if last == "qkv_proj":
            return "attention qkv projection"
        if last == "out_proj":
            return "attention out projection"
        return "head" if name == "head" else "ffn linear"
    return _BY_CLASS.get(cls, "residual adds, dropout, glue")  # GPT, Block, FFN, Dropout


class _Timer:
    """Self time per ``(kind, phase)``: a stack of the callees' time of each open call."""

    def __init__(self):
        self.totals: dict[tuple[str, str], float] = defaultdict(float)
        self._stack: list[float] = []

    def call(self, kind: str, phase: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)``, its self time added to ``(kind, phase)``."""
        stack = self._stack
        stack.append(0.0)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - t0
            callees = stack.pop()
            self.totals[kind, phase] += elapsed - callees
            if stack:
                stack[-1] += elapsed

    def wrap(self, fn, kind: str, phase: str):
        def timed(*args, **kwargs):
            return self.call(kind, phase, fn, *args, **kwargs)

        return timed


@contextmanager
def _instrumented(backend, timer: _Timer):
    """Install the wrappers on ``backend`` (a NumpyBackend); remove them afterwards.

    The modules' wrappers go on their classes, reading each module's kind from an
    attribute set on it (``_profile_kind``)."""
    import numpy_impl.fast as fast
    import numpy_impl.flat_buffers as flat_buffers
    import numpy_impl.optim as optim

    modules = [mod for _, mod in backend.model.named_modules()]
    for name, mod in backend.model.named_modules():
        mod._profile_kind = layer_kind(name, mod)
    patched = []  # (class, method name, its own function before, or None if inherited)
    for cls in dict.fromkeys(type(mod) for mod in modules):
        for method, phase in (("forward", "forward"), ("backward", "backward")):
            patched.append((cls, method, cls.__dict__.get(method)))
            setattr(cls, method, _class_wrapper(timer, getattr(cls, method), phase))
    installed = []  # (object, attribute name) whose instance attribute we set
    loss = backend.loss_fn
    for method, phase in (("forward", "forward"), ("backward", "backward")):
        setattr(loss, method, timer.wrap(getattr(loss, method), "loss", phase))
        installed.append((loss, method))
    opt = backend.optimizer
    opt.zero_grad = timer.wrap(opt.zero_grad, "zero_grad", "optimizer")
    opt.step = timer.wrap(opt.step, "AdamW update", "optimizer")
    installed += [(opt, "zero_grad"), (opt, "step")]
    clip = optim.clip_grad_norm_
    optim.clip_grad_norm_ = timer.wrap(clip, "gradient clipping", "optimizer")
    # the fused step's forms of the same three (the parameters in flat buffers)
    flat_forms = [
        (flat_buffers, "clip_grad_norm_", "gradient clipping"),
        (fast, "adamw_step", "AdamW update"),
        (flat_buffers.FlatParameters, "zero_grad", "zero_grad"),
    ]
    originals = [getattr(owner, name) for owner, name, _ in flat_forms]
    for owner, name, kind in flat_forms:
        setattr(owner, name, timer.wrap(getattr(owner, name), kind, "optimizer"))
    try:
        yield
    finally:
        for (owner, name, _), original in zip(flat_forms, originals, strict=True):
            setattr(owner, name, original)
        optim.clip_grad_norm_ = clip
        for obj, method in installed:
            del obj.__dict__[method]  # the class's method shows through again
        for cls, method, own in reversed(patched):
            if own is None:
                delattr(cls, method)  # the inherited one shows through again
            else:
                setattr(cls, method, own)
        for mod in modules:
            del mod._profile_kind


@contextmanager
def one_thread():
    """NumPy's BLAS on one thread inside the ``with``: the profiles measure work, kind by
    kind (torch's profile runs on one thread too); the step on every core is ``bench``'s
    own table."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _class_wrapper(timer: _Timer, fn, phase: str):
    """``fn`` (a class's forward or backward) timed under its module's ``_profile_kind``;
    an instance without one (a module made outside the model) runs untimed."""

    def timed(module, *args, **kwargs):
        kind = module.__dict__.get("_profile_kind")
        if kind is None:
            return fn(module, *args, **kwargs)
        return timer.call(kind, phase, fn, module, *args, **kwargs)

    return timed


def profile_numpy_step(B: int, T: int, iters: int, warmup: int, seed: int = 0) -> dict:
    """Profile ``iters`` NumPy training steps of the default GPT at batch B, block T.

    Returns:
        a JSON-ready dict: ``batch_size``, ``block_size``, ``iters``,
        ``step_ms`` (the median step, measured around ``train_step``; the rows
        are its breakdown),
        ``rows`` (one per layer kind: ``kind``, ``ms`` per phase, ``total_ms``,
        ``pct`` of ``step_ms``), ``phases`` (``phase``, ``ms``, ``pct``) and
        ``attn_impl`` (the NumPy backend's, None if it has no such setting).
    """
    from ..plumbing.backends import make_backend
    from .bench import VOCAB

    backend = make_backend("numpy", {"vocab_size": VOCAB, "block_size": T}, seed=seed)
    rng = np.random.default_rng(seed)
    timer = _Timer()
    steps: list[dict[tuple[str, str], float]] = []
    totals: list[float] = []
    with one_thread(), _instrumented(backend, timer):
        for i in range(warmup + iters):
            x, y = rng.integers(0, VOCAB, (B, T)), rng.integers(0, VOCAB, (B, T))
            timer.totals.clear()
            t0 = time.perf_counter()
            backend.train_step(x, y)
            total = time.perf_counter() - t0
            if i >= warmup:
                seen = dict(timer.totals)
                seen["other", "other"] = total - sum(seen.values())
                steps.append(seen)
                totals.append(total)

    # The median step's own breakdown: its rows add up to it exactly (medians taken cell by
    # cell would not, when a busy machine makes some steps slow in some layers).
    median = sorted(range(len(totals)), key=totals.__getitem__)[(len(totals) - 1) // 2]
    step_ms = totals[median] * 1e3
    cell = {key: seconds * 1e3 for key, seconds in steps[median].items()}
    return {
        "backend": "numpy",
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "step_ms": step_ms,
        "threads": 1,  # one_thread(): work, kind by kind
        **_breakdown(cell, step_ms, KINDS),
        "attn_impl": getattr(backend, "attn_impl", None),
    }


def _breakdown(cell: dict, step_ms: float, kinds: tuple) -> dict:
    """``rows`` (per kind, in ``kinds``' order: ``ms`` per phase, ``total_ms``, ``pct``)
    and ``phases`` (``phase``, ``ms``, ``pct``) from ``cell``: (kind, phase) -> ms."""
    rows = []
    for kind in kinds:
        ms = {phase: cell[kind, phase] for phase in PHASES if (kind, phase) in cell}
        if ms:
            total_ms = sum(ms.values())
            rows.append(
                {"kind": kind, "ms": ms, "total_ms": total_ms, "pct": _pct(total_ms, step_ms)}
            )
    phases = []
    for phase in PHASES:
        ms = sum(v for (_, p), v in cell.items() if p == phase)
        phases.append({"phase": phase, "ms": ms, "pct": _pct(ms, step_ms)})
    return {"rows": rows, "phases": phases}


def _pct(ms: float, step_ms: float) -> float:
    return 100.0 * ms / step_ms if step_ms > 0 else 0.0


def format_profile(profile: dict) -> list[str]:
    """The profile as table lines: one row per layer kind, a column per phase."""
    B, T = profile["batch_size"], profile["block_size"]
    # "other": time no wrapper (NumPy) or no operator (torch) covers; its own column, so
    # every row's cells add up to its total
    cols = PHASES
    if profile.get("backend") == "torch":
        title = (
            f"where one torch step's time goes, B={B} T={T}, one thread (torch.profiler, the "
            f"mean of {profile['iters']} steps, {profile['step_ms']:.1f} ms; unprofiled "
            f"{profile['unprofiled_step_ms']:.1f} ms; ms):"
        )
    else:
        title = (
            f"where one NumPy step's time goes, B={B} T={T}, one thread (the median of "
            f"{profile['iters']} steps, {profile['step_ms']:.1f} ms; self time in ms):"
        )
    lines = [
        title,
        f"  {'kind':<40}" + "".join(f"{c:>11}" for c in cols) + f"{'total':>11}{'share':>8}",
    ]
    for row in profile["rows"]:
        cells = "".join(f"{row['ms'][c]:>11.2f}" if c in row["ms"] else f"{'':>11}" for c in cols)
        lines.append(f"  {row['kind']:<40}{cells}{row['total_ms']:>11.2f}{row['pct']:>7.1f}%")
    by_phase = {p["phase"]: p for p in profile["phases"]}
    cells = "".join(f"{by_phase[c]['ms']:>11.2f}" for c in cols)
    total = sum(p["ms"] for p in profile["phases"])
    lines.append(
        f"  {'all rows':<40}{cells}{total:>11.2f}{100 * total / profile['step_ms']:>7.1f}%"
    )
    return lines


# -- torch, by torch.profiler ----------------------------------------------------------------
#: The kinds both profiles are compared by (NumPy's finer rows merge into these).
COMPARE_KINDS = (
    "embedding",
    "layernorm",
    "linear layers (GEMM + bias)",
    "attention core",
    "activation (GELU, ...)",
    "loss",
    "optimizer (zero_grad, clipping, AdamW)",
    "residual adds, dropout, glue, other",
)
_NUMPY_TO_COMPARE = {
    "attention qkv projection": "linear layers (GEMM + bias)",
    "attention out projection": "linear layers (GEMM + bias)",
    "ffn linear": "linear layers (GEMM + bias)",
    "head": "linear layers (GEMM + bias)",
    "gelu": "activation (GELU, ...)",
    "other activation": "activation (GELU, ...)",
    "zero_grad": "optimizer (zero_grad, clipping, AdamW)",
    "gradient clipping": "optimizer (zero_grad, clipping, AdamW)",
    "AdamW update": "optimizer (zero_grad, clipping, AdamW)",
    "rope": "residual adds, dropout, glue, other",  # torch's RoPE is plain ops: glue there
    "residual adds, dropout, glue": "residual adds, dropout, glue, other",
    "other": "residual adds, dropout, glue, other",
}
_BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
CLIP_LABEL = "gradient clipping"  # the record_function label put around clip_grad_norm_
# a top-level operator's name (forward) or its autograd node's name (backward) -> kind
_TORCH_OPS = {
    "aten::embedding": "embedding",
    "EmbeddingBackward0": "embedding",
    "aten::layer_norm": "layernorm",
    "NativeLayerNormBackward0": "layernorm",
    "aten::rms_norm": "layernorm",
    "aten::linear": "linear layers (GEMM + bias)",
    "AddmmBackward0": "linear layers (GEMM + bias)",
    "MmBackward0": "linear layers (GEMM + bias)",
    "aten::scaled_dot_product_attention": "attention core",
    "aten::gelu": "activation (GELU, ...)",
    "GeluBackward0": "activation (GELU, ...)",
    "aten::relu": "activation (GELU, ...)",
    "ReluBackward0": "activation (GELU, ...)",
    "aten::silu": "activation (GELU, ...)",
    "SiluBackward0": "activation (GELU, ...)",
    "aten::cross_entropy_loss": "loss",
    "NllLossBackward0": "loss",
    "LogSoftmaxBackward0": "loss",
    CLIP_LABEL: "optimizer (zero_grad, clipping, AdamW)",
}


def torch_kind(name: str) -> tuple[str, str]:
    """``(kind, phase)`` of a top-level ``torch.profiler`` event called ``name``.

    ``autograd::engine::evaluate_function: XBackward0`` is the backward of X;
    ``Optimizer.step#AdamW.step`` and ``Optimizer.zero_grad#...`` are torch's own
    labels, ``gradient clipping`` the profile's; any operator not named here
    (views, copies, the residual adds, dropout) is glue.
    """
    if name.startswith("Optimizer."):
        return "optimizer (zero_grad, clipping, AdamW)", "optimizer"
    if name == CLIP_LABEL:
        return _TORCH_OPS[name], "optimizer"
    phase = "forward"
    if name.startswith(_BACKWARD_PREFIX):
        name, phase = name[len(_BACKWARD_PREFIX) :], "backward"
        if name.startswith("ScaledDotProduct"):  # Flash-, Efficient-, Math... AttentionBackward0
            return "attention core", phase
    return _TORCH_OPS.get(name, "residual adds, dropout, glue, other"), phase


def profile_torch_step(B: int, T: int, iters: int, warmup: int, seed: int = 0) -> dict:
    """Profile ``iters`` torch training steps of the default GPT at batch B, block T.

    The steps are timed twice, ``iters`` steps each: without the profiler (the
    reference, ``unprofiled_step_ms``, a median) and under ``torch.profiler``,
    whose top-level events are summed by :func:`torch_kind` and divided by the
    step count (a mean step). Time no event covers (Python between operators,
    the profiler's own bookkeeping) is the glue row's ``other`` phase.

    Returns:
        a JSON-ready dict like :func:`profile_numpy_step`'s (``rows`` by the kinds of
        :data:`COMPARE_KINDS`, ``phases``, ``step_ms``: the mean profiled step), plus
        ``unprofiled_step_ms`` and ``backend``: ``"torch"``.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    import torch_impl.optim

    from ..plumbing.backends import make_backend
    from .bench import VOCAB

    backend = make_backend("torch", {"vocab_size": VOCAB, "block_size": T}, seed=seed)
    rng = np.random.default_rng(seed)
    batches = [
        (rng.integers(0, VOCAB, (B, T)), rng.integers(0, VOCAB, (B, T)))
        for _ in range(warmup + 2 * iters)
    ]
    plain = []
    clip = torch_impl.optim.clip_grad_norm_

    def labelled_clip(*args, **kwargs):
        with torch.profiler.record_function(CLIP_LABEL):
            return clip(*args, **kwargs)

    profiled = 0.0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the NumPy profile: work, kind by kind (one_thread)
    try:  # torch's thread count restored whatever happens (a failed or interrupted step)
        for i, (x, y) in enumerate(batches[: warmup + iters]):
            t0 = time.perf_counter()
            backend.train_step(x, y)
            if i >= warmup:
                plain.append(time.perf_counter() - t0)
        torch_impl.optim.clip_grad_norm_ = labelled_clip  # the backend imports it at each step
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for x, y in batches[warmup + iters :]:
                t0 = time.perf_counter()
                backend.train_step(x, y)
                profiled += time.perf_counter() - t0
    finally:
        torch_impl.optim.clip_grad_norm_ = clip
        torch.set_num_threads(threads)
    cell: dict[tuple[str, str], float] = defaultdict(float)
    for event in prof.events():
        if event.cpu_parent is None:  # top level: its total holds every operator it called
            cell[torch_kind(event.name)] += event.cpu_time_total / 1e3 / iters  # us -> ms/step
    step_ms = profiled * 1e3 / iters
    cell["residual adds, dropout, glue, other", "other"] = step_ms - sum(cell.values())
    result = _breakdown(cell, step_ms, COMPARE_KINDS)
    return {
        "backend": "torch",
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "step_ms": step_ms,
        "threads": 1,  # one_thread(): work, kind by kind
        "unprofiled_step_ms": statistics.median(plain) * 1e3,
        **result,
        "attn_impl": backend.model.attn_impl,
    }


def compare_profiles(numpy_profile: dict, torch_profile: dict) -> list[dict]:
    """Per kind of :data:`COMPARE_KINDS`: NumPy's ms, torch's ms and their ratio
    (None where torch's is 0), from :func:`profile_numpy_step` and
    :func:`profile_torch_step` at one size. NumPy's finer rows are merged."""
    numpy_ms: dict[str, float] = defaultdict(float)
    for row in numpy_profile["rows"]:
        numpy_ms[_NUMPY_TO_COMPARE.get(row["kind"], row["kind"])] += row["total_ms"]
    torch_ms = {row["kind"]: row["total_ms"] for row in torch_profile["rows"]}
    rows = []
    for kind in COMPARE_KINDS:
        if kind in numpy_ms or kind in torch_ms:
            n, t = numpy_ms.get(kind, 0.0), torch_ms.get(kind, 0.0)
            rows.append({"kind": kind, "numpy_ms": n, "torch_ms": t, "ratio": n / t if t else None})
    return rows


def format_comparison(numpy_profile: dict, torch_profile: dict) -> list[str]:
    """:func:`compare_profiles` as table lines, with both step times."""
    B, T = numpy_profile["batch_size"], numpy_profile["block_size"]
    lines = [
        f"NumPy against torch by kind, B={B} T={T}, both on one thread (ms per step; torch's "
        f"from torch.profiler, a mean step of {torch_profile['step_ms']:.1f} ms against "
        f"{torch_profile['unprofiled_step_ms']:.1f} ms unprofiled, also one thread):",
        f"  {'kind':<40}{'numpy':>9}{'torch':>9}{'numpy/torch':>13}",
    ]
    for row in compare_profiles(numpy_profile, torch_profile):
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}x"
        lines.append(
            f"  {row['kind']:<40}{row['numpy_ms']:>9.2f}{row['torch_ms']:>9.2f}{ratio:>13}"
        )
    n, t = numpy_profile["step_ms"], torch_profile["step_ms"]
    lines.append(f"  {'the step':<40}{n:>9.2f}{t:>9.2f}{n / t:>12.2f}x")
    return lines
