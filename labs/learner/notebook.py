"""The set-up every chapter's ``lab.py`` shares, written once.

A lab (a jupytext percent script) imports the installed ``labs`` package, so it runs
from any directory and in a notebook kernel, and starts in this order::

    from labs.learner.notebook import figure_saver, limit_threads, max_diff, plot_to_files

    save = figure_saver("03_attention")  # into labs/03_attention/figures/
    limit_threads()  # before NumPy and torch load: BLAS reads its threads then
    plot_to_files()  # before matplotlib.pyplot loads: it picks its backend then

This module itself imports nothing heavy. ``SONNETS``, ``HAMLET`` and ``CORIOLANUS``
(``passages.txt``) let every lab run without a download.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import labs

#: The ``labs`` package and the repository around it, found from the package itself
#: (a notebook kernel has no ``__file__`` of its own to start from).
LABS = Path(labs.__file__).resolve().parent
ROOT = LABS.parent

#: Shakespeare (public domain, ``passages.txt``): :func:`load_text`'s fallback.
_, SONNETS, HAMLET, CORIOLANUS = re.split(
    r"^===.*\n", (LABS / "learner" / "passages.txt").read_text(encoding="utf-8"), flags=re.M
)


def limit_threads() -> None:
    """One BLAS thread and one torch thread (the labs' arrays are small), unless the
    environment says otherwise. Call it before NumPy loads: BLAS reads them then."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import torch

    torch.set_num_threads(1)


def plot_to_files() -> None:
    """Draw with matplotlib's Agg backend (files, no window), except in a notebook kernel
    (its inline backend shows them too). Call it before ``import matplotlib.pyplot``."""
    import matplotlib

    if "ipykernel" not in sys.modules:
        matplotlib.use("Agg")


def repository_path(*parts: str) -> Path:
    """A path in the repository, ``repository_path("runs", "numpy")`` for ``runs/numpy``."""
    return ROOT.joinpath(*parts)


def shown(path: Path) -> str:
    """``path`` from the repository root when it lies inside it (else as given)."""
    p = Path(path).resolve()
    return p.relative_to(ROOT).as_posix() if p.is_relative_to(ROOT) else str(path)


#: Set, every lab's figures go to ``$TWINFORMER_FIGURES/<chapter>/`` (the docs' cache).
FIGURES_ENV_VAR = "TWINFORMER_FIGURES"


def figures_folder(chapter: str, labs_dir: Path | None = None) -> Path:
    """``labs/<chapter>/figures`` (``labs_dir``: another labs folder), or
    ``$TWINFORMER_FIGURES/<chapter>`` when that is set."""
    root = os.environ.get(FIGURES_ENV_VAR)
    return Path(root) / chapter if root else (labs_dir or LABS) / chapter / "figures"


def figure_saver(chapter: str) -> Callable[[Any, str], None]:
    """A ``save(fig, name)`` that writes the figure into :func:`figures_folder` (``chapter``:
    ``"03_attention"``) at 120 dpi, says where, and closes it unless a notebook shows it."""
    folder = figures_folder(chapter)

    def save(fig, name: str) -> None:
        import matplotlib
        import matplotlib.pyplot as plt

        folder.mkdir(parents=True, exist_ok=True)
        path = folder / name
        fig.savefig(path, dpi=120, bbox_inches="tight")
        print(f"wrote {shown(path)}")
        if matplotlib.get_backend().lower() == "agg":
            plt.close(fig)

    return save


def max_diff(a, b) -> float:
    """``max |a - b|`` as a float; NumPy arrays or CPU torch tensors, broadcastable."""
    import numpy as np

    a, b = (x.detach().numpy() if hasattr(x, "detach") else x for x in (a, b))
    return float(np.max(np.abs(np.asarray(a) - b)))


def load_text(fallback: str, fallback_source: str, notice: str) -> tuple[str, str]:
    """``(text, source)``: Tiny Shakespeare from ``$TWINFORMER_DATA`` or ``labs train``'s
    cache, never downloaded; else prints why and ``notice`` and returns the fallback."""
    from labs.plumbing import data

    if os.environ.get(data.DATA_ENV_VAR) or data.cache_path().is_file():
        try:
            path = data.resolve_corpus()  # with either of those, it does not download
            return data.load_corpus(path), str(path)
        except (OSError, ValueError, data.CorpusUnavailableError) as e:
            print(f"could not read the corpus ({e})")
    print(
        f"no corpus found (set {data.DATA_ENV_VAR}=/path/to/tinyshakespeare.txt, or run "
        f"`python -m labs train` once to cache it): {notice}"
    )
    return fallback, fallback_source
