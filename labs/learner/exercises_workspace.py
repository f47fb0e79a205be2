"""The learner's workspace: ``DIR/numpy_impl`` (their copy) and ``DIR/progress.json``.

:func:`add_stubs` puts a chapter's stubs into it (``python -m labs start`` and
``reset``), creating it if needed and never replacing code the learner wrote
unless told to.
"""

from __future__ import annotations

import json
import os
import shutil
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .. import UserError
from .exercises_fences import (
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
STATE_FILE = "progress.json"  # in the workspace: started chapters and their last check


# -- the workspace -----------------------------------------------------------------------
def workspace_dir(option: str | None) -> Path:
    """``--workspace``, else ``$TWINFORMER_WORKSPACE``, else ``workspace/`` in the repository."""
    chosen = option or os.environ.get(WORKSPACE_ENV) or str(REPO / "workspace")
    return Path(chosen).expanduser().resolve()


def _show(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it."""
    try:
        return path.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return str(path)


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
                f"no workspace yet at {_show(self.root)}: run `{labs_command('start', 'NN')}` first"
            )
        return self

    def load_state(self) -> dict:
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            state = {}
        state.setdefault("version", 1)
        state.setdefault("chapters", {})
        return state

    def save_state(self, state: dict) -> None:
        tmp = self.state_file.with_name(self.state_file.name + ".tmp")
        tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_file)

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


def add_stubs(ref: Reference, ws: Workspace, chapter: str, force: bool = False) -> list[Written]:
    """Put chapter ``chapter``'s stubs into the workspace, creating it if needed.

    A region already holding its stub is left alone; one holding the reference
    solution (a chapter not started) is replaced; one holding anything else is
    the learner's code: replaced only with ``force``. Every other line of the
    workspace stays as it is. A workspace file that is missing is generated
    again (stubs for every started chapter); one whose fences are damaged is,
    with ``force``, rebuilt from the reference around the learner's regions.
    The state file then lists the chapter as started (again, with no last check,
    if any stub was put in).

    Raises:
        UserError: code of the learner's would be replaced (without ``force``).
    """
    regions = ref.chapter_regions(chapter)
    if not regions:
        raise UserError(f"chapter {chapter} has no ### BEGIN SOLUTION ch{chapter} regions")
    by_file: dict[str, list[Region]] = {}
    for r in regions:
        by_file.setdefault(r.file, []).append(r)
    functions = {f: _function_list(rs) for f, rs in by_file.items()}

    if not ws.exists():
        ws.package.mkdir(parents=True, exist_ok=True)
        for f in ref.files:
            target = ws.package / f
            target.parent.mkdir(parents=True, exist_ok=True)
            if f in by_file:
                target.write_text(ref.render(f, {chapter}), encoding="utf-8")
            else:
                shutil.copyfile(ref.root / f, target)
        ws.save_state({"version": 1, "chapters": {chapter: {"started": _now()}}})
        return [Written(f, "created", functions[f]) for f in by_file]

    started = ws.started() | {chapter}
    plan: dict[str, str] = {}
    written: list[Written] = []
    conflicts: list[str] = []
    for f, refs in by_file.items():
        path = ws.package / f
        if not path.is_file():
            plan[f] = ref.render(f, started)
            written.append(Written(f, "created", functions[f]))
            continue
        text = path.read_text(encoding="utf-8")
        try:
            mine = {r.key: r for r in parse_regions(text, f, names=False)}
        except FenceError:
            mine = None
        if mine is None or any(r.key not in mine for r in refs):
            if not force:
                conflicts.append(f"{f} (its ch{chapter} fences are missing or damaged)")
                continue
            keep = {
                r.key: mine[r.key].body
                for r in ref.regions[f]
                if mine and r.chapter != chapter and r.key in mine
            }
            plan[f] = ref.render(f, started, keep)
            written.append(Written(f, "rewritten", functions[f]))
            continue
        bodies = {}
        for r in refs:
            current = _normalised(mine[r.key].body)
            stub = ref.stub(r)
            if current == _normalised(stub):
                continue
            if current != _normalised(r.body) and not force:
                conflicts.append(f"{f}: {r.function}")
                continue
            bodies[r.key] = stub
        if bodies:
            plan[f] = replace_bodies(text, mine.values(), bodies)
        written.append(Written(f, "stubbed" if bodies else "unchanged", functions[f]))
    if conflicts:
        raise UserError(
            f"chapter {chapter}: your code is in {'; '.join(conflicts)}; "
            f"`{labs_command('start', chapter, '--force')}` (or `reset {chapter}`) replaces it "
            "with the stubs"
        )
    for f, text in plan.items():
        (ws.package / f).write_text(text, encoding="utf-8")
    state = ws.load_state()
    if chapter not in state["chapters"] or any(w.action != "unchanged" for w in written):
        state["chapters"][chapter] = {"started": _now()}
    ws.save_state(state)
    return written


def _function_list(regions: list[Region]) -> list[str]:
    counts = Counter(r.function for r in regions)
    return [f"{name} ({n} places)" if n > 1 else name for name, n in counts.items()]


def _print_written(ws: Workspace, written: list[Written], indent: str = "  ") -> None:
    for w in written:
        print(f"{indent}{_show(ws.package / w.file)}: {', '.join(w.functions)}")
