# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 02 lab: embeddings and linear maps
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/02_embeddings/lab.py
#
# It prints numbers and writes PNGs into `labs/02_embeddings/figures/`.
# A few seconds on a laptop CPU; no corpus needed.
#
# What we look at:
#
# 1. The embedding lookup, and the fact that it is a one-hot matrix product.
# 2. Its backward, a scatter-add: `np.add.at` against the tempting
#    `dW[idx] += dout`, which silently loses repeated ids.
# 3. `Linear` in PyTorch's layout, one GEMM over all `B*T` rows, against its
#    PyTorch twin.
# 4. Weight tying: the LM head reuses the embedding matrix, and the two
#    backward passes add into one gradient.
# 5. What the rows learn: a bigram model trained for a few seconds, its
#    embedding table seen in 2-D (PCA by SVD).

# %%
import time

from labs.learner.notebook import (
    SONNETS,
    figure_saver,
    limit_threads,
    load_text,
    max_diff,
    plot_to_files,
)

save = figure_saver("02_embeddings")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T

np.set_printoptions(precision=4, suppress=True, linewidth=100)
rng = np.random.default_rng(0)


# %% [markdown]
# ## 1. The lookup
#
# A token id is just a row number. `Embedding(vocab_size, d_model)` holds a
# `(vocab_size, d_model)` table and `forward(idx)` returns `weight[idx]`:
# `(B, T)` ids become `(B, T, d_model)` vectors. The same result comes out of
# a matrix product with one-hot rows, which is the cleanest way to see what
# the backward has to be: the transpose of that product.

# %%
# a vocabulary of the lowercase letters and a little punctuation (not all of it used below)
tok = N.CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz ,:")
vocab_size, d_model = tok.vocab_size, 6
emb = N.Embedding(vocab_size, d_model, dtype=np.float64, rng=rng)
idx = np.array([tok.encode("to be"), tok.encode("or no")])  # (B, T) = (2, 5)
out = emb(idx)
print(f"idx {idx.shape} -> out {out.shape};  weight {emb.weight.shape}")

onehot = np.eye(vocab_size)[idx]  # (B, T, vocab_size)
print(
    f"one-hot {onehot.shape} @ weight {emb.weight.shape} equals the lookup:",
    np.array_equal(onehot @ emb.weight.data, out),
)

# %% [markdown]
# ## 2. The backward is a scatter-add
#
# Row `i` of `dW` must collect the upstream gradient of *every* position whose
# id is `i`. In the phrase below `t` occurs 7 times, so its row must receive 7
# gradient vectors. With `dout` all ones the correct row sum is therefore the
# number of occurrences times `d_model`.
#
# `dW[idx] += dout` looks right and is wrong: NumPy evaluates it as
# `dW[idx] = dW[idx] + dout`, a gather, an add and a *scatter*, and when an
# index repeats the scatter keeps only the last write. `np.add.at` is the
# unbuffered version that really adds once per occurrence.

# %%
phrase = "to be, or not to be: that is the question"
ids = np.array(tok.encode(phrase))  # (T,)
dout = np.ones((len(ids), d_model))  # (T, d_model)

dW_right = np.zeros((vocab_size, d_model))
np.add.at(dW_right, ids, dout)  # one add per occurrence

dW_buggy = np.zeros((vocab_size, d_model))
dW_buggy[ids] += dout  # gather, add, scatter: repeated ids collide

dW_onehot = np.eye(vocab_size)[ids].T @ dout  # (vocab_size, T) @ (T, d_model)

counts = np.bincount(ids, minlength=vocab_size)
print(f"{'char':>6}{'count':>7}{'add.at':>9}{'dW[idx]+=':>11}")
for i in np.argsort(-counts)[:8]:
    print(
        f"{tok.chars[i]!r:>6}{counts[i]:>7}"
        f"{dW_right[i].sum() / d_model:>9.0f}{dW_buggy[i].sum() / d_model:>11.0f}"
    )
print("add.at == one-hot transpose product:", np.allclose(dW_right, dW_onehot))
lost = counts.sum() - dW_buggy.sum() / d_model
print(f"the buggy version lost {lost:.0f} of {counts.sum()} gradient contributions")

# %% [markdown]
# Now with a random `dout`, through the NumPy `Embedding` module and its
# PyTorch twin (same weights), against the per-token loop a test would use as
# an oracle.

# %%
emb_np = N.Embedding(vocab_size, d_model, dtype=np.float64, rng=rng)
emb_t = T.Embedding(vocab_size, d_model, dtype=torch.float64)
with torch.no_grad():
    emb_t.weight.copy_(torch.from_numpy(emb_np.weight.data))

idx2 = ids.reshape(1, -1)  # (B, T) = (1, len(phrase))
out_np = emb_np(idx2)
out_t = emb_t(torch.from_numpy(idx2))
g = rng.standard_normal(out_np.shape)
(out_t * torch.from_numpy(g)).sum().backward()
emb_np.zero_grad()
emb_np.backward(g)

loop = np.zeros((vocab_size, d_model))
for t, i in enumerate(idx2[0]):
    loop[i] += g[0, t]
buggy = np.zeros((vocab_size, d_model))
buggy[idx2.reshape(-1)] += g.reshape(-1, d_model)
print(f"forward           NumPy vs torch: {max_diff(out_np, out_t):.1e}")
print(f"dW (np.add.at)    NumPy vs torch: {max_diff(emb_np.weight.grad, emb_t.weight.grad):.1e}")
print(f"dW (np.add.at)    NumPy vs loop : {max_diff(emb_np.weight.grad, loop):.1e}")
print(f"dW (dW[idx]+=)    buggy vs loop : {max_diff(buggy, loop):.1e}   <- the bug")
unused = counts == 0
print(
    f"rows of the {unused.sum()} unused ids are all zero:", np.all(emb_np.weight.grad[unused] == 0)
)

# %%
used = np.flatnonzero(counts)
labels = [repr(tok.chars[i])[1:-1].replace(" ", "\u2423") for i in used]
fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(13, 4.2), gridspec_kw={"width_ratios": [3, 2]})
x = np.arange(len(used))
ax0.bar(x - 0.2, dW_right[used].sum(1) / d_model, 0.4, label="np.add.at (= occurrences)")
ax0.bar(x + 0.2, dW_buggy[used].sum(1) / d_model, 0.4, label="dW[idx] += dout")
ax0.set_xticks(x, labels, family="monospace")
ax0.set_ylabel("row sum of dW / d_model")
ax0.set_title(f"dout = 1 for every position of {phrase!r}", fontsize=9)
ax0.legend()

lim = np.abs(emb_np.weight.grad).max()
im = ax1.imshow(emb_np.weight.grad, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
ax1.set_yticks(range(vocab_size), [repr(c)[1:-1].replace(" ", "\u2423") for c in tok.chars])
ax1.tick_params(axis="y", labelsize=7)
ax1.set_xlabel("d_model")
ax1.set_title("dW of the Embedding (random dout)\none row per vocabulary entry", fontsize=9)
fig.colorbar(im, ax=ax1)
save(fig, "scatter_add.png")

# %% [markdown]
# ## 3. Linear: PyTorch's layout, one GEMM
#
# `Linear(in_features, out_features)` stores `weight` as
# `(out_features, in_features)`, as `torch.nn.Linear` does, and computes
# `y = x W^T + b`. The NumPy forward folds every leading axis into one:
# `(B, T, C)` becomes `(B*T, C)`, one matrix product, then back to
# `(B, T, out)`. The backward is three products over the same rows:
#
# * `dx = dout W`            `(B*T, out) @ (out, in)`
# * `dW = dout^T x`          `(out, B*T) @ (B*T, in)`, summed over every row
# * `db = sum of dout rows`  `(out,)`

# %%
B, T_, C, n_out = 4, 8, 16, 48
lin_np = N.Linear(C, n_out, dtype=np.float64, rng=rng)
lin_t = T.Linear(C, n_out, dtype=torch.float64)
lin_t.load_state_dict({k: torch.from_numpy(v) for k, v in lin_np.state_dict().items()})
print({k: v.shape for k, v in lin_np.state_dict().items()}, "(no transpose needed)")

x = rng.standard_normal((B, T_, C))
x_t = torch.from_numpy(x).requires_grad_()
y_np, y_t = lin_np(x), lin_t(x_t)
g = rng.standard_normal(y_np.shape)
(y_t * torch.from_numpy(g)).sum().backward()
lin_np.zero_grad()
dx_np = lin_np.backward(g)
print(f"x {x.shape} -> y {y_np.shape}")
print(f"y  NumPy vs torch: {max_diff(y_np, y_t):.1e}")
print(f"dx NumPy vs torch: {max_diff(dx_np, x_t.grad):.1e}")
print(f"dW NumPy vs torch: {max_diff(lin_np.weight.grad, lin_t.weight.grad):.1e}")
print(f"db NumPy vs torch: {max_diff(lin_np.bias.grad, lin_t.bias.grad):.1e}")

# %% [markdown]
# Why fold the rows into one GEMM? Because one big matrix product is what
# BLAS is fast at. The same numbers, token by token, in a Python loop:

# %%
Bb, Tb, Cb, Ob = 16, 64, 128, 512
lin_big = N.Linear(Cb, Ob, rng=rng)  # float32, as in training
xb = rng.standard_normal((Bb, Tb, Cb)).astype(np.float32)


def best_of(fn, repeats=3) -> float:
    """Fastest of a few runs, in milliseconds: the least disturbed by other work."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def per_token_loop() -> np.ndarray:
    y = np.empty((Bb, Tb, Ob), dtype=np.float32)
    for b in range(Bb):
        for t in range(Tb):
            y[b, t] = lin_big.weight.data @ xb[b, t] + lin_big.bias.data  # (out, in) @ (in,)
    return y


y_gemm, y_loop = lin_big(xb), per_token_loop()
ms_gemm, ms_loop = best_of(lambda: lin_big(xb)), best_of(per_token_loop)
print(f"(B*T, C) = ({Bb * Tb}, {Cb}) -> {Ob}:")
print(f"  one GEMM       {ms_gemm:7.2f} ms")
print(f"  per-token loop {ms_loop:7.2f} ms   (max diff {max_diff(y_gemm, y_loop):.1e})")

# %% [markdown]
# ## 4. Weight tying
#
# The LM head maps a `d_model` vector to `vocab_size` logits: a
# `Linear(d_model, vocab_size, bias=False)` whose weight is
# `(vocab_size, d_model)`, the shape of the embedding table. GPT-2 uses the
# same matrix for both (Press & Wolf 2017): `head.weight = tok_emb.weight`,
# one Parameter, two uses.
#
# The smallest model that shows it is embedding -> tied head, a bigram model.
# Backward runs the head first, then the embedding, and *both add* into the
# one `.grad`. If either assigned instead, one contribution would vanish.

# %%
V, Cm = 11, 5
tok_emb = N.Embedding(V, Cm, dtype=np.float64, rng=rng)
head = N.Linear(Cm, V, bias=False, dtype=np.float64, rng=rng)
head.weight = tok_emb.weight  # one Parameter, two uses
print("head.weight is tok_emb.weight:", head.weight is tok_emb.weight)

tok_emb_t = T.Embedding(V, Cm, dtype=torch.float64)
head_t = T.Linear(Cm, V, bias=False, dtype=torch.float64)
head_t.weight = tok_emb_t.weight
with torch.no_grad():
    tok_emb_t.weight.copy_(torch.from_numpy(tok_emb.weight.data))

idx = rng.integers(0, V, (3, 7))
logits = head(tok_emb(idx))  # (B, T) -> (B, T, C) -> (B, T, V)
logits_t = head_t(tok_emb_t(torch.from_numpy(idx)))
dlogits = rng.standard_normal(logits.shape)
(logits_t * torch.from_numpy(dlogits)).sum().backward()

tok_emb.zero_grad()
dx = head.backward(dlogits)  # adds dlogits^T x into the shared .grad
from_head = tok_emb.weight.grad.copy()
tok_emb.backward(dx)  # adds the scatter-add on top
from_emb = tok_emb.weight.grad - from_head
print(f"logits {logits.shape}; NumPy vs torch: {max_diff(logits, logits_t):.1e}")
print(f"|grad from the head|      = {np.linalg.norm(from_head):.3f}")
print(f"|grad from the embedding| = {np.linalg.norm(from_emb):.3f}")
print(f"shared grad NumPy vs torch: {max_diff(tok_emb.weight.grad, tok_emb_t.weight.grad):.1e}")
print(f"if the embedding had assigned: off by {max_diff(from_emb, tok_emb_t.weight.grad):.2f}")

# %% [markdown]
# What tying saves: `vocab_size * d_model` parameters. For our character model
# that is little; for GPT-2's 50257-token vocabulary it is a large share of
# the small model.

# %%
for name, vocab, d, kw in (
    ("this repo's default char GPT", 65, 128, {"n_layers": 4, "n_heads": 4, "block_size": 64}),
    (
        "the source material's example GPT",
        50257,
        256,
        {"n_layers": 4, "n_heads": 8, "block_size": 512},
    ),
):
    sizes = {}
    for tie in (True, False):
        cfg = N.GPTConfig(vocab_size=vocab, d_model=d, tie_weights=tie, **kw)
        sizes[tie] = N.GPT(cfg, seed=0).num_parameters()
    saved = sizes[False] - sizes[True]
    print(
        f"{name:<34} untied {sizes[False]:>11,}  tied {sizes[True]:>11,}"
        f"  saved {saved:>10,} ({saved / sizes[False]:.0%})"
    )

# %% [markdown]
# ## 5. What the rows learn
#
# Trained, the rows of the table stop being noise: characters that do the
# same job in the text end up close together. The smallest model to show it
# is a bigram model, this chapter's two layers alone: `Embedding(V, 16)`, then
# `Linear(16, V)` from each character's vector to the logits of the next
# character. AdamW (chapter 09) trains it for 400 steps, a few seconds.
#
# To see 16-dimensional rows on paper, project them onto their two directions
# of largest variance (principal component analysis): subtract the mean row,
# take the SVD `W - mean = U S V^T`, and plot the first two columns of `U S`.

# %%
text, source = load_text(SONNETS, "built-in sonnets", "training on two built-in sonnets instead")
chars = N.CharTokenizer.from_text(text)
ids = chars.encode_array(text)
emb = N.Embedding(chars.vocab_size, 16, rng=rng)
out = N.Linear(16, chars.vocab_size, rng=rng)
loss_fn = N.CrossEntropyLoss()
opt = N.AdamW(emb.parameters() + out.parameters(), lr=0.05, weight_decay=0.0)
t0 = time.perf_counter()
for step in range(400):
    start = rng.integers(0, len(ids) - 1, 1024)  # 1024 (character, next character) pairs
    emb.zero_grad()
    out.zero_grad()
    loss = loss_fn(out(emb(ids[start])), ids[start + 1])
    emb.backward(out.backward(loss_fn.backward()))
    opt.step()
    if step % 100 == 0 or step == 399:
        print(f"step {step:3d}  loss {loss:.3f}  (ln V = {np.log(chars.vocab_size):.3f})")
print(f"{source}: 400 steps in {time.perf_counter() - t0:.1f} s")

W = emb.weight.data - emb.weight.data.mean(axis=0)  # (V, 16), centred
U, S, Vt = np.linalg.svd(W, full_matrices=False)
xy = U[:, :2] * S[:2]  # (V, 2): each row's coordinates on the two main directions
share = S[:2] ** 2 / np.sum(S**2)
kinds = {  # name -> (members, colour)
    "lowercase vowels": (set("aeiou"), "C3"),
    "lowercase consonants": (set("bcdfghjklmnpqrstvwxyz"), "C0"),
    "capitals": (set("ABCDEFGHIJKLMNOPQRSTUVWXYZ"), "C2"),
}
fig, ax = plt.subplots(figsize=(7.5, 6))
for i, c in enumerate(chars.chars):
    color = next((col for members, col in kinds.values() if c in members), "0.3")
    label = {" ": "\u2423", "\n": "\u21b5"}.get(c, c)  # visible space, newline
    ax.text(*xy[i], label, color=color, ha="center", va="center", family="monospace", fontsize=11)
for kind, (_, color) in kinds.items():
    ax.plot([], [], "s", color=color, label=kind)
ax.plot([], [], "s", color="0.3", label="space, newline, punctuation")
pad = 0.1 * np.ptp(xy, axis=0)
ax.set_xlim(xy[:, 0].min() - pad[0], xy[:, 0].max() + pad[0])
ax.set_ylim(xy[:, 1].min() - pad[1], xy[:, 1].max() + pad[1])
ax.set_xlabel(f"first principal direction ({share[0]:.0%} of the variance)")
ax.set_ylabel(f"second principal direction ({share[1]:.0%})")
ax.set_title("A trained embedding table, its rows projected to 2-D")
ax.legend(fontsize=8, loc="best")
ax.grid(alpha=0.3)
save(fig, "embedding_pca.png")
