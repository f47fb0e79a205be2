"""The NumPy and PyTorch twins of a component, cut into pieces and paired.

Each file is cut with :mod:`ast`: the preamble (docstring, imports, constants), each
top-level function, each class header and each method. Pieces pair by qualified name
(``SelfAttention.forward``) in the NumPy file's order; a piece with no twin faces blank
space, PyTorch-only pieces slot in where the PyTorch file has them. ``diff.py`` renders
the pairs in a terminal, ``docs.py`` as HTML.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from .. import UserError

ROOT = Path(__file__).resolve().parents[2]
NUMPY_DIR = ROOT / "numpy_impl"
TORCH_DIR = ROOT / "torch_impl"

#: Qualified name of the piece before the first function or class.
MODULE = "<module>"
TAB = 4

Tokens = list[tuple[object, str]]  # (Pygments token type or None, text), one source line


# -- parsing: a file cut into named pieces ---------------------------------------------------
@dataclass(frozen=True)
class Segment:
    """Lines ``start`` .. ``end`` of a file (1-based, inclusive); ``def_line``, the
    ``def``/``class`` line after decorators and comments, aligns a pair's two sides."""

    qualname: str  # "<module>", "softmax", "SelfAttention", "...forward"
    kind: str  # "module" | "function" | "class" | "method"
    start: int
    end: int
    def_line: int
    decorators: tuple[str, ...] = ()


@dataclass
class _Item:
    """A top-level function or class (with its methods), or a method."""

    name: str
    kind: str
    seg: Segment  # for a class: its header only
    whole: Segment  # for a class: header and methods
    methods: list[_Item] = field(default_factory=list)


@dataclass
class Source:
    """One implementation file: its text, lines and pieces."""

    path: Path
    label: str  # "numpy_impl/attention.py"
    lines: list[str]
    preamble: Segment | None
    items: list[_Item]

    @cached_property
    def line_tokens(self) -> list[Tokens]:
        """Pygments tokens of every line, lexed as one file (docstrings stay strings)."""
        from pygments.lexers import PythonLexer

        tokens: list[Tokens] = [[]]
        for ttype, value in PythonLexer(stripnl=False).get_tokens("\n".join(self.lines) + "\n"):
            for i, part in enumerate(value.split("\n")):
                if i:
                    tokens.append([])
                if part:
                    tokens[-1].append((ttype, part))
        return tokens[: len(self.lines)] + [[] for _ in range(len(self.lines) - len(tokens))]


def load_source(path: Path, label: str | None = None, text: str | None = None) -> Source:
    """Read and cut one Python file into its pieces (``text``: its text, given)."""
    text = (path.read_text(encoding="utf-8") if text is None else text).expandtabs(TAB)
    lines = text.splitlines()
    tree = ast.parse(text, filename=str(path))
    items = _items(tree.body, lines, len(lines), prefix="")
    first = items[0].whole.start if items else len(lines) + 1
    end = _trim_end(lines, 1, first - 1)
    preamble = Segment(MODULE, "module", 1, end, 1) if end >= 1 else None
    inside = path.resolve().is_relative_to(ROOT)
    label = label or (path.resolve().relative_to(ROOT).as_posix() if inside else path.name)
    return Source(path, label, lines, preamble, items)


def _start(node: ast.AST, lines: list[str]) -> int:
    """First line of a definition: its decorators and the comments just above it."""
    s = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
    while s > 1 and lines[s - 2].strip().startswith("#"):
        s -= 1
    return s


def _trim_end(lines: list[str], start: int, end: int) -> int:
    while end >= start and not lines[end - 1].strip():
        end -= 1
    return end


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _items(body: list[ast.stmt], lines: list[str], limit: int, prefix: str) -> list[_Item]:
    """The definitions among ``body``; each runs up to the next one (or ``limit``),
    keeping the statements after it (a constant, an ``if __name__``)."""
    defs = [n for n in body if isinstance(n, _DEFS)]
    starts = [_start(n, lines) for n in defs]
    out = []
    for i, node in enumerate(defs):
        start = starts[i]
        stop = starts[i + 1] - 1 if i + 1 < len(defs) else max(limit, node.end_lineno)
        end = _trim_end(lines, start, stop)
        qual = prefix + node.name
        decos = tuple("@" + ast.unparse(d) for d in getattr(node, "decorator_list", []))
        if isinstance(node, ast.ClassDef) and not prefix:
            methods = _items(node.body, lines, end, prefix=qual + ".")
            head_end = _trim_end(lines, start, methods[0].whole.start - 1) if methods else end
            seg = Segment(qual, "class", start, head_end, node.lineno)
            whole = Segment(qual, "class", start, end, node.lineno)
            out.append(_Item(node.name, "class", seg, whole, methods))
        else:
            kind = "class" if isinstance(node, ast.ClassDef) else "method" if prefix else "function"
            seg = Segment(qual, kind, start, end, node.lineno, decos)
            out.append(_Item(node.name, kind, seg, seg))
    return out


# -- pairing ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pair:
    """One row block: a piece of the NumPy file and its PyTorch twin (either may be None)."""

    key: str  # qualified name, "#2" appended to a repeated one (a property's setter)
    left: Segment | None
    right: Segment | None
    twin_name: str = ""  # the PyTorch name, when it differs (:data:`TWIN_NAMES`)

    @property
    def qualname(self) -> str:
        return self.key.split("#")[0]

    @property
    def anchor(self) -> str:
        """``SelfAttention-forward``; ``module`` for the preamble."""
        if self.key == MODULE:
            return "module"
        return self.key.replace(".", "-").replace("#", "-")

    @property
    def label(self) -> str:
        if self.key == MODULE:
            return "module docstring and imports"
        seg = self.left or self.right
        prefix = "class " if seg.kind == "class" else ""
        suffix = ""
        if "#" in self.key:  # a repeated name: say which, by its decorator if it has one
            suffix = f" ({seg.decorators[0] if seg.decorators else self.key.split('#')[1]})"
        if self.twin_name and self.right is not None:
            suffix += f" / {self.twin_name}"
        return prefix + self.qualname + suffix


#: Twins whose names differ, paired by hand: file stem -> {NumPy name: PyTorch name}
#: (top-level definitions). Every other piece pairs with the piece of the same name.
TWIN_NAMES: dict[str, dict[str, str]] = {
    # the pattern checked (and compiled), and the pre-tokenizer: the regex split on the
    # NumPy side, Hugging Face's ByteLevel pre-tokenizer on the PyTorch side
    "byte_level": {"_compile": "_check_pattern", "pre_tokenize": "_byte_level"},
    # the helper apply_rope uses for the "half" layout: the two halves of the features
    "rope": {"_pairs": "rotate_half"},
}


def _keys(names: list[str]) -> list[str]:
    """Names made unique by occurrence: ``["f", "f"]`` -> ``["f", "f#2"]``."""
    seen: dict[str, int] = {}
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}#{seen[n]}")
    return out


def _merge(left: list[str], right: list[str]) -> list[tuple[int | None, int | None]]:
    """Walk ``left`` in order, pairing equal keys; right-only keys are slotted in
    just before the next paired key that follows them on the right."""
    rpos = {k: j for j, k in enumerate(right)}
    only_right = [j for j, k in enumerate(right) if k not in set(left)]
    out: list[tuple[int | None, int | None]] = []
    for i, k in enumerate(left):
        j = rpos.get(k)
        while j is not None and only_right and only_right[0] < j:
            out.append((None, only_right.pop(0)))
        out.append((i, j))
    return out + [(None, j) for j in only_right]


def _select(items: list[_Item], only) -> list[_Item]:
    kinds = {"functions": "function", "classes": "class"}
    if only is None or only in kinds:
        return [it for it in items if only is None or it.kind == kinds[only]]
    return [it for it in items if it.name in only]


def pair_sources(left: Source | None, right: Source | None, only=None) -> list[Pair]:
    """The pieces of two twin files, paired by qualified name, in the left file's order;
    ``only``: ``"functions"``, ``"classes"`` or top-level names (and the preamble)."""
    preambles = (left.preamble if left else None, right.preamble if right else None)
    pairs = [Pair(MODULE, *preambles)] if any(preambles) else []
    twins = TWIN_NAMES.get(left.path.stem, {}) if left and right else {}
    renamed = {t: n for n, t in twins.items()}
    litems = _select(left.items, only) if left else []
    ritems = (
        [replace(it, name=renamed.get(it.name, it.name)) for it in right.items] if right else []
    )
    ritems = _select(ritems, only)
    for pair in _pair_items(litems, ritems, prefix=""):
        if pair.key in twins and pair.right is not None:
            pair = replace(pair, twin_name=twins[pair.key])
        pairs.append(pair)
    return pairs


def _one_sided(item: _Item, key: str, side: str) -> list[Pair]:
    keys = [key] + [f"{key}.{k}" for k in _keys([m.name for m in item.methods])]
    segs = [item.seg] + [m.seg for m in item.methods]
    pairs = [Pair(k, seg, None) for k, seg in zip(keys, segs, strict=True)]
    return pairs if side == "left" else [Pair(p.key, None, p.left) for p in pairs]


def _pair_items(litems: list[_Item], ritems: list[_Item], prefix: str) -> list[Pair]:
    lkeys, rkeys = _keys([it.name for it in litems]), _keys([it.name for it in ritems])
    out: list[Pair] = []
    for i, j in _merge(lkeys, rkeys):
        if j is None:
            out += _one_sided(litems[i], prefix + lkeys[i], "left")
        elif i is None:
            out += _one_sided(ritems[j], prefix + rkeys[j], "right")
        else:
            a, b, key = litems[i], ritems[j], prefix + lkeys[i]
            if a.kind == b.kind == "class":
                out.append(Pair(key, a.seg, b.seg))
                out += _pair_items(a.methods, b.methods, prefix=key + ".")
            else:  # a class against a function: compare them whole
                out.append(Pair(key, a.whole, b.whole))
    return out


# -- components -------------------------------------------------------------------------------
def _stems(directory: Path) -> set[str]:
    return {p.stem for p in directory.glob("*.py") if not p.stem.startswith("__")}


def components() -> list[str]:
    """File stems present in both ``numpy_impl/`` and ``torch_impl/``."""
    return sorted(_stems(NUMPY_DIR) & _stems(TORCH_DIR))


def resolve_component(name: str) -> str:
    """A component's file stem from a stem (``norm``), a path (``numpy_impl/norm.py``)
    or a class or function name (``LayerNorm``, ``filter_logits``)."""
    valid = components()
    stem = Path(name).stem if name.endswith(".py") else name
    if stem in valid:
        return stem
    if stem.lower() in valid:
        return stem.lower()
    for comp in valid:
        for directory in (NUMPY_DIR, TORCH_DIR):
            if name in {it.name for it in load_source(directory / f"{comp}.py").items}:
                return comp
    only_numpy = _stems(NUMPY_DIR) - _stems(TORCH_DIR)
    hint = " (NumPy only: it has no PyTorch twin)" if stem in only_numpy else ""
    raise UserError(
        f"unknown component {name!r}{hint}; choose one of: {', '.join(valid)} "
        "(or a class name such as LayerNorm)"
    )


def select_method(pairs: list[Pair], method: str) -> list[Pair]:
    """The pairs named ``method``: a qualified name (``SelfAttention.forward``)
    or its last part (``forward``) when that is unambiguous."""
    exact = [p for p in pairs if method in (p.key, p.qualname, p.twin_name)]
    if exact:
        return exact
    tail = [p for p in pairs if p.qualname.rsplit(".", 1)[-1] == method]
    owners = sorted({p.qualname for p in tail})
    if len(owners) == 1:
        return tail
    names = sorted({p.qualname for p in pairs if p.key != MODULE})
    if owners:
        raise UserError(f"--method {method!r} is ambiguous; choose one of: {', '.join(owners)}")
    raise UserError(f"no method or function {method!r} here; choose one of: {', '.join(names)}")
