"""``python -m labs diff`` and ``python -m labs docs``: the twins side by side.

* diff: the terminal view pairs the two files by class and method (``forward``
  faces ``forward`` on the same rows, ``backward`` faces blank space), fits the
  terminal down to 80 columns (stacked below 115), and pages on a terminal;
* docs: the site has an index and one page per chapter, with both columns and
  an anchor per method, the contents at the top, the maths as MathML (no LaTeX
  left in the text) and the lab's figures;
* the browser: headless Chromium renders chapter 03, and the screenshot shows
  two columns of highlighted code (copied to ``ci-artifacts/docs-ch03.png``).
  Skipped without a ``chromium`` binary, except under ``CI=true`` (CI installs it).
  Every chapter page with its real figures, in Chromium: test_lab_scripts.py,
  which draws them.
"""

from __future__ import annotations

import ast
import html
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
from parity_tests.browser import PageText, browse, chromium, raw_latex

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
@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site as ``python -m labs docs --figures existing`` builds it where no lab has
    run yet (its figures are looked for in an empty folder): every page, no figure."""
    pytest.importorskip("markdown")
    pytest.importorskip("pygments")
    pytest.importorskip("latex2mathml")
    out = tmp_path_factory.mktemp("site")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TWINFORMER_FIGURES", str(tmp_path_factory.mktemp("no-figures")))
        assert main(["docs", "--out", str(out), "--figures", "existing"]) == 0
    return out


def _chapter(number: str) -> docs.Chapter:
    return next(c for c in docs.chapters() if c.number == number)


def test_docs_index_and_one_page_per_chapter(site):
    found = {d.name for d in (ROOT / "labs").glob("[0-9][0-9]_*") if d.is_dir()}
    expected = {f"{c.slug}.html" for c in docs.chapters()}
    assert {f"{name}.html" for name in found} <= expected
    assert {n for n, _ in docs.CHAPTER_CODE.items()} <= {p[:2] for p in expected}
    pages = {p.name for p in site.glob("*.html")}
    assert pages == expected | {"index.html"}
    index = (site / "index.html").read_text(encoding="utf-8")
    for page in expected:
        assert f'href="{page}"' in index
    for c in docs.chapters():
        text = (site / c.page).read_text(encoding="utf-8")
        assert "<script" not in text
        if c.readme is None:
            assert "not written yet" in text
        else:
            assert html.escape(c.title, quote=False) in text


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


def test_docs_contents_at_the_top_and_wrapping_code(site):
    text = (site / _chapter("03").page).read_text(encoding="utf-8")
    h1, toc = text.index("<h1"), text.index('<nav class="toc">')
    first_h2 = text.index("<h2", toc + 30)  # the contents' own heading is an h2
    assert h1 < toc < first_h2 < text.index('id="code"')
    # one span per code line, wrapped under itself by the CSS
    assert 'id="numpy-attention-softmax-' in text and 'id="torch-attention-softmax-' in text
    assert re.search(r"\.col pre > span\[id\] \{[^}]*white-space: pre-wrap", text)


def test_docs_missing_figures_say_how_to_draw_them(site):
    text = (site / _chapter("03").page).read_text(encoding="utf-8")
    assert 'id="figures"' in text and "not drawn yet" in text
    assert "python labs/03_attention/lab.py" in text


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


def test_docs_readme_links_notes_and_exercise_tint(tmp_path):
    pytest.importorskip("markdown")
    labs = tmp_path / "labs"
    (labs / "03_attention").mkdir(parents=True)
    (labs / "04_multihead").mkdir()
    (labs / "12_extra").mkdir()
    (labs / "03_attention" / "figures").mkdir()
    (labs / "03_attention" / "figures" / "p.png").write_bytes(b"not really a png")
    (labs / "03_attention" / "README.md").write_text(
        "# Chapter 3: `softmax` attention\n\nNext: [multi-head](../04_multihead/README.md), "
        "[the code](../../numpy_impl/attention.py).\n\n## A table\n\n| a | b |\n|---|---|\n"
        "| 1 | 2 |\n\n```python\nx = 1\n```\n\n![a plot](figures/p.png)\n",
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
    assert 'src="assets/03_attention/figures/p.png"' in page  # images are copied in
    assert (out / "assets" / "03_attention" / "figures" / "p.png").is_file()
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


def test_docs_figures_drawn_by_running_the_lab(tmp_path, monkeypatch):
    pytest.importorskip("latex2mathml")
    monkeypatch.delenv("TWINFORMER_FIGURES", raising=False)
    chapter = tmp_path / "labs" / "03_attention"
    chapter.mkdir(parents=True)
    (chapter / "README.md").write_text(
        "# Chapter 3\n\n$x$\n\n## Run the lab\n\nIt draws `figures/square.png`.\n\n## Next\n",
        encoding="utf-8",
    )
    (chapter / "lab.py").write_text(_FAKE_LAB.format(rest=""), encoding="utf-8")
    assert [(f.name, f.section) for f in docs_figures.lab_figures(chapter / "lab.py")] == [
        ("square.png", "1. A square")
    ]
    out, said = tmp_path / "site", []

    # auto, nothing drawn yet: the lab runs, its figure goes straight into the site
    docs.build_site(out, labs_dir=chapter.parent, figures="auto", say=said.append)
    png = out / "figures" / "03_attention" / "square.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert not (chapter / "figures").exists()  # the chapter's own folder is left alone
    assert any("03_attention: 1 figure(s)" in line for line in said), said
    page = (out / "03_attention.html").read_text(encoding="utf-8")
    assert '<img src="figures/03_attention/square.png"' in page
    assert "<b>1. A square</b>" in page
    assert '<a href="#fig-square"><code>figures/square.png</code></a>' in page  # the mention
    assert page.index('id="run-the-lab"') < page.index('id="figures"') < page.index('id="next"')
    assert '<a href="#fig-square">' in page[page.index('<nav class="toc">') :]  # in the contents

    # existing: never runs a lab; without a last run the page says how to draw them
    said.clear()
    drawn = png.read_bytes()
    shutil.rmtree(out)
    docs.build_site(out, labs_dir=chapter.parent, figures="existing", say=said.append)
    page = (out / "03_attention.html").read_text(encoding="utf-8")
    assert not said and "<img" not in page and "not drawn yet" in page
    # ... and with one, it takes that
    (chapter / "figures").mkdir()
    (chapter / "figures" / "square.png").write_bytes(drawn)
    docs.build_site(out, labs_dir=chapter.parent, figures="existing", say=said.append)
    assert (out / "figures" / "03_attention" / "square.png").is_file()
    assert "not drawn yet" not in (out / "03_attention.html").read_text(encoding="utf-8")

    # a lab that fails: the build goes on, the page says so
    (chapter / "lab.py").write_text(_FAKE_LAB.format(rest="raise SystemExit(3)"), encoding="utf-8")
    docs.build_site(out, labs_dir=chapter.parent, figures="run", say=said.append)
    assert any("FAILED (exit status 3)" in line for line in said), said
    assert "failed (exit status 3)" in (out / "03_attention.html").read_text(encoding="utf-8")


# -- the browser -----------------------------------------------------------------------------
class _Columns(HTMLParser):
    """The text inside the NumPy and PyTorch code columns of a page."""

    def __init__(self):
        super().__init__()
        self.stack: list[str | None] = []
        self.text = {"numpy": [], "torch": []}
        self.cells = {"numpy": 0, "torch": 0}

    def handle_starttag(self, tag, attrs):
        if tag != "div":
            return
        classes = (dict(attrs).get("class") or "").split()
        side = next((s for s in ("numpy", "torch") if f"col-{s}" in classes), None)
        if side:
            self.cells[side] += 1
        self.stack.append(side)

    def handle_endtag(self, tag):
        if tag == "div" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        side = next((s for s in reversed(self.stack) if s), None)
        if side:
            self.text[side].append(data)


def test_browser_renders_chapter_03_in_two_columns(site, tmp_path):
    exe = chromium()
    page = site / _chapter("03").page

    # the DOM as Chromium built it: both columns hold code
    dom = browse(exe, tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    cols = _Columns()
    cols.feed(dom.stdout)
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
    half = img.shape[1] // 2
    for name, sl in (("left (NumPy)", slice(0, half)), ("right (PyTorch)", slice(half, None))):
        assert ink[:, sl].mean() > 0.01, f"the {name} half has almost no text"
        assert colour[:, sl].mean() > 0.001, f"the {name} half has no highlighted code"
