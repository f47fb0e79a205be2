"""Exercises: write ``numpy_impl`` back yourself, one chapter at a time (docs/exercises.md).

``start NN`` puts chapter NN's regions into ``workspace/numpy_impl/`` as stubs (replacing
no code of yours without ``--force``); ``check NN`` runs ``pytest -m chNN`` against it
and explains each failure; ``status`` lists the chapters; ``reset NN`` puts the stubs
back. The pieces: ``exercises_fences.py``, ``exercises_workspace.py``,
``exercises_check.py``; this module has the four commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

from .. import UserError
from .exercises_check import (
    INSTALL_TEST_TOOLS,
    missing_test_tools,
    run_check,
    write_not_started,
)
from .exercises_fences import CHAPTERS, Reference, parse_chapter
from .exercises_workspace import (
    WORKSPACE_ENV,
    Workspace,
    _print_written,
    _show,
    add_stubs,
    workspace_dir,
    workspace_flag,
)
from .invocation import labs_command


def _workspace_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workspace",
        metavar="DIR",
        help=f"the workspace (default: ${WORKSPACE_ENV}, else workspace/ in the repository)",
    )


def _chapter_argument(p: argparse.ArgumentParser) -> None:
    """The chapter, and ``--workspace``."""
    chapters = ", ".join(CHAPTERS)
    p.add_argument("chapter", type=parse_chapter, help=f"one of {chapters} (3, 03, ch03 work)")
    _workspace_option(p)


def _start_arguments(p: argparse.ArgumentParser) -> None:
    _chapter_argument(p)
    p.add_argument("--force", action="store_true", help="replace code you wrote with the stubs")


def _start(args: argparse.Namespace) -> int:
    chapter = args.chapter
    ws = Workspace(workspace_dir(args.workspace))
    ref = Reference()
    fresh = not ws.exists()
    written = add_stubs(ref, ws, chapter, force=args.force)
    title, folder = CHAPTERS[chapter][0], ref.folders[chapter]
    if fresh:
        print(
            f"created {_show(ws.package)}/: a copy of numpy_impl/ in which every chapter is "
            f"solved but chapter {chapter}"
        )
    if all(w.action == "unchanged" for w in written):
        print(f"chapter {chapter} ({title}) is already started; its stubs are in place:")
    else:
        print(f"chapter {chapter} ({title}): your turn to write")
    _print_written(ws, written)
    print(
        f"each stub sits between '### BEGIN SOLUTION ch{chapter}' and '### END SOLUTION' and "
        "raises NotImplementedError until you replace it"
    )
    check = labs_command("check", chapter, *workspace_flag(ws))
    if missing_test_tools():  # check would refuse: say the install step now
        print(
            f"the checks need the test tools once, from the repository root: {INSTALL_TEST_TOOLS}"
        )
    print(f"read {folder}/README.md, then run: {check}")
    return 0


def _check_arguments(p: argparse.ArgumentParser) -> None:
    _chapter_argument(p)
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="only the tests pytest -k selects")
    p.add_argument("-m", dest="marker", metavar="EXPR", help="only those pytest -m selects too")
    p.add_argument("-v", "--verbose", action="store_true", help="every test and compared tensor")
    p.add_argument("-q", "--quiet", action="store_true", help="only the failures and the summary")
    also = "also write the results as %s; a report of the same name is replaced"
    junit = also % "JUnit XML (GitHub Classroom, Gradescope, CI)"
    p.add_argument("--junit", metavar="FILE", type=Path, help=junit)
    p.add_argument("--json", dest="json_out", metavar="FILE", type=Path, help=also % "JSON")


def _check(args: argparse.Namespace) -> int:
    chapter = args.chapter
    ws = Workspace(workspace_dir(args.workspace))
    if chapter not in (ws.started() if ws.exists() else ()):
        start = labs_command("start", chapter, *workspace_flag(ws))
        if args.junit or args.json_out:  # an autograder still gets its report: all failed
            write_not_started(ws, chapter, args.junit, args.json_out, f"not started: {start}")
        ws.require()
        raise UserError(f"chapter {chapter} is not started in {_show(ws.root)}: {start}")
    return run_check(
        ws,
        chapter,
        keyword=args.keyword,
        quiet=args.quiet,
        verbose=args.verbose,
        marker=args.marker,
        junit=args.junit,
        json_out=args.json_out,
    )


def _status(args: argparse.Namespace) -> int:
    ws = Workspace(workspace_dir(args.workspace)).require()
    chapters = ws.load_state()["chapters"]
    print(f"workspace: {_show(ws.root)}")
    width = max(len(title) for title, _ in CHAPTERS.values())
    for chapter, (title, _) in CHAPTERS.items():
        entry = chapters.get(chapter)
        last = (entry or {}).get("last_check")
        if entry is None:
            status, detail = "not started", ""
        elif last is None:
            status, detail = "in progress", "not checked yet"
        else:
            status = "done" if last["passed"] else "in progress"
            when, passing = last["time"].replace("T", " "), last["tests_passing"]
            detail = f"last check {when}: {passing} of {last['tests']} tests pass"
        print(f"  {chapter}  {title:<{width}}  {status:<11}  {detail}".rstrip())
    return 0


def _reset(args: argparse.Namespace) -> int:
    chapter = args.chapter
    ws = Workspace(workspace_dir(args.workspace)).require()
    written = add_stubs(Reference(), ws, chapter, force=True)
    print(f"reset chapter {chapter} ({CHAPTERS[chapter][0]}): the stubs are back in")
    _print_written(ws, written)
    print(f"next: {labs_command('check', chapter, *workspace_flag(ws))}")
    return 0


# the sub-commands labs/__main__.py registers
start = SimpleNamespace(add_arguments=_start_arguments, main=_start)
check = SimpleNamespace(add_arguments=_check_arguments, main=_check)
status = SimpleNamespace(add_arguments=_workspace_option, main=_status)
reset = SimpleNamespace(add_arguments=_chapter_argument, main=_reset)
