"""A run is never lost: exact resume, kills during a checkpoint write, non-finite steps.

* Resume: ``2k`` steps straight and ``k`` steps, then ``train --resume`` in a
  fresh process for ``k`` more, give the same losses and bit-identical weights
  and optimizer moments, on both backends, with dropout on (so the dropout
  generator's saved state matters, and so do the batch sampler's, the schedule's
  and AdamW's).
* Kills: a writer SIGKILLed at each stage of ``save_checkpoint`` (a test hook
  makes it stop there) leaves a checkpoint that loads: the previous one, or
  the new one once it is committed.
* Non-finite: a NaN or infinite loss or gradient norm stops training with the
  step and the first parameter whose gradient is non-finite, before the
  update, and the last good checkpoint stays as it was.

No chapter marker: this is the plumbing of ``labs/`` (plumbing/checkpoint.py, commands/train.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from labs.plumbing import checkpoint as ck
from labs.plumbing.backends import NonFiniteError, make_backend
from labs.plumbing.checkpoint_files import PAUSE_ENV_VAR
from labs.plumbing.checkpoint_format import CheckpointError
from parity_tests.checkpoint_writer import CONFIG, state
from parity_tests.test_labs import TEXT

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

SMALL = [
    "--eval-interval", "1", "--eval-batches", "2", "--eval-batch-size", "4",
    "--batch-size", "4", "--block-size", "16", "--n-layers", "1", "--d-model", "16",
    "--n-heads", "2", "--warmup-iters", "2", "--sample-tokens", "0", "--dropout", "0.2",
    "--lr-decay-iters", "6",
]  # fmt: skip
K = 3  # steps before and after the resume


def train(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m labs train ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "labs", "train", *args],
        capture_output=True,
        text=True,
        env=env or ENV,
        cwd=ROOT,
        timeout=300,
    )


RUNS = """
import sys
from labs.__main__ import main
for argv in sys.argv[1:]:
    assert main(argv.split("\x1f")) == 0, argv
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """One process (imports are slow on a busy machine) trains, for each backend,
    ``2K`` steps straight (``BASE/straight-B``) and ``K`` steps (``BASE/half-B``)."""
    base = tmp_path_factory.mktemp("runs")
    corpus = base / "tiny.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    argvs = []
    for backend in ("numpy", "torch"):
        for name, steps in (("straight", 2 * K), ("half", K)):
            out = base / f"{name}-{backend}"
            argvs.append(["train", "--backend", backend, "--data", str(corpus), "--out", str(out),
                          "--max-iters", str(steps), *SMALL])  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-c", RUNS, *("\x1f".join(a) for a in argvs)],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return base


def copy_run(runs: Path, name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(runs / name, dst)
    return dst


def log_rows(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "elapsed_s"} for r in rows]


def assert_same_checkpoint(a: Path, b: Path) -> None:
    wa, ca, oa = ck.load_checkpoint(a)
    wb, cb, ob = ck.load_checkpoint(b)
    assert ca["step"] == cb["step"]
    for what, x, y in (("weight", wa, wb), ("AdamW state", oa, ob)):
        assert sorted(x) == sorted(y)
        for k in x:
            assert x[k].dtype == y[k].dtype and np.array_equal(x[k], y[k]), (
                f"{what} {k} differs between the straight and the resumed run"
            )
    for key in ("sampler_state", "rng_state"):
        assert ca[key] == cb[key], f"{key} differs between the straight and the resumed run"


def in_process(capsys, *argv: str) -> tuple[int, str]:
    """``python -m labs ARGV`` in this process: (exit status, stderr)."""
    from labs.__main__ import main

    status = main(list(argv))
    return status, capsys.readouterr().err


# -- exact resume ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_resume_in_a_fresh_process_is_exact(backend, runs, tmp_path):
    half = copy_run(runs, f"half-{backend}", tmp_path)
    straight = runs / f"straight-{backend}"
    _, at_k, _ = ck.load_checkpoint(half)
    fresh = make_backend(backend, at_k["model"], seed=at_k["train"]["seed"])
    assert at_k["rng_state"] != fresh.rng_state(), "dropout drew nothing: the test is vacuous"

    # a new process, given only the directory and the new end: the rest is recorded
    r = train("--resume", str(half), "--max-iters", str(2 * K))
    assert r.returncode == 0, r.stderr
    assert f"resuming from {half} at step {K}" in r.stdout
    assert log_rows(half) == log_rows(straight)  # losses at every step, bit for bit
    assert len(log_rows(straight)) == 2 * K + 1
    assert_same_checkpoint(half, straight)


def test_resume_refuses_another_model_corpus_or_fewer_steps(runs, tmp_path, capsys):
    out = runs / "half-numpy"  # read only: every attempt fails before writing
    more = ("--max-iters", str(2 * K))  # the half run ended at its own --max-iters, K
    status, err = in_process(capsys, "train", "--resume", str(out), *more, "--d-model", "32")
    assert status == 2 and "with another model or tokenizer (--d-model 16 -> 32)" in err, err
    other = tmp_path / "other.txt"
    other.write_text(TEXT + "Zebra!\n", encoding="utf-8")
    status, err = in_process(capsys, "train", "--resume", str(out), *more, "--data", str(other))
    assert status == 2 and "cannot resume: the tokenizer" in err, err
    status, err = in_process(capsys, "train", "--resume", str(tmp_path / "nothing"))
    assert status == 2 and "cannot resume" in err and "not found" in err, err
    for n in (K - 1, K):  # once 0 steps, silently; at K the checkpoint was rewritten too
        status, err = in_process(capsys, "train", "--resume", str(out), "--max-iters", str(n))
        assert status == 2 and f"--max-iters {n}: the checkpoint" in err, err
        assert f"already at step {K}" in err, err


# -- SIGKILL while a checkpoint is being written ----------------------------------------
def kill_writer_at(stage: str, directory: Path) -> None:
    """Run a second save in a child process, stop it at ``stage``, SIGKILL it."""
    child = subprocess.Popen(
        [sys.executable, "-m", "parity_tests.checkpoint_writer", str(directory), "2"],
        env={**ENV, PAUSE_ENV_VAR: stage},
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = child.stderr.readline()  # blocks until the writer reaches the stage
        assert line.strip() == f"checkpoint writer paused at {stage}", line
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        child.stderr.close()
    assert child.returncode == -signal.SIGKILL


STAGES = [  # (where the writer dies, the step of the checkpoint that loads afterwards)
    ("writing", 1),
    ("staged", 1),
    ("keeping-previous", 1),  # .previous.tmp/ left behind: the next save must not trip on it
    ("previous-removed", 1),  # no .previous/ at all for a moment: DIR's set is whole
    ("kept-previous", 1),
    ("moved-model.safetensors", 1),  # DIR mixes new weights and the old config.json
    ("moved-optimizer.safetensors", 1),
    ("committed", 2),
]


@pytest.mark.parametrize(("stage", "loads_step"), STAGES, ids=[s for s, _ in STAGES])
def test_sigkill_while_writing_leaves_a_loadable_checkpoint(stage, loads_step, tmp_path):
    directory = tmp_path / "ckpt"
    weights, moments = state(1.0)
    ck.save_checkpoint(directory, weights, CONFIG, moments, meta={"step": 1})
    kill_writer_at(stage, directory)

    mixed = stage.startswith("moved-")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded, config, opt = ck.load_checkpoint(directory)
    assert config["step"] == loads_step
    for k in weights:
        assert np.all(loaded[k] == float(loads_step)), f"{k} mixes two checkpoints"
    assert all(np.all(v == float(loads_step)) for v in opt.values())
    fell_back = [w for w in caught if issubclass(w.category, ck.CheckpointWarning)]
    assert bool(fell_back) == mixed, [str(w.message) for w in caught]
    if mixed:
        assert "interrupted" in str(fell_back[0].message)
        assert "nothing is lost" in str(fell_back[0].message)
        assert config["loaded_from"] == str(directory / ck.PREVIOUS_DIR)

    # the next save cleans up and commits normally
    weights3, moments3 = state(3.0)
    ck.save_checkpoint(directory, weights3, CONFIG, moments3, meta={"step": 3})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded, config, _ = ck.load_checkpoint(directory)
    assert config["step"] == 3 and np.all(loaded["tok_emb.weight"] == 3.0)
    assert not (directory / ck.STAGING_DIR).exists()
    assert ck.load_checkpoint(directory / ck.PREVIOUS_DIR)[1]["step"] == loads_step


def test_a_mixed_set_without_previous_is_refused(tmp_path):
    """New weights next to an old config.json, and nothing to fall back to: refuse."""
    directory = tmp_path / "ckpt"
    weights, moments = state(1.0)
    ck.save_checkpoint(directory, weights, CONFIG, moments, meta={"step": 1})
    kill_writer_at("moved-model.safetensors", directory)
    for stale in directory.glob(".*"):
        if stale.is_dir():
            for f in stale.iterdir():
                f.unlink()
            stale.rmdir()
    with pytest.raises(CheckpointError, match="interrupted"):
        ck.load_checkpoint(directory)


def test_training_killed_mid_checkpoint_resumes_to_the_same_run(runs, tmp_path):
    """SIGKILL `labs train` while it writes its step-2 checkpoint; resume from what is
    left (step 1); the result is the uninterrupted run, bit for bit."""
    killed = tmp_path / "killed"
    corpus = runs / "tiny.txt"
    child = subprocess.Popen(
        [sys.executable, "-m", "labs", "train", "--backend", "numpy", "--data", str(corpus),
         "--out", str(killed), "--max-iters", str(2 * K), *SMALL],
        env={**ENV, PAUSE_ENV_VAR: "moved-model.safetensors@3"},  # saves: steps 0, 1, 2
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    try:
        while "checkpoint writer paused" not in child.stderr.readline():
            assert time.monotonic() < deadline and child.poll() is None, "never paused"
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stderr.close()
    with pytest.warns(ck.CheckpointWarning):
        assert ck.load_checkpoint(killed)[1]["step"] == 1
    r = train("--resume", str(killed))
    assert r.returncode == 0, r.stderr
    straight = runs / "straight-numpy"
    assert log_rows(killed) == log_rows(straight)
    assert_same_checkpoint(killed, straight)


# -- non-finite steps ----------------------------------------------------------------
NF_CONFIG = {"vocab_size": 11, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 8}
POISONED = "blocks.1.ffn.fc1.weight"


def poison(backend) -> None:
    """Make POISONED's gradient infinite (the others stay finite)."""
    if backend.name == "numpy":
        model, real_backward = backend.model, backend.model.backward

        def backward(dlogits):
            real_backward(dlogits)
            dict(model.named_parameters())[POISONED].grad[0, 0] = np.inf

        model.backward = backward
    else:
        p = dict(backend.model.named_parameters())[POISONED]
        p.register_hook(lambda g: g.index_fill(0, torch.tensor([0]), float("inf")))


@pytest.mark.parametrize("clip", [1.0, 0.0], ids=["clipped", "unclipped"])
@pytest.mark.parametrize("backend_name", ["numpy", "torch"])
def test_non_finite_gradient_stops_before_the_update(backend_name, clip):
    backend = make_backend(
        backend_name, NF_CONFIG, seed=0, train_config={"grad_clip": clip}, dtype="float64"
    )
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 11, (2, 2, 8))
    backend.train_step(x, y)  # one good step
    before = backend.state_dict()
    moments = backend.optimizer_state()
    poison(backend)
    with pytest.raises(NonFiniteError) as info:
        backend.train_step(x, y)
    err = info.value
    assert err.step == 1 and err.parameter == POISONED
    assert "step 1" in str(err) and POISONED in str(err)
    assert not np.isfinite(err.grad_norm)
    assert backend.step == 1
    for k, v in backend.state_dict().items():
        assert np.array_equal(v, before[k]), f"{k} was updated by the failed step"
    for k, v in backend.optimizer_state().items():
        assert np.array_equal(v, moments[k]), f"AdamW {k} was updated by the failed step"


def sha256_of(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.suffix in (".json", ".safetensors")
    }


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's overflows: the point here
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_training_stops_on_nan_and_keeps_the_last_good_checkpoint(backend, runs, tmp_path, capsys):
    out = copy_run(runs, f"half-{backend}", tmp_path)
    good = sha256_of(out)
    # the same run, resumed with a learning rate that blows the weights up
    status, err = in_process(
        capsys, "train", "--resume", str(out), "--max-iters", "9", "--lr", "1e30",
        "--grad-clip", "0", "--eval-interval", "100",
    )  # fmt: skip
    assert status == 2, err
    message = next(line for line in err.splitlines() if line.startswith("error:"))
    stopped = re.match(r"error: training stopped at step (\d+): the loss is nan", message)
    assert stopped and int(stopped[1]) > K, message  # K -> K + 1 blows up, K + 1 is NaN
    assert "the first parameter whose gradient is non-finite is tok_emb.weight" in message
    assert f"The last good checkpoint (step {K}) is kept" in message
    assert sha256_of(out) == good, "the last good checkpoint was overwritten"
