"""How to name a ``labs`` command in a message: with the interpreter the learner used
(``.venv/bin/python -m labs check 09``), so a "next:" line works as typed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def interpreter() -> str:
    """``.venv/bin/python`` (relative to the current directory) when this process runs
    the repository's virtual environment, else ``python``."""
    exe = Path(os.path.abspath(sys.executable))  # not resolved: .venv/bin/python is a link
    if not exe.is_relative_to(REPO / ".venv"):
        return "python"
    return exe.relative_to(Path.cwd()).as_posix() if exe.is_relative_to(Path.cwd()) else str(exe)


def labs_command(*args: str) -> str:
    """``.venv/bin/python -m labs check 10`` (or ``twinformer check 10`` when the learner
    used the console script): the command line, as this learner would type it."""
    if Path(sys.argv[0]).name.startswith("twinformer"):
        return " ".join(["twinformer", *args])
    return " ".join([interpreter(), "-m", "labs", *args])
