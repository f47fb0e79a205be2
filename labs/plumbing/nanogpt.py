"""nanoGPT's checkpoints: ``ckpt.pt`` and the character vocabulary in ``meta.pkl``.

nanoGPT's ``train.py`` (Karpathy) saves one ``torch.save`` file::

    {"model": state dict,           # GPT-2's names; "_orig_mod." in front under torch.compile
     "optimizer": AdamW's state,
     "model_args": {"n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout"},
     "iter_num": int, "best_val_loss": tensor, "config": the run's settings}

and its character-level datasets a pickle, ``meta.pkl``:
``{"vocab_size": 65, "itos": {0: "\\n", 1: " ", ...}, "stoi": {...}}``.

Unpickling can run any code the file names, so ``ckpt.pt`` is read with
``torch.load(weights_only=True)`` and ``meta.pkl`` with :class:`PlainUnpickler`, which
refuses every class or function a pickle names. nanoGPT's GPT is this project's GPT-2
model with the exact GELU; its weights are renamed only (``conv1d=False``).
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path

import numpy as np

#: nanoGPT's GPTConfig fields as train.py records them in ``model_args``.
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size", "dropout")
_REQUIRED = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")


def read_ckpt(path: str | Path) -> tuple[dict, dict[str, np.ndarray], dict]:
    """``(model_args, state dict as float32 arrays, iter_num, best_val_loss and dataset
    when recorded)`` of a ``ckpt.pt`` (keys as saved).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not readable with ``weights_only=True`` (a pickle naming other objects
            is refused, not run), or not nanoGPT's layout (the missing entry named).
    """
    import torch

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(
            f"{path}: refused by torch.load(weights_only=True), which loads tensors and plain "
            f"containers only ({first})"
        ) from e
    except Exception as e:  # a damaged zip raises almost anything; nothing of it ran
        raise ValueError(f"{path}: not a PyTorch checkpoint torch.load can read ({e})") from e
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: expected nanoGPT's dict, got {type(ckpt).__name__}")
    for key in ("model", "model_args"):
        if not isinstance(ckpt.get(key), dict):
            raise ValueError(
                f"{path}: no {key!r} dict; nanoGPT's ckpt.pt has 'model' (the state dict) and "
                f"'model_args' (its GPTConfig); this has {sorted(map(str, ckpt))}"
            )
    state = {}
    for k, v in ckpt["model"].items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"{path}: model[{k!r}] is a {type(v).__name__}, not a tensor")
        v = v.detach().cpu()
        state[k] = (v.float() if v.is_floating_point() else v).numpy()
    info = {}
    if isinstance(ckpt.get("iter_num"), int):
        info["iter_num"] = ckpt["iter_num"]
    best = ckpt.get("best_val_loss")
    if isinstance(best, (int, float, torch.Tensor)) and np.size(best) == 1:
        info["best_val_loss"] = float(best)
    config = ckpt.get("config")
    if isinstance(config, dict) and isinstance(config.get("dataset"), str):
        info["dataset"] = config["dataset"]
    return dict(ckpt["model_args"]), state, info


def model_config(model_args: dict, tied: bool = True) -> dict:
    """This GPT's config (GPTConfig fields) of nanoGPT's ``model_args`` (ValueError: a field
    missing, of the wrong type, or one nanoGPT does not have, named)."""
    unknown = sorted(set(model_args) - set(MODEL_ARGS))
    if unknown:
        raise ValueError(
            f"model_args: unknown fields {unknown} (nanoGPT's are {list(MODEL_ARGS)}); a fork "
            "that adds fields may compute something else"
        )
    missing = [k for k in _REQUIRED if k not in model_args]
    if missing:
        raise ValueError(f"model_args: missing {missing}")
    for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        v = model_args[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"model_args: {k} must be a positive integer, got {v!r}")
    if not isinstance(model_args["bias"], bool):
        raise ValueError(f"model_args: bias must be True or False, got {model_args['bias']!r}")
    dropout = model_args.get("dropout", 0.0)
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
        raise ValueError(f"model_args: dropout must lie in [0, 1), got {dropout!r}")
    return {
        "vocab_size": model_args["vocab_size"],
        "block_size": model_args["block_size"],
        "n_layers": model_args["n_layer"],
        "n_heads": model_args["n_head"],
        "d_model": model_args["n_embd"],
        "d_ff": None,  # nanoGPT's MLP is 4 n_embd wide
        "dropout": float(dropout),
        "bias": model_args["bias"],
        "tie_weights": tied,
        "gelu_approximate": "none",  # nn.GELU(): the exact, erf form
    }


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only (containers, strings, numbers: the opcodes
    make those without naming anything); any class or function named is refused."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(
            f"it names {module}.{name}; only plain dicts, lists, strings and numbers are loaded"
        )


def read_meta(path: str | Path) -> str:
    """The characters of nanoGPT's ``meta.pkl``, in its id order (``itos[i]``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a pickle that names a class or function (refused, not run), or not a
            character vocabulary (what is wrong named).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.stat().st_size > 64 << 20:
        raise ValueError(f"{path}: {path.stat().st_size:,} bytes, far more than a vocabulary")
    try:
        meta = PlainUnpickler(io.BytesIO(path.read_bytes())).load()
    except Exception as e:  # a hostile pickle can raise almost anything; none of it runs code
        raise ValueError(f"{path}: not loaded: {type(e).__name__}: {e}") from e
    if not isinstance(meta, dict):
        raise ValueError(f"{path}: expected a dict, got {type(meta).__name__}")
    itos, stoi = meta.get("itos"), meta.get("stoi")
    if isinstance(stoi, dict) and not all(type(i) is int for i in stoi.values()):
        raise ValueError(f"{path}: stoi: the ids are not integers")
    if itos is None and isinstance(stoi, dict):
        itos = {i: s for s, i in stoi.items()}
    if not isinstance(itos, dict) or not itos or not all(type(i) is int for i in itos):
        raise ValueError(
            f"{path}: no 'itos' (id -> character) dict: not a character-level meta.pkl"
        )
    n = len(itos)
    if sorted(itos) != list(range(n)):
        raise ValueError(f"{path}: itos: the ids are not exactly 0 .. {n - 1}")
    chars = [itos[i] for i in range(n)]
    bad = [c for c in chars if not (isinstance(c, str) and len(c) == 1)]
    if bad:
        raise ValueError(f"{path}: itos: {bad[0]!r} is not one character")
    if len(set(chars)) != n:
        raise ValueError(f"{path}: itos: a character has two ids")
    size = meta.get("vocab_size", n)
    if size != n:
        raise ValueError(f"{path}: vocab_size is {size!r} but itos has {n} characters")
    if isinstance(meta.get("stoi"), dict) and any(
        meta["stoi"].get(c) != i for i, c in enumerate(chars)
    ):
        raise ValueError(f"{path}: stoi is not the inverse of itos")
    return "".join(chars)


def char_permutation(nanogpt_chars: str) -> np.ndarray | None:
    """``perm`` with our id ``j`` = nanoGPT's id ``perm[j]`` (ours are the sorted
    characters); None when they agree."""
    ours = sorted(nanogpt_chars)
    if ours == list(nanogpt_chars):
        return None
    theirs = {c: i for i, c in enumerate(nanogpt_chars)}
    return np.array([theirs[c] for c in ours], dtype=np.int64)
