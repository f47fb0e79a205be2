"""Multi-process training: ``torchrun --nproc_per_node 2 -m labs train --backend torch``.

DistributedDataParallel (gloo, two CPU processes) must be the same run as one
process: with ``--batch-size 2b`` every rank draws the same seeded (2b, T)
batch and keeps its own b rows, and DDP averages the two ranks' gradients,
which is exactly the gradient of the mean loss over all 2b rows (each rank's
loss is a mean over equally many tokens). float64, every step's evaluation
losses and the final weights and AdamW moments within the training tolerance.

Checkpoints come from rank 0 alone and resume under another number of
processes: 2 -> 1 and 1 -> 2, each compared with one process run straight.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from labs.plumbing import checkpoint as ck
from parity_tests.test_labs import TEXT
from parity_tests.tolerances import assert_close

pytestmark = pytest.mark.slow  # two torchrun launches; CI runs it

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
K = 3  # steps per half
SMALL = [
    "--backend", "torch", "--dtype", "float64", "--batch-size", "6", "--eval-interval", "1",
    "--eval-batches", "2", "--eval-batch-size", "4", "--block-size", "16", "--n-layers", "2",
    "--d-model", "16", "--n-heads", "2", "--warmup-iters", "2", "--lr-decay-iters", str(2 * K),
    "--sample-tokens", "0",
]  # fmt: skip


def torchrun(*argv: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "labs", "train", *argv],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def one_process(*argv: str) -> None:
    from labs.__main__ import main

    assert main(["train", *argv]) == 0


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]


def assert_same_run(run: Path, reference: Path, what: str) -> None:
    got, want = rows(run), rows(reference)
    assert [r["step"] for r in got] == list(range(2 * K + 1)), "one log row per step, once"
    assert [r["step"] for r in want] == [r["step"] for r in got]
    for g, w in zip(got, want, strict=True):
        for key in ("train_loss", "val_loss", "lr"):
            assert_close(f"{what}: {key} at step {g['step']}", g[key], w[key], kind="training")
    weights, config, moments = ck.load_checkpoint(run)
    weights_ref, config_ref, moments_ref = ck.load_checkpoint(reference)
    assert config["step"] == config_ref["step"] == 2 * K
    assert config["sampler_state"] == config_ref["sampler_state"], "other batches were drawn"
    for name, w in weights_ref.items():
        assert_close(f"{what}: final {name}", weights[name], w, kind="training")
    assert int(moments.pop("step")) == int(moments_ref.pop("step")) == 2 * K
    for name, m in moments_ref.items():
        assert_close(f"{what}: AdamW {name}", moments[name], m, kind="training")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory) -> Path:
    """One process, batch 6, 2K steps: the reference."""
    out = tmp_path_factory.mktemp("straight") / "run"
    one_process("--data", str(corpus), "--out", str(out), "--max-iters", str(2 * K), *SMALL)
    return out


def test_two_ranks_then_one_process_is_one_process_throughout(corpus, straight, tmp_path):
    out = tmp_path / "run"
    r = torchrun("--data", str(corpus), "--out", str(out), "--max-iters", str(K), *SMALL)
    assert "2 processes, 3 sequences each per step" in r.stdout
    assert r.stdout.count("step     0:") == 1, "more than one rank printed"
    assert not list(out.glob(".*.tmp")) and not (out / ck.STAGING_DIR).exists()
    rng = ck.load_checkpoint(out)[1]["rng_state"]  # every rank's dropout generator
    assert len(rng["by_rank"]) == 2 and rng["by_rank"][0]["cpu"] == rng["cpu"]
    assert rng["by_rank"][1]["cpu"] != rng["cpu"], "both ranks would drop the same units"
    one_process("--resume", str(out), "--max-iters", str(2 * K))  # resumed by 1 process
    assert_same_run(out, straight, "2 ranks for 3 steps, then 1 process")


def test_one_process_then_two_ranks_is_one_process_throughout(corpus, straight, tmp_path):
    out = tmp_path / "run"
    one_process("--data", str(corpus), "--out", str(out), "--max-iters", str(K), *SMALL)
    r = torchrun("--resume", str(out), "--max-iters", str(2 * K))
    assert f"resuming from {out} at step {K}" in r.stdout
    assert_same_run(out, straight, "1 process for 3 steps, then 2 ranks")


def test_numpy_backend_under_torchrun_is_refused(corpus, monkeypatch, tmp_path):
    from labs import UserError
    from labs.__main__ import build_parser
    from labs.commands import train

    # --out in tmp_path, not train's default runs/numpy, which the README's own run may hold
    out = str(tmp_path / "run")
    argv = ["train", "--backend", "numpy", "--data", str(corpus), "--out", out]
    args = build_parser().parse_args(argv)
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(UserError, match="needs --backend torch"):
        train.run(args)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torch_backend_on_cuda_trains_like_on_the_cpu():
    """--device cuda: the same start (weights drawn on the CPU), the same steps (float64),
    the state coming back as NumPy, and the CUDA generator in the saved RNG state."""
    from labs.plumbing.backends import make_backend

    config = {"vocab_size": 13, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 16}
    cpu = make_backend("torch", config, seed=3, dtype="float64")
    gpu = make_backend("torch", config, seed=3, dtype="float64", device="cuda")
    x, y = np.random.default_rng(0).integers(0, 13, (2, 4, 8))
    for step in range(3):
        a, b = cpu.train_step(x, y), gpu.train_step(x, y)
        assert_close(f"loss at step {step}, cuda vs cpu", b["loss"], a["loss"], kind="training")
    want = cpu.state_dict()
    for name, w in gpu.state_dict().items():
        assert isinstance(w, np.ndarray)
        assert_close(f"{name} after 3 steps, cuda vs cpu", w, want[name], kind="training")
    assert "cuda" in gpu.rng_state()
    gpu.set_rng_state(gpu.rng_state())
    assert len(gpu.generate([1, 2], 5, seed=0)) == 5
