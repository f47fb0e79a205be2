"""``python -m labs docs``: a static HTML site of the chapters, the reference pages and the code.

    python -m labs docs                    # -> docs/site/index.html
    python -m labs docs --out /tmp/site
    python -m labs docs --figures run      # run every lab again for its figures
    python -m labs docs --no-solutions     # each exercise region as its TODO lines only

A page per chapter: its README (maths as MathML, ``docs_math.py``; figures,
``docs_figures.py``), then the NumPy and PyTorch code (:data:`CHAPTER_CODE` and every
exercise region it leaves out) side by side as ``labs diff`` pairs them, the exercise
tinted. ``docs/*.md`` are pages too. The search runs offline: MiniSearch 7.2.0
(``site_assets/``, MIT) over ``search-index.js``. Needs the ``docs`` extra.
"""

from __future__ import annotations

import argparse
import html
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from .. import UserError
from .diff_pairs import NUMPY_DIR, ROOT, TORCH_DIR, components, load_source, pair_sources
from .docs_figures import FIGURE_MODES, ChapterFigures
from .docs_figures import collect as collect_figures
from .docs_html import (
    _code_cell,
    _exercise_lines,
    _side_name,
    _toc_list,
    markdown_page,
    page,
    write_assets,
)
from .exercises_fences import CHAPTERS, Reference
from .release import without_solutions

LABS_DIR = ROOT / "labs"
DOCS_DIR = ROOT / "docs"
#: Written into every site: a folder holding it is a previous site, rebuilt in place.
SITE_MARKER = ".twinformer-site"
_solved = cache(Reference)


@dataclass(frozen=True)
class Part:
    """A component shown on a chapter page; ``only``: ``"functions"``, ``"classes"`` or
    top-level names; ``numpy_only``: the NumPy column alone (no twin)."""

    component: str
    only: str | tuple[str, ...] | None = None
    note: str = ""
    numpy_only: bool = False


_SHARED = "has no PyTorch twin: both backends use this one, so only the NumPy column is shown"
#: chapter number -> the code it covers (a chapter missing here: its README only).
CHAPTER_CODE: dict[str, tuple[Part, ...]] = {
    "01": (Part("char_tokenizer", ("CharTokenizer",), f"CharTokenizer {_SHARED}.", True),),
    "02": (Part("embedding"), Part("linear")),
    "03": (
        Part(
            "attention",
            ("softmax", "scaled_dot_product_attention", "scaled_dot_product_attention_backward"),
            "The functions; the module follows in chapter 04.",
        ),
    ),
    "04": (
        Part(
            "attention",
            ("split_heads", "merge_heads", "SelfAttention"),
            "The heads and the module; the attention function is chapter 03's.",
        ),
        Part("multihead_attention", ("MultiHeadAttention",), "The same core, torch's layout."),
    ),
    "05": (Part("positional"),),
    "06": (Part("activations"), Part("ffn")),
    "07": (Part("norm"), Part("block")),
    "08": (Part("gpt"),),
    "09": (Part("loss"), Part("optim")),
    "10": (Part("sampling"),),
    "11": (
        Part(
            "tokenizer",
            ("get_pair_counts", "merge", "train_bpe_plain", "BPETokenizer"),
            "Byte-level BPE: from scratch on the left, HF tokenizers on the right.",
        ),
        Part(
            "byte_level",
            ("bytes_to_unicode", "token_to_str", "str_to_token", "pre_tokenize"),
            "The bytes, their printable spelling, GPT-2's pre-tokenization.",
        ),
        Part("bpe_trainer", ("train_bpe",), "The fast trainer; HF's BpeTrainer on the right."),
        Part(
            "tokenizer_files",
            ("tokenizer_to_json", "write_atomically", "parse_tokenizer_json", "DecodeStream"),
            "tokenizer.json, and decoding a stream of ids.",
        ),
    ),
    "12": (Part("flash_attention"), Part("kv_cache")),
    "13": (Part("rope"),),
    "14": (
        Part("norm", ("RMSNorm",), "LayerNorm is chapter 07's."),
        Part("activations", ("ReLU", "SiLU"), "GELU is chapter 06's."),
        Part("ffn", ("SwiGLUFeedForward",), "FeedForward is chapter 06's."),
        Part("block"),
    ),
    "15": (
        Part(
            "masks",
            ("causal_attn_mask", "key_padding_attn_mask", "combine_attn_mask", "to_attn_mask"),
            "The mask helpers (docs/masks.md).",
        ),
        Part("encoder"),
    ),
    "16": (
        Part(
            "attention",
            ("SelfAttention",),
            "Cross-attention is SelfAttention called with kv: the kv branches of project "
            "and project_backward are this chapter's; the rest is chapter 04's.",
        ),
        Part("seq2seq"),
    ),
    "17": (Part("pretrained", None, f"The state-dict mapping (NumPy arrays) {_SHARED}.", True),),
}


@dataclass(frozen=True)
class Chapter:
    number: str  # "03"
    slug: str  # "03_attention"
    directory: Path  # labs/03_attention (may not exist yet)
    readme: Path | None  # None: not written yet
    parts: tuple[Part, ...]
    title: str  # the README's first heading, else "Chapter 03: attention"

    @property
    def page(self) -> str:
        return f"{self.slug}.html"


def chapters(labs_dir: Path = LABS_DIR) -> list[Chapter]:
    """Every ``labs/NN_topic/`` folder and every chapter of the course, folder or not."""
    folders = sorted(labs_dir.glob("[0-9][0-9]_*"), reverse=True)  # the first of a number wins
    found = {d.name[:2]: d.name for d in folders if d.is_dir()}
    out = []
    for number in sorted(set(found) | set(CHAPTERS)):
        slug = found.get(number) or CHAPTERS[number][1]
        readme = labs_dir / slug / "README.md"
        readme = readme if readme.is_file() else None
        title = f"Chapter {number}: {slug[3:].replace('_', ' ')}"
        title = _title(readme, title) if readme else title
        parts = CHAPTER_CODE.get(number, ())
        out.append(Chapter(number, slug, labs_dir / slug, readme, parts, title))
    return out


def _source(path: Path, solutions: bool):
    """A NumPy file cut into pieces; without ``solutions``, every exercise region a stub."""
    return load_source(path, text=None if solutions else _solved().render(path.name, CHAPTERS))


def exercise_parts(number: str, parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """``parts``, then a part for each exercise region of chapter ``number`` (found by
    its fences in numpy_impl/) that ``parts`` do not show: its top-level function or class."""
    shown = set()  # (component, line)
    for part in parts:
        path = NUMPY_DIR / f"{part.component}.py"
        for p in pair_sources(load_source(path), None, part.only) if path.is_file() else []:
            shown |= {(part.component, n) for n in range(p.left.start, p.left.end + 1)}
    missing: dict[str, list[str]] = {}
    for r in _solved().chapter_regions(number):
        if (stem := r.file.removesuffix(".py"), r.begin + 1) not in shown:
            missing.setdefault(stem, []).append(r.function.split(".")[0])
    note = "More of this chapter's exercise."
    return parts + tuple(Part(c, tuple(dict.fromkeys(n)), note) for c, n in missing.items())


def _component_html(part: Part, number: str, solutions: bool = True):
    """``(section id, html, [(anchor, label, badge html)], any line tinted)``."""
    comp = part.component
    npath, tpath = NUMPY_DIR / f"{comp}.py", TORCH_DIR / f"{comp}.py"
    left = _source(npath, solutions) if npath.is_file() else None
    right = load_source(tpath) if tpath.is_file() and not part.numpy_only else None
    only = (part.only,) if isinstance(part.only, str) else part.only or ()
    section_id = "-".join(("code", comp, *only))
    if left is None and right is None:
        body = f'<p class="note">No <code>{comp}.py</code> in numpy_impl/ or torch_impl/ yet.</p>'
        return section_id, body, [], False
    single = left is None or right is None
    tinted = _exercise_lines(left, number) if left else set()
    rows, toc = [], []
    for pair in pair_sources(left, right, part.only):
        anchor = f"{comp}-{pair.anchor}"
        badge = "" if single else _side_name(pair)
        toc.append((anchor, pair.label, badge))
        rows.append(
            f'<div class="pair-label" id="{html.escape(anchor)}"><a class="anchor" '
            f'href="#{html.escape(anchor)}">#</a>'
            f"<code>{html.escape(pair.label)}</code> {badge}</div>"
        )
        tops = [s.def_line - s.start if s else 0 for s in (pair.left, pair.right)]
        hi = max(tops) if pair.left and pair.right else 0
        if left is not None:
            rows.append(_code_cell(pair.left, left, hi - tops[0], tinted, "numpy", anchor))
        if right is not None:
            rows.append(_code_cell(pair.right, right, hi - tops[1], set(), "torch", anchor))
    klass = "twin single" if single else "twin"
    files = "".join(f"<div><code>{s.label}</code></div>" for s in (left, right) if s is not None)
    notes = [html.escape(part.note)] if part.note else []
    if single and not part.note:
        missing = "PyTorch" if right is None else "NumPy"
        notes.append(f"No {missing} twin of <code>{comp}.py</code> yet: one column only.")
    note = "".join(f'<p class="note">{n}</p>' for n in notes)
    files = f'<div class="files"><div class="{klass}">{files}</div></div>'
    body = f'{note}<div class="{klass}">\n{files}\n' + "\n".join(rows) + "\n</div>"
    return section_id, body, toc, bool(tinted)


# -- pages ------------------------------------------------------------------------------------
@dataclass
class _Site:
    """What every page shares: the sidebar's entries, the pages a link may name, the search."""

    out_dir: Path
    groups: dict[str, list[tuple[str, str]]]  # "Chapters" -> [(page, label)]
    pages: dict[Path, str]  # a README, chapter folder or docs/*.md, resolved -> its page
    solutions: bool = True
    search: dict[str, dict] = field(default_factory=dict)  # id -> a search entry

    def sidebar(self, current: str) -> str:
        out = ['<nav class="sidebar"><label for="menu" class="close">close ✕</label>']
        for group, entries in self.groups.items():
            out.append(f"<h2>{group}</h2><ul>")
            for pg, label in entries:
                mark = ' aria-current="page"' if pg == current else ""
                out.append(f'<li><a href="{pg}"{mark}>{html.escape(label)}</a></li>')
            out.append("</ul>")
        return "".join(out) + "</nav>"

    def markdown(self, path: Path, pg: str, title: str, figures: ChapterFigures | None = None):
        """A Markdown file as HTML and its contents; its sections go into the search."""
        text = path.read_text(encoding="utf-8")
        text = text if self.solutions else without_solutions(text)  # no quotes of a solution
        try:
            prose, toc, sections = markdown_page(
                text, path.parent, self.out_dir, self.pages, figures
            )
        except ValueError as e:  # a formula latex2mathml cannot render (docs_math.py)
            raise UserError(f"{path.relative_to(path.parents[1]).as_posix()}: {e}") from None
        for anchor, heading, words in sections:
            self.index(pg, anchor, title, heading or title, words)
        return prose, toc

    def index(self, pg: str, anchor: str, title: str, heading: str, text: str = "") -> None:
        key = f"{pg}#{anchor}" if anchor else pg
        self.search.setdefault(key, {"id": key, "title": title, "heading": heading, "text": text})


def _prose_page(title: str, prose: str, contents: str, site: _Site, pg: str, pager="", code=""):
    """A page: its prose with ``contents`` under its title, then ``code``."""
    toc = f'<nav class="toc"><h2>On this page</h2><div>{contents}</div></nav>'
    head, sep, rest = prose.partition("</h1>")
    prose = f"{head}{sep}\n{toc}\n{rest}" if sep else f"{toc}\n{prose}"
    return page(title, f'<div class="prose">{prose}</div>{code}', site.sidebar(pg), pager)


def chapter_page(ch: Chapter, site: _Site, all_chapters: list[Chapter], figures=None) -> str:
    if ch.readme is not None:
        prose, toc_tokens = site.markdown(ch.readme, ch.page, ch.title, figures)
    else:
        prose = (
            f'<h1>{html.escape(ch.title)}</h1>\n<p class="note">This chapter\'s '
            f"<code>labs/{ch.slug}/README.md</code> is not written yet; its code follows.</p>"
        )
        toc_tokens = []
    sections, code_toc, tinted = [], [], False
    for part in exercise_parts(ch.number, ch.parts):
        section_id, rendered, pair_toc, tinted_here = _component_html(
            part, ch.number, site.solutions
        )
        tinted |= tinted_here
        comp = html.escape(part.component)
        sections.append(
            f'<section class="component" id="{section_id}">\n<h3>{comp}</h3>\n'
            f"{rendered}\n</section>"
        )
        pairs = "".join(
            f'<li><a href="#{html.escape(a)}"><code>{html.escape(label)}</code></a> {badge}</li>'
            for a, label, badge in pair_toc
        )
        code_toc.append(
            f'<li><a href="#{section_id}"><b>{comp}</b></a><ul class="pairs">{pairs}</ul></li>'
        )
        for anchor, label, _ in pair_toc:
            site.index(ch.page, anchor, ch.title, label, f"{part.component} code")

    reading = _toc_list(toc_tokens)
    toc = f"<div><b>Reading</b>{reading}</div>" if reading.strip("<ul>/") else ""
    if code_toc:
        toc += '<div style="flex: 1"><b><a href="#code">Code</a></b>'
        toc += f"<ul>{''.join(code_toc)}</ul></div>"

    code = ""
    if sections:
        stub = "." if site.solutions else ", here as the learner's stub: its TODO lines."
        legend = (
            f'<p class="legend"><mark>Tinted lines</mark> are this chapter\'s exercise: the '
            f"NumPy code between <code>### BEGIN SOLUTION ch{ch.number}</code> and "
            f"<code>### END SOLUTION</code>{stub}</p>"
        )
        twins = dict.fromkeys(p.component for p in ch.parts if p.component in components())
        terminal = ", ".join(f"<code>python -m labs diff {c}</code>" for c in twins)
        code = (
            '<h2 class="code" id="code">The two implementations</h2>\n'
            '<p class="legend">NumPy (hand-written backward) on the left, PyTorch on the '
            "right (one above the other in a narrow window), paired by class and method; a "
            "piece with no twin faces blank space. Line numbers are the files' own."
            + (f" The same view in a terminal: {terminal}." if terminal else "")
            + "</p>"
            + legend * tinted
            + "\n".join(sections)
        )
    i = all_chapters.index(ch)
    links = [f'<a href="{c.page}">← {c.number}</a>' for c in all_chapters[max(i - 1, 0) : i]]
    links += [f'<a href="{c.page}">{c.number} →</a>' for c in all_chapters[i + 1 : i + 2]]
    pager = f'<span class="pager">{"".join(links)}</span>'
    return _prose_page(ch.title, prose, toc, site, ch.page, pager, "\n" + code)


def reference_page(path: Path, pg: str, site: _Site) -> str:
    """A ``docs/*.md`` page: its text, its contents at the top."""
    title = _title(path)
    prose, toc_tokens = site.markdown(path, pg, title)
    return _prose_page(title, prose, _toc_list(toc_tokens), site, pg)


def _title(path: Path, default: str | None = None) -> str:
    """The file's first ``# heading``, else ``default`` (the file's stem)."""
    m = re.search(r"^#\s+(.+?)\s*#*\s*$", path.read_text(encoding="utf-8"), re.M)
    # without inline markup: `code`, *emphasis*, [links](url)
    plain = re.sub(r"`|\*", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))) if m else ""
    return plain or default or path.stem


def index_page(all_chapters: list[Chapter], site: _Site) -> str:
    items = []
    for ch in all_chapters:
        comps = ", ".join(f"<code>{html.escape(p.component)}</code>" for p in ch.parts)
        status = "" if ch.readme else ' <span class="badge">README not written yet</span>'
        what = f'<div class="what">code: {comps}</div>' if comps else ""
        items.append(f'<li><a href="{ch.page}">{html.escape(ch.title)}</a>{status}{what}</li>')
    links = site.groups.get("Reference", [])
    refs = "".join(f'<li><a href="{pg}">{html.escape(label)}</a></li>' for pg, label in links)
    body = (
        '<div class="prose"><h1>twinformer labs</h1>\n'
        "<p>Every transformer component written twice: in NumPy with a hand-written "
        "backward pass, and in PyTorch. Each chapter page has the chapter's text, then "
        "both implementations side by side, method by method.</p>\n"
        f'<h2>Chapters</h2><ul class="chapters">{"".join(items)}</ul>\n'
        f'<h2>Reference</h2><ul class="chapters">{refs}</ul>\n'
        '<p class="legend">Built by <code>python -m labs docs</code>; in a terminal, '
        "<code>python -m labs diff COMPONENT</code> shows the same pairs.</p></div>"
    )
    return page("Chapters", body, site.sidebar("index.html"))


def build_site(
    out_dir: Path,
    labs_dir: Path = LABS_DIR,
    figures: str = "auto",
    say=print,
    force: bool = False,
    solutions: bool = True,
    docs_dir: Path = DOCS_DIR,
) -> list[Path]:
    """Write the index, a page per chapter and per ``docs/*.md``, the assets and the search
    into ``out_dir``; return the pages. ``solutions=False``: the exercise regions as stubs,
    the READMEs without their quotes of the solutions.

    Raises:
        UserError: a docs extra missing, or ``out_dir`` neither new, empty nor a previous
            site (:data:`SITE_MARKER`) without ``force``.
    """
    try:
        import latex2mathml  # noqa: F401
        import markdown  # noqa: F401
        import pygments  # noqa: F401
    except ImportError as e:
        raise UserError(f'the docs command needs {e.name}: pip install -e ".[docs]"') from None
    if figures not in FIGURE_MODES:
        raise UserError(f"--figures: expected one of {', '.join(FIGURE_MODES)}, got {figures!r}")
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: exists and is not a directory")
    fresh = not out_dir.is_dir() or not any(out_dir.iterdir())
    if not (fresh or force or (out_dir / SITE_MARKER).is_file()):
        raise UserError(
            f"--out {out_dir}: a folder that is not empty and not a site this command "
            f"built (no {SITE_MARKER} in it), so its files could be overwritten: give a "
            "new or empty folder, or add --force to write into it anyway"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SITE_MARKER).write_text("Built by `python -m labs docs`, rebuilt in place.\n")
    all_chapters = chapters(labs_dir)
    overview = docs_dir.parent / "README.md"  # the page overview.html; docs/masks.md: masks.html
    refs = {"overview.html": overview} if overview.is_file() else {}
    refs |= {f"{p.stem}.html": p for p in sorted(docs_dir.glob("*.md"))}
    pages = {p.resolve(): pg for pg, p in refs.items()}
    for ch in all_chapters:
        pages[ch.directory.resolve()] = pages[(ch.directory / "README.md").resolve()] = ch.page
    prefix = re.compile(r"^Chapter\s+\d+\s*[:.]\s*")  # "Chapter 03: attention" -> "attention"
    groups = {
        "Chapters": [(ch.page, f"{ch.number} {prefix.sub('', ch.title)}") for ch in all_chapters],
        "Reference": [(pg, "Overview" if p == overview else _title(p)) for pg, p in refs.items()],
    }
    site = _Site(out_dir, groups, pages, solutions)
    drawn = collect_figures(all_chapters, out_dir, figures, say=say)
    written = [out_dir / "index.html"]
    written[0].write_text(index_page(all_chapters, site), encoding="utf-8")
    for ch in all_chapters:
        written.append(out_dir / ch.page)
        written[-1].write_text(chapter_page(ch, site, all_chapters, drawn.get(ch.slug)), "utf-8")
    for pg, path in refs.items():
        written.append(out_dir / pg)
        written[-1].write_text(reference_page(path, pg, site), "utf-8")
    write_assets(out_dir)
    search = json.dumps(list(site.search.values()), ensure_ascii=False, separators=(",", ":"))
    (out_dir / "search-index.js").write_text(f"window.TWINFORMER_SEARCH = {search};\n", "utf-8")
    return written


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "site", metavar="DIR")
    p.add_argument(
        "--figures",
        choices=FIGURE_MODES,
        default="auto",
        help="the labs' figures, cached in labs/NN_*/figures/: 'auto' runs a lab whose figures "
        "are missing or older than its lab.py; 'run' runs every lab; 'existing' none",
    )
    p.add_argument(
        "--no-solutions",
        dest="solutions",
        action="store_false",
        help="each exercise region as its TODO lines, the READMEs without their quotes of "
        "the solutions (a site for students)",
    )
    p.add_argument("--force", action="store_true", help="write into a folder of other files")


def main(args: argparse.Namespace) -> int:
    written = build_site(args.out, figures=args.figures, force=args.force, solutions=args.solutions)
    print(f"wrote {len(written)} pages to {args.out}; open {written[0]}")
    return 0
