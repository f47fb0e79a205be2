"""A teacher's tools (docs/teaching.md): ``check --junit/--json``, partial checks, ``grade``."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from labs import UserError
from labs.__main__ import build_parser, main
from labs.learner import exercises_check
from labs.learner import grade as grade_command
from labs.learner.exercises_fences import Reference, parse_regions, replace_bodies
from labs.learner.exercises_workspace import Workspace, add_stubs
from labs.learner.invocation import labs_command
from parity_tests.held_out import HELD_OUT, mistake_lines
from parity_tests.mistakes import MISTAKES, write_mistake

#: grade's time limit in these tests: a few times what chapter 01 takes on a busy runner
LIMIT = 120
ROOT = Path(__file__).resolve().parent.parent
MISTAKE = next(m for m in MISTAKES if m.name == "decode-negative-id-wraps")
UNFORESEEN = next(m for m in HELD_OUT if m.name == "decode-joins-with-spaces")


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
    stubs = [line.split()[-1] for line in out.splitlines() if line.startswith("  to write: ")]
    assert sorted(stubs) == sorted(r.function for r in reference.chapter_regions("03")), out

    suite = ET.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    assert suite.get("name") == "ch03"
    cases = suite.findall("testcase")
    failed = [c for c in cases if c.find("failure") is not None]
    assert int(suite.get("failures")) == len(failed) > 0
    assert any("NotImplementedError" in (c.find("failure").text or "") for c in failed)
    for c in failed:  # the hint first, whole; no Hypothesis statistics blobs
        assert c.find("failure").get("message").startswith("not implemented yet: "), c.attrib
    assert "hypothesis-statistics" not in junit.read_text()
    assert not [c for c in cases if "test_gpu.py" in c.get("classname")]  # not the learner's

    data = json.loads(results.read_text())
    assert data["chapter"] == "03" and data["passed"] is False and data["done"] is False
    assert data["tests_failed"] == len(data["failures"]) > 0
    assert data["tests"] == data["tests_passed"] + data["tests_failed"]
    assert any(h.startswith("not implemented yet") for f in data["failures"] for h in f["hints"])

    # a chapter not started: its reports all the same, every test failed "not started"
    args = build_parser().parse_args(
        ["check", "05", "--workspace", str(ws.root), "--junit", str(junit), "--json", str(results)]
    )
    with pytest.raises(UserError, match="chapter 05 is not started"):
        args.func(args)
    data = json.loads(results.read_text())
    assert data["chapter"] == "05" and data["tests"] == data["tests_failed"] > 0
    assert all(f["hints"][0].startswith("not started: ") for f in data["failures"])
    (suite,) = ET.parse(junit).getroot().iter("testsuite")
    assert suite.get("name") == "ch05" and int(suite.get("failures")) == data["tests"]
    assert "--workspace" in suite.find("testcase/failure").get("message")

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


def write_code(reference: Reference, ws: Workspace, chapter: str, body) -> None:
    """Each of the chapter's regions in the workspace gets ``body(region)``'s lines."""
    for f in {r.file for r in reference.chapter_regions(chapter)}:
        path = ws.package / f
        text = path.read_text(encoding="utf-8")
        bodies = {r.key: body(r) for r in reference.regions[f] if r.chapter == chapter}
        path.write_text(replace_bodies(text, parse_regions(text, f, names=False), bodies))


def grade(workspaces: list[Workspace], out: Path, *options: str) -> list[dict]:
    argv = ["grade", *(str(ws.root) for ws in workspaces), "--out", str(out), *options]
    assert main([*argv, "--chapter", "01", "--jobs", "3"]) == 0
    return list(csv.DictReader((out / "grades.csv").open(encoding="utf-8")))


def test_grade_a_class_of_six(reference, tmp_path, capsys):
    """Correct, one mistake, blank, an endless loop, a syntax error, a mistake no hint
    foresaw: 100 / 50 / 0 / 0 / 0 / 0, the loop killed at the time limit while the others
    are graded; the unforeseen mistake's first wrong value and line, as ``labs check`` says
    it; a CSV and JUnit files a gradebook reads; nothing written into a workspace."""
    names = ["loop", "correct", "mistake", "blank", "syntax", "unforeseen"]  # slowest first
    ws = {n: Workspace(tmp_path / "class" / n / "workspace") for n in names}
    for w in ws.values():
        add_stubs(reference, w, "01")
    write_code(reference, ws["correct"], "01", lambda r: list(r.body))
    write_mistake(reference, ws["mistake"], MISTAKE)
    write_mistake(reference, ws["unforeseen"], UNFORESEEN)
    loop = ["while True:\n", "    pass\n"]  # in decode
    write_code(
        reference,
        ws["loop"],
        "01",
        lambda r: [r.indent + line for line in loop] if r.index else list(r.body),
    )
    syntax = "return [self._stoi[c] for c in text\n"  # in encode
    write_code(
        reference, ws["syntax"], "01", lambda r: list(r.body) if r.index else [r.indent + syntax]
    )
    before = {n: snapshot(w.root) for n, w in ws.items()}

    start = time.monotonic()
    rows = grade(list(ws.values()), tmp_path / "grades", "--time-limit", str(LIMIT))
    assert time.monotonic() - start < 3 * LIMIT
    got = {r["student"]: (int(r["score"]), r["failing"], r["hint"]) for r in rows}
    assert got["correct"] == (100, "", "")
    assert (
        got["mistake"][:2] == (50, "CharTokenizer.decode") and MISTAKE.expect in got["mistake"][2]
    )
    assert got["blank"][0] == 0 and got["blank"][2].startswith("not implemented yet")
    assert got["loop"][0] == 0 and got["loop"][2].startswith(f"timed out after {LIMIT} s")
    assert got["syntax"][0] == 0 and got["syntax"][2].startswith("does not import: SyntaxError")
    text = (ws["unforeseen"].package / UNFORESEEN.file).read_text("utf-8")
    line = mistake_lines(reference, UNFORESEEN, text)[0]
    said = f"first wrong value: `return` at {ws['unforeseen'].package}/{UNFORESEEN.file}:{line}"
    assert got["unforeseen"][0] == 0 and got["unforeseen"][2].startswith(said), got
    assert list(rows[0]) == ["student", "chapter", "score", "failing", "hint"]

    for n in names:  # JUnit: a test case per exercise region, its failure saying why
        (suite,) = ET.parse(tmp_path / "grades" / f"{n}.xml").getroot().iter("testsuite")
        cases = suite.findall("testcase")
        assert [c.get("name") for c in cases] == ["CharTokenizer.encode", "CharTokenizer.decode"]
        failed = sum(c.find("failure") is not None for c in cases)
        assert int(suite.get("failures")) == failed == {"correct": 0, "mistake": 1}.get(n, 2)
        report = json.loads((tmp_path / "grades" / f"{n}.json").read_text())
        assert report["chapters"][0]["score"] == got[n][0]
        assert snapshot(ws[n].root) == before[n]
    assert "hypothesis-statistics" not in (tmp_path / "grades" / "mistake.xml").read_text()


FORGE_REPORT = """import json, os
fake = {{"tests": [{{"nodeid": "{test}", "outcome": "passed"}}],
        "collected": [{{"nodeid": "{test}", "chapters": ["ch01"]}}],
        "regions": {{"{test}": ["ch01:0", "ch01:1"]}}}}
if os.environ.get("TWINFORMER_REPORT"):
    open(os.environ["TWINFORMER_REPORT"], "w").write(json.dumps(fake))
for fd in range(3, 256):  # whatever the grader handed down
    try:
        os.pwrite(fd, ("forged\\n" + json.dumps(fake)).encode(), 0)
    except OSError:
        pass
os._exit(0)
"""

REWRITE_CSV = """import os, time
if os.fork() == 0:
    if os.fork() == 0:  # the grandchild: waits for the grader's table, then rewrites it
        for _ in range(200):
            time.sleep(0.05)
            if os.path.exists({csv!r}):
                time.sleep(0.3)
                open({csv!r}, "w").write("student,chapter,score\\nrewriter,01,100\\n")
                break
    os._exit(0)
"""


@pytest.mark.parametrize("sandbox", ["none", "bwrap"])
def test_forged_reports_and_lingering_processes_change_no_grade(
    reference, tmp_path, capsys, sandbox
):
    if sandbox == "bwrap" and grade_command._sandbox("auto") is None:
        pytest.skip("no working bubblewrap here (.ci/run installs it)")
    out = tmp_path / "grades"
    ws = {n: Workspace(tmp_path / n) for n in ("forger", "rewriter", "idle")}
    add_stubs(reference, ws["forger"], "01")
    add_stubs(reference, ws["rewriter"], "01")
    add_stubs(reference, ws["idle"], "02")  # chapter 01 not started: a report all the same
    test = "parity_tests/test_tokenizer.py::test_ids_are_positions_in_the_sorted_vocabulary"
    payloads = {
        "forger": FORGE_REPORT.format(test=test),
        "rewriter": REWRITE_CSV.format(csv=str(out / "grades.csv")),
    }
    for name, payload in payloads.items():
        init = ws[name].package / "__init__.py"
        init.write_text(payload + init.read_text())

    rows = grade(list(ws.values()), out, "--sandbox", sandbox, "--time-limit", "60")
    table = (out / "grades.csv").read_bytes()
    got = {r["student"]: (r["score"], r["hint"]) for r in rows}
    assert got["forger"][0] == "0" and got["forger"][1].startswith("the tests stopped without")
    assert got["rewriter"][0] == "0" and got["rewriter"][1].startswith("not implemented yet")
    assert got["idle"] == ("0", "not started")
    for name in ws:
        assert ET.parse(out / f"{name}.xml").getroot().find("testsuite") is not None
        assert json.loads((out / f"{name}.json").read_text())["student"] == name
    time.sleep(2)  # a process left behind would have rewritten the table by now
    assert (out / "grades.csv").read_bytes() == table
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["grades.csv", *(f"{n}.{e}" for n in ws for e in ("json", "xml"))]
    )


def test_grade_refuses_unclear_options_before_running_anything(reference, tmp_path, capsys):
    alice, bob = Workspace(tmp_path / "alice" / "workspace"), Workspace(tmp_path / "bob")
    argv = ["grade", str(alice.root), str(bob.root)]
    assert main([*argv, "--out", str(alice.root / "grades")]) == 2
    assert "is inside the workspace" in capsys.readouterr().err
    assert main([*argv, "--out", str(tmp_path / "g"), "--student", "x", "--student", "x"]) == 2
    assert main([*argv, "--out", str(tmp_path / "g"), "--student", "a/b", "--student", "c"]) == 2
    assert main([*argv, "--out", str(tmp_path / "g"), "--time-limit", "0"]) == 2
    assert not (tmp_path / "g").exists()


def test_release_holds_no_solution_and_its_check_works(reference, tmp_path, monkeypatch):
    out = tmp_path / "course"
    assert main(["release", "--out", str(out)]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["course"]  # built beside it, renamed
    released = Reference(out / "numpy_impl", out / "labs")
    for f, regions in reference.regions.items():  # every region: its stub, no line of code
        mine = {r.key: r for r in released.regions[f]}
        for r in regions:
            assert mine[r.key].body == reference.stub(r), (f, r.function)
    code = {  # each line of a solution (but the shortest), without its comment and spaces
        "".join(line.split("  #")[0].split())
        for regions in reference.regions.values()
        for r in regions
        for line in r.body
        if not line.lstrip().startswith("#") and len("".join(line.split("  #")[0].split())) >= 20
    }
    for path in [*out.rglob("*.md"), out / "docs" / "site" / "search-index.js"]:
        text = "".join(path.read_text(encoding="utf-8").split())
        assert not [line for line in code if line in text], path
    assert "docs/site/" not in (out / ".gitignore").read_text()  # published with it
    assert (out / "docs" / "site" / "03_attention.html").is_file()

    env = {k: v for k, v in os.environ.items() if k != "TWINFORMER_WORKSPACE"}

    def labs(*argv: str) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "labs", *argv]
        return subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)

    assert labs("start", "01").returncode == 0
    stubs = labs("check", "01")
    assert stubs.returncode == 1 and "not implemented yet" in stubs.stdout
    solve(reference, Workspace(out / "workspace"), "01")
    done = labs("check", "01")
    assert done.returncode == 0 and "Done!" in done.stdout, done.stdout[-2000:]
    shown = labs("diff", "attention", "--method", "softmax", "--no-color", "--width", "200").stdout
    assert "workspace/numpy_impl/attention.py" in shown and "NotImplementedError" in shown
    assert "row_max" not in shown  # the learner's code beside the twin, not the reference

    # refused: inside the repository, or a folder that holds something; a failed build
    # leaves nothing behind
    assert main(["release", "--out", str(ROOT / "release")]) == 2
    assert main(["release", "--out", str(out)]) == 2
    monkeypatch.setattr("labs.learner.docs.build_site", lambda *a, **k: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        main(["release", "--out", str(tmp_path / "again")])
    assert [p.name for p in tmp_path.iterdir()] == ["course"]


def test_a_result_of_the_wrong_shape_scores_0_and_stops_no_one(reference, tmp_path, monkeypatch):
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "01")
    monkeypatch.setattr(grade_command, "_run", lambda *a: ({"tests": [1, "x"]}, None, 0.0))
    report = grade_command.grade_workspace(reference, ws.root, "ws", None, tmp_path, 1, None)
    assert [(c["score"], c["hint"]) for c in report["chapters"]] == [
        (0, "the tests' result is damaged")
    ]
