"""Every test the course's text names is a real test.

The chapter READMEs (their "Pitfalls, and the test that catches each" sections
above all), ``docs/*.md`` and ``README.md`` point the learner at tests by name:
``parity_tests/test_components.py::test_finite_differences[LayerNorm]``,
``test_backward_accumulates[LayerNorm]``, ``test_gpu.py``. Each reference must
resolve:

* a file ``test_*.py`` (with or without ``parity_tests/``) exists in ``parity_tests/``;
* ``file::test_name`` names a test function defined in that file;
* a bare ``test_name`` in backticks is a test function of some file;
* with an id in brackets, pytest collects that exact id (``[...]`` stands for
  any id and is not checked). An id alone in backticks right after a reference
  (`` `test_x[a]`, `[b]` and `[c]` ``) is an id of the same test.

The ids come from one ``pytest --collect-only`` of the files named (a subprocess).
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "parity_tests"
DOCS = [
    *sorted(ROOT.glob("labs/*/README.md")),
    *sorted(ROOT.glob("docs/*.md")),
    ROOT / "README.md",
]

FILE_REF = re.compile(r"(?<![\w/])(?:parity_tests/)?(test_\w+\.py)(?:::(test_\w+))?")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
BARE_TEST = re.compile(r"(test_\w+)(\[.*\])?")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
#: What may stand between a reference and an id that continues it: `a[x]`, `[y]` and `[z]`.
CONTINUES = re.compile(r"\s*(?:,|and|or|,\s*and|,\s*or)?\s*")


@dataclass(frozen=True)
class Reference:
    doc: str  # the Markdown file, relative to the repository
    line: int
    text: str  # as written
    file: str | None  # test_x.py, or None where only the function is named
    function: str | None
    test_id: str | None  # inside the brackets; None where none is given (or "[...]")


def bracket_end(text: str, start: int) -> int | None:
    """The index just past the ``]`` matching the ``[`` at ``start`` (ids nest brackets:
    ``test_finite_differences[scaled_dot_product_attention[none]]``)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "\n":
            return None
        depth += {"[": 1, "]": -1}.get(text[i], 0)
        if depth == 0:
            return i + 1
    return None


def id_or_none(brackets: str | None) -> str | None:
    """The id inside ``[...]``; None for none or an elided one (``[...]``, ``[...: T = 0]``)."""
    if not brackets or "..." in brackets:
        return None
    return brackets[1:-1]


def references(doc: Path) -> list[Reference]:
    text = doc.read_text(encoding="utf-8")
    name = doc.relative_to(ROOT).as_posix()
    found: list[tuple[int, int, Reference]] = []  # (start, end, reference)

    def add(start: int, end: int, file, function, test_id) -> None:
        line = text.count("\n", 0, start) + 1
        found.append((start, end, Reference(name, line, text[start:end], file, function, test_id)))

    for m in FILE_REF.finditer(text):  # fenced blocks too: `PASS test_x.py::test_y[id]`
        end = m.end()
        if m.group(2) and text[end : end + 1] == "[":
            end = bracket_end(text, end) or end
        add(m.start(), end, m.group(1), m.group(2), id_or_none(text[m.end() : end]))
    taken = [(s, e) for s, e, _ in found]
    prose = FENCE.sub(lambda f: re.sub(r"[^\n]", " ", f.group(0)), text)
    spans = []
    for m in CODE_SPAN.finditer(prose):
        if any(s < m.end(1) and m.start(1) < e for s, e in taken):
            spans.append((m, "taken"))
        elif BARE_TEST.fullmatch(m.group(1)):
            bare = BARE_TEST.fullmatch(m.group(1))
            add(m.start(1), m.end(1), None, bare.group(1), id_or_none(bare.group(2)))
            spans.append((m, "bare"))
        elif m.group(1).startswith("[") and bracket_end(m.group(1), 0) == len(m.group(1)):
            spans.append((m, "id"))
        else:
            spans.append((m, None))
    # an id alone continues the reference just before it (a chain: `a[x]`, `[y]` and `[z]`)
    previous = None  # (end of the span, its reference) while a chain can go on
    for m, kind in spans:
        ref = None
        if kind in ("taken", "bare"):
            ref = max((f for f in found if f[0] < m.end()), key=lambda f: f[0])[2]
        elif kind == "id" and previous and CONTINUES.fullmatch(prose[previous[0] : m.start()]):
            ref = previous[1]
            if ref.function and id_or_none(m.group(1)) is not None:
                add(m.start(1), m.end(1), ref.file, ref.function, id_or_none(m.group(1)))
        previous = (m.end(), ref) if ref else None
    return [r for _, _, r in sorted(found, key=lambda f: f[0])]


@cache
def defined_tests() -> dict[str, set[str]]:
    """File name -> the test functions defined in it."""
    return {
        f.name: {
            n.name
            for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name.startswith("test")
        }
        for f in TESTS.glob("test_*.py")
    }


ALL_REFERENCES = [r for doc in DOCS for r in references(doc)]


@pytest.fixture(scope="module")
def collected() -> dict[str, set[str]]:
    """File name -> the ``function[id]`` pytest collects from it, for every file whose
    ids the text names."""
    files = sorted(
        {f for r in ALL_REFERENCES if r.test_id for f in files_of(r) if f in defined_tests()}
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PYTEST_", "TWINFORMER_REPORT", "COV_"))
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0",
         "-p", "no:cacheprovider", *[f"parity_tests/{f}" for f in files]],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ids: dict[str, set[str]] = {}
    for line in proc.stdout.splitlines():
        path, sep, node = line.strip().partition("::")
        if sep:
            ids.setdefault(Path(path).name, set()).add(node)
    return ids


def files_of(ref: Reference) -> list[str]:
    """The file a reference names, or every file that defines its function."""
    if ref.file:
        return [ref.file]
    return sorted(f for f, names in defined_tests().items() if ref.function in names)


def where(ref: Reference) -> str:
    return f"{ref.doc}:{ref.line}: `{ref.text}`"


def test_the_text_names_tests_at_all():
    """The parser finds the tables' references (else the test below checks nothing)."""
    by_doc = {r.doc for r in ALL_REFERENCES}
    assert "labs/03_attention/README.md" in by_doc and "labs/09_training/README.md" in by_doc
    assert len([r for r in ALL_REFERENCES if r.test_id]) > 100
    refs = references(ROOT / "labs/01_tokens/README.md")
    continued = [r for r in refs if r.text == "[str]"]
    assert continued and continued[0].function == "test_decode_rejects_bad_ids_naming_the_argument"


def test_every_test_the_docs_name_exists(collected):
    functions = defined_tests()
    wrong = []
    for ref in ALL_REFERENCES:
        if ref.file and ref.file not in functions:
            wrong.append(f"{where(ref)}: there is no parity_tests/{ref.file}")
            continue
        files = files_of(ref)
        if ref.function and not files:
            wrong.append(f"{where(ref)}: no test function {ref.function} in parity_tests/")
        elif ref.function and ref.function not in functions[files[0]]:
            wrong.append(f"{where(ref)}: {ref.file} has no test function {ref.function}")
        elif ref.test_id is not None:
            node = f"{ref.function}[{ref.test_id}]"
            if not any(node in collected.get(f, ()) for f in files):
                known = [n for f in files for n in collected.get(f, ())]
                near = difflib.get_close_matches(node, known, n=3, cutoff=0.0)
                wrong.append(
                    f"{where(ref)}: pytest collects no {node} from {', '.join(files)}; "
                    f"the nearest: {', '.join(near)}"
                )
    assert not wrong, "stale test references in the text:\n" + "\n".join(wrong)
