"""Checkpoints: one directory, the same for both backends.

::

    DIR/model.safetensors      weights by state-dict name (the tied head.weight omitted)
    DIR/optimizer.safetensors  AdamW moments: exp_avg.NAME, exp_avg_sq.NAME, and step
    DIR/config.json            model config, tokenizer, step, backend, training args, metrics,
                               the SHA-256 of the two files above, and (from ``labs train``)
                               the batch sampler's and the dropout RNGs' states
    DIR/.previous/             the checkpoint before the last one, whole (hard links)

Weights are stored with safetensors (a JSON header and raw little-endian
arrays: no pickle, so loading a checkpoint cannot run code); everything else
is JSON. A save never leaves DIR without a complete checkpoint, whenever the
process dies (SIGKILL, power cut): the new set is written in full to
``DIR/.staging/`` and fsynced, the current set is kept as ``DIR/.previous/``,
and only then are the new files moved into place with ``os.replace`` (atomic
on POSIX), ``config.json`` last. config.json records the SHA-256 of the files
it belongs with, so a set mixed by a kill between two renames is recognised,
and :func:`load_checkpoint` falls back to ``.previous``.

Because both backends use the same names and shapes (PyTorch's layout), a
checkpoint written by either loads into either.

This module saves and loads a set; ``checkpoint_format.py`` says what a set
holds and checks it (:func:`expected_shapes`, :class:`CheckpointError`), and
``checkpoint_files.py`` is the file layer underneath (fsynced writes, the test
hook that pauses the writer).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

import numpy as np
from safetensors.numpy import save

from .checkpoint_files import _contiguous, _fsync_dir, _link_or_copy, _pause_point, _write_file
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
    _mismatches,
    _optimizer_shapes,
    _read_config,
    expected_shapes,
)

# -- writing: stage a full set, keep the previous one, then commit -------------------
STAGING_DIR = ".staging"  # the new set, complete before anything in DIR is touched
PREVIOUS_DIR = ".previous"  # a full copy (hard links) of the set being replaced


def _keep_previous(directory: Path) -> None:
    """Copy ``directory``'s checkpoint set into ``directory/.previous`` if it is
    complete and intact (a set left broken by a killed writer is not kept:
    ``.previous`` then still holds the last good one)."""
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
        _link_or_copy(directory / name, tmp / name)
    _fsync_dir(tmp)
    # Until the rename below DIR's own set is untouched: a kill here loses nothing.
    shutil.rmtree(directory / PREVIOUS_DIR, ignore_errors=True)
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
    """Write a checkpoint directory (created if needed) so that a crash at any
    moment leaves a complete checkpoint behind.

    The writer (1) writes the whole new set into ``DIR/.staging/`` and fsyncs
    it, (2) keeps the current set, if intact, as ``DIR/.previous/`` (hard
    links, no copy), (3) moves the staged files into ``DIR`` with
    ``os.replace`` (atomic on POSIX), ``config.json`` last, and (4) removes
    ``.staging``. ``config.json`` records the SHA-256 of its files, so a set
    mixed by a kill during (3) is recognised and :func:`load_checkpoint`
    falls back to ``.previous``. The stages a test can stop the writer at
    (:data:`PAUSE_ENV_VAR`): ``writing`` (half of the first file written),
    ``staged``, ``kept-previous``, ``moved-model.safetensors``,
    ``moved-optimizer.safetensors``, ``committed``.

    Args:
        directory: where to write.
        model_state: ``{name: ndarray}``, a backend's ``state_dict()``;
            ``head.weight`` is dropped when ``config["model"]["tie_weights"]``.
        config: ``{"model": GPTConfig dict, "tokenizer": tokenizer dict,
            "train": training args}`` (``"train"`` optional).
        optimizer_state: ``{"exp_avg.NAME": ..., "exp_avg_sq.NAME": ...,
            "step": 0-d array}``, or None to save weights only.
        meta: ``{"step": int, "backend": str, "metrics": dict, ...}``; merged
            into config.json next to ``config``'s keys (JSON values only).
        extra_files: ``{file name: bytes}`` written the same way and hashed in
            config.json too (a BPE run's ``tokenizer.json``).

    Returns:
        the directory's path.

    Raises:
        ValueError: ``config`` lacks ``"model"`` or ``"tokenizer"``, or
            ``model_state`` does not match the config (keys or shapes listed).
        OSError: ``directory`` cannot be created or written (nothing in it
            has been changed then, except perhaps ``.staging``).
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

    # Everything is serialised and checked before the first byte is written, so a
    # bad argument never replaces a good checkpoint.
    blobs = {MODEL_FILE: save(_contiguous(weights))}
    if optimizer_state is not None:
        opt = _contiguous({k: np.asarray(v) for k, v in optimizer_state.items()})
        if problems := _mismatches("optimizer_state", opt, _optimizer_shapes(model_config)):
            raise ValueError(
                "optimizer_state does not match config['model']: " + "; ".join(problems)
            )
        blobs[OPTIMIZER_FILE] = save(opt)
    for name, blob in (extra_files or {}).items():
        if name in (MODEL_FILE, OPTIMIZER_FILE, CONFIG_FILE) or Path(name).name != name:
            raise ValueError(f"extra_files: {name!r} is not a free file name")
        blobs[name] = bytes(blob)
    document = {"format": FORMAT, "version": VERSION, **config, **meta}
    document.setdefault("step", 0)
    # config.json names the exact bytes it belongs with: a set mixed by a crash
    # between two renames is refused instead of loaded
    document["files"] = {name: hashlib.sha256(b).hexdigest() for name, b in blobs.items()}
    text = json.dumps(document, indent=2) + "\n"  # fails here, before any write, if not JSON
    blobs[CONFIG_FILE] = text.encode("utf-8")

    # (1) the whole new set, on disk, beside the current one
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".*.tmp"):  # left behind by a writer that was killed
        stale.unlink(missing_ok=True)
    staging = directory / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for name, blob in blobs.items():
        _write_file(staging / name, blob)
    _fsync_dir(staging)
    _pause_point("staged")
    # (2) the current set, kept whole
    _keep_previous(directory)
    _pause_point("kept-previous")
    # (3) commit: data files first, config.json (the set's index) last
    for name in blobs:
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
    """The checkpoint in DIR was unusable and ``DIR/.previous`` was loaded instead."""


def _load_set(directory: Path):
    """Load and check the set in ``directory`` (no fallback)."""
    config = _read_config(directory)
    model_config = config["model"]
    listed = config.get("files")
    model_path = directory / MODEL_FILE
    _check_belongs(directory, config, MODEL_FILE)
    model_state = _load_safetensors(model_path)
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


def load_config(directory: str | os.PathLike) -> dict:
    """Read and check a checkpoint's config.json (that of the set
    :func:`load_checkpoint` would load).

    Raises:
        FileNotFoundError: no such directory, or no config.json in it.
        CheckpointError: (a ``ValueError``) not JSON, not a twinformer
            checkpoint, an unsupported version, sections missing, or a
            tokenizer whose vocabulary size differs from ``model.vocab_size``.
    """
    return load_checkpoint(directory)[1]


def load_checkpoint(
    directory: str | os.PathLike,
) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray] | None]:
    """Read a checkpoint directory written by :func:`save_checkpoint`.

    If the set in ``directory`` is unusable (a write was killed half-way:
    files missing, or not the ones config.json lists) and ``directory/.previous``
    holds an intact set, that one is loaded, with a :class:`CheckpointWarning`;
    ``config["loaded_from"]`` then names it.

    Returns:
        ``(model_state, config, optimizer_state)``: ``model_state`` maps every
        state-dict name to an array (with tied weights, ``head.weight`` *is*
        the ``tok_emb.weight`` array); ``config`` is config.json's dict;
        ``optimizer_state`` is None when the checkpoint has none.

    Raises:
        FileNotFoundError: the directory, config.json or model.safetensors is
            missing (the message names it).
        CheckpointError: (a ``ValueError``) a file is truncated or corrupt
            (named), the set was interrupted while being written, or
            config.json does not match the stored arrays or the tokenizer
            (each offending key and shape listed).
    """
    directory = Path(directory)
    try:
        return _load_set(directory)
    except (OSError, CheckpointError) as error:
        previous = directory / PREVIOUS_DIR
        if not directory.is_dir() or not previous.is_dir():
            raise
        try:
            model_state, config, optimizer_state = _load_set(previous)
        except (OSError, CheckpointError):
            raise error from None
        reason = str(error)
    warnings.warn(
        f"{directory}: {reason}; loaded the previous checkpoint (step {config.get('step')}) "
        f"from {previous}",
        CheckpointWarning,
        stacklevel=2,
    )
    config["loaded_from"] = str(previous)
    return model_state, config, optimizer_state
