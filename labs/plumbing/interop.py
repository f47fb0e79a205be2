"""Hugging Face interop: GPT-2 and Llama weights into the project's layout and back.

``transformers`` is an optional dependency (``pip install -e ".[interop]"``);
only :func:`to_gpt2`, :func:`gpt2_config`, :func:`to_llama` and
:func:`llama_config` import it. The conversions
themselves work on NumPy arrays (a torch state dict is converted on the way
in), so both backends load the result like any checkpoint.

The conversions are in ``interop_gpt2.py`` (GPT-2) and ``interop_llama.py``
(Llama); this module has the helpers both use.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from numpy_impl.pretrained import check_keys


def _get(config, name: str):
    """``config.name`` for a GPT2Config, ``config[name]`` for its ``to_dict()``."""
    return config[name] if isinstance(config, Mapping) else getattr(config, name)


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
