"""The HTML pieces of ``python -m labs docs``: the page frame and its CSS, the
code cells of a pair (syntax-highlighted, the chapter's exercise tinted), and a
chapter's README as HTML with its links rewritten. ``docs.py`` puts them together.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import xml.etree.ElementTree as etree
from pathlib import Path

from .diff_pairs import Pair, Segment, Source

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
.prose .highlight pre, .prose pre { padding: .7rem 1rem; background: var(--bg2);
  white-space: pre-wrap; overflow-wrap: anywhere; }
.prose pre code { background: none; padding: 0; }
.prose img { max-width: 100%; height: auto; }
table { border-collapse: collapse; }
.prose th, .prose td { border: 1px solid var(--line); padding: .3rem .6rem; }
.note { border-left: 4px solid #bf8700; background: #fff8c5; padding: .5rem .9rem;
  border-radius: 0 6px 6px 0; max-width: 52rem; }
nav.toc { border: 1px solid var(--line); border-radius: 6px; padding: .5rem 1rem;
  margin: 1rem 0 1.5rem; background: var(--bg2); font-size: .9rem; max-width: 80rem; }
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
/* one span per line: a long line wraps, its continuation indented past the line number */
.col pre > span[id] { display: block; white-space: pre-wrap; overflow-wrap: anywhere;
  padding-left: 7.5ch; text-indent: -7.5ch; }
.col .linenos { display: inline-block; min-width: 4ch; margin-right: 1.5ch; text-align: right;
  text-indent: 0; color: #8c959f; user-select: none; }
.highlight .hll { background: #fff4c2; display: block; }
.legend { font-size: .9rem; color: var(--muted); }
.legend mark { background: #fff4c2; padding: 0 .3em; }
math { font-family: "STIX Two Math", "Latin Modern Math", "Cambria Math", "DejaVu Math TeX Gyre",
  "Noto Sans Math", math; font-size: 1.08em; }
math[display="block"] { margin: .9em 0; overflow-x: auto; overflow-y: hidden; }
section.figures { width: calc(100vw - 3rem); max-width: 72rem; }
section.figures figure { margin: 1.4rem 0; }
section.figures img { display: block; max-width: 100%; height: auto; border: 1px solid var(--line);
  border-radius: 6px; background: #fff; }
section.figures figcaption { font-size: .9rem; color: var(--muted); margin-top: .35rem; }
section.figures figcaption code { color: var(--fg); }
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


def _code_cell(
    seg: Segment | None,
    src: Source | None,
    pad: int,
    tinted: set[int],
    side: str,
    anchor: str = "",
):
    """One column of a pair: the lines of ``seg``, highlighted, one ``<span>`` per line
    (id ``{side}-{anchor}-{line number}``), so that a long line wraps under itself."""
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
        linespans=f"{side}-{anchor}" if anchor else side,
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


# -- markdown ---------------------------------------------------------------------------------
def _markdown(
    text: str,
    chapter_dir: Path,
    out_dir: Path,
    pages: dict[Path, str],
    figure_anchors: dict[str, str] | None = None,
):
    """README text -> (html, toc tokens). Maths becomes MathML (``docs_math.py``).
    Relative links are rewritten: to another chapter's page, or to the file in the
    repository (relative to ``out_dir``). A code span that names one of the lab's
    figures (```figures/heads.png```, ```heads.png```) links to it on the page
    (``figure_anchors``: file name -> anchor)."""
    import markdown
    from markdown.extensions import Extension
    from markdown.treeprocessors import Treeprocessor

    from .docs_math import math_extension

    figure_anchors = figure_anchors or {}

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
            parents = {child: parent for parent in root.iter() for child in parent}
            for el in list(root.iter()):
                for attr in ("href", "src"):
                    if el.get(attr) is not None:
                        el.set(attr, rewrite(el.get(attr), image=el.tag == "img"))
                name = (el.text or "").rsplit("/", 1)[-1]
                parent = parents.get(el)
                if (
                    el.tag == "code"
                    and name in figure_anchors
                    and parent is not None
                    and parent.tag not in ("a", "pre")
                ):
                    link = etree.Element("a", href="#" + figure_anchors[name])
                    link.tail, el.tail = el.tail, None
                    parent.insert(list(parent).index(el), link)
                    parent.remove(el)
                    link.append(el)

    class LinkExtension(Extension):
        def extendMarkdown(self, md):  # noqa: N802  (markdown's API)
            md.treeprocessors.register(Links(md), "twinformer_links", 5)

    md = markdown.Markdown(
        extensions=[
            "fenced_code",
            "tables",
            "toc",
            "codehilite",
            math_extension(),
            LinkExtension(),
        ],
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
