"""``python -m labs diff COMPONENT``: the NumPy and PyTorch twins side by side.

    python -m labs diff attention
    python -m labs diff LayerNorm                       # a class name finds its file
    python -m labs diff attention --method forward      # one method only
    python -m labs diff gpt --no-color | less

Layout: the terminal's width (``shutil.get_terminal_size``, at least 2 x 60
columns), one column per file, line numbers from the real files. A line too
long for its column is wrapped, never cut: its continuation rows carry ``↪``
in the line-number gutter. Colour (Pygments' ``TerminalFormatter``) is on when
stdout is a terminal; Pygments is optional, and without it the output is plain.

The pieces and their pairs come from ``diff_pairs.py``; this module lays them
out in two columns.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

from .diff_pairs import (
    NUMPY_DIR,
    TORCH_DIR,
    Pair,
    Segment,
    Source,
    Tokens,
    load_source,
    pair_sources,
    resolve_component,
    select_method,
)

MIN_COLUMN = 60  # narrowest column, in characters: the output is at least 2 x 60 wide


# -- terminal rendering -----------------------------------------------------------------------
def _char_width(ch: str) -> int:
    if unicodedata.combining(ch):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _wrap(tokens: Tokens, width: int) -> list[Tokens]:
    """Cut one line's tokens into rows of at most ``width`` columns (at least one row).

    A row breaks after a space when there is one in its last third, else
    mid-word; continuation rows are indented like the line itself, plus two.
    """
    chars = [(t, ch) for t, text in tokens for ch in text]
    if sum(_char_width(c) for _, c in chars) <= width:
        return [list(tokens)]
    indent = len(chars) - len("".join(c for _, c in chars).lstrip(" "))
    hang = min(indent + 2, width // 2)
    rows: list[list[tuple[object, str]]] = []
    pos = 0
    while pos < len(chars):
        room = width - (hang if rows else 0)
        used, end = 0, pos
        while end < len(chars) and used + _char_width(chars[end][1]) <= room:
            used += _char_width(chars[end][1])
            end += 1
        end = max(end, pos + 1)  # a character wider than the room still moves on
        if end < len(chars):
            spaces = [i + 1 for i in range(pos, end) if chars[i][1] == " "]
            if spaces and spaces[-1] - pos >= room * 2 // 3:
                end = spaces[-1]
        rows.append(([(None, " " * hang)] if rows else []) + chars[pos:end])
        pos = end
    return [_regroup(row) for row in rows]


def _regroup(chars: list[tuple[object, str]]) -> Tokens:
    out: Tokens = []
    for t, ch in chars:
        if out and out[-1][0] is t:
            out[-1] = (t, out[-1][1] + ch)
        else:
            out.append((t, ch))
    return out


class _Painter:
    """Plain text, or ANSI colour through Pygments' TerminalFormatter."""

    def __init__(self, color: bool, background: str):
        self.color = color
        if color:
            from io import StringIO

            from pygments.formatters import TerminalFormatter
            from pygments.token import Text

            self._fmt = TerminalFormatter(bg=background)
            self._io = StringIO
            self._text = Text

    def code(self, tokens: Tokens) -> str:
        if not self.color:
            return "".join(text for _, text in tokens)
        buf = self._io()
        self._fmt.format([(self._text if t is None else t, s) for t, s in tokens], buf)
        return buf.getvalue()

    def dim(self, text: str) -> str:
        return f"\x1b[2m{text}\x1b[0m" if self.color and text.strip() else text

    def bold(self, text: str) -> str:
        return f"\x1b[1m{text}\x1b[0m" if self.color and text.strip() else text


def _width(text: str) -> int:
    return sum(_char_width(c) for c in text)


def _pad(text: str, shown: str, width: int) -> str:
    """``text`` (maybe with ANSI codes) padded to ``width`` columns of ``shown``'s width."""
    return text + " " * max(0, width - _width(shown))


def _fit(text: str, width: int) -> str:
    """Shorten a label to ``width`` columns, marking the cut with ``…``."""
    if _width(text) <= width:
        return text
    out = ""
    for ch in text:
        if _width(out + ch) > width - 1:
            break
        out += ch
    return out + "…"


@dataclass
class _Glyphs:
    sep: str = " │ "
    cross: str = "─┼─"
    rule: str = "─"
    wrap: str = "↪"

    @classmethod
    def for_stream(cls, stream) -> _Glyphs:
        try:
            "│┼─↪…".encode(getattr(stream, "encoding", None) or "ascii")
        except (UnicodeEncodeError, LookupError):
            return cls(" | ", "-+-", "-", "+")
        return cls()


def render_text(
    pairs: list[Pair],
    left: Source | None,
    right: Source | None,
    width: int,
    color: bool = False,
    background: str = "dark",
    glyphs: _Glyphs | None = None,
) -> list[str]:
    """The two columns as lines of text, ``width`` columns wide (at least 2 x 60)."""
    g = glyphs or _Glyphs()
    paint = _Painter(color, background)
    col = max(MIN_COLUMN, (width - len(g.sep)) // 2)
    numw = max([3] + [len(str(len(s.lines))) for s in (left, right) if s])
    code_w = col - numw - 1
    srcs = (left, right)

    def label_cell(pair: Pair, side: int) -> str:
        seg = (pair.left, pair.right)[side]
        if seg is None:
            return " " * col
        text = f"{g.rule * 2} {_fit(pair.label, col - 6)} "
        return paint.dim(text + g.rule * (col - _width(text)))

    def body(seg: Segment | None, src: Source | None) -> list[str]:
        if seg is None:
            return []
        toks = src.line_tokens() if color else [[(None, ln)] for ln in src.lines]
        rows = []
        for n in range(seg.start, seg.end + 1):
            for k, frag in enumerate(_wrap(toks[n - 1], code_w)):
                gutter = f"{n:>{numw}} " if k == 0 else f"{g.wrap:>{numw}} "
                shown = gutter + "".join(s for _, s in frag)
                rows.append(_pad(paint.dim(gutter) + paint.code(frag), shown, col))
        return rows

    def above_def(seg: Segment | None, src: Source | None) -> int:
        """Display rows before the ``def`` line (decorators, comments, wrapped)."""
        if seg is None:
            return 0
        return sum(
            len(_wrap([(None, src.lines[n - 1])], code_w)) for n in range(seg.start, seg.def_line)
        )

    names = [s.label if s else "(no twin)" for s in srcs]
    out = [
        _pad(paint.bold(_fit(names[0], col)), _fit(names[0], col), col)
        + g.sep
        + paint.bold(_fit(names[1], col)),
        g.rule * col + g.cross + g.rule * col,
    ]
    blank = " " * col
    for idx, pair in enumerate(pairs):
        if idx:
            out.append(blank + g.sep.rstrip())
        out.append((label_cell(pair, 0) + g.sep + label_cell(pair, 1)).rstrip())
        sides = [body(pair.left, left), body(pair.right, right)]
        tops = [above_def(pair.left, left), above_def(pair.right, right)]
        if pair.left and pair.right:  # the two def lines face each other
            hi = max(tops)
            sides = [[blank] * (hi - t) + rows for t, rows in zip(tops, sides, strict=True)]
        height = max(len(s) for s in sides)
        sides = [s + [blank] * (height - len(s)) for s in sides]
        out += [(a + g.sep + b).rstrip() for a, b in zip(*sides, strict=True)]
    return out


# -- command ----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "component",
        metavar="COMPONENT",
        help="a file stem found in both numpy_impl/ and torch_impl/ (attention, norm, gpt, ...) "
        "or a class name (LayerNorm)",
    )
    p.add_argument(
        "--method",
        metavar="NAME",
        help="show one function or method only: forward, SelfAttention.forward, ...",
    )
    p.add_argument(
        "--color",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="syntax colour with Pygments (default: on when stdout is a terminal)",
    )
    p.add_argument(
        "--background",
        choices=("dark", "light"),
        default="dark",
        help="the terminal's background, for the colour scheme",
    )
    p.add_argument(
        "--width",
        type=int,
        help="total width in columns (default: the terminal's; never under 2 x 60)",
    )


def _want_color(flag: bool | None) -> bool:
    try:
        import pygments  # noqa: F401
    except ImportError:
        if flag:
            print("note: --color needs Pygments (pip install Pygments)", file=sys.stderr)
        return False
    if flag is None:
        return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return flag


def main(args: argparse.Namespace) -> int:
    comp = resolve_component(args.component)
    left = load_source(NUMPY_DIR / f"{comp}.py")
    right = load_source(TORCH_DIR / f"{comp}.py")
    pairs = pair_sources(left, right)
    if args.method:
        method = args.method
        if "." not in method and args.component not in (comp, f"{comp}.py"):
            # `diff LayerNorm --method forward`: that class's forward, not RMSNorm's
            qualified = f"{Path(args.component).stem}.{method}"
            if any(p.qualname == qualified for p in pairs):
                method = qualified
        pairs = select_method(pairs, method)
    width = args.width or shutil.get_terminal_size((2 * MIN_COLUMN + 3, 40)).columns
    lines = render_text(
        pairs,
        left,
        right,
        width=width,
        color=_want_color(args.color),
        background=args.background,
        glyphs=_Glyphs.for_stream(sys.stdout),
    )
    try:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
