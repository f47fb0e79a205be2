"""What a checkpoint directory holds, and the checks that it holds it (CheckpointError).

The file names and the format tag; the state-dict shapes a model config implies
(:func:`expected_shapes`); config.json on its own (:func:`_read_config`), each file
against its recorded SHA-256 (:func:`_check_belongs`), the arrays against the config
(:func:`_mismatches`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

from .checkpoint_files import CheckpointError, _sha256, check_directory, member

FORMAT = "twinformer"
VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
CONFIG_FILE = "config.json"
#: The files a config.json may list: its "files" map names nothing else.
KNOWN_FILES = (MODEL_FILE, OPTIMIZER_FILE, "tokenizer.json")
#: The largest config.json read (a character vocabulary of 2**20 symbols fits).
MAX_CONFIG_BYTES = 64 << 20
TIED_KEY, TIED_SOURCE = "head.weight", "tok_emb.weight"


# -- the expected contents, derived from the config alone -------------------------
def expected_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of a GPT with these GPTConfig fields, in the models' order
    (``head.weight`` even when tied), from the architecture alone (docs/architecture.md):
    a checkpoint is checked before any model is built. ValueError: no ``vocab_size``."""
    if "vocab_size" not in model_config:
        raise ValueError("model config: 'vocab_size' is missing")
    V = int(model_config["vocab_size"])
    T = int(model_config.get("block_size", 64))
    L = int(model_config.get("n_layers", 4))
    C = int(model_config.get("d_model", 128))
    bias = bool(model_config.get("bias", True))
    H = int(model_config.get("n_heads", 4))  # GQA: H_kv key/value heads of d_k features
    H_kv, d_k = model_config.get("n_kv_heads") or H, model_config.get("head_dim") or C // H
    qkv_bias = model_config.get("qkv_bias")
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

    def linear(name: str, n_in: int, n_out: int, has_bias: bool | None = None) -> None:
        shapes[f"{name}.weight"] = (n_out, n_in)  # PyTorch's layout: (out, in)
        if bias if has_bias is None else has_bias:
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
        linear(f"{b}.attn.qkv_proj", C, (H + 2 * H_kv) * d_k, qkv_bias)
        linear(f"{b}.attn.out_proj", H * d_k, C)
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


def parameter_count(model_config: dict) -> int:
    """The parameters of a GPT with this config (a tied head counted once), from the
    shapes alone: one layer's count times ``n_layers``, so a huge value costs nothing."""

    def count(n_layers: int) -> int:
        shapes = _trainable_shapes({**model_config, "n_layers": n_layers})
        return sum(math.prod(s) for s in shapes.values())

    base = count(0)
    return base + int(model_config["n_layers"]) * (count(1) - base)


def physical_memory() -> int | None:
    """Bytes of RAM on this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


_SIZES = ("vocab_size", "block_size", "n_layers", "n_heads", "d_model")
_OPTIONAL_SIZES = ("d_ff", "n_kv_heads", "head_dim")  # None: the default


def check_declared_size(model_config: dict, where: str, layers_present: int | None = None):
    """Refuse a declared model before anything loops over its layers or allocates it: each
    size a positive integer, ``n_layers`` the layers present (when known), the float32
    weights within this machine's memory (CheckpointError, ``where`` first)."""
    for key in (*_SIZES, *_OPTIONAL_SIZES):
        value = model_config.get(key)
        if key not in model_config or (key in _OPTIONAL_SIZES and value is None):
            continue
        if type(value) is not int or value < 1:
            raise CheckpointError(f"{where}: {key} must be a positive integer, got {value!r}")
    n_layers = model_config.get("n_layers", 4)
    if layers_present is not None and n_layers != layers_present:
        raise CheckpointError(
            f"{where}: the config declares {n_layers} layers but the weights hold {layers_present}"
        )
    n = parameter_count({"vocab_size": 1, **model_config})
    memory = physical_memory()
    if memory is not None and 4 * n > memory:
        raise CheckpointError(
            f"{where}: the config declares {n:,} parameters ({4 * n / 2**30:,.1f} GiB as "
            f"float32), more than this machine's memory ({memory / 2**30:.1f} GiB)"
        )


def layers_in(keys) -> int:
    """How many distinct layer indices (``blocks.N.``, ``h.N.``, ``layers.N.``) ``keys`` name."""
    found = (re.search(r"(?:^|\.)(?:blocks|h|layers)\.(\d+)\.", k) for k in keys)
    return len({m.group(1) for m in found if m})


def config_sha256(document: dict) -> str:
    """The SHA-256 of a config's model and tokenizer sections (canonical JSON): an edit to
    either after the save is refused like an edited file."""
    sections = {k: document.get(k) for k in ("model", "tokenizer")}
    return hashlib.sha256(json.dumps(sections, sort_keys=True).encode("utf-8")).hexdigest()


def _is_tied(model_config: dict) -> bool:
    return bool(model_config.get("tie_weights", True))


def _trainable_shapes(model_config: dict) -> dict[str, tuple[int, ...]]:
    """:func:`expected_shapes` with a tied head once: the optimizer state's names."""
    shapes = expected_shapes(model_config)
    if _is_tied(model_config):
        del shapes[TIED_KEY]
    return shapes


def _mismatches(
    what: str, got: dict[str, np.ndarray], expected: dict[str, tuple[int, ...]], limit: int = 8
) -> list[str]:
    """The differences between arrays and expected shapes (``limit`` names per kind)."""

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


def first_nonfinite(state: dict[str, np.ndarray]) -> tuple[str, int] | None:
    """The first tensor of ``state`` holding NaN or infinity and how many (None: none)."""
    for name, array in state.items():
        array = np.asarray(array)
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            return name, int(array.size - np.isfinite(array).sum())
    return None


# -- checks ----------------------------------------------------------------------
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
    path = member(directory, name)
    if not path.is_file():
        raise CheckpointError(f"{path} is missing, though {directory / CONFIG_FILE} lists it")
    if _sha256(path) != want:
        raise CheckpointError(
            f"{path} ({path.stat().st_size:,} bytes) is not the file {directory / CONFIG_FILE} "
            "was saved with (its SHA-256 differs from the one recorded there): it is "
            "truncated or damaged, or a save was interrupted"
        )


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


def _reject_constant(name: str):
    raise ValueError(f"{name} is not JSON (a number must be finite)")


def _loads_strict(text: str):
    """``json.loads`` that refuses NaN and infinities (not JSON, though Python reads them)."""
    return json.loads(text, parse_constant=_reject_constant)


def _read_config(directory: Path) -> dict:
    """``directory/config.json``, checked on its own (not against the other files)."""
    if directory.exists() and not directory.is_dir():
        raise NotADirectoryError(f"{directory} is a file, not a checkpoint directory")
    if not directory.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {directory}")
    check_directory(directory)
    path = member(directory, CONFIG_FILE)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file not found: {path}")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise CheckpointError(f"{path}: {path.stat().st_size:,} bytes, more than a config holds")
    try:
        document = _loads_strict(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
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
    files = document.get("files", {})
    if not isinstance(files, dict) or not all(
        name in KNOWN_FILES and isinstance(digest, str) for name, digest in files.items()
    ):
        raise CheckpointError(f'{path}: "files" may list only {", ".join(KNOWN_FILES)}')
    if "config_sha256" in document and document["config_sha256"] != config_sha256(document):
        raise CheckpointError(
            f"{path}: its model or tokenizer section was edited after the checkpoint was "
            "saved (the SHA-256 recorded in config_sha256 differs): the weights were trained "
            "for the original; restore it"
        )
    check_declared_size(document["model"], str(path))
    step = document.get("step", 0)
    if type(step) is not int or step < 0:
        raise CheckpointError(f'{path}: "step" must be an integer >= 0, got {step!r}')
    n_symbols = _vocabulary_size(document["tokenizer"])
    vocab_size = document["model"].get("vocab_size")
    if n_symbols is not None and n_symbols != vocab_size:
        raise CheckpointError(
            f"{path}: the tokenizer defines {n_symbols} ids but model.vocab_size is "
            f"{vocab_size!r}: tok_emb.weight and head.weight would not match the vocabulary"
        )
    return document
