"""The exercises (labs/learner/exercises*, docs/exercises.md): stubs generated from the reference.

For every chapter (01..10, 13, 14):

* its marker selects tests, from the files that test its functions only
  (one ``--collect-only`` run over the whole suite);
* a workspace with the chapter stubbed FAILS them with NotImplementedError, and
  the tests really ran the workspace's ``numpy_impl`` (one ``pytest -m chNN -x``
  per chapter, two at a time, forked from one warm process: forkrun.py);
* the generator is deterministic and leaves everything but the chapter's
  regions byte-identical to the reference.

That the reference passes every chapter's tests is the rest of the suite's job.
Then the workspace's life (start, a second chapter, edits kept, reset, damaged
fences), ``check`` end to end on chapter 05, and the hints of ``assert_close``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from labs import UserError
from labs.learner import exercises_check, exercises_fences, exercises_workspace
from labs.learner.exercises_check import failure_hint
from labs.learner.exercises_fences import (
    CHAPTERS,
    Reference,
    parse_chapter,
    parse_regions,
    replace_bodies,
)
from labs.learner.exercises_workspace import Workspace, add_stubs
from labs.learner.invocation import labs_command
from parity_tests import conftest, forkrun, tolerances
from parity_tests.tolerances import FLOAT64, assert_close, diagnose

ROOT = Path(__file__).resolve().parent.parent

#: chapter -> file -> the functions that hold its regions (one entry per region).
FENCES = {
    "01": {"char_tokenizer.py": ["CharTokenizer.encode", "CharTokenizer.decode"]},
    "02": {
        "embedding.py": ["Embedding.forward", "Embedding.backward"],
        "linear.py": ["linear", "linear_backward"],
    },
    "03": {
        "attention.py": [
            "softmax",
            "scaled_dot_product_attention",
            "scaled_dot_product_attention_backward",
        ]
    },
    "04": {
        "attention.py": [
            "split_heads",
            "merge_heads",
            "SelfAttention.forward",
            "SelfAttention.project",
            "SelfAttention.attend",
            "SelfAttention.attend_backward",
            "SelfAttention.project_backward",
        ]
    },
    "05": {
        "positional.py": [
            "LearnedPositionalEmbedding.forward",
            "LearnedPositionalEmbedding.backward",
        ]
    },
    "06": {
        "activations.py": ["GELU.forward", "GELU.backward", "gelu_tanh", "gelu_tanh_backward"],
        "ffn.py": ["FeedForward.forward", "FeedForward.backward"],
    },
    "07": {
        "block.py": ["Block.forward", "Block.backward"],
        "norm.py": ["LayerNorm.backward", "layer_norm", "layer_norm_backward"],
    },
    "08": {"gpt.py": ["GPT.__init__", "GPT.forward", "GPT.backward"]},
    "09": {
        "loss.py": ["CrossEntropyLoss.forward", "CrossEntropyLoss.backward"],
        "optim.py": ["AdamW.step", "clip_grad_norm_", "cosine_lr"],
    },
    "10": {"sampling.py": ["filter_logits", "generate"]},
    "11": {"tokenizer.py": ["merge", "BPETokenizer._bpe"]},
    "12": {
        "flash_attention.py": ["flash_attention"],
        "kv_cache.py": ["LayerKVCache.update"],
        "sampling.py": ["_cached_next_logits"],
    },
    "13": {
        "rope.py": [
            "rope_cos_sin",
            "apply_rope",
            "rope_permutation",
            "RotaryEmbedding.backward",
        ],
        "positional.py": ["sinusoidal_table"],
    },
    "14": {
        "activations.py": ["SiLU.forward", "SiLU.backward"],
        "block.py": ["Block.forward", "Block.backward"],  # the post-norm branches
        "ffn.py": ["SwiGLUFeedForward.forward", "SwiGLUFeedForward.backward"],
        "norm.py": ["RMSNorm.forward", "RMSNorm.backward"],
    },
    "15": {
        "encoder.py": [
            "MeanPool.forward",
            "MeanPool.backward",
            "TransformerClassifier.forward",
            "TransformerClassifier.backward",
        ]
    },
    "16": {
        "attention.py": ["SelfAttention.project", "SelfAttention.project_backward"],
        "seq2seq.py": [
            "DecoderBlock.forward",
            "DecoderBlock.backward",
            "Seq2SeqTransformer.generate",
        ],
    },
    "17": {"pretrained.py": ["gpt2_key_table", "from_gpt2_state", "to_gpt2_state"]},
}

#: chapter -> the test files its marker selects from: the files that test its functions.
#: test_components.py runs the registry (registry.py), so it serves every chapter with a backward.
TEST_FILES = {
    "01": {"test_labs.py", "test_tokenizer.py"},
    "02": {"test_bad_inputs.py", "test_components.py", "test_embedding.py"},
    "03": {"test_bad_inputs.py", "test_components.py", "test_properties.py"},
    "04": {"test_bad_inputs.py", "test_components.py"},
    "05": {"test_bad_inputs.py", "test_components.py"},
    "06": {"test_bad_inputs.py", "test_components.py", "test_dropout.py"},
    "07": {"test_bad_inputs.py", "test_components.py"},
    "08": {"test_bad_inputs.py", "test_components.py", "test_gpt.py"},
    "09": {"test_bad_inputs.py", "test_components.py", "test_loss.py", "test_training.py"},
    "10": {"test_bad_inputs.py", "test_sampling.py"},
    "11": {"test_bad_inputs.py", "test_bpe.py"},
    "12": {
        "test_bad_inputs.py",
        "test_components.py",
        "test_flash_attention.py",
        "test_kv_cache.py",
    },
    "13": {
        "test_bad_inputs.py",
        "test_components.py",
        "test_encoder.py",
        "test_llama.py",
        "test_rope.py",
    },
    "14": {"test_bad_inputs.py", "test_components.py", "test_llama.py", "test_norms_ffn.py"},
    "15": {"test_bad_inputs.py", "test_components.py", "test_encoder.py", "test_masks.py"},
    "16": {"test_bad_inputs.py", "test_components.py", "test_properties.py", "test_seq2seq.py"},
    "17": {"test_pretrained.py"},
}
WITH_BACKWARD = ["02", "03", "04", "05", "06", "07", "08", "09", "13", "14", "15", "16"]
ALL = list(CHAPTERS)


def pytest_env(workspace: Path | None, report: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != conftest.WORKSPACE_ENV}
    env.update({conftest.REPORT_ENV: str(report), "HYPOTHESIS_PROFILE": "default"})
    if workspace is not None:
        env[conftest.WORKSPACE_ENV] = str(workspace)
    return env


#: ``pytest`` options of every run below (a learner's ``pytest.ini`` options aside).
PYTEST_ARGS = ["-q", "-p", "no:cacheprovider", "-o", "addopts="]


def chapter_files(chapter: str) -> list[str]:
    """The chapter's test files, the bad-input table last: with ``-x`` the run stops at
    the first failure, and the stubs fail the behaviour tests first (a bad-input row
    can pass, its check running before the stubbed code)."""
    files = sorted(TEST_FILES[chapter], key=lambda f: (f == "test_bad_inputs.py", f))
    return [f"parity_tests/{f}" for f in files]


@pytest.fixture(scope="module")
def reference() -> Reference:
    return Reference()


@pytest.fixture(scope="module")
def stubbed_runs(tmp_path_factory, reference):
    """Per chapter: a fresh workspace with that chapter stubbed, and
    ``pytest -m chNN -x <its test files>`` run against it; plus one ``--collect-only``
    of the whole suite. Each run is a fresh process forked from one that imported
    torch and Hypothesis once (parity_tests/forkrun.py), two at a time."""
    base = tmp_path_factory.mktemp("stubbed")
    jobs = [{"name": "collect", "argv": ["parity_tests", *PYTEST_ARGS, "--collect-only"],
             "env": pytest_env(None, base / "collect.json")}]  # fmt: skip
    for chapter in ALL:
        ws = Workspace(base / f"ch{chapter}")
        add_stubs(reference, ws, chapter)
        argv = [*chapter_files(chapter), *PYTEST_ARGS, "-m", f"ch{chapter}", "-x"]
        env = pytest_env(ws.root, base / f"ch{chapter}.json")
        jobs.append({"name": chapter, "argv": argv, "env": env})
    for job in jobs:
        job.update(kind="pytest", cwd=str(ROOT))
    procs = forkrun.run_jobs(
        jobs,
        env=pytest_env(None, base / "unused.json"),
        preload=["pytest", "numpy", "torch", "hypothesis", "hypothesis.extra.numpy"],
        parallel=2,
        workdir=base / "logs",
    )
    runs = {}
    for name, proc in procs.items():
        report = base / ("collect.json" if name == "collect" else f"ch{name}.json")
        runs[name] = proc, json.loads(report.read_text()) if report.exists() else {}
    return runs | {"base": base}


# -- the fences ----------------------------------------------------------------------------
def test_fences_are_where_the_learning_path_says(reference):
    found: dict[str, dict[str, list[str]]] = {}
    for f, regions in reference.regions.items():
        for r in regions:
            found.setdefault(r.chapter, {}).setdefault(f, []).append(r.function)
            assert r.kept and r.kept[0].strip().startswith("### TODO: "), (
                f"{f}: the region in {r.function} has no '### TODO:' line after its BEGIN"
            )
            assert len(r.body) > len(r.kept), f"{f}: the region in {r.function} holds no code"
    assert found == FENCES


@pytest.mark.parametrize(
    "text, match",
    [
        ("    ### BEGIN SOLUTION ch03\nx = 1\n", "without an END"),
        ("x = 1\n### END SOLUTION\n", "without a BEGIN"),
        ("### BEGIN SOLUTION\nx = 1\n### END SOLUTION\n", "write the chapter"),
        ("### BEGIN SOLUTION ch99\nx = 1\n### END SOLUTION\n", "write the chapter"),
        ("    ### BEGIN SOLUTION ch03\n    x = 1\n### END SOLUTION\n", "not indented like"),
        ("### BEGIN SOLUTION ch03\n### BEGIN SOLUTION ch03\n", "inside the region"),
        ("x = 1  ### END SOLUTION\n", "alone on its line"),
    ],
    ids=["no-end", "no-begin", "no-chapter", "bad-chapter", "indent", "nested", "inline"],
)
def test_malformed_fences_are_errors_naming_the_line(text, match):
    with pytest.raises(exercises_fences.FenceError, match=match):
        parse_regions(text, "x.py", names=False)


@pytest.mark.parametrize("chapter", ALL)
def test_generator_is_deterministic_and_touches_only_the_chapter(chapter, reference, tmp_path):
    """Two fresh workspaces are byte-identical; in them, every file without the chapter's
    regions is the reference's, byte for byte, and so is every file with them once its
    stubs are swapped back for the reference's bodies."""
    a, b = Workspace(tmp_path / "a"), Workspace(tmp_path / "b")
    add_stubs(reference, a, chapter)
    add_stubs(Reference(), b, chapter)
    files = sorted(p.relative_to(a.package).as_posix() for p in a.package.rglob("*") if p.is_file())
    assert files == reference.files
    stubbed_files = set()
    for f in files:
        data = (a.package / f).read_bytes()
        assert data == (b.package / f).read_bytes(), f"{f}: two generations differ"
        original = (reference.root / f).read_bytes()
        regions = [r for r in reference.regions.get(f, []) if r.chapter == chapter]
        if not regions:
            assert data == original, f"{f} has no ch{chapter} region but differs"
            continue
        stubbed_files.add(f)
        text = data.decode()
        compile(text, f, "exec")  # the stubbed file is valid Python
        mine = parse_regions(text, f, names=False)
        for r in regions:
            body = next(m for m in mine if m.key == r.key).body
            assert body == reference.stub(r), f"{f}: {r.function} is not its stub"
            assert f'raise NotImplementedError("ch{chapter}: {r.function} \u2014 ' in body[-1]
            assert f"see {reference.folders[chapter]}/README.md" in body[-1]
        restored = replace_bodies(text, mine, {r.key: r.body for r in regions})
        assert restored.encode() == original, f"{f}: more than the ch{chapter} regions changed"
    assert stubbed_files == set(FENCES[chapter])


def test_every_chapter_stubbed_at_once_still_compiles(reference):
    for f in reference.texts:
        ast.parse(reference.render(f, CHAPTERS), f)


# -- the markers, and the stubs failing them -------------------------------------------------
def test_each_marker_selects_exactly_its_chapters_test_files(stubbed_runs):
    proc, data = stubbed_runs["collect"]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    by_chapter: dict[str, list[str]] = {c: [] for c in ALL}
    for item in data["collected"]:
        for marker in item["chapters"]:
            by_chapter[marker.removeprefix("ch")].append(item["nodeid"])
    for chapter, nodeids in by_chapter.items():
        files = {n.split("::")[0].removeprefix("parity_tests/") for n in nodeids}
        assert files == TEST_FILES[chapter], f"ch{chapter} selects tests of {sorted(files)}"
        behaviour = [n for n in nodeids if "test_bad_inputs.py" not in n]
        assert behaviour, f"ch{chapter}: only bad-input tests"
        if chapter in WITH_BACKWARD:
            assert any("finite_differences" in n for n in nodeids), f"ch{chapter}: no FD test"
            assert any("parity" in n or "every_gradient" in n for n in nodeids), (
                f"ch{chapter}: no parity test of the backward"
            )


@pytest.mark.parametrize("chapter", ALL)
def test_stubbed_chapter_fails_its_tests(chapter, stubbed_runs):
    proc, data = stubbed_runs[chapter]
    output = proc.stdout + proc.stderr
    workspace = stubbed_runs["base"] / f"ch{chapter}"
    imported = data.get("numpy_impl")  # the report names the package conftest imported
    assert imported and Path(imported) == (workspace / "numpy_impl").resolve(), output[-3000:]
    assert proc.returncode == 1, output[-3000:]
    assert "NotImplementedError" in output
    failed = [t for t in data["tests"] if t["outcome"] == "failed"]
    assert len(failed) == 1  # -x
    assert f"ch{chapter}: " in failed[0]["message"], failed[0]["message"]


# -- the workspace's life --------------------------------------------------------------------
def write_region(ws: Workspace, f: str, key, lines: list[str]) -> None:
    path = ws.package / f
    text = path.read_text()
    regions = parse_regions(text, f, names=False)
    indent = next(r.indent for r in regions if r.key == key)
    path.write_text(replace_bodies(text, regions, {key: [f"{indent}{x}\n" for x in lines]}))


def region_body(ws: Workspace, f: str, key) -> str:
    regions = parse_regions((ws.package / f).read_text(), f, names=False)
    return "".join(next(r for r in regions if r.key == key).body)


def test_start_a_second_chapter_keeps_the_learners_code(reference, tmp_path):
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "03")
    write_region(ws, "attention.py", ("03", 0), ["q_scaled = q * scale  # mine", "scores = 0"])
    mine = region_body(ws, "attention.py", ("03", 0))
    add_stubs(reference, ws, "04")  # the same file, other regions
    assert region_body(ws, "attention.py", ("03", 0)) == mine
    assert "NotImplementedError" in region_body(ws, "attention.py", ("03", 1))
    assert "NotImplementedError" in region_body(ws, "attention.py", ("04", 0))
    assert ws.started() == {"03", "04"}
    # starting a started chapter again changes nothing, edited or not
    before = (ws.package / "attention.py").read_text()
    with pytest.raises(UserError, match=r"your code is in attention.py: softmax"):
        add_stubs(reference, ws, "03")
    assert [w.action for w in add_stubs(reference, ws, "04")] == ["unchanged"]
    assert (ws.package / "attention.py").read_text() == before
    # --force and reset put the stub back
    add_stubs(reference, ws, "03", force=True)
    assert "# mine" not in (ws.package / "attention.py").read_text()
    assert "NotImplementedError" in region_body(ws, "attention.py", ("04", 0))


def test_a_missing_file_is_regenerated_a_damaged_fence_is_reported(reference, tmp_path):
    """A workspace file that is gone is generated again; one with a damaged fence is
    never rebuilt around the learner's code, ``force`` or not: the fence is named,
    and nothing in the workspace changes (no other chapter's code is lost)."""
    ws = Workspace(tmp_path / "ws")
    for chapter in ("03", "04"):
        add_stubs(reference, ws, chapter)
    (ws.package / "attention.py").unlink()
    assert [w.action for w in add_stubs(reference, ws, "03")] == ["created"]
    assert (ws.package / "attention.py").read_text() == reference.render(
        "attention.py", {"03", "04"}
    )
    write_region(ws, "attention.py", ("04", 1), ["return 'mine'"])  # the learner's ch04 code
    text = (ws.package / "attention.py").read_text()
    begin = text.index("    ### BEGIN SOLUTION ch03\n")  # the first ch03 region
    end = text.index("    ### END SOLUTION\n", begin)
    line = text[:begin].count("\n") + 1  # of the BEGIN whose END is lost
    no_end = text[:end] + text[end:].replace("    ### END SOLUTION\n", "", 1)
    no_fences = no_end[:begin] + no_end[begin:].replace("    ### BEGIN SOLUTION ch03\n", "", 1)
    state = ws.state_file.read_text()
    for damaged, chapters, says in (
        (no_end, ("03", "04"), "BEGIN SOLUTION inside the region of line"),  # now nested
        (no_fences, ("03",), "the fences of chapter 03's softmax are missing"),
    ):
        (ws.package / "attention.py").write_text(damaged)
        for force in (False, True):
            for chapter in chapters:  # start/reset of a chapter whose fences are damaged
                with pytest.raises(UserError, match="damaged fences, nothing changed") as info:
                    add_stubs(reference, ws, chapter, force=force)
                assert says in str(info.value) and "attention.py" in str(info.value)
                assert (ws.package / "attention.py").read_text() == damaged  # untouched
                assert ws.state_file.read_text() == state
    # ch04's fences are whole: resetting ch04 touches its regions only, and the
    # unfenced ch03 code around them stays as the learner left it
    add_stubs(reference, ws, "04", force=True)
    after = (ws.package / "attention.py").read_text()
    assert "return 'mine'" not in after
    assert (
        after[: after.index("### BEGIN SOLUTION ch04")]
        == no_fences[: no_fences.index("### BEGIN SOLUTION ch04")]
    )
    (ws.package / "attention.py").write_text(no_end)
    with pytest.raises(
        UserError, match=f"attention.py:[0-9]+: BEGIN SOLUTION inside the region of line {line}\\."
    ):
        add_stubs(reference, ws, "03", force=True)
    # the learner repairs the fence: reset works again, ch04's code kept
    (ws.package / "attention.py").write_text(text)
    assert [w.action for w in add_stubs(reference, ws, "03", force=True)] == ["unchanged"]
    assert "return 'mine'" in region_body(ws, "attention.py", ("04", 1))


def test_a_damaged_progress_file_is_reported_not_replaced(reference, tmp_path):
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "03")
    for damaged in ('{"chapters": {"03": ', "[1, 2]"):
        ws.state_file.write_text(damaged)
        with pytest.raises(UserError, match="progress.json"):
            add_stubs(reference, ws, "04")
        assert ws.state_file.read_text() == damaged


def cli(*argv: str) -> argparse.Namespace:
    from labs.__main__ import build_parser

    return build_parser().parse_args(list(argv))


def test_commands_print_what_they_did_and_refuse_bad_input(tmp_path, capsys):
    ws = str(tmp_path / "ws")
    again = f"no workspace yet.*start NN --workspace {ws}"  # the commands keep --workspace
    for argv, match in [
        (("status", "--workspace", ws), again),
        (("check", "03", "--workspace", ws), again),
        (("reset", "03", "--workspace", ws), again),
        (("start", "99", "--workspace", ws), "unknown chapter '99'"),
    ]:
        with pytest.raises(UserError, match=match):  # a bad chapter: while parsing
            args = cli(*argv)
            args.func(args)
    assert [parse_chapter(c) for c in ("3", "03", "ch03", "CH3")] == ["03"] * 4

    args = cli("start", "3", "--workspace", ws)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert (
        "numpy_impl/attention.py: softmax, scaled_dot_product_attention, "
        "scaled_dot_product_attention_backward" in out
    )
    assert f"then run: {labs_command('check', '03')}" in out
    args = cli("check", "05", "--workspace", ws)
    with pytest.raises(UserError, match=f"chapter 05 is not started.*start 05 --workspace {ws}"):
        args.func(args)

    state = Workspace(Path(ws)).load_state()
    last = {"time": "2026-01-01T10:00:00", "passed": True, "tests": 10, "tests_passing": 10}
    state["chapters"]["05"] = {"started": "2026-01-01T09:00:00", "last_check": last}
    Workspace(Path(ws)).save_state(state)
    args = cli("status", "--workspace", ws)
    assert args.func(args) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert len({line.index("not started") for line in lines.values() if "not started" in line}) == 1
    assert lines["03"].index("in progress") == lines["01"].index("not started")  # aligned
    assert "not started" in lines["01"]
    assert "in progress" in lines["03"] and "not checked yet" in lines["03"]
    assert "done" in lines["05"] and "10 of 10 tests pass" in lines["05"]

    args = cli("reset", "ch03", "--workspace", ws)
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "reset chapter 03" in out and f"next: {labs_command('check', '03')} --workspace" in out


def test_a_workspace_is_never_the_reference_package(tmp_path, monkeypatch):
    """The repository itself (its numpy_impl/ would take the stubs), or a directory in
    numpy_impl/ or torch_impl/, is refused before anything is written."""
    from labs.learner import exercises

    def must_not_write(*args, **kwargs):  # a regression must not stub the reference
        raise AssertionError("add_stubs reached with the reference as the workspace")

    monkeypatch.setattr(exercises, "add_stubs", must_not_write)
    repo = exercises_fences.REPO
    before = (repo / "numpy_impl" / "attention.py").read_bytes()
    for where, match in [
        (repo, "would put the stubs into the reference package"),
        (repo / "numpy_impl", "lies inside the reference package"),
        (repo / "numpy_impl" / "deeper", "lies inside the reference package"),
        (repo / "torch_impl", "lies inside the reference package"),
        (repo / "numpy_impl" / "..", "would put the stubs into the reference package"),
    ]:
        for command in ("start", "reset"):
            args = cli(command, "03", "--workspace", str(where))
            with pytest.raises(UserError, match=f"^--workspace: .*{match}"):
                args.func(args)
    monkeypatch.setenv(exercises_workspace.WORKSPACE_ENV, str(repo))
    with pytest.raises(UserError, match=f"^\\${exercises_workspace.WORKSPACE_ENV}: "):
        exercises_workspace.workspace_dir(None)
    assert (repo / "numpy_impl" / "attention.py").read_bytes() == before
    assert not (repo / "numpy_impl" / "deeper").exists()
    assert not (repo / "numpy_impl" / "numpy_impl").exists()
    assert exercises_workspace.workspace_dir(str(tmp_path / "ws")) == (tmp_path / "ws").resolve()


def test_check_runs_the_workspace_and_explains_failures(reference, tmp_path, capsys):
    """Chapter 05 with an assigning backward: the accumulate test fails with its hint, the
    others pass with their errors listed; then the fix passes, and status says done."""
    ws = Workspace(tmp_path / "ws")
    add_stubs(reference, ws, "05")
    forward, backward = (r for r in reference.regions["positional.py"] if r.chapter == "05")
    path = ws.package / "positional.py"
    bodies = {
        forward.key: forward.body,
        backward.key: [
            f"{backward.indent}self.weight.grad[: dout.shape[0]] = dout  # = instead of +=\n"
        ],
    }
    path.write_text(replace_bodies(path.read_text(), parse_regions(path.read_text(), "p"), bodies))

    assert exercises_check.run_check(ws, "05") == 1
    out = capsys.readouterr().out
    assert "FAIL  test_components.py::test_backward_accumulates[LearnedPositionalEmbedding]" in out
    assert "hint: gradients assigned instead of accumulated (use +=)" in out
    # one line per passing group of tests; the failure in full; the next command as invoked
    assert "PASS  test_components.py::test_forward_backward_parity  (" in out
    assert "test_forward_backward_parity[Learned" not in out
    assert f"then: {labs_command('check', '05')}" in out
    wrong = path.read_text().splitlines().index(bodies[backward.key][0].rstrip()) + 1
    assert f"next: edit {exercises_check._show(path)}:{wrong}, then" in out  # the failing region
    report = json.loads((ws.root / exercises_check.REPORTS_DIR / "ch05.json").read_text())
    assert Path(report["numpy_impl"]) == ws.package.resolve()
    assert ws.load_state()["chapters"]["05"]["last_check"]["passed"] is False

    path.write_text(replace_bodies(path.read_text(), parse_regions(path.read_text(), "p"),
                                   {backward.key: backward.body}))  # fmt: skip
    assert exercises_check.run_check(ws, "05", verbose=True) == 0
    out = capsys.readouterr().out
    assert "Done!" in out and f"next: {labs_command('start', '06')}" in out
    assert "PASS  test_components.py::test_forward_backward_parity[Learned" in out  # -v: each
    assert "max abs" in out and "output of LearnedPositionalEmbedding" in out
    assert ws.load_state()["chapters"]["05"]["last_check"]["passed"] is True


def test_check_hints_for_failed_tests():
    accumulate = {
        "nodeid": "parity_tests/test_components.py::test_backward_accumulates[Linear]",
        "outcome": "failed",
        "exception": "AssertionError",
        "message": "grad of weight (Linear, minus prior .grad): ...",
        "comparisons": [{"passed": False, "hint": None}],
    }
    parity = {
        "nodeid": "parity_tests/test_components.py::test_forward_backward_parity[Linear-float64]",
        "outcome": "passed",
    }
    hint = failure_hint(accumulate, "02", [accumulate, parity])
    assert hint.startswith("gradients assigned instead of accumulated (use +=)")
    broken = {**parity, "outcome": "failed"}  # then its comparison lines say it all
    assert failure_hint(accumulate, "02", [accumulate, broken]) is None
    stub = {
        "nodeid": "x",
        "outcome": "failed",
        "exception": "NotImplementedError",
        "message": "ch03: scaled_dot_product_attention \u2014 the scores; see labs/...",
    }
    assert failure_hint(stub, "03") == "not implemented yet: scaled_dot_product_attention"
    assert "(finish chapter 03 first)" in failure_hint(stub, "07")
    shapes = {
        "nodeid": "x",
        "outcome": "failed",
        "exception": "ValueError",
        "message": "operands could not be broadcast together with shapes (2,3) (3,2)",
        "where": "workspace/numpy_impl/linear.py:50 in forward",
    }
    assert failure_hint(shapes, "02").startswith(
        "shape mismatch inside your code, workspace/numpy_impl/linear.py:50 in forward: operands"
    )


def test_check_output_reads_well(capsys):
    """Cases failing alike: one FAIL line, balanced names, the hint first and once (hints
    that differ only in numbers are alike); raw assertion text is no hint; a finite-
    difference failure whose forward fails says so; no unexplained status words."""

    def case(params, factor, **extra):
        hint = f"off by a constant factor: your result is {factor} x the reference"
        comparison = {
            "name": f"output of {params}",
            "passed": False,
            "hint": hint,
            "actual_shape": [2],
            "expected_shape": [2],
            "max_abs": 1.0,
            "rel": 0.5,
        }
        return {"nodeid": f"parity_tests/test_components.py::test_forward_backward_parity"
                f"[{params}]", "outcome": "failed", "exception": "AssertionError",
                "message": "output of ...", "comparisons": [comparison], **extra}  # fmt: skip

    tests = [
        case("Block[sdpa]-float64", 1.41421),
        case("Block[explicit]-float64", 1.73205),
        {"nodeid": "parity_tests/test_components.py::test_finite_differences[Block[causal]]",
         "outcome": "failed", "exception": "AssertionError", "message": "dx ...",
         "comparisons": [{**case("x", 2)["comparisons"][0], "name": "dx of Block"}]},
        {"nodeid": "parity_tests/test_seq2seq.py::test_greedy[torch]", "outcome": "failed",
         "exception": "AssertionError", "message": "\nArrays are not equal\n\nMismatched: 1"},
        {"nodeid": "parity_tests/test_seq2seq.py::test_greedy[numpy]", "outcome": "passed"},
    ]  # fmt: skip
    exercises_check._print_tests(tests, "07", quiet=False, verbose=False)
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(line.count("[") == line.count("]") for line in lines), out
    first = lines.index(
        "FAIL  test_components.py::test_forward_backward_parity  "
        "(all 2 cases: Block[sdpa]-float64, Block[explicit]-float64)"
    )
    assert lines[first + 1].startswith("      hint: off by a constant factor: your result is 1.41")
    assert out.count("off by a constant factor") == 1  # near-identical hints: once
    assert "hint: the forward of Block is wrong" in out  # not the backward's fault
    assert "hint: Arrays" not in out and "failed: Arrays are not equal / Mismatched: 1" in out
    words = {line.split()[0] for line in lines if line.strip()}
    assert words <= {"PASS", "FAIL", "SKIP", "hint:", "failed:"}, words
    explained = (exercises_fences.REPO / "docs" / "exercises.md").read_text("utf-8")
    assert all(f"| `{w}` |" in explained for w in words), words  # each status word explained
    assert "hint: hint" not in out
    stub = {"nodeid": "x", "exception": "AssertionError", "message": "removed differ; hint: why"}
    assert failure_hint(stub, "10") == "why"
    wrong = {"name": "z", "where": "ws/numpy_impl/s.py:51", "kind": "a constant factor"}
    said = exercises_check._main_hints({**stub, "divergence": wrong}, "10", [])
    assert said == ["why", "first wrong value: `z` at ws/numpy_impl/s.py:51, a constant factor"]
    raw = {**stub, "message": "assert '5 5' == '55'", "divergence": wrong}
    assert exercises_check._main_hints(raw, "01", []) == said[1:]  # no raw assertion text


# -- the hints of assert_close ---------------------------------------------------------------
@pytest.fixture
def private_reached(monkeypatch):
    """These comparisons fail on purpose: keep them out of the session's tolerance summary."""
    monkeypatch.setattr(tolerances, "REACHED", defaultdict(tolerances.REACHED.default_factory))


def hint_of(actual, expected, **kwargs) -> str:
    with pytest.raises(AssertionError) as info:
        assert_close("x", actual, expected, np.float64, **kwargs)
    message = str(info.value)
    return message.split("hint: ", 1)[1] if "hint: " in message else ""


@pytest.mark.usefixtures("private_reached")
def test_assert_close_recognises_the_usual_mistakes():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(2, 3, 4))
    assert hint_of(e.transpose(0, 2, 1), e).startswith("missing transpose")
    assert "axes 1 and 2 swapped" in hint_of(e.transpose(0, 2, 1), e)
    square = rng.normal(size=(3, 3))
    assert hint_of(square.T, square).startswith("missing transpose")
    assert hint_of(e[..., :3], e) == "shape mismatch: yours (2, 3, 3), the reference's (2, 3, 4)"
    assert hint_of(-e, e).startswith("sign flipped")
    assert "0.5 x the reference" in hint_of(0.5 * e, e)
    assert "all zeros" in hint_of(np.zeros_like(e), e)
    bad = e.copy()
    bad[0, 0, 0] = np.nan
    assert hint_of(bad, e).startswith("NaN or inf")
    other = rng.normal(size=e.shape)
    assert hint_of(other, e, hints={"the bug": lambda: other}) == "the bug"
    assert hint_of(other, e) == ""  # nothing recognised, nothing claimed
    assert diagnose(e, e + 1.0, FLOAT64, FLOAT64.atol) is None


@pytest.mark.usefixtures("private_reached")
def test_softmax_over_the_wrong_axis_is_recognised():
    from parity_tests.hints import sdpa_hints, sdpa_variant

    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 1, 3, 4)) for _ in range(3))
    right = sdpa_variant(q, k, v, None, True, None)
    wrong = sdpa_variant(q, k, v, None, True, None, axis=-2)
    hint = hint_of(wrong, right, hints=sdpa_hints(q, k, v, None, True, None))
    assert hint.startswith("wrong softmax axis")


def test_the_env_vars_are_the_same_on_both_sides():
    assert exercises_workspace.WORKSPACE_ENV == conftest.WORKSPACE_ENV
    assert exercises_check.REPORT_ENV == conftest.REPORT_ENV
    assert {f"ch{c}" for c in CHAPTERS} == set(conftest.CHAPTERS)


@pytest.mark.usefixtures("private_reached")
def test_tolerance_summaries_of_xdist_workers_merge_worst_of_both():
    tolerances._record("a", "autograd", "float64", 1e-13, 1e-12, 0.5)
    other = [
        ["autograd", "float64", {"max_abs": 2e-13, "max_normwise_rel": 1e-14,
                                 "worst_fraction_of_tol": 0.25, "worst_check": "b", "checks": 3}],
        ["training", "float64", {"max_abs": 1e-15, "max_normwise_rel": 1e-15,
                                 "worst_fraction_of_tol": 0.1, "worst_check": "c", "checks": 2}],
    ]  # fmt: skip
    tolerances.merge_reached(other)
    merged = {(k, d): r for k, d, r in tolerances.export_reached()}
    assert merged[("autograd", "float64")] == {"max_abs": 2e-13, "max_normwise_rel": 1e-12,
        "worst_fraction_of_tol": 0.5, "worst_check": "a", "checks": 4}  # fmt: skip
    assert merged[("training", "float64")]["checks"] == 2
