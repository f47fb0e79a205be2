"""The labs' figures on the chapter pages of ``python -m labs docs``.

A ``lab.py`` draws its figures with ``save(fig, "name.png")`` into its figures folder
(``notebook.figures_folder``), the cache the site copies them from; a lab runs, in its
own process, only when it must. ``--figures``: ``auto`` runs a lab whose figures are
missing or older than it; ``run`` runs every lab; ``existing`` never runs one (a missing
figure is a note on its page).
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .notebook import ROOT, figures_folder
from .notebook import shown as _shown

FIGURE_MODES = ("auto", "run", "existing")
TIMEOUT = 600  # seconds a lab may run


@dataclass
class ChapterFigures:
    """A chapter's figures: those its lab draws, those in the site, and why any are missing."""

    wanted: list[str]  # "lr_schedule.png", in the lab's order
    found: dict[str, Path] = field(default_factory=dict)  # name -> the PNG in the site
    note: str = ""  # how to draw the missing ones (shown where each would be)


def lab_figures(lab: Path) -> list[str]:
    """The names a lab script saves, in order: every ``save(fig, "name.png")`` call."""
    if not lab.is_file():
        return []
    calls = []
    for node in ast.walk(ast.parse(lab.read_text(encoding="utf-8"))):
        match node:
            case ast.Call(func=ast.Name(id="save"), args=[_, ast.Constant(value=str(name))]):
                calls.append((node.lineno, name))
    return list(dict.fromkeys(name for _, name in sorted(calls, key=lambda c: c[0])))


def _run_lab(lab: Path) -> tuple[int, str, float]:
    """Run one lab script in its own process, one BLAS thread unless set: figures to its cache."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    threads = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
    env = {**threads, **os.environ, "MPLBACKEND": "Agg", "PYTHONPATH": path}
    start, cmd = time.monotonic(), [sys.executable, str(lab)]
    try:
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        return -1, f"stopped after {TIMEOUT} s", time.monotonic() - start
    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
    return r.returncode, tail[0], time.monotonic() - start


def collect(
    chapters: list,
    out_dir: Path,
    mode: str = "auto",
    say: Callable[[str], None] = print,
) -> dict[str, ChapterFigures]:
    """slug -> :class:`ChapterFigures` of ``docs.Chapter``s, drawn where needed and copied
    into ``out_dir/figures/<slug>/``; a lab that fails is said and noted on its page."""
    result, cache, to_run = {}, {}, []
    for ch in chapters:
        lab = ch.directory / "lab.py"
        result[ch.slug] = ChapterFigures(lab_figures(lab))
        cache[ch.slug] = figures_folder(ch.slug, labs_dir=ch.directory.parent)
        pngs = [cache[ch.slug] / name for name in result[ch.slug].wanted]
        stale = any(not p.is_file() or p.stat().st_mtime < lab.stat().st_mtime for p in pngs)
        if pngs and (mode == "run" or (mode == "auto" and stale)):
            to_run.append(ch)

    failed = {}
    if to_run:
        jobs = max(1, min(4, os.cpu_count() or 1))
        say(
            f"drawing figures: running {len(to_run)} lab script(s), {jobs} at a time, into "
            "labs/NN_topic/figures/ (later builds reuse them; --figures existing never runs one)"
        )
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = pool.map(lambda ch: (ch, _run_lab(ch.directory / "lab.py")), to_run)
            for ch, (rc, tail, seconds) in runs:
                if rc != 0:
                    failed[ch.slug] = rc
                    say(f"  {ch.slug}: FAILED (exit status {rc}): {tail}")
                else:
                    say(f"  {ch.slug}: {len(result[ch.slug].wanted)} figure(s) in {seconds:.0f} s")

    for ch in chapters:
        cf, lab = result[ch.slug], _shown(ch.directory / "lab.py")
        dest = out_dir / "figures" / ch.slug
        for name in cf.wanted:
            (dest / name).unlink(missing_ok=True)  # never an older build's PNG
            if (cache[ch.slug] / name).is_file() and ch.slug not in failed:
                dest.mkdir(parents=True, exist_ok=True)
                cf.found[name] = Path(shutil.copyfile(cache[ch.slug] / name, dest / name))
        run = f"<code>python {lab}</code>"
        if ch.slug in failed:
            cf.note = f"{run} failed (exit status {failed[ch.slug]}): run it to see why."
        elif len(cf.found) < len(cf.wanted):
            cf.note = f"Not drawn yet: run {run} (or <code>python -m labs docs</code>)."
    return result
