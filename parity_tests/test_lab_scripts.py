"""Every chapter's lab script runs to the end on CPU and writes its figures.

Each ``labs/NN_topic/lab.py`` is a jupytext percent file; here it runs as a
plain script in a subprocess (matplotlib's Agg backend, no display), exactly as
a learner would run it. The corpus comes from ``$TWINFORMER_DATA`` when set;
the labs fall back to a built-in text otherwise and never download.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAB_SCRIPTS = sorted(ROOT.glob("labs/[0-9][0-9]_*/lab.py"))


@pytest.mark.parametrize("script", LAB_SCRIPTS, ids=[p.parent.name for p in LAB_SCRIPTS])
def test_lab_script_runs_and_writes_figures(script: Path):
    started = time.time() - 1.0  # file times can lag the clock by a tick
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    figures = [p for p in (script.parent / "figures").glob("*.png") if p.stat().st_mtime >= started]
    assert figures, f"{script} wrote no PNG into {script.parent / 'figures'}"


def test_every_chapter_has_a_lab_and_a_readme():
    chapters = sorted(p for p in (ROOT / "labs").glob("[0-9][0-9]_*") if p.is_dir())
    assert len(chapters) >= 10, [c.name for c in chapters]
    for chapter in chapters:
        assert (chapter / "README.md").is_file(), f"{chapter.name} has no README.md"
        assert (chapter / "lab.py").is_file(), f"{chapter.name} has no lab.py"
