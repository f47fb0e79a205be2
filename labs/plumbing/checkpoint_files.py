"""The file layer of checkpoints: writes that a crash cannot leave half done (every file
fsynced before a name points at it, new names made durable), and the test hook
(:data:`PAUSE_ENV_VAR`) that stops the writer at a named stage.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: Test hook: ``STAGE`` or ``STAGE@N`` makes the writer print ``checkpoint writer paused at
#: STAGE`` on stderr and sleep the Nth time (default 1) it reaches STAGE, to be SIGKILLed.
PAUSE_ENV_VAR = "TWINFORMER_TEST_CHECKPOINT_PAUSE"
_stages_reached: dict[str, int] = {}


def _pause_point(stage: str) -> None:
    """The test hook of :data:`PAUSE_ENV_VAR`; does nothing unless it names ``stage``."""
    wanted, _, nth = os.environ.get(PAUSE_ENV_VAR, "").partition("@")
    if wanted != stage:
        return
    _stages_reached[stage] = _stages_reached.get(stage, 0) + 1
    if _stages_reached[stage] == int(nth or 1):
        print(f"checkpoint writer paused at {stage}", file=sys.stderr, flush=True)
        time.sleep(3600)  # until the test kills us


def _fsync_dir(path: Path) -> None:
    """Make renames and new names in ``path`` durable."""
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupt or truncated files, an interrupted write,
    contents that do not match its config.json or the model, a directory holding links or
    names it should not. The message lists every offending key; both backends raise it."""


def check_directory(directory: Path) -> None:
    """Refuse (CheckpointError, the entry named) a run directory with a symbolic link or a
    special file in it or its ``.previous``: a save writes, a load reads, only inside it."""
    directory = Path(directory)
    for folder in (directory, directory / ".previous"):
        if folder != directory and not os.path.lexists(folder):
            continue
        if folder != directory and (folder.is_symlink() or not folder.is_dir()):
            raise CheckpointError(f"{folder} is not a directory: remove it (no checkpoint is)")
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.is_symlink():
                    raise CheckpointError(
                        f"{entry.path} is a symbolic link: a run directory holds its own files "
                        "only (nothing was read or written); remove the link"
                    )
                regular = entry.is_file(follow_symlinks=False) or entry.is_dir(
                    follow_symlinks=False
                )
                if not regular:
                    raise CheckpointError(f"{entry.path} is not a regular file: remove it")


def member(directory: Path, name: str) -> Path:
    """``directory / name`` for a name a config supplied, proven to stay inside: a plain
    name (no separator, not hidden), not a link (CheckpointError otherwise)."""
    if not isinstance(name, str) or name != os.path.basename(name) or name.startswith("."):
        raise CheckpointError(f"{directory}: {name!r} is not a plain file name")
    path = Path(directory) / name
    if os.path.realpath(path) != os.path.join(os.path.realpath(directory), name):
        raise CheckpointError(f"{path} leads outside {directory} (a symbolic link?)")
    if os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
        raise CheckpointError(f"{path} is not a regular file")
    return path


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` (never through an existing name) and fsync it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with open(fd, "wb") as f:
        half = len(data) // 2
        f.write(data[:half])
        if half:
            f.flush()
            _pause_point("writing")  # half a file on disk
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before any name points at them


def _write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """``arrays`` as a new safetensors file ``path`` (no copy in memory), fsynced."""
    from safetensors.numpy import save_file

    save_file(arrays, str(path))
    _pause_point("writing")  # a file on disk, the set not yet complete
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # the bytes are on disk before any name points at them
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Replace ``path`` by ``data`` whole: a temporary file beside it, fsynced, renamed onto
    ``path`` (a link there is replaced, never written through)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with open(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    _fsync_dir(path.parent)


def _contiguous(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # Not np.ascontiguousarray: it turns the 0-d "step" into shape (1,).
    return {k: np.require(v, requirements="C") for k, v in arrays.items()}


def _link_or_copy(src: Path, dst: Path) -> None:
    # A hard link shares the bytes: the rename in step 3 gives DIR's name a new
    # file and leaves this one alone. Copy where links are not supported.
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def new_directory(path: str | os.PathLike):
    """Create the directory ``path`` all at once or not at all: yields a hidden sibling
    (``.NAME.PID.partial``) to write into, renamed to ``path`` when the block ends without
    an error, else removed. An existing ``path`` is never touched.

    Raises:
        FileExistsError: ``path`` exists (checked first, and again before the rename).
    """
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise FileExistsError(f"{path} already exists (nothing was written; choose a new name)")
    from .checkpoint import remove_leftovers  # a cycle: checkpoint.py builds on this module

    path.parent.mkdir(parents=True, exist_ok=True)
    remove_leftovers(path.parent, f".{glob.escape(path.name)}.*.partial")  # killed writers'
    tmp = path.with_name(f".{path.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        _fsync_dir(tmp)
        if path.exists() or path.is_symlink():  # appeared while we were writing
            raise FileExistsError(f"{path} already exists (nothing was written)")
        os.rename(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
