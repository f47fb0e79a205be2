"""Multi-process training: ``torchrun --nproc_per_node 2 -m labs train``, and the
ranks ``labs train --processes 2`` starts itself.

Two ranks (gloo, two CPU processes) must be the same run as one process, for
either backend: with ``--batch-size 2b`` every rank draws the same seeded (2b, T)
batch and keeps its own b rows, and the two ranks' gradients are averaged
(DistributedDataParallel; the NumPy twin's all-reduce, labs/plumbing/distributed.py),
which is exactly the gradient of the mean loss over all 2b rows (each rank's
loss is a mean over equally many tokens). float64, every step's evaluation
losses and the final weights and AdamW moments within the training tolerance.

Checkpoints come from rank 0 alone and resume under another number of
processes: 2 -> 1 and 1 -> 2, each compared with one process run straight;
Ctrl-C ends every rank and leaves a run that resumes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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
    "--dtype", "float64", "--batch-size", "6", "--eval-interval", "1",
    "--eval-batches", "2", "--eval-batch-size", "4", "--block-size", "16", "--n-layers", "2",
    "--d-model", "16", "--n-heads", "2", "--warmup-iters", "2", "--lr-decay-iters", str(2 * K),
    "--sample-tokens", "0",
]  # fmt: skip
TORCH, NUMPY = ["--backend", "torch", *SMALL], ["--backend", "numpy", *SMALL]


def torchrun(*argv: str) -> subprocess.CompletedProcess:
    r = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         "-m", "labs", "train", *argv],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def spawned(*argv: str, status: int = 0) -> subprocess.CompletedProcess:
    """``python -m labs train --processes 2``: the ranks started by the command itself."""
    r = subprocess.run(
        [sys.executable, "-m", "labs", "train", "--processes", "2", *argv],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == status, r.stdout + r.stderr
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


def reference(corpus, tmp_path_factory, *argv: str) -> Path:
    """One process, batch 6, 2K steps: the reference."""
    out = tmp_path_factory.mktemp("straight") / "run"
    one_process("--data", str(corpus), "--out", str(out), "--max-iters", str(2 * K), *argv)
    return out


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory) -> Path:
    return reference(corpus, tmp_path_factory, *TORCH)


def test_two_ranks_then_one_process_is_one_process_throughout(corpus, straight, tmp_path):
    out = tmp_path / "run"
    r = torchrun("--data", str(corpus), "--out", str(out), "--max-iters", str(K), *TORCH)
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
    one_process("--data", str(corpus), "--out", str(out), "--max-iters", str(K), *TORCH)
    r = torchrun("--resume", str(out), "--max-iters", str(2 * K))
    assert f"resuming from {out} at step {K}" in r.stdout
    assert_same_run(out, straight, "1 process for 3 steps, then 2 ranks")


def test_numpy_two_ranks_are_one_process_and_resume_bit_for_bit(corpus, tmp_path, tmp_path_factory):
    """--processes 2 with 2 micro-batches per step: the one-process run (1e-9); torchrun's
    ranks for K steps, resumed by spawned ranks: the spawned run straight, bit for bit."""
    accum, data = [*NUMPY, "--grad-accum", "2"], ["--data", str(corpus)]
    two = tmp_path / "two"
    r = spawned(*data, "--out", str(two), "--max-iters", str(2 * K), *accum)
    assert "2 processes, 3 sequences each per step" in r.stdout
    assert r.stdout.count("step     0:") == 1 and not r.stderr.count("error"), r.stderr
    want = reference(corpus, tmp_path_factory, *accum)
    assert_same_run(two, want, "numpy, 2 micro-batches: 2 spawned ranks vs 1 process")
    r = spawned(*data, "--out", str(two), *accum, status=2)  # a user error: one line, rank 0's
    assert r.stderr.count("error:") == 1 and "already holds a run" in r.stderr, r.stderr

    out = tmp_path / "run"
    r = torchrun(*data, "--out", str(out), "--max-iters", str(K), *accum)
    assert r.stdout.count("step     0:") == 1, "more than one rank printed"
    rng = ck.load_checkpoint(out)[1]["rng_state"]  # every rank's dropout generator
    assert len(rng["by_rank"]) == 2 and rng["by_rank"][0]["dropout"] == rng["dropout"]
    assert rng["by_rank"][1] != rng["by_rank"][0], "both ranks would drop the same units"
    spawned("--resume", str(out), "--max-iters", str(2 * K), "--bucket-mb", "0")

    def losses(run: Path) -> list:
        return [(row["step"], row["train_loss"], row["val_loss"]) for row in rows(run)]

    assert losses(out) == losses(two)
    resumed = ck.load_checkpoint(out)[0]
    for name, w in ck.load_checkpoint(two)[0].items():
        assert np.array_equal(resumed[name], w), f"{name}: resumed vs straight, 2 ranks"


def test_ctrl_c_ends_every_rank_with_one_line_and_the_run_resumes(corpus, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "labs", "train", "--processes", "2", "--data", str(corpus),
            "--out", str(out), "--max-iters", "100000", *NUMPY]  # fmt: skip
    default = signal.signal(signal.SIGINT, signal.default_int_handler)  # not inherited ignored
    try:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=ENV, cwd=ROOT, start_new_session=True)  # fmt: skip
    finally:
        signal.signal(signal.SIGINT, default)
    try:
        log, deadline = out / "log.jsonl", time.monotonic() + 120
        while p.poll() is None and time.monotonic() < deadline:  # a few evaluations first
            if log.is_file() and log.read_text().count("\n") >= 3:
                break
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGINT)  # the terminal's Ctrl-C: every process of the group
        _, err = p.communicate(timeout=60)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.count("interrupted") == 1 and "Traceback" not in err, err
    step = ck.load_checkpoint(out)[1]["step"]
    one_process("--resume", str(out), "--max-iters", str(step + 2))
    assert [r["step"] for r in rows(out)] == list(range(step + 3))


def test_processes_are_a_divisor_of_the_batch(monkeypatch, capsys):
    from labs import UserError
    from labs.__main__ import build_parser
    from labs.commands.train_distributed import processes_to_start

    args = build_parser().parse_args(["train", "--backend", "numpy", "--batch-size", "6"])
    monkeypatch.setenv("TWINFORMER_PROCESSES", "4")
    assert processes_to_start(args) == 3
    assert "3 processes, not 4: the most that divide --batch-size 6" in capsys.readouterr().out
    args.processes = 2
    assert processes_to_start(args) == 2
    monkeypatch.setenv("WORLD_SIZE", "2")  # under torchrun: its ranks, none started here
    assert processes_to_start(args) == 1
    monkeypatch.delenv("WORLD_SIZE")
    args.processes = None
    monkeypatch.setenv("TWINFORMER_PROCESSES", "two")
    with pytest.raises(UserError, match="TWINFORMER_PROCESSES: must be >= 1"):
        processes_to_start(args)


@pytest.mark.parametrize("fast", [True, False])
def test_gradient_buckets_follow_backward_and_reduce_the_flat_buffer_in_place(fast):
    """One rank of a group of one: the buckets (one per block with --bucket-mb 0) in the
    order backward finishes them, the tied matrix with the embedding; each reduced once,
    on the last micro-batch, as a slice of the flat gradient buffer (no copy; --no-fast,
    whose gradients are arrays of their own: through a buffer, unless alone)."""
    import torch.distributed as dist

    from labs.plumbing.backends import make_backend

    config = {"vocab_size": 13, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 16}
    x, y = np.random.default_rng(0).integers(0, 13, (2, 4, 8))
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        plain = make_backend("numpy", config, seed=3, dtype="float64", fast=fast)
        ranked = make_backend("numpy", config, seed=3, dtype="float64", fast=fast)
        ranked.distribute(bucket_mb=0)
        sync = ranked._sync
        top = {  # a parameter's top-level child: blocks.1, ln_f, ...
            id(p): ".".join(n.split(".")[: 2 if n.startswith("blocks") else 1])
            for n, p in ranked.model.named_parameters()
        }
        owners = [{top[id(p)] for p in bucket} for _, bucket in sync.buckets]
        assert owners == [{"ln_f"}, {"blocks.1"}, {"blocks.0"}, {"pos_emb"}, {"tok_emb"}]
        finish, reduced = sync.finish, []

        def spy(loss):
            reduced.append([np.shares_memory(buf, p.grad) for (_, buf, _), (_, (p, *_)) in
                            zip(sync.pending, sync.buckets, strict=True)])  # fmt: skip
            return finish(loss)

        sync.finish = spy
        for _ in range(2):
            plain.train_step(x, y, grad_accum=2)
            ranked.train_step(x, y, grad_accum=2)
        in_place = [fast or len(bucket) == 1 for _, bucket in sync.buckets]
        assert reduced == [in_place] * 2, "one all-reduce per bucket and step"
        want = plain.state_dict()
        for name, w in ranked.state_dict().items():
            assert_close(f"{name}, 1 rank vs no group", w, want[name], kind="training")
    finally:
        dist.destroy_process_group()


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
