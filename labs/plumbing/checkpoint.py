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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save

FORMAT = "twinformer"
VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
CONFIG_FILE = "config.json"
TIED_KEY, TIED_SOURCE = "head.weight", "tok_emb.weight"


# -- the expected contents, derived from the config alone -------------------------
def expected_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """Every state-dict name and shape of a GPT with this config.

    Written from the architecture (docs/architecture.md), independently of
    either backend, so a checkpoint can be checked before any model is built.
    ``head.weight`` is included even when tied, as in a state dict.

    Args:
        model_config: GPTConfig fields (``vocab_size`` required; the others
            default as in GPTConfig).

    Returns:
        ``{name: shape}`` in the models' parameter order.

    Raises:
        ValueError: ``vocab_size`` missing.
    """
    if "vocab_size" not in model_config:
        raise ValueError("model config: 'vocab_size' is missing")
    V = int(model_config["vocab_size"])
    T = int(model_config.get("block_size", 64))
    L = int(model_config.get("n_layers", 4))
    C = int(model_config.get("d_model", 128))
    bias = bool(model_config.get("bias", True))
    # fields added with the Llama-style options; a config without them is a GPT-2
    learned_positions = model_config.get("pos_emb", "learned") == "learned"
    rmsnorm = model_config.get("norm", "layernorm") == "rmsnorm"
    swiglu = model_config.get("ffn", "gelu") == "swiglu"
    if model_config.get("d_ff"):
        F = int(model_config["d_ff"])
    elif swiglu:  # 2/3 * 4C rounded up to a multiple of 8 (numpy_impl/ffn.py swiglu_hidden_dim)
        F = 8 * ((int(2 * (4 * C) / 3) + 7) // 8)
    else:
        F = 4 * C

    shapes: dict[str, tuple[int, ...]] = {}

    def linear(name: str, n_in: int, n_out: int) -> None:
        shapes[f"{name}.weight"] = (n_out, n_in)  # PyTorch's layout: (out, in)
        if bias:
            shapes[f"{name}.bias"] = (n_out,)

    def layernorm(name: str) -> None:
        shapes[f"{name}.weight"] = (C,)
        if bias and not rmsnorm:  # RMSNorm has a gain only
            shapes[f"{name}.bias"] = (C,)

    shapes["tok_emb.weight"] = (V, C)
    if learned_positions:  # RoPE has no parameters
        shapes["pos_emb.weight"] = (T, C)
    for i in range(L):
        b = f"blocks.{i}"
        layernorm(f"{b}.ln1")
        linear(f"{b}.attn.qkv_proj", C, 3 * C)
        linear(f"{b}.attn.out_proj", C, C)
        layernorm(f"{b}.ln2")
        if swiglu:  # gate, down, up (Llama's w1, w2, w3)
            linear(f"{b}.ffn.w1", C, F)
            linear(f"{b}.ffn.w2", F, C)
            linear(f"{b}.ffn.w3", C, F)
        else:
            linear(f"{b}.ffn.fc1", C, F)
            linear(f"{b}.ffn.fc2", F, C)
    layernorm("ln_f")
    shapes["head.weight"] = (V, C)  # the LM head has no bias (GPT-2, nanoGPT)
    return shapes


def _is_tied(model_config: dict) -> bool:
    return bool(model_config.get("tie_weights", True))


def _trainable_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """As :func:`expected_shapes`, with the tied head counted once (as in
    ``named_parameters``): the names the optimizer state is keyed by."""
    shapes = expected_shapes(model_config)
    if _is_tied(model_config):
        del shapes[TIED_KEY]
    return shapes


def _mismatches(
    what: str, got: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], limit: int = 8
) -> list[str]:
    """Human-readable differences between arrays and expected shapes (at most
    ``limit`` names per kind, then a count)."""

    def shorten(names: list[str]) -> str:
        more = f" and {len(names) - limit} more" if len(names) > limit else ""
        return f"{names[:limit]}{more}"

    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    wrong = [k for k in expected if k in got and tuple(got[k].shape) != expected[k]]
    problems = []
    if missing:
        problems.append(f"{what} lacks {shorten(missing)}")
    if unexpected:
        problems.append(f"{what} has unexpected {shorten(unexpected)}")
    for k in wrong[:limit]:
        problems.append(f"{k}: {what} has shape {tuple(got[k].shape)}, config says {expected[k]}")
    if len(wrong) > limit:
        problems.append(f"and {len(wrong) - limit} more shape mismatches")
    return problems


# -- writing: stage a full set, keep the previous one, then commit -------------------
class CheckpointError(ValueError):
    """A checkpoint that cannot be used: corrupt or truncated files, an
    interrupted write, or contents (keys, shapes, vocabulary) that do not
    match its config.json or the model they are loaded into. The message
    lists every offending key. Raised the same way by both backends."""


#: Test hook: ``STAGE`` or ``STAGE@N`` makes the writer stop the Nth time (default 1)
#: it reaches STAGE (see :func:`save_checkpoint`), print ``checkpoint writer paused
#: at STAGE`` on stderr and sleep, so a test can SIGKILL it at a known point.
PAUSE_ENV_VAR = "TWINFORMER_TEST_CHECKPOINT_PAUSE"
STAGING_DIR = ".staging"  # the new set, complete before anything in DIR is touched
PREVIOUS_DIR = ".previous"  # a full copy (hard links) of the set being replaced
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


def _write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to a new file ``path`` and fsync it."""
    with open(path, "wb") as f:
        half = len(data) // 2
        f.write(data[:half])
        if half:
            f.flush()
            _pause_point("writing")  # half a file on disk
        f.write(data[half:])
        f.flush()
        os.fsync(f.fileno())  # the bytes are on disk before any name points at them


def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file, fsync it, then rename it onto ``path``."""
    # A hidden name in the same directory (a rename across file systems is
    # not atomic); the pid keeps two concurrent writers apart.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_file(tmp, data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
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


def _optimizer_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of AdamW's state: ``step`` and two moments per trainable parameter."""
    expected: dict[str, tuple[int, ...]] = {"step": ()}
    for prefix in ("exp_avg", "exp_avg_sq"):
        expected.update({f"{prefix}.{k}": s for k, s in _trainable_shapes(model_config).items()})
    return expected


def _check_belongs(directory: Path, config: dict, name: str) -> None:
    """Raise unless file ``name`` holds the bytes config.json was written with."""
    want = (config.get("files") or {}).get(name)
    if want is None:
        return  # written before config.json recorded hashes
    path = directory / name
    if not path.is_file():
        raise CheckpointError(
            f"{path} is missing, though {directory / CONFIG_FILE} lists it: the checkpoint "
            "was interrupted while being written"
        )
    if _sha256(path) != want:
        raise CheckpointError(
            f"{path} does not belong to {directory / CONFIG_FILE} (its SHA-256 "
            "differs from the one recorded there): the checkpoint was interrupted while "
            "being written"
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- load ------------------------------------------------------------------------
class CheckpointWarning(UserWarning):
    """The checkpoint in DIR was unusable and ``DIR/.previous`` was loaded instead."""


def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own SafetensorError, among others
        raise CheckpointError(
            f"{path}: not a valid safetensors file (truncated or corrupt?): {e}"
        ) from e


def _vocabulary_size(tokenizer: dict) -> int | None:
    """How many ids a tokenizer dict defines, when it says (char: its characters)."""
    if isinstance(tokenizer.get("vocab_size"), int):
        return tokenizer["vocab_size"]
    if isinstance(tokenizer.get("chars"), str):
        return len(tokenizer["chars"])
    return None


def _read_config(directory: Path) -> dict:
    """``directory/config.json``, checked on its own (not against the other files)."""
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {directory}")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CheckpointError(f'{path}: not a twinformer checkpoint (no "format": "{FORMAT}")')
    if document.get("version") != VERSION:
        raise CheckpointError(
            f"{path}: checkpoint version {document.get('version')!r}, this code reads {VERSION}"
        )
    for key in ("model", "tokenizer"):
        if not isinstance(document.get(key), dict):
            raise CheckpointError(f"{path}: the {key!r} section is missing")
    n_symbols = _vocabulary_size(document["tokenizer"])
    vocab_size = document["model"].get("vocab_size")
    if n_symbols is not None and n_symbols != vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer defines {n_symbols} ids but model.vocab_size is "
            f"{vocab_size!r}: tok_emb.weight and head.weight would not match the vocabulary"
        )
    return document


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
