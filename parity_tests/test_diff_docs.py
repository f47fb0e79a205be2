"""``python -m labs diff`` and ``python -m labs docs``: the twins side by side.

* diff: the terminal view pairs the two files by class and method (``forward``
  faces ``forward`` on the same rows, ``backward`` faces blank space);
* docs: the site has an index and one page per chapter, with both columns and
  an anchor per method;
* the browser: headless Chromium renders chapter 03, and the screenshot shows
  two columns of highlighted code (copied to ``ci-artifacts/docs-ch03.png``).
  Skipped without a ``chromium`` binary, except under ``CI=true`` (CI installs it).
"""

from __future__ import annotations

import ast
import html
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from labs.__main__ import main
from labs.learner import diff, diff_pairs, docs, docs_html

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


def test_diff_respects_width_and_wraps(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # narrower than the 2 x 60 minimum
    rc, out, _ = run_cli(["diff", "attention", "--no-color"], capsys)
    assert rc == 0
    rows = out.splitlines()
    assert max(len(r) for r in rows) <= 2 * diff.MIN_COLUMN + 3
    assert any("↪" in r for r in rows)  # long lines wrap, marked in the gutter
    assert "\x1b[" not in out


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
    pytest.importorskip("markdown")
    pytest.importorskip("pygments")
    out = tmp_path_factory.mktemp("site")
    assert main(["docs", "--out", str(out)]) == 0
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
    written = docs.build_site(out, labs_dir=labs)
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


# -- the browser -----------------------------------------------------------------------------
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,1000",
)


def _chromium() -> str:
    exe = shutil.which("chromium")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium not found, and CI=true: .ci/run should have installed it")
        pytest.skip("no chromium binary (apt-get install chromium); CI runs this test")
    return exe


def _browse(exe: str, tmp: Path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


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
    exe = _chromium()
    page = site / _chapter("03").page

    # the DOM as Chromium built it: both columns hold code
    dom = _browse(exe, tmp_path, "--dump-dom", page.as_uri())
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
    shot = _browse(exe, tmp_path, f"--screenshot={png}", frame.as_uri())
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
