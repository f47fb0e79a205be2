"""Training parity: the same start and the same batches give the same run, step by step.

Both backends start from the same weights (copied), read the same batches (one
NumPy generator) and train 25 steps with AdamW (betas (0.9, 0.99), weight decay
0.1 on matrices only, through each side's ``configure_param_groups`` and
``AdamW``), global-norm clipping and the warmup + cosine schedule (each side's
``cosine_lr``, set into ``group["lr"]`` before each step, as labs' training does).
float64; the loss, learning rate and gradient norm must agree to a relative
1e-9 at every step, and the final weights and AdamW moments by name.
Reached: ~2e-16 relative per step; final weights ~1e-16 apart, except the key
biases, which hold ~1e-13 of rounding noise (see tolerances.TRAINING).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import numpy_impl as N
import torch_impl as T
from numpy_impl import fast as fast_backend
from parity_tests import hints as H
from parity_tests.harness import copy_weights, copy_weights_to_torch, randomize_, tensor
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import Collected, assert_close

pytestmark = pytest.mark.ch09

STEPS = 25
LR, MIN_LR, WARMUP, DECAY = 1e-2, 1e-3, 5, 20  # the run covers warmup, cosine and floor
BETAS, WEIGHT_DECAY = (0.9, 0.99), 0.1
# The global gradient norms of these runs range over ~0.9 .. 2.3, so a threshold of
# 1.5 clips some steps and leaves others alone: both branches of the clip are
# compared (at 1.0 the untied model is clipped at every step).
CLIP = 1.5
CONFIG = {"vocab_size": 16, "block_size": 8, "n_layers": 2, "n_heads": 2, "d_model": 16}
B, T_ = 4, 8


def corpus(rng: SeededRng, n: int = 4000) -> np.ndarray:
    """A learnable token stream: a fixed cycle through the vocabulary, 10% noise."""
    V = CONFIG["vocab_size"]
    cycle = rng.gen.permutation(V)
    ids = np.tile(cycle, n // V + 1)[:n]
    noise = rng.mask(n, p_true=0.1)
    ids[noise] = rng.ids(V, int(noise.sum()))
    return ids


def batches(rng: SeededRng, data: np.ndarray):
    """(x, y) pairs of shape (B, T): y is x shifted one token to the left."""
    while True:
        starts = rng.gen.integers(0, len(data) - T_ - 1, B)
        x = np.stack([data[s : s + T_] for s in starts])
        y = np.stack([data[s + 1 : s + T_ + 1] for s in starts])
        yield x, y


@pytest.mark.parametrize("attn_impl", ["explicit", "sdpa"])
@pytest.mark.parametrize("tie", [pytest.param(True, id="tied"), pytest.param(False, id="untied")])
def test_adamw_training_runs_agree_step_by_step(tie, attn_impl):
    rng = SeededRng(2024)
    config = {**CONFIG, "tie_weights": tie}
    # GPT-2 initialisation drawn by the NumPy side from a fixed seed (torch's global
    # generator is never used: the test must be the same run every time), then copied
    # each side's written-out attention, or each side's fast path (NumPy's fast backend,
    # numpy_impl/fast.py: FlashAttention's tiles, the fused LayerNorm and GELU)
    fast = attn_impl == "sdpa"
    numpy_impl = "flash" if fast else "explicit"
    numpy_model = N.GPT(N.GPTConfig(**config), seed=0, attn_impl=numpy_impl, dtype=np.float64)
    if fast:
        fast_backend.accelerate(numpy_model)
    for block in numpy_model.blocks:
        block.attn.flash_tile = 4  # several tiles at this short context
    torch_model = T.GPT(T.GPTConfig(**config), attn_impl=attn_impl, dtype=torch.float64)
    copy_weights_to_torch(numpy_model, torch_model)

    # one recipe on both sides (labs' too); foreach=False: torch's one-tensor-at-a-time path
    torch_groups = T.configure_param_groups(torch_model, WEIGHT_DECAY)
    torch_opt = T.AdamW(torch_groups, lr=LR, betas=BETAS, eps=1e-8, foreach=False)
    numpy_groups = N.configure_param_groups(numpy_model, WEIGHT_DECAY)
    numpy_opt = N.AdamW(numpy_groups, lr=LR, betas=BETAS, eps=1e-8)

    # weight decay on >= 2-D parameters only, the same split on both sides
    for side, opt in (("NumPy", numpy_opt), ("torch", torch_opt)):
        for group in opt.param_groups:
            dims = {p.ndim for p in group["params"]}
            assert (min(dims) >= 2) == (group["weight_decay"] == WEIGHT_DECAY), (
                f"{side}: group with weight_decay={group['weight_decay']} holds ndims {dims}"
            )

    numpy_loss, torch_loss = N.CrossEntropyLoss(), T.CrossEntropyLoss()
    stream = batches(rng, corpus(rng))
    losses, clipped = [], []
    # collect, then fail: when the loss differs at step 1, the final weights and moments
    # are still compared by name (which of them differ says which update went wrong)
    checks = Collected()
    for step in range(STEPS):
        x, y = next(stream)
        lr = N.cosine_lr(step, LR, MIN_LR, WARMUP, DECAY)
        lr_t = T.cosine_lr(step, LR, MIN_LR, WARMUP, DECAY)
        lr_hints = {
            label: H.cosine_lr_variant(step, LR, MIN_LR, WARMUP, DECAY, mistake)
            for label, mistake in ((H.WARMUP_FROM_ZERO, "from_zero"),
                                   (H.WARMUP_WITHOUT_PLUS_ONE, "no_plus_one"))
        }  # fmt: skip
        checks.assert_close(
            f"learning rate at step {step}", lr, lr_t, kind="training", once="lr", hints=lr_hints
        )
        for group in numpy_opt.param_groups:
            group["lr"] = lr
        for group in torch_opt.param_groups:
            group["lr"] = lr_t

        numpy_model.zero_grad()
        loss = numpy_loss(numpy_model(x), y)
        numpy_model.backward(numpy_loss.backward())
        norm = N.clip_grad_norm_(numpy_model.parameters(), CLIP)
        numpy_opt.step()

        torch_opt.zero_grad()
        loss_t = torch_loss(torch_model(tensor(x)), tensor(y))
        loss_t.backward()
        norm_t = T.clip_grad_norm_(torch_model.parameters(), CLIP)
        torch_opt.step()

        checks.assert_close(f"loss at step {step}", loss, loss_t, kind="training", once="loss")
        checks.assert_close(
            f"gradient norm before clipping, step {step}", norm, norm_t, kind="training",
            once="norm",
        )  # fmt: skip
        losses.append(loss)
        clipped.append(norm_t.item() > CLIP)

    torch_state = dict(torch_model.named_parameters())
    for name, p in numpy_model.named_parameters():
        checks.assert_close(f"final weight {name}", p.data, torch_state[name], kind="training")
        for key in ("exp_avg", "exp_avg_sq"):
            moment = numpy_opt.state.get(p, {}).get(key, np.zeros_like(p.data))
            checks.assert_close(
                f"AdamW {key} of {name}",
                moment,
                torch_opt.state[torch_state[name]][key],
                kind="training",
                hints={H.ADAMW_REBOUND: np.zeros_like(p.data)},
            )
    checks.raise_failures()
    assert any(clipped), "clipping never triggered: the test would not check it"
    assert not all(clipped), "clipping triggered at every step: the no-clip branch is unchecked"
    assert losses[-1] < losses[0] - 0.1, (
        f"the model did not learn: losses {losses[0]:.3f} -> {losses[-1]:.3f}"
    )


def test_adamw_steps_agree():
    """Three AdamW steps on a matrix (decayed) and a vector (not), changing learning rates:
    the weights and both moments, each against torch.optim.AdamW, and against AdamW with
    each of the usual mistakes (hints.adamw_variant) for the failure's hint."""
    rng = SeededRng(9)
    betas, eps, lrs = (0.9, 0.99), 1e-8, [1e-2, 5e-2, 2e-2]
    starts = [rng.normal((3, 4)), rng.normal((4,))]
    decays = [0.5, 0.0]  # large: decay mistakes change the weights far beyond 1e-9
    grads = [[rng.normal(p.shape) for p in starts] for _ in lrs]
    numpy_params = [N.Parameter(p.copy()) for p in starts]
    torch_params = [torch.nn.Parameter(tensor(p)) for p in starts]
    numpy_opt = N.AdamW(
        [{"params": [q], "weight_decay": wd} for q, wd in zip(numpy_params, decays, strict=True)],
        lr=lrs[0], betas=betas, eps=eps,
    )  # fmt: skip
    torch_opt = T.AdamW(
        [{"params": [q], "weight_decay": wd} for q, wd in zip(torch_params, decays, strict=True)],
        lr=lrs[0], betas=betas, eps=eps, foreach=False,
    )  # fmt: skip
    for step_grads, lr in zip(grads, lrs, strict=True):
        for opt in (numpy_opt, torch_opt):
            for group in opt.param_groups:
                group["lr"] = lr
        for p, q, g in zip(numpy_params, torch_params, step_grads, strict=True):
            p.grad[...] = g
            q.grad = tensor(g)
        numpy_opt.step()
        torch_opt.step()
    hints = H.adamw_hints(starts, grads, lrs, betas, eps, decays)
    checks = Collected()
    for i, (name, p, q) in enumerate(
        zip(("matrix", "vector"), numpy_params, torch_params, strict=True)
    ):
        checks.assert_close(
            f"{name} after 3 AdamW steps", p.data, q, kind="training", hints=hints["weight"][i]
        )
        for key in ("exp_avg", "exp_avg_sq"):
            moment = numpy_opt.state.get(p, {}).get(key, np.zeros_like(p.data))
            checks.assert_close(
                f"AdamW {key} of the {name}", moment, torch_opt.state[q][key], kind="training",
                hints=hints[key][i],
            )  # fmt: skip
    checks.raise_failures()


SCHEDULES = [  # (warmup_iters, lr_decay_iters): labs' defaults, a floor reached early, no warmup
    pytest.param(100, 2000, id="warmup100-decay2000"),
    pytest.param(100, 1500, id="warmup100-decay1500-floor"),
    pytest.param(0, 2000, id="no-warmup"),
]


@pytest.mark.parametrize(("warmup", "decay"), SCHEDULES)
def test_lr_schedules_agree_over_2000_steps(warmup, decay):
    max_lr, min_lr, steps = 1e-3, 1e-4, 2000
    torch_lrs = np.array([T.cosine_lr(s, max_lr, min_lr, warmup, decay) for s in range(steps)])
    numpy_lrs = np.array([N.cosine_lr(s, max_lr, min_lr, warmup, decay) for s in range(steps)])
    assert_close(
        f"learning rates of warmup={warmup}, decay={decay}", numpy_lrs, torch_lrs,
        kind="training", hints=H.schedule_hints(steps, max_lr, min_lr, warmup, decay),
    )  # fmt: skip
    assert numpy_lrs[0] > 0, "step 0 must already move the weights"
    # the shape itself: rises through warmup, peaks at max_lr, falls to the floor
    if warmup:
        assert np.all(np.diff(numpy_lrs[: warmup + 1]) > 0)
        assert math.isclose(numpy_lrs[0], max_lr / (warmup + 1))
    assert math.isclose(numpy_lrs[warmup], max_lr)
    assert math.isclose(numpy_lrs[(warmup + decay) // 2], (max_lr + min_lr) / 2, rel_tol=1e-5)
    assert np.all(np.diff(numpy_lrs[warmup : decay + 1]) <= 0)
    assert np.all(numpy_lrs[decay:] >= min_lr - 1e-18)
    if decay < steps:
        np.testing.assert_array_equal(numpy_lrs[decay + 1 :], min_lr)


@given(warmup=st.integers(0, 30), span=st.integers(0, 60), extra=st.integers(0, 20))
def test_lr_schedules_agree_for_any_shape(warmup, span, extra):
    decay = warmup + span  # span 0: no decay, the floor right after warmup
    steps = decay + extra + 1
    torch_lrs = [T.cosine_lr(s, 3e-4, 3e-5, warmup, decay) for s in range(steps)]
    numpy_lrs = [N.cosine_lr(s, 3e-4, 3e-5, warmup, decay) for s in range(steps)]
    assert_close(
        f"learning rates of warmup={warmup}, decay={decay}", numpy_lrs, torch_lrs,
        kind="training", hints=H.schedule_hints(steps, 3e-4, 3e-5, warmup, decay),
    )  # fmt: skip
    assert all(3e-5 <= lr <= 3e-4 for lr in numpy_lrs[warmup:]), "outside [min_lr, max_lr]"


@pytest.mark.parametrize("max_norm", [0.05, 1.0, 100.0])
def test_clip_grad_norm_agrees(max_norm):
    """Same global norm returned, same rescaled gradients, on both sides of the threshold."""
    rng = SeededRng(7)
    torch_model = randomize_(T.FeedForward(6, 10, dtype=torch.float64), rng)
    numpy_model = N.FeedForward(6, 10, dtype=np.float64)
    copy_weights(torch_model, numpy_model)
    for p, q in zip(numpy_model.parameters(), torch_model.parameters(), strict=True):
        p.grad[...] = rng.normal(p.shape)
        q.grad = tensor(p.grad)
    hints = H.clip_hints([p.grad for p in numpy_model.parameters()], max_norm)
    norm = N.clip_grad_norm_(numpy_model.parameters(), max_norm)
    norm_t = T.clip_grad_norm_(torch_model.parameters(), max_norm)
    checks = Collected()
    checks.assert_close(
        f"global gradient norm (max_norm={max_norm})", norm, norm_t, hints=hints["norm"]
    )
    for (name, p), (_, q), grad_hints in zip(
        numpy_model.named_parameters(), torch_model.named_parameters(), hints["grads"], strict=True
    ):
        checks.assert_close(
            f"clipped grad of {name} (max_norm={max_norm})", p.grad, q.grad, hints=grad_hints
        )
    checks.raise_failures()
    after = math.sqrt(sum(float(np.sum(p.grad**2)) for p in numpy_model.parameters()))
    if max_norm < norm:  # ~11.7 for these 136 N(0, 1) gradients: 0.05 and 1.0 clip
        assert math.isclose(after, max_norm, rel_tol=1e-6), f"norm after clipping {after}"
    else:
        assert max_norm == 100.0 and math.isclose(after, norm), "clipped although under max_norm"
