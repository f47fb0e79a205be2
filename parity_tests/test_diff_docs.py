"""``python -m labs diff`` and ``python -m labs docs``: the twins side by side.

* diff: the terminal view pairs the two files by class and method (``forward``
  faces ``forward`` on the same rows, ``backward`` faces blank space), fits the
  terminal down to 80 columns (stacked below 115), and pages on a terminal;
* docs: the site has an index, one page per chapter and per reference page
  (``docs/*.md``), a sidebar on each, a search index; a chapter page has both
  columns with an anchor per method, every exercise region of the chapter (from
  the fences), the contents at the top, the maths as MathML (no LaTeX left in
  the text) and each figure in its section; the figures are cached in the
  chapters' folders; ``--no-solutions`` shows the regions as stubs only;
* the browser: headless Chromium renders chapter 03 in two columns (screenshot
  copied to ``ci-artifacts/docs-ch03.png``); every page at 1280 and 800 px is no
  wider than the window, with the sidebar and columns as the width wants
  (``ci-artifacts/docs-*-1280.png``, ``-800.png``); the search box finds a section.
  Skipped without a ``chromium`` binary, except under ``CI=true`` (CI installs it).
  Every chapter page with its real figures, in Chromium: test_lab_scripts.py,
  which draws them.
"""

from __future__ import annotations

import ast
import hashlib
import html
import json
import os
import re
import shlex
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from labs.__main__ import main
from labs.learner import diff, diff_pairs, docs, docs_figures, docs_html, docs_math
from parity_tests.browser import (
    LAYOUT_PROBE,
    SEARCH_PROBE,
    PageText,
    browse,
    chromium,
    probe_pages,
    raw_latex,
)

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "ci-artifacts"


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def _def_range(path: Path, cls: str, method: str) -> range:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == method)
    return range(fn.lineno, fn.end_lineno + 1)


def _split(row: str) -> tuple[str, str]:
    """A row of the two-column view: (left cell, right cell)."""
    left, _, right = row.partition("│")
    return left.rstrip(), right[1:] if right.startswith(" ") else right


def _number(cell: str) -> int | None:
    m = re.match(r"\s*(\d+)(?: |$)", cell)
    return int(m.group(1)) if m else None


# -- diff ------------------------------------------------------------------------------------
@pytest.fixture
def attention_rows(capsys, monkeypatch) -> list[str]:
    monkeypatch.setenv("COLUMNS", "220")
    rc, out, err = run_cli(["diff", "attention", "--no-color"], capsys)
    assert rc == 0, err
    return out.splitlines()


def test_diff_header_names_both_files(attention_rows):
    left, right = _split(attention_rows[0])
    assert "numpy_impl/attention.py" in left
    assert "torch_impl/attention.py" in right


def test_diff_pairs_forward_on_the_same_rows(attention_rows):
    rows = [_split(r) for r in attention_rows[2:]]
    label = [i for i, (a, b) in enumerate(rows) if "── SelfAttention.forward " in a]
    assert len(label) == 1
    start = label[0]
    assert "── SelfAttention.forward " in rows[start][1]  # same label row on the right
    stop = next(i for i in range(start + 1, len(rows)) if "── " in rows[i][0] + rows[i][1])
    block = rows[start + 1 : stop]
    for side, directory in ((0, diff_pairs.NUMPY_DIR), (1, diff_pairs.TORCH_DIR)):
        path = directory / "attention.py"
        shown = {n for row in block if (n := _number(row[side])) is not None}
        method = set(_def_range(path, "SelfAttention", "forward"))
        assert method <= shown  # every line of forward, on the same rows on both sides
        lines = path.read_text(encoding="utf-8").splitlines()
        extra = [lines[n - 1].strip() for n in sorted(shown - method)]
        assert all(x.startswith("#") for x in extra), extra  # at most comments (fences) below
    # ... and the two `def forward` lines face each other
    defs = [(a, b) for a, b in block if "def forward(" in a]
    assert len(defs) == 1 and "def forward(" in defs[0][1]


def test_diff_backward_only_on_the_left(attention_rows):
    rows = [_split(r) for r in attention_rows[2:]]
    lefts = [i for i, (a, _) in enumerate(rows) if "def backward(self" in a]
    source = (diff_pairs.NUMPY_DIR / "attention.py").read_text(encoding="utf-8")
    assert len(lefts) == source.count("def backward(self")  # every module's backward, shown once
    assert len(lefts) >= 1
    assert all(rows[i][1].strip() == "" for i in lefts)
    label = next(i for i, (a, _) in enumerate(rows) if "── SelfAttention.backward" in a)
    assert rows[label][1].strip() == ""
    assert not any("backward" in b and "def " in b for _, b in rows)


def _diff(capsys, monkeypatch, *argv: str, columns: int | None = None) -> list[str]:
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    rc, out, err = run_cli(["diff", *argv, "--no-color"], capsys)
    assert rc == 0, err
    return out.splitlines()


@pytest.mark.parametrize("columns", [120, 100, 80])
def test_diff_fits_the_terminal(capsys, monkeypatch, columns):
    """Every component fits: side by side at 120 columns, stacked at 100 and 80."""
    for comp in diff_pairs.components():
        rows = _diff(capsys, monkeypatch, comp, columns=columns)
        widest = max(rows, key=len)
        assert len(widest) <= columns, f"{comp}: {len(widest)} > {columns}: {widest!r}"
        stacked = rows[0].startswith("NumPy: ")
        assert stacked == (columns < diff.SIDE_BY_SIDE_MIN), (comp, rows[:3])
    rows = _diff(capsys, monkeypatch, "attention", columns=columns)
    assert any("↪" in r for r in rows)  # long lines wrap, marked in the gutter
    assert any(len(r) >= columns - 5 for r in rows)  # and the width is used


def test_diff_piped_width_is_the_terminals_or_100(capsys, monkeypatch):
    def no_terminal(fd=None):
        raise OSError("not a terminal")

    monkeypatch.setattr(diff.os, "get_terminal_size", no_terminal)
    rows = _diff(capsys, monkeypatch, "attention")
    assert max(len(r) for r in rows) == diff.PIPED_WIDTH
    # stdout piped (`| less`) but stderr at a 90-column terminal: 90
    monkeypatch.setattr(
        diff.os,
        "get_terminal_size",
        lambda fd: os.terminal_size((90, 30)) if fd == 2 else no_terminal(),
    )
    monkeypatch.setattr(sys.stderr, "fileno", lambda: 2, raising=False)
    rows = _diff(capsys, monkeypatch, "attention")
    assert max(len(r) for r in rows) == 90


def test_diff_stacked_numpy_above_torch(capsys, monkeypatch):
    rows = _diff(capsys, monkeypatch, "attention", "--method", "SelfAttention.forward", columns=80)
    assert rows[0] == "NumPy: numpy_impl/attention.py"
    assert rows[1] == "PyTorch: torch_impl/attention.py"
    label = next(i for i, r in enumerate(rows) if r.startswith("── SelfAttention.forward "))
    heads = [i for i, r in enumerate(rows) if r.strip().startswith(("NumPy: ", "PyTorch: "))]
    np_head, pt_head = [i for i in heads if i > label][:2]
    assert (
        "numpy_impl/attention.py:" in rows[np_head] and "torch_impl/attention.py:" in rows[pt_head]
    )
    for head, stop, directory in (
        (np_head, pt_head, diff_pairs.NUMPY_DIR),
        (pt_head, len(rows), diff_pairs.TORCH_DIR),
    ):
        shown = {n for r in rows[head + 1 : stop] if (n := _number(r)) is not None}
        assert set(_def_range(directory / "attention.py", "SelfAttention", "forward")) <= shown


def test_diff_stacked_marks_a_missing_twin(capsys, monkeypatch):
    rows = _diff(capsys, monkeypatch, "norm", "--method", "LayerNorm.backward", columns=80)
    assert any("PyTorch: (no PyTorch twin)" in r for r in rows)
    assert any("def backward(self" in r for r in rows)


def test_diff_pages_on_a_terminal(capsys, monkeypatch, tmp_path):
    paged = tmp_path / "paged.txt"
    pager = f"{shlex.quote(sys.executable)} -c {shlex.quote(_PAGER.format(str(paged)))}"
    monkeypatch.setenv("PAGER", pager)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.setenv("LINES", "40")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    rc, out, _ = run_cli(["diff", "attention", "--no-color"], capsys)
    assert rc == 0 and out == ""  # it all went to the pager
    text = paged.read_text(encoding="utf-8")
    assert text.count("\n") > 500 and "SelfAttention.forward" in text
    rc, out, _ = run_cli(["diff", "attention", "--no-color", "--no-pager"], capsys)
    assert rc == 0 and out == text
    # a short output (one method) fits the screen: no pager
    paged.unlink()
    rc, out, _ = run_cli(["diff", "norm", "--method", "RMSNorm.__init__", "--no-color"], capsys)
    assert rc == 0 and "def __init__" in out and not paged.exists()


_PAGER = "import sys; open({!r}, 'w', encoding='utf-8').write(sys.stdin.read())"


def test_diff_pairs_every_component_by_name():
    """A piece faces its twin: the same name, or the pair named in TWIN_NAMES."""
    for comp in diff_pairs.components():
        left = diff_pairs.load_source(diff_pairs.NUMPY_DIR / f"{comp}.py")
        right = diff_pairs.load_source(diff_pairs.TORCH_DIR / f"{comp}.py")
        pairs = diff_pairs.pair_sources(left, right)
        both = [p for p in pairs if p.left and p.right and p.key != diff_pairs.MODULE]
        assert both, f"{comp}: nothing paired"
        twins = diff_pairs.TWIN_NAMES.get(comp, {})
        for p in both:
            name = p.right.qualname
            expected = p.qualname
            head, _, tail = expected.rpartition(".")
            if not head and tail in twins:
                expected = twins[tail]
            assert name == expected, f"{comp}: {p.qualname} faces {name}"
    # the NumPy attention function faces the written-out torch one; the fused one is alone
    left = diff_pairs.load_source(diff_pairs.NUMPY_DIR / "attention.py")
    right = diff_pairs.load_source(diff_pairs.TORCH_DIR / "attention.py")
    pairs = {p.key: p for p in diff_pairs.pair_sources(left, right)}
    sdpa = pairs["scaled_dot_product_attention"]
    torch_lines = "\n".join(right.lines[sdpa.right.start - 1 : sdpa.right.end])
    assert "softmax(" in torch_lines and "@" in torch_lines
    assert pairs["fused_attention"].left is None
    for comp, names in diff_pairs.TWIN_NAMES.items():  # the hand-made pairs still exist
        for side, directory in ((0, diff_pairs.NUMPY_DIR), (1, diff_pairs.TORCH_DIR)):
            defined = {it.name for it in diff_pairs.load_source(directory / f"{comp}.py").items}
            missing = {pair[side] for pair in names.items()} - defined
            assert not missing, f"TWIN_NAMES[{comp!r}]: {sorted(missing)} not in {directory.name}"


def test_diff_one_method_and_class_names(capsys):
    rc, out, _ = run_cli(["diff", "LayerNorm", "--method", "forward", "--no-color"], capsys)
    assert rc == 0
    assert "numpy_impl/norm.py" in out and "torch_impl/norm.py" in out
    assert "def forward(self" in out and "def __init__" not in out and "def backward" not in out


def test_diff_color_uses_ansi(capsys):
    pytest.importorskip("pygments")
    rc, out, _ = run_cli(["diff", "norm", "--color", "--method", "LayerNorm.forward"], capsys)
    assert rc == 0 and "\x1b[" in out


def test_diff_unknown_component_is_one_line(capsys):
    rc, out, err = run_cli(["diff", "nonsense"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    for comp in ("attention", "norm", "gpt"):
        assert comp in err
    rc, _, err = run_cli(["diff", "attention", "--method", "nope"], capsys)
    assert rc == 2 and "forward" in err


# -- docs ------------------------------------------------------------------------------------
def _build(out: Path, figures: Path, *options: str) -> Path:
    """``python -m labs docs --figures existing``, the labs' figures looked for in ``figures``."""
    pytest.importorskip("markdown")
    pytest.importorskip("pygments")
    pytest.importorskip("latex2mathml")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TWINFORMER_FIGURES", str(figures))
        assert main(["docs", "--out", str(out), "--figures", "existing", *options]) == 0
    return out


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site where no lab has run yet (an empty figures folder): every page, no figure."""
    return _build(tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("no-figures"))


def _chapter(number: str) -> docs.Chapter:
    return next(c for c in docs.chapters() if c.number == number)


def _reference_pages() -> set[str]:
    return {"overview.html"} | {f"{p.stem}.html" for p in (ROOT / "docs").glob("*.md")}


def test_docs_every_page_with_the_sidebar_and_one_script(site):
    found = {d.name for d in (ROOT / "labs").glob("[0-9][0-9]_*") if d.is_dir()}
    expected = {f"{c.slug}.html" for c in docs.chapters()}
    assert {f"{name}.html" for name in found} <= expected
    assert {n for n, _ in docs.CHAPTER_CODE.items()} <= {p[:2] for p in expected}
    pages = {p.name for p in site.glob("*.html")}
    assert pages == expected | _reference_pages() | {"index.html"}
    for name in sorted(pages):
        text = (site / name).read_text(encoding="utf-8")
        assert re.findall(r"<script[^>]*>", text) == ['<script src="site.js" defer>'], name
        sidebar = text[text.index('<nav class="sidebar">') : text.index("</nav>")]
        for other in expected | _reference_pages():
            assert f'href="{other}"' in sidebar, (name, other)
        if name != "index.html":
            assert f'<a href="{name}" aria-current="page">' in sidebar, name
    for c in docs.chapters():
        text = (site / c.page).read_text(encoding="utf-8")
        if c.readme is None:
            assert "not written yet" in text
        else:
            assert html.escape(c.title, quote=False) in text


def test_docs_reference_pages_and_links_between_pages(site):
    """docs/*.md and the README are pages; a link to a Markdown file opens its page."""
    masks = (site / "masks.html").read_text(encoding="utf-8")
    assert "<h1" in masks and "<math" in masks or "<table>" in masks
    ch03 = (site / _chapter("03").page).read_text(encoding="utf-8")
    assert 'href="masks.html"' in ch03  # [docs/masks.md](../../docs/masks.md)
    speed = (site / "speed.html").read_text(encoding="utf-8")
    assert 'href="12_efficient_attention.html#memory-and-time-measured"' in speed
    assert 'href="training.html"' in (site / "overview.html").read_text(encoding="utf-8")
    for page in site.glob("*.html"):
        links = re.findall(r'href="([^"#]*)', page.read_text(encoding="utf-8"))
        assert not [u for u in links if u.endswith(".md") and "://" not in u], page.name


def test_docs_search_index_and_library(site):
    text = (site / "search-index.js").read_text(encoding="utf-8")
    prefix = "window.TWINFORMER_SEARCH = "
    assert text.startswith(prefix)
    entries = json.loads(text[len(prefix) :].strip().rstrip(";"))
    ids = [e["id"] for e in entries]
    assert len(ids) == len(set(ids))  # MiniSearch refuses a repeated id
    assert {i.split("#")[0] for i in ids} == {p.name for p in site.glob("*.html")} - {"index.html"}
    for e in entries:  # every hit opens a place that exists
        page, _, anchor = e["id"].partition("#")
        assert not anchor or f'id="{anchor}"' in (site / page).read_text(encoding="utf-8"), e
    assert any(
        e["heading"] == "The causal mask" and "before the softmax" in e["text"] for e in entries
    )
    assert any(e["heading"] == "softmax" and e["id"].startswith("03_") for e in entries)
    # npm's minisearch 7.2.0, dist/umd/index.js minified as its first line says
    library = (site / "minisearch.min.js").read_bytes()
    assert library.startswith(b"/*! MiniSearch 7.2.0") and library.count(b"\n") == 2
    digest = hashlib.sha256(library).hexdigest()
    assert digest == "fafbf364f7cded483d6dd868430f9c0b9745222da70dd9ae77c4ce7b0fd1d6e7"
    assert "Permission is hereby granted" in (site / "minisearch.LICENSE.txt").read_text("utf-8")


def test_docs_every_chapter_page_has_maths_and_no_raw_latex(site):
    """The HTML alone: every formula is MathML, none is left as LaTeX in the prose."""
    for c in docs.chapters():
        page = PageText((site / c.page).read_text(encoding="utf-8"))
        assert not raw_latex(page.text), f"{c.page}: raw LaTeX {raw_latex(page.text)[:3]}"
        assert page.maths, f"{c.page}: no <math> element"
    # chapter 09's AdamW update: a fraction, hats, a square root, Greek letters
    text = (site / _chapter("09").page).read_text(encoding="utf-8")
    assert "<mfrac>" in text and "<msqrt>" in text and "&#x003B2;" in text  # beta
    assert r'<annotation encoding="application/x-tex">\hat m = \frac{m}{1 - \beta_1^t}' in text
    # chapter 03's derivation of the backward is maths, not code
    backward = (site / _chapter("03").page).read_text(encoding="utf-8")
    backward = backward[backward.index('id="the-backward"') : backward.index('id="the-equations"')]
    assert backward.count("<math") >= 8 and "delta_jk" not in backward


def test_docs_contents_at_the_top_and_wrapping_code(site):
    text = (site / _chapter("03").page).read_text(encoding="utf-8")
    h1, toc = text.index("<h1"), text.index('<nav class="toc">')
    first_h2 = text.index("<h2", toc + 30)  # the contents' own heading is an h2
    assert h1 < toc < first_h2 < text.index('id="code"')
    # one span per code line, wrapped under itself by the CSS
    assert 'id="numpy-attention-softmax-' in text and 'id="torch-attention-softmax-' in text
    css = (site / "site.css").read_text(encoding="utf-8")
    assert re.search(r"\.col pre > span\[id\] \{[^}]*white-space: pre-wrap", css)
    assert re.search(
        r"@media \(max-width: 1099px\) \{.*?\.twin \{ grid-template-columns", css, re.S
    )


def test_every_lab_figure_is_shown_in_its_readme():
    """Each figure a lab draws has its place in the chapter's text: an image line
    ``![caption](figures/name.png)`` in the section it illustrates."""
    for lab in sorted(ROOT.glob("labs/[0-9][0-9]_*/lab.py")):
        text = (lab.parent / "README.md").read_text(encoding="utf-8")
        for name in docs_figures.lab_figures(lab):
            line = rf"^!\[[^\]\n]+\]\(figures/{re.escape(name)}\)$"
            assert re.search(line, text, re.M), f"{lab.parent.name}: no image line for {name}"


def test_docs_answers_render_collapsed_with_their_markdown(site):
    """A README's ``<details>`` answer is a collapsed block whose Markdown is rendered."""
    text = (site / _chapter("01").page).read_text(encoding="utf-8")
    assert re.search(r"<details>\s*<summary>Answer</summary>\s*<p>.*?<code>", text, re.S)


def test_docs_missing_figures_say_how_to_draw_them(site):
    text = (site / _chapter("03").page).read_text(encoding="utf-8")
    assert '<p class="note"><code>attention_weights.png</code>: Not drawn yet' in text
    assert "python labs/03_attention/lab.py" in text and "<img" not in text


@pytest.mark.parametrize(
    "source, expected",
    [
        (r"$a\!b$", [r"a\!b"]),  # Markdown would drop the backslash
        (r"$x_i$ and $y_i$", ["x_i", "y_i"]),  # Markdown would make <em>i$ and $y</em>
        (r"$$\begin{bmatrix} a \\ b \end{bmatrix}$$", [r"\begin{bmatrix} a \\ b \end{bmatrix}"]),
        ("$$a$$\n$$b$$", ["a", "b"]),  # two displays on consecutive lines
        ("$$\na = b\n$$", ["a = b"]),  # a display over several lines
        ("costs $5 and $6", []),  # dollars, not maths
        ("`$HOME` and ``$x$``", []),  # code spans
        (r"a \$ sign, and $t$", ["t"]),
        ("$a$\n\n$b", ["a"]),  # an inline formula never crosses a blank line
    ],
)
def test_docs_math_is_taken_out_before_markdown(source, expected):
    pytest.importorskip("latex2mathml")
    found = []

    def store(mathml: str) -> str:
        found.append(re.search(r'x-tex">(.*?)</annotation>', mathml, re.S).group(1))
        return f"@{len(found)}@"

    out = docs_math.replace_math(source, store)
    assert [html.unescape(t) for t in found] == expected
    assert out.count("@") == 2 * len(found)  # each formula replaced by its placeholder
    if "\\$" in source:
        assert "a $ sign" in out  # an escaped dollar is a dollar


def test_docs_a_formula_latex2mathml_cannot_render_stops_the_build(tmp_path):
    pytest.importorskip("latex2mathml")
    labs = tmp_path / "labs"
    (labs / "03_attention").mkdir(parents=True)
    (labs / "03_attention" / "README.md").write_text("# T\n\n$\\arg x$\n", encoding="utf-8")
    with pytest.raises(docs.UserError, match=r"03_attention/README.md.*\\arg"):
        docs.build_site(tmp_path / "site", labs_dir=labs, figures="existing")


def test_docs_chapter_03_has_both_columns_and_anchors(site):
    text = (site / _chapter("03").page).read_text(encoding="utf-8")
    assert 'class="col col-numpy"' in text and 'class="col col-torch"' in text
    assert "numpy_impl/attention.py" in text and "torch_impl/attention.py" in text
    for anchor in (
        "attention-module",
        "attention-scaled_dot_product_attention",
        "attention-scaled_dot_product_attention_backward",  # NumPy only
        "attention-softmax",
    ):
        assert f'id="{anchor}"' in text and f'href="#{anchor}"' in text  # anchor + TOC link
    assert 'class="linenos"' in text  # Pygments line numbers
    assert "SelfAttention-forward" not in text  # that is chapter 04's
    ch04 = (site / _chapter("04").page).read_text(encoding="utf-8")
    for anchor in ("forward", "backward", "__init__", "project", "attend"):
        assert f'id="attention-SelfAttention-{anchor}"' in ch04


class _Code(HTMLParser):
    """The code of a page's NumPy and PyTorch columns (line numbers left out), and the
    page's text but the PyTorch column (``"page"``)."""

    def __init__(self, text: str):
        super().__init__()
        self.stack: list[tuple[str, str | None]] = []
        self.text = {"numpy": [], "torch": [], "page": []}
        self.cells = {"numpy": 0, "torch": 0}
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        classes = (dict(attrs).get("class") or "").split()
        side = next((s for s in ("numpy", "torch") if f"col-{s}" in classes), None)
        side = "skip" if "linenos" in classes else side
        if side in self.cells:
            self.cells[side] += 1
        if tag not in PageText.VOID:
            self.stack.append((tag, side))

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass

    def handle_data(self, data):
        sides = [s for _, s in self.stack if s]
        if "skip" not in sides:
            if sides:
                self.text[sides[-1]].append(data)
            if "torch" not in sides:
                self.text["page"].append(data)

    def lines(self, side: str) -> list[str]:
        return [line.strip() for line in "".join(self.text[side]).splitlines() if line.strip()]


def _regions() -> list:
    from labs.learner.exercises_fences import parse_regions

    return [
        r
        for path in sorted(diff_pairs.NUMPY_DIR.glob("*.py"))
        for r in parse_regions(path.read_text(encoding="utf-8"), path.name)
    ]


def test_docs_every_exercise_region_on_its_chapter_page(site):
    """Derived from the fences: each region of chapter NN, whole and tinted, on NN's page
    (chapter 12's _cached_next_logits and 13's sinusoidal_table are not in CHAPTER_CODE)."""
    pages = {}
    for r in _regions():
        ch = _chapter(r.chapter)
        if ch.page not in pages:
            text = (site / ch.page).read_text(encoding="utf-8")
            pages[ch.page] = ("\n".join(_Code(text).lines("numpy")), text)
        shown, text = pages[ch.page]
        body = "\n".join(line.strip() for line in r.body if line.strip())
        assert body in shown, f"{ch.page} does not show {r.file}'s region in {r.function}"
    assert 'id="code-sampling-_cached_next_logits"' in pages[_chapter("12").page][1]
    assert 'id="code-positional-sinusoidal_table"' in pages[_chapter("13").page][1]


def test_docs_without_solutions(tmp_path):
    """``--no-solutions``: every region shows its fences, TODO lines and a raise, and
    the READMEs' quotes of the solutions ("After it passes") are gone."""
    out = _build(tmp_path / "site", tmp_path / "no-figures", "--no-solutions")
    regions = _regions()
    for ch in docs.chapters():
        code = _Code((out / ch.page).read_text(encoding="utf-8"))
        lines, inside, begins = code.lines("numpy"), False, 0
        for line in lines:
            if line.startswith("### BEGIN SOLUTION"):
                inside, begins = True, begins + (line.endswith(f"ch{ch.number}"))
            elif line.startswith("### END SOLUTION"):
                inside = False
            else:
                stub = line.startswith(("###", "raise NotImplementedError("))
                assert not inside or stub, f"{ch.page}: {line!r} in a region"
        assert begins >= sum(r.chapter == ch.number for r in regions), ch.page
        assert "After it passes" not in "".join(code.text["page"]), ch.page
        text = "\n".join(code.lines("page"))
        for r in regions:  # nor elsewhere as a quote of two lines or more (the twin may match)
            body = [s.strip() for s in r.body if s.strip() and not s.strip().startswith("#")]
            assert len(body) < 2 or "\n".join(body[:2]) not in text, (ch.page, r.function)


def test_docs_readme_links_notes_and_exercise_tint(tmp_path):
    pytest.importorskip("markdown")
    labs = tmp_path / "labs"
    (labs / "03_attention").mkdir(parents=True)
    (labs / "04_multihead").mkdir()
    (labs / "12_extra").mkdir()
    (labs / "03_attention" / "img").mkdir()
    (labs / "03_attention" / "img" / "p.png").write_bytes(b"not really a png")
    (labs / "03_attention" / "README.md").write_text(
        "# Chapter 3: `softmax` attention\n\nNext: [multi-head](../04_multihead/README.md), "
        "[the code](../../numpy_impl/attention.py).\n\n## A table\n\n| a | b |\n|---|---|\n"
        "| 1 | 2 |\n\n```python\nx = 1\n```\n\n![a plot](img/p.png)\n",
        encoding="utf-8",
    )
    out = tmp_path / "site"
    written = docs.build_site(out, labs_dir=labs, figures="existing")
    names = {p.name for p in written}
    assert {"index.html", "03_attention.html", "04_multihead.html", "12_extra.html"} <= names
    assert "01_tokens.html" in names  # in CHAPTER_CODE, no folder yet: page anyway
    page = (out / "03_attention.html").read_text(encoding="utf-8")
    assert "<table>" in page and 'href="04_multihead.html"' in page
    assert 'id="a-table"' in page  # toc extension
    assert 'src="assets/03_attention/p.png"' in page  # images are copied in
    assert (out / "assets" / "03_attention" / "p.png").is_file()
    assert "numpy_impl/attention.py" in page
    tokens = (out / "01_tokens.html").read_text(encoding="utf-8")
    assert "no PyTorch twin" in tokens and "col-torch" not in tokens
    # exercise fences are ordinary comments; chapter NN's are tinted on its page
    mod = tmp_path / "mod.py"
    mod.write_text(
        "def f(x):\n    ### BEGIN SOLUTION ch03\n    y = x + 1\n    ### END SOLUTION\n"
        "    ### BEGIN SOLUTION ch04\n    return y\n    ### END SOLUTION\n",
        encoding="utf-8",
    )
    src = diff_pairs.load_source(mod)
    assert docs_html._exercise_lines(src, "03") == {2, 3, 4}
    assert docs_html._exercise_lines(src, "04") == {5, 6, 7}
    assert docs_html._exercise_lines(src, "05") == set()


_FAKE_LAB = """# %% [markdown]
# # Chapter 03 lab
# %% [markdown]
# ## 1. A square
# %%
from labs.learner.notebook import figure_saver, plot_to_files

save = figure_saver("03_attention")
plot_to_files()
import matplotlib.pyplot as plt

fig, ax = plt.subplots(figsize=(2, 2))
ax.plot([0, 1], [0, 1])
save(fig, "square.png")
{rest}
"""


def test_docs_figures_cached_in_the_chapters_folder(tmp_path, monkeypatch):
    """A lab runs once: its figures stay in its cache (here ``$TWINFORMER_FIGURES``, else
    ``labs/NN_topic/figures/``), later builds copy them and run nothing, until lab.py changes."""
    pytest.importorskip("latex2mathml")
    cache = tmp_path / "cache"
    monkeypatch.setenv("TWINFORMER_FIGURES", str(cache))
    chapter = tmp_path / "labs" / "03_attention"
    chapter.mkdir(parents=True)
    (chapter / "README.md").write_text(
        "# Chapter 3\n\n$x$\n\n## 1. A square\n\n![The unit square](figures/square.png)\n\n"
        "## Run the lab\n\nIt draws `figures/square.png`.\n",
        encoding="utf-8",
    )
    lab = chapter / "lab.py"
    lab.write_text(_FAKE_LAB.format(rest=""), encoding="utf-8")
    assert docs_figures.lab_figures(lab) == ["square.png"]
    out, said = tmp_path / "site", []

    def build(mode: str) -> str:
        said.clear()
        docs.build_site(out, labs_dir=chapter.parent, figures=mode, say=said.append)
        return (out / "03_attention.html").read_text(encoding="utf-8")

    page = build("auto")  # nothing drawn yet: the lab runs, into its cache
    png = cache / "03_attention" / "square.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert (out / "figures" / "03_attention" / "square.png").read_bytes() == png.read_bytes()
    assert any("03_attention: 1 figure(s)" in line for line in said), said
    figure = page.index('<figure id="fig-square">')
    assert page.index('id="1-a-square"') < figure < page.index('id="run-the-lab"')
    assert 'src="figures/03_attention/square.png"' in page[figure:]
    assert '<a href="figures/03_attention/square.png"' in page[figure:]  # a click: full size
    assert "<figcaption>The unit square</figcaption>" in page[figure:]
    assert '<a href="#fig-square"><code>figures/square.png</code></a>' in page  # the mention

    assert "<figcaption>" in build("auto") and said == []  # the cache is used: no lab runs
    os.utime(lab, (png.stat().st_mtime + 10,) * 2)  # lab.py edited after the figure
    build("auto")
    assert any("1 figure(s)" in line for line in said), said

    shutil.rmtree(cache)  # existing: never runs a lab; the page says how to draw it
    page = build("existing")
    assert not said and "<img" not in page and "Not drawn yet" in page
    assert f"python {lab.as_posix()}" in page

    lab.write_text(_FAKE_LAB.format(rest="raise SystemExit(3)"), encoding="utf-8")
    page = build("run")  # a lab that fails: the build goes on, the page says so
    assert any("FAILED (exit status 3)" in line for line in said), said
    assert "failed (exit status 3)" in page


# -- the browser -----------------------------------------------------------------------------
def test_browser_renders_chapter_03_in_two_columns(site, tmp_path):
    exe = chromium()
    page = site / _chapter("03").page

    # the DOM as Chromium built it: both columns hold code
    dom = browse(exe, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    cols = _Code(dom.stdout)
    numpy_text, torch_text = ("".join(cols.text[s]) for s in ("numpy", "torch"))
    assert cols.cells["numpy"] >= 3 and cols.cells["torch"] >= 3
    assert "def scaled_dot_product_attention(" in numpy_text and "np.ndarray" in numpy_text
    assert "def scaled_dot_product_attention(" in torch_text and "torch.Tensor" in torch_text

    # The screenshot, scrolled to the code. Headless --screenshot paints only the first
    # viewport of a document that a #fragment scrolled, so the page goes in a full-window
    # iframe, which scrolls itself to the anchor before the frame is painted.
    frame = tmp_path / "frame.html"
    target = page.as_uri() + "#attention-scaled_dot_product_attention"
    frame.write_text(
        '<!DOCTYPE html><html><body style="margin:0"><iframe src="'
        + target
        + '" style="border:0;width:100vw;height:100vh;display:block"></iframe></body></html>',
        encoding="utf-8",
    )
    png = tmp_path / "ch03.png"
    shot = browse(exe, tmp_path, f"--screenshot={png}", frame.as_uri())
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.is_file() and png.stat().st_size > 20_000
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(png, ARTIFACTS / "docs-ch03.png")

    import matplotlib.image as mpimg

    img = mpimg.imread(png)[..., :3]
    assert img.shape[:2] == (1000, 1400)
    assert img.std() > 0.05  # not one flat colour
    ink = img.mean(axis=-1) < 0.55  # dark text pixels
    colour = (img.max(axis=-1) - img.min(axis=-1)) > 0.3  # syntax highlighting
    main = slice(int(img.shape[1] * 0.2), None)  # right of the sidebar: the two columns
    width = img.shape[1] - main.start
    for name, sl in (
        ("left (NumPy)", slice(main.start, main.start + width // 2)),
        ("right (PyTorch)", slice(main.start + width // 2, None)),
    ):
        assert ink[:, sl].mean() > 0.01, f"the {name} column has almost no text"
        assert colour[:, sl].mean() > 0.001, f"the {name} column has no highlighted code"


@pytest.mark.parametrize("width", [1280, 800])
def test_browser_layout_fits_the_window(site, tmp_path, width):
    """Every page at 1280 and 800 px: nothing wider than the window. At 1280 the sidebar
    stands beside the text and the code columns side by side; at 800 the sidebar folds
    behind its button and the columns stack. Screenshots: ci-artifacts/docs-*-{width}.png."""
    import matplotlib.image as mpimg

    exe = chromium()
    pages = sorted(site.glob("*.html"))
    found = probe_pages(exe, pages, tmp_path, script=LAYOUT_PROBE, size=(width, 1000))
    for page, seen in found.items():
        assert seen["width"] == width, (page.name, seen)
        assert seen["scroll"] <= width, f"{page.name} overflows at {width} px: {seen}"
        assert seen["sidebar"] == (width >= 1100), (page.name, seen)
        if seen["columns"] is not None:
            assert seen["columns"] == ("side by side" if width >= 1100 else "stacked"), page.name
    assert found[site / _chapter("03").page]["columns"] is not None
    ARTIFACTS.mkdir(exist_ok=True)
    for name in (_chapter("03").page, "index.html"):
        png = tmp_path / f"{name}-{width}.png"
        shot = browse(
            exe,
            tmp_path,
            f"--window-size={width},1400",
            f"--screenshot={png}",
            (site / name).as_uri(),
        )
        assert shot.returncode == 0, shot.stderr[-2000:]
        shutil.copyfile(png, ARTIFACTS / f"docs-{Path(name).stem}-{width}.png")
        img = mpimg.imread(png)[..., :3]
        assert img.shape[:2] == (1400, width) and (img.mean(axis=-1) < 0.55).mean() > 0.01


def test_browser_search_finds_a_section(site, tmp_path):
    """The search box, offline from file://: "causal mask" finds chapter 03's section."""
    exe = chromium()
    found = probe_pages(exe, [site / "index.html"], tmp_path, script=SEARCH_PROBE % '"causal mask"')
    hits = found[site / "index.html"]["hits"]
    assert hits and f"{_chapter('03').page}#the-causal-mask" in hits[:5], hits
