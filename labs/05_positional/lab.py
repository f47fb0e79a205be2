# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 05 lab: positional embeddings
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/05_positional/lab.py
#
# It prints numbers and writes PNGs into `labs/05_positional/figures/`.
# Section 3 trains a one-layer model for a few hundred steps with the PyTorch
# twin (several seconds on a laptop CPU); the rest is instant. It never
# downloads: without `$TWINFORMER_DATA` or a cached corpus it trains on a
# short built-in passage and says so.
#
# What we look at:
#
# 1. Attention without positions is permutation-equivariant: shuffle the
#    input, and the output is shuffled the same way, nothing else changes.
# 2. The causal mask alone does not tell a one-layer model the order: two
#    sentences made of the same characters get the same prediction.
# 3. A learned position table: cosine similarity between positions at
#    initialisation and after a little training.
# 4. The table's limits and its backward: `block_size`, and gradients only
#    in the rows that were used.

# %%


from labs.learner.notebook import (
    CORIOLANUS,
    figure_saver,
    limit_threads,
    load_text,
    max_diff,
    plot_to_files,
)

save = figure_saver("05_positional")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T
from labs.plumbing.data import BatchSampler

np.set_printoptions(precision=3, suppress=True, linewidth=100)
rng = np.random.default_rng(0)


# %% [markdown]
# ## 1. Shuffle the tokens, and the output is shuffled the same way
#
# One self-attention layer without a mask: `q, k, v` are Linear maps of
# each row of `x` `(T, d_model)`, then `softmax(q k^T / sqrt(d_k)) v`. Permute
# the rows of `x` with a permutation `pi`: the scores matrix has its rows
# and columns permuted by the same `pi`, the softmax over each row does not
# care about the order of its entries, and the output rows come out permuted
# by `pi`. Nothing in the computation knows which token came first.
# Adding a position vector to each row *before* the layer breaks this: the
# permuted tokens now carry different position vectors.

# %%
T_, d_model = 8, 16
W = {name: N.Linear(d_model, d_model, dtype=np.float64, rng=rng) for name in "qkv"}


def self_attention(x: np.ndarray) -> np.ndarray:
    """(T, d_model) -> (T, d_model): one head, no mask, no positions."""
    q, k, v = (W[name](x)[None, None] for name in "qkv")  # (1, 1, T, d_model) each
    return N.scaled_dot_product_attention(q, k, v)[0][0, 0]


x = rng.standard_normal((T_, d_model))  # T token vectors
pos = N.LearnedPositionalEmbedding(T_, d_model, dtype=np.float64, rng=rng)(T_)  # (T, d_model)
perm = rng.permutation(T_)
print("permutation pi:", perm)
print(
    "no positions:   max |attn(x[pi]) - attn(x)[pi]|           = "
    f"{max_diff(self_attention(x[perm]), self_attention(x)[perm]):.1e}"
)
print(
    "with positions: max |attn(x[pi] + pos) - attn(x + pos)[pi]| = "
    f"{max_diff(self_attention(x[perm] + pos), self_attention(x + pos)[perm]):.1e}"
)

# %% [markdown]
# ## 2. The causal mask is not enough (for one layer)
#
# A GPT's attention is causal, which does break the symmetry a little: the
# query at position `t` sees the keys `0 .. t`. But in *one* layer it sees
# them as a set: the output at `t` depends on the token at `t` and on the
# bag of tokens before it, not on their order. So without position vectors,
# "the man bit the dog " and "the dog bit the man " (the same characters,
# the same last one) must get the same next-character prediction from a
# one-layer model. We check it on the model trained in section 3 with its
# position table zeroed, and with the table in place. (With two or more
# layers the earlier positions' outputs already depend on their own
# prefixes, and some order information leaks through the mask.)
#
# First the training, which section 3 looks at in detail.

# %%
STEPS = 500 if __name__ == "__main__" else 0
text, source = load_text(
    CORIOLANUS + "The man bit the dog, and the dog bit the man.\n",
    "built-in passage (Coriolanus I.1)",
    "training on a built-in passage",
)
tok = N.CharTokenizer.from_text(text)
cfg = {"vocab_size": tok.vocab_size, "block_size": 32, "n_layers": 1, "n_heads": 4, "d_model": 32}
torch.manual_seed(0)
model_t = T.GPT(T.GPTConfig(**cfg))
table_at_init = model_t.pos_emb.weight.detach().numpy().copy()  # GPT-2 init: N(0, 0.02)
opt = T.AdamW(model_t.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
loss_fn = T.CrossEntropyLoss()
batches = BatchSampler(tok.encode_array(text), cfg["block_size"], 16, seed=0)
for step in range(STEPS + 1):
    xb, yb = batches.next()
    loss = loss_fn(model_t(torch.from_numpy(xb)), torch.from_numpy(yb))
    if step % 100 == 0:
        print(f"step {step:4d}  train loss {loss.item():.3f}")
    if step < STEPS:
        opt.zero_grad()
        loss.backward()
        opt.step()
print(f"trained on {source}")

# %%
model_np = N.GPT(N.GPTConfig(**cfg), seed=0).eval()
model_np.load_state_dict({n: p.detach().numpy() for n, p in model_t.state_dict().items()})
a, b = "the man bit the dog ", "the dog bit the man "
assert sorted(a) == sorted(b) and a[-1] == b[-1]
ids = np.array([tok.encode(s) for s in (a, b)])  # (2, T)


def next_char_report(model) -> np.ndarray:
    """Probabilities of the next character after each sentence, printed as a top-3."""
    logits = model(ids)[:, -1]  # (2, vocab_size): the last position of each row
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    for s, row in zip((a, b), p, strict=True):
        top = np.argsort(row)[::-1][:3]
        print(f"  {s!r:<24} -> " + ", ".join(f"{tok.chars[i]!r} {row[i]:.3f}" for i in top))
    return p


print("with the learned position table:")
p_pos = next_char_report(model_np)
table = model_np.pos_emb.weight.data.copy()
model_np.pos_emb.weight.data[...] = 0.0  # no positions at all
print("with the position table zeroed:")
p_nopos = next_char_report(model_np)
model_np.pos_emb.weight.data[...] = table
print(f"max |p(a) - p(b)|: with positions {max_diff(p_pos[0], p_pos[1]):.1e}, ", end="")
print(f"without {max_diff(p_nopos[0], p_nopos[1]):.1e} (float32 rounding)")

print("untrained models, position table zeroed:")
for n_layers in (1, 2):
    untrained = N.GPT(N.GPTConfig(**{**cfg, "n_layers": n_layers}), seed=1).eval()
    untrained.pos_emb.weight.data[...] = 0.0
    logits = untrained(ids)[:, -1]  # (2, vocab_size)
    print(
        f"  {n_layers} layer(s): max |logits(a) - logits(b)| = {max_diff(logits[0], logits[1]):.1e}"
    )
print("(1 layer: float32 rounding only; 2 layers: the order leaks through the mask)")

# %% [markdown]
# ## 3. What a learned position table looks like
#
# `LearnedPositionalEmbedding(block_size, d_model)` is a `(block_size,
# d_model)` table; row `t` is added to the token vector at position `t`.
# At GPT-2's initialisation the rows are independent random vectors, so two
# different positions have cosine similarity near 0. After a few hundred
# steps on text, neighbouring positions have become similar and distant ones
# dissimilar: the model has built itself a sense of "near" out of nothing but
# the gradient.


# %%
def cosine_matrix(table: np.ndarray) -> np.ndarray:
    """(block_size, d_model) -> (block_size, block_size) cosine similarities of the rows."""
    unit = table / np.linalg.norm(table, axis=1, keepdims=True)
    return unit @ unit.T


trained_table = model_t.pos_emb.weight.detach().numpy()
S_init, S_trained = cosine_matrix(table_at_init), cosine_matrix(trained_table)
offsets = np.arange(cfg["block_size"])
by_offset = {
    name: [np.mean(np.diagonal(S, o)) for o in offsets]
    for name, S in (("init", S_init), ("trained", S_trained))
}
print("mean cosine similarity of positions t and t+o:")
for o in (1, 2, 4, 8, 16, 24):
    print(
        f"  o = {o:2d}: at init {by_offset['init'][o]:+.2f}"
        f"   trained {by_offset['trained'][o]:+.2f}"
    )

fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), layout="constrained")
for ax, S, title in (
    (axes[0], S_init, "at initialisation (N(0, 0.02))"),
    (axes[1], S_trained, f"after {STEPS} training steps"),
):
    im = ax.imshow(S, cmap="RdBu_r", vmin=-1, vmax=1)
    ax.set_title(f"cosine similarity of positions,\n{title}", fontsize=10)
    ax.set_xlabel("position")
    ax.set_ylabel("position")
fig.colorbar(im, ax=axes[:2], shrink=0.8)
axes[2].plot(offsets, by_offset["init"], "o-", ms=3, label="at initialisation")
axes[2].plot(offsets, by_offset["trained"], "o-", ms=3, label=f"after {STEPS} steps")
axes[2].axhline(0, color="gray", lw=0.8)
axes[2].set_xlabel("distance |i - j| between positions")
axes[2].set_ylabel("mean cosine similarity")
axes[2].set_title("Near positions end up alike", fontsize=10)
axes[2].legend()
axes[2].grid(True, alpha=0.3)
save(fig, "position_similarity.png")

# %% [markdown]
# ## 4. The table's limit, and its backward
#
# The table has `block_size` rows, so a longer sequence has no position
# vector to use; both twins raise `ValueError` rather than silently using
# fewer rows. The forward is a slice, `weight[start_pos : start_pos + T]`
# `(T, d_model)` (`start_pos` is 0 except when a KV cache continues a
# sequence, chapter 12); the caller broadcasts it over the batch. Its backward
# adds the upstream gradient, already summed over the batch by the caller
# `(T, d_model)`, into those rows of `weight.grad`; the other rows stay untouched.

# %%
block_size, d = 6, 3
pe_np = N.LearnedPositionalEmbedding(block_size, d, dtype=np.float64, rng=rng)
pe_t = T.LearnedPositionalEmbedding(block_size, d, dtype=torch.float64)
pe_t.load_state_dict({n: torch.from_numpy(v) for n, v in pe_np.state_dict().items()})
for name, pe in (("NumPy", pe_np), ("torch", pe_t)):
    try:
        pe(block_size + 1)
    except ValueError as e:
        print(f"{name}: pos_emb({block_size + 1}) -> ValueError: {e}")

T_, B = 4, 5
dout = rng.standard_normal((B, T_, d))  # the gradient reaching tok_emb + pos_emb
out_t = pe_t(T_)
(out_t * torch.from_numpy(dout)).sum().backward()  # autograd sums over the batch itself
out_np = pe_np(T_)  # forward first: backward adds into the rows it read
pe_np.zero_grad()
pe_np.backward(dout.sum(axis=0))  # the GPT's backward does this sum before calling
print(f"forward {out_np.shape}, NumPy vs torch {max_diff(out_np, out_t):.1e}")
print(f"grad NumPy vs torch: {max_diff(pe_np.weight.grad, pe_t.weight.grad):.1e}")
print("weight.grad (rows 4 and 5 were not used):")
print(pe_np.weight.grad)
