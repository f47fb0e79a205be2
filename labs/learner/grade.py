"""``python -m labs grade WORKSPACE... --csv FILE``: a class's progress, one row per
learner and chapter, for a teacher.

Each workspace (a learner's ``python -m labs start`` directory, e.g. one cloned
repository per student) gets its chapters' parity tests run against it, the
same tests as ``python -m labs check``, and nothing is written into it: the
reports go to a temporary directory, no failing examples are kept
(``TWINFORMER_READ_ONLY``), no bytecode. The learner's own progress.json is
never trusted for the grade (a learner can edit it) and never changed.

The chapters: ``--chapter`` (repeatable), else every chapter the workspace has
started; a chapter the workspace has not started is a row saying so (its code is
still the reference's, which would pass). docs/teaching.md shows it in a course.
"""

from __future__ import annotations

import argparse
import csv
import io
import tempfile
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint_files import write_atomic
from .exercises_check import _counts, results, run_tests, write_json
from .exercises_fences import CHAPTERS, parse_chapter
from .exercises_workspace import Workspace, _show, check_report_path

COLUMNS = [
    "workspace",
    "chapter",
    "title",
    "tests",
    "passed",
    "failed",
    "skipped",
    "done",
    "hint",
]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workspaces", nargs="+", metavar="WORKSPACE", help="learners' workspaces")
    p.add_argument(
        "--chapter",
        action="append",
        dest="chapters",
        metavar="NN",
        help="grade this chapter (repeat for more; default: each workspace's started chapters)",
    )
    p.add_argument(
        "--csv",
        dest="csv_out",
        metavar="FILE",
        type=Path,
        required=True,
        help="the table to write; a file of that name is replaced",
    )
    p.add_argument("--json", dest="json_out", metavar="FILE", type=Path, help="also as JSON")


def main(args: argparse.Namespace) -> int:
    chapters = [parse_chapter(c) for c in args.chapters] if args.chapters else None
    workspaces = [Workspace(Path(w).expanduser().resolve()) for w in args.workspaces]
    for out, option in ((args.csv_out, "--csv"), (args.json_out, "--json")):
        if out is not None:
            check_report_path(out, option, workspaces)
    rows, details = grade(workspaces, chapters)
    write_csv(args.csv_out, rows)
    print(f"wrote {_show(args.csv_out)}: {len(rows)} rows")
    if args.json_out is not None:
        write_json(args.json_out, details)
        print(f"wrote {_show(args.json_out)}")
    return 0


def grade(workspaces: list[Workspace], chapters: list[str] | None) -> tuple[list[dict], list]:
    """Run each workspace's chapters; returns the CSV rows and the full results."""
    rows, details = [], []
    with tempfile.TemporaryDirectory(prefix="twinformer-grade-") as tmp:
        for i, ws in enumerate(workspaces):
            if not ws.exists():
                print(f"{_show(ws.root)}: no workspace (no numpy_impl/__init__.py)")
                rows.append({**dict.fromkeys(COLUMNS, ""), "workspace": str(ws.root),
                             "hint": "no workspace"})  # fmt: skip
                continue
            try:
                started = ws.started()
            except UserError as e:  # one learner's damaged record stops no one else's grade
                rows.append({**dict.fromkeys(COLUMNS, ""), "workspace": str(ws.root),
                             "hint": str(e)[:200]})  # fmt: skip
                continue
            for chapter in chapters or sorted(started):
                if chapter not in started:  # its code is still the reference's: no grade
                    rows.append({**dict.fromkeys(COLUMNS, ""), "workspace": str(ws.root),
                                 "chapter": chapter, "title": CHAPTERS[chapter][0],
                                 "done": "no", "hint": "not started"})  # fmt: skip
                    print(f"{_show(ws.root)}  chapter {chapter}: not started")
                    continue
                report = Path(tmp) / f"{i}-ch{chapter}.json"
                run = run_tests(ws, chapter, report=report, read_only=True)
                tests = run.data.get("tests", [])
                n_run, n_ok, n_skip = _counts(tests)
                passed = run.proc.returncode == 0 and n_run > 0 and n_ok == n_run
                result = results(ws, run, passed)
                hints = [h for f in result["failures"] for h in f["hints"]]
                if run.data.get("import_error"):
                    hints.insert(0, f"does not import: {run.data['import_error']['message']}")
                details.append(result)
                rows.append(
                    {
                        "workspace": str(ws.root),
                        "chapter": chapter,
                        "title": CHAPTERS[chapter][0],
                        "tests": n_run,
                        "passed": n_ok,
                        "failed": n_run - n_ok,
                        "skipped": n_skip,
                        "done": "yes" if passed else "no",
                        "hint": hints[0][:200] if hints else "",
                    }
                )
                print(
                    f"{_show(ws.root)}  chapter {chapter}: {n_ok} of {n_run} tests pass"
                    f"{', done' if passed else ''}"
                )
    return rows, details


def write_csv(path: Path, rows: list[dict]) -> None:
    """The table, written atomically."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_atomic(path, buffer.getvalue().encode("utf-8"))
