"""Exercises: write ``numpy_impl`` back yourself, one chapter at a time.

The reference solutions in ``numpy_impl/`` carry fences, nbgrader style::

        ### BEGIN SOLUTION ch03
        ### TODO: what to write (these lines stay in the learner's copy)
        ...the reference code...
        ### END SOLUTION

* ``start NN`` makes ``workspace/numpy_impl/``: a copy of the reference in which
  chapter NN's regions are stubs that raise ``NotImplementedError``; every other
  chapter stays solved. On an existing workspace it adds chapter NN's stubs and
  touches nothing else (it refuses to replace code you wrote, unless ``--force``).
* ``check NN`` runs ``pytest -m chNN`` against the workspace
  (``TWINFORMER_WORKSPACE``, honoured by ``parity_tests/conftest.py``) and prints
  each test, each compared tensor's errors, and a hint for the usual mistakes.
* ``status`` lists the chapters: not started, in progress, done (at the last check).
* ``reset NN`` puts chapter NN's stubs back.

The learner's copy is generated from the reference every time, never kept by
hand. docs/exercises.md has the whole story.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from .. import UserError

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "numpy_impl"
PACKAGE = "numpy_impl"
#: Both read by parity_tests/conftest.py too: test this workspace, write this report.
WORKSPACE_ENV = "TWINFORMER_WORKSPACE"
REPORT_ENV = "TWINFORMER_REPORT"
STATE_FILE = "progress.json"  # in the workspace: started chapters and their last check
REPORTS_DIR = ".reports"  # in the workspace: the JSON report of each chapter's last check

#: chapter -> (title, its folder under labs/ when no ``labs/NN_*`` folder exists yet)
CHAPTERS: dict[str, tuple[str, str]] = {
    "01": ("tokens", "01_tokens"),
    "02": ("embeddings and linear maps", "02_embeddings"),
    "03": ("scaled dot-product attention", "03_attention"),
    "04": ("multi-head attention", "04_multihead"),
    "05": ("positional embeddings", "05_positional"),
    "06": ("feed-forward and GELU", "06_ffn_gelu"),
    "07": ("LayerNorm and residuals", "07_layernorm_residual"),
    "08": ("the GPT", "08_gpt"),
    "09": ("training", "09_training"),
    "10": ("sampling", "10_sampling"),
    "11": ("tokenization: byte-level BPE", "11_tokenization"),
    "12": ("efficient attention and the KV cache", "12_efficient_attention"),
    "13": ("positional encodings II: sinusoidal and RoPE", "13_positional_rope"),
    "14": ("RMSNorm, post-norm, SwiGLU", "14_norms_ffn"),
    "15": ("encoder models and classification", "15_encoder_classifier"),
    "16": ("encoder-decoder and cross-attention", "16_encoder_decoder"),
}


def parse_chapter(text: str) -> str:
    """``"3"``, ``"03"`` or ``"ch03"`` -> ``"03"``.

    Raises:
        UserError: not a chapter of the course.
    """
    digits = str(text).strip().lower().removeprefix("ch")
    if digits.isdigit() and f"{int(digits):02d}" in CHAPTERS:
        return f"{int(digits):02d}"
    raise UserError(f"chapter: unknown chapter {text!r}; the chapters are {', '.join(CHAPTERS)}")


def chapter_folder(chapter: str, labs: Path = REPO / "labs") -> str:
    """``labs/NN_topic``: the chapter's folder if it exists, else its planned name."""
    found = sorted(p.name for p in labs.glob(f"{chapter}_*") if p.is_dir())
    return f"labs/{found[0] if found else CHAPTERS[chapter][1]}"


# -- fences ------------------------------------------------------------------------------
_BEGIN = re.compile(r"^(?P<indent>[ \t]*)### BEGIN SOLUTION(?: ch(?P<chapter>\d\d))?[ \t]*$")
_END = re.compile(r"^(?P<indent>[ \t]*)### END SOLUTION[ \t]*$")
_KEPT = re.compile(r"^[ \t]*###(?P<text>.*)$")  # comment lines right after BEGIN: the task


class FenceError(UserError):
    """A ``### BEGIN SOLUTION`` / ``### END SOLUTION`` pair is malformed."""


@dataclass(frozen=True)
class Region:
    """One fenced solution region of a file.

    Attributes:
        file: the file, relative to the package (``"attention.py"``).
        chapter: ``"03"``.
        index: this is the chapter's ``index``-th region in the file (from 0); with
            ``chapter`` it names the region in the reference and in a workspace.
        function: the function or method around it (``"CausalSelfAttention.forward"``).
        indent: the fences' indentation.
        begin, end: line numbers (from 0) of the two fence lines.
        kept: the ``###`` lines right after BEGIN (the task), verbatim.
        body: every line between the fences, verbatim (``kept`` included).
    """

    file: str
    chapter: str
    index: int
    function: str
    indent: str
    begin: int
    end: int
    kept: tuple[str, ...]
    body: tuple[str, ...]

    @property
    def key(self) -> tuple[str, int]:
        return (self.chapter, self.index)

    @property
    def task(self) -> str:
        """The TODO text, on one line."""
        parts = [_KEPT.match(line)["text"].strip() for line in self.kept]
        return " ".join(p.removeprefix("TODO:").strip() for p in parts if p)


def parse_regions(text: str, file: str, names: bool = True) -> list[Region]:
    """Every fenced region of ``text`` (the source of ``file``), in order.

    Args:
        names: find each region's function with ``ast`` (needs valid Python).

    Raises:
        FenceError: a fence without its partner, nested or mis-indented fences, or a
            BEGIN without a known chapter.
    """
    lines = text.splitlines(keepends=True)
    functions = _function_spans(text) if names else []
    regions: list[Region] = []
    seen: Counter[str] = Counter()
    opened: tuple[int, re.Match] | None = None
    for i, line in enumerate(lines):
        stripped = line.rstrip("\r\n")
        where = f"{file}:{i + 1}"
        if begin := _BEGIN.match(stripped):
            if opened is not None:
                raise FenceError(
                    f"{where}: BEGIN SOLUTION inside the region of line {opened[0] + 1}"
                )
            if begin["chapter"] not in CHAPTERS:
                raise FenceError(f"{where}: write the chapter, e.g. '### BEGIN SOLUTION ch03'")
            opened = (i, begin)
        elif end := _END.match(stripped):
            if opened is None:
                raise FenceError(f"{where}: END SOLUTION without a BEGIN SOLUTION")
            b, begin = opened
            if end["indent"] != begin["indent"]:
                raise FenceError(
                    f"{where}: END SOLUTION is not indented like its BEGIN (line {b + 1})"
                )
            body = tuple(lines[b + 1 : i])
            kept: list[str] = []
            for body_line in body:
                if not _KEPT.match(body_line.rstrip("\r\n")):
                    break
                kept.append(body_line)
            chapter = begin["chapter"]
            regions.append(
                Region(
                    file=file,
                    chapter=chapter,
                    index=seen[chapter],
                    function=_innermost(functions, b + 1),
                    indent=begin["indent"],
                    begin=b,
                    end=i,
                    kept=tuple(kept),
                    body=body,
                )
            )
            seen[chapter] += 1
            opened = None
        elif "### BEGIN SOLUTION" in stripped or "### END SOLUTION" in stripped:
            raise FenceError(f"{where}: a fence must be alone on its line: {stripped.strip()!r}")
    if opened is not None:
        raise FenceError(f"{file}:{opened[0] + 1}: BEGIN SOLUTION without an END SOLUTION")
    return regions


def _function_spans(text: str) -> list[tuple[int, int, str]]:
    """``(first line, last line, qualified name)`` of every function, 1-based."""
    spans: list[tuple[int, int, str]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    spans.append((child.lineno, child.end_lineno or child.lineno, name))
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(ast.parse(text), "")
    return spans


def _innermost(spans: list[tuple[int, int, str]], lineno: int) -> str:
    inside = [s for s in spans if s[0] <= lineno <= s[1]]
    return max(inside, key=lambda s: s[0])[2] if inside else "<module>"


def _normalised(lines: Iterable[str]) -> tuple[str, ...]:
    """A region's lines without trailing spaces or blank lines: what 'edited' compares."""
    return tuple(line.rstrip() for line in lines if line.strip())


def stub_body(region: Region, folder: str) -> tuple[str, ...]:
    """The learner's version of ``region``: its TODO lines and a ``raise``."""
    newline = "\r\n" if region.body and region.body[0].endswith("\r\n") else "\n"
    message = f"ch{region.chapter}: {region.function}"
    if region.task:
        message += f" \u2014 {region.task}"
    message += f"; see {folder}/README.md"
    literal = json.dumps(message, ensure_ascii=False)  # a JSON string is a Python string
    return (*region.kept, f"{region.indent}raise NotImplementedError({literal}){newline}")


def replace_bodies(text: str, regions: Iterable[Region], bodies: dict) -> str:
    """``text`` with the body of each region whose key is in ``bodies`` replaced."""
    lines = text.splitlines(keepends=True)
    for r in sorted(regions, key=lambda r: r.begin, reverse=True):
        if r.key in bodies:
            lines[r.begin + 1 : r.end] = list(bodies[r.key])
    return "".join(lines)


class Reference:
    """The solved package (``numpy_impl/``), its regions, and the stubs made from it."""

    def __init__(self, root: Path = REFERENCE, labs: Path = REPO / "labs"):
        self.root = root
        self.files = sorted(
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
        self.texts = {
            f: (root / f).read_text(encoding="utf-8") for f in self.files if f.endswith(".py")
        }
        self.regions = {f: parse_regions(t, f) for f, t in self.texts.items()}
        self.folders = {c: chapter_folder(c, labs) for c in CHAPTERS}

    def chapter_regions(self, chapter: str) -> list[Region]:
        return [r for f in self.files for r in self.regions.get(f, []) if r.chapter == chapter]

    def stub(self, region: Region) -> tuple[str, ...]:
        return stub_body(region, self.folders[region.chapter])

    def render(self, file: str, stubbed: Iterable[str], keep: dict | None = None) -> str:
        """The reference ``file`` with the regions of the ``stubbed`` chapters stubbed,
        except those whose key is in ``keep`` (which get that body instead)."""
        stubbed, keep = set(stubbed), keep or {}
        bodies = {
            r.key: keep.get(r.key, self.stub(r))
            for r in self.regions.get(file, [])
            if r.chapter in stubbed
        }
        return replace_bodies(self.texts[file], self.regions.get(file, []), bodies)


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
                f"no workspace yet at {_show(self.root)}: run `python -m labs start NN` first"
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
            f"`python -m labs start {chapter} --force` (or `reset {chapter}`) replaces it "
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


# -- check: run the chapter's tests, explain the failures ---------------------------------
_OK = {"passed", "skipped", "xfailed"}


def run_check(ws: Workspace, chapter: str, keyword: str | None = None, quiet: bool = False) -> int:
    """``pytest -m chNN`` against the workspace, then the summary; returns 0 iff all pass."""
    title = CHAPTERS[chapter][0]
    report = ws.root / REPORTS_DIR / f"ch{chapter}.json"
    report.unlink(missing_ok=True)
    env = {
        **os.environ,
        WORKSPACE_ENV: str(ws.root),
        REPORT_ENV: str(report),
        "HYPOTHESIS_PROFILE": "default",
    }
    import importlib.util

    for needed in ("pytest", "hypothesis"):
        if importlib.util.find_spec(needed) is None:
            raise UserError(
                f"check runs the parity tests, which need {needed}: install the test tools "
                'with  .venv/bin/pip install -e ".[dev]"  (the README\'s second command does)'
            )
    cmd = [
        sys.executable, "-m", "pytest", "parity_tests", "-m", f"ch{chapter}",
        "-q", "--no-header", "-p", "no:cacheprovider", "-o", "addopts=", "--tb=short",
    ]  # fmt: skip
    if keyword:
        cmd += ["-k", keyword]
    print(f"chapter {chapter} ({title}): pytest -m ch{chapter} on {_show(ws.package)} ...")
    sys.stdout.flush()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        print((proc.stdout + proc.stderr)[-4000:])
        raise UserError(
            f"pytest stopped before it wrote its report (exit {proc.returncode})"
        ) from None

    tests = data.get("tests", [])
    for t in tests:  # "numpy_impl/x.py:12 in f" -> "workspace/numpy_impl/x.py:12 in f"
        if t.get("where"):
            t["where"] = f"{_show(ws.root)}/{t['where']}"
    problems = _print_problems(ws, data, proc)
    if not problems:
        skipped = Counter()  # one line per reason (a CPU skips ~100 GPU tests for one reason)
        for t in tests:
            if t["outcome"] == "skipped":
                skipped[t.get("message") or "skipped"] += 1
            else:
                _print_test(t, chapter, quiet, tests)
        for reason, n in skipped.items():
            print(f"SKIP  {n} test{'s' * (n != 1)}  ({reason})")
    n_run, n_ok, _ = _counts(tests)
    passed = not problems and proc.returncode == 0 and n_run > 0 and n_ok == n_run
    _print_summary(ws, chapter, tests, elapsed, passed, problems)
    if keyword is None:  # a partial run (-k) says nothing about the chapter
        state = ws.load_state()
        entry = state["chapters"].setdefault(chapter, {"started": _now()})
        entry["last_check"] = {
            "time": _now(),
            "passed": passed,
            "tests": n_run,
            "tests_passing": n_ok,
        }
        ws.save_state(state)
    return 0 if passed else 1


def _counts(tests: list[dict]) -> tuple[int, int, int]:
    """(tests run, of which passed, skipped): a skipped test (no GPU) does not count."""
    n_skip = sum(t["outcome"] == "skipped" for t in tests)
    n_ok = sum(t["outcome"] in _OK for t in tests) - n_skip
    return len(tests) - n_skip, n_ok, n_skip


def _print_problems(ws: Workspace, data: dict, proc: subprocess.CompletedProcess) -> list[str]:
    """Import and collection errors: the tests never ran."""
    problems = []
    if data.get("import_error"):
        e = data["import_error"]
        where = f" at {_show(ws.root)}/{e['where']}" if e.get("where") else ""
        print(f"\nyour numpy_impl does not import: {e['exception']}{where}: {e['message']}")
        print(_indent(e.get("traceback", "").rstrip(), "    "))
        problems.append("your code does not import")
    for c in data.get("collect_errors", []):
        print(f"\ncould not collect {c['nodeid']}:\n{_indent(c['message'].rstrip(), '    ')}")
        problems.append("a test module does not import")
    if not problems and proc.returncode not in (0, 1):
        print((proc.stdout + proc.stderr)[-3000:])
        problems.append(f"pytest exited with status {proc.returncode}")
    return problems


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _short_id(nodeid: str) -> str:
    return nodeid.removeprefix("parity_tests/")


def _fmt_err(x) -> str:
    return "   -    " if x is None else f"{x:.1e}".rjust(8)


def _comparison_line(c: dict) -> str:
    status = "ok  " if c["passed"] else "FAIL"
    shape = tuple(c["actual_shape"])
    if c["actual_shape"] != c["expected_shape"]:
        shape_text = f"yours {shape} vs reference {tuple(c['expected_shape'])}"
    else:
        shape_text = str(shape)
    return (
        f"      {status} max abs {_fmt_err(c['max_abs'])}  rel {_fmt_err(c['rel'])}  "
        f"{c['name']}  {shape_text}"
    )


def _print_test(t: dict, chapter: str, quiet: bool, tests: list[dict]) -> None:
    label = {"passed": "PASS", "xfailed": "PASS"}.get(t["outcome"], "FAIL")
    print(f"{label}  {_short_id(t['nodeid'])}")
    if label == "FAIL":
        hint = failure_hint(t, chapter, tests)
        if t.get("exception") and t["exception"] != "AssertionError":
            where = f" at {t['where']}" if t.get("where") else ""
            print(f"      {t['exception']}{where}")
        if hint:
            print(f"      hint: {hint}")
        if not (hint or "").startswith("not implemented yet"):  # else any example fails
            for line in _example_lines(t.get("notes", [])):
                print(f"      {line}")
    elif quiet:
        return
    for c in t.get("comparisons", []):
        print(_comparison_line(c))
        if c.get("hint") and not c["passed"]:
            print(f"           hint: {c['hint']}")


def _example_lines(notes: list[str]) -> list[str]:
    """The failing Hypothesis example, shortly: its draws (shapes, config) and seed."""
    lines = []
    for note in notes:
        text = " ".join(note.split())
        if text.startswith("Draw ") or "distinct failures" in text:
            lines.append(f"example: {text}"[:240])
        elif text.startswith("Falsifying example"):
            seeds = re.findall(r"\b(\w+=SeededRng\(\w+\))", text)
            if seeds:
                lines.append(f"example: {', '.join(seeds)}")
    return lines[:5]


_SHAPE_WORDS = ("shape", "broadcast", "mismatch", "size", "dimension", "axis")


def failure_hint(t: dict, chapter: str, tests: list[dict] = ()) -> str | None:
    """One line on what probably went wrong in the failed test ``t``, one of ``tests``."""
    exc, message = t.get("exception"), (t.get("message") or "").strip()
    first = message.splitlines()[0] if message else ""
    if exc == "NotImplementedError" or "NotImplementedError" in first:
        m = re.search(r"\bch(\d\d): (\S+)", first)
        if m and m[1] != chapter:
            return (
                f"not implemented yet: chapter {m[1]}'s {m[2]}, which these tests use "
                f"(finish chapter {m[1]} first)"
            )
        return f"not implemented yet: {m[2] if m else first}"
    failed = [c for c in t.get("comparisons", []) if not c["passed"]]
    if failed and failed[-1].get("hint"):
        return None  # printed under the comparison
    if exc == "AssertionError" and "test_backward_accumulates[" in t["nodeid"]:
        # right gradients from zero (the parity tests pass), wrong on top of old ones
        component = t["nodeid"].split("[", 1)[1].removesuffix("]")
        parity = [u for u in tests if f"test_forward_backward_parity[{component}-" in u["nodeid"]]
        if parity and all(u["outcome"] == "passed" for u in parity):
            return (
                "gradients assigned instead of accumulated (use +=): backward must ADD into "
                ".grad, whatever is there already"
            )
    if exc == "AssertionError":
        if failed:
            return None  # the comparison lines say it
        return first[:300] or None
    if exc and t.get("where"):
        kind = (
            "shape mismatch" if any(w in message.lower() for w in _SHAPE_WORDS) else f"{exc} raised"
        )
        return f"{kind} inside your code, {t['where']}: {first[:300]}"
    if exc:
        return f"{exc}: {first[:300]}"
    return None


def _print_summary(
    ws: Workspace, chapter: str, tests: list[dict], elapsed: float, passed: bool, problems
) -> None:
    n_run, n_ok, n_skip = _counts(tests)
    skipped = f", {n_skip} skipped" if n_skip else ""
    print()
    if problems:
        print(f"chapter {chapter}: the tests could not run: {'; '.join(problems)}")
    elif passed:
        print(f"chapter {chapter}: all {n_run} tests pass{skipped} ({elapsed:.1f} s). Done!")
    else:
        print(
            f"chapter {chapter}: {n_ok} of {n_run} tests pass, "
            f"{n_run - n_ok} fail{skipped} ({elapsed:.1f} s)"
        )
        todo = Counter(
            t["message"].splitlines()[0]
            for t in tests
            if t.get("exception") == "NotImplementedError" and t.get("message")
        )  # the stubs' messages: what to write, and where to read about it
        for message, n in todo.most_common():
            print(f"  to write ({n} tests): {message}")
        hints = Counter(
            h
            for t in tests
            if t["outcome"] not in _OK
            for h in [_main_hint(t, chapter, tests)]
            if h
        )
        for hint, n in hints.most_common(3):
            if not hint.startswith("not implemented yet"):
                print(f"  {n} x {hint}")
    files = sorted({r.file for r in Reference().chapter_regions(chapter)})
    where = ", ".join(_show(ws.package / f) for f in files)
    if passed:
        following = next((c for c in sorted(CHAPTERS) if c > chapter), None)
        if following is not None:
            print(f"next: python -m labs start {following}")
        else:
            print("that was the last chapter: python -m labs train --backend numpy")
    else:
        print(f"next: edit {where}, then: python -m labs check {chapter}")


def _main_hint(t: dict, chapter: str, tests: list[dict]) -> str | None:
    failed = [c for c in t.get("comparisons", []) if not c["passed"]]
    if failed and failed[-1].get("hint"):
        return failed[-1]["hint"]
    return failure_hint(t, chapter, tests)


# -- the commands ------------------------------------------------------------------------
@dataclass(frozen=True)
class Command:
    """A sub-command of ``python -m labs``: what ``labs/__main__.py`` registers."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    main: Callable[[argparse.Namespace], int]


def _workspace_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--workspace",
        metavar="DIR",
        help=f"the workspace (default: ${WORKSPACE_ENV}, else workspace/ in the repository)",
    )


def _chapter_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "chapter", help=f"chapter number, one of {', '.join(CHAPTERS)} (3, 03 and ch03 all work)"
    )


def _start_arguments(p: argparse.ArgumentParser) -> None:
    _chapter_argument(p)
    p.add_argument(
        "--force",
        action="store_true",
        help="replace code you already wrote in this chapter's regions with the stubs",
    )
    _workspace_option(p)


def _start(args: argparse.Namespace) -> int:
    chapter = parse_chapter(args.chapter)
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
    print(f"read {folder}/README.md, then run: python -m labs check {chapter}")
    return 0


def _check_arguments(p: argparse.ArgumentParser) -> None:
    _chapter_argument(p)
    p.add_argument("-k", dest="keyword", metavar="EXPR", help="only the tests pytest -k selects")
    p.add_argument(
        "-q", "--quiet", action="store_true", help="list passing tests without their tensors"
    )
    _workspace_option(p)


def _check(args: argparse.Namespace) -> int:
    chapter = parse_chapter(args.chapter)
    ws = Workspace(workspace_dir(args.workspace)).require()
    if chapter not in ws.started():
        raise UserError(
            f"chapter {chapter} is not started in {_show(ws.root)}: python -m labs start {chapter}"
        )
    return run_check(ws, chapter, keyword=args.keyword, quiet=args.quiet)


def _status(args: argparse.Namespace) -> int:
    ws = Workspace(workspace_dir(args.workspace)).require()
    chapters = ws.load_state()["chapters"]
    print(f"workspace: {_show(ws.root)}")
    for chapter, (title, _) in CHAPTERS.items():
        entry = chapters.get(chapter)
        if entry is None:
            status, detail = "not started", ""
        else:
            last = entry.get("last_check")
            if last is None:
                status, detail = "in progress", "not checked yet"
            else:
                status = "done" if last["passed"] else "in progress"
                detail = (
                    f"last check {last['time'].replace('T', ' ')}: "
                    f"{last['tests_passing']} of {last['tests']} tests pass"
                )
        print(f"  {chapter}  {title:<30} {status:<12} {detail}".rstrip())
    return 0


def _reset(args: argparse.Namespace) -> int:
    chapter = parse_chapter(args.chapter)
    ws = Workspace(workspace_dir(args.workspace)).require()
    written = add_stubs(Reference(), ws, chapter, force=True)
    print(f"reset chapter {chapter} ({CHAPTERS[chapter][0]}): the stubs are back in")
    _print_written(ws, written)
    print(f"next: python -m labs check {chapter}")
    return 0


def _reset_arguments(p: argparse.ArgumentParser) -> None:
    _chapter_argument(p)
    _workspace_option(p)


start = Command(_start_arguments, _start)
check = Command(_check_arguments, _check)
status = Command(_workspace_option, _status)
reset = Command(_reset_arguments, _reset)
