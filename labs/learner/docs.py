"""``python -m labs docs``: a static HTML site of the chapters and their code.

    python -m labs docs                  # -> docs/site/index.html
    python -m labs docs --out /tmp/site

One page per chapter: the chapter's ``labs/NN_topic/README.md`` rendered to
HTML, then the NumPy and PyTorch implementations of the components that the
chapter covers (:data:`CHAPTER_CODE`), side by side and syntax-highlighted,
aligned method by method with the same pairing as ``python -m labs diff``. Each
pair has an anchor, ``#attention-CausalSelfAttention-forward``, and each page a
small table of contents. A chapter whose README is not written yet still gets
its page, with the code and a note. No JavaScript; the CSS is inline.

Exercise fences (``### BEGIN SOLUTION chNN`` / ``### END SOLUTION``) stay in
the code as the ordinary comments they are; on chapter NN's page the lines
between them are tinted, since that is the code the chapter's exercise asks for.

Needs the ``docs`` extra (``markdown``, ``Pygments``): ``pip install -e ".[docs]"``.
"""

from __future__ import annotations

import argparse
import html
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from .diff import (
    NUMPY_DIR,
    ROOT,
    TORCH_DIR,
    Pair,
    Segment,
    Source,
    components,
    load_source,
    pair_sources,
)

LABS_DIR = ROOT / "labs"
DEFAULT_OUT = ROOT / "docs" / "site"


@dataclass(frozen=True)
class Part:
    """A component shown on a chapter page; ``only`` narrows it to some definitions
    (``"functions"``, ``"classes"`` or a tuple of top-level names)."""

    component: str
    only: str | tuple[str, ...] | None = None
    note: str = ""
    numpy_only: bool = False  # show the NumPy column alone (no twin for these names)


#: chapter number -> (topic, the code it covers). Chapters found under labs/ with a
#: number missing here get a page with their README only.
CHAPTER_CODE: dict[str, tuple[str, tuple[Part, ...]]] = {
    "01": (
        "tokens",
        (
            Part(
                "tokenizer",
                ("CharTokenizer",),
                note="CharTokenizer has no PyTorch twin: both backends share this one, "
                "so only the NumPy column is shown (chapter 11's byte-level BPE has one).",
                numpy_only=True,
            ),
        ),
    ),
    "02": ("embeddings", (Part("embedding"), Part("linear"))),
    "03": (
        "attention",
        (Part("attention", "functions", "The functions; the module follows in chapter 04."),),
    ),
    "04": (
        "multihead",
        (Part("attention", ("CausalSelfAttention",), "The module; the functions are in 03."),),
    ),
    "05": ("positional", (Part("positional"),)),
    "06": ("ffn_gelu", (Part("activations"), Part("ffn"))),
    "07": ("layernorm_residual", (Part("norm"), Part("block"))),
    "08": ("gpt", (Part("gpt"),)),
    "09": ("training", (Part("loss"), Part("optim"))),
    "10": ("sampling", (Part("sampling"),)),
    "11": (
        "tokenization",
        (
            Part(
                "tokenizer",
                (
                    "bytes_to_unicode",
                    "token_to_str",
                    "str_to_token",
                    "pre_tokenize",
                    "get_pair_counts",
                    "merge",
                    "train_bpe_plain",
                    "train_bpe",
                    "BPETokenizer",
                    "DecodeStream",
                ),
                "Byte-level BPE: from scratch on the left, HF tokenizers on the right.",
            ),
        ),
    ),
    "12": ("efficient_attention", (Part("flash_attention"), Part("kv_cache"))),
    "13": ("positional_rope", (Part("rope"),)),
    "14": (
        "norms_ffn",
        (
            Part("norm", ("RMSNorm",), "LayerNorm is chapter 07's."),
            Part("activations", ("ReLU", "SiLU"), "GELU is chapter 06's."),
            Part("ffn", ("SwiGLUFeedForward",), "FeedForward is chapter 06's."),
            Part("block"),
        ),
    ),
    "15": (
        "encoder_classifier",
        (
            Part(
                "attention",
                ("causal_attn_mask", "key_padding_attn_mask", "combine_attn_mask", "to_attn_mask"),
                "The mask helpers (docs/masks.md).",
            ),
            Part("encoder"),
        ),
    ),
    "16": ("encoder_decoder", (Part("seq2seq"),)),
}


@dataclass(frozen=True)
class Chapter:
    number: str  # "03"
    slug: str  # "03_attention"
    directory: Path  # labs/03_attention (may not exist yet)
    readme: Path | None  # None: not written yet
    parts: tuple[Part, ...]

    @property
    def page(self) -> str:
        return f"{self.slug}.html"

    @property
    def title(self) -> str:
        """The README's first ``# heading``, else ``Chapter 03: attention``."""
        if self.readme is not None:
            m = re.search(r"^#\s+(.+?)\s*#*\s*$", self.readme.read_text(encoding="utf-8"), re.M)
            if m:
                return _plain(m.group(1))
        return f"Chapter {self.number}: {self.slug[3:].replace('_', ' ')}"


def _plain(markdown_text: str) -> str:
    """A heading's text without inline markup: `code`, *emphasis*, [links](url)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown_text)
    return re.sub(r"[`*_]", "", text)


def chapters(labs_dir: Path = LABS_DIR) -> list[Chapter]:
    """The chapters: every ``labs/NN_topic/`` folder, plus those of :data:`CHAPTER_CODE`
    that have no folder yet."""
    found = {}
    for d in sorted(labs_dir.glob("[0-9][0-9]_*")):
        if d.is_dir():
            found.setdefault(d.name[:2], d)
    out = []
    for number in sorted(set(found) | set(CHAPTER_CODE)):
        topic, parts = CHAPTER_CODE.get(number, ("", ()))
        d = found.get(number)
        readme = d / "README.md" if d is not None and (d / "README.md").is_file() else None
        slug = d.name if d is not None else f"{number}_{topic}"
        out.append(Chapter(number, slug, labs_dir / slug, readme, parts))
    return out


# -- HTML pieces ------------------------------------------------------------------------------
CSS = """
:root { --lh: 19px; --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --bg2: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: #fff;
  font: 16px/1.55 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; }
header.top { display: flex; gap: 1.5rem; align-items: baseline; padding: .6rem 1.5rem;
  border-bottom: 1px solid var(--line); background: var(--bg2); font-size: .95rem; }
header.top .brand { font-weight: 600; }
header.top .pager { margin-left: auto; display: flex; gap: 1rem; }
main { padding: 0 1.5rem 4rem; }
.prose { max-width: 52rem; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
code { font: .875em/1.4 ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace;
  background: var(--bg2); padding: .1em .3em; border-radius: 4px; }
.prose pre, .prose .highlight { overflow-x: auto; border-radius: 6px; }
.prose .highlight pre, .prose pre { padding: .7rem 1rem; background: var(--bg2); }
.prose pre code { background: none; padding: 0; }
.prose img { max-width: 100%; height: auto; }
table { border-collapse: collapse; }
.prose th, .prose td { border: 1px solid var(--line); padding: .3rem .6rem; }
.note { border-left: 4px solid #bf8700; background: #fff8c5; padding: .5rem .9rem;
  border-radius: 0 6px 6px 0; max-width: 52rem; }
nav.toc { border: 1px solid var(--line); border-radius: 6px; padding: .5rem 1rem;
  margin: 1.2rem 0; background: var(--bg2); font-size: .9rem; max-width: 80rem; }
nav.toc h2 { font-size: 1rem; margin: .2rem 0 .4rem; }
nav.toc ul { margin: .2rem 0; padding-left: 1.2rem; }
nav.toc > div { display: flex; flex-wrap: wrap; gap: .2rem 2.5rem; }
nav.toc ul.pairs { columns: 3 16rem; }
nav.toc code { background: none; padding: 0; }
.badge { font-size: .75rem; color: var(--muted); border: 1px solid var(--line);
  border-radius: 1em; padding: 0 .45em; white-space: nowrap; }
h2.code { margin-top: 2.5rem; border-top: 1px solid var(--line); padding-top: 1.2rem; }
.component { margin: 1.5rem 0 2.5rem; }
.twin { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 0 12px; }
.twin.single { grid-template-columns: minmax(0, 1fr); }
.files { position: sticky; top: 0; z-index: 1; background: #fff; padding: .4rem 0 .3rem;
  border-bottom: 2px solid var(--line); font-weight: 600; }
.files > div { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.files code { font-size: .9rem; }
[id] { scroll-margin-top: 2.6rem; }
.pair-label { grid-column: 1 / -1; margin: 1.1rem 0 .25rem; font-size: .92rem;
  color: var(--muted); }
.pair-label code { color: var(--fg); font-weight: 600; background: none; padding: 0; }
.pair-label a.anchor { color: var(--line); margin-right: .3rem; }
.pair-label:hover a.anchor { color: #0969da; }
.col { min-width: 0; overflow-x: auto; border: 1px solid var(--line); border-radius: 6px;
  background: #fbfbfc; font-size: 13px; }
.col.empty { border-style: dashed; background:
  repeating-linear-gradient(135deg, transparent 0 8px, #f3f4f6 8px 9px); }
.col .highlight { background: none; }
.col pre { margin: 0; padding: 6px 10px; font: 13px/var(--lh) ui-monospace, "DejaVu Sans Mono",
  Menlo, Consolas, monospace; background: none; }
.col .linenos { color: #8c959f; user-select: none; padding-right: 1ch; }
.highlight .hll { background: #fff4c2; display: block; }
.legend { font-size: .9rem; color: var(--muted); }
.legend mark { background: #fff4c2; padding: 0 .3em; }
ul.chapters { list-style: none; padding: 0; }
ul.chapters li { margin: .6rem 0; }
ul.chapters .what { color: var(--muted); font-size: .9rem; }
"""


def _page(title: str, body: str, nav: str = "") -> str:
    from pygments.formatters import HtmlFormatter

    pyg = HtmlFormatter(style="default").get_style_defs(".highlight")
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{html.escape(title)} · twinformer</title>\n"
        f"<style>{CSS}\n{pyg}\n</style>\n</head>\n<body>\n"
        '<header class="top"><a class="brand" href="index.html">twinformer labs</a>'
        f"{nav}</header>\n"
        f"<main>\n{body}\n</main>\n</body>\n</html>\n"
    )


_FENCE_BEGIN = re.compile(r"^\s*###\s*BEGIN SOLUTION\s+ch(\d+)\b")
_FENCE_END = re.compile(r"^\s*###\s*END SOLUTION\b")


def _exercise_lines(src: Source, number: str) -> set[int]:
    """Lines (1-based) inside chapter ``number``'s exercise fences, fences included."""
    out, inside = set(), False
    for n, line in enumerate(src.lines, 1):
        m = _FENCE_BEGIN.match(line)
        if m:
            inside = int(m.group(1)) == int(number)
        if inside:
            out.add(n)
        if _FENCE_END.match(line):
            inside = False
    return out


def _code_cell(seg: Segment | None, src: Source | None, pad: int, tinted: set[int], side: str):
    if seg is None or src is None:
        return f'<div class="col col-{side} empty"></div>'
    from pygments.formatters import HtmlFormatter
    from pygments.token import Text

    tokens = []
    for n in range(seg.start, seg.end + 1):
        tokens += src.line_tokens()[n - 1]
        tokens.append((Text, "\n"))
    fmt = HtmlFormatter(
        linenos="inline",
        linenostart=seg.start,
        hl_lines=[n - seg.start + 1 for n in range(seg.start, seg.end + 1) if n in tinted],
        cssclass="highlight",
    )
    from io import StringIO

    buf = StringIO()
    fmt.format(tokens, buf)
    style = f' style="padding-top: calc({pad} * var(--lh))"' if pad else ""
    return f'<div class="col col-{side}"{style}>{buf.getvalue()}</div>'


def _side_name(pair: Pair) -> str:
    if pair.left and not pair.right:
        return '<span class="badge">NumPy only</span>'
    if pair.right and not pair.left:
        return '<span class="badge">PyTorch only</span>'
    return ""


@dataclass
class _Rendered:
    html: str
    toc: list[tuple[str, str, str]]  # (anchor, label, badge html)
    tinted: bool


def _component_html(part: Part, number: str) -> tuple[str, str, _Rendered]:
    comp = part.component
    npath, tpath = NUMPY_DIR / f"{comp}.py", TORCH_DIR / f"{comp}.py"
    left = load_source(npath) if npath.is_file() else None
    right = load_source(tpath) if tpath.is_file() and not part.numpy_only else None
    section_id = f"code-{comp}" + ("" if part.only is None else f"-{_only_slug(part.only)}")
    if left is None and right is None:
        body = f'<p class="note">No <code>{comp}.py</code> in numpy_impl/ or torch_impl/ yet.</p>'
        return section_id, comp, _Rendered(body, [], False)
    pairs = pair_sources(left, right, part.only)
    single = left is None or right is None
    tinted = _exercise_lines(left, number) if left else set()
    rows, toc = [], []
    for pair in pairs:
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
        cells = []
        if left is not None:
            cells.append(_code_cell(pair.left, left, hi - tops[0], tinted, "numpy"))
        if right is not None:
            cells.append(_code_cell(pair.right, right, hi - tops[1], set(), "torch"))
        rows += cells
    names = [s.label for s in (left, right) if s is not None]
    files = "".join(f"<div><code>{html.escape(n)}</code></div>" for n in names)
    notes = []
    if part.note:
        notes.append(html.escape(part.note))
    if single and not part.note:
        missing = "PyTorch" if right is None else "NumPy"
        notes.append(f"No {missing} twin of <code>{comp}.py</code> yet: one column only.")
    note = "".join(f'<p class="note">{n}</p>' for n in notes)
    klass = "twin single" if single else "twin"
    body = (
        f'{note}<div class="{klass}">\n<div class="files" style="grid-column: 1 / -1">'
        f'<div class="{klass}">{files}</div></div>\n' + "\n".join(rows) + "\n</div>"
    )
    return section_id, comp, _Rendered(body, toc, bool(tinted))


def _only_slug(only) -> str:
    return only if isinstance(only, str) else "-".join(only)


# -- markdown ---------------------------------------------------------------------------------
def _markdown(text: str, chapter_dir: Path, out_dir: Path, pages: dict[Path, str]):
    """README text -> (html, toc tokens). Relative links are rewritten: to another
    chapter's page, or to the file in the repository (relative to ``out_dir``)."""
    import markdown
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor

    def rewrite(url: str, image: bool) -> str:
        if not url or url.startswith("#") or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url):
            return url
        path, _, frag = url.partition("#")
        target = (chapter_dir / path).resolve()
        if image and target.is_file():  # copied into the site, which then stands alone
            try:
                rel = target.relative_to(chapter_dir.resolve()).as_posix()
            except ValueError:
                rel = target.name
            dest = out_dir / "assets" / chapter_dir.name / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, dest)
            return dest.relative_to(out_dir).as_posix()
        for d in (target, target.parent if target.name == "README.md" else None):
            if d is not None and d in pages:
                return pages[d] + (f"#{frag}" if frag else "")
        rel = Path(os.path.relpath(target, out_dir.resolve())).as_posix()
        return rel + (f"#{frag}" if frag else "")

    class Links(Treeprocessor):
        def run(self, root):
            for el in root.iter():
                for attr in ("href", "src"):
                    if el.get(attr) is not None:
                        el.set(attr, rewrite(el.get(attr), image=el.tag == "img"))

    class LinkExtension(Extension):
        def extendMarkdown(self, md):  # noqa: N802  (markdown's API)
            md.treeprocessors.register(Links(md), "twinformer_links", 5)

    md = markdown.Markdown(
        extensions=["fenced_code", "tables", "toc", "codehilite", LinkExtension()],
        extension_configs={"codehilite": {"guess_lang": False, "css_class": "highlight"}},
    )
    return md.convert(text), md.toc_tokens


def _toc_list(tokens, depth: int = 0) -> str:
    items = []
    for t in tokens:
        if t["level"] == 1:  # the page title: list its children instead
            items.append(_toc_list(t["children"], depth))
            continue
        sub = _toc_list(t["children"], depth + 1) if t["children"] and depth < 1 else ""
        items.append(f'<li><a href="#{t["id"]}">{t["name"]}</a>{sub}</li>')
    inner = "".join(items)
    return inner if depth == 0 and not inner.startswith("<li") else f"<ul>{inner}</ul>"


# -- pages ------------------------------------------------------------------------------------
def chapter_page(ch: Chapter, out_dir: Path, all_chapters: list[Chapter]) -> str:
    pages = {c.directory.resolve(): c.page for c in all_chapters}
    if ch.readme is not None:
        prose, toc_tokens = _markdown(
            ch.readme.read_text(encoding="utf-8"), ch.readme.parent, out_dir, pages
        )
    else:
        prose = (
            f'<h1>{html.escape(ch.title)}</h1>\n<p class="note">This chapter\'s '
            f"<code>labs/{ch.slug}/README.md</code> is not written yet; its code follows.</p>"
        )
        toc_tokens = []

    sections, code_toc, tinted = [], [], False
    for part in ch.parts:
        section_id, comp, rendered = _component_html(part, ch.number)
        tinted |= rendered.tinted
        sections.append(
            f'<section class="component" id="{section_id}">\n<h3>{html.escape(comp)}</h3>\n'
            f"{rendered.html}\n</section>"
        )
        pairs = "".join(
            f'<li><a href="#{html.escape(a)}"><code>{html.escape(label)}</code></a> {badge}</li>'
            for a, label, badge in rendered.toc
        )
        code_toc.append(
            f'<li><a href="#{section_id}"><b>{html.escape(comp)}</b></a>'
            f'<ul class="pairs">{pairs}</ul></li>'
        )

    reading = _toc_list(toc_tokens)
    toc = '<nav class="toc"><h2>On this page</h2><div>'
    if reading.strip("<ul>/"):
        toc += f"<div><b>Reading</b>{reading}</div>"
    if code_toc:
        toc += '<div style="flex: 1"><b><a href="#code">Code</a></b>'
        toc += f"<ul>{''.join(code_toc)}</ul></div>"
    toc += "</div></nav>"

    code = ""
    if sections:
        legend = ""
        if tinted:
            legend = (
                f'<p class="legend"><mark>Tinted lines</mark> are this chapter\'s exercise: the '
                f"NumPy code between <code>### BEGIN SOLUTION ch{ch.number}</code> and "
                "<code>### END SOLUTION</code>.</p>"
            )
        twins = [p.component for p in ch.parts if p.component in components()]
        terminal = ", ".join(f"<code>python -m labs diff {c}</code>" for c in dict.fromkeys(twins))
        code = (
            '<h2 class="code" id="code">The two implementations</h2>\n'
            '<p class="legend">NumPy (hand-written backward) on the left, PyTorch on the '
            "right, paired by class and method; a piece with no twin faces blank space. "
            "Line numbers are the files' own."
            + (f" The same view in a terminal: {terminal}." if terminal else "")
            + "</p>"
            + legend
            + "\n".join(sections)
        )
    idx = all_chapters.index(ch)
    links = []
    if idx > 0:
        prev = all_chapters[idx - 1]
        links.append(f'<a href="{prev.page}">← {prev.number}</a>')
    links.append('<a href="index.html">all chapters</a>')
    if idx + 1 < len(all_chapters):
        nxt = all_chapters[idx + 1]
        links.append(f'<a href="{nxt.page}">{nxt.number} →</a>')
    nav = f'<span>{html.escape(ch.title)}</span><span class="pager">{"".join(links)}</span>'
    body = f'<div class="prose">{prose}</div>\n{toc}\n{code}'
    return _page(ch.title, body, nav)


def index_page(all_chapters: list[Chapter]) -> str:
    items = []
    for ch in all_chapters:
        comps = ", ".join(f"<code>{html.escape(p.component)}</code>" for p in ch.parts)
        status = "" if ch.readme else ' <span class="badge">README not written yet</span>'
        what = f'<div class="what">code: {comps}</div>' if comps else ""
        items.append(f'<li><a href="{ch.page}">{html.escape(ch.title)}</a>{status}{what}</li>')
    body = (
        '<div class="prose"><h1>twinformer labs</h1>\n'
        "<p>Every transformer component written twice: in NumPy with a hand-written "
        "backward pass, and in PyTorch. Each chapter page has the chapter's text, then "
        "both implementations side by side, method by method.</p>\n"
        f'<ul class="chapters">{"".join(items)}</ul>\n'
        '<p class="legend">Built by <code>python -m labs docs</code>; in a terminal, '
        "<code>python -m labs diff COMPONENT</code> shows the same pairs.</p></div>"
    )
    return _page("Chapters", body)


def build_site(out_dir: Path, labs_dir: Path = LABS_DIR) -> list[Path]:
    """Write ``index.html`` and one page per chapter into ``out_dir``; return the paths."""
    try:
        import markdown  # noqa: F401
        import pygments  # noqa: F401
    except ImportError as e:
        raise UserError(f'the docs command needs {e.name}: pip install -e ".[docs]"') from None
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: exists and is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    all_chapters = chapters(labs_dir)
    written = []
    for ch in all_chapters:
        path = out_dir / ch.page
        path.write_text(chapter_page(ch, out_dir, all_chapters), encoding="utf-8")
        written.append(path)
    index = out_dir / "index.html"
    index.write_text(index_page(all_chapters), encoding="utf-8")
    return [index, *written]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help="where to write the site (default: docs/site/ in the repository)",
    )


def main(args: argparse.Namespace) -> int:
    written = build_site(args.out)
    print(f"wrote {len(written)} pages to {args.out}; open {written[0]}")
    return 0
