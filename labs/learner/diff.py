"""``python -m labs diff COMPONENT``: the NumPy and PyTorch twins, method by method.

    python -m labs diff attention
    python -m labs diff LayerNorm                       # a class name finds its file
    python -m labs diff attention --method forward      # one method only
    python -m labs diff gpt --no-pager | grep def

The NumPy side is the learner's workspace when there is one, else ``numpy_impl/``.
From :data:`SIDE_BY_SIDE_MIN` columns the files stand side by side, ``forward`` facing
``forward``; narrower, stacked. Line numbers are the files' own; a long line wraps
(``↪``). On a terminal the output is paged and coloured by Pygments.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from collections import namedtuple
from dataclasses import replace
from itertools import groupby, zip_longest
from pathlib import Path

from .. import UserError
from ..commands.shared import int_range
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
from .exercises_workspace import Workspace, _show, workspace_dir

SIDE_BY_SIDE_MIN = 115  # two columns of 56 characters and the separator; narrower: stacked
PIPED_WIDTH = 100  # the width when no terminal says otherwise
NARROWEST = 40  # below this the text is laid out 40 wide all the same


# -- terminal rendering -----------------------------------------------------------------------
def _char_width(ch: str) -> int:
    wide = unicodedata.east_asian_width(ch) in ("W", "F")
    return 0 if unicodedata.combining(ch) else 2 if wide else 1


def _width(text: str) -> int:
    return sum(_char_width(c) for c in text)


def _wrap(tokens: Tokens, width: int) -> list[Tokens]:
    """Cut one line's tokens into rows of at most ``width`` columns (at least one row):
    after a space in the row's last third, else mid-word; continuations are indented
    like the line, plus two."""
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
    return [[(t, "".join(c for _, c in g)) for t, g in groupby(r, lambda tc: tc[0])] for r in rows]


class _Painter:
    """Plain text, or ANSI colour through Pygments' TerminalFormatter."""

    def __init__(self, color: bool, background: str):
        self.color = color
        if color:
            from pygments.formatters import TerminalFormatter

            self._fmt = TerminalFormatter(bg=background)

    def code(self, tokens: Tokens) -> str:
        if not self.color:
            return "".join(text for _, text in tokens)
        from pygments import format
        from pygments.token import Text

        return format([(Text if t is None else t, s) for t, s in tokens], self._fmt)

    def dim(self, text: str, sgr: int = 2) -> str:
        return f"\x1b[{sgr}m{text}\x1b[0m" if self.color and text.strip() else text

    def bold(self, text: str) -> str:
        return self.dim(text, sgr=1)


def _fit(text: str, width: int) -> str:
    """Shorten a label to ``width`` columns, marking the cut with ``…``."""
    if _width(text) <= width:
        return text
    while _width(text) > width - 1:
        text = text[:-1]
    return text + "…"


_Glyphs = namedtuple("_Glyphs", "sep cross rule wrap", defaults=(" │ ", "─┼─", "─", "↪"))


def _glyphs(stream) -> _Glyphs:
    """Box drawing, or ASCII where ``stream`` cannot encode it."""
    try:
        "│┼─↪…".encode(getattr(stream, "encoding", None) or "ascii")
    except (UnicodeEncodeError, LookupError):
        return _Glyphs(" | ", "-+-", "-", "+")
    return _Glyphs()


def render_text(pairs: list[Pair], left, right, width: int, paint, layout="auto") -> list[str]:
    """The pairs as lines at most ``width`` (at least :data:`NARROWEST`) columns wide: side
    by side from :data:`SIDE_BY_SIDE_MIN` columns (``layout="auto"``), else stacked."""
    width = max(NARROWEST, width)
    side = layout == "side" or layout == "auto" and width >= SIDE_BY_SIDE_MIN
    render = _render_side if side else _render_stacked
    return render(pairs, left, right, width, paint, _glyphs(sys.stdout))


def _rows(seg: Segment, src: Source, code_w: int, numw: int, paint, g) -> list[tuple[str, int]]:
    """The lines of ``seg`` as display rows ``(text, shown width)``: the line number,
    then the code wrapped to ``code_w`` columns (continuations marked in the gutter)."""
    toks = src.line_tokens if paint.color else [[(None, ln)] for ln in src.lines]
    rows = []
    for n in range(seg.start, seg.end + 1):
        for k, frag in enumerate(_wrap(toks[n - 1], code_w)):
            gutter = f"{n:>{numw}} " if k == 0 else f"{g.wrap:>{numw}} "
            shown = gutter + "".join(s for _, s in frag)
            rows.append((paint.dim(gutter) + paint.code(frag), _width(shown)))
    return rows


def _render_stacked(pairs, left, right, width, paint, g) -> list[str]:
    """One column: for each pair, its NumPy lines, then its PyTorch lines."""
    numw = max([3] + [len(str(len(s.lines))) for s in (left, right) if s])
    sides = (("NumPy", left), ("PyTorch", right))
    out = [paint.bold(_fit(f"{name}: {s.label if s else '(no twin)'}", width)) for name, s in sides]
    out.append(g.rule * width)
    for idx, pair in enumerate(pairs):
        text = f"{g.rule * 2} {_fit(pair.label, width - 6)} "
        out += [""] * (idx > 0) + [paint.bold(text + g.rule * (width - _width(text)))]
        for (name, src), seg in zip(sides, (pair.left, pair.right), strict=True):
            if name == "PyTorch" and pair.left:
                out.append("")  # the PyTorch lines start apart from the NumPy ones
            where = f"{src.label}:{seg.start}-{seg.end}" if seg else f"(no {name} twin)"
            out.append(paint.dim(_fit(f"{' ' * numw} {name}: {where}", width)))
            if seg:
                out += [t.rstrip() for t, _ in _rows(seg, src, width - numw - 1, numw, paint, g)]
    return out


def _render_side(pairs, left, right, width, paint, g) -> list[str]:
    """Two columns, NumPy on the left: a pair's ``def`` lines face each other."""
    col = max(NARROWEST // 2, (width - len(g.sep)) // 2)
    numw = max([3] + [len(str(len(s.lines))) for s in (left, right) if s])
    code_w = col - numw - 1

    def label_cell(seg: Segment | None, label: str) -> str:
        if seg is None:
            return " " * col
        text = f"{g.rule * 2} {_fit(label, col - 6)} "
        return paint.dim(text + g.rule * (col - _width(text)))

    def cells(seg: Segment | None, src: Source | None) -> tuple[list[str], int]:
        """The column's rows, and how many stand above the ``def`` line."""
        if seg is None:
            return [], 0
        rows = [t + " " * max(0, col - w) for t, w in _rows(seg, src, code_w, numw, paint, g)]
        return rows, len(_rows(replace(seg, end=seg.def_line - 1), src, code_w, numw, paint, g))

    names = [_fit(s.label if s else "(no twin)", col) for s in (left, right)]
    out = [
        paint.bold(names[0]) + " " * (col - _width(names[0])) + g.sep + paint.bold(names[1]),
        g.rule * col + g.cross + g.rule * col,
    ]
    blank = " " * col
    for idx, pair in enumerate(pairs):
        if idx:
            out.append(blank + g.sep.rstrip())
        out.append(
            (
                label_cell(pair.left, pair.label) + g.sep + label_cell(pair.right, pair.label)
            ).rstrip()
        )
        (a, above_a), (b, above_b) = cells(pair.left, left), cells(pair.right, right)
        if pair.left and pair.right:  # the two def lines face each other
            a, b = [blank] * (above_b - above_a) + a, [blank] * (above_a - above_b) + b
        out += [(x + g.sep + y).rstrip() for x, y in zip_longest(a, b, fillvalue=blank)]
    return out


# -- command ----------------------------------------------------------------------------------
def add_arguments(p: argparse.ArgumentParser) -> None:
    on_tty = "(default: on when stdout is a terminal"
    p.add_argument(
        "component",
        metavar="COMPONENT",
        help="a file stem (attention, norm) or a class (LayerNorm)",
    )
    p.add_argument("--method", metavar="NAME", help="one function or method: SelfAttention.forward")
    yes_no = argparse.BooleanOptionalAction
    p.add_argument("--color", action=yes_no, help=f"syntax colour with Pygments {on_tty})")
    p.add_argument("--background", choices=("dark", "light"), default="dark", help="for colours")
    p.add_argument(
        "--width", type=int_range(NARROWEST, 10_000), help="default: the terminal's, else 100"
    )
    p.add_argument(
        "--layout",
        choices=("auto", "side", "stacked"),
        default="auto",
        help=f"two columns, or one above the other; 'auto': side from {SIDE_BY_SIDE_MIN} columns",
    )
    p.add_argument(
        "--workspace", metavar="DIR", help="your code (default: $TWINFORMER_WORKSPACE, workspace/)"
    )
    p.add_argument("--pager", action=yes_no, help=f"$PAGER, else less -R {on_tty} and filled)")


def _want_color(flag: bool | None) -> bool:
    try:
        import pygments  # noqa: F401
    except ImportError:
        if flag:
            print("note: --color needs Pygments (pip install Pygments)", file=sys.stderr)
        return False
    return flag if flag is not None else sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def terminal_size() -> tuple[int, int]:
    """(columns, lines): ``$COLUMNS``/``$LINES``, else the terminal of stdout, stderr or
    stdin (stdout may be a pipe: ``| less``), else (:data:`PIPED_WIDTH`, 40)."""
    size = (PIPED_WIDTH, 40)
    for stream in (sys.stdin, sys.stderr, sys.stdout):  # stdout wins, then stderr
        try:
            size = os.get_terminal_size(stream.fileno())
        except (AttributeError, ValueError, OSError):
            continue
    env = [os.environ.get(var, "") for var in ("COLUMNS", "LINES")]
    return tuple(
        int(e) if e.isdigit() and int(e) > 0 else n for e, n in zip(env, size, strict=True)
    )


def _page(text: str) -> bool:
    """Show ``text`` through ``$PAGER`` (else ``less -R``); False when no pager ran."""
    pager = os.environ.get("PAGER", "").strip()  # a command line, run by the shell as git does
    if not pager and not shutil.which("less"):
        return False
    env = {"LESS": "FRX", **os.environ}  # quit at the end of one screen, keep colours, no clear
    try:
        proc = subprocess.Popen(pager or "less -R", shell=True, stdin=subprocess.PIPE, env=env)
    except OSError:
        return False
    try:
        encoding = sys.stdout.encoding or "utf-8"
        proc.stdin.write(text.encode(encoding, errors="replace"))
        proc.stdin.close()
    except BrokenPipeError:  # the reader quit early (q in less)
        pass
    proc.wait()
    return True


def with_formulas(chosen: list[Pair], everything: list[Pair], left, right) -> list[Pair]:
    """``chosen``, and after a pair whose PyTorch side calls a ``torch.nn.functional``
    function (``F.layer_norm``), the NumPy formula functions its NumPy side calls
    (``layer_norm``): the diff then sets formula beside formula, and says so."""
    functions = {p.qualname: p for p in everything if p.left and p.left.kind == "function"}
    out = list(chosen)
    for pair in chosen:
        if not (pair.left and pair.right):
            continue
        torch_lines = "\n".join(right.lines[pair.right.start - 1 : pair.right.end])
        numpy_lines = "\n".join(left.lines[pair.left.start - 1 : pair.left.end])
        calls = re.findall(r"\bF\.(\w+)\(", torch_lines)
        for name, formula in functions.items():
            called = re.search(rf"(?<![.\w]){name}\(", numpy_lines)
            if calls and called and formula not in out:
                out.append(Pair(f"{name}#torch calls F.{calls[0]}", formula.left, None))
    return out


def main(args: argparse.Namespace) -> int:
    comp = resolve_component(args.component)
    ws = Workspace(workspace_dir(args.workspace))
    if args.workspace and not ws.exists():
        raise UserError(f"--workspace: no workspace at {_show(ws.root)} (labs start NN makes one)")
    mine = ws.package / f"{comp}.py"
    try:
        left = load_source(mine, _show(mine)) if mine.is_file() else None
    except SyntaxError as e:
        raise UserError(f"{_show(mine)} does not parse, line {e.lineno}: {e.msg}") from None
    left = left or load_source(NUMPY_DIR / f"{comp}.py")
    right = load_source(TORCH_DIR / f"{comp}.py")
    pairs = everything = pair_sources(left, right)
    if args.method:
        method = args.method
        if "." not in method and args.component not in (comp, f"{comp}.py"):
            # `diff LayerNorm --method forward`: that class's forward, not RMSNorm's
            qualified = f"{Path(args.component).stem}.{method}"
            if any(p.qualname == qualified for p in pairs):
                method = qualified
        pairs = with_formulas(select_method(pairs, method), everything, left, right)
    columns, rows = terminal_size()
    paint = _Painter(_want_color(args.color), args.background)
    lines = render_text(pairs, left, right, args.width or columns, paint, args.layout)
    text = "\n".join(lines) + "\n"
    pager = args.pager if args.pager is not None else sys.stdout.isatty() and len(lines) >= rows
    if pager:
        sys.stdout.flush()
        if _page(text):
            return 0
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 0
