"""``python -m labs diff COMPONENT``: the NumPy and PyTorch twins, method by method.

    python -m labs diff attention
    python -m labs diff LayerNorm                       # a class name finds its file
    python -m labs diff attention --method forward      # one method only
    python -m labs diff gpt --no-pager | grep def

The NumPy side is the learner's workspace when there is one (``--workspace``, else
``$TWINFORMER_WORKSPACE``, else ``workspace/``), else ``numpy_impl/``. From
:data:`SIDE_BY_SIDE_MIN` columns of terminal (100 when piped without one) the files
stand side by side, ``forward`` facing ``forward``; narrower, stacked (``--layout``
chooses). Line numbers are the files' own; a long line wraps, ``↪`` in the gutter.
On a terminal the output is paged (``$PAGER``, else ``less -R``) and coloured by
Pygments (``--no-color`` or ``NO_COLOR``: plain). The pairs come from ``diff_pairs.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import unicodedata
from dataclasses import dataclass
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

MIN_COLUMN = 56  # narrowest column of the side-by-side layout, in characters
SIDE_BY_SIDE_MIN = 2 * MIN_COLUMN + 3  # 115: narrower terminals get the stacked layout
PIPED_WIDTH = 100  # the width when no terminal says otherwise
NARROWEST = 40  # below this the text is laid out 40 wide all the same
WIDEST = 10_000  # the widest --width taken


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
    layout: str = "auto",
) -> list[str]:
    """The pairs as lines of text at most ``width`` columns wide (never under
    :data:`NARROWEST`): side by side from :data:`SIDE_BY_SIDE_MIN` columns up (or with
    ``layout="side"``), stacked below (or with ``layout="stacked"``)."""
    width = max(NARROWEST, width)
    if layout == "auto":
        layout = "side" if width >= SIDE_BY_SIDE_MIN else "stacked"
    render = _render_side if layout == "side" else _render_stacked
    return render(pairs, left, right, width, _Painter(color, background), glyphs or _Glyphs())


def _rows(seg: Segment, src: Source, code_w: int, numw: int, paint, g) -> list[tuple[str, int]]:
    """The lines of ``seg`` as display rows ``(text, shown width)``: the line number,
    then the code wrapped to ``code_w`` columns (continuations marked in the gutter)."""
    toks = src.line_tokens() if paint.color else [[(None, ln)] for ln in src.lines]
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
    code_w = width - numw - 1
    names = [s.label if s else "(no twin)" for s in (left, right)]
    sides = ("NumPy", "PyTorch")
    out = [
        paint.bold(_fit(f"{sides[0]}: {names[0]}", width)),
        paint.bold(_fit(f"{sides[1]}: {names[1]}", width)),
        g.rule * width,
    ]
    for idx, pair in enumerate(pairs):
        if idx:
            out.append("")
        text = f"{g.rule * 2} {_fit(pair.label, width - 6)} "
        out.append(paint.bold(text + g.rule * (width - _width(text))))
        for side, (seg, src) in enumerate(((pair.left, left), (pair.right, right))):
            if side and pair.left:
                out.append("")  # the PyTorch lines start apart from the NumPy ones
            if seg is None:
                twin = "no PyTorch twin" if side else "no NumPy twin"
                out.append(paint.dim(_fit(f"{' ' * numw} {sides[side]}: ({twin})", width)))
                continue
            where = f"{src.label}:{seg.start}-{seg.end}"
            out.append(paint.dim(_fit(f"{' ' * numw} {sides[side]}: {where}", width)))
            out += [text.rstrip() for text, _ in _rows(seg, src, code_w, numw, paint, g)]
    return out


def _render_side(pairs, left, right, width, paint, g) -> list[str]:
    """Two columns, NumPy on the left: a pair's ``def`` lines face each other."""
    col = max(NARROWEST // 2, (width - len(g.sep)) // 2)
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
        rows = _rows(seg, src, code_w, numw, paint, g)
        return [text + " " * max(0, col - shown) for text, shown in rows]

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
        type=int_range(NARROWEST, WIDEST),
        help="total width in columns (default: the terminal's; 100 when there is none)",
    )
    p.add_argument(
        "--layout",
        choices=("auto", "side", "stacked"),
        default="auto",
        help=f"'side': NumPy and PyTorch in two columns; 'stacked': one above the other; "
        f"'auto': side by side from {SIDE_BY_SIDE_MIN} columns up",
    )
    p.add_argument(
        "--workspace",
        metavar="DIR",
        help="show your code from this workspace (default: $TWINFORMER_WORKSPACE, else "
        "workspace/ in the repository, when it exists; else the repository's numpy_impl/)",
    )
    p.add_argument(
        "--pager",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="page the output ($PAGER, else less -R) (default: on when stdout is a terminal "
        "and the output is taller than it)",
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


def terminal_size() -> tuple[int, int]:
    """(columns, lines) of the terminal the command runs in: ``$COLUMNS``/``$LINES``,
    else the terminal of stdout, stderr or stdin (stdout may be a pipe: ``| less``),
    else (:data:`PIPED_WIDTH`, 40)."""
    size = None
    for stream in (sys.stdout, sys.stderr, sys.stdin):
        try:
            size = os.get_terminal_size(stream.fileno())
            break
        except (AttributeError, ValueError, OSError):
            continue
    cols, lines = (size.columns, size.lines) if size else (PIPED_WIDTH, 40)
    for var in ("COLUMNS", "LINES"):
        value = os.environ.get(var, "")
        if value.isdigit() and int(value) > 0:
            cols, lines = (int(value), lines) if var == "COLUMNS" else (cols, int(value))
    return cols, lines


def _page(text: str) -> bool:
    """Show ``text`` through ``$PAGER`` (else ``less -R``); False when no pager ran."""
    pager = os.environ.get("PAGER", "").strip()
    env = {**os.environ}
    env.setdefault("LESS", "FRX")  # quit at the end of one screen, keep colours, no clear
    try:
        if pager:  # the user's command line, run by the shell as git runs it
            proc = subprocess.Popen(pager, shell=True, stdin=subprocess.PIPE, env=env)
        elif shutil.which("less"):
            proc = subprocess.Popen(["less", "-R"], stdin=subprocess.PIPE, env=env)
        else:
            return False
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
    lines = render_text(
        pairs,
        left,
        right,
        width=args.width if args.width is not None else columns,
        color=_want_color(args.color),
        background=args.background,
        glyphs=_Glyphs.for_stream(sys.stdout),
        layout=args.layout,
    )
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
