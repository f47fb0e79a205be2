"""Checkpoints: one directory, the same for both backends.

::

    DIR/model.safetensors      weights by state-dict name (the tied head.weight omitted)
    DIR/optimizer.safetensors  AdamW moments: exp_avg.NAME, exp_avg_sq.NAME, and step
    DIR/config.json            model config, tokenizer, step, backend, training args, metrics,
                               the SHA-256 of the two files above, and (from ``labs train``)
                               the batch sampler's and the dropout RNGs' states
    DIR/.previous/             the checkpoint before the last one, whole (hard links)

Weights are safetensors (no pickle: loading runs no code), the rest JSON; a checkpoint
written by either backend loads into either. A save never leaves DIR without a complete
checkpoint, whenever the process dies: the new set is written and fsynced in
``DIR/.staging/``, the current one kept whole as ``DIR/.previous/``, then the files are
moved in with ``os.replace``, config.json last. config.json records the SHA-256 of its
files, so a set mixed by a kill between two renames is recognised and loaded from
``.previous`` (nothing committed is lost); a set damaged otherwise raises
:class:`CorruptCheckpointError` unless the caller asks for ``.previous``
(``--from-previous``). A failed save leaves the last checkpoint as it was.

``checkpoint_format.py`` says what a set holds and checks it; ``checkpoint_files.py`` is
the file layer underneath (fsynced writes, the test hook that pauses the writer).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np

from .checkpoint_files import (
    _contiguous,
    _fsync_dir,
    _link_or_copy,
    _pause_point,
    _sha256,
    _write_arrays,
    _write_file,
    check_directory,
    member,
)
from .checkpoint_format import (
    CONFIG_FILE,
    FORMAT,
    MODEL_FILE,
    OPTIMIZER_FILE,
    TIED_KEY,
    TIED_SOURCE,
    VERSION,
    CheckpointError,
    _check_belongs,
    _is_tied,
    _load_safetensors,
    _loads_strict,
    _mismatches,
    _optimizer_shapes,
    _read_config,
    check_declared_size,
    config_sha256,
    expected_shapes,
    layers_in,
)

# -- writing: stage a full set, keep the previous one, then commit -------------------
STAGING_DIR = ".staging"  # the new set, complete before anything in DIR is touched
PREVIOUS_DIR = ".previous"  # a full copy (hard links) of the set being replaced


def remove_leftovers(directory: str | os.PathLike, pattern: str = ".*") -> list[str]:
    """Remove (and return the names of) what a writer killed mid-save leaves among the
    ``pattern`` names of ``directory``: ``.staging/``, any hidden ``.*.tmp`` and a
    ``.NAME.PID.partial`` directory (:func:`new_directory`'s) whose process is gone. None
    is part of a checkpoint: the sets in ``directory`` and ``.previous`` are whole."""
    directory = Path(directory)
    removed = []
    for path in sorted(directory.glob(pattern)):
        if path.name != STAGING_DIR and not path.name.endswith(".tmp"):
            pid = path.name.removesuffix(".partial").rpartition(".")[2]
            if not (path.name.endswith(".partial") and pid.isdigit() and not _running(int(pid))):
                continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: no signal, only the check that the process exists
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or not a process number
        pass
    return True


def _keep_previous(directory: Path) -> None:
    """Copy ``directory``'s set into ``directory/.previous`` if it is complete and intact
    (else ``.previous`` keeps the last good one)."""
    try:
        document = _read_config(directory)
        files = document.get("files") or {}
        for name in files:
            _check_belongs(directory, document, name)
    except (OSError, CheckpointError):
        return
    tmp = directory / f"{PREVIOUS_DIR}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for name in (*files, CONFIG_FILE):
        _link_or_copy(member(directory, name), tmp / name)
    _fsync_dir(tmp)
    _pause_point("keeping-previous")
    # Until the rename below DIR's own set is untouched: a kill here loses nothing.
    shutil.rmtree(directory / PREVIOUS_DIR, ignore_errors=True)
    _pause_point("previous-removed")
    os.replace(tmp, directory / PREVIOUS_DIR)
    _fsync_dir(directory)


# -- save ------------------------------------------------------------------------
def save_checkpoint(
    directory: str | os.PathLike,
    model_state: dict[str, np.ndarray],
    config: dict,
    optimizer_state: dict[str, np.ndarray] | None = None,
    meta: dict | None = None,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write a checkpoint into ``directory`` (created if needed) as the module says. A test
    can stop the writer (:data:`PAUSE_ENV_VAR`) at ``writing``, ``staged``,
    ``keeping-previous``, ``previous-removed``, ``kept-previous``, ``moved-<file>`` and
    ``committed``.

    Args:
        model_state: a backend's ``state_dict()`` (``head.weight`` dropped when tied).
        config: ``{"model", "tokenizer"}`` sections (and ``"train"``).
        optimizer_state: ``{"exp_avg.NAME", "exp_avg_sq.NAME", "step"}``, or None.
        meta: JSON values merged into config.json (``step``, ``backend``, ``metrics``, ...).
        extra_files: ``{file name: bytes}`` written and hashed alike (``tokenizer.json``).

    Raises:
        ValueError: a section missing, or a state that does not match the config (keys
            and shapes listed); nothing is written then.
        OSError: the directory cannot be written or the disk is full; the checkpoint
            there is unchanged and the partial files are removed.
    """
    directory = Path(directory)
    meta = dict(meta or {})
    for key in ("model", "tokenizer"):
        if key not in config:
            raise ValueError(f"config: the {key!r} section is missing")
    model_config = config["model"]
    weights = {k: np.asarray(v) for k, v in model_state.items()}
    if problems := _mismatches("model_state", weights, expected_shapes(model_config)):
        raise ValueError("model_state does not match config['model']: " + "; ".join(problems))
    if _is_tied(model_config):
        del weights[TIED_KEY]  # it is tok_emb.weight: store it once

    # Everything is checked before the first byte is written, so a bad argument never
    # replaces a good checkpoint; the arrays are then written straight to their files
    # (no copy of the whole set in memory) and hashed from there.
    arrays = {MODEL_FILE: _contiguous(weights)}
    if optimizer_state is not None:
        opt = _contiguous({k: np.asarray(v) for k, v in optimizer_state.items()})
        if problems := _mismatches("optimizer_state", opt, _optimizer_shapes(model_config)):
            raise ValueError(
                "optimizer_state does not match config['model']: " + "; ".join(problems)
            )
        arrays[OPTIMIZER_FILE] = opt
    blobs = {}
    for name, blob in (extra_files or {}).items():
        if name in (MODEL_FILE, OPTIMIZER_FILE, CONFIG_FILE) or Path(name).name != name:
            raise ValueError(f"extra_files: {name!r} is not a free file name")
        blobs[name] = bytes(blob)
    document = {"format": FORMAT, "version": VERSION, **config, **meta}
    document.setdefault("step", 0)
    try:  # fails here, before any write, if not strict JSON (NaN and infinities are not)
        json.dumps(document, allow_nan=False)
    except ValueError as e:
        raise ValueError(f"config and meta must be JSON without NaN or infinities: {e}") from e

    # (1) the whole new set, on disk, beside the current one
    directory.mkdir(parents=True, exist_ok=True)
    remove_leftovers(directory)  # of a writer that was killed
    check_directory(directory)
    staging = directory / STAGING_DIR
    try:
        staging.mkdir()
        for name, tensors in arrays.items():
            _write_arrays(staging / name, tensors)
        for name, blob in blobs.items():
            _write_file(staging / name, blob)
        # config.json names the exact bytes it belongs with: a set mixed by a crash
        # between two renames is refused instead of loaded
        document["files"] = {name: _sha256(staging / name) for name in (*arrays, *blobs)}
        document["config_sha256"] = config_sha256(document)
        blobs[CONFIG_FILE] = (json.dumps(document, indent=2) + "\n").encode("utf-8")
        _write_file(staging / CONFIG_FILE, blobs[CONFIG_FILE])
        _fsync_dir(staging)
        _pause_point("staged")
        # (2) the current set, kept whole
        _keep_previous(directory)
    except OSError as e:  # a full disk, say: the current set is untouched; leave no partial files
        remove_leftovers(directory)
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            size = sum(a.nbytes for t in arrays.values() for a in t.values())
            raise OSError(
                e.errno,
                f"no space left to write the checkpoint in {directory} (it needs about "
                f"{size + sum(len(b) for b in blobs.values()):,} bytes); the checkpoint there "
                "is unchanged",
            ) from e
        raise
    _pause_point("kept-previous")
    # (3) commit: data files first, config.json (the set's index) last
    for name in (*arrays, *blobs):
        if name != CONFIG_FILE:
            os.replace(staging / name, directory / name)
            _pause_point(f"moved-{name}")
    os.replace(staging / CONFIG_FILE, directory / CONFIG_FILE)
    _fsync_dir(directory)
    _pause_point("committed")
    # (4) tidy up
    if optimizer_state is None:
        (directory / OPTIMIZER_FILE).unlink(missing_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    return directory


# -- load ------------------------------------------------------------------------
class CheckpointWarning(UserWarning):
    """The checkpoint in DIR was loaded from ``DIR/.previous`` (the reason, the steps lost)."""


class CorruptCheckpointError(CheckpointError):
    """The checkpoint in DIR is damaged (not an interrupted save) while ``DIR/.previous``
    holds an intact, older one: loading that one (``previous=True``) loses steps.
    ``step``: the damaged one's (None if unreadable); ``previous_step``: the older one's."""

    def __init__(self, message: str, step: int | None, previous_step: int):
        super().__init__(message)
        self.step, self.previous_step = step, previous_step


def _load_set(directory: Path):
    """Load and check the set in ``directory`` (no fallback)."""
    config = _read_config(directory)
    model_config = config["model"]
    listed = config.get("files")
    model_path = directory / MODEL_FILE
    _check_belongs(directory, config, MODEL_FILE)
    model_state = _load_safetensors(model_path)
    check_declared_size(model_config, str(directory / CONFIG_FILE), layers_in(model_state))
    if _is_tied(model_config) and TIED_SOURCE in model_state:
        model_state[TIED_KEY] = model_state[TIED_SOURCE]  # one array, two names
    if problems := _mismatches(model_path.name, model_state, expected_shapes(model_config)):
        raise CheckpointError(
            f"{directory / CONFIG_FILE} does not match {model_path}: " + "; ".join(problems)
        )

    opt_path = directory / OPTIMIZER_FILE
    # a file config.json does not list is a leftover, not part of this set
    if not opt_path.exists() or (listed is not None and OPTIMIZER_FILE not in listed):
        if listed is not None and OPTIMIZER_FILE in listed:
            _check_belongs(directory, config, OPTIMIZER_FILE)  # raises: it is missing
        return model_state, config, None
    _check_belongs(directory, config, OPTIMIZER_FILE)
    optimizer_state = _load_safetensors(opt_path)
    if problems := _mismatches(opt_path.name, optimizer_state, _optimizer_shapes(model_config)):
        raise CheckpointError(
            f"{directory / CONFIG_FILE} does not match {opt_path}: " + "; ".join(problems)
        )
    return model_state, config, optimizer_state


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() == b.read_bytes()
    except OSError:
        return False


def _step_of(directory: Path) -> int | None:
    try:
        return int(_loads_strict((directory / CONFIG_FILE).read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_checkpoint(
    directory: str | os.PathLike, previous: bool = False
) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray] | None]:
    """``(model_state, config, optimizer_state)`` of a checkpoint directory (a tied
    ``head.weight`` *is* the ``tok_emb.weight`` array; ``optimizer_state`` may be None).

    A set mixed by an interrupted save loads from ``.previous`` with a
    :class:`CheckpointWarning`; a set damaged otherwise raises :class:`CorruptCheckpointError`
    unless ``previous`` (then ``.previous`` loads, the warning counting the steps lost).
    ``config["loaded_from"]`` names ``.previous`` in both cases.

    Raises:
        FileNotFoundError: the directory, config.json or model.safetensors is missing.
        NotADirectoryError: ``directory`` is a file.
        CorruptCheckpointError: damaged, ``.previous`` intact, ``previous`` false.
        CheckpointError: a truncated or corrupt file (named), or a config.json that does
            not match the arrays or the tokenizer (each key and shape listed).
    """
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(
            f"{directory} is a file, not a checkpoint directory (give the directory that "
            f"holds {CONFIG_FILE} and {MODEL_FILE}: a training run's --out)"
        )
    try:
        return _load_set(directory)
    except (OSError, CheckpointError) as error:
        older = directory / PREVIOUS_DIR
        if not directory.is_dir() or not older.is_dir():
            raise
        try:
            model_state, config, optimizer_state = _load_set(older)
        except (OSError, CheckpointError):
            raise error from None
        interrupted = _same_bytes(directory / CONFIG_FILE, older / CONFIG_FILE)
        step, previous_step = _step_of(directory), int(config.get("step", 0))
        if interrupted:
            message = (
                f"{directory}: {error}; a save that was interrupted while moving its files "
                f"in left them next to the checkpoint's config.json; loaded that checkpoint "
                f"(step {previous_step}) from {older}, which holds it whole: nothing is lost"
            )
        else:
            at = f"step {step}" if step is not None else "an unknown step"
            lost = f"{step - previous_step} steps" if step is not None else "steps"
            if not previous:
                raise CorruptCheckpointError(
                    f"{directory}'s checkpoint ({at}) is damaged: {error}. {older} holds an "
                    f"intact older checkpoint (step {previous_step}); loading it instead "
                    f"loses the {lost} after it",
                    step,
                    previous_step,
                ) from error
            message = (
                f"{directory}'s checkpoint ({at}) is damaged: {error}; loaded the older "
                f"checkpoint in {older} (step {previous_step}) as asked: the {lost} after "
                "it are lost"
            )
    warnings.warn(message, CheckpointWarning, stacklevel=2)
    config["loaded_from"] = str(older)
    return model_state, config, optimizer_state
