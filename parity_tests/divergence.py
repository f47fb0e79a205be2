"""The first wrong value: where the learner's code first leaves the reference's.

When a chapter's test fails on a workspace, its failing example runs once more with
the functions that hold the chapter's exercise regions traced line by line: every
call records its arguments (a deep copy) and each new value of each local variable,
in execution order. Then the reference's code of the same function runs on a copy
of the same arguments (with the learner's module around it, so both call the same
helpers) and records its locals the same way. Exercise regions and the reference
share their variable names (the TODO lines name them), so the k-th value of ``e`` in
the learner's code is compared with the k-th value of ``e`` in the reference's; the
first variable in execution order whose value leaves the reference's is reported:
its name, its line, the largest difference and where, and what kind of difference it
is (NaN appeared, a constant factor, transposed axes, a permutation, values only in
the masked part, a shape). A value set in one branch of an ``if`` where the reference's
statement sits in the other blames the ``if``'s condition. The value returned and the
parameters' gradients count as variables (``return``, ``self.weight.grad``).

conftest.py runs this for ``python -m labs check`` (``TWINFORMER_REPORT`` with a
workspace): each failed test's report entry gets ``"divergence"``.
"""

from __future__ import annotations

import ast
import copy
import itertools
import linecache
import sys
import time
import types
from pathlib import Path

import numpy as np

from labs.learner.exercises_fences import Reference, parse_regions

MAX_CALLS = 16  # traced calls per example: enough for the first wrong one
MAX_EVENTS = 20000
MAX_STATE = 1 << 18  # arrays (parameters, all together) larger than this are not followed
BUDGET = 2.0  # seconds of recording per run, and per reference run: then it runs untraced


def _qualname(code) -> str:
    return code.co_qualname.replace(".<locals>.", ".")


def _codes(code):
    yield code
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield from _codes(c)


class Targets:
    """The functions around a workspace's exercise regions, and the reference's code of each."""

    def __init__(self, package: Path, reference: Reference | None = None):
        ref = reference or Reference()
        # (file, qualname) -> (reference's code, chapters, {line: chapter}, reference's text)
        self.by_key: dict[tuple[str, str], tuple] = {}
        for file in ref.regions:
            path = package / file
            try:
                text = path.read_text(encoding="utf-8")
                ours = parse_regions(text, file)
            except (OSError, SyntaxError, ValueError):
                continue
            ref_codes = {_qualname(c): c for c in _codes(compile(ref.texts[file], file, "exec"))}
            for r in ours:
                code = ref_codes.get(r.function)
                if code is None:
                    continue
                key = (str(path.resolve()), r.function)
                old = self.by_key.get(key, (code, set(), {}))
                lines = set(range(r.begin + 2, r.end + 1))  # 1-based lines inside the fences
                old[2].update(dict.fromkeys(lines, r.chapter))
                self.by_key[key] = (code, old[1] | {r.chapter}, old[2], ref.texts[file])
        self.files = {f for f, _ in self.by_key}

    def for_chapters(self, chapters) -> dict:
        return {k: v for k, v in self.by_key.items() if v[1] & set(chapters)}


# -- recording -----------------------------------------------------------------------------
_SKIP = object()


def _snapshot(x):
    """A comparable copy of a local's value, or _SKIP for what is not compared."""
    if isinstance(x, np.ndarray):
        return x.copy() if x.size <= MAX_STATE else _SKIP
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes, np.generic)):
        return x
    if isinstance(x, (list, tuple)) and len(x) <= 2000:
        items = [_snapshot(v) for v in x]
        return _SKIP if any(v is _SKIP for v in items) else tuple(items)
    data = getattr(x, "data", None)  # a Parameter: its value
    if isinstance(data, np.ndarray) and type(x).__name__ == "Parameter":
        return _snapshot(data)
    return _SKIP


def _state(args: dict) -> dict:
    """Pseudo-locals for the gradients of the parameters an argument holds."""
    out = {}
    for name, obj in args.items():
        named = getattr(obj, "named_parameters", None)
        if not callable(named) or isinstance(obj, type):
            continue
        try:
            params = list(named())
        except Exception:
            continue
        if sum(p.data.size for _, p in params) > MAX_STATE:
            continue
        for pname, p in params:
            g = getattr(p, "_grad", None)
            out[f"{name}.{pname}.grad"] = g
    return out


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
        except TypeError:
            return bool(np.array_equal(a, b))
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b) or (a != a and b != b)  # noqa: PLR0124 (NaN == NaN here)
    except Exception:
        return False


class _Frame:
    """The values one call took: ``events`` = [(seq, name, k, value, line)]."""

    def __init__(self, args: dict):
        self.args, self.events, self.last, self.counts = args, [], {}, {}
        self.line, self.raised = None, False

    def observe(self, frame, line, seq: list) -> None:
        values = {n: v for n, v in frame.f_locals.items() if n != "self"}
        values.update(_state({n: frame.f_locals.get(n) for n in self.args}))
        for name, live in values.items():
            old = self.last.get(name, _SKIP)
            if old is not _SKIP and _equal_live(live, old):
                continue
            snap = _snapshot(live)
            if snap is _SKIP or (old is _SKIP and name in self.args and not name.endswith("grad")):
                self.last[name] = snap  # arguments: their values at the call are no news
                continue
            if old is not _SKIP and _equal(snap, old):
                continue
            self.last[name] = snap
            k = self.counts[name] = self.counts.get(name, -1) + 1
            seq[0] += 1
            self.events.append((seq[0], name, k, snap, line))


def _equal_live(live, old) -> bool:
    if isinstance(live, np.ndarray) and isinstance(old, np.ndarray):
        return _equal(live, old)
    if type(live).__name__ == "Parameter" and isinstance(old, np.ndarray):
        return _equal(live.data, old)
    return False


class Recorder:
    """A ``sys.settrace`` tracer of the target functions' frames."""

    def __init__(self, codes: dict, before=None):
        self.codes = codes  # code object or (file, qualname) -> key
        # [key, args copy, _Frame, returned snapshot, return line, __class__, return's seq]
        self.calls: list[list] = []
        self.seq, self.before, self.cut = [0], before, False
        self.deadline = time.monotonic() + BUDGET

    def over(self) -> bool:
        if not self.cut and time.monotonic() > self.deadline:
            self.cut = True
            sys.settrace(self.before)  # the rest of the run untraced
        return self.cut

    def _target(self, code):
        if code in self.codes:
            return self.codes[code]
        file = _RESOLVED.get(code.co_filename)
        if file is None:
            file = _RESOLVED[code.co_filename] = str(Path(code.co_filename).resolve())
        return self.codes.get((file, _qualname(code)))

    def __call__(self, frame, event, arg):
        if event != "call":
            return None
        key = self._target(frame.f_code)
        if key is None or len(self.calls) >= MAX_CALLS or self.seq[0] > MAX_EVENTS or self.over():
            return None
        if frame.f_code.co_flags & 0x2A0:  # a generator or coroutine: not followed
            return None
        code = frame.f_code
        n = code.co_argcount + code.co_kwonlyargcount
        n += bool(code.co_flags & 0x04) + bool(code.co_flags & 0x08)  # *args, **kwargs
        names = code.co_varnames[:n]
        try:
            args = copy.deepcopy({a: frame.f_locals[a] for a in names})
        except Exception:
            return None
        rec = _Frame({a: None for a in names})
        index = len(self.calls)
        self.calls.append([key, args, rec, _SKIP, None, frame.f_locals.get("__class__"), None])
        rec.observe(frame, code.co_firstlineno, self.seq)

        def local(f, ev, a):
            if self.over():
                return None
            if ev == "line":
                rec.observe(f, rec.line, self.seq)
                rec.line = f.f_lineno
            elif ev == "exception":
                rec.raised = True
            elif ev == "return":
                rec.observe(f, rec.line, self.seq)
                call = self.calls[index]
                call[3], call[4] = (_SKIP if rec.raised else _snapshot(a)), f.f_lineno
                self.seq[0] += 1
                call[6] = self.seq[0]
            return local

        rec.line = code.co_firstlineno
        return local


def _run_reference(code, args: dict, globals_: dict, klass):
    """The reference's ``code`` on ``args`` (copied), traced: (_Frame, returned)."""
    closure = None
    if code.co_freevars:
        if code.co_freevars != ("__class__",) or klass is None:
            return None
        closure = (types.CellType(klass),)
    fn = types.FunctionType(code, globals_, code.co_name, None, closure)
    args = copy.deepcopy(args)
    n_pos = code.co_argcount
    names = code.co_varnames
    pos = [args[n] for n in names[:n_pos]]
    kw = {n: args[n] for n in names[n_pos : n_pos + code.co_kwonlyargcount]}
    i = n_pos + code.co_kwonlyargcount
    if code.co_flags & 0x04:
        pos += list(args[names[i]])
        i += 1
    if code.co_flags & 0x08:
        kw.update(args[names[i]])
    before = sys.gettrace()
    rec = Recorder({code: "ref"}, before)
    sys.settrace(rec)
    try:
        fn(*pos, **kw)
    except Exception:
        return None
    finally:
        sys.settrace(before)
    if not rec.calls or rec.cut:
        return None
    return rec.calls[0]


# -- comparing -----------------------------------------------------------------------------
def _close(a, e) -> bool:
    if isinstance(a, np.ndarray) and isinstance(e, np.ndarray):
        if a.shape != e.shape:
            return False
        if a.dtype.kind not in "fc" or e.dtype.kind not in "fc":
            return a.dtype.kind == e.dtype.kind and bool(np.array_equal(a, e))
        a64, e64 = a.astype(np.float64), e.astype(np.float64)
        same_nonfinite = np.array_equal(~np.isfinite(a64), ~np.isfinite(e64)) and np.array_equal(
            a64[~np.isfinite(a64)], e64[~np.isfinite(e64)], equal_nan=True
        )
        if not same_nonfinite:
            return False
        fin = np.isfinite(e64)
        if not fin.any():
            return True
        rtol = 1e-4 if np.float32 in (a.dtype, e.dtype) or a.dtype.itemsize < 8 else 1e-7
        scale = float(np.max(np.abs(e64[fin])))
        return float(np.max(np.abs(a64[fin] - e64[fin]))) <= rtol * scale + 1e-12
    if isinstance(a, tuple) and isinstance(e, tuple):
        return len(a) == len(e) and all(_close(x, y) for x, y in zip(a, e, strict=True))
    if isinstance(a, (float, np.floating)) and isinstance(e, (int, float, np.number)):
        return bool(np.isclose(a, e, rtol=1e-7, atol=1e-12, equal_nan=True))
    if isinstance(a, np.ndarray) != isinstance(e, np.ndarray):
        return False
    return _equal(a, e)


def _short(x) -> str:
    text = repr(x.tolist() if isinstance(x, np.ndarray) and x.size <= 8 else x)
    return text if len(text) <= 60 else text[:57] + "..."


def describe(a, e) -> str:
    """What kind of difference ``a`` (the learner's) has from ``e`` (the reference's)."""
    if not (isinstance(a, np.ndarray) and isinstance(e, np.ndarray)):
        if isinstance(a, tuple) and isinstance(e, tuple):
            if len(a) != len(e):
                return (
                    f"{len(a)} items where the reference has {len(e)}: {_short(a)} vs {_short(e)}"
                )
            i = next(i for i, (x, y) in enumerate(zip(a, e, strict=True)) if not _close(x, y))
            return f"item {i} differs: yours {_short(a[i])}, the reference {_short(e[i])}"
        return f"yours {_short(a)}, the reference {_short(e)}"
    if a.shape != e.shape:
        if a.ndim == e.ndim:
            for i, j in itertools.combinations(range(a.ndim), 2):
                swapped = np.swapaxes(e, i, j)
                if swapped.shape == a.shape and _close(a, swapped):
                    return f"axes {i} and {j} transposed: shape {a.shape}, the reference {e.shape}"
        return f"shape {a.shape} where the reference has {e.shape}"
    if a.dtype.kind not in "fcbiu" or e.dtype.kind not in "fcbiu":
        return "values differ"
    a64, e64 = a.astype(np.float64), e.astype(np.float64)
    same = (a64 == e64) | (np.isnan(a64) & np.isnan(e64))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a64 - e64))
    diff = np.where(np.isnan(diff), np.inf, diff)
    idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
    at = f"at {list(map(int, idx))}" if idx else ""
    where = (
        f"largest difference {float(diff[idx]):.3g} {at} "
        f"(yours {a64[idx]:.6g}, the reference {e64[idx]:.6g})"
    )
    bad = diff > 0
    if np.any(~np.isfinite(a64) & np.isfinite(e64)):
        first = np.argwhere(~np.isfinite(a64) & np.isfinite(e64))[0].tolist()
        kind = "NaN" if np.any(np.isnan(a64) & ~np.isnan(e64)) else "inf"
        return f"{kind} where the reference is finite, first at {first}; {where}"
    masked = (e64 == 0) | np.isneginf(e64)
    if np.any(bad) and np.all(masked[bad]) and not np.all(masked):
        return f"differs only where the reference is masked (0 or -inf); {where}"
    if a.ndim >= 2 and a.shape[-1] == a.shape[-2] > 1:
        future = np.triu(np.ones(a.shape[-2:], dtype=bool), 1)
        if np.all(np.broadcast_to(future, a.shape)[bad]):
            return (
                f"differs only above the diagonal (the future positions: a causal mask?); {where}"
            )
    fin = np.isfinite(a64) & np.isfinite(e64)
    denom = float(np.sum(e64[fin] ** 2))
    if denom > 0 and np.count_nonzero(e64[fin]) >= 2:
        factor = float(np.sum(a64[fin] * e64[fin])) / denom
        if abs(factor - 1) > 1e-6 and _close(a64, factor * e64):
            return f"a constant factor: yours = {factor:.6g} x the reference; {where}"
    for ax in range(a.ndim):
        n = a.shape[ax]
        if 1 < n <= 64 and a.size <= 1 << 16:
            ea, aa = np.moveaxis(e64, ax, 0), np.moveaxis(a64, ax, 0)
            perm = [next((j for j in range(n) if _close(aa[i], ea[j])), None) for i in range(n)]
            if None not in perm and sorted(perm) == list(range(n)) and perm != list(range(n)):
                return (
                    f"a permutation of axis {ax} (yours [{ax}] = the reference's {perm}); {where}"
                )
    return where


def first_divergence(recorder: Recorder, targets: dict) -> dict | None:
    """The learner's first value, in execution order, that leaves the reference's."""
    best, deadline = None, time.monotonic() + 2 * BUDGET
    for call in recorder.calls:
        if time.monotonic() > deadline:
            break
        key, args, ours, returned, ret_line, klass, ret_seq = call
        ref = _run_reference(targets[key][0], args, _globals_of(key), klass)
        if ref is None:
            continue
        theirs, lines = {}, {}
        for _, name, _k, value, line in ref[2].events:
            theirs.setdefault(name, []).append(value)
            lines.setdefault(name, []).append(line)
        found = None
        for seq, name, k, value, line in ours.events:
            values = theirs.get(name)
            if not values or "empty" in linecache.getline(key[0], line or 0):
                continue  # np.empty's values are whatever the memory held
            if k < len(values) and _close(value, values[k]):
                continue
            if any(_close(value, v) for v in values):
                continue
            k = min(k, len(values) - 1)
            found = (seq, name, value, values[k], line, lines[name][k])
            break
        if found is None and ref[3] is not _SKIP and returned is not _SKIP and ret_seq:
            if not _close(returned, ref[3]):
                found = (ret_seq, "return", returned, ref[3], ret_line, ref[4])
        if found and (best is None or found[0] < best[0][0]):
            best = (found, key)
    if best is None:
        return None
    (_, name, value, expected, line, ref_line), (file, function) = best
    kind = describe(value, expected)
    ran = (targets[(file, function)][3].splitlines()[(ref_line or 1) - 1 :] or [""])[0].strip()
    branch = _other_branch(file, line, ran) if ran else None
    if branch:  # the value is wrong because a condition chose the other branch
        line, kind = (
            branch,
            f"this condition chose the other branch (the reference ran `{ran}`); {kind}",
        )
    return {"name": name, "file": file, "line": line, "function": function, "kind": kind}


def _other_branch(file: str, line: int, ran: str) -> int | None:
    """The line of the innermost ``if`` of ``file`` with ``line`` in one branch and a line
    reading ``ran`` (the reference's statement) in the other."""
    found = None
    for node in ast.walk(ast.parse("".join(linecache.getlines(file)))):
        if isinstance(node, ast.If):
            for mine, other in ((node.body, node.orelse), (node.orelse, node.body)):
                spans = [range(s.lineno, s.end_lineno + 1) for s in other]
                if any(s.lineno <= line <= s.end_lineno for s in mine) and any(
                    linecache.getline(file, n).strip() == ran for r in spans for n in r
                ):
                    found = node.lineno if found is None or node.lineno > found else found
    return found


_GLOBALS: dict = {}
_RESOLVED: dict = {}


def _globals_of(key) -> dict:
    return _GLOBALS[key[0]]


def trace(targets: dict, run, found: list):
    """``run()`` with ``targets``' functions traced; its result or exception passes through,
    and ``found`` gets the first divergence (or None) once it has ended."""
    for module in list(sys.modules.values()):
        f = getattr(module, "__file__", None)
        if f and str(Path(f).resolve()) in {k[0] for k in targets}:
            _GLOBALS[str(Path(f).resolve())] = module.__dict__
    before = sys.gettrace()
    rec = Recorder({k: k for k in targets}, before)
    sys.settrace(rec)
    try:
        return run()
    finally:
        sys.settrace(before)
        try:
            found.append(first_divergence(rec, targets))
        except Exception:
            found.append(None)
