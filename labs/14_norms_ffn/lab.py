# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 14 lab: RMSNorm, post-norm, SwiGLU
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/14_norms_ffn/lab.py
#
# It prints numbers and writes PNGs into `labs/14_norms_ffn/figures/`.
# Section 4 trains four small models for 200 steps each with the PyTorch
# twin (about 30 s of CPU); the rest is instant. It never downloads:
# without `$TWINFORMER_DATA` or a cached corpus it trains on a short built-in
# passage and says so.
#
# 1. RMSNorm next to LayerNorm: what each removes, what each costs.
# 2. Their backward passes: which directions the gradient never has.
# 3. SiLU, GELU, ReLU, and SwiGLU's parameter budget.
# 4. Pre-norm and post-norm, LayerNorm and RMSNorm, trained side by side,
#    with and without a learning-rate warmup.

# %%
import time

from labs.learner.notebook import CORIOLANUS, figure_saver, limit_threads, load_text, plot_to_files

save = figure_saver("14_norms_ffn")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T
from labs.plumbing.backends import make_backend
from labs.plumbing.data import BatchSampler, fixed_eval_batches

np.set_printoptions(precision=4, suppress=True, linewidth=100)
rng = np.random.default_rng(0)


# %% [markdown]
# ## 1. RMSNorm next to LayerNorm
#
# Four token vectors (C = 64) with their own offsets and spreads. LayerNorm
# removes each row's mean and divides by its standard deviation; RMSNorm
# only divides by the root mean square, so a row's mean survives (as a
# fraction of its size). Both leave a row's *scale* behind. Then the cost:
# forward + backward of each on a (768, 128) activation, the baby GPT's
# (B x T, C), timed in turn in this one process. RMSNorm makes one pass over
# the row where LayerNorm makes two (mean, then variance), and its backward
# drops a term.

# %%
C = 64
offsets = np.array([0.0, 3.0, -5.0, 0.5])
spreads = np.array([1.0, 0.5, 2.0, 10.0])
x = offsets[:, None] + spreads[:, None] * rng.standard_normal((4, C))
ln, rms = N.LayerNorm(C, dtype=np.float64), N.RMSNorm(C, dtype=np.float64)
y_ln, y_rms = ln(x), rms(x)
print("row   in: mean    std |  LayerNorm: mean   std |  RMSNorm: mean   rms")
for r in range(4):
    print(
        f"{r:>3} {x[r].mean():>9.2f} {x[r].std():>6.2f} | {y_ln[r].mean():>14.1e} "
        f"{y_ln[r].std():>5.2f} | {y_rms[r].mean():>12.2f} {np.sqrt(np.mean(y_rms[r] ** 2)):>5.2f}"
    )


def time_fwd_bwd(norm, a: np.ndarray, repeats: int = 30) -> float:
    d = np.ones_like(a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        norm(a)
        norm.backward(d)
        best = min(best, time.perf_counter() - t0)
    return best


a = rng.standard_normal((768, 128)).astype(np.float32)
t_ln = time_fwd_bwd(N.LayerNorm(128), a)
t_rms = time_fwd_bwd(N.RMSNorm(128), a)
print(
    f"NumPy forward + backward on (768, 128) float32, best of 30: LayerNorm {t_ln * 1e6:.0f} us, "
)
print(f"RMSNorm {t_rms * 1e6:.0f} us: RMSNorm / LayerNorm = {t_rms / t_ln:.2f}")

# %% [markdown]
# ## 2. The backward passes and their blind directions
#
# LayerNorm's output does not change when a row is shifted, so its input
# gradient sums to zero over each row; it barely changes when a row is
# scaled, so the gradient is (nearly) orthogonal to xhat. RMSNorm is scale-
# invariant only: dx . xhat ~ 0 too, but dx sums to whatever it likes.
# With g = dout * weight,
#
#     LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
#     RMSNorm:   dx = rrms * (g          - xhat * mean(g * xhat))

# %%
x = rng.standard_normal((6, C)) * 2.0 + 1.0
dout = rng.standard_normal(x.shape)
for name, norm in (
    ("LayerNorm", N.LayerNorm(C, dtype=np.float64)),
    ("RMSNorm", N.RMSNorm(C, dtype=np.float64)),
):
    y = norm(x)
    dx = norm.backward(dout)
    xhat = y / norm.weight.data  # weight is 1 here; bias 0
    if name == "LayerNorm":
        xhat = xhat - (norm.bias.data / norm.weight.data)
    print(
        f"{name:<9}: max |sum(dx)| per row {np.abs(dx.sum(-1)).max():.1e}, "
        f"max |dx . xhat| per row {np.abs((dx * xhat).sum(-1)).max():.1e} "
        f"(|dx| up to {np.abs(dx).max():.2f})"
    )
x_t = torch.tensor(x, requires_grad=True)
(T.RMSNorm(C, dtype=torch.float64)(x_t) * torch.from_numpy(dout)).sum().backward()
rms = N.RMSNorm(C, dtype=np.float64)
rms(x)
dx = rms.backward(dout)
print(f"RMSNorm dx, NumPy vs torch autograd: {np.abs(dx - x_t.grad.numpy()).max():.1e}")

# %% [markdown]
# ## 3. SiLU, GELU, ReLU; SwiGLU's budget
#
# SwiGLU (Shazeer 2020): w2(SiLU(w1 x) * w3 x). The SiLU of the gate
# branch multiplies, feature by feature, a second linear branch: a learned,
# input-dependent gate instead of a fixed non-linearity. Three matrices
# instead of two, so the hidden width shrinks from 4C to 2/3 of that to keep
# the parameter count; Llama rounds it up to a multiple of 256 (8 here).

# %%
z = np.linspace(-5, 5, 401)
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
for name, act in (("ReLU", N.ReLU()), ("GELU (tanh)", N.GELU("tanh")), ("SiLU", N.SiLU())):
    ax0.plot(z, act(z), label=name)
    ax1.plot(z, act.backward(np.ones_like(z)), label=name)
ax0.set(title="activation", xlabel="x")
ax1.set(title="derivative", xlabel="x")
for ax in (ax0, ax1):
    ax.grid(alpha=0.3)
    ax.legend()
fig.tight_layout()
save(fig, "activations.png")
silu = N.SiLU()
silu(np.array([-1.278]))
print("SiLU's minimum: about -0.278 at x = -1.278; its derivative there:", end=" ")
print(f"{silu.backward(np.ones(1))[0]:.1e}")

C = 128
mlp = N.FeedForward(C, bias=False)
swiglu = N.SwiGLUFeedForward(C)
print(f"d_model {C}: GELU MLP 2 x {C} x {4 * C} = {mlp.num_parameters():,} parameters; ", end="")
print(f"SwiGLU 3 x {C} x {swiglu.d_ff} = {swiglu.num_parameters():,}", end=" ")
print("(d_ff = 2/3 * 4C, rounded up to a multiple of 8)")
print(
    "Llama 7B's width by the same rule, d_model 4096, multiple_of 256:",
    N.swiglu_hidden_dim(4096, 256),
)

# %% [markdown]
# ## 4. Pre-norm and post-norm, trained
#
# Four small GPTs (4 blocks, d_model 64, context 32, batch 16), the same data
# and seed, 200 AdamW steps at a peak learning rate of 3e-3: pre-norm and
# post-norm, each with a 100-step warmup and with none. Post-norm puts a norm on the residual path
# itself, so every gradient crosses every norm on its way down; Xiong et al.
# (2020) show its gradients near the output are large at initialisation,
# which is why the original transformer needed a warmup. The figure shows
# the validation loss of each run.

# %%
STEPS = 200 if __name__ == "__main__" else 0
text, source = load_text(
    CORIOLANUS * 4, "built-in passage (Coriolanus I.1)", "training on a built-in passage"
)
tok = N.CharTokenizer.from_text(text)
ids = tok.encode_array(text)
split = int(0.9 * len(ids))
val = fixed_eval_batches(ids[split:], 32, 16, 4, seed=1)
RUNS = [  # (norm_position, norm, warmup steps)
    ("pre", "layernorm", 100),
    ("pre", "layernorm", 0),
    ("post", "layernorm", 100),
    ("post", "layernorm", 0),
]
runs = {}
for norm_position, norm, warmup in RUNS:
    cfg = {
        "vocab_size": tok.vocab_size,
        "block_size": 32,
        "n_layers": 4,
        "n_heads": 4,
        "d_model": 64,
        "norm": norm,
        "norm_position": norm_position,
    }
    schedule = {"lr": 3e-3, "min_lr": 3e-4, "warmup_iters": warmup}
    schedule["lr_decay_iters"] = max(STEPS, warmup + 1)
    backend = make_backend("torch", cfg, seed=0, train_config=schedule)
    sampler = BatchSampler(ids[:split], 32, 16, seed=0)
    curve = [(0, backend.eval_loss(val))]
    for step in range(1, STEPS + 1):
        backend.train_step(*sampler.next())
        if step % 50 == 0:
            curve.append((step, backend.eval_loss(val)))
    runs[(norm_position, norm, warmup)] = curve
    print(f"{norm_position:>4}-norm, {norm:<9}, warmup {warmup:>3}: val loss", end=" ")
    print(" ".join(f"{v:.3f}" for _, v in curve))
print(f"trained on {source}")

if STEPS:
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    for ax, warmup in zip(axes, (100, 0), strict=True):
        for (norm_position, norm, w), curve in runs.items():
            if w == warmup:
                style = "-" if norm_position == "pre" else "--"
                steps, losses = zip(*curve, strict=True)
                ax.plot(
                    steps, losses, style, marker="o", ms=3, label=f"{norm_position}-norm, {norm}"
                )
        ax.set(title=f"warmup {warmup} steps, peak lr 3e-3", xlabel="step", ylabel="val loss")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, "pre_post_training.png")
