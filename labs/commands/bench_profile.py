"""``python -m labs bench --profile``: where one NumPy training step's time goes.

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
"""

from __future__ import annotations

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
    cls = type(module).__name__
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

    def wrap(self, fn, kind: str, phase: str):
        stack, totals, clock = self._stack, self.totals, time.perf_counter

        def timed(*args, **kwargs):
            stack.append(0.0)
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                elapsed = clock() - t0
                callees = stack.pop()
                totals[kind, phase] += elapsed - callees
                if stack:
                    stack[-1] += elapsed

        return timed


@contextmanager
def _instrumented(backend, timer: _Timer):
    """Install the wrappers on ``backend`` (a NumpyBackend); remove them afterwards."""
    import numpy_impl.optim as optim

    installed = []  # (object, attribute name) whose instance attribute we set
    for name, mod in backend.model.named_modules():
        kind = layer_kind(name, mod)
        for method, phase in (("forward", "forward"), ("backward", "backward")):
            setattr(mod, method, timer.wrap(getattr(mod, method), kind, phase))
            installed.append((mod, method))
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
    try:
        yield
    finally:
        optim.clip_grad_norm_ = clip
        for obj, method in installed:
            del obj.__dict__[method]  # the class's method shows through again


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
    with _instrumented(backend, timer):
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
    rows = []
    for kind in KINDS:
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
    return {
        "batch_size": B,
        "block_size": T,
        "iters": iters,
        "step_ms": step_ms,
        "rows": rows,
        "phases": phases,
        "attn_impl": getattr(backend, "attn_impl", None),
    }


def _pct(ms: float, step_ms: float) -> float:
    return 100.0 * ms / step_ms if step_ms > 0 else 0.0


def format_profile(profile: dict) -> list[str]:
    """The profile as table lines: one row per layer kind, a column per phase."""
    B, T = profile["batch_size"], profile["block_size"]
    cols = PHASES[:3]
    lines = [
        f"where one NumPy step's time goes, B={B} T={T} (the median of {profile['iters']} "
        f"steps, {profile['step_ms']:.1f} ms; self time in ms):",
        f"  {'kind':<30}" + "".join(f"{c:>11}" for c in cols) + f"{'total':>11}{'share':>8}",
    ]
    for row in profile["rows"]:
        cells = "".join(f"{row['ms'][c]:>11.2f}" if c in row["ms"] else f"{'':>11}" for c in cols)
        lines.append(f"  {row['kind']:<30}{cells}{row['total_ms']:>11.2f}{row['pct']:>7.1f}%")
    by_phase = {p["phase"]: p for p in profile["phases"]}
    cells = "".join(f"{by_phase[c]['ms']:>11.2f}" for c in cols)
    total = sum(p["ms"] for p in profile["phases"])
    lines.append(
        f"  {'all rows':<30}{cells}{total:>11.2f}{100 * total / profile['step_ms']:>7.1f}%"
    )
    return lines
