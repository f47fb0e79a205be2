"""Checkpoints cross between backends: save with one, load with the other, same logits.

Uses ``labs.plumbing.checkpoint`` (``save_checkpoint(dir, model_state, config,
optimizer_state, meta)`` / ``load_checkpoint(dir)``), the one on-disk format
both backends share (safetensors + config.json, PyTorch's layout). A round
trip within one backend must be bit-exact; across backends the logits agree
to the float64 parity tolerance.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import numpy_impl as N
import torch_impl as T
from labs.plumbing.checkpoint import load_checkpoint, save_checkpoint
from numpy_impl.char_tokenizer import CharTokenizer
from parity_tests.harness import randomize_, tensor
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import assert_close

# No chapter marker: checkpoints are plumbing (labs/plumbing/checkpoint*.py), not an exercise.
BACKENDS = ["numpy", "torch"]
CONFIG = {"vocab_size": 23, "block_size": 10, "n_layers": 2, "n_heads": 2, "d_model": 12}


def build(backend: str, config: dict):
    if backend == "numpy":
        return N.GPT(N.GPTConfig(**config), dtype=np.float64)
    return T.GPT(T.GPTConfig(**config), dtype=torch.float64)


def state_of(backend: str, model) -> dict[str, np.ndarray]:
    if backend == "numpy":
        return {k: v.copy() for k, v in model.state_dict().items()}
    return {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}


def load_into(backend: str, model, state: dict[str, np.ndarray]) -> None:
    if backend == "numpy":
        model.load_state_dict(state)
    else:
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()})


def logits_of(backend: str, model, idx: np.ndarray) -> np.ndarray:
    if backend == "numpy":
        return model(idx)
    with torch.no_grad():
        return model(tensor(idx)).numpy()


@pytest.mark.parametrize("tie", [pytest.param(True, id="tied"), pytest.param(False, id="untied")])
@pytest.mark.parametrize("reader", BACKENDS)
@pytest.mark.parametrize("writer", BACKENDS)
def test_checkpoint_round_trip_gives_identical_logits(writer, reader, tie, tmp_path):
    rng = SeededRng(11)
    config = {**CONFIG, "tie_weights": tie}
    model = randomize_(build(writer, config), rng)
    written = state_of(writer, model)
    tokenizer = CharTokenizer("abcdefghijklmnopqrstuvw")  # 23 characters, one per id
    assert tokenizer.vocab_size == config["vocab_size"]
    save_checkpoint(
        tmp_path / "ckpt",
        written,
        {"model": config, "tokenizer": tokenizer.to_dict()},
        None,
        {"step": 7, "backend": writer},
    )

    state, loaded_config, optimizer_state = load_checkpoint(tmp_path / "ckpt")
    assert optimizer_state is None
    assert loaded_config["model"] == config and loaded_config["step"] == 7
    assert CharTokenizer.from_dict(loaded_config["tokenizer"]).chars == tokenizer.chars
    assert sorted(state) == sorted(written), "the checkpoint lost or invented parameter names"
    for name, array in written.items():
        assert state[name].dtype == array.dtype and np.array_equal(state[name], array), (
            f"{name} changed on its way through the checkpoint"
        )

    twin = build(reader, loaded_config["model"])
    load_into(reader, twin, state)
    idx = rng.ids(config["vocab_size"], (3, config["block_size"]))
    before, after = logits_of(writer, model, idx), logits_of(reader, twin, idx)
    what = f"logits after a {writer} -> checkpoint -> {reader} round trip"
    if writer == reader:
        np.testing.assert_array_equal(after, before, err_msg=f"{what}: not bit-identical")
    else:
        assert_close(what, after, before, np.float64)
