# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 03 lab: scaled dot-product attention
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/03_attention/lab.py
#
# It prints numbers and writes PNGs into `labs/03_attention/figures/`.
# A few seconds on a laptop CPU; no corpus needed.
#
# What we look at:
#
# 1. The attention weights of a short sequence, with and without the causal
#    mask.
# 2. Why the scores are divided by sqrt(d_k): the variance of a dot product,
#    and what an unscaled softmax does to its rows and to its gradient.
# 3. The NumPy function and its backward against PyTorch's written-out
#    version and its fused `F.scaled_dot_product_attention`.
# 4. The `rowsum(dout * out)` shortcut in the backward, and a query that may
#    see no key at all.

# %%
import math

from labs.learner.notebook import figure_saver, limit_threads, max_diff, plot_to_files

save = figure_saver("03_attention")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T

np.set_printoptions(precision=3, suppress=True, linewidth=100)
rng = np.random.default_rng(0)


def probs_of(cache) -> np.ndarray:
    """The attention weights P kept in the forward's cache (``cache.probs``)."""
    return cache.probs


# %% [markdown]
# ## 1. Attention weights, with and without the causal mask
#
# Each character of a short string gets a random `d_model` vector; random
# projections turn it into a query, a key and a value of width `d_k`. The
# weights `P = softmax(q k^T / sqrt(d_k))` have one row per query and one
# column per key; each row sums to 1. With `is_causal=True` the scores above
# the diagonal (keys in the query's future) are set to `-inf` before the
# softmax, so their weight is exactly 0 and each row redistributes its mass
# over the keys `0 .. i`.

# %%
text = "to be or not to be"
T_, d_model, d_k = len(text), 16, 8
x = rng.standard_normal((T_, d_model))
W_q, W_k, W_v = (rng.standard_normal((d_model, d_k)) / math.sqrt(d_model) for _ in range(3))
q, k, v = ((x @ W)[None, None] for W in (W_q, W_k, W_v))  # (B=1, n_heads=1, T, d_k)
print(f"x {x.shape} -> q, k, v {q.shape} each")

out_full, cache_full = N.scaled_dot_product_attention(q, k, v)
out_causal, cache_causal = N.scaled_dot_product_attention(q, k, v, is_causal=True)
P_full, P_causal = probs_of(cache_full)[0, 0], probs_of(cache_causal)[0, 0]
print(f"P {P_full.shape}; row sums {P_causal.sum(-1)[:4]}...; out {out_causal.shape}")
print("causal row 3 (query 'b' sees 't', 'o', ' ', 'b' only):", P_causal[3, :6])

fig, axes = plt.subplots(1, 2, figsize=(11, 5))
ticks = [c if c != " " else "\u2423" for c in text]
for ax, P, title in zip(axes, (P_full, P_causal), ("no mask", "is_causal=True"), strict=True):
    im = ax.imshow(P, cmap="viridis", vmin=0, vmax=P_causal.max())
    ax.set_xticks(range(T_), ticks, family="monospace")
    ax.set_yticks(range(T_), ticks, family="monospace")
    ax.set_xlabel("key j (the position attended to)")
    ax.set_ylabel("query i")
    ax.set_title(f"softmax(q k^T / sqrt(d_k)), {title}")
fig.colorbar(im, ax=axes, shrink=0.8, label="attention weight")
save(fig, "attention_weights.png")

# %% [markdown]
# ## 2. Why divide by sqrt(d_k)?
#
# If the `d_k` components of `q` and `k` are independent with mean 0 and
# variance 1, then `q . k` is a sum of `d_k` products of variance 1, so its
# variance is `d_k` (Vaswani et al. 2017, footnote 4). Dividing by `sqrt(d_k)`
# brings it back to 1 whatever the head size.

# %%
print(f"{'d_k':>6}{'var(q.k)':>12}{'var(q.k / sqrt(d_k))':>24}")
for dk in (4, 16, 64, 256, 1024):
    qs, ks = rng.standard_normal((2, 20000, dk))
    dots = np.einsum("nd,nd->n", qs, ks)
    print(f"{dk:>6}{dots.var():>12.1f}{(dots / math.sqrt(dk)).var():>24.3f}")

# %% [markdown]
# Large scores saturate the softmax: the biggest score takes almost all the
# weight, the row's entropy drops toward 0 (one key only), and the softmax's
# gradient, `dS = P * (dP - rowsum(dP * P))`, vanishes, because a one-hot `P`
# makes `dP - rowsum(dP * P)` zero where `P` is 1 and multiplies it by 0
# everywhere else. Below: 64 keys, random unit-variance queries and keys,
# with the default scale and with `scale=1.0`.


# %%
def softmax_backward(P: np.ndarray, dP: np.ndarray) -> np.ndarray:
    """dS = P * (dP - rowsum(dP * P)): the line the attention backward uses."""
    return P * (dP - np.sum(dP * P, axis=-1, keepdims=True))


T_keys, n_queries = 64, 256
d_ks = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
stats = {"scaled": [], "unscaled": []}
for dk in d_ks:
    qs = rng.standard_normal((1, 1, n_queries, dk))
    ks = rng.standard_normal((1, 1, T_keys, dk))
    vs = rng.standard_normal((1, 1, T_keys, dk))
    for name, scale in (("scaled", None), ("unscaled", 1.0)):
        _, cache = N.scaled_dot_product_attention(qs, ks, vs, scale=scale)
        P = probs_of(cache)[0, 0]  # (n_queries, T_keys)
        entropy = -np.sum(P * np.log(np.clip(P, 1e-300, None)), axis=-1).mean()
        dS = softmax_backward(P, rng.standard_normal(P.shape))
        stats[name].append((entropy, P.max(-1).mean(), np.abs(dS).mean()))

print(f"{'d_k':>5} | {'entropy':>16} | {'max weight':>16} | {'mean |dS|':>18}")
print(f"{'':>5} | {'scaled unscaled':>16} | {'scaled unscaled':>16} | {'scaled  unscaled':>18}")
for i, dk in enumerate(d_ks):
    s, u = stats["scaled"][i], stats["unscaled"][i]
    print(
        f"{dk:>5} | {s[0]:>7.2f} {u[0]:>8.2f} | {s[1]:>7.2f} {u[1]:>8.2f} | "
        f"{s[2]:>8.1e} {u[2]:>9.1e}"
    )

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for name, style in (("scaled", "o-"), ("unscaled", "s--")):
    label = "q k^T / sqrt(d_k)" if name == "scaled" else "q k^T (no scaling)"
    ax0.plot(d_ks, [s[0] for s in stats[name]], style, label=label)
    ax1.plot(d_ks, [s[2] for s in stats[name]], style, label=label)
ax0.axhline(math.log(T_keys), color="gray", lw=0.8, ls=":")
ax0.text(d_ks[0], math.log(T_keys) - 0.3, f"uniform over {T_keys} keys: ln {T_keys}", fontsize=8)
ax0.set_ylabel("mean entropy of an attention row (nats)")
ax0.set_title("Unscaled rows collapse onto one key")
ax1.set_yscale("log")
ax1.set_ylabel("mean |dS|, the gradient reaching the scores")
ax1.set_title("...and stop passing gradient")
for ax in (ax0, ax1):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_k")
    ax.grid(True, alpha=0.3)
    ax.legend()
save(fig, "softmax_saturation.png")

# %% [markdown]
# ## 3. NumPy against PyTorch, forward and backward
#
# Same `q, k, v` (float64, shape `(B, n_heads, T, d_k)`), causal. The NumPy
# forward returns `(out, cache)`; `scaled_dot_product_attention_backward(dout,
# cache)` returns `dq, dk, dv`. PyTorch gets its gradients from autograd, by
# backpropagating `(out * dout).sum()` so that `dout` is the upstream gradient.

# %%
B, H, T_, d_k = 2, 3, 7, 5
q, k, v = rng.standard_normal((3, B, H, T_, d_k))
dout = rng.standard_normal((B, H, T_, d_k))
out, cache = N.scaled_dot_product_attention(q, k, v, is_causal=True)
dq, dk, dv = N.scaled_dot_product_attention_backward(dout, cache)
print(f"q, k, v {q.shape} -> scores/P {probs_of(cache).shape} -> out {out.shape}")
for impl in ("explicit", "sdpa"):
    qt, kt, vt = (torch.from_numpy(a).requires_grad_() for a in (q, k, v))
    out_t = T.scaled_dot_product_attention(qt, kt, vt, is_causal=True, impl=impl)
    (out_t * torch.from_numpy(dout)).sum().backward()
    print(
        f"torch {impl:<8}: out {max_diff(out, out_t):.1e}  dq {max_diff(dq, qt.grad):.1e}  "
        f"dk {max_diff(dk, kt.grad):.1e}  dv {max_diff(dv, vt.grad):.1e}"
    )

# A central difference in one coordinate of q, with no torch involved.
h, idx = 1e-6, (1, 2, 4, 3)
qp, qm = q.copy(), q.copy()
qp[idx] += h
qm[idx] -= h
f = lambda qq: np.sum(N.scaled_dot_product_attention(qq, k, v, is_causal=True)[0] * dout)  # noqa: E731
print(f"dq{idx}: backward {dq[idx]:.8f}, central difference {(f(qp) - f(qm)) / (2 * h):.8f}")

# %% [markdown]
# ## 4. The backward's shortcut, and a query with nothing to see
#
# The softmax backward needs `D_i = sum_j dP_ij P_ij` for every query `i`.
# Since `out_i = sum_j P_ij v_j` and `dP_ij = dout_i . v_j`, that sum is
# also `dout_i . out_i`: a product over `d_v` numbers per query instead of
# over `T_k`, and no need to keep `dP` around to compute it.

# %%
P = probs_of(cache)
dP = dout @ np.swapaxes(v, -1, -2)  # (B, H, T, d_v) @ (B, H, d_v, T) -> (B, H, T, T)
D_long = np.sum(dP * P, axis=-1)  # over T_k
D_short = np.sum(dout * out, axis=-1)  # over d_v
print(f"rowsum(dP * P) vs rowsum(dout * out): max diff {max_diff(D_long, D_short):.1e}")

# A boolean mask (True = may attend) whose second query row allows nothing.
mask = np.ones((T_, T_), dtype=bool)
mask[1] = False
out_m, cache_m = N.scaled_dot_product_attention(q, k, v, attn_mask=mask)
grads = N.scaled_dot_product_attention_backward(dout, cache_m)
print("query 1 sees no key: out row =", out_m[0, 0, 1], "(zeros, not NaN)")
print("all gradients finite:", all(np.isfinite(g).all() for g in grads))
