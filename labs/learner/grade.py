"""``python -m labs grade WORKSPACE... --out DIR``: a class's grades, one row per student and
chapter, that a student's code can neither forge nor hang.

Each workspace is graded in a throwaway copy of its ``numpy_impl/``: one ``pytest`` of its
chapters, in a process group of its own (inside bubblewrap where the machine has it: no
network, nothing writable but the copy), the workspaces in parallel. A run still going
at ``--time-limit`` is killed whole and marked. The result comes back in a file the
grader opened and hands down as a descriptor, after a random token (conftest.py), never
through a path the student's code could write. Once every process group is gone the
grader writes ``DIR/STUDENT.json``, ``DIR/STUDENT.xml`` (JUnit) and ``DIR/grades.csv``.

A chapter scores out of 100, the same points for each of its exercise regions. A region
scores when the chapter's tests that run its lines (traced) all pass: a stub earns
nothing from the bad-input tests that never reach it. The chapters: ``--chapter``, else
those the workspace started (its progress.json). docs/teaching.md has the threat model.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .. import UserError
from ..commands.shared import number, positive_int
from ..plumbing.checkpoint_files import write_atomic
from .exercises_check import READ_ONLY_ENV, Run, locate, results
from .exercises_check import clean as _clean
from .exercises_fences import CHAPTERS, REPO, FenceError, Reference, parse_chapter, parse_regions
from .exercises_workspace import WORKSPACE_ENV, Workspace, _show, check_report_path

COLUMNS = ["student", "chapter", "score", "failing", "hint"]
MAX_CODE_BYTES = 20 << 20  # a workspace's numpy_impl/; the reference is ~0.5 MB
MAX_RESULT_BYTES = 64 << 20
_OK = {"passed", "xfailed"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workspaces", nargs="+", metavar="WORKSPACE", help="learners' workspaces")
    p.add_argument("--out", metavar="DIR", type=Path, required=True,
                   help="where grades.csv and each student's STUDENT.json and STUDENT.xml (JUnit) "
                   "go; files of those names are replaced")  # fmt: skip
    p.add_argument("--chapter", action="append", dest="chapters", metavar="NN",
                   help="grade this chapter (repeat for more; default: each workspace's started "
                   "chapters)")  # fmt: skip
    p.add_argument("--student", action="append", dest="students", metavar="NAME",
                   help="the students' names, one per workspace in order (default: each "
                   "workspace folder's name, or its parent's for a folder called "
                   "workspace)")  # fmt: skip
    p.add_argument("--time-limit", type=number(0, low_open=True), default=300.0,
                   metavar="SECONDS", help="per workspace; then its processes are killed and it "
                   "scores 0")  # fmt: skip
    p.add_argument("--jobs", type=positive_int,
                   default=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1,
                   help="workspaces graded at once (default: the cores available)")  # fmt: skip
    p.add_argument("--sandbox", choices=("auto", "bwrap", "none"), default="auto",
                   help="bwrap: run each workspace in bubblewrap (no network, only its copy "
                   "writable); auto: bwrap where it works, else none (the students' code runs as "
                   "you)")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    chapters = [parse_chapter(c) for c in args.chapters] if args.chapters else None
    roots = [Path(w).expanduser().resolve() for w in args.workspaces]
    names = args.students or [r.parent.name if r.name == "workspace" else r.name for r in roots]
    out = args.out.expanduser().resolve()
    if len(names) != len(roots):
        raise UserError(f"--student: {len(names)} names for {len(roots)} workspaces")
    for name in names:
        if not re.fullmatch(r"\w[\w.@+-]*", name) or names.count(name) > 1:
            raise UserError(
                f"student {name!r}: each needs a name of its own, of letters, digits and . _ - "
                "+ @ (it names the reports); give one per workspace with --student"
            )
    check_report_path(out / "grades.csv", "--out", [Workspace(r) for r in roots])
    bwrap = _sandbox(args.sandbox)
    print(
        f"grading {len(roots)} workspace(s), {args.jobs} at a time, at most "
        f"{args.time_limit:g} s each; sandbox: {'bwrap' if bwrap else 'none'}"
    )
    ref = Reference()

    def one(i: int) -> dict:
        copy = Path(tmp) / str(i)
        return grade_workspace(ref, roots[i], names[i], chapters, copy, args.time_limit, bwrap)

    with (
        tempfile.TemporaryDirectory(prefix="twinformer-grade-", ignore_cleanup_errors=True) as tmp,
        ThreadPoolExecutor(args.jobs) as pool,
    ):
        reports = list(pool.map(one, range(len(roots))))
    # Every student's process group has been killed and waited for: only now a file.
    rows = []
    for report in reports:
        write_atomic(out / f"{report['student']}.json", json.dumps(report, indent=1).encode())
        write_atomic(out / f"{report['student']}.xml", _junit(report).encode())
        if not report["chapters"]:
            rows.append([report["student"], "", 0, "", report["note"]])
            print(f"{report['student']:<16} {report['note'][:100]}")
        for ch in report["chapters"]:
            failing = "; ".join(r["function"] for r in ch["regions"] if not r["passed"])
            rows.append([report["student"], ch["chapter"], ch["score"], failing, ch["hint"]])
            print(
                f"{report['student']:<16} chapter {ch['chapter']}: {ch['score']:>3}"
                f"{'  ' + ch['hint'][:100] if ch['hint'] else ''}"
            )
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows([[re.sub(r"^([=+\-@])", r"'\1", str(v)) for v in row] for row in rows])
    write_atomic(out / "grades.csv", table.getvalue().encode())
    print(f"wrote {_show(out / 'grades.csv')} and each student's .json and .xml (JUnit)")
    return 0


def _sandbox(choice: str) -> str | None:
    """The path of a bubblewrap that works here, or None (``--sandbox none``)."""
    found = shutil.which("bwrap") if choice != "none" else None
    probe = [*_bwrap(found, Path(tempfile.gettempdir())), "true"] if found else []
    if found and subprocess.run(probe, capture_output=True).returncode == 0:
        return found
    if choice == "bwrap":
        raise UserError("--sandbox bwrap: no working bubblewrap here (apt install bubblewrap)")
    if choice == "auto":
        print(
            "warning: no bubblewrap (bwrap): the students' code runs as you, unsandboxed "
            "(docs/teaching.md: what it can do)"
        )
    return None


def grade_workspace(ref, root: Path, student: str, chapters, tmp: Path, limit, bwrap) -> dict:
    """One workspace's report: each chapter's score, regions and hints."""
    ws, started, note = Workspace(root), set(), "no chapter started"
    state = ws.state_file
    if state.is_file() and state.stat().st_size < 1 << 20:
        try:
            started = ws.started()
        except UserError as e:  # one learner's damaged record stops no one else's grade
            note = str(e)
    chosen = chapters or sorted(started)
    todo = [c for c in chosen if c in started]
    data, problem, seconds = {}, None, 0.0
    if not ws.exists():
        problem = note = "no workspace (no numpy_impl/__init__.py)"
    elif todo:
        try:
            data, problem, seconds = _run(ref, ws, todo, tmp, limit, bwrap)
        except (OSError, UserError) as e:
            problem = f"cannot grade: {e}"

    def scores():
        return [
            _chapter(ref, ws, c, data, problem if c in todo or problem else "not started")
            for c in chosen
        ]

    try:
        locate(ws, data)  # the places in the learner's workspace, not in the copy
        scored = scores()
    except (AttributeError, KeyError, TypeError, ValueError):  # a result of the wrong shape
        data, problem = {}, "the tests' result is damaged"
        scored = scores()
    note = "" if chosen else _clean(note)
    return {"student": student, "workspace": str(root), "seconds": round(seconds, 1),
            "note": note, "chapters": scored}  # fmt: skip


def _run(ref, ws: Workspace, chapters: list[str], tmp: Path, limit, bwrap):
    """``pytest -m 'chNN or ...'`` on a copy of the workspace's code, killed at ``limit``:
    (its report, a problem or None, seconds)."""
    if ws.package.is_symlink():  # to the reference, say
        raise UserError("numpy_impl/ is a symbolic link: a workspace's files must be its own")
    sizes = [p.lstat().st_size for p in ws.package.rglob("*")]
    if sum(sizes) > MAX_CODE_BYTES or len(sizes) > 10_000:
        raise UserError(f"numpy_impl/ holds {sum(sizes) >> 20} MB in {len(sizes)} files")
    shutil.copytree(ws.package, tmp / "numpy_impl", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    spans: dict[str, list] = {}  # file -> [region key, first line, last line]: traced
    for f in sorted({r.file for c in chapters for r in ref.chapter_regions(c)}):
        path = tmp / "numpy_impl" / f
        try:
            if path.is_file() and path.stat().st_size < 1 << 20:
                text = path.read_bytes().decode(
                    "utf-8", errors="replace"
                )  # a stray byte hides no region
                mine = parse_regions(text, f, names=False)
                spans[f] = [[_key(r), r.begin + 2, r.end] for r in mine if r.chapter in chapters]
        except (FenceError, ValueError):
            pass  # its regions are never traced: they score nothing
    token = secrets.token_hex(16)
    env = {k: os.environ[k] for k in ("PATH", "LANG", "TWINFORMER_DATA") if k in os.environ}
    with tempfile.TemporaryFile() as channel, tempfile.TemporaryFile() as log:
        channel.write(json.dumps({"token": token, "regions": spans}).encode())
        channel.flush()
        env.update({WORKSPACE_ENV: str(tmp), "TWINFORMER_GRADE_FD": str(channel.fileno()),
                    READ_ONLY_ENV: "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp),
                    "OMP_NUM_THREADS": "1"})  # fmt: skip
        marker = " or ".join(f"ch{c}" for c in chapters)
        pytest = "-m pytest parity_tests -q -p no:cacheprovider -o addopts=".split()
        cmd = [*(_bwrap(bwrap, tmp) if bwrap else []), sys.executable, *pytest, "-m", marker]
        start = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=log, pass_fds=(channel.fileno(),),
                                start_new_session=True)  # fmt: skip
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            return {}, f"timed out after {limit:g} s: killed (an endless loop?)", limit
        finally:
            _kill_group(proc)
        seconds = time.monotonic() - start
        size = os.fstat(channel.fileno()).st_size
        head, _, body = os.pread(channel.fileno(), min(size, MAX_RESULT_BYTES), 0).partition(b"\n")
        if head != token.encode() or size > MAX_RESULT_BYTES:
            tail = os.pread(log.fileno(), 600, max(0, os.fstat(log.fileno()).st_size - 600))
            said = " ".join(tail.decode(errors="replace").split()[-30:])
            said = f"the tests stopped without a result (exit {proc.returncode}): {said}"
            return {}, said, seconds
    try:
        return json.loads(body), None, seconds
    except ValueError:
        return {}, "the tests' result is damaged", seconds


def _bwrap(bwrap: str, writable: Path) -> list[str]:
    """Everything read-only but ``writable``, an empty /tmp, the grader's home hidden
    (unless the code lives there), no network, no other process in sight."""
    args = [bwrap, *"--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp".split()]
    home = Path.home()
    needed = (REPO, Path(sys.prefix), Path(sys.base_prefix), writable)
    if home != Path("/") and not any(p.is_relative_to(home) for p in needed):
        args += ["--tmpfs", str(home)]
    for path in (REPO, Path(sys.prefix), Path(sys.base_prefix)):  # under a hidden /tmp too
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(writable), str(writable), "--chdir", str(REPO)]
    return [*args, *"--unshare-all --die-with-parent --new-session --".split()]


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the run's whole process group (what it forked too), wait until it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    for _ in range(100):  # the other members: they run no more code once the kill arrives
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)


def _key(region) -> str:
    return f"ch{region.chapter}:{region.index}"


def _chapter(ref, ws: Workspace, chapter: str, data: dict, problem: str | None) -> dict:
    """A chapter's score from the run's report: each region's tests and points."""
    marked = {t["nodeid"]: t.get("chapters", ()) for t in data.get("collected", [])}
    tests = [t for t in data.get("tests", []) if f"ch{chapter}" in marked.get(t["nodeid"], ())]
    ran = data.get("regions", {})
    if problem is None and data.get("import_error"):
        e = data["import_error"]
        problem = f"does not import: {e['exception']} at {e.get('where')}: {e['message']}"
    failures = results(ws, Run(chapter, {**data, "tests": tests}, None, 0.0, False), False)
    failures = failures["failures"] if problem is None else []
    hints = {f["test"]: f["hints"] for f in failures}
    regions = ref.chapter_regions(chapter)
    scored = []
    for r in regions:
        own = [t for t in tests if _key(r) in ran.get(t["nodeid"], ())]
        bad = [t["nodeid"].removeprefix("parity_tests/") for t in own if t["outcome"] not in _OK]
        first = next((h for b in bad for h in hints.get(b, ())), "")
        why = problem or (f"{len(bad)} of its {len(own)} tests fail: {first}" if bad else "")
        if not own and not why:
            why = "no test ran it (a test module that does not import?)"
        scored.append({"file": r.file, "function": r.function, "points": 100 / len(regions),
                       "passed": not why, "tests": len(own), "why": why,
                       "failing_tests": bad})  # fmt: skip
    score = round(100 * sum(r["passed"] for r in scored) / len(regions))
    collect = [c["message"] for c in data.get("collect_errors", [])]
    hint = (
        problem or next((h for f in failures for h in f["hints"]), None) or next(iter(collect), "")
    )
    return {
        "chapter": chapter,
        "title": CHAPTERS[chapter][0],
        "score": score,
        "hint": "" if score == 100 else _clean(hint or [r for r in scored if r["why"]][0]["why"]),
        "regions": scored,
        "failures": failures,
    }


def _junit(report: dict) -> str:
    """JUnit XML: a suite per chapter, a test case per exercise region."""
    root = ET.Element("testsuites", name=report["student"])
    for ch in report["chapters"]:
        failed = [r for r in ch["regions"] if not r["passed"]]
        suite = ET.SubElement(root, "testsuite", name=f"ch{ch['chapter']}", errors="0",
                              tests=str(len(ch["regions"])), failures=str(len(failed)))  # fmt: skip
        props = ET.SubElement(suite, "properties")
        ET.SubElement(props, "property", name="score", value=str(ch["score"]))
        for r in ch["regions"]:
            classname = f"ch{ch['chapter']}.{r['file'].removesuffix('.py')}"
            case = ET.SubElement(suite, "testcase", name=r["function"], classname=classname)
            if not r["passed"]:
                ET.SubElement(case, "failure", message=_clean(r["why"]))
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
