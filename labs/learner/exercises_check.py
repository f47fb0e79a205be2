"""``python -m labs check NN``: run a chapter's parity tests on the workspace,
then explain the failures (each compared tensor's errors, a hint for the usual
mistakes, a summary and what to do next).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

from .. import UserError
from .exercises_fences import CHAPTERS, REPO, Reference
from .exercises_workspace import WORKSPACE_ENV, Workspace, _now, _show

#: Read by parity_tests/conftest.py too: write this report.
REPORT_ENV = "TWINFORMER_REPORT"
REPORTS_DIR = ".reports"  # in the workspace: the JSON report of each chapter's last check


# -- check: run the chapter's tests, explain the failures ---------------------------------
_OK = {"passed", "skipped", "xfailed"}


def run_check(ws: Workspace, chapter: str, keyword: str | None = None, quiet: bool = False) -> int:
    """``pytest -m chNN`` against the workspace, then the summary; returns 0 iff all pass."""
    title = CHAPTERS[chapter][0]
    report = ws.root / REPORTS_DIR / f"ch{chapter}.json"
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        WORKSPACE_ENV: str(ws.root),
        REPORT_ENV: str(report),
        "HYPOTHESIS_PROFILE": "default",
    }
    import importlib.util

    for needed in ("pytest", "hypothesis"):
        if importlib.util.find_spec(needed) is None:
            raise UserError(
                f"check runs the parity tests, which need {needed}: install the test tools "
                'with  .venv/bin/pip install -e ".[learn]"  (the README\'s second command does too)'
            )
    cmd = [
        sys.executable, "-m", "pytest", "parity_tests", "-m", f"ch{chapter}",
        "-q", "--no-header", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=short",
    ]  # fmt: skip
    if keyword:
        cmd += ["-k", keyword]
    print(f"chapter {chapter} ({title}): pytest -m ch{chapter} on {_show(ws.package)} ...")
    sys.stdout.flush()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        print((proc.stdout + proc.stderr)[-4000:])
        raise UserError(
            f"pytest stopped before it wrote its report (exit {proc.returncode})"
        ) from None

    tests = data.get("tests", [])
    for t in tests:  # "numpy_impl/x.py:12 in f" -> "workspace/numpy_impl/x.py:12 in f"
        if t.get("where"):
            t["where"] = f"{_show(ws.root)}/{t['where']}"
    problems = _print_problems(ws, data, proc)
    if not problems:
        skipped = Counter()  # one line per reason (a CPU skips ~100 GPU tests for one reason)
        for t in tests:
            if t["outcome"] == "skipped":
                skipped[t.get("message") or "skipped"] += 1
            else:
                _print_test(t, chapter, quiet, tests)
        for reason, n in skipped.items():
            print(f"SKIP  {n} test{'s' * (n != 1)}  ({reason})")
    n_run, n_ok, _ = _counts(tests)
    passed = not problems and proc.returncode == 0 and n_run > 0 and n_ok == n_run
    _print_summary(ws, chapter, tests, elapsed, passed, problems)
    if keyword is None:  # a partial run (-k) says nothing about the chapter
        state = ws.load_state()
        entry = state["chapters"].setdefault(chapter, {"started": _now()})
        entry["last_check"] = {
            "time": _now(),
            "passed": passed,
            "tests": n_run,
            "tests_passing": n_ok,
        }
        ws.save_state(state)
    return 0 if passed else 1


def _counts(tests: list[dict]) -> tuple[int, int, int]:
    """(tests run, of which passed, skipped): a skipped test (no GPU) does not count."""
    n_skip = sum(t["outcome"] == "skipped" for t in tests)
    n_ok = sum(t["outcome"] in _OK for t in tests) - n_skip
    return len(tests) - n_skip, n_ok, n_skip


def _print_problems(ws: Workspace, data: dict, proc: subprocess.CompletedProcess) -> list[str]:
    """Import and collection errors: the tests never ran."""
    problems = []
    if data.get("import_error"):
        e = data["import_error"]
        where = f" at {_show(ws.root)}/{e['where']}" if e.get("where") else ""
        print(f"\nyour numpy_impl does not import: {e['exception']}{where}: {e['message']}")
        print(_indent(e.get("traceback", "").rstrip(), "    "))
        problems.append("your code does not import")
    for c in data.get("collect_errors", []):
        print(f"\ncould not collect {c['nodeid']}:\n{_indent(c['message'].rstrip(), '    ')}")
        problems.append("a test module does not import")
    if not problems and proc.returncode not in (0, 1):
        print((proc.stdout + proc.stderr)[-3000:])
        problems.append(f"pytest exited with status {proc.returncode}")
    return problems


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _short_id(nodeid: str) -> str:
    return nodeid.removeprefix("parity_tests/")


def _fmt_err(x) -> str:
    return "   -    " if x is None else f"{x:.1e}".rjust(8)


def _comparison_line(c: dict) -> str:
    status = "ok  " if c["passed"] else "FAIL"
    shape = tuple(c["actual_shape"])
    if c["actual_shape"] != c["expected_shape"]:
        shape_text = f"yours {shape} vs reference {tuple(c['expected_shape'])}"
    else:
        shape_text = str(shape)
    return (
        f"      {status} max abs {_fmt_err(c['max_abs'])}  rel {_fmt_err(c['rel'])}  "
        f"{c['name']}  {shape_text}"
    )


def _print_test(t: dict, chapter: str, quiet: bool, tests: list[dict]) -> None:
    label = {"passed": "PASS", "xfailed": "PASS"}.get(t["outcome"], "FAIL")
    print(f"{label}  {_short_id(t['nodeid'])}")
    if label == "FAIL":
        hint = failure_hint(t, chapter, tests)
        if t.get("exception") and t["exception"] != "AssertionError":
            where = f" at {t['where']}" if t.get("where") else ""
            print(f"      {t['exception']}{where}")
        if hint:
            print(f"      hint: {hint}")
        if not (hint or "").startswith("not implemented yet"):  # else any example fails
            for line in _example_lines(t.get("notes", [])):
                print(f"      {line}")
    elif quiet:
        return
    for c in t.get("comparisons", []):
        print(_comparison_line(c))
        if c.get("hint") and not c["passed"]:
            print(f"           hint: {c['hint']}")


def _example_lines(notes: list[str]) -> list[str]:
    """The failing Hypothesis example, shortly: its draws (shapes, config) and seed."""
    lines = []
    for note in notes:
        text = " ".join(note.split())
        if text.startswith("Draw ") or "distinct failures" in text:
            lines.append(f"example: {text}"[:240])
        elif text.startswith("Falsifying example"):
            seeds = re.findall(r"\b(\w+=SeededRng\(\w+\))", text)
            if seeds:
                lines.append(f"example: {', '.join(seeds)}")
    return lines[:5]


_SHAPE_WORDS = ("shape", "broadcast", "mismatch", "size", "dimension", "axis")


def failure_hint(t: dict, chapter: str, tests: list[dict] = ()) -> str | None:
    """One line on what probably went wrong in the failed test ``t``, one of ``tests``."""
    exc, message = t.get("exception"), (t.get("message") or "").strip()
    first = message.splitlines()[0] if message else ""
    if exc == "NotImplementedError" or "NotImplementedError" in first:
        m = re.search(r"\bch(\d\d): (\S+)", first)
        if m and m[1] != chapter:
            return (
                f"not implemented yet: chapter {m[1]}'s {m[2]}, which these tests use "
                f"(finish chapter {m[1]} first)"
            )
        return f"not implemented yet: {m[2] if m else first}"
    failed = [c for c in t.get("comparisons", []) if not c["passed"]]
    if failed and failed[-1].get("hint"):
        return None  # printed under the comparison
    if exc == "AssertionError" and "test_backward_accumulates[" in t["nodeid"]:
        # right gradients from zero (the parity tests pass), wrong on top of old ones
        component = t["nodeid"].split("[", 1)[1].removesuffix("]")
        parity = [u for u in tests if f"test_forward_backward_parity[{component}-" in u["nodeid"]]
        if parity and all(u["outcome"] == "passed" for u in parity):
            return (
                "gradients assigned instead of accumulated (use +=): backward must ADD into "
                ".grad, whatever is there already"
            )
    if exc == "AssertionError":
        if failed:
            return None  # the comparison lines say it
        return first[:300] or None
    if exc and t.get("where"):
        kind = (
            "shape mismatch" if any(w in message.lower() for w in _SHAPE_WORDS) else f"{exc} raised"
        )
        return f"{kind} inside your code, {t['where']}: {first[:300]}"
    if exc:
        return f"{exc}: {first[:300]}"
    return None


def _print_summary(
    ws: Workspace, chapter: str, tests: list[dict], elapsed: float, passed: bool, problems
) -> None:
    n_run, n_ok, n_skip = _counts(tests)
    skipped = f", {n_skip} skipped" if n_skip else ""
    print()
    if problems:
        print(f"chapter {chapter}: the tests could not run: {'; '.join(problems)}")
    elif passed:
        print(f"chapter {chapter}: all {n_run} tests pass{skipped} ({elapsed:.1f} s). Done!")
    else:
        print(
            f"chapter {chapter}: {n_ok} of {n_run} tests pass, "
            f"{n_run - n_ok} fail{skipped} ({elapsed:.1f} s)"
        )
        todo = Counter(
            t["message"].splitlines()[0]
            for t in tests
            if t.get("exception") == "NotImplementedError" and t.get("message")
        )  # the stubs' messages: what to write, and where to read about it
        for message, n in todo.most_common():
            print(f"  to write ({n} tests): {message}")
        hints = Counter(
            h
            for t in tests
            if t["outcome"] not in _OK
            for h in [_main_hint(t, chapter, tests)]
            if h
        )
        for hint, n in hints.most_common(3):
            if not hint.startswith("not implemented yet"):
                print(f"  {n} x {hint}")
    files = sorted({r.file for r in Reference().chapter_regions(chapter)})
    where = ", ".join(_show(ws.package / f) for f in files)
    if passed:
        following = next((c for c in sorted(CHAPTERS) if c > chapter), None)
        if following is not None:
            print(f"next: python -m labs start {following}")
        else:
            print("that was the last chapter: python -m labs train --backend numpy")
    else:
        print(f"next: edit {where}, then: python -m labs check {chapter}")


def _main_hint(t: dict, chapter: str, tests: list[dict]) -> str | None:
    failed = [c for c in t.get("comparisons", []) if not c["passed"]]
    if failed and failed[-1].get("hint"):
        return failed[-1]["hint"]
    return failure_hint(t, chapter, tests)
