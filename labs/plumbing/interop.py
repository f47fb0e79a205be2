"""Hugging Face interop, the helpers of ``interop_gpt2.py`` and ``interop_llama.py``.

The conversions work on NumPy arrays (a torch state dict is converted on the way in);
only the functions that build ``transformers`` objects need it
(``pip install -e ".[interop]"``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from numpy_impl.pretrained import check_keys


def _get(config, name: str):
    """``config.name`` for a GPT2Config, ``config[name]`` for its ``to_dict()``."""
    return config[name] if isinstance(config, Mapping) else getattr(config, name)


def _integer(config, name: str) -> int:
    """``config``'s ``name``, refused unless a whole number (``int()`` would round 4.7)."""
    value = _get(config, name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number, got {value!r}")
    return value


def _has(config, name: str) -> bool:
    return name in config if isinstance(config, Mapping) else hasattr(config, name)


def _optional(config, name: str, default=None):
    return _get(config, name) if _has(config, name) else default


def _flag(config, name: str, default: bool) -> bool:
    """A true/false field: JSON's ``"false"`` is a string, and a string is refused."""
    value = _optional(config, name, default)
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be true or false, got {value!r}")
    return value


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor: no torch import needed here
        value = value.detach().cpu().numpy()
    return np.asarray(value)


_check_keys = check_keys  # numpy_impl/pretrained.py's: the same message for every format


def _hf_model(model, hf_state: dict, dtype, ignored: tuple[str, ...], tied: bool):
    """``model`` (a fresh ``transformers`` model) holding ``hf_state``, in eval mode, in
    ``dtype`` (torch's or NumPy's); ValueError if a key other than the ``ignored`` buffers
    is missing or unexpected."""
    import torch

    if not isinstance(dtype, torch.dtype):
        dtype = torch.from_numpy(np.zeros(0, dtype)).dtype
    model = model.to(dtype)
    tensors = {k: torch.from_numpy(v.copy()).to(dtype) for k, v in hf_state.items()}
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [k for k in missing if not k.endswith(ignored)]
    if missing or unexpected:
        name = type(model).__name__
        raise ValueError(f"{name}: missing keys {missing}, unexpected keys {unexpected}")
    if tied:
        model.tie_weights()
    return model.eval()
