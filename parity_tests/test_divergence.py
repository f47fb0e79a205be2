"""The first-divergence report (divergence.py): the kinds of difference it names, and per
chapter, in a forward region and in a backward one (where the chapter has one), a mistake
nobody wrote a hint for (held_out.py), planted in a fresh workspace, whose check names the
first wrong variable and the line that holds the mistake.

A check costs seconds of a core: by default two run; ``HYPOTHESIS_PROFILE=thorough`` or
``TWINFORMER_ALL_MISTAKES=1`` runs one mistake of every chapter and kind of region.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from labs.learner import exercises_check
from labs.learner.exercises_fences import Reference
from parity_tests.divergence import _other_branch, describe
from parity_tests.held_out import HELD_OUT, mistake_lines
from parity_tests.mistakes import MISTAKES, TWELVE
from parity_tests.test_mistakes import ALL, check_planted

E = np.arange(1.0, 13.0).reshape(3, 4)


@pytest.mark.parametrize(
    ("actual", "words"),
    [
        (np.where(E > 11, np.nan, E), "NaN where the reference is finite, first at [2, 3]"),
        (E * 0.5, "a constant factor: yours = 0.5 x the reference"),
        (E.T, "axes 0 and 1 transposed"),
        (E[[2, 0, 1]], "a permutation of axis 0"),
        (E[:, :3], "shape (3, 3) where the reference has (3, 4)"),
        (E + np.triu(np.ones((3, 4)), 1)[:, :4], "largest difference 1"),
    ],
)
def test_describe_names_the_kind_of_difference(actual, words):
    assert words in describe(actual, E)


def test_describe_masked_and_future_positions():
    probs = np.tril(np.full((3, 3), 0.5))
    leaked = probs + np.triu(np.full((3, 3), 0.1), 1)
    assert "only where the reference is masked" in describe(leaked, probs)
    square = np.arange(1.0, 10.0).reshape(3, 3)
    assert "only above the diagonal" in describe(square + np.triu(square, 1), square)
    assert "item 1 differs: yours 5, the reference 9" in describe((9, 5), (9, 9))


def test_a_wrong_branch_is_blamed_on_its_condition(tmp_path):
    code = "def f(x):\n    if x > 1:\n        y = 2 * x\n    else:\n        y = x\n    return y\n"
    (tmp_path / "f.py").write_text(code)
    assert _other_branch(str(tmp_path / "f.py"), 5, "y = 2 * x") == 2  # the `if` line
    assert _other_branch(str(tmp_path / "f.py"), 5, "y = 3 * x") is None  # an edited line


def test_the_issues_mistakes_are_in_the_catalogue():
    names = {m.name for m in MISTAKES}
    assert TWELVE <= names, sorted(TWELVE - names)
    assert len({m.chapter for m in HELD_OUT}) == 17


def _way(m) -> str:
    return "backward" if "backward" in m.function else "forward"


# per chapter the first mistake in a forward region and the first in a backward one
PER_CHAPTER = {f"ch{m.chapter}-{_way(m)}": m for m in reversed(HELD_OUT)}
RUN = sorted(PER_CHAPTER) if ALL else ["ch03-backward", "ch07-forward"]


def test_every_chapter_has_a_held_out_mistake_per_kind_of_region():
    ref = Reference()
    regions = {f"ch{r.chapter}-{_way(r)}" for f in ref.regions for r in ref.regions[f]}
    assert regions == set(PER_CHAPTER), sorted(regions ^ set(PER_CHAPTER))


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> dict:
    ref = Reference()
    runs = check_planted(ref, tmp_path_factory.mktemp("held-out"), {c: PER_CHAPTER[c] for c in RUN})
    return {
        c: (
            ws,
            mistake_lines(
                ref, PER_CHAPTER[c], (ws.package / PER_CHAPTER[c].file).read_text("utf-8")
            ),
            proc,
            report,
        )
        for c, (ws, proc, report) in runs.items()
    }


@pytest.mark.parametrize("region", sorted(PER_CHAPTER))
def test_check_names_the_first_wrong_variable_and_line(region, checked, capsys):
    if region not in checked:
        pytest.skip("every chapter runs with HYPOTHESIS_PROFILE=thorough")
    m = PER_CHAPTER[region]
    ws, lines, proc, report = checked[region]
    run = exercises_check.read_run(ws, m.chapter, report, proc, 0.0, partial=True)
    assert not exercises_check.explain(ws, run)
    out = capsys.readouterr().out
    said = re.findall(rf"first wrong value: `([^`]+)` at \S*numpy_impl/{m.file}:(\d+)", out)
    assert (m.expect, str(lines[0])) in said or any(
        name == m.expect and int(n) in lines for name, n in said
    ), f"{m.what}: expected `{m.expect}` at {m.file}:{lines}, got {said}\n{out[-3000:]}"
