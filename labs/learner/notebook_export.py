"""``python -m labs notebook NN``: a chapter's lab as a Jupyter notebook.

    python -m labs notebook 03                    # -> labs/03_attention/lab.ipynb
    python -m labs notebook 03 --out ~/ch03.ipynb
    python -m labs notebook 03 --force            # replace the notebook written before
    python -m labs notebook 03 --execute          # run it first: the notebook keeps its outputs

Each ``labs/NN_topic/lab.py`` is a jupytext "percent" script (``# %%`` a code cell,
``# %% [markdown]`` a text cell); jupytext makes it an ``.ipynb``. Open that in VS Code
(kernel: the project's ``.venv``) or Jupyter and run all cells. An existing notebook
(it may hold your own cells) is replaced only with ``--force``. Needs the ``notebook``
extra: ``pip install -e ".[notebook]"``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
from pathlib import Path

from .. import UserError
from .exercises_fences import REPO, chapter_folder, parse_chapter
from .notebook import shown as _shown

#: The kernel the notebook asks for: the Python that runs Jupyter, with ipykernel.
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
CELL_TIMEOUT_S = 900


def find_lab(chapter: str) -> Path:
    """``labs/NN_topic/lab.py`` for ``"03"``, ``"3"`` or ``"03_attention"``."""
    lab = REPO / chapter_folder(parse_chapter(chapter.split("_", 1)[0])) / "lab.py"
    if not lab.is_file():
        raise UserError(f"chapter {chapter!r} has no lab.py")
    return lab


def to_notebook(lab: Path):
    """The lab script as an ``nbformat`` notebook (not written anywhere)."""
    try:
        import jupytext
    except ImportError:
        raise UserError('labs notebook needs jupytext: pip install -e ".[notebook]"') from None
    nb = jupytext.read(lab, fmt="py:percent")
    nb.metadata.pop("jupytext", None)  # a plain notebook, not paired with the script
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata.setdefault("language_info", {"name": "python"})
    return nb


def execute(nb, cwd: Path):
    """Run every cell in a fresh kernel (``nbclient``); raise ``UserError`` on a failing cell."""
    try:
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError:
        raise UserError('--execute needs nbclient: pip install -e ".[notebook]"') from None
    client = NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name=KERNELSPEC["name"],
        resources={"metadata": {"path": str(cwd)}},
    )
    try:
        client.execute(stderr=subprocess.DEVNULL)  # the kernel's own warnings; cells report
    except CellExecutionError as e:
        lines = str(e).strip().splitlines()
        raise UserError("a cell failed:\n" + "\n".join(lines[-12:])) from None
    return nb


def write_new(nb, path: Path, force: bool) -> None:
    """Write ``nb`` to ``path`` atomically; an existing file only with ``force``."""
    import nbformat

    if path.exists() and not force:
        raise UserError(
            f"{_shown(path)} exists (it may hold your own cells): pass --force to replace "
            "it, or --out another path"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.umask(umask := os.umask(0))
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 -> what a plain open() would give
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            nbformat.write(nb, f)
        (os.replace if force else os.link)(tmp, path)  # a link never replaces a new file
    except FileExistsError:
        raise UserError(f"{_shown(path)} appeared meanwhile: pass --force to replace it") from None
    finally:
        Path(tmp).unlink(missing_ok=True)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("chapter", metavar="NN", help="the chapter: 03, or 3")
    p.add_argument("--out", metavar="PATH", help="the .ipynb, or a folder (default: by lab.py)")
    p.add_argument("--force", action="store_true", help="replace an existing notebook")
    p.add_argument("--execute", action="store_true", help="run every cell first: keep the outputs")


def main(args: argparse.Namespace) -> int:
    lab = find_lab(args.chapter)
    out = Path(args.out) if args.out is not None else lab.with_suffix(".ipynb")
    if out.is_dir() or args.out and args.out.endswith(("/", os.sep)):
        out = out / f"{lab.parent.name}.ipynb"
    if out.suffix != ".ipynb":
        raise UserError(f"--out {out}: expected a path ending in .ipynb, or a folder")
    nb = to_notebook(lab)
    if out.exists() and not args.force:  # say so before running anything
        write_new(nb, out, force=False)
    if args.execute:
        print(f"running {_shown(lab)} as a notebook...")
        execute(nb, cwd=lab.parent)
    write_new(nb, out, args.force)
    print(f"wrote {_shown(out)} ({len(nb.cells)} cells)")
    print(
        "open it in VS Code (kernel: this project's .venv) or in Jupyter "
        f"(pip install jupyterlab, then jupyter lab {_shown(out)}), and run all cells"
    )
    return 0
