"""A teacher's tools (docs/teaching.md): ``check --junit/--json``, partial checks, ``grade``."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labs import UserError
from labs.__main__ import main
from labs.learner import exercises_check
from labs.learner.exercises_fences import Reference, parse_regions, replace_bodies
from labs.learner.exercises_workspace import Workspace, add_stubs
from labs.learner.invocation import labs_command


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference()


def solve(reference: Reference, ws: Workspace, chapter: str) -> None:
    """The chapter's regions in the workspace hold the reference's code again."""
    for f in {r.file for r in reference.chapter_regions(chapter)}:
        path = ws.package / f
        text = path.read_text(encoding="utf-8")
        bodies = {r.key: list(r.body) for r in reference.regions[f] if r.chapter == chapter}
        path.write_text(replace_bodies(text, parse_regions(text, f, names=False), bodies))


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_check_writes_junit_and_json_reports_of_fresh_stubs(reference, tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "03")
    junit, results = tmp_path / "out" / "ch03.xml", tmp_path / "out" / "ch03.json"
    assert exercises_check.run_check(ws, "03", junit=junit, json_out=results) == 1
    out = capsys.readouterr().out
    assert f"wrote {junit}" in out or "wrote out/ch03.xml" in out

    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite.get("name") == "ch03"
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures")) == len(failed) > 0
    assert any("NotImplementedError" in (c.find("failure").text or "") for c in failed)

    data = json.loads(results.read_text())
    assert data["chapter"] == "03" and data["passed"] is False and data["done"] is False
    assert data["tests_failed"] == len(data["failures"]) > 0
    assert data["tests"] == data["tests_passed"] + data["tests_failed"]
    assert any(h.startswith("not implemented yet") for f in data["failures"] for h in f["hints"])

    # a report never goes into the learner's code, and replaces its older self
    with pytest.raises(UserError, match="inside the workspace"):
        exercises_check.run_check(ws, "03", junit=ws.package / "ch03.xml")
    assert not (ws.package / "ch03.xml").exists()


def test_a_partial_check_never_says_the_chapter_is_done(reference, tmp_path, capsys):
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "01")
    solve(reference, ws, "01")
    assert exercises_check.run_check(ws, "01", keyword="decode") == 0
    out = capsys.readouterr().out
    assert "Done!" not in out and labs_command("start", "02") not in out
    assert "selected tests pass" in out and "a partial check" in out
    assert f"next, the whole chapter: {labs_command('check', '01')}" in out
    assert "last_check" not in ws.load_state()["chapters"]["01"]  # status unchanged

    assert exercises_check.run_check(ws, "01") == 0  # the whole chapter: done
    out = capsys.readouterr().out
    assert "Done!" in out and f"next: {labs_command('start', '02')}" in out
    assert ws.load_state()["chapters"]["01"]["last_check"]["passed"] is True


def test_grade_rolls_up_two_workspaces_without_writing_into_them(reference, tmp_path, capsys):
    alice, bob = Workspace(tmp_path / "alice"), Workspace(tmp_path / "bob")
    for ws in (alice, bob):
        add_stubs(reference, ws, "01")
    solve(reference, alice, "01")
    before = {ws.root: snapshot(ws.root) for ws in (alice, bob)}
    table = tmp_path / "grades" / "class.csv"

    argv = ["grade", str(alice.root), str(bob.root), "--csv", str(table)]
    assert main([*argv, "--json", str(tmp_path / "grades" / "class.json")]) == 0
    assert "wrote" in capsys.readouterr().out
    rows = list(csv.DictReader(table.open()))
    assert [(Path(r["workspace"]).name, r["chapter"], r["done"]) for r in rows] == [
        ("alice", "01", "yes"),
        ("bob", "01", "no"),
    ]
    assert rows[0]["failed"] == "0" and int(rows[0]["passed"]) == int(rows[0]["tests"]) > 0
    assert int(rows[1]["failed"]) > 0 and rows[1]["hint"].startswith("not implemented yet")
    assert len(json.loads((tmp_path / "grades" / "class.json").read_text())) == 2
    for ws in (alice, bob):  # no report, example database, bytecode or progress change
        assert snapshot(ws.root) == before[ws.root]

    assert main(["grade", str(bob.root), "--chapter", "2", "--csv", str(table)]) == 0
    (row,) = csv.DictReader(table.open())  # not started: its code is the reference's
    assert (row["chapter"], row["done"], row["hint"]) == ("02", "no", "not started")
    assert main(["grade", str(alice.root), "--csv", str(alice.root / "grades.csv")]) == 2
    assert "is inside the workspace" in capsys.readouterr().err
