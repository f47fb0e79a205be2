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
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint_files import write_atomic
from .exercises_fences import CHAPTERS, REPO, FenceError, Reference, _normalised, parse_regions
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


def run_tests(ws: Workspace, chapter: str, keyword: str | None = None, marker: str | None = None,
              report: Path | None = None, read_only: bool = False) -> Run:  # fmt: skip
    """``pytest -m chNN`` against the workspace; the JSON report at ``report`` (default:
    the workspace's ``.reports/chNN.json``). ``read_only``: write nothing into the
    workspace (no report there, no Hypothesis examples, no bytecode)."""
    if report is None:
        report = ws.root / REPORTS_DIR / f"ch{chapter}.json"
    for own in (ws.root / REPORTS_DIR, ws.root / ".hypothesis"):  # written only inside ws.root
        if own.is_symlink() or (own.exists() and not own.is_dir()):
            raise UserError(f"{_show(own)} must be a folder of the workspace, not a link or file")
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
    return Run(chapter, locate(ws, data), proc, elapsed, partial=partial)


def locate(ws: Workspace, data: dict) -> dict:
    """The report's places in the workspace: "numpy_impl/x.py:12 in f" ->
    "WORKSPACE/numpy_impl/x.py:12 in f" (the place of an exception, of a first wrong value)."""
    for t in data.get("tests", []):
        for d in (t, t.get("divergence") or {}):
            if d.get("where"):
                d["where"] = f"{_show(ws.root)}/{d['where']}"
    return data


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


def run_check(ws: Workspace, chapter: str, keyword: str | None = None, quiet: bool = False,
              verbose: bool = False, marker: str | None = None, junit: Path | None = None,
              json_out: Path | None = None) -> int:  # fmt: skip
    """``pytest -m chNN`` against the workspace, then the explanation; 0 iff all pass.

    A partial check (``keyword``/``marker``) never marks the chapter done."""
    title = CHAPTERS[chapter][0]
    junit, json_out = _report_paths(ws, junit, json_out)
    selected = " ".join(f"{o} {v!r}" for o, v in (("-k", keyword), ("-m", marker)) if v)
    print(
        f"chapter {chapter} ({title}): pytest -m ch{chapter}{' ' + selected if selected else ''}"
        f" on {_show(ws.package)} ..."
    )
    sys.stdout.flush()
    run = run_tests(ws, chapter, keyword=keyword, marker=marker)
    passed = explain(ws, run, quiet=quiet, verbose=verbose)
    n_run, n_ok, _ = _counts(run.data.get("tests", []))
    _write_reports(ws, run, passed, junit, json_out)
    if not run.partial:  # a partial run (-k, -m) says nothing about the chapter
        state = ws.load_state()
        entry = state["chapters"].setdefault(chapter, {"started": _now()})
        entry["last_check"] = {"time": _now(), "passed": passed, "tests": n_run,
                               "tests_passing": n_ok}  # fmt: skip
        ws.save_state(state)
    return 0 if passed else 1


def _report_paths(ws: Workspace, junit: Path | None, json_out: Path | None) -> tuple:
    """``--junit`` and ``--json`` resolved, proven writable before any work starts."""
    return tuple(
        check_report_path(path, option, [ws]) if path is not None else None
        for path, option in ((junit, "--junit"), (json_out, "--json"))
    )


def _write_reports(ws: Workspace, run: Run, passed: bool, junit, json_out) -> None:
    if json_out is not None:
        write_json(json_out, results(ws, run, passed))
        print(f"wrote {_show(json_out)}")
    if junit is not None:
        write_atomic(junit, junit_xml(run).encode("utf-8"))
        print(f"wrote {_show(junit)}")


def write_not_started(ws: Workspace, chapter: str, junit, json_out, hint: str) -> None:
    """The ``--junit``/``--json`` reports of a chapter not started: every one of its tests
    (collected from the reference) failed, ``hint`` the reason."""
    junit, json_out = _report_paths(ws, junit, json_out)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "collected.json"
        env = {k: v for k, v in os.environ.items() if k != WORKSPACE_ENV}
        cmd = [sys.executable, *pytest_args(chapter), "--collect-only"]
        proc = subprocess.run(
            cmd, cwd=REPO, env={**env, REPORT_ENV: str(report)}, capture_output=True, text=True
        )
        collected = read_run(ws, chapter, report, proc, 0.0, False).data.get("collected", [])
    tests = [
        {"nodeid": c["nodeid"], "outcome": "failed", "exception": None, "message": hint,
         "hint": hint, "comparisons": []}
        for c in collected
    ]  # fmt: skip
    _write_reports(ws, Run(chapter, {"tests": tests}, proc, 0.0, False), False, junit, json_out)


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


def _case(nodeid: str) -> str:
    """``Block[sdpa]-float64``: a test's parameters, its outer brackets stripped."""
    return _short_id(nodeid).partition("[")[2].removesuffix("]")


def _print_tests(tests: list[dict], chapter: str, quiet: bool, verbose: bool) -> None:
    skipped = Counter()  # one line per reason
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
                _print_failure(name, [t], 1, chapter, tests, verbose)
            continue
        if not failing and not quiet:
            print(f"PASS  {name}  ({len(members)} cases)" if len(members) > 1 else f"PASS  {name}")
        alike: dict[tuple, list[dict]] = {}  # cases that fail alike: one block
        for t in failing:
            key = (t.get("exception"), *map(_alike, _main_hints(t, chapter, tests)))
            alike.setdefault(key, []).append(t)
        for cases in alike.values():
            _print_failure(name, cases, len(members), chapter, tests, verbose)
    for reason, n in skipped.items():
        print(f"SKIP  {n} test{'s' * (n != 1)}  ({reason})")


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
    return list(dict.fromkeys(problems))


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _short_id(nodeid: str) -> str:
    return nodeid.removeprefix("parity_tests/")


def _fmt_err(x) -> str:
    return "   -    " if x is None else f"{x:.1e}".rjust(8)


def _comparison_line(c: dict) -> str:
    status = "PASS" if c["passed"] else "FAIL"
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


def _print_failure(name: str, cases: list[dict], n_cases: int, chapter: str, tests: list[dict],
                   verbose: bool) -> None:  # fmt: skip
    """A passing test (with ``verbose``), or cases of one test failing alike: one FAIL line,
    the hint first, then the first case's exception, example and comparisons."""
    t = cases[0]
    if t["outcome"] in _OK:
        print(f"PASS  {_short_id(t['nodeid'])}")
    elif len(cases) == 1:
        print(f"FAIL  {_short_id(t['nodeid'])}")
    else:
        ids = [_case(c["nodeid"]) for c in cases]
        more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
        n = f"all {n_cases}" if len(cases) == n_cases else f"{len(cases)} of {n_cases}"
        print(f"FAIL  {name}  ({n} cases: {', '.join(ids[:3])}{more})")
    comparisons = t.get("comparisons", [])
    if t["outcome"] not in _OK:
        hints = _main_hints(t, chapter, tests)
        for hint in hints:
            print(f"      hint: {hint}")
        if t.get("exception") and t["exception"] != "AssertionError":
            print(f"      {t['exception']}{' at ' + t['where'] if t.get('where') else ''}")
        text = _failure_text(t) if t.get("exception") == "AssertionError" else ""
        if text and all(text not in h for h in hints) and all(c["passed"] for c in comparisons):
            print(f"      failed: {text}")
        if not any(h.startswith("not implemented yet") for h in hints):  # any example fails
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
    last = None
    for c in comparisons:
        line = _comparison_line(c)
        if line != last:  # the same tensor compared again (one line per parameter group...)
            print(line)
        last = line
    if hidden:
        names = ", ".join(c["name"] for c in hidden[:3])
        more = f" and {len(hidden) - 3} more" if len(hidden) > 3 else ""
        print(f"      FAIL also: {names}{more} (-v lists them)")


def _failure_text(t: dict) -> str:
    """The test's own failure message, shortly (its hint, if it carries one, is a hint)."""
    lines = [line.strip() for line in (t.get("message") or "").splitlines() if line.strip()]
    text = " / ".join(lines[:2]).split("; hint: ")[0]
    return text[:200] + "..." * (len(text) > 200)


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


#: Assertion text that names no cause (NumPy's testing helpers, pytest's own).
_RAW = r"$|Arrays are not|Not equal to|Items are not|assert |x and y nan"


def _forward_fails(t: dict, tests: list[dict]) -> str | None:
    """For a failed finite-difference test: a parity test of the same component whose
    forward output fails, if any (then the forward, not the backward, is wrong)."""
    if "test_finite_differences[" not in t["nodeid"]:
        return None
    component = _case(t["nodeid"]).split("[")[0]
    for u in tests:
        if _group(u["nodeid"]).endswith("::test_forward_backward_parity") and re.match(
            rf"{re.escape(component)}[\[-]", _case(u["nodeid"])
        ):
            if any(not c["passed"] and "grad" not in c["name"] for c in u.get("comparisons", [])):
                return component
    return None


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
    forward = _forward_fails(t, tests)
    if forward:
        return (
            f"the forward of {forward} is wrong (its output fails test_forward_backward_parity): "
            "these finite differences differentiate it; fix it first, the backward may be right"
        )
    failed = [c for c in t.get("comparisons", []) if not c["passed"]]
    wrong, said = first_wrong(t), re.findall(r"\bhint: (.+)", message)  # the test's own hint
    if said and exc == "AssertionError":
        return said[-1].strip()[:300]  # before the first wrong value (_main_hints adds it)
    if wrong and exc == "AssertionError" and not failed and not re.match(_RAW, first):
        return f"{first[:300]}; {wrong}"  # the test's own words, then the place
    if wrong:
        return wrong
    if failed and failed[-1].get("hint"):
        return None  # the comparison's hint
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
        return None if failed or re.match(_RAW, first) else first[:300] or None
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
    flag = workspace_flag(ws)  # the learner's --workspace, so the commands work as typed
    places = _places(ws, chapter)
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
              f"{labs_command('check', chapter, '-v', *flag)}")  # fmt: skip
    else:
        print(
            f"chapter {chapter}: {n_ok} of {n_run} {selected}pass, "
            f"{n_run - n_ok} fail{skipped} ({elapsed:.1f} s)"
        )
        for where, function, stub in places:
            if stub:
                print(f"  to write: {where}  {function}")
        hints = [
            h for t in tests if t["outcome"] not in _OK for h in _main_hints(t, chapter, tests)
        ]
        counts, first = Counter(map(_alike, hints)), {}
        for h in hints:
            first.setdefault(_alike(h), h)
        for key, n in counts.most_common(6):
            hint = first[key]
            if not hint.startswith("not implemented yet"):
                print(f"  {n} x {hint}")
    if n_run == 0 and not problems:
        return
    if passed and run.partial:
        print(f"next, the whole chapter: {labs_command('check', chapter, *flag)}")
    elif passed:
        following = next((c for c in sorted(CHAPTERS) if c > chapter), None)
        if following is not None:
            print(f"next: {labs_command('start', following, *flag)}")
        else:
            print(f"that was the last chapter: {labs_command('train', '--backend', 'numpy')}")
    else:
        where = _failing_place(places, [t for t in tests if t["outcome"] not in _OK])
        print(f"next: edit {where}, then: {labs_command('check', chapter, *flag)}")


def _places(ws: Workspace, chapter: str) -> list[tuple[str, str, bool]]:
    """``(FILE:LINE, function, still a stub)`` of each of the chapter's regions in the
    workspace, LINE its first line of code (after the TODO lines)."""
    ref, places = Reference(), []
    for f in sorted({r.file for r in ref.chapter_regions(chapter)}):
        try:
            mine = {
                r.key: r
                for r in parse_regions(
                    (ws.package / f).read_bytes().decode("utf-8", "replace"), f, False
                )
            }
        except (OSError, UnicodeDecodeError, FenceError):
            continue  # the check itself says what is wrong with the file
        for r in (r for r in ref.regions[f] if r.chapter == chapter and r.key in mine):
            m = mine[r.key]
            stub = _normalised(m.body) == _normalised(ref.stub(r))
            places.append(
                (f"{_show(ws.package / f)}:{m.begin + 2 + len(m.kept)}", r.function, stub)
            )
    return places


def _failing_place(places: list[tuple[str, str, bool]], failed: list[dict]) -> str:
    """Where to look first: the first stub; else the region whose code raised; else the
    first region whose class or function a failing test names; else every file."""
    files = dict.fromkeys(where.rsplit(":", 1)[0] for where, _, _ in places)
    stubs = [where for where, _, stub in places if stub]
    raised = [t["where"].split(" in ")[0] for t in failed if t.get("where")]
    raised = [w for w in raised if w.rsplit(":", 1)[0] in files]  # in this chapter's files

    def order(t):  # a failing gradient: the backward regions first, else the forward ones
        names = [c["name"] for c in t.get("comparisons", []) if not c["passed"]]
        grads = bool(names) and all("grad" in n or "backward" in n for n in names)
        return sorted(places, key=lambda p: ("backward" in p[1]) != grads)

    named = [w for t in failed for w, fn, _ in order(t) if fn.split(".")[0] in t["nodeid"]]
    return next(iter(stubs + raised + named), None) or ", ".join(files)


def _main_hints(t: dict, chapter: str, tests: list[dict]) -> list[str]:
    """Every distinct hint of a failed test: its own when it has one (the forward is wrong,
    not started...), else its comparisons'; then the first wrong value; alike hints once."""
    own = t.get("hint") or (_forward_fails(t, tests) and failure_hint(t, chapter, tests))
    compared = [] if own else [c["hint"] for c in t.get("comparisons", [])
                               if not c["passed"] and c.get("hint")]  # fmt: skip
    own = own or (None if compared else failure_hint(t, chapter, tests))  # words or hint
    hints, wrong = [own] if own else compared, first_wrong(t)
    if wrong and not any(wrong in h for h in hints):
        hints.insert(1 if own else 0, wrong)
    distinct: dict[str, str] = {}
    for h in hints:
        distinct.setdefault(_alike(h), h)
    return list(distinct.values())


def _alike(hint: str) -> str:
    """The hint with its numbers as ``#``: hints that differ only in numbers are alike."""
    return re.sub(r"\d[\d.e+-]*", "#", hint)


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
        failures.append({"test": _short_id(t["nodeid"]), "exception": t.get("exception"),
                         "hints": _main_hints(t, run.chapter, tests),
                         "message": message.splitlines()[0][:500] if message else ""})  # fmt: skip
    return {"chapter": run.chapter, "title": CHAPTERS[run.chapter][0], "workspace": str(ws.root),
            "partial": run.partial, "passed": passed, "done": passed and not run.partial,
            "tests": n_run, "tests_passed": n_ok, "tests_failed": n_run - n_ok,
            "tests_skipped": n_skip, "seconds": round(run.elapsed, 3), "time": _now(),
            "failures": failures}  # fmt: skip


def clean(text: str, limit: int | None = 300) -> str:
    """Text XML and a spreadsheet take: one line of at most ``limit`` characters (``None``:
    the lines as they are), characters XML cannot hold as ``?``."""
    if limit is not None:
        text = " ".join(str(text).split())[:limit]
    return re.sub("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]", "?", text)


def junit_xml(run: Run) -> str:
    """JUnit XML (GitHub Classroom, Gradescope, CI): a test case per test; a failure's
    ``message`` its hints first, then its own first lines; its text the whole message."""
    tests, chapter = run.data.get("tests", []), run.chapter
    n_run, n_ok, n_skip = _counts(tests)
    root = ET.Element("testsuites")
    suite = ET.SubElement(
        root, "testsuite", name=f"ch{chapter}", tests=str(len(tests)), errors="0",
        failures=str(n_run - n_ok), skipped=str(n_skip), time=f"{run.elapsed:.3f}",
    )  # fmt: skip
    for t in tests:
        file, _, name = _short_id(t["nodeid"]).partition("::")
        case = ET.SubElement(
            suite, "testcase", classname=f"ch{chapter}.{file.removesuffix('.py')}", name=name,
            time=f"{t.get('duration') or 0.0:.3f}",
        )  # fmt: skip
        message = t.get("message") or ""
        if t["outcome"] == "skipped":
            ET.SubElement(case, "skipped", message=clean(message))
        elif t["outcome"] not in _OK:
            said = [*_main_hints(t, chapter, tests), _failure_text(t)]
            failure = ET.SubElement(
                case, "failure", type=t.get("exception") or "failed",
                message=clean("; ".join(dict.fromkeys(filter(None, said)))),
            )  # fmt: skip
            where = f" at {t['where']}" if t.get("where") else ""
            failure.text = clean(f"{t.get('exception') or 'failed'}{where}: {message}", None)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_json(path: Path, data) -> None:
    """Strict JSON (no NaN), written atomically: a reader never sees half a file."""
    write_atomic(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode("utf-8"))
