"""Checkpoints: one directory, the same for both backends.

::

    DIR/model.safetensors      weights by state-dict name (the tied head.weight omitted)
    DIR/optimizer.safetensors  AdamW moments: exp_avg.NAME, exp_avg_sq.NAME, and step
    DIR/config.json            model config, tokenizer, step, backend, training args, metrics
                               (and, from ``labs train``, the batch sampler's RNG state)

Weights are stored with safetensors (a JSON header and raw little-endian
arrays: no pickle, so loading a checkpoint cannot run code). Every file is
written to a temporary file in the same directory, fsynced, then moved into
place with ``os.replace``, which is atomic on POSIX: a crash mid-save leaves the
previous file intact, never half a file. ``config.json`` is written last, so a
directory with a config.json always has its weights.

Because both backends use the same names and shapes (PyTorch's layout), a
checkpoint written by either loads into either.
"""

from __future__ import annotations

import hashlib
import json
import os
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


# -- atomic writes -------------------------------------------------------------
def _atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file, fsync it, then rename it onto ``path``."""
    # A hidden name in the same directory (a rename across file systems is
    # not atomic); the pid keeps two concurrent writers apart.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    # Make the rename itself durable: fsync the directory entry.
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _contiguous(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # Not np.ascontiguousarray: it turns the 0-d "step" into shape (1,).
    return {k: np.require(v, requirements="C") for k, v in arrays.items()}


# -- save ------------------------------------------------------------------------
def save_checkpoint(
    directory: str | os.PathLike,
    model_state: dict[str, np.ndarray],
    config: dict,
    optimizer_state: dict[str, np.ndarray] | None = None,
    meta: dict | None = None,
    extra_files: dict[str, bytes] | None = None,
) -> Path:
    """Write a checkpoint directory (created if needed), atomically file by file.

    Args:
        directory: where to write.
        model_state: ``{name: ndarray}``, a backend's ``state_dict()``;
            ``head.weight`` is dropped when ``config["model"]["tie_weights"]``.
        config: ``{"model": GPTConfig dict, "tokenizer": tokenizer dict,
            "train": training args}`` (``"train"`` optional).
        optimizer_state: ``{"exp_avg.NAME": ..., "exp_avg_sq.NAME": ...,
            "step": 0-d array}``, or None to save weights only (an older
            optimizer file in ``directory`` is then removed).
        meta: ``{"step": int, "backend": str, "metrics": dict, ...}``; merged
            into config.json next to ``config``'s keys.
        extra_files: ``{file name: bytes}`` written the same way and hashed in
            config.json too (a BPE run's ``tokenizer.json``).

    Returns:
        the directory's path.

    Raises:
        ValueError: ``config`` lacks ``"model"`` or ``"tokenizer"``, or
            ``model_state`` does not match the config (keys or shapes listed).
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
    # config.json, written last, names the exact bytes it belongs with: a crash between
    # two of the renames leaves files that load_checkpoint refuses instead of mixing
    document["files"] = {name: hashlib.sha256(b).hexdigest() for name, b in blobs.items()}
    text = json.dumps(document, indent=2) + "\n"  # fails here, before any write, if not JSON

    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".*.tmp"):  # left behind by a writer that was killed
        stale.unlink(missing_ok=True)
    for name, blob in blobs.items():
        _atomic_write(directory / name, blob)
    if optimizer_state is None:
        (directory / OPTIMIZER_FILE).unlink(missing_ok=True)
    _atomic_write(directory / CONFIG_FILE, text.encode("utf-8"))
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
    if _sha256(directory / name) != want:
        raise ValueError(
            f"{directory / name} does not belong to {directory / CONFIG_FILE} (its SHA-256 "
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
def _load_safetensors(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors raises its own SafetensorError, among others
        raise ValueError(
            f"{path}: not a valid safetensors file (truncated or corrupt?): {e}"
        ) from e


def load_config(directory: str | os.PathLike) -> dict:
    """Read and check a checkpoint's config.json.

    Raises:
        FileNotFoundError: no such directory, or no config.json in it.
        ValueError: not JSON, not a twinformer checkpoint, an unsupported
            version, or sections missing.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {directory}")
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(f'{path}: not a twinformer checkpoint (no "format": "{FORMAT}")')
    if document.get("version") != VERSION:
        raise ValueError(
            f"{path}: checkpoint version {document.get('version')!r}, this code reads {VERSION}"
        )
    for key in ("model", "tokenizer"):
        if not isinstance(document.get(key), dict):
            raise ValueError(f"{path}: the {key!r} section is missing")
    return document


def load_checkpoint(
    directory: str | os.PathLike,
) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray] | None]:
    """Read a checkpoint directory written by :func:`save_checkpoint`.

    Returns:
        ``(model_state, config, optimizer_state)``: ``model_state`` maps every
        state-dict name to an array (with tied weights, ``head.weight`` *is*
        the ``tok_emb.weight`` array); ``config`` is config.json's dict;
        ``optimizer_state`` is None when the checkpoint has none.

    Raises:
        FileNotFoundError: the directory, config.json or model.safetensors is
            missing (the message names it).
        ValueError: a file is truncated or corrupt (named), or config.json
            does not match the stored arrays (each offending key and shape
            listed).
    """
    directory = Path(directory)
    config = load_config(directory)
    model_config = config["model"]
    model_path = directory / MODEL_FILE
    model_state = _load_safetensors(model_path)
    _check_belongs(directory, config, MODEL_FILE)
    if _is_tied(model_config) and TIED_SOURCE in model_state:
        model_state[TIED_KEY] = model_state[TIED_SOURCE]  # one array, two names
    if problems := _mismatches(model_path.name, model_state, expected_shapes(model_config)):
        raise ValueError(
            f"{directory / CONFIG_FILE} does not match {model_path}: " + "; ".join(problems)
        )

    opt_path = directory / OPTIMIZER_FILE
    if not opt_path.exists():
        return model_state, config, None
    optimizer_state = _load_safetensors(opt_path)
    _check_belongs(directory, config, OPTIMIZER_FILE)
    if problems := _mismatches(opt_path.name, optimizer_state, _optimizer_shapes(model_config)):
        raise ValueError(
            f"{directory / CONFIG_FILE} does not match {opt_path}: " + "; ".join(problems)
        )
    return model_state, config, optimizer_state
