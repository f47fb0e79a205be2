"""The HTML pieces of ``python -m labs docs``: the page frame (its CSS, script and search
in ``site_assets/``), a pair's code cells, and a Markdown file as HTML.
"""

from __future__ import annotations

import html
import os
import re
import shutil
import xml.etree.ElementTree as etree
from pathlib import Path
from string import Template

from .diff_pairs import Pair, Segment, Source
from .exercises_fences import parse_regions

ASSETS = Path(__file__).with_name("site_assets")


def write_assets(out_dir: Path) -> None:
    """The CSS (with Pygments' colours), the script and MiniSearch, into ``out_dir``."""
    from pygments.formatters import HtmlFormatter

    for name in ("site.js", "minisearch.min.js", "minisearch.LICENSE.txt"):
        shutil.copyfile(ASSETS / name, out_dir / name)
    css = (ASSETS / "site.css").read_text(encoding="utf-8")
    pygments = HtmlFormatter(style="default").get_style_defs(".highlight")
    (out_dir / "site.css").write_text(f"{css}\n{pygments}\n", encoding="utf-8")


def page(title: str, body: str, sidebar: str, pager: str = "") -> str:
    """A whole page: ``site_assets/page.html`` filled in."""
    frame = Template((ASSETS / "page.html").read_text(encoding="utf-8"))
    return frame.substitute(title=html.escape(title), body=body, sidebar=sidebar, pager=pager)


def _exercise_lines(src: Source, number: str) -> set[int]:
    """Lines (1-based) inside chapter ``number``'s exercise fences, fences included."""
    regions = parse_regions("\n".join(src.lines), src.label, names=False)
    return {n + 1 for r in regions if r.chapter == number for n in range(r.begin, r.end + 1)}


def _code_cell(seg: Segment | None, src: Source | None, pad, tinted: set[int], side, anchor=""):
    """One column of a pair: ``seg`` highlighted, a ``<span>`` per line (id
    ``{side}-{anchor}-{line}``); ``pad`` blank rows above line the ``def`` lines up."""
    if seg is None or src is None:
        return f'<div class="col col-{side} empty"></div>'
    from pygments import format
    from pygments.formatters import HtmlFormatter
    from pygments.token import Text

    lines = range(seg.start, seg.end + 1)
    tokens = [tok for n in lines for tok in (*src.line_tokens[n - 1], (Text, "\n"))]
    fmt = HtmlFormatter(
        linenos="inline",
        linenostart=seg.start,
        linespans=f"{side}-{anchor}" if anchor else side,
        hl_lines=[n - seg.start + 1 for n in lines if n in tinted],
        cssclass="highlight",
    )
    style = f' style="--pad: {pad}"' if pad else ""
    return f'<div class="col col-{side}"{style}>{format(tokens, fmt)}</div>'


def _side_name(pair: Pair) -> str:
    only = "NumPy" if not pair.right else "PyTorch" if not pair.left else ""
    return f'<span class="badge">{only} only</span>' if only else ""


# -- markdown ---------------------------------------------------------------------------------
def figure_anchor(name: str) -> str:
    return "fig-" + re.sub(r"[^A-Za-z0-9_-]", "-", name.rsplit(".", 1)[0])


def markdown_page(text: str, base_dir: Path, out_dir: Path, pages: dict[Path, str], figures=None):
    """Markdown -> (html, toc tokens, [(anchor, heading, text)] for the search).

    Relative links go to a page of the site (``pages``: resolved path -> page), else to
    the repository's file. ``![caption](figures/name.png)`` becomes a ``<figure>`` with
    the site's PNG (``figures``: ``docs_figures.ChapterFigures``) or a note on drawing
    it; a code span naming a figure links to it. Maths becomes MathML.
    """
    import markdown
    from markdown.treeprocessors import Treeprocessor

    from .docs_math import add_math

    wanted = set(figures.wanted) if figures else set()
    sections: list[tuple[str, str, str]] = []

    def rewrite(url: str, image: bool) -> str:
        if not url or url.startswith("#") or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url):
            return url
        path, _, frag = url.partition("#")
        target = (base_dir / path).resolve()
        if image and target.is_file():  # copied into the site, which then stands alone
            dest = out_dir / "assets" / base_dir.name / target.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(target, dest)
            return dest.relative_to(out_dir).as_posix()
        rel = pages.get(target) or Path(os.path.relpath(target, out_dir.resolve())).as_posix()
        return rel + (f"#{frag}" if frag else "")

    class Site(Treeprocessor):
        def figure(self, p: etree.Element, img: etree.Element, name: str) -> None:
            if name in figures.found:
                p.tag, p.attrib = "figure", {"id": figure_anchor(name)}
                img.set("src", figures.found[name].relative_to(out_dir).as_posix())
                _into_link(p, img, href=img.get("src"), title="full size")  # the PNG, full size
                etree.SubElement(p, "figcaption").text = img.get("alt")
            else:
                p.set("class", "note")
                p.remove(img)
                p.text = self.md.htmlStash.store(f"<code>{name}</code>: {figures.note}")

        def run(self, root):
            parents = {child: parent for parent in root.iter() for child in parent}
            for el in list(root.iter()):
                src, parent = el.get("src") or "", parents.get(el)
                name = src.removeprefix("figures/")
                if el.tag == "img" and name in wanted and parent is not None:
                    self.figure(parent, el, name)
                    continue
                for attr in ("href", "src"):
                    if el.get(attr) is not None:
                        el.set(attr, rewrite(el.get(attr), image=el.tag == "img"))
                name = (el.text or "").rsplit("/", 1)[-1]
                if el.tag == "code" and name in wanted and parent.tag not in ("a", "pre"):
                    _into_link(parent, el, href="#" + figure_anchor(name))
            for el in root:  # the search's sections: each heading and the text up to the next
                if el.tag in ("h1", "h2", "h3") or not sections:
                    sections.append([el.get("id", ""), _text(el) if el.tag[0] == "h" else "", ""])
                sections[-1][2] += " " + _text(el)

    md = markdown.Markdown(
        extensions=["fenced_code", "tables", "toc", "codehilite", "md_in_html"],
        extension_configs={"codehilite": {"guess_lang": False, "css_class": "highlight"}},
    )
    add_math(md)
    md.treeprocessors.register(Site(md), "twinformer_site", 4)  # after toc (5)
    # a collapsed answer (<details>) keeps its Markdown: md_in_html reads it when marked
    out = md.convert(re.sub(r"^<details>", '<details markdown="1">', text, flags=re.M))
    return out, md.toc_tokens, [tuple(s) for s in sections]


def _into_link(parent: etree.Element, el: etree.Element, **attrs: str) -> None:
    """Put ``el``, a child of ``parent``, inside a new ``<a>`` in its place."""
    link = etree.Element("a", **attrs)
    link.tail, el.tail = el.tail, None
    parent.insert(list(parent).index(el), link)
    parent.remove(el)
    link.append(el)


def _text(el: etree.Element) -> str:
    """An element's text, without Markdown's placeholders (maths, code blocks)."""
    return re.sub(r"\s+", " ", re.sub("\x02[^\x03]*\x03", " ", "".join(el.itertext()))).strip()


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
