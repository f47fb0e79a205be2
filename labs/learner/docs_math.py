"""The chapters' LaTeX as MathML, for ``python -m labs docs``: no JavaScript, no network.

The READMEs write maths GitHub's way: ``$...$`` inline, ``$$...$$`` displayed.
:class:`MathExtension` takes every formula out of the text before Markdown parses it
(which would eat ``\\!``, ``\\\\`` and pairs of ``_i``), renders it with
`latex2mathml <https://pypi.org/project/latex2mathml/>`_ at build time, and stores the
MathML in Markdown's stash of raw HTML, which puts it back untouched. Browsers draw
MathML themselves; each formula keeps its LaTeX in a hidden ``<annotation>``. A
command latex2mathml does not know stops the build with the formula named
(:func:`to_mathml`).

Not maths (pandoc's and GitHub's rules): code spans and fenced code, an escaped
``\\$``, and a ``$`` followed or closed by a space (``$5 and $6``).
"""

from __future__ import annotations

import html
import re

#: One token of the text: a code span (kept as it is), an escaped dollar, display
#: maths, inline maths. Inline maths opens with a ``$`` not followed by a space,
#: closes with a ``$`` not preceded by a space nor followed by a digit, and does not
#: run over a blank line.
_TOKENS = re.compile(
    r"(?P<code>(?P<ticks>`+).+?(?P=ticks))"
    r"|(?P<escaped>\\\$)"
    r"|\$\$(?P<display>.+?)\$\$"
    r"|\$(?P<inline>[^\s$](?:[^$\n]|\n(?!\s*\n))*?(?<![\s\\]))\$(?!\d)"
    r"|\$(?P<single>[^\s$])\$(?!\d)",
    re.S,
)


def to_mathml(tex: str, display: bool) -> str:
    """One formula as a ``<math>`` element; its LaTeX kept in an ``<annotation>``.

    Raises ``ValueError`` naming the formula when latex2mathml cannot read it, or
    passes a command through as text (``\\arg``: it would show as raw LaTeX).
    """
    from latex2mathml.converter import convert

    try:
        mathml = convert(tex.strip(), display="block" if display else "inline")
    except Exception as e:  # latex2mathml raises its own exception types
        raise ValueError(f"cannot render the formula {tex.strip()!r}: {e}") from None
    unknown = re.findall(r">(\\[A-Za-z]+)<", mathml)  # a command it passed through as text
    if unknown:
        raise ValueError(
            f"cannot render the formula {tex.strip()!r}: latex2mathml does not know "
            f"{', '.join(dict.fromkeys(unknown))}"
        )
    head, sep, rest = mathml.partition(">")
    body, _, tail = rest.rpartition("</math>")
    annotation = f'<annotation encoding="application/x-tex">{html.escape(tex.strip())}</annotation>'
    return f"{head}{sep}<semantics>{body}{annotation}</semantics></math>{tail}"


def replace_math(text: str, store) -> str:
    """``text`` with every formula replaced by ``store(mathml)`` (a placeholder).

    Code spans are left as they are, and ``\\$`` becomes ``$``. Fenced code blocks must
    already be out of the text (Markdown's fenced_code preprocessor runs first).
    """

    def sub(m: re.Match) -> str:
        if m.group("code"):
            return m.group(0)
        if m.group("escaped"):
            return "$"
        if m.group("display") is not None:
            return store(to_mathml(m.group("display"), display=True))
        return store(to_mathml(m.group("inline") or m.group("single"), display=False))

    return _TOKENS.sub(sub, text)


def math_extension():
    """A Python-Markdown extension: the formulas out before parsing, MathML back after."""
    from markdown.extensions import Extension
    from markdown.preprocessors import Preprocessor

    class MathPreprocessor(Preprocessor):
        def run(self, lines: list[str]) -> list[str]:
            text = replace_math("\n".join(lines), self.md.htmlStash.store)
            return text.split("\n")

    class MathExtension(Extension):
        def extendMarkdown(self, md):  # noqa: N802  (markdown's API)
            # after fenced_code (25), which stashes code blocks, before html_block (20)
            md.preprocessors.register(MathPreprocessor(md), "twinformer_math", 22)

    return MathExtension()
