"""The catalogue of common mistakes (mistakes.py): each one, written into a fresh workspace,
makes ``python -m labs check`` print a hint that names it.

Each test is what a learner sees: the chapter's check (its quick ``-k`` form, the
tests that catch the mistake) run on a workspace holding the wrong code, its printed
explanation searched for the hint. The pytest runs are the check's own command line
(``exercises_check.pytest_args``), each a fresh process forked from one warm driver,
two at a time (forkrun.py, as test_exercises.py runs the stubbed chapters); the
explanation is the check's (``exercises_check.explain``). ``test_mistakes_through_
the_command_line`` runs one mistake through ``python -m labs check`` itself.

Each mistake costs a check (a few seconds of a core), so by default the suite runs
chapter 09's whole list and the first mistake of every other chapter (the CI suite
stays under five minutes on two cores); ``HYPOTHESIS_PROFILE=thorough`` or
``TWINFORMER_ALL_MISTAKES=1`` runs all of them, as for a change to the hints.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from labs.learner import exercises_check
from labs.learner.exercises_fences import Reference
from labs.learner.exercises_workspace import Workspace
from parity_tests import conftest, forkrun
from parity_tests.mistakes import MISTAKES, write_mistake, wrong_body
from parity_tests.test_exercises import ROOT, pytest_env

IDS = [f"ch{m.chapter}-{m.name}" for m in MISTAKES]
ALL = os.environ.get("HYPOTHESIS_PROFILE") == "thorough" or bool(
    os.environ.get("TWINFORMER_ALL_MISTAKES")
)
DEFAULT_TOO = {"softmax-no-max-subtraction"}  # passed every test before its property was added
_FIRST = {m.chapter: f"ch{m.chapter}-{m.name}" for m in reversed(MISTAKES)}  # first per chapter
RUN = {
    name
    for name, m in zip(IDS, MISTAKES, strict=True)
    if ALL or m.chapter == "09" or _FIRST[m.chapter] == name or m.name in DEFAULT_TOO
}


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference()


def check_planted(reference: Reference, base, planted: dict) -> dict:
    """Plant each ``{name: Mistake}`` in a fresh workspace under ``base`` and run its
    chapter's check, two at a time: ``{name: (workspace, process, report path)}``."""
    jobs, workspaces = [], {}
    for name, m in planted.items():
        ws = Workspace(base / name)
        write_mistake(reference, ws, m)
        workspaces[name] = ws
        argv = exercises_check.pytest_args(m.chapter, m.keyword)[2:]  # after "-m pytest"
        env = pytest_env(ws.root, base / f"{name}.json")
        jobs.append({"name": name, "kind": "pytest", "argv": argv, "env": env, "cwd": str(ROOT)})
    procs = forkrun.run_jobs(
        jobs,
        env=pytest_env(None, base / "unused.json"),
        preload=["pytest", "numpy", "torch", "hypothesis", "hypothesis.extra.numpy"],
        parallel=2,
        workdir=base / "logs",
    )
    return {name: (workspaces[name], procs[name], base / f"{name}.json") for name in planted}


@pytest.fixture(scope="module")
def checked(tmp_path_factory, reference) -> dict:
    """Per mistake: its workspace and the check's run over it."""
    planted = {name: m for name, m in zip(IDS, MISTAKES, strict=True) if name in RUN}
    return check_planted(reference, tmp_path_factory.mktemp("mistakes"), planted)


def test_every_mistake_is_an_edit_of_the_reference(reference):
    names = [m.name for m in MISTAKES]
    assert len(names) == len(set(names)), "two mistakes share a name"
    for m in MISTAKES:
        body = wrong_body(reference, m)
        code = textwrap.indent(textwrap.dedent("".join(body)), "        ")
        # valid Python, as a learner's would be (in a loop: a region may `break`)
        compile(f"def _():\n    for _ in ():\n{code}", m.name, "exec")
    chapter_09 = {m.name for m in MISTAKES if m.chapter == "09"}
    needed = {
        "adamw-l2-decay",
        "adamw-no-bias-correction",
        "adamw-rebound-moments",
        "cross-entropy-divided-by-n",
        "clip-returns-clipped-norm",
        "warmup-from-zero",
    }
    assert needed <= chapter_09, f"chapter 09 lacks {sorted(needed - chapter_09)}"


@pytest.mark.parametrize("mistake", MISTAKES, ids=IDS)
def test_check_names_the_mistake(mistake, checked, capsys):
    name = f"ch{mistake.chapter}-{mistake.name}"
    if name not in RUN:
        pytest.skip("the whole catalogue runs with HYPOTHESIS_PROFILE=thorough")
    ws, proc, report = checked[name]
    run = exercises_check.read_run(ws, mistake.chapter, report, proc, 0.0, partial=True)
    assert not exercises_check.explain(ws, run)
    out = capsys.readouterr().out
    assert mistake.expect in out, f"{mistake.what}: no hint naming it in\n{out[-4000:]}"
    assert "Done!" not in out
    assert mistake.avoid is None or mistake.avoid not in out, f"{mistake.what}: a wrong cause"


def test_mistakes_through_the_command_line(reference, tmp_path):
    """``python -m labs check 09 -k clip`` on the clipped norm returned: the hint, the values."""
    (mistake,) = (m for m in MISTAKES if m.name == "clip-returns-clipped-norm")
    ws = Workspace(tmp_path / "ws")
    write_mistake(reference, ws, mistake)
    cmd = [sys.executable, "-m", "labs", "check", "09", "-k", "clip", "--workspace", str(ws.root)]
    env = pytest_env(None, tmp_path / "unused.json")
    env.pop(conftest.REPORT_ENV)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert mistake.expect in proc.stdout
    # cases failing alike print once: the first case in full, with both values
    assert "global gradient norm (max_norm=0.05): yours 0.04999999" in proc.stdout
    assert "the reference 10.9" in proc.stdout
    where = f"{ws.package}/optim.py:"  # the failing region; the command as the learner typed it
    assert f"next: edit {where}" in proc.stdout and f"check 09 --workspace {ws.root}" in proc.stdout
