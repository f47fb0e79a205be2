"""Every chapter's lab script runs to the end on CPU and writes its figures, and the
docs site shows them: every chapter page, in headless Chromium, has its maths drawn,
its figures decoded and no LaTeX left in its text.

Each ``labs/NN_topic/lab.py`` is a jupytext percent file; here it runs as a
plain script in a fresh process (matplotlib's Agg backend, no display), as a
learner would run it, forked from one that has imported numpy, torch and
matplotlib (parity_tests/forkrun.py: that import is ~3 s per script). Its
figures go to a temporary folder (``$TWINFORMER_FIGURES``), never into the
chapters' own ``figures/``. The corpus comes from ``$TWINFORMER_DATA`` when set;
the labs fall back to a built-in text otherwise and never download.

The site is then built from those figures (``python -m labs docs --figures
existing``, with ``$TWINFORMER_FIGURES`` pointing at them), so the labs run once
for both. Chapter 09's page is screenshotted into ``ci-artifacts/docs-ch09.png``.
The browser tests skip without a ``chromium`` binary, except under ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from parity_tests import forkrun
from parity_tests.browser import PageText, browse, chromium, probe_pages, raw_latex

ROOT = Path(__file__).resolve().parent.parent
LAB_SCRIPTS = sorted(ROOT.glob("labs/[0-9][0-9]_*/lab.py"))
ARTIFACTS = ROOT / "ci-artifacts"


@pytest.fixture(scope="module")
def figures_root(tmp_path_factory) -> Path:
    """Where the labs draw here: ``<root>/<chapter>/<name>.png``."""
    return tmp_path_factory.mktemp("figures")


@pytest.fixture(scope="module")
def lab_runs(tmp_path_factory, figures_root) -> dict:
    """Every lab script run to its end, two at a time, each in a fresh process forked
    from one that imported numpy, torch and matplotlib once (parity_tests/forkrun.py):
    name -> (CompletedProcess, the time it was started)."""
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        "TWINFORMER_FIGURES": str(figures_root),
    }
    jobs = [
        {"name": p.parent.name, "kind": "script", "argv": [str(p)], "cwd": str(ROOT)}
        for p in LAB_SCRIPTS
    ]
    started = time.time() - 1.0  # file times can lag the clock by a tick
    procs = forkrun.run_jobs(
        jobs,
        env=env,
        preload=["numpy", "torch", "matplotlib", "matplotlib.pyplot"],
        parallel=2,
        workdir=tmp_path_factory.mktemp("labs"),
    )
    return {name: (proc, started) for name, proc in procs.items()}


@pytest.mark.parametrize("script", LAB_SCRIPTS, ids=[p.parent.name for p in LAB_SCRIPTS])
def test_lab_script_runs_and_writes_figures(script: Path, lab_runs, figures_root):
    from labs.learner.docs_figures import lab_figures

    r, started = lab_runs[script.parent.name]
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    folder = figures_root / script.parent.name
    figures = {p.name for p in folder.glob("*.png") if p.stat().st_mtime >= started}
    assert figures, f"{script} wrote no PNG into {folder}"
    # every save(fig, "name.png") the docs site looks for was drawn
    assert set(lab_figures(script)) <= figures


@pytest.fixture(scope="module")
def site(tmp_path_factory, lab_runs, figures_root) -> Path:
    """The docs site with the figures the labs just drew."""
    pytest.importorskip("markdown")
    pytest.importorskip("latex2mathml")
    from labs.__main__ import main

    out = tmp_path_factory.mktemp("site")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TWINFORMER_FIGURES", str(figures_root))
        assert main(["docs", "--out", str(out), "--figures", "existing"]) == 0
    return out


def _chapter_pages(site: Path) -> list[Path]:
    return sorted(site.glob("[0-9][0-9]_*.html"))


def test_site_every_chapter_page_has_maths_and_figures(site):
    pages = _chapter_pages(site)
    assert len(pages) == len(LAB_SCRIPTS)
    for page in pages:
        text = PageText(page.read_text(encoding="utf-8"))
        assert not raw_latex(text.text), f"{page.name}: {raw_latex(text.text)[:3]}"
        assert text.maths, f"{page.name}: no maths"
        figures = [src for src in text.images if src.startswith("figures/")]
        assert figures, f"{page.name}: no figure"
        for src in figures:
            assert (site / src).read_bytes()[:4] == b"\x89PNG", src


def test_site_in_chromium_every_chapter_page(site, tmp_path):
    """What a reader sees: maths laid out as maths, every image decoded, no LaTeX."""
    exe = chromium()
    found = probe_pages(exe, _chapter_pages(site), tmp_path)
    for page, seen in found.items():
        assert not seen["raw"], f"{page.name}: raw LaTeX on the page: {seen['raw']}"
        assert seen["maths"] >= 1 and seen["drawn"] == seen["maths"], (page.name, seen)
        assert seen["images"] >= 1 and seen["decoded"] == seen["images"], (page.name, seen)


def test_site_chapter_09_screenshot(site, tmp_path):
    """Chapter 09's page from its top: the title, the contents, the loss's equations."""
    import matplotlib.image as mpimg

    exe = chromium()
    png = tmp_path / "ch09.png"
    page = next(p for p in _chapter_pages(site) if p.name.startswith("09_"))
    shot = browse(exe, tmp_path, "--window-size=1400,2400", f"--screenshot={png}", page.as_uri())
    assert shot.returncode == 0 and png.is_file(), shot.stderr[-2000:]
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(png, ARTIFACTS / "docs-ch09.png")
    img = mpimg.imread(png)[..., :3]
    assert img.shape[:2] == (2400, 1400)
    ink = img.mean(axis=-1) < 0.55
    assert ink.mean() > 0.01 and img.std() > 0.05  # text, not a blank page


def test_every_chapter_has_a_lab_and_a_readme():
    chapters = sorted(p for p in (ROOT / "labs").glob("[0-9][0-9]_*") if p.is_dir())
    assert len(chapters) >= 10, [c.name for c in chapters]
    for chapter in chapters:
        assert (chapter / "README.md").is_file(), f"{chapter.name} has no README.md"
        assert (chapter / "lab.py").is_file(), f"{chapter.name} has no lab.py"
