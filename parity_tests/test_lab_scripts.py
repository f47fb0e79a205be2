"""Every chapter's lab script runs to the end on CPU and writes its figures.

Each ``labs/NN_topic/lab.py`` is a jupytext percent file; here it runs as a
plain script in a fresh process (matplotlib's Agg backend, no display), as a
learner would run it, forked from one that has imported numpy, torch and
matplotlib (parity_tests/forkrun.py: that import is ~3 s per script). The
corpus comes from ``$TWINFORMER_DATA`` when set; the labs fall back to a
built-in text otherwise and never download.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from parity_tests import forkrun

ROOT = Path(__file__).resolve().parent.parent
LAB_SCRIPTS = sorted(ROOT.glob("labs/[0-9][0-9]_*/lab.py"))


@pytest.fixture(scope="module")
def lab_runs(tmp_path_factory) -> dict:
    """Every lab script run to its end, two at a time, each in a fresh process forked
    from one that imported numpy, torch and matplotlib once (parity_tests/forkrun.py):
    name -> (CompletedProcess, the time it was started)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
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
def test_lab_script_runs_and_writes_figures(script: Path, lab_runs):
    r, started = lab_runs[script.parent.name]
    assert r.returncode == 0, f"{script} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    figures = [p for p in (script.parent / "figures").glob("*.png") if p.stat().st_mtime >= started]
    assert figures, f"{script} wrote no PNG into {script.parent / 'figures'}"


def test_every_chapter_has_a_lab_and_a_readme():
    chapters = sorted(p for p in (ROOT / "labs").glob("[0-9][0-9]_*") if p.is_dir())
    assert len(chapters) >= 10, [c.name for c in chapters]
    for chapter in chapters:
        assert (chapter / "README.md").is_file(), f"{chapter.name} has no README.md"
        assert (chapter / "lab.py").is_file(), f"{chapter.name} has no lab.py"
