"""Measure how much the project says: comment density in the twins, sentence length in the docs.

    python scripts/text_measures.py [--json]

Prints, for the current checkout:

* ``numpy_impl/`` and ``torch_impl/``: docstring lines plus full-line comment lines per
  code line. Exercise fences (``### BEGIN SOLUTION``, ``### END SOLUTION`` and the
  ``###`` task lines) count as neither.
* ``docs/*.md``, ``README.md`` and the chapter READMEs: mean words per sentence, the
  number of sentences over 40 and over 60 words, and the longest. Fenced code blocks,
  tables, headings, images and HTML lines are removed first.
* ``README.md``'s size in bytes.

Issue 34's targets: numpy_impl <= 0.40, torch_impl <= 0.35, docs mean <= 20 words with
no sentence over 60, README.md <= 6,000 bytes.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def comment_density(folder: Path) -> dict:
    """Docstring and full-line comment lines, code lines, and their ratio over ``folder/*.py``."""
    doc = comment = code = 0
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        docstring_lines: set[int] = set()
        for node in ast.walk(ast.parse(source)):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                value = body[0].value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    docstring_lines.update(range(value.lineno, value.end_lineno + 1))
        comment_lines: set[int] = set()
        fence_lines: set[int] = set()
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT and token.line.strip().startswith("#"):
                target = fence_lines if token.string.startswith("###") else comment_lines
                target.add(token.start[0])
        for number, line in enumerate(source.splitlines(), start=1):
            if not line.strip() or number in fence_lines:
                continue
            if number in docstring_lines:
                doc += 1
            elif number in comment_lines:
                comment += 1
            else:
                code += 1
    return {"doc": doc, "comment": comment, "code": code, "ratio": round((doc + comment) / code, 3)}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z`(\"'*\[])")


def prose(markdown: str) -> str:
    """``markdown`` without fenced code, tables, headings, images, HTML and inline code spans."""
    kept, fenced = [], False
    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            fenced = not fenced
            continue
        if fenced or stripped.startswith(("|", "#", "![", "<")):
            kept.append("")  # a paragraph break: a sentence never runs across removed lines
            continue
        kept.append(stripped)
    text = "\n".join(kept)
    text = re.sub(r"`[^`]*`", "code", text)  # a code span reads as one word
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link reads as its text
    return text


def sentences(markdown: str) -> list[str]:
    """The sentences of ``markdown``'s prose: split at sentence ends and at paragraph breaks."""
    found = []
    for paragraph in re.split(r"\n\s*\n", prose(markdown)):
        for item in re.split(r"\n(?=\s*(?:[-*] |\d+\. ))", paragraph):  # list items end a sentence
            for sentence in _SENTENCE_END.split(" ".join(item.split())):
                if len(sentence.split()) >= 3:
                    found.append(sentence)
    return found


def sentence_lengths(paths: list[Path]) -> dict:
    """Mean words per sentence, counts over 40 and 60 words, and the longest, over ``paths``."""
    texts = [path.read_text(encoding="utf-8") for path in paths]
    lengths = [len(sentence.split()) for text in texts for sentence in sentences(text)]
    return {
        "files": len(paths),
        "sentences": len(lengths),
        "mean_words": round(sum(lengths) / max(len(lengths), 1), 1),
        "over_40": sum(n > 40 for n in lengths),
        "over_60": sum(n > 60 for n in lengths),
        "longest": max(lengths, default=0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    readme = ROOT / "README.md"
    result = {
        "numpy_impl": comment_density(ROOT / "numpy_impl"),
        "torch_impl": comment_density(ROOT / "torch_impl"),
        "docs": sentence_lengths(sorted((ROOT / "docs").glob("*.md"))),
        "readme": sentence_lengths([readme]) | {"bytes": readme.stat().st_size},
        "chapters": sentence_lengths(sorted(ROOT.glob("labs/[0-9][0-9]_*/README.md"))),
    }
    if args.json:
        print(json.dumps(result, indent=1))
        return
    for name in ("numpy_impl", "torch_impl"):
        m = result[name]
        said = f"{m['doc'] + m['comment']:,} / {m['code']:,}"
        print(f"{name + '/':12} doc+comment per code line {m['ratio']:.2f} ({said})")
    for name in ("docs", "readme", "chapters"):
        m = result[name]
        print(
            f"{name:12} {m['mean_words']:4.1f} words per sentence, {m['sentences']:,} sentences;"
            f" {m['over_40']} over 40 words, {m['over_60']} over 60; longest {m['longest']}"
        )
    print(f"README.md    {result['readme']['bytes']:,} bytes")


if __name__ == "__main__":
    main()
