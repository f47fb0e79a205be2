"""``--grad-accum N`` and ``--amp`` (labs/plumbing/backends_*.py ``train_step``).

Gradient accumulation is exact, not approximate: the gradient of a batch's mean loss
is the mean of its N equal micro-batches' gradients, so N micro-batches of 3 rows give
the step of one batch of 12 to float64 rounding (TRAINING, the whole-model training
tolerance), in both backends, for the backends' ``train_step`` and for ``labs train``
(the same batches: the sampler draws the step's 12 rows at once, then cuts them).

Mixed precision (torch only): bfloat16 and float16 autocast train a model whose loss
falls like float32's; the float16 GradScaler's state is saved and resumed; every
misuse is refused with the option named. The CUDA paths run where a GPU is present.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from labs.__main__ import main as labs_main
from labs.plumbing.backends import make_backend
from labs.plumbing.checkpoint import load_checkpoint
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import TRAINING, assert_close

CONFIG = {
    "vocab_size": 31,
    "block_size": 10,
    "n_layers": 2,
    "n_heads": 2,
    "d_model": 16,
    "dropout": 0.0,
}
TRAIN = {"warmup_iters": 1, "lr_decay_iters": 10, "grad_clip": 1.0}
TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die "
    "than to famish?\n\nAll:\nResolved. resolved.\n"
) * 8


def batches(n_steps: int, B: int = 12, seed: int = 0):
    rng = SeededRng(seed)
    for _ in range(n_steps):
        ids = rng.ids(CONFIG["vocab_size"], (B, CONFIG["block_size"] + 1))
        yield ids[:, :-1], ids[:, 1:]


def devices() -> list:
    cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    return ["cpu", pytest.param("cuda", marks=[pytest.mark.gpu, cuda])]


BACKEND_DEVICES = [
    ("numpy", "cpu"),
    ("torch", "cpu"),
    pytest.param("torch", "cuda", marks=devices()[1].marks, id="torch-cuda"),
]


@pytest.mark.parametrize("llama", [False, True], ids=["gpt2", "llama"])
@pytest.mark.parametrize(("backend", "device"), BACKEND_DEVICES)
def test_four_micro_batches_of_3_are_one_batch_of_12(backend, device, llama):
    arch = {"pos_emb": "rope", "norm": "rmsnorm", "ffn": "swiglu", "bias": False} if llama else {}
    kwargs = {"seed": 1, "train_config": TRAIN, "dtype": "float64", "device": device}
    one = make_backend(backend, {**CONFIG, **arch}, **kwargs)
    accum = make_backend(backend, {**CONFIG, **arch}, **kwargs)
    for step, (x, y) in enumerate(batches(3)):
        a = one.train_step(x, y)
        b = accum.train_step(x, y, grad_accum=4)
        assert_close(
            f"{backend} loss, step {step}",
            np.array(b["loss"]),
            np.array(a["loss"]),
            np.float64,
            tol=TRAINING,
        )
        assert_close(
            f"{backend} gradient norm, step {step}",
            np.array(b["grad_norm"]),
            np.array(a["grad_norm"]),
            np.float64,
            tol=TRAINING,
        )
    sa, sb = one.state_dict(), accum.state_dict()
    for k in sa:
        assert_close(f"{backend} {k} after 3 steps", sb[k], sa[k], np.float64, tol=TRAINING)
    # and it is not vacuous: the weights moved
    fresh = make_backend(backend, {**CONFIG, **arch}, seed=1, dtype="float64").state_dict()
    assert max(np.abs(sa[k] - fresh[k]).max() for k in sa) > 1e-3


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_grad_accum_must_divide_the_batch(backend):
    b = make_backend(backend, CONFIG)
    x, y = next(batches(1))
    for bad in (0, 5, -1, 2.0, True):
        with pytest.raises(ValueError, match="^grad_accum"):
            b.train_step(x, y, grad_accum=bad)
    assert b.step == 0


def run_train(tmp_path, name: str, *argv) -> tuple[list, dict]:
    out = tmp_path / name
    status = labs_main(
        [
            "train",
            "--data",
            str(tmp_path / "text.txt"),
            "--out",
            str(out),
            "--max-iters",
            "4",
            "--eval-interval",
            "2",
            "--eval-batches",
            "2",
            "--eval-batch-size",
            "4",
            "--block-size",
            "12",
            "--n-layers",
            "1",
            "--d-model",
            "16",
            "--n-heads",
            "2",
            "--warmup-iters",
            "1",
            "--sample-tokens",
            "0",
            *map(str, argv),
        ]
    )
    assert status == 0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return log, load_checkpoint(out)[0]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_labs_train_grad_accum_4_of_3_is_batch_12(backend, tmp_path):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    common = ["--backend", backend, "--dtype", "float64"]
    log_a, state_a = run_train(tmp_path, "b12", *common, "--batch-size", 12)
    log_b, state_b = run_train(tmp_path, "b3x4", *common, "--batch-size", 3, "--grad-accum", 4)
    assert [r["step"] for r in log_a] == [r["step"] for r in log_b] == [0, 2, 4]
    for ra, rb in zip(log_a, log_b, strict=True):
        for key in ("train_loss", "val_loss"):
            assert_close(
                f"{backend} {key} at step {ra['step']}",
                np.array(rb[key]),
                np.array(ra[key]),
                np.float64,
                tol=TRAINING,
            )
    for k in state_a:
        assert_close(f"{backend} {k}", state_b[k], state_a[k], np.float64, tol=TRAINING)


# -- mixed precision (torch) ---------------------------------------------------------------


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("amp", ["bf16", "fp16"])
def test_mixed_precision_trains_like_float32(amp, device):
    """The same 12 steps on one batch, float32 and autocast: both losses fall, and stay
    within a few percent of each other (the 16-bit matmuls round differently)."""
    x, y = next(batches(1))
    losses = {}
    for mode in (None, amp):
        b = make_backend(
            "torch",
            CONFIG,
            seed=3,
            device=device,
            amp=mode,
            train_config={"lr": 1e-2, "warmup_iters": 1, "lr_decay_iters": 50},
        )
        losses[mode] = [b.train_step(x, y, grad_accum=2)["loss"] for _ in range(12)]
        assert all(np.isfinite(losses[mode]))
        assert losses[mode][-1] < 0.8 * losses[mode][0], (mode, losses[mode])
    assert abs(losses[amp][-1] - losses[None][-1]) < 0.05 * losses[None][-1]
    if amp == "fp16":
        assert b.scaler_state()["scale"] > 0
    else:
        assert b.scaler_state() is None  # bf16 has float32's range: no scaler


def test_fp16_scaler_state_is_saved_and_resumed(tmp_path):
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    run_train(tmp_path, "amp", "--backend", "torch", "--amp", "fp16", "--batch-size", 4)
    _, config, _ = load_checkpoint(tmp_path / "amp")
    scaler = config["grad_scaler"]
    assert scaler["scale"] > 0 and config["train"]["amp"] == "fp16"
    b = make_backend("torch", CONFIG, amp="fp16")
    b.set_scaler_state({**scaler, "scale": 1024.0})
    assert b.scaler_state()["scale"] == 1024.0
    assert labs_main(["train", "--resume", str(tmp_path / "amp"), "--max-iters", "6"]) == 0
    _, resumed, _ = load_checkpoint(tmp_path / "amp")
    assert resumed["step"] == 6 and resumed["train"]["amp"] == "fp16"


def test_fp16_overflow_skips_the_step_instead_of_stopping():
    """An infinite gradient under the GradScaler: the update is skipped and the scale
    halved (GradScaler's job), the weights unchanged, the run goes on."""
    b = make_backend("torch", CONFIG, amp="fp16")
    x, y = next(batches(1))
    before = b.state_dict()
    b.set_scaler_state({**b.scaler_state(), "scale": 3e38})  # the scaled loss overflows
    stats = b.train_step(x, y)
    assert stats["skipped"] and b.step == 1 and not np.isfinite(stats["grad_norm"])
    assert b.scaler_state()["scale"] == pytest.approx(1.5e38)  # halved (backoff_factor 0.5)
    after = b.state_dict()
    for k in before:
        np.testing.assert_array_equal(after[k], before[k], err_msg=k)


def test_amp_misuse_is_refused_naming_the_option(tmp_path, capsys):
    with pytest.raises(ValueError, match="^amp: the numpy backend"):
        make_backend("numpy", CONFIG, amp="bf16")
    with pytest.raises(ValueError, match="^amp: mixed precision keeps float32"):
        make_backend("torch", CONFIG, amp="bf16", dtype="float64")
    with pytest.raises(ValueError, match="^amp: expected one of"):
        make_backend("torch", CONFIG, amp="fp8")
    (tmp_path / "text.txt").write_text(TEXT, encoding="utf-8")
    for argv, match in (
        (["--backend", "numpy", "--amp", "bf16"], "--amp bf16: the numpy backend"),
        (["--backend", "torch", "--amp", "fp16", "--dtype", "float64"], "--amp fp16 keeps"),
        (["--backend", "torch", "--grad-accum", "0"], "--grad-accum: must be >= 1"),
    ):
        status = labs_main(
            ["train", "--data", str(tmp_path / "text.txt"), "--out", str(tmp_path / "never"), *argv]
        )
        err = capsys.readouterr().err
        assert status == 2 and match in err and err.count("\n") == 1, err
        assert not (tmp_path / "never").exists()
