# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 09 lab: training, twice
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/09_training/lab.py
#
# It prints numbers and writes PNGs into `labs/09_training/figures/` (about
# 20 seconds on a laptop CPU). The corpus comes from `labs.plumbing.data`: the path in
# `$TWINFORMER_DATA`, else the cached download of `python -m labs train`.
# This lab never downloads; without either it trains on two sonnets built into
# this file, and says so.
#
# 1. The loss: a stable logsumexp, `ignore_index`, the fused gradient.
# 2. AdamW: which parameters decay, and what bias correction does to step 1.
# 3. The schedule: warmup, cosine, floor; both backends' versions overlaid.
# 4. The same 150 steps trained by the NumPy and the PyTorch backend, from the
#    same weights on the same batches: the loss curves lie on top of each other.

# %%
import math
import time

from labs.learner.notebook import SONNETS, figure_saver, limit_threads, load_text, plot_to_files

save = figure_saver("09_training")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T
from labs.plumbing.backends import DEFAULT_TRAIN_CONFIG, make_backend
from labs.plumbing.data import BatchSampler, fixed_eval_batches, train_val_split
from numpy_impl.char_tokenizer import CharTokenizer

np.set_printoptions(precision=4, suppress=True)


# %% [markdown]
# ## 1. Cross-entropy, the careful way
#
# loss_n = logsumexp(z_n) - z_n[target_n], averaged over the positions that
# count. `exp` of a logit of 1000 overflows, so the row maximum is subtracted
# first: logsumexp(z) = max(z) + log(sum(exp(z - max(z)))), exact in algebra,
# finite in floating point.

# %%
z = np.array([[1000.0, 999.0, 990.0]])
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.log(np.exp(z).sum()) - z[0, 0]
print(f"naive log-sum-exp - z_0:   {naive}")
print(f"CrossEntropyLoss:           {N.CrossEntropyLoss()(z, np.array([0])):.6f}")
print(f"by hand, max subtracted:    {np.log(np.exp(z - z.max()).sum()) - (z[0, 0] - z.max()):.6f}")

# %% [markdown]
# Positions whose target is `ignore_index` (-100 by default, as in torch) count
# neither in the sum nor in N, and get a zero gradient. The gradient of the
# mean loss is the softmax minus the one-hot target, divided by the number of
# counted positions: no need to differentiate the log and the exp separately.

# %%
rng = np.random.default_rng(0)
B, T_len, V = 2, 4, 5
logits = rng.standard_normal((B, T_len, V))
targets = rng.integers(0, V, (B, T_len))
targets[0, 1] = targets[1, 3] = -100  # two padding positions
loss_fn = N.CrossEntropyLoss()
loss = loss_fn(logits, targets)
dlogits = loss_fn.backward()

kept = targets != -100
p = np.exp(logits - logits.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
onehot = np.eye(V)[np.where(kept, targets, 0)]
by_hand = (p - onehot) * kept[..., None] / kept.sum()
print(f"loss {loss:.6f} over {kept.sum()} of {kept.size} positions")
print(f"dlogits vs (softmax - onehot) / N: max |diff| {np.abs(dlogits - by_hand).max():.1e}")
print(f"gradient on the ignored positions: {np.abs(dlogits[~kept]).max()}")
print(f"each counted row of dlogits sums to 0: max |row sum| {np.abs(dlogits.sum(-1)).max():.1e}")

logits_t = torch.tensor(logits, requires_grad=True)
loss_t = T.CrossEntropyLoss()(logits_t, torch.from_numpy(targets))
loss_t.backward()
print(
    f"torch: loss diff {abs(loss - loss_t.item()):.1e}, "
    f"dlogits diff {np.abs(dlogits - logits_t.grad.numpy()).max():.1e}"
)

# %% [markdown]
# ## 2. AdamW
#
# Weight decay is applied to matrices only (Linear weights, embeddings);
# vectors (biases, LayerNorm gains and shifts) are left alone. The split is
# by number of dimensions, in `configure_param_groups`:

# %%
cfg_small = {"vocab_size": 65, "block_size": 32, "n_layers": 2, "n_heads": 2, "d_model": 32}
m = N.GPT(N.GPTConfig(**cfg_small), seed=0)
groups = N.configure_param_groups(m, weight_decay=0.1)
names = {id(p): n for n, p in m.named_parameters()}
for g in groups:
    listed = [names[id(p)] for p in g["params"]]
    print(f"weight_decay={g['weight_decay']}: {len(listed)} tensors, e.g. {listed[:4]}")

# %% [markdown]
# The moments start at zero, so after one step m = (1 - beta1) g and
# v = (1 - beta2) g^2 are far too small. Dividing by (1 - beta^t) corrects
# that: the first update is lr * sign(g) for every element, whatever the size
# of g (unless |g| is as small as eps = 1e-8: see the first element below).
# Without the correction it would be lr (1 - beta1) / sqrt(1 - beta2) sign(g):
# 1.0 lr for betas (0.9, 0.99) by coincidence, 3.16 lr for torch's default
# (0.9, 0.999).

# %%
for betas in ((0.9, 0.99), (0.9, 0.999)):
    p = N.Parameter(np.zeros(6))
    p.grad[...] = np.array([1e-6, -1e-3, 0.5, -2.0, 30.0, -1e4])
    opt = N.AdamW([p], lr=0.01, betas=betas, weight_decay=0.0)
    opt.step()
    print(f"betas {betas}: first update / lr = {-p.data / 0.01}")
    print(f"  without bias correction it would be {(1 - betas[0]) / math.sqrt(1 - betas[1]):.2f}")

# %% [markdown]
# ## 3. The learning-rate schedule
#
# Linear warmup from max_lr / (warmup + 1) (not 0: step 0 already moves the
# weights), cosine decay to min_lr at `lr_decay_iters`, then flat: nanoGPT's
# `get_lr`. Both backends call the same function, `cosine_lr(step, ...)`
# (in `numpy_impl/optim.py` and `torch_impl/optim.py`), and set every
# `group["lr"]` to it before each step, so a resumed run needs only its step
# count. For the default `python -m labs train` settings and for the short
# run below:


# %%
STEPS = 150
TRAIN = {
    **DEFAULT_TRAIN_CONFIG,
    "lr": 3e-3,
    "min_lr": 3e-4,
    "warmup_iters": 15,
    "lr_decay_iters": STEPS,
}


def schedule_of(tc: dict, steps: int) -> tuple:
    return tc["lr"], tc["min_lr"], tc["warmup_iters"], tc["lr_decay_iters"], steps


schedules = {
    "labs train defaults (2000 steps)": schedule_of(DEFAULT_TRAIN_CONFIG, 2200),
    f"this lab ({STEPS} steps)": schedule_of(TRAIN, STEPS),
}
fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
for ax, (title, (max_lr, min_lr, warmup, decay, steps)) in zip(
    axes, schedules.items(), strict=True
):
    ours = np.array([N.cosine_lr(s, max_lr, min_lr, warmup, decay) for s in range(steps)])
    theirs = np.array([T.cosine_lr(s, max_lr, min_lr, warmup, decay) for s in range(steps)])
    print(
        f"{title}: lr at step 0 = {ours[0]:.3e} (> 0), peak {ours.max():.1e} at step "
        f"{ours.argmax()}, NumPy vs torch max |diff| {np.abs(ours - theirs).max():.1e}"
    )
    ax.plot(ours, lw=3, alpha=0.5, label="NumPy cosine_lr")
    ax.plot(theirs, "k--", lw=1, label="torch_impl cosine_lr")
    ax.axvline(warmup, color="0.5", lw=0.8, ls=":")
    ax.axvline(decay, color="0.5", lw=0.8, ls=":")
    ax.set(title=title, xlabel="step", ylabel="learning rate")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "lr_schedule.png")

# %% [markdown]
# ## 4. The same run on both backends
#
# A small model on the characters of the corpus, 150 steps of AdamW with
# clipping at 1.0 and the schedule above. The two backends start from the same
# weights (the NumPy model's initial state dict, loaded into both) and see the
# same batches (drawn once from `labs.plumbing.data.BatchSampler`). In float64 their
# losses agree to the last bit or two at every step. In float32 the two sides
# round differently (other summation orders inside the matrix products), and
# the losses differ by float32 rounding: about 1e-7 on Tiny Shakespeare, and
# not growing over the run.

# %%
if __name__ == "__main__":
    text, source = load_text(
        SONNETS,
        "built-in sonnets",
        "using two built-in sonnets instead: the curves below will be those of a much smaller text",
    )
    tokenizer = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tokenizer.encode_array(text), 0.9)
    print(f"corpus: {source}, {len(text):,} characters, vocab {tokenizer.vocab_size}")
    model_config = {**cfg_small, "vocab_size": tokenizer.vocab_size}
    B_train, block = 8, model_config["block_size"]
    sampler = BatchSampler(train_ids, block, B_train, seed=1337)
    batches = [sampler.next() for _ in range(STEPS)]  # the same (x, y) for every run
    val_batches = fixed_eval_batches(val_ids, block, 16, 4, seed=1)

    def train(dtype: str) -> dict:
        runs = {}
        for name in ("numpy", "torch"):
            runs[name] = make_backend(name, model_config, seed=0, train_config=TRAIN, dtype=dtype)
        start = runs["numpy"].state_dict()  # float32 copies of the NumPy initial weights
        for backend in runs.values():
            backend.load_state_dict(start)  # so both start from exactly the same numbers
        logs = {}
        for name, backend in runs.items():
            t0 = time.perf_counter()
            log = {"loss": [], "grad_norm": [], "lr": [], "val": []}
            for step, (x, y) in enumerate(batches):
                if step % 25 == 0:
                    log["val"].append((step, backend.eval_loss(val_batches)))
                stats = backend.train_step(x, y)
                for key in ("loss", "grad_norm", "lr"):
                    log[key].append(stats[key])
            log["val"].append((STEPS, backend.eval_loss(val_batches)))
            logs[name] = log
            print(
                f"  {dtype} {name:>5}: {time.perf_counter() - t0:5.1f} s, loss "
                f"{log['loss'][0]:.4f} -> {log['loss'][-1]:.4f}, "
                f"val {log['val'][-1][1]:.4f}"
            )
        return logs

    results = {dtype: train(dtype) for dtype in ("float64", "float32")}
    diffs = {}
    for dtype, logs in results.items():
        diffs[dtype] = np.abs(np.array(logs["numpy"]["loss"]) - np.array(logs["torch"]["loss"]))
        val_diff = max(
            abs(a[1] - b[1])
            for a, b in zip(logs["numpy"]["val"], logs["torch"]["val"], strict=True)
        )
        print(
            f"{dtype}: max |loss diff| over {STEPS} steps {diffs[dtype].max():.2e} "
            f"({np.sum(diffs[dtype] == 0)} steps bit-identical), "
            f"max |val loss diff| {val_diff:.2e}"
        )
    log64 = results["float64"]
    clipped = np.mean(np.array(log64["numpy"]["grad_norm"]) > TRAIN["grad_clip"])
    print(
        f"gradient norm above the clip threshold ({TRAIN['grad_clip']}) on {clipped:.0%} of steps"
    )
    ln_v = math.log(tokenizer.vocab_size)
    print(f"initial loss {log64['numpy']['loss'][0]:.4f} vs ln(vocab_size) {ln_v:.4f}")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    steps = np.arange(STEPS)
    ax = axes[0]
    ax.plot(steps, log64["numpy"]["loss"], lw=3, alpha=0.5, label="NumPy, train batch")
    ax.plot(steps, log64["torch"]["loss"], "k--", lw=1, label="PyTorch, train batch")
    for name, style in (("numpy", "o"), ("torch", "x")):
        s, v = zip(*log64[name]["val"], strict=True)
        ax.plot(s, v, style, ms=7 if style == "o" else 6, mfc="none", label=f"{name} val")
    ax.axhline(math.log(tokenizer.vocab_size), color="0.6", lw=0.8, ls=":", label="ln(vocab)")
    ax.set(title="float64: the two backends' losses coincide", xlabel="step", ylabel="loss (nats)")
    ax = axes[1]
    for dtype, color in (("float64", "C0"), ("float32", "C1")):
        same = diffs[dtype] == 0
        ax.plot(steps[~same], diffs[dtype][~same], ".", color=color, label=dtype)
        ax.plot(steps[same], np.full(same.sum(), 1e-18), "|", color=color, ms=8)
    ax.set_yscale("log")
    ax.set_ylim(5e-19, 1e-4)
    ax.set(
        title="|loss NumPy - loss PyTorch| per step\n(ticks at the bottom: bit-identical)",
        xlabel="step",
    )
    ax = axes[2]
    ax.plot(steps, log64["numpy"]["grad_norm"], label="gradient norm, before clipping")
    ax.axhline(TRAIN["grad_clip"], color="r", lw=1, ls="--", label="clip threshold")
    ax2 = ax.twinx()
    ax2.plot(steps, log64["numpy"]["lr"], color="0.5", lw=1, label="learning rate (right)")
    ax2.set_ylabel("learning rate", color="0.4")
    ax.set(title="gradient norm and learning rate", xlabel="step")
    (h1, l1), (h2, l2) = ax.get_legend_handles_labels(), ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    save(fig, "training_parity.png")
