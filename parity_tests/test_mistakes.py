"""The catalogue of common mistakes (mistakes.py): each one, written into a fresh workspace,
makes ``python -m labs check`` print a hint that names it.

Each test is what a learner sees: the chapter's check (its quick ``-k`` form, the
tests that catch the mistake) run on a workspace holding the wrong code, its printed
output searched for the hint. Then the check is partial: it must not call the
chapter done, pass or fail.
"""

from __future__ import annotations

import textwrap

import pytest

from labs.learner import exercises_check
from labs.learner.exercises_fences import Reference
from labs.learner.exercises_workspace import Workspace
from parity_tests.mistakes import MISTAKES, write_mistake, wrong_body


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference()


def test_every_mistake_is_an_edit_of_the_reference(reference):
    names = [m.name for m in MISTAKES]
    assert len(names) == len(set(names)), "two mistakes share a name"
    for m in MISTAKES:
        body = wrong_body(reference, m)
        code = textwrap.indent(textwrap.dedent("".join(body)), "    ")
        compile(f"def _():\n{code}", m.name, "exec")  # valid Python, as a learner's would be
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


@pytest.mark.parametrize("mistake", MISTAKES, ids=[f"ch{m.chapter}-{m.name}" for m in MISTAKES])
def test_check_names_the_mistake(mistake, reference, tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    write_mistake(reference, ws, mistake)
    status = exercises_check.run_check(ws, mistake.chapter, keyword=mistake.keyword)
    out = capsys.readouterr().out
    assert status == 1, out[-4000:]
    assert mistake.expect in out, f"{mistake.what}: no hint naming it in\n{out[-4000:]}"
    assert "Done!" not in out
