"""``python -m labs check NN``: run a chapter's parity tests on the workspace,
then explain them: one line per passing group of tests, each failure in full
(the compared tensors, or both numbers for a scalar, and a hint naming the
usual mistake it looks like), a summary and the next command to run.

For a teacher: ``--junit FILE`` (pytest's JUnit XML, what GitHub Classroom,
Gradescope and CI systems read) and ``--json FILE`` (:func:`results`); and
``python -m labs grade`` (labs/learner/grade.py), which runs these checks over
many workspaces without writing into them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint_files import write_atomic
from .exercises_fences import CHAPTERS, REPO, Reference
from .exercises_workspace import (
    REPORTS_DIR,
    WORKSPACE_ENV,
    Workspace,
    _now,
    _show,
    check_report_path,
    workspace_flag,
)
from .invocation import labs_command

#: Read by parity_tests/conftest.py too: write this report.
REPORT_ENV = "TWINFORMER_REPORT"
#: Read by parity_tests/conftest.py too: keep no Hypothesis examples in the workspace.
READ_ONLY_ENV = "TWINFORMER_READ_ONLY"


# -- check: run the chapter's tests, explain the failures ---------------------------------
_OK = {"passed", "skipped", "xfailed"}


@dataclass
class Run:
    """One ``pytest -m chNN`` over a workspace: the report conftest.py wrote, and how."""

    chapter: str
    data: dict
    proc: subprocess.CompletedProcess
    elapsed: float
    partial: bool  # -k or -m: some of the chapter's tests only


INSTALL_TEST_TOOLS = '.venv/bin/pip install -e ".[learn]"'


def missing_test_tools() -> str | None:
    """The first of pytest, Hypothesis that is not installed (``check`` needs both)."""
    import importlib.util

    return next((m for m in ("pytest", "hypothesis") if importlib.util.find_spec(m) is None), None)


def run_tests(
    ws: Workspace,
    chapter: str,
    keyword: str | None = None,
    marker: str | None = None,
    report: Path | None = None,
    junit: Path | None = None,
    read_only: bool = False,
) -> Run:
    """``pytest -m chNN`` against the workspace; the JSON report at ``report`` (default:
    the workspace's ``.reports/chNN.json``). ``read_only``: write nothing into the
    workspace (no report there, no Hypothesis examples, no bytecode)."""
    if report is None:
        report = ws.root / REPORTS_DIR / f"ch{chapter}.json"
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        WORKSPACE_ENV: str(ws.root),
        REPORT_ENV: str(report),
        "HYPOTHESIS_PROFILE": "default",
    }
    if read_only:
        env.update({READ_ONLY_ENV: "1", "PYTHONDONTWRITEBYTECODE": "1"})
    needed = missing_test_tools()
    if needed:
        raise UserError(
            f"check runs the parity tests, which need {needed}: install the test tools "
            f"with  {INSTALL_TEST_TOOLS}  (the README's test command does too)"
        )
    cmd = [sys.executable, *pytest_args(chapter, keyword, marker)]
    if junit is not None:
        cmd += [f"--junitxml={junit}", "-o", f"junit_suite_name=ch{chapter}"]
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    return read_run(ws, chapter, report, proc, elapsed, partial=bool(keyword or marker))


def read_run(ws: Workspace, chapter: str, report: Path, proc, elapsed: float, partial: bool) -> Run:
    """The :class:`Run` of a finished pytest process (``proc``: its return code and output)
    from the report it wrote."""
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        print((proc.stdout + proc.stderr)[-4000:])
        raise UserError(
            f"pytest stopped before it wrote its report (exit {proc.returncode})"
        ) from None
    for t in data.get("tests", []):  # "numpy_impl/x.py:12 in f" -> "workspace/numpy_impl/..."
        for d in (t, t.get("divergence") or {}):
            if d.get("where"):
                d["where"] = f"{_show(ws.root)}/{d['where']}"
    return Run(chapter, data, proc, elapsed, partial=partial)


def pytest_args(chapter: str, keyword: str | None = None, marker: str | None = None) -> list:
    """The arguments after ``python``: ``-m pytest parity_tests -m chNN ...``."""
    selection = f"ch{chapter} and ({marker})" if marker else f"ch{chapter}"
    args = [
        "-m", "pytest", "parity_tests", "-m", selection,
        "-q", "--no-header", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=short",
    ]  # fmt: skip
    if keyword:
        args += ["-k", keyword]
    return args


def run_check(
    ws: Workspace,
    chapter: str,
    keyword: str | None = None,
    quiet: bool = False,
    verbose: bool = False,
    marker: str | None = None,
    junit: Path | None = None,
    json_out: Path | None = None,
) -> int:
    """``pytest -m chNN`` against the workspace, then the explanation; 0 iff all pass.

    A partial check (``keyword``/``marker``) never marks the chapter done."""
    title = CHAPTERS[chapter][0]
    junit, json_out = (
        check_report_path(path, option, [ws]) if path is not None else None
        for path, option in ((junit, "--junit"), (json_out, "--json"))
    )
    selected = " ".join(f"{o} {v!r}" for o, v in (("-k", keyword), ("-m", marker)) if v)
    print(
        f"chapter {chapter} ({title}): pytest -m ch{chapter}{' ' + selected if selected else ''}"
        f" on {_show(ws.package)} ..."
    )
    sys.stdout.flush()
    run = run_tests(ws, chapter, keyword=keyword, marker=marker, junit=junit)
    passed = explain(ws, run, quiet=quiet, verbose=verbose)
    tests = run.data.get("tests", [])
    n_run, n_ok, _ = _counts(tests)
    if json_out is not None:
        write_json(json_out, results(ws, run, passed))
        print(f"wrote {_show(json_out)}")
    if junit is not None:
        print(f"wrote {_show(junit)}")
    if not run.partial:  # a partial run (-k, -m) says nothing about the chapter
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


def explain(ws: Workspace, run: Run, quiet: bool = False, verbose: bool = False) -> bool:
    """Print the run: one line per passing group of tests (every test and tensor with
    ``verbose``), the failures in full, then the summary. Returns whether all passed."""
    tests, chapter = run.data.get("tests", []), run.chapter
    problems = _print_problems(ws, run.data, run.proc)
    if not problems:
        _print_tests(tests, chapter, quiet, verbose)
    n_run, n_ok, _ = _counts(tests)
    passed = not problems and run.proc.returncode == 0 and n_run > 0 and n_ok == n_run
    _print_summary(ws, run, passed, problems)
    return passed


def _group(nodeid: str) -> str:
    """``test_components.py::test_forward_backward_parity``: a test without its parameters."""
    return _short_id(nodeid).split("[", 1)[0]


def _print_tests(tests: list[dict], chapter: str, quiet: bool, verbose: bool) -> None:
    skipped = Counter()  # one line per reason (a CPU skips ~100 GPU tests for one reason)
    groups: dict[str, list[dict]] = {}
    for t in tests:
        if t["outcome"] == "skipped":
            skipped[t.get("message") or "skipped"] += 1
        else:
            groups.setdefault(_group(t["nodeid"]), []).append(t)
    for name, members in groups.items():
        failing = [t for t in members if t["outcome"] not in _OK]
        if verbose:
            for t in members:
                _print_test(t, chapter, verbose, tests)
            continue
        if len(failing) < len(members) and not quiet:
            n_ok = len(members) - len(failing)
            cases = f"  ({n_ok} of {len(members)} cases)" if len(members) > 1 else ""
            print(f"PASS  {name}{cases}" if n_ok == len(members) else f"ok    {name}{cases}")
        shown: list[dict] = []  # each failing case in full, unless it fails like one shown
        for t in failing:
            alike = next((u for u in shown if _same_failure(t, u, chapter, tests)), None)
            if alike is None:
                _print_test(t, chapter, verbose, tests)
                shown.append(t)
            else:
                case = alike["nodeid"].rsplit("[", 1)[-1].rstrip("]")
                print(f"FAIL  {_short_id(t['nodeid'])}  (fails like [{case}])")
    for reason, n in skipped.items():
        print(f"SKIP  {n} test{'s' * (n != 1)}  ({reason})")


def _same_failure(t: dict, first: dict, chapter: str, tests: list[dict]) -> bool:
    """Two cases of one test failing alike: the same hints, the same tensors failing."""

    def failed(u):
        return [c["name"] for c in u.get("comparisons", []) if not c["passed"]]

    return (
        t.get("exception") == first.get("exception")
        and _main_hints(t, chapter, tests) == _main_hints(first, chapter, tests)
        and failed(t) == failed(first)
    )


#: A failed test lists this many failing comparisons (and those with a hint); -v lists all.
MAX_FAILED_SHOWN = 6


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
    if not problems and proc.returncode not in (0, 1, 5):  # 5: no test selected
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
    if "actual_value" in c and not c["passed"]:  # a number: both values say more
        errors = (
            f"  (abs {c['max_abs']:.1e}, rel {c['rel']:.1e})" if c["max_abs"] is not None else ""
        )
        return (
            f"      {status} {c['name']}: yours {c['actual_value']:.10g}, "
            f"the reference {c['expected_value']:.10g}{errors}"
        )
    if c["actual_shape"] != c["expected_shape"]:
        shape_text = f"yours {shape} vs reference {tuple(c['expected_shape'])}"
    else:
        shape_text = str(shape)
    return (
        f"      {status} max abs {_fmt_err(c['max_abs'])}  rel {_fmt_err(c['rel'])}  "
        f"{c['name']}  {shape_text}"
    )


def _print_test(t: dict, chapter: str, verbose: bool, tests: list[dict]) -> None:
    label = {"passed": "PASS", "xfailed": "PASS"}.get(t["outcome"], "FAIL")
    print(f"{label}  {_short_id(t['nodeid'])}")
    comparisons = t.get("comparisons", [])
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
    elif not verbose:
        return
    hidden = []
    if not verbose:  # the failing comparisons: the first few, and every one with a hint
        n_ok = sum(c["passed"] for c in comparisons)
        failed = [c for c in comparisons if not c["passed"]]
        comparisons = (
            failed[:MAX_FAILED_SHOWN]
            + [c for c in failed[MAX_FAILED_SHOWN:] if c.get("hint")][:MAX_FAILED_SHOWN]
        )
        hidden = [c for c in failed if c not in comparisons]
        if n_ok:
            s = "s" * (n_ok != 1)
            print(f"      ({n_ok} comparison{s} within tolerance; -v lists them)")
    last, hints_shown = None, set()
    for c in comparisons:
        line = _comparison_line(c)
        if line == last:
            continue  # the same tensor compared again (one line per parameter group...)
        last = line
        print(line)
        if c.get("hint") and not c["passed"]:
            said = c["hint"] in hints_shown
            print(f"           hint: {'the same' if said else c['hint']}")
            hints_shown.add(c["hint"])
    if hidden:
        names = ", ".join(c["name"] for c in hidden[:3])
        more = f" and {len(hidden) - 3} more" if len(hidden) > 3 else ""
        print(f"      FAIL also: {names}{more} (-v lists them)")


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
    wrong = first_wrong(t)
    if wrong and exc == "AssertionError" and not failed and first:
        return f"{first[:300]}; {wrong}"  # the test's own words, then the place
    if wrong:
        return wrong
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


def first_wrong(t: dict) -> str | None:
    """The first variable whose value left the reference's (parity_tests/divergence.py),
    unless a hint of the catalogue or an exception in the learner's code says more."""
    d, exc = t.get("divergence"), t.get("exception")
    if exc not in (None, "AssertionError") and t.get("where"):
        return None  # the exception's place says it
    if d and not d.get("catalogued") and "test_backward_accumulates[" not in t["nodeid"]:
        return f"first wrong value: `{d['name']}` at {d['where']}, {d['kind']}"
    return None


def _print_summary(ws: Workspace, run: Run, passed: bool, problems) -> None:
    tests, chapter, elapsed = run.data.get("tests", []), run.chapter, run.elapsed
    n_run, n_ok, n_skip = _counts(tests)
    skipped = f", {n_skip} skipped" if n_skip else ""
    selected = "selected tests " if run.partial else "tests "
    print()
    if problems:
        print(f"chapter {chapter}: the tests could not run: {'; '.join(problems)}")
    elif passed and run.partial:
        print(
            f"chapter {chapter}: all {n_run} {selected}pass{skipped} ({elapsed:.1f} s); "
            "a partial check: the chapter is done when all its tests pass"
        )
    elif passed:
        print(f"chapter {chapter}: all {n_run} tests pass{skipped} ({elapsed:.1f} s). Done!")
    elif n_run == 0:
        print(f"chapter {chapter}: no test selected{skipped}; the chapter's tests: "
              f"{labs_command('check', chapter, '-v')}")  # fmt: skip
    else:
        print(
            f"chapter {chapter}: {n_ok} of {n_run} {selected}pass, "
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
            h for t in tests if t["outcome"] not in _OK for h in _main_hints(t, chapter, tests)
        )
        for hint, n in hints.most_common(6):
            if not hint.startswith("not implemented yet"):
                print(f"  {n} x {hint}")
    files = sorted({r.file for r in Reference().chapter_regions(chapter)})
    where = ", ".join(_show(ws.package / f) for f in files)
    if n_run == 0 and not problems:
        return
    flag = workspace_flag(ws)  # the learner's --workspace, so the commands work as typed
    if passed and run.partial:
        print(f"next, the whole chapter: {labs_command('check', chapter, *flag)}")
    elif passed:
        following = next((c for c in sorted(CHAPTERS) if c > chapter), None)
        if following is not None:
            print(f"next: {labs_command('start', following, *flag)}")
        else:
            print(f"that was the last chapter: {labs_command('train', '--backend', 'numpy')}")
    else:
        print(f"next: edit {where}, then: {labs_command('check', chapter, *flag)}")


def _main_hints(t: dict, chapter: str, tests: list[dict]) -> list[str]:
    """Every distinct hint of a failed test: its comparisons', else its own."""
    wrong = first_wrong(t)  # without its numbers, so that cases failing alike group
    seen = [wrong.split("largest difference")[0].rstrip(", ;")] if wrong else []
    for c in t.get("comparisons", []):
        if not c["passed"] and c.get("hint") and c["hint"] not in seen:
            seen.append(c["hint"])
    if not seen:
        hint = failure_hint(t, chapter, tests)
        if hint:
            seen.append(hint)
    return seen


# -- machine-readable results ---------------------------------------------------------------
def results(ws: Workspace, run: Run, passed: bool) -> dict:
    """The check as plain JSON: what ``--json`` writes and ``grade`` rolls up."""
    tests = run.data.get("tests", [])
    n_run, n_ok, n_skip = _counts(tests)
    failures = []
    for t in tests:
        if t["outcome"] in _OK:
            continue
        message = (t.get("message") or "").strip()
        failures.append(
            {
                "test": _short_id(t["nodeid"]),
                "exception": t.get("exception"),
                "hints": _main_hints(t, run.chapter, tests),
                "message": message.splitlines()[0][:500] if message else "",
            }
        )
    return {
        "chapter": run.chapter,
        "title": CHAPTERS[run.chapter][0],
        "workspace": str(ws.root),
        "partial": run.partial,
        "passed": passed,
        "done": passed and not run.partial,
        "tests": n_run,
        "tests_passed": n_ok,
        "tests_failed": n_run - n_ok,
        "tests_skipped": n_skip,
        "seconds": round(run.elapsed, 3),
        "time": _now(),
        "failures": failures,
    }


def write_json(path: Path, data) -> None:
    """Strict JSON (no NaN), written atomically: a reader never sees half a file."""
    write_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))
