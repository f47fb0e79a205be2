"""A run's output directory: never destroyed, never shared, one log row per checkpoint.

:func:`existing_outputs` (what a directory holds of a run), :class:`RunLock` (one process
at a time: a ``flock`` the kernel releases even after SIGKILL), and the log,
``log.jsonl``: :func:`read_log` drops what a crash leaves and says so, :func:`append_row`
is durable, :func:`write_log` atomic, :func:`reconcile_log` gives a resumed run one row
per evaluation up to its checkpoint. JSON is strict (:func:`dumps_strict`: no NaN).
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
    """An exclusive advisory lock on ``directory/.lock`` until :meth:`release` or the end.

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
    """The rows of ``path`` (JSON objects with an int ``"step"``; none if it is missing),
    and a note for every line dropped (cut short by a crash, NUL bytes, not such a row)."""
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
    """Replace ``path`` with ``rows`` atomically."""
    write_atomic(path, "".join(dumps_strict(r) + "\n" for r in rows).encode("utf-8"))


def append_row(path: Path, row: dict) -> None:
    """Append one row to ``path`` durably (a line a crash cuts short, read_log drops)."""
    line = (dumps_strict(row) + "\n").encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    with open(fd, "ab") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())


def checkpoint_row(config: dict) -> dict | None:
    """The log row a checkpoint was saved with (older ones: rebuilt from its metrics)."""
    if isinstance(config.get("log_row"), dict):
        return dict(config["log_row"])
    metrics = config.get("metrics") or {}
    if "step" not in metrics:
        return None
    return {k: metrics[k] for k in ROW_KEYS if k in metrics}


def reconcile_log(src: Path, dst: Path, step: int, row: dict | None) -> list[str]:
    """Write to ``dst`` the log of a run resumed at checkpoint ``step``: ``src``'s rows
    before ``step`` (the last of a repeated step), then ``row`` (the checkpoint's own, or
    the log's); rows after ``step`` are dropped. Returns the notes of :func:`read_log`."""
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
