"""The learner's workspace: ``DIR/numpy_impl`` (their copy) and ``DIR/progress.json``;
:func:`add_stubs` puts a chapter's stubs in (``labs start`` and ``reset``)."""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from itertools import groupby
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint_files import write_atomic
from .exercises_fences import (
    CHAPTERS,
    REPO,
    FenceError,
    Reference,
    Region,
    _normalised,
    parse_regions,
    replace_bodies,
)
from .invocation import labs_command

PACKAGE = "numpy_impl"
#: Read by parity_tests/conftest.py too: test this workspace.
WORKSPACE_ENV = "TWINFORMER_WORKSPACE"
BACKUP_DIR = "replaced"  # in the workspace: the learner's code, kept before reset or --force
REPORTS_DIR = ".reports"  # in the workspace: the JSON report of each chapter's last check
STATE_FILE = "progress.json"  # in the workspace: started chapters and their last check


# -- the workspace -----------------------------------------------------------------------
def workspace_flag(ws) -> tuple[str, ...]:
    """``("--workspace", DIR)`` when ``ws`` is not the workspace a bare command would
    find (so a printed "next" command works as typed), else ``()``."""
    return () if ws.root == workspace_dir(None) else ("--workspace", shlex.quote(str(ws.root)))


def workspace_dir(option: str | None) -> Path:
    """``--workspace``, else ``$TWINFORMER_WORKSPACE``, else ``workspace/`` in the repository."""
    if option is not None and not option.strip():
        raise UserError("--workspace is empty: give a directory")
    chosen = option or os.environ.get(WORKSPACE_ENV) or str(REPO / "workspace")
    root = Path(chosen).expanduser().resolve()
    for package in ((REPO / name).resolve() for name in (PACKAGE, "torch_impl")):
        if root == package or package in root.parents:
            problem = f"lies inside the reference package {_show(package)}/"
        elif root / PACKAGE == package:
            problem = (
                f"would put the stubs into the reference package {_show(package)}/, "
                "replacing its solutions"
            )
        else:
            continue
        where = "--workspace" if option else f"${WORKSPACE_ENV}"
        raise UserError(
            f"{where}: {_show(root)} {problem}; give a directory of its own, e.g. "
            "workspace/ in the repository (the default)"
        )
    for own in (root / PACKAGE, root / STATE_FILE):  # a link would be written through
        if own.is_symlink() or (own.exists() and own.resolve().parent != root):
            raise UserError(
                f"{_show(own)} is a symbolic link: a workspace's files must be its own "
                "(nothing was written); remove the link, or give another --workspace"
            )
    return root


def check_report_path(path: Path, option: str, workspaces: list[Workspace]) -> Path:
    """``path`` resolved, once proven writable as a report before any work starts: not a
    directory, in a folder that can be made and written, not inside a workspace.

    Raises:
        UserError: naming ``option`` and the reason.
    """
    target = Path(path).expanduser().resolve()
    for ws in workspaces:
        if target.is_relative_to(ws.root.resolve()):
            raise UserError(
                f"{option}: {_show(target)} is inside the workspace {_show(ws.root)}, which "
                "holds the learner's code and record; write the report elsewhere"
            )
    if target.is_dir():
        raise UserError(f"{option}: {_show(target)} is a directory; give a file name")
    try:  # proven by writing: permissions alone do not tell (root, /proc, a full disk)
        target.parent.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=target.parent).close()
    except OSError as e:
        why = e.strerror or e
        raise UserError(f"{option}: cannot write in {_show(target.parent)}: {why}") from None
    return target


def _show(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    return path.relative_to(Path.cwd()).as_posix() if path.is_relative_to(Path.cwd()) else str(path)


class Workspace:
    """``DIR/numpy_impl`` (the learner's copy) and ``DIR/progress.json`` (the state)."""

    def __init__(self, root: Path):
        self.root = root
        self.package = root / PACKAGE
        self.state_file = root / STATE_FILE

    def exists(self) -> bool:
        return (self.package / "__init__.py").is_file()

    def require(self) -> Workspace:
        if not self.exists():
            raise UserError(
                f"no workspace yet at {_show(self.root)}: run "
                f"`{labs_command('start', 'NN', *workspace_flag(self))}` first"
            )
        return self

    def load_state(self) -> dict:
        why = "is not a record of chapters"
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            state = {}
        except (ValueError, UnicodeDecodeError) as e:  # never silently replaced by an empty one
            state, why = None, f"is damaged ({e})"
        chapters = state.get("chapters", {}) if isinstance(state, dict) else None
        if not isinstance(chapters, dict) or not set(chapters) <= set(CHAPTERS):
            raise UserError(
                f"{_show(self.state_file)} {why}: repair it, or delete it to start the record "
                "of your chapters afresh (your code is not in it)"
            )
        return {"version": 1, "chapters": {}, **state}

    def save_state(self, state: dict) -> None:
        text = json.dumps(state, indent=2, sort_keys=True, allow_nan=False) + "\n"
        write_atomic(self.state_file, text.encode("utf-8"))

    def started(self) -> set[str]:
        return set(self.load_state()["chapters"])


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


@dataclass
class Written:
    """What putting a chapter's stubs in did to one file."""

    file: str
    action: str  # "created", "stubbed", "unchanged", "rewritten"
    functions: list[str]
    kept: Path | None = None  # where the learner's replaced code was copied first


def add_stubs(ref: Reference, ws: Workspace, chapter: str, force: bool = False) -> list[Written]:
    """Put chapter ``chapter``'s stubs into the workspace, creating it if needed: a region
    holding the solution is stubbed, one holding the learner's code only with ``force``
    (copied first), a missing file generated again; nothing else changes.

    Raises:
        UserError: a damaged fence (nothing is written), or the learner's code would be
            replaced without ``force``.
    """
    regions = ref.chapter_regions(chapter)
    if not regions:
        raise UserError(f"chapter {chapter} has no ### BEGIN SOLUTION ch{chapter} regions")
    by_file = {f: list(rs) for f, rs in groupby(regions, key=lambda r: r.file)}  # in file order
    functions = {f: _function_list(rs) for f, rs in by_file.items()}

    if not ws.exists():
        try:
            _create(ref, ws, chapter, by_file)
        except OSError as e:
            raise UserError(
                f"cannot make the workspace in {_show(ws.root)}: {e.strerror or e} "
                f"({e.filename}); give --workspace a directory you can write"
            ) from e
        return [Written(f, "created", functions[f]) for f in by_file]

    started = ws.started() | {chapter}
    plan: dict[str, str] = {}
    written: list[Written] = []
    conflicts: list[str] = []
    damaged: list[str] = []
    for f, refs in by_file.items():
        path = ws.package / f
        if not path.is_file():
            plan[f] = ref.render(f, started)
            written.append(Written(f, "created", functions[f]))
            continue
        text = path.read_text(encoding="utf-8")
        try:
            mine = {r.key: r for r in parse_regions(text, f, names=False)}
        except FenceError as e:  # never rebuilt around it: the learner's code is in there
            damaged.append(f"{_show(path)}{str(e).removeprefix(f)}")  # path:line: what
            continue
        if missing := _missing_regions(text, f, chapter, refs, mine):
            damaged.append(
                f"{_show(path)}: the fences of chapter {chapter}'s "
                f"{', '.join(dict.fromkeys(missing))} are missing"
            )
            continue
        bodies, theirs = {}, False
        for r in refs:
            current = _normalised(mine[r.key].body)
            stub = ref.stub(r)
            if current == _normalised(stub):
                continue
            if current != _normalised(r.body) and not force:
                conflicts.append(f"{f}: {r.function}")
                continue
            theirs = theirs or current != _normalised(r.body)
            bodies[r.key] = stub
        if bodies:
            plan[f] = replace_bodies(text, mine.values(), bodies)
        kept = ws.root / BACKUP_DIR / f"{f}.{_now().replace(':', '')}" if theirs else None
        written.append(Written(f, "stubbed" if bodies else "unchanged", functions[f], kept))
    if damaged:  # with or without force: nothing is rewritten around a damaged fence
        raise UserError(
            f"chapter {chapter}: damaged fences, nothing changed: {'; '.join(damaged)}. "
            "Each region is a '### BEGIN SOLUTION chNN' line, the code, and a "
            "'### END SOLUTION' line at the same indentation: repair them by hand, or rename "
            "the file to have it generated again (every started chapter's stubs in it; "
            "copy your code back from the renamed file)"
        )
    if conflicts:
        raise UserError(
            f"chapter {chapter}: your code is in {'; '.join(conflicts)}; "
            f"`{labs_command('start', chapter, '--force', *workspace_flag(ws))}` (or "
            f"`{labs_command('reset', chapter, *workspace_flag(ws))}`) replaces it "
            "with the stubs"
        )
    try:
        for w in written:  # the learner's code, copied before it is replaced
            if w.kept is not None:
                w.kept.parent.mkdir(exist_ok=True)
                write_atomic(w.kept, (ws.package / w.file).read_bytes())
        for f, text in plan.items():
            write_atomic(ws.package / f, text.encode("utf-8"))
    except OSError as e:
        raise UserError(f"cannot write {_show(ws.package / f)}: {e.strerror or e}") from e
    state = ws.load_state()
    if chapter not in state["chapters"] or any(w.action != "unchanged" for w in written):
        state["chapters"][chapter] = {"started": _now()}
    ws.save_state(state)
    return written


def _create(ref: Reference, ws: Workspace, chapter: str, by_file: dict) -> None:
    """A new workspace: the reference, with chapter ``chapter``'s regions stubbed."""
    ws.package.mkdir(parents=True, exist_ok=True)
    for f in ref.files:
        target = ws.package / f
        target.parent.mkdir(parents=True, exist_ok=True)
        if f in by_file:
            write_atomic(target, ref.render(f, {chapter}).encode("utf-8"))
        else:
            write_atomic(target, (ref.root / f).read_bytes())  # a planted link is replaced
    ws.save_state({"version": 1, "chapters": {chapter: {"started": _now()}}})


def _missing_regions(text: str, file: str, chapter: str, refs: list[Region], mine: dict):
    """The functions of ``refs`` (the chapter's regions in the reference) whose fences
    the workspace's ``text`` lacks: counted by function, so a lost first region is
    named, not the last (the regions' indices shift)."""
    if all(r.key in mine for r in refs):
        return []
    try:
        found = Counter(r.function for r in parse_regions(text, file) if r.chapter == chapter)
    except (FenceError, SyntaxError):
        found = Counter()
    missing = Counter(r.function for r in refs) - found
    return list(missing.elements()) or [r.function for r in refs if r.key not in mine]


def _function_list(regions: list[Region]) -> list[str]:
    counts = Counter(r.function for r in regions)
    return [f"{name} ({n} places)" if n > 1 else name for name, n in counts.items()]


def _print_written(ws: Workspace, written: list[Written]) -> None:
    for w in written:
        print(f"  {_show(ws.package / w.file)}: {', '.join(w.functions)}")
        if w.kept is not None:
            print(f"    your code there was copied to {_show(w.kept)} first")
