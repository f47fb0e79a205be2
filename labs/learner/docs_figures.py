"""The labs' figures on the chapter pages of ``python -m labs docs``.

A chapter's ``lab.py`` draws its figures with ``save(fig, "name.png")``
(``labs/learner/notebook.py``); :func:`lab_figures` reads those calls, and the
lab's section heading above each, without running anything. The PNGs are
git-ignored, so the site either takes them from the lab's last run
(``labs/NN_topic/figures/``, or ``$TWINFORMER_FIGURES/NN_topic/`` when that is
set) or draws them by running the lab, each in its own process, with its
figures going straight into the site (``docs/site/figures/NN_topic/``), so a
build never touches the chapters' own ``figures/`` folders. Which one is
``--figures``:

* ``auto`` (the default): the last run's figures where the lab has drawn all of
  them, otherwise run the lab (seconds each; chapter 14's about 40 s);
* ``run``: run every lab again;
* ``existing``: never run a lab; a chapter whose figures are missing gets a note
  saying how to draw them.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .notebook import FIGURES_ENV_VAR, ROOT, figures_folder

FIGURE_MODES = ("auto", "run", "existing")
LAB_TIMEOUT_S = 600


@dataclass(frozen=True)
class LabFigure:
    name: str  # "lr_schedule.png"
    section: str  # the lab's heading above the save call, "3. The learning-rate schedule"

    @property
    def anchor(self) -> str:
        return "fig-" + re.sub(r"[^A-Za-z0-9_-]", "-", self.name.rsplit(".", 1)[0])


@dataclass
class ChapterFigures:
    """What a chapter page shows: the figures found (name -> PNG) and why any are missing."""

    wanted: list[LabFigure]
    found: dict[str, Path] = field(default_factory=dict)
    note: str = ""  # why some or all are missing (shown on the page)
    seconds: float | None = None  # how long the lab ran, when it ran


def lab_figures(lab: Path) -> list[LabFigure]:
    """The figures a lab script saves, in order: every ``save(fig, "name.png")`` call,
    with the ``## heading`` of the lab's last markdown cell above it as its section."""
    if not lab.is_file():
        return []
    text = lab.read_text(encoding="utf-8")
    headings: list[tuple[int, str]] = []
    in_markdown = False
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("# %%"):
            in_markdown = "[markdown]" in line
        elif in_markdown and (m := re.match(r"#\s+#{2,}\s+(.+?)\s*$", line)):
            headings.append((n, m.group(1)))
    out, seen = [], set()
    calls = [
        node
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "save"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ]
    for node in sorted(calls, key=lambda c: c.lineno):
        name = node.args[1].value
        if name in seen:
            continue
        seen.add(name)
        above = [h for n, h in headings if n < node.lineno]
        out.append(LabFigure(name, above[-1] if above else ""))
    return out


def _run_lab(lab: Path, figures_root: Path) -> tuple[int, str, float]:
    """Run one lab script in its own process, its figures into ``figures_root``."""
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        FIGURES_ENV_VAR: str(figures_root),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    start = time.monotonic()
    try:
        r = subprocess.run(
            [sys.executable, str(lab)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=LAB_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return -1, f"stopped after {LAB_TIMEOUT_S} s", time.monotonic() - start
    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
    return r.returncode, tail[0], time.monotonic() - start


def collect(
    chapters: list,
    out_dir: Path,
    mode: str = "auto",
    jobs: int | None = None,
    say: Callable[[str], None] = print,
) -> dict[str, ChapterFigures]:
    """Every chapter's figures copied or drawn into ``out_dir/figures/<slug>/``.

    ``chapters``: objects with ``slug`` and ``directory`` (``docs.Chapter``).
    Returns slug -> :class:`ChapterFigures`. A lab that fails is reported on its
    page and through ``say``; the build goes on.
    """
    if mode not in FIGURE_MODES:
        raise ValueError(f"figures: expected one of {', '.join(FIGURE_MODES)}, got {mode!r}")
    dest_root = out_dir / "figures"
    result: dict[str, ChapterFigures] = {}
    to_run = []
    for ch in chapters:
        lab = ch.directory / "lab.py"
        wanted = lab_figures(lab)
        result[ch.slug] = cf = ChapterFigures(wanted)
        if not wanted:
            continue
        source = figures_folder(ch.slug, labs_dir=ch.directory.parent)
        have = {f.name: source / f.name for f in wanted if (source / f.name).is_file()}
        if mode == "run" or (mode == "auto" and len(have) < len(wanted)):
            to_run.append(ch)
            continue
        dest = dest_root / ch.slug
        dest.mkdir(parents=True, exist_ok=True)
        for name, path in have.items():
            target = dest / name
            if not (target.exists() and target.samefile(path)):
                shutil.copyfile(path, target)
            cf.found[name] = target
        if len(have) < len(wanted):
            rel = _shown(lab)
            cf.note = (
                f"{len(wanted) - len(have)} of this lab's {len(wanted)} figures are not drawn "
                f"yet: run <code>python {rel}</code> (or build the site with "
                "<code>python -m labs docs --figures run</code>)."
            )

    if to_run:
        jobs = jobs or max(1, min(4, os.cpu_count() or 1))
        say(
            f"drawing figures: running {len(to_run)} lab script(s), {jobs} at a time "
            "(seconds each; --figures existing skips this)"
        )
        for ch in to_run:  # a lab that fails must not leave an older build's PNGs behind
            for f in result[ch.slug].wanted:
                (dest_root / ch.slug / f.name).unlink(missing_ok=True)
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            runs = pool.map(lambda ch: (ch, _run_lab(ch.directory / "lab.py", dest_root)), to_run)
            for ch, (rc, tail, seconds) in runs:
                cf = result[ch.slug]
                cf.seconds = seconds
                dest = dest_root / ch.slug
                cf.found = {f.name: dest / f.name for f in cf.wanted if (dest / f.name).is_file()}
                rel = _shown(ch.directory / "lab.py")
                if rc != 0:
                    cf.note = (
                        f"<code>python {rel}</code> failed (exit status {rc}), so its figures "
                        "are missing here; run it to see why."
                    )
                    say(f"  {ch.slug}: FAILED (exit status {rc}): {tail}")
                else:
                    say(f"  {ch.slug}: {len(cf.found)} figure(s) in {seconds:.0f} s")
    return result


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return path.as_posix()
