"""``python -m labs docs``: a static HTML site of the chapters and their code.

    python -m labs docs                    # -> docs/site/index.html
    python -m labs docs --out /tmp/site
    python -m labs docs --figures run      # run every lab again for its figures

One page per chapter, in the manner of d2l.ai: at the top the contents, then
the chapter's ``labs/NN_topic/README.md`` rendered to HTML, its equations as
MathML (``docs_math.py``: the browser draws them, no script and no network),
the figures its ``lab.py`` draws at the end of the README's lab section
(``docs_figures.py``: from the lab's last run, or drawn by running it), then
the NumPy and PyTorch implementations of the components that the chapter covers
(:data:`CHAPTER_CODE`), side by side and syntax-highlighted, aligned method by
method with the same pairing as ``python -m labs diff``; long lines wrap. Each
pair has an anchor, ``#attention-SelfAttention-forward``. A chapter whose README
is not written yet still gets its page, with the code and a note. No
JavaScript; the CSS is inline.

Exercise fences (``### BEGIN SOLUTION chNN`` / ``### END SOLUTION``) stay in
the code as the ordinary comments they are; on chapter NN's page the lines
between them are tinted, since that is the code the chapter's exercise asks for.

Needs the ``docs`` extra (markdown, Pygments, latex2mathml):
``pip install -e ".[docs]"``. This module lists the chapters and builds the
pages; ``docs_html.py`` has the HTML pieces, ``diff_pairs.py`` the pairs.
"""

from __future__ import annotations

import argparse
import html
import re
from dataclasses import dataclass
from pathlib import Path

from .. import UserError
from .diff_pairs import (
    NUMPY_DIR,
    ROOT,
    TORCH_DIR,
    components,
    load_source,
    pair_sources,
)
from .docs_figures import FIGURE_MODES, ChapterFigures
from .docs_figures import collect as collect_figures
from .docs_html import _code_cell, _exercise_lines, _markdown, _page, _side_name, _toc_list

LABS_DIR = ROOT / "labs"
DEFAULT_OUT = ROOT / "docs" / "site"
#: Written into every site: a folder holding it is a previous site, rebuilt in place.
SITE_MARKER = ".twinformer-site"


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
                "char_tokenizer",
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
        (
            Part(
                "attention",
                (
                    "softmax",
                    "scaled_dot_product_attention",
                    "scaled_dot_product_attention_backward",
                ),
                "The functions; the module follows in chapter 04.",
            ),
        ),
    ),
    "04": (
        "multihead",
        (
            Part(
                "attention",
                ("split_heads", "merge_heads", "SelfAttention"),
                "The heads and the module; the attention function is chapter 03's.",
            ),
            Part("multihead_attention", ("MultiHeadAttention",), "The same core, torch's layout."),
        ),
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
                "masks",
                ("causal_attn_mask", "key_padding_attn_mask", "combine_attn_mask", "to_attn_mask"),
                "The mask helpers (docs/masks.md).",
            ),
            Part("encoder"),
        ),
    ),
    "16": (
        "encoder_decoder",
        (
            Part(
                "attention",
                ("SelfAttention",),
                "Cross-attention is SelfAttention called with kv: the kv branches of project "
                "and project_backward are this chapter's; the rest is chapter 04's.",
            ),
            Part("seq2seq"),
        ),
    ),
    "17": (
        "real_models",
        (
            Part(
                "pretrained",
                note="The state-dict mapping has no PyTorch twin: it works on NumPy arrays "
                "that both backends load, so only the NumPy column is shown.",
                numpy_only=True,
            ),
        ),
    ),
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
            cells.append(_code_cell(pair.left, left, hi - tops[0], tinted, "numpy", anchor))
        if right is not None:
            cells.append(_code_cell(pair.right, right, hi - tops[1], set(), "torch", anchor))
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


# -- pages ------------------------------------------------------------------------------------
def _figures_html(ch: Chapter, figs: ChapterFigures | None, out_dir: Path) -> tuple[str, str]:
    """The lab's figures as a section, and its entry in the contents ("" when the
    lab draws none)."""
    if figs is None or not figs.wanted:
        return "", ""
    lab = f"labs/{ch.slug}/lab.py"
    items, links = [], []
    for f in figs.wanted:
        path = figs.found.get(f.name)
        if path is None:
            continue
        src = path.relative_to(out_dir).as_posix()
        section = f"<b>{html.escape(f.section)}</b>: " if f.section else ""
        alt = f"{f.name}: {f.section}" if f.section else f.name
        items.append(
            f'<figure id="{f.anchor}"><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
            f"<figcaption>{section}<code>{html.escape(f.name)}</code>, from "
            f"<code>{lab}</code></figcaption></figure>"
        )
        links.append(f'<li><a href="#{f.anchor}"><code>{html.escape(f.name)}</code></a></li>')
    note = f'<p class="note">{figs.note}</p>' if figs.note else ""
    intro = (
        f'<p class="legend">Drawn by <code>python {lab}</code> (or open it as a notebook: '
        f"<code>python -m labs notebook {ch.number}</code>)"
        + (f", here in {figs.seconds:.0f} s" if figs.seconds is not None else "")
        + ".</p>"
    )
    body = (
        '<section class="figures" id="figures">\n<h2>The lab\'s figures</h2>\n'
        + intro
        + note
        + "\n".join(items)
        + "\n</section>\n"
    )
    toc = f'<div><b><a href="#figures">Figures</a></b><ul>{"".join(links)}</ul></div>'
    return body, toc


def _insert_figures(prose: str, figures: str) -> str:
    """The figures at the end of the README's lab section ("Run the lab", "The lab"),
    else at the end of the text."""
    m = re.search(r'<h2 id="(?:[a-z0-9-]*-)?lab(?:-[0-9]+)?">', prose)
    if m:
        nxt = prose.find("<h2", m.end())
        if nxt != -1:
            return prose[:nxt] + figures + prose[nxt:]
    return prose + figures


def chapter_page(
    ch: Chapter,
    out_dir: Path,
    all_chapters: list[Chapter],
    figures: ChapterFigures | None = None,
) -> str:
    pages = {c.directory.resolve(): c.page for c in all_chapters}
    anchors = {f.name: f.anchor for f in figures.wanted} if figures else {}
    if ch.readme is not None:
        try:
            prose, toc_tokens = _markdown(
                ch.readme.read_text(encoding="utf-8"), ch.readme.parent, out_dir, pages, anchors
            )
        except ValueError as e:  # a formula latex2mathml cannot render (docs_math.py)
            raise UserError(f"labs/{ch.slug}/README.md: {e}") from None
    else:
        prose = (
            f'<h1>{html.escape(ch.title)}</h1>\n<p class="note">This chapter\'s '
            f"<code>labs/{ch.slug}/README.md</code> is not written yet; its code follows.</p>"
        )
        toc_tokens = []
    figures_section, figures_toc = _figures_html(ch, figures, out_dir)
    if figures_section:
        prose = _insert_figures(prose, figures_section)

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
    toc += figures_toc
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
    # the contents at the top, under the page's title
    title, sep, rest = prose.partition("</h1>")
    top = f"{title}{sep}\n{toc}\n{rest}" if sep else f"{toc}\n{prose}"
    body = f'<div class="prose">{top}</div>\n{code}'
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


def build_site(
    out_dir: Path,
    labs_dir: Path = LABS_DIR,
    figures: str = "auto",
    say=print,
    force: bool = False,
) -> list[Path]:
    """Write ``index.html`` and one page per chapter into ``out_dir``; return the paths.

    ``figures``: where the labs' figures come from (``docs_figures.py``): ``"auto"``,
    ``"run"`` or ``"existing"``. ``out_dir`` is new, empty or a previous site (it holds
    :data:`SITE_MARKER`); any other folder is refused unless ``force``: its files
    could be overwritten.
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
    if not force and out_dir.is_dir() and not (out_dir / SITE_MARKER).is_file():
        if any(out_dir.iterdir()):
            raise UserError(
                f"--out {out_dir}: a folder that is not empty and not a site this command "
                f"built (no {SITE_MARKER} in it), so its files could be overwritten: give a "
                "new or empty folder, or add --force to write into it anyway"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SITE_MARKER).write_text(
        "A site built by `python -m labs docs`; it rebuilds this folder in place.\n",
        encoding="utf-8",
    )
    all_chapters = chapters(labs_dir)
    drawn = collect_figures(all_chapters, out_dir, figures, say=say)
    written = []
    for ch in all_chapters:
        path = out_dir / ch.page
        page = chapter_page(ch, out_dir, all_chapters, drawn.get(ch.slug))
        path.write_text(page, encoding="utf-8")
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
    p.add_argument(
        "--figures",
        choices=FIGURE_MODES,
        default="auto",
        help="the labs' figures: 'auto' takes each lab's last run (labs/NN_*/figures/) and "
        "runs the labs that have not drawn theirs; 'run' runs every lab again; 'existing' "
        "never runs a lab (pages say how to draw what is missing)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a --out folder that holds other files (they may be overwritten)",
    )


def main(args: argparse.Namespace) -> int:
    written = build_site(args.out, figures=args.figures, force=args.force)
    print(f"wrote {len(written)} pages to {args.out}; open {written[0]}")
    return 0
