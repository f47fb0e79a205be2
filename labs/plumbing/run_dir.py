"""A run's output directory: never destroyed, never shared, one log row per checkpoint.

What ``python -m labs train`` (and ``classify``, ``seq2seq``) write into ``--out``
goes through here:

* :func:`existing_outputs`: what a directory already holds of a run, so that a
  new run refuses to replace it (unless told to, ``--overwrite``);
* :class:`RunLock`: one process at a time per directory (an advisory ``flock`` on
  ``DIR/.lock``, released by the kernel when the process ends, even by SIGKILL);
* the log, ``log.jsonl``: :func:`read_log` drops what a crash leaves (a line cut
  short, the NUL bytes a power cut can leave at the end of a file) and says so;
  :func:`append_row` writes a row and makes it durable; :func:`write_log`
  replaces the whole file atomically; :func:`reconcile_log` makes the log of a
  resumed run hold exactly one row per evaluation up to its checkpoint.

Every JSON document is written strictly (:func:`dumps_strict`: no NaN, no
infinities, which Python's json writes but no other parser reads).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .checkpoint_files import write_atomic
from .checkpoint_format import _loads_strict

LOG_FILE = "log.jsonl"
LOCK_FILE = ".lock"
#: The keys of a training log row (``labs train``), in order.
ROW_KEYS = ("step", "train_loss", "val_loss", "val_bpb", "lr", "elapsed_s")


class RunDirectoryBusy(RuntimeError):
    """Another process holds the directory's lock (it is training into it)."""


def dumps_strict(obj, **kwargs) -> str:
    """``json.dumps`` that refuses NaN and infinities (ValueError names the problem)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError as e:
        raise ValueError(f"not JSON: a NaN or an infinity ({e})") from e


def existing_outputs(directory: Path, names: tuple[str, ...]) -> list[str]:
    """The entries of ``names`` that exist in ``directory`` (none if it does not exist)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [n for n in names if (directory / n).exists()]


class RunLock:
    """An exclusive advisory lock on ``directory/.lock`` for this process's lifetime
    (or until :meth:`release`).

    Raises:
        RunDirectoryBusy: another process holds it.
        OSError: the lock file cannot be created (an unwritable directory).
    """

    def __init__(self, directory: Path):
        import fcntl

        self.path = Path(directory) / LOCK_FILE
        # O_NOFOLLOW: a link planted at .lock must not make us truncate its target
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise RunDirectoryBusy(
                f"{directory} is in use by another process (it holds {self.path}); "
                "wait for it to finish, or write to another directory"
            ) from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


# -- the log ---------------------------------------------------------------------------
def read_log(path: Path) -> tuple[list[dict], list[str]]:
    """The rows of ``path`` (a JSON object per line, each with an int ``"step"``),
    and a note for every line dropped: a line a crash cut short (usually the last),
    NUL bytes, anything that is not such a row. A missing file has no rows.
    """
    path = Path(path)
    if not path.is_file():
        return [], []
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip("\x00 \t\r")), default=-1)
    rows, notes = [], []
    if "\x00" in text:
        notes.append(f"{path} holds NUL bytes (what a crash can leave at its end): dropped them")
    for i, line in enumerate(lines):
        content = line.strip("\x00 \t\r")
        if not content:
            continue
        try:
            row = _loads_strict(content)
            if not (isinstance(row, dict) and type(row.get("step")) is int) or "\x00" in line:
                raise ValueError("not a row with an integer step")
        except ValueError:
            why = "cut short by a crash" if i == last else "not a JSON row"
            notes.append(f"{path}: line {i + 1} is {why}; dropped it: {content[:60]!r}")
            continue
        rows.append(row)
    return rows, notes


def write_log(path: Path, rows: list[dict]) -> None:
    """Replace ``path`` with ``rows`` atomically (a temporary file, fsynced, renamed)."""
    write_atomic(path, "".join(dumps_strict(r) + "\n" for r in rows).encode("utf-8"))


def append_row(path: Path, row: dict) -> None:
    """Append one row to ``path`` and make it durable (a crash may cut the line
    short: :func:`read_log` drops such a line)."""
    line = (dumps_strict(row) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with open(fd, "ab") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def checkpoint_row(config: dict) -> dict | None:
    """The log row of the evaluation a checkpoint was saved with (``config["log_row"]``;
    for checkpoints written before it was recorded, rebuilt from ``config["metrics"]``)."""
    if isinstance(config.get("log_row"), dict):
        return dict(config["log_row"])
    metrics = config.get("metrics") or {}
    if "step" not in metrics:
        return None
    return {k: metrics[k] for k in ROW_KEYS if k in metrics}


def reconcile_log(src: Path, dst: Path, step: int, row: dict | None) -> list[str]:
    """Write to ``dst`` the log of a run resumed at checkpoint ``step``: the rows
    of ``src`` before ``step`` (one per step: a repeated step keeps its last row),
    then ``row``, the checkpoint's own (or, without it, the log's row of ``step``).
    Rows after ``step`` belong to a stretch the checkpoint does not hold; a row
    missing because the process died between the checkpoint and its log line is
    restored. Returns the notes of :func:`read_log`.
    """
    rows, notes = read_log(src)
    by_step: dict[int, dict] = {}
    for r in rows:
        if r["step"] <= step:
            by_step[r["step"]] = r
    if row is not None:
        if step not in by_step:
            notes.append(
                f"{src} had no row for step {step} (the process stopped between the "
                "checkpoint and its log line): restored it from the checkpoint"
            )
        by_step[step] = row
    write_log(dst, [by_step[s] for s in sorted(by_step)])
    return notes
