"""The chapters' LaTeX (``$...$``, ``$$...$$``) as MathML for ``python -m labs docs``:
rendered by latex2mathml at build time, drawn by the browser, no script. The formulas
leave the text before Markdown parses it (it would eat ``\\!`` and ``_i`` pairs) and come
back through its stash. Not maths (pandoc's rules): code, ``\\$``, a ``$`` beside a space.
"""

from __future__ import annotations

import html
import re

#: A code span (kept), an escaped dollar, display maths, inline maths: a ``$`` not before
#: a space to a ``$`` not after a space nor before a digit, within a paragraph.
_TOKENS = re.compile(
    r"(?P<code>(?P<ticks>`+).+?(?P=ticks))"
    r"|(?P<escaped>\\\$)"
    r"|\$\$(?P<display>.+?)\$\$"
    r"|\$(?P<inline>[^\s$](?:[^$\n]|\n(?!\s*\n))*?(?<![\s\\]))\$(?!\d)"
    r"|\$(?P<single>[^\s$])\$(?!\d)",
    re.S,
)


def to_mathml(tex: str, display: bool) -> str:
    """One formula as a ``<math>`` element, its LaTeX in an ``<annotation>``.

    Raises:
        ValueError: naming the formula, when latex2mathml cannot read it or passes a
            command through as text.
    """
    from latex2mathml.converter import convert

    tex = tex.strip()
    try:
        mathml = convert(tex, display="block" if display else "inline")
    except Exception as e:  # latex2mathml raises its own exception types
        raise ValueError(f"cannot render the formula {tex!r}: {e}") from None
    if unknown := re.findall(r">(\\[A-Za-z]+)<", mathml):  # a command passed through as text
        unknown = ", ".join(dict.fromkeys(unknown))
        raise ValueError(f"cannot render the formula {tex!r}: latex2mathml does not know {unknown}")
    head, sep, rest = mathml.partition(">")
    body, _, tail = rest.rpartition("</math>")
    annotation = f'<annotation encoding="application/x-tex">{html.escape(tex)}</annotation>'
    return f"{head}{sep}<semantics>{body}{annotation}</semantics></math>{tail}"


def replace_math(text: str, store) -> str:
    """``text`` with every formula replaced by ``store(mathml)`` (a placeholder), ``\\$``
    by ``$``; code spans kept (fenced code must be out already: fenced_code runs first)."""

    def sub(m: re.Match) -> str:
        if m.group("code"):
            return m.group(0)
        if m.group("escaped"):
            return "$"
        if m.group("display") is not None:
            return store(to_mathml(m.group("display"), display=True))
        return store(to_mathml(m.group("inline") or m.group("single"), display=False))

    return _TOKENS.sub(sub, text)


def add_math(md) -> None:
    """Register on a Python-Markdown ``md``: the formulas out before parsing, MathML back."""
    from markdown.preprocessors import Preprocessor

    class MathPreprocessor(Preprocessor):
        def run(self, lines: list[str]) -> list[str]:
            return replace_math("\n".join(lines), self.md.htmlStash.store).split("\n")

    # after fenced_code (25), which stashes code blocks, before html_block (20)
    md.preprocessors.register(MathPreprocessor(md), "twinformer_math", 22)
