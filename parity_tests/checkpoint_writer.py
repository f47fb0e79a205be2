"""A tiny checkpoint and a writer process for the kill tests of ``test_resume.py``.

``python -m parity_tests.checkpoint_writer DIR VALUE`` saves the checkpoint of
:func:`state` ``(VALUE)`` (step ``VALUE``) into DIR. It imports only NumPy and
``labs.plumbing.checkpoint*``, so the child process starts fast.
"""

from __future__ import annotations

import sys

import numpy as np

from labs.plumbing import checkpoint as ck
from labs.plumbing.checkpoint_format import _optimizer_shapes, expected_shapes

CFG = {"vocab_size": 5, "block_size": 4, "n_layers": 1, "n_heads": 1, "d_model": 2}
CONFIG = {"model": CFG, "tokenizer": {"type": "char", "chars": "abcde"}}


def state(value: float) -> tuple[dict, dict]:
    """Weights and AdamW state filled with ``value`` (step ``int(value)``)."""
    weights = {k: np.full(s, value, np.float32) for k, s in expected_shapes(CFG).items()}
    moments = {k: np.full(s, value, np.float32) for k, s in _optimizer_shapes(CFG).items()}
    moments["step"] = np.array(int(value), np.int64)
    return weights, moments


def save(directory, value: float) -> None:
    weights, moments = state(value)
    ck.save_checkpoint(directory, weights, CONFIG, moments, meta={"step": int(value)})


if __name__ == "__main__":
    save(sys.argv[1], float(sys.argv[2]))
