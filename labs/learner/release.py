"""``python -m labs release --out DIR``: the course as a class gets it, without the solutions.

DIR gets the files git tracks, with every exercise region of ``numpy_impl/`` a stub (as
``labs start`` writes them), the Markdown without its quotes of a solution
(:func:`without_solutions`), and ``docs/site/`` built from those with the cached figures
(kept by the copy's ``.gitignore``). DIR must be new or empty, outside the repository;
the copy is built beside it and renamed into place. docs/teaching.md says how to publish it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path

from .. import UserError
from .docs_figures import lab_figures
from .exercises_fences import _KEPT, CHAPTERS, REPO, Reference
from .exercises_workspace import _show

NOTE = "*(The student release leaves out this code: it is an exercise's solution.)*"
_AFTER = re.compile(r"^## After it passes.*?(?=^## |\Z)", re.M | re.S)
_FENCE = re.compile(r"^(```|~~~)[^\n]*\n.*?^\1[ \t]*$", re.M | re.S)
_SPAN = re.compile(r"(?<!`)`((?:[^`\n]|\n(?!\n))+)`(?!`)")  # within a paragraph
IGNORED_HERE = ("docs/site/", "labs/*/figures/")  # published with the release


@cache
def solution_statements() -> frozenset[str]:
    """Each line of code in a region's body, without its comment and its spaces (what a
    quote of it matches); lines shorter than ``else:`` or ``out = []`` are left out."""
    return frozenset(
        s
        for regions in Reference().regions.values()
        for r in regions
        for line in r.body
        if not _KEPT.match(line) and len(s := _statement(line)) >= 12
    )


def _statement(code: str) -> str:
    return re.sub(r"\s+", "", re.split(r"\s#\s|^#", code, maxsplit=1)[0])


def without_solutions(markdown: str) -> str:
    """``markdown`` without its quotes of the reference's solutions."""
    statements = solution_statements()

    def block(m: re.Match) -> str:
        quotes = any(_statement(line) in statements for line in m[0].splitlines()[1:-1])
        return NOTE if quotes else m[0]

    def span(m: re.Match) -> str:  # holding a line of code, not a short instruction
        code = _statement(m[1])
        if not any(line in code for line in statements if len(line) >= 20):
            return m[0]
        lhs = re.match(r"([\w, .\[\]]+?)\s*=[^=]|([\w.]+)\(", m[1])  # `dS = …`, `f(…)`
        return f"`{lhs[1]} = …`" if lhs and lhs[1] else f"`{lhs[2]}(…)`" if lhs else "(code)"

    return _SPAN.sub(span, _FENCE.sub(block, _AFTER.sub("", markdown)))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", type=Path, required=True,
                   help="a new or empty folder outside the repository")  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from .docs import build_site  # it imports this module

    out = args.out.expanduser().resolve()
    if out.is_relative_to(REPO):
        raise UserError(f"--out: {_show(out)} is inside the repository; give a folder outside it")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out: {_show(out)} exists and is not an empty folder")
    git = ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    listed = subprocess.run(git, capture_output=True, text=True)
    if listed.returncode != 0:
        raise UserError(f"release copies the files git tracks: {listed.stderr.strip()}")
    ref, chapters = Reference(), list(CHAPTERS)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        for name in filter(None, listed.stdout.split("\0")):
            src, dst, rel = REPO / name, tmp / name, name.removeprefix("numpy_impl/")
            if not src.is_file():
                continue  # deleted, not committed yet
            dst.parent.mkdir(parents=True, exist_ok=True)
            if name.startswith("numpy_impl/") and rel in ref.texts:
                dst.write_text(ref.render(rel, chapters), encoding="utf-8")
            elif name.endswith(".md"):
                text = without_solutions(src.read_text(encoding="utf-8"))
                dst.write_text(text, encoding="utf-8")
            else:
                shutil.copy2(src, dst)
        for figures in (REPO / "labs").glob("*/figures"):
            shutil.copytree(figures, tmp / "labs" / figures.parent.name / "figures")
        ignore = tmp / ".gitignore"
        kept = [line for line in ignore.read_text().splitlines() if line not in IGNORED_HERE]
        ignore.write_text("\n".join(kept) + "\n")
        build_site(tmp / "docs" / "site", tmp / "labs", "existing", solutions=False,
                   docs_dir=tmp / "docs", say=lambda s: None)  # fmt: skip
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    labs = sorted((REPO / "labs").glob("[0-9][0-9]_*/lab.py"))
    print(f"wrote {_show(out)}: the course without its solutions (docs/teaching.md: publish it)")
    wanted = [lab.parent / "figures" / n for lab in labs for n in lab_figures(lab)]
    if missing := [f for f in wanted if not (out / f.relative_to(REPO)).is_file()]:
        print(f"note: {len(missing)} figures not drawn yet: `labs docs` here, then release again")
    return 0
