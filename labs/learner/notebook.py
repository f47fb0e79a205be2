"""The set-up every chapter's ``lab.py`` shares, written once.

A lab (a jupytext percent script) imports the installed ``labs`` package, so it runs
from any directory and in a notebook kernel, and starts in this order::

    from labs.learner.notebook import figure_saver, limit_threads, max_diff, plot_to_files

    save = figure_saver("03_attention")  # into labs/03_attention/figures/
    limit_threads()  # before NumPy and torch load: BLAS reads its threads then
    plot_to_files()  # before matplotlib.pyplot loads: it picks its backend then

This module itself imports nothing heavy. The built-in passages (``SONNETS``,
``HAMLET``, ``CORIOLANUS``; public domain) are :func:`load_text`'s fallback when no
copy of Tiny Shakespeare is at hand, so every lab runs without a download.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import labs

#: The ``labs`` package and the repository around it, found from the package itself
#: (a notebook kernel has no ``__file__`` of its own to start from).
LABS = Path(labs.__file__).resolve().parent
ROOT = LABS.parent

# Shakespeare, sonnets 18 and 116: labs 09 and 10 train on them without a corpus.
SONNETS = """\
Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove:
O no! it is an ever-fixed mark
That looks on tempests and is never shaken;
It is the star to every wandering bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
If this be error and upon me proved,
I never writ, nor no man ever loved.
"""

# Hamlet III.1, the first 17 lines of the speech (labs 01 and 11).
HAMLET = """\
HAMLET:
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them. To die: to sleep;
No more; and by a sleep to say we end
The heart-ache and the thousand natural shocks
That flesh is heir to, 'tis a consummation
Devoutly to be wish'd. To die, to sleep;
To sleep: perchance to dream: ay, there's the rub;
For in that sleep of death what dreams may come
When we have shuffled off this mortal coil,
Must give us pause: there's the respect
That makes calamity of so long life;
"""

# Coriolanus I.1, the opening exchange (labs 05 and 14).
CORIOLANUS = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\n"
    "You are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\nFirst Citizen:\n"
    "First, you know Caius Marcius is chief enemy to the people.\n\n"
)


def limit_threads() -> None:
    """One BLAS thread and one torch thread, unless the environment says otherwise.

    The labs' arrays are small: extra threads only add synchronisation. Sets
    ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` to 1 where unset,
    then ``torch.set_num_threads(1)``. Call it before NumPy loads (BLAS reads them then).
    """
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    import torch

    torch.set_num_threads(1)


def plot_to_files() -> None:
    """Draw with matplotlib's Agg backend (PNG files, no window needed), except in Jupyter.

    Inside a notebook kernel (``ipykernel`` imported) the notebook's inline
    backend is kept, so figures show in the page as well as in the files. Call
    it before ``import matplotlib.pyplot``.
    """
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


#: Set, it sends every lab's figures to ``$TWINFORMER_FIGURES/<chapter>/`` instead of
#: ``labs/<chapter>/figures/``, the cache ``python -m labs docs`` takes them from.
FIGURES_ENV_VAR = "TWINFORMER_FIGURES"


def figures_folder(chapter: str, labs_dir: Path | None = None) -> Path:
    """Where chapter ``chapter``'s figures go: ``labs/<chapter>/figures``, or
    ``$TWINFORMER_FIGURES/<chapter>`` when that is set. ``labs_dir``: another labs folder."""
    root = os.environ.get(FIGURES_ENV_VAR)
    if root:
        return Path(root) / chapter
    return (labs_dir or LABS) / chapter / "figures"


def figure_saver(chapter: str) -> Callable[[Any, str], None]:
    """A ``save(fig, name)`` that writes ``labs/<chapter>/figures/name`` and says where.

    ``chapter`` is the chapter's folder name (``"03_attention"``); with
    ``$TWINFORMER_FIGURES`` set, the figures go to ``$TWINFORMER_FIGURES/<chapter>/``
    (:func:`figures_folder`). ``save`` creates the folder if needed, writes the
    figure at 120 dpi with a tight bounding box, prints ``wrote <path from the
    repository root>``, and closes the figure when there is no display (Agg
    backend), so that a script drawing many figures does not keep them all in
    memory. In a notebook the figure stays open and is shown below the cell.
    """
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
    """Largest absolute difference between two arrays, ``max |a - b|`` as a float.

    Either may be a NumPy array or a torch tensor (detached and converted;
    CPU tensors only) of the same or broadcastable shape.
    """
    import numpy as np

    a, b = (x.detach().numpy() if hasattr(x, "detach") else x for x in (a, b))
    return float(np.max(np.abs(np.asarray(a) - b)))


def load_text(fallback: str, fallback_source: str, notice: str) -> tuple[str, str]:
    """The corpus and where it came from, ``(text, source)``; never downloads.

    Reads Tiny Shakespeare from ``$TWINFORMER_DATA`` or from the cache that
    ``python -m labs train`` fills (``labs.plumbing.data.cache_path()``). Only then is
    ``labs.plumbing.data.resolve_corpus()`` called: with nothing local it would download.
    Without either, or when the file cannot be read, prints why and ``notice``
    (what the lab does instead, e.g. "training on a built-in passage") and
    returns ``(fallback, fallback_source)``.
    """
    from labs.plumbing.data import (
        DATA_ENV_VAR,
        CorpusUnavailableError,
        cache_path,
        load_corpus,
        resolve_corpus,
    )

    if os.environ.get(DATA_ENV_VAR) or cache_path().is_file():
        try:
            path = resolve_corpus()  # with either of those, resolve_corpus does not download
            return load_corpus(path), str(path)
        except (OSError, ValueError, CorpusUnavailableError) as e:
            print(f"could not read the corpus ({e})")
    print(
        f"no corpus found (set {DATA_ENV_VAR}=/path/to/tinyshakespeare.txt, or run "
        f"`python -m labs train` once to cache it): {notice}"
    )
    return fallback, fallback_source
