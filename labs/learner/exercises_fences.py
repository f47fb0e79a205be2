"""The exercises' chapters, and the solution fences in the reference.

The reference solutions in ``numpy_impl/`` carry fences, nbgrader style::

        ### BEGIN SOLUTION ch03
        ### TODO: what to write (these lines stay in the learner's copy)
        ...the reference code...
        ### END SOLUTION

Here: the chapters (:data:`CHAPTERS`), each fenced region of a file
(:func:`parse_regions`), the stub that replaces a region in the learner's copy
(:func:`stub_body`), and the reference with any chapters stubbed (:class:`Reference`).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import takewhile
from pathlib import Path

from .. import UserError

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "numpy_impl"

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
    "17": ("real models: GPT-2, nanoGPT, Llama", "17_real_models"),
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
    """One fenced solution region of a file; ``(chapter, index)`` names it in the reference
    and in a workspace."""

    file: str  # relative to the package: "attention.py"
    chapter: str  # "03"
    index: int  # the chapter's index-th region in the file, from 0
    function: str  # the function or method around it: "SelfAttention.forward"
    indent: str  # the fences' indentation
    begin: int  # the BEGIN line, from 0
    end: int  # the END line, from 0
    kept: tuple[str, ...]  # the ### lines right after BEGIN (the task), verbatim
    body: tuple[str, ...]  # every line between the fences, verbatim (kept included)

    @property
    def key(self) -> tuple[str, int]:
        return (self.chapter, self.index)

    @property
    def task(self) -> str:
        """The TODO text, on one line."""
        parts = [_KEPT.match(line)["text"].strip() for line in self.kept]
        return " ".join(p.removeprefix("TODO:").strip() for p in parts if p)


def parse_regions(text: str, file: str, names: bool = True) -> list[Region]:
    """Every fenced region of ``text`` (the source of ``file``), in order; ``names``: find
    each region's function with ``ast`` (needs valid Python).

    Raises:
        FenceError: a fence without its partner, nested or mis-indented fences, or a
            BEGIN without a known chapter.
    """
    lines = text.splitlines(keepends=True)
    functions = _function_spans(text) if names else []
    regions: list[Region] = []
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
            kept = tuple(takewhile(lambda line: _KEPT.match(line.rstrip("\r\n")), body))
            chapter = begin["chapter"]
            index = sum(r.chapter == chapter for r in regions)
            function = _innermost(functions, b + 1)
            regions.append(
                Region(file, chapter, index, function, begin["indent"], b, i, kept, body)
            )
            opened = None
        elif "### BEGIN SOLUTION" in stripped or "### END SOLUTION" in stripped:
            raise FenceError(f"{where}: a fence must be alone on its line: {stripped.strip()!r}")
    if opened is not None:
        raise FenceError(f"{file}:{opened[0] + 1}: BEGIN SOLUTION without an END SOLUTION")
    return regions


def _function_spans(text: str, node=None, prefix="") -> list[tuple[int, int, str]]:
    """``(first line, last line, qualified name)`` of every function, 1-based."""
    spans = []
    for child in ast.iter_child_nodes(node or ast.parse(text)):
        name = f"{prefix}{getattr(child, 'name', '')}"
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((child.lineno, child.end_lineno, name))
        defines = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        spans += _function_spans(text, child, f"{name}." if defines else prefix)
    return spans


def _innermost(spans: list[tuple[int, int, str]], lineno: int) -> str:
    inside = [s for s in spans if s[0] <= lineno <= s[1]]
    return max(inside)[2] if inside else "<module>"


def _normalised(lines: Iterable[str]) -> tuple[str, ...]:
    """A region's lines without trailing spaces or blank lines: what 'edited' compares."""
    return tuple(line.rstrip() for line in lines if line.strip())


def stub_body(region: Region, folder: str) -> tuple[str, ...]:
    """The learner's version of ``region``: its TODO lines and a ``raise``."""
    newline = "\r\n" if region.body and region.body[0].endswith("\r\n") else "\n"
    task = f" \u2014 {region.task}" if region.task else ""
    message = f"ch{region.chapter}: {region.function}{task}; see {folder}/README.md"
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
        stubbed, keep, regions = set(stubbed), keep or {}, self.regions.get(file, [])
        bodies = {r.key: keep.get(r.key, self.stub(r)) for r in regions if r.chapter in stubbed}
        return replace_bodies(self.texts[file], regions, bodies)
