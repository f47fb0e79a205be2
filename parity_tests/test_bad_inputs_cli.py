"""Bad inputs to the ``labs/`` plumbing: the same error from either backend, naming the input.

The rows here have no chapter (no exercise): they drive each backend the way a
learner does, ``python -m labs train|sample`` (run in this process, so the
exception is seen: ``UserError``, which the command line prints as one ``error:``
line), checkpoints (``CheckpointError``, a ``ValueError`` listing the offending
keys) and the backends' adapters (labs/plumbing/backends*.py). Each row is
``call(backend name)``, run with "numpy" and with "torch"; as in
test_bad_inputs.py, both must raise exactly the row's exception, its message
matching the row's pattern.
"""

from __future__ import annotations

import functools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from labs import UserError
from labs.plumbing.backends import make_backend
from labs.plumbing.checkpoint import load_checkpoint, save_checkpoint
from labs.plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, CheckpointError
from parity_tests.test_bad_inputs import BACKENDS, GPT_CONFIG, C, expect_error


@dataclass(frozen=True)
class Row:
    call: Callable[[str], object]  # called with "numpy", then with "torch"
    exception: type[Exception]
    match: str  # regex that must occur in both messages: the input's name


_FILES = tempfile.TemporaryDirectory(prefix="twinformer-bad-inputs-")  # removed at exit
CHARS = "abcdefg"  # V = 7 characters


@functools.cache
def files() -> Path:
    """Corpora and checkpoints the plumbing rows point at (written once, never changed)."""
    root = Path(_FILES.name)
    (root / "corpus.txt").write_text(("abc defg gfe dcba\n" * 40).replace(" ", "a"))
    (root / "empty.txt").write_bytes(b"")
    (root / "letters.txt").write_text("abcdefggfedcba" * 40)  # CHARS alone
    (root / "latin1.txt").write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    (root / "a-file").write_text("not a directory")
    state = {k: v.copy() for k, v in BACKENDS["numpy"].gpt().state_dict().items()}
    config = {"model": GPT_CONFIG, "tokenizer": {"type": "char", "chars": CHARS}}
    names = ("good", "truncated", "truncated-unhashed", "other-shapes", "other-vocab", "dup-chars")
    for name in names:
        save_checkpoint(root / name, state, config, meta={"step": 1})
    for name in ("truncated", "truncated-unhashed"):
        data = (root / name / MODEL_FILE).read_bytes()
        (root / name / MODEL_FILE).write_bytes(data[: len(data) // 2])
    edit_config(root / "truncated-unhashed", lambda c: c.pop("files"))
    train_section = {"tokenizer": "char", "data": str(root / "corpus.txt")}
    save_checkpoint(root / "resumable", state, {**config, "train": train_section}, meta={"step": 1})
    edit_config(root / "other-shapes", lambda c: c["model"].update(d_model=2 * C))
    edit_config(root / "other-vocab", lambda c: c["tokenizer"].update(chars=CHARS + "h"))
    edit_config(root / "dup-chars", lambda c: c["tokenizer"].update(chars=CHARS[:-1] + "a"))
    huge = {k: v * np.float32(3e38) if k == "ln_f.weight" else v for k, v in state.items()}
    save_checkpoint(root / "huge-weights", huge, config, meta={"step": 1})  # finite, inf logits
    return root


def edit_config(directory: Path, change) -> None:
    config = json.loads((directory / CONFIG_FILE).read_text())
    change(config)
    config.pop("config_sha256", None)  # a hand edit: the checks behind the hash still apply
    (directory / CONFIG_FILE).write_text(json.dumps(config))


def cli(backend: str, *argv: str):
    """Run ``python -m labs ARGV --backend BACKEND`` here; its errors propagate."""
    from labs.__main__ import build_parser

    args = build_parser().parse_args([*argv, "--backend", backend])
    args.argv = [*argv, "--backend", backend]
    return args.func(args)


def train(backend: str, *extra: str):
    small = ["--max-iters", "1", "--eval-batches", "1", "--eval-batch-size", "2",
             "--batch-size", "2", "--block-size", "4", "--n-layers", "1", "--d-model", "8",
             "--n-heads", "2", "--sample-tokens", "0"]  # fmt: skip
    data = ["--data", str(files() / "corpus.txt"), "--out", str(files() / f"run-{backend}")]
    return cli(backend, "train", *data, *small, *extra)


def fine_tune(backend: str, checkpoint: str):
    """``train --init-from CHECKPOINT`` on a text of its characters alone."""
    small = ["--max-iters", "1", "--eval-batches", "1", "--eval-batch-size", "2",
             "--batch-size", "2", "--block-size", "4", "--sample-tokens", "0"]  # fmt: skip
    data = ["--data", str(files() / "letters.txt"), "--out", str(files() / f"ft-{backend}")]
    return cli(backend, "train", "--init-from", str(files() / checkpoint), *data, *small)


def sample(backend: str, checkpoint: str, prompt: str = "abc"):
    return cli(backend, "sample", "--checkpoint", str(files() / checkpoint), "--prompt", prompt,
               "--max-new-tokens", "2")  # fmt: skip


def load_into(backend: str, checkpoint: str) -> None:
    """What sample does: read the checkpoint, build the backend, copy the weights in."""
    state, config, _ = load_checkpoint(files() / checkpoint)
    make_backend(backend, config["model"]).load_state_dict(state)


def backend_state(backend: str, change) -> None:
    """Load a state dict edited by ``change`` into a fresh backend."""
    be = make_backend(backend, GPT_CONFIG)
    state = be.state_dict()
    change(state)
    be.load_state_dict(state)


def _without_float_warnings(f, *args):
    """``f(*args)`` with NumPy's overflow and invalid-value warnings off: the weights are
    made to overflow on purpose, and the error the run ends with is what is checked."""
    with np.errstate(over="ignore", invalid="ignore"):
        return f(*args)


ROWS: dict[str, Row] = {
    "backend.generate: empty prompt": Row(
        lambda b: make_backend(b, GPT_CONFIG).generate([], 3), ValueError, r"^idx\b"
    ),
    # -- the command line -----------------------------------------------------------------
    "train: corpus path missing": Row(
        lambda b: train(b, "--data", str(files() / "missing.txt")), UserError, r"missing\.txt"
    ),
    "train: corpus file empty": Row(
        lambda b: train(b, "--data", str(files() / "empty.txt")), UserError, r"empty\.txt"
    ),
    "train: corpus not UTF-8": Row(
        lambda b: train(b, "--data", str(files() / "latin1.txt")), UserError, r"UTF-8"
    ),
    "train: --out is a file": Row(
        lambda b: train(b, "--out", str(files() / "a-file")), UserError, r"^--out\b"
    ),
    "train: negative --seed": Row(lambda b: train(b, "--seed", "-1"), UserError, r"^--seed\b"),
    "train: --n-kv-heads not dividing --n-heads": Row(
        lambda b: train(b, "--arch", "llama", "--n-kv-heads", "3"), UserError, r"^--n-kv-heads 3\b"
    ),
    "train: --n-kv-heads with the gpt2 arch": Row(
        lambda b: train(b, "--n-kv-heads", "1"), UserError, r"^--n-kv-heads 1\b.*--arch llama"
    ),
    "train: --eval-batch-size beyond memory": Row(
        lambda b: train(b, "--eval-batch-size", str(10**11)), UserError, r"^--eval-batches\b"
    ),
    "train: --batch-size 0": Row(
        lambda b: train(b, "--batch-size", "0"), UserError, r"^--batch-size\b"
    ),
    "train: negative --min-lr (NumPy once trained with it)": Row(
        lambda b: train(b, "--min-lr", "-1"), UserError, r"^--min-lr\b"
    ),
    "train: negative --grad-clip (once silently no clipping)": Row(
        lambda b: train(b, "--grad-clip", "-1"), UserError, r"^--grad-clip\b"
    ),
    "train: --resume with --init-from (once ignored --init-from, recorded it)": Row(
        lambda b: train(
            b, "--resume", str(files() / "resumable"), "--init-from", str(files() / "good")
        ),
        UserError,
        r"^--init-from .*: --init-from starts a new run .* --resume continues one",
    ),
    "train: --resume with another --tokenizer (once trained a BPE first)": Row(
        lambda b: train(b, "--resume", str(files() / "resumable"), "--tokenizer", "bpe"),
        UserError,
        r"^cannot resume .*resumable with another model or tokenizer \(--tokenizer char -> bpe\)",
    ),
    "train: --init-from weights whose loss is not finite (once blamed a checkpoint of --out)": Row(
        lambda b: _without_float_warnings(fine_tune, b, "huge-weights"),
        UserError,
        r"at step 0 .*; nothing of this run was written \(the weights of --init-from .*huge-w",
    ),
    "sample: empty --prompt": Row(
        lambda b: sample(b, "good", prompt=""), UserError, r"^--prompt\b"
    ),
    "sample: --prompt with characters outside the vocabulary": Row(
        lambda b: sample(b, "good", prompt="abz"), UserError, r"^--prompt\b.*'z'"
    ),
    "sample: a repeated character in the checkpoint's chars (once not naming it)": Row(
        lambda b: sample(b, "dup-chars"), UserError, r"dup-chars: chars: repeated characters"
    ),
    "sample: --top-p 0": Row(
        lambda b: cli(b, "sample", "--checkpoint", str(files() / "good"), "--top-p", "0"),
        UserError,
        r"^--top-p\b",
    ),
    # -- checkpoints and the backends' load_state_dict ------------------------------------
    "checkpoint: truncated model.safetensors": Row(
        lambda b: load_into(b, "truncated"), CheckpointError, r"model\.safetensors"
    ),
    "checkpoint: truncated model.safetensors, no recorded hash": Row(
        lambda b: load_into(b, "truncated-unhashed"),
        CheckpointError,
        r"model\.safetensors: not a valid safetensors file",
    ),
    "checkpoint: config.json's d_model does not match the weights": Row(
        lambda b: load_into(b, "other-shapes"),
        CheckpointError,
        r"tok_emb\.weight: model\.safetensors has shape \(7, 8\), config says \(7, 16\)",
    ),
    "checkpoint: the tokenizer's vocabulary does not match vocab_size": Row(
        lambda b: load_into(b, "other-vocab"), CheckpointError, r"tokenizer defines 8 ids"
    ),
    "checkpoint: sample with a truncated file": Row(
        lambda b: sample(b, "truncated"), UserError, r"model\.safetensors"
    ),
    "load_state_dict: a key missing": Row(
        lambda b: backend_state(b, lambda s: s.pop("ln_f.weight")),
        CheckpointError,
        r"missing keys \['ln_f\.weight'\]",
    ),
    "load_state_dict: an unexpected key": Row(
        lambda b: backend_state(b, lambda s: s.update({"ln_g.weight": s["ln_f.weight"]})),
        CheckpointError,
        r"unexpected keys \['ln_g\.weight'\]",
    ),
    "load_state_dict: a wrong shape": Row(
        lambda b: backend_state(b, lambda s: s.update({"ln_f.weight": np.ones(3)})),
        CheckpointError,
        r"ln_f\.weight: expected shape \(8,\), got \(3,\)",
    ),
}


@pytest.mark.parametrize(
    ("backend", "row"),
    [
        pytest.param(backend, row, id=f"{backend}-{name}")
        for name, row in ROWS.items()
        for backend in BACKENDS
    ],
)
def test_bad_input_raises_the_same_error_naming_it(backend: str, row: Row):
    expect_error(backend, lambda: row.call(backend), row.exception, row.match)
