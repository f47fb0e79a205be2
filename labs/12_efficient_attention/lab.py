# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 12 lab: efficient attention and the KV cache
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/12_efficient_attention/lab.py
#
# It prints numbers and writes PNGs into `labs/12_efficient_attention/figures/`
# (15 to 40 seconds on a laptop CPU). No corpus needed: the models here have
# random weights, which is all that speed and equality need.
#
# 1. The online softmax on one row, block by block.
# 2. Tiled (flash) attention is explicit attention, forward and backward.
# 3. Peak memory against T: T^2 for explicit, T for tiled.
# 4. The KV cache: time per generated token, and the same tokens.
# 5. PyTorch's CPU kernels, forced one at a time.

# %%
import time
import tracemalloc

from labs.learner.notebook import figure_saver, limit_threads, plot_to_files

save = figure_saver("12_efficient_attention")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T
from numpy_impl.module import no_grad
from numpy_impl.sampling import generate

np.set_printoptions(precision=4, suppress=True)


# %% [markdown]
# ## 1. The online softmax on one row
#
# Twelve scores arrive in blocks of four. After each block we know the
# running maximum m, the sum l of exp(s - m) over what we have seen, and the
# weighted sum a of the values. When a block brings a larger maximum, the old
# l and a are multiplied by alpha = exp(m_old - m_new) < 1: they were measured
# against the old maximum. At the end a / l is exactly the softmax average.

# %%
rng = np.random.default_rng(0)
s = rng.normal(0, 2, 12)  # one query's scores
v = rng.normal(0, 1, 12)  # one value per key (a 1-d value keeps the printout short)
m, l, a = -np.inf, 0.0, 0.0
history = []
for b0 in range(0, 12, 4):
    block = s[b0 : b0 + 4]
    m_new = max(m, block.max())
    alpha = np.exp(m - m_new)  # exp(-inf) = 0 on the first block
    p = np.exp(block - m_new)
    l = alpha * l + p.sum()
    a = alpha * a + p @ v[b0 : b0 + 4]
    print(f"block {b0 // 4}: max {m_new:6.3f}  alpha {alpha:.4f}  l {l:8.4f}  a/l {a / l:+.6f}")
    history.append((b0 + 4, m_new, l, a / l))
    m = m_new
exact = np.exp(s - s.max()) @ v / np.exp(s - s.max()).sum()
print(f"online a / l = {a / l:+.15f}\nsoftmax(s) v = {exact:+.15f}")

fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
seen = [h[0] for h in history]
axes[0].plot(range(1, 13), s, "o", color="0.6", label="scores")
axes[0].step(seen, [h[1] for h in history], where="post", label="running max m")
axes[1].plot(seen, [h[2] for h in history], "o-", label="l (rescaled sum)")
axes[2].plot(seen, [h[3] for h in history], "o-", label="a / l so far")
axes[2].axhline(exact, color="k", ls=":", label="softmax(s) v")
for ax, title in zip(axes, ("scores and m", "l", "output so far"), strict=True):
    ax.set(title=title, xlabel="keys seen")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "online_softmax.png")

# %% [markdown]
# ## 2. Tiled attention is explicit attention
#
# `flash_attention` with tiles that do not divide T (5 queries x 7 keys per
# tile for T = 30), causal; then with a key-padding mask. Forward and
# backward agree with chapter 03's explicit attention to rounding. Only the
# log-sum-exp per row (B, H, T, 1) is kept for the backward, not the
# (T, T) probabilities.

# %%
B, H, T_, d_k = 2, 3, 30, 8
q, k, v = (rng.normal(size=(B, H, T_, d_k)) for _ in range(3))
dout = rng.normal(size=(B, H, T_, d_k))
padding = (np.arange(T_)[None, :] < np.array([30, 17])[:, None])[:, None, None, :]  # (B,1,1,T)
for what, kw in (("causal", {"is_causal": True}), ("key padding", {"attn_mask": padding})):
    out, cache = N.flash_attention(q, k, v, tile_q=5, tile_k=7, **kw)
    ref, ref_cache = N.scaled_dot_product_attention(q, k, v, **kw)
    grads = N.flash_attention_backward(dout, cache)
    ref_grads = N.scaled_dot_product_attention_backward(dout, ref_cache)
    worst = max(np.abs(g - r).max() for g, r in zip(grads, ref_grads, strict=True))
    print(
        f"{what:<12} max |out - explicit| {np.abs(out - ref).max():.1e}, "
        f"max grad difference {worst:.1e}; saved lse {cache[4].shape}"
    )


# %% [markdown]
# ## 3. Memory against T
#
# `tracemalloc` sees every NumPy buffer: its peak during one forward +
# backward, minus what was allocated before, is the extra memory attention
# needs. The explicit version holds (T, T) arrays, so its line has slope 2 on
# a log-log plot; the tiled one holds a few (T, d_k) arrays and one tile,
# slope 1.


# %%
def peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def fwd_bwd(attention, backward, q, k, v, dout, **kw):
    def run():
        out, cache = attention(q, k, v, is_causal=True, **kw)
        backward(dout, cache)

    return run


lengths = [128, 256, 512, 1024]
explicit_pair = (N.scaled_dot_product_attention, N.scaled_dot_product_attention_backward)
flash_pair = (N.flash_attention, N.flash_attention_backward)
peaks = {"explicit": [], "flash (tiles 64)": []}
for T_ in lengths:
    q, k, v, dout = (rng.normal(size=(1, 1, T_, 16)) for _ in range(4))
    peaks["explicit"].append(peak_bytes(fwd_bwd(*explicit_pair, q, k, v, dout)))
    tiles = {"tile_q": 64, "tile_k": 64}
    peaks["flash (tiles 64)"].append(peak_bytes(fwd_bwd(*flash_pair, q, k, v, dout, **tiles)))
for T_, e, f in zip(lengths, *peaks.values(), strict=True):
    print(f"T = {T_:>5}: explicit {e / 2**20:7.2f} MiB, flash {f / 2**20:6.3f} MiB", end="")
    print(f", ratio {f / e:.3f}")
fig, ax = plt.subplots(figsize=(5, 3.5))
for name, values in peaks.items():
    ax.loglog(lengths, np.array(values) / 2**20, "o-", label=name)
ax.set(xlabel="T", ylabel="peak extra memory (MiB)", title="forward + backward, d_k = 16")
ax.grid(alpha=0.3, which="both")
ax.legend()
save(fig, "memory.png")

# %% [markdown]
# ## 4. The KV cache
#
# A GPT with block_size 128 (random weights) generates 110 tokens after a
# 16-token prompt, greedily, with and without the cache. Without it, step t
# runs the model on 16 + t tokens; with it, on one. The tokens are the same.

# %%
config = N.GPTConfig(vocab_size=65, block_size=128, n_layers=2, n_heads=4, d_model=64)
model = N.GPT(config, seed=0)
prompt = rng.integers(0, 65, (1, 16))
n_new = 110


def timed_steps(use_cache: bool):
    """Generate one token at a time, timing each step (generate with max_new_tokens=1 would
    rebuild the cache every call, so the loop lives here)."""
    from numpy_impl.sampling import _cached_next_logits

    idx, cache, times = prompt.copy(), model.new_kv_cache(), []
    model.eval()
    with no_grad():  # as generate: no layer keeps its activations for a backward
        for _ in range(n_new):
            t0 = time.perf_counter()
            if use_cache:
                logits = _cached_next_logits(model, idx, cache)
            else:
                logits = model.forward(idx[:, -config.block_size :])[:, -1, :]
            times.append(time.perf_counter() - t0)
            idx = np.concatenate([idx, logits.argmax(axis=-1)[:, None]], axis=1)
    return idx, np.array(times)


tokens_off, times_off = timed_steps(False)
tokens_on, times_on = timed_steps(True)
same = np.array_equal(tokens_off, tokens_on)
print(
    f"no cache {n_new / times_off.sum():6.0f} tok/s, cache {n_new / times_on.sum():6.0f} tok/s "
    f"({times_off.sum() / times_on.sum():.1f}x); same tokens: {same}"
)
check = generate(model, prompt, 30, temperature=0.0, use_cache=True)
print(f"generate(use_cache=True) agrees: {np.array_equal(check, tokens_on[:, : 16 + 30])}")
fig, ax = plt.subplots(figsize=(6, 3.5))
steps = np.arange(16, 16 + n_new)
series = ((times_off, "no cache: the whole sequence"), (times_on, "KV cache: the newest token"))
for times, label in series:
    line = ax.plot(steps, times * 1e3, ".", ms=2, alpha=0.4)[0]
    # a running median: on a busy machine single steps can be delayed tenfold
    smooth = [np.median(times[max(0, i - 7) : i + 8]) for i in range(len(times))]
    ax.plot(steps, np.array(smooth) * 1e3, color=line.get_color(), label=label)
ax.set_yscale("log")
ax.set(xlabel="sequence length", ylabel="ms per generated token", title="decoding step time")
ax.grid(alpha=0.3)
ax.legend()
save(fig, "decode_time.png")

# %% [markdown]
# Past block_size the window slides: every token moves to a new position, so
# the cached keys are stale and the cache is refilled from the whole window,
# every step. The cached and uncached logits still agree.

# %%
small = N.GPT(N.GPTConfig(vocab_size=65, block_size=24, n_layers=2, n_heads=2, d_model=32), seed=1)
a = generate(small, prompt, 30, temperature=0.0, use_cache=False)
b = generate(small, prompt, 30, temperature=0.0, use_cache=True)
print(f"block_size 24, 46 tokens: cached and uncached tokens equal: {np.array_equal(a, b)}")

# %% [markdown]
# ## 5. PyTorch's kernels
#
# `F.scaled_dot_product_attention` picks a kernel; `use_sdpa_backend` forces
# one. On CPU there are two, "math" (the unfused reference) and "flash" (a
# tiled kernel); on CUDA also "efficient" and "cudnn". All must give the
# explicit formula's result; here in float64, against NumPy-flash too.

# %%
q, k, v = (rng.normal(size=(2, 4, 100, 16)) for _ in range(3))
numpy_flash, _ = N.flash_attention(q, k, v, is_causal=True, tile_q=32, tile_k=32)
qt, kt, vt = (torch.from_numpy(x) for x in (q, k, v))
explicit = T.scaled_dot_product_attention(qt, kt, vt, is_causal=True, impl="explicit")
for backend in ("auto", "math", "flash"):
    with T.use_sdpa_backend(backend):
        fused = T.flash_attention(qt, kt, vt, is_causal=True)
    print(
        f"sdpa backend {backend:<5}: max |fused - explicit| "
        f"{(fused - explicit).abs().max().item():.1e}, "
        f"max |fused - NumPy flash| {np.abs(fused.numpy() - numpy_flash).max():.1e}"
    )
