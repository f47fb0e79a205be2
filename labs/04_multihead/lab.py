# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 04 lab: multi-head causal self-attention
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/04_multihead/lab.py
#
# It prints numbers and writes PNGs into `labs/04_multihead/figures/`. Section
# 5 trains a one-layer model for a few hundred steps with the PyTorch twin
# (several seconds on a laptop CPU); everything else is instant. It never
# downloads: without `$TWINFORMER_DATA` or a cached corpus it trains on a
# short built-in passage and says so.
#
# What we look at:
#
# 1. Every shape of `SelfAttention.forward`, step by step, rebuilt by
#    hand and checked against the module.
# 2. One combined `(3C, C)` QKV projection is three `(C, C)` projections, and
#    each head is a slice of `d_k` columns of each.
# 3. The reshape that looks equally plausible and is wrong.
# 4. The NumPy module against its PyTorch twin, output and every gradient.
# 5. What the heads of a briefly trained model attend to.

# %%


from labs.learner.notebook import figure_saver, limit_threads, load_text, max_diff, plot_to_files

save = figure_saver("04_multihead")  # save(fig, "name.png") into figures/
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
# ## 1. The shapes, step by step
#
# `x` is `(B, T, C)` with `C = d_model`; `n_heads = H` heads of width
# `d_k = C / H`. Below, the causal forward of `numpy_impl.SelfAttention` is
# redone line by line with its own weights, printing each shape, and the
# result is compared with the module's output.

# %%
B, T_, C, H = 2, 6, 12, 3
d_k = C // H
attn = N.SelfAttention(C, H, dtype=np.float64, rng=rng)
x = rng.standard_normal((B, T_, C))

qkv = attn.qkv_proj(x)
print(f"x                {x.shape}   (B, T, C)")
print(f"qkv_proj.weight  {attn.qkv_proj.weight.shape}     (3C, C)")
print(f"qkv_proj(x)      {qkv.shape}   (B, T, 3C)")
q_, k_, v_ = np.split(qkv, 3, axis=-1)
print(f"split in three   {q_.shape}    (B, T, C) each: q, k, v")
cut = q_.reshape(B, T_, H, d_k)
print(f"reshape          {cut.shape} (B, T, H, d_k)")
q, k, v = (N.split_heads(a, H) for a in (q_, k_, v_))
print(f"split_heads      {q.shape} (B, H, T, d_k): the head axis moved before T")
y, _ = N.scaled_dot_product_attention(q, k, v, is_causal=True)
print(f"attention        {y.shape} (B, H, T, d_k), weights (B, H, T, T)")
y = y.transpose(0, 2, 1, 3)
print(f"transpose        {y.shape} (B, T, H, d_k)")
y = y.reshape(B, T_, C)
print(f"reshape          {y.shape}      (B, T, C): heads side by side (merge_heads)")
out = attn.out_proj(y)
print(f"out_proj         {out.shape}      (B, T, C)")
print(f"same as attn(x, is_causal=True): max diff {max_diff(out, attn(x, is_causal=True)):.1e}")

# %% [markdown]
# ## 2. One QKV projection is three projections, and a head is a slice
#
# The rows of `qkv_proj.weight` `(3C, C)` are stacked in the order q, k, v:
# rows `0 .. C-1` make the queries, `C .. 2C-1` the keys, `2C .. 3C-1` the
# values. Cutting the weight (and bias) into three `(C, C)` blocks gives three
# ordinary Linear layers with the same outputs. Within each, head `h` owns
# the columns `h*d_k .. (h+1)*d_k - 1`: that is what the reshape to
# `(..., H, d_k)` means.

# %%
W, b = attn.qkv_proj.weight.data, attn.qkv_proj.bias.data
separate = {}
for i, name in enumerate("qkv"):
    lin = N.Linear(C, C, dtype=np.float64)
    lin.load_state_dict({"weight": W[i * C : (i + 1) * C], "bias": b[i * C : (i + 1) * C]})
    separate[name] = lin(x)  # (B, T, C)
for i, (name, combined) in enumerate(zip("qkv", (q, k, v), strict=True)):
    sep = separate[name]  # (B, T, C)
    per_head = np.stack([sep[..., h * d_k : (h + 1) * d_k] for h in range(H)], axis=1)
    print(
        f"{name}: Linear(C, C) vs features {('0..C-1', 'C..2C-1', '2C..3C-1')[i]} of qkv: "
        f"{max_diff(sep, qkv[..., i * C : (i + 1) * C]):.1e};  "
        f"column slices per head vs the reshape: {max_diff(per_head, combined):.1e}"
    )

# %% [markdown]
# ## 3. A plausible reshape that is wrong
#
# `qkv.reshape(B, T, H, 3, d_k)` has the same number of elements and the same
# rank, and nothing raises. But it reads the `3C` features as if they were
# grouped by head first: "head 0's q, k, v, then head 1's q, k, v", which is
# not how the weight is laid out. Each "query" then mixes pieces of the real
# q, k and v. Only a comparison with a reference notices.

# %%
q_bad, k_bad, v_bad = qkv.reshape(B, T_, H, 3, d_k).transpose(3, 0, 2, 1, 4)
y_bad, _ = N.scaled_dot_product_attention(q_bad, k_bad, v_bad, is_causal=True)
out_bad = attn.out_proj(y_bad.transpose(0, 2, 1, 3).reshape(B, T_, C))
print(f"shapes agree: {out_bad.shape == out.shape};  max diff from the right output:")
print(f"  (B, T, H, 3, d_k) reshape        {max_diff(out_bad, out):.2f}")
y_noT = N.scaled_dot_product_attention(q, k, v, is_causal=True)[0].reshape(B, T_, C)
print(f"  heads merged without transpose   {max_diff(attn.out_proj(y_noT), out):.2f}")

# %% [markdown]
# ## 4. NumPy against PyTorch
#
# The state dict of the NumPy module loads into the PyTorch twin unchanged
# (`qkv_proj.weight (3C, C)`, `qkv_proj.bias (3C,)`, `out_proj.weight (C, C)`,
# `out_proj.bias (C,)`). The PyTorch module can run the written-out attention
# or the fused `F.scaled_dot_product_attention`; both must match.

# %%
dout = rng.standard_normal((B, T_, C))
attn.zero_grad()
out = attn(x, is_causal=True)
dx = attn.backward(dout)
print({name: p.shape for name, p in attn.named_parameters()})
for impl in ("explicit", "sdpa"):
    attn_t = T.SelfAttention(C, H, attn_impl=impl, dtype=torch.float64)
    attn_t.load_state_dict({n: torch.from_numpy(a) for n, a in attn.state_dict().items()})
    x_t = torch.from_numpy(x).requires_grad_()
    out_t = attn_t(x_t, is_causal=True)
    (out_t * torch.from_numpy(dout)).sum().backward()
    grads_t = dict(attn_t.named_parameters())
    worst = max(max_diff(p.grad, grads_t[n].grad) for n, p in attn.named_parameters())
    print(
        f"torch {impl:<8}: out {max_diff(out, out_t):.1e}  dx {max_diff(dx, x_t.grad):.1e}  "
        f"worst parameter gradient {worst:.1e}"
    )

# %% [markdown]
# ## 5. What do the heads look at?
#
# Random weights give blurry, meaningless patterns. So we train the smallest
# useful model, one block of 4 heads with `d_model = 32`, on characters for a
# few hundred steps with the PyTorch twin, move its weights into the NumPy
# `GPT` (same state-dict names, no conversion), run a line of text through
# the NumPy model and read each head's attention weights from the attention
# module's cache. Expect heads that differ: some weight the current
# character, some the one or two before it. (When the file is imported
# rather than run, `STEPS` is 0 and the model stays untrained.)

# %%
ROMEO = (
    "ROMEO:\nBut soft! What light through yonder window breaks?\n"
    "It is the east, and Juliet is the sun.\n"
    "Arise, fair sun, and kill the envious moon,\n"
    "Who is already sick and pale with grief,\n"
    "That thou her maid art far more fair than she.\n"
)
STEPS = 400 if __name__ == "__main__" else 0
text, source = load_text(
    ROMEO, "built-in passage (Romeo and Juliet II.2)", "training on a built-in passage"
)
tok = N.CharTokenizer.from_text(text)
cfg = {"vocab_size": tok.vocab_size, "block_size": 32, "n_layers": 1, "n_heads": 4, "d_model": 32}
torch.manual_seed(0)
model_t = T.GPT(T.GPTConfig(**cfg))
opt = T.AdamW(model_t.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
loss_fn = T.CrossEntropyLoss()
batches = BatchSampler(tok.encode_array(text), cfg["block_size"], 16, seed=0)
for step in range(STEPS + 1):
    xb, yb = batches.next()
    loss = loss_fn(model_t(torch.from_numpy(xb)), torch.from_numpy(yb))
    if step % 100 == 0:
        print(
            f"step {step:4d}  train loss {loss.item():.3f}"
            f"  (uniform guessing: ln vocab_size = {np.log(tok.vocab_size):.3f})"
        )
    if step < STEPS:
        opt.zero_grad()
        loss.backward()
        opt.step()

model_np = N.GPT(N.GPTConfig(**cfg), seed=0).eval()
model_np.load_state_dict({n: p.detach().numpy() for n, p in model_t.state_dict().items()})
line = "ROMEO:\nBut soft! What light"
line = "".join(c for c in line if c in tok.chars)[: cfg["block_size"]]
ids = np.array([tok.encode(line)])  # (1, T)
logits_np = model_np(ids)
with torch.no_grad():
    logits_t = model_t(torch.from_numpy(ids))
print(
    f"{source}: logits {logits_np.shape}, "
    f"NumPy vs torch max diff {max_diff(logits_np, logits_t):.1e}"
)
P = model_np.blocks[0].attn._cache.probs[0]  # (n_heads, T, T): the cached attention weights

fig, axes = plt.subplots(2, 2, figsize=(11, 11), layout="constrained")
axes = axes.ravel()
ticks = [{" ": "\u2423", "\n": "\u21b5"}.get(c, c) for c in line]  # visible space, newline
for h, ax in enumerate(axes):
    ax.imshow(P[h], cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(len(line)), ticks, family="monospace", fontsize=8)
    ax.set_yticks(range(len(line)), ticks, family="monospace", fontsize=8)
    own = np.mean(np.diagonal(P[h]))
    prev = np.mean(np.diagonal(P[h], -1))
    ax.set_title(f"head {h}: self {own:.2f}, previous {prev:.2f}", fontsize=10)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
fig.suptitle(f"Attention weights per head after {STEPS} training steps (block 0, one line)")
save(fig, "heads.png")
for h in range(cfg["n_heads"]):
    by_offset = [np.mean(np.diagonal(P[h], -o)) for o in range(5)]
    print(f"head {h}: mean weight on the key 0, 1, 2, 3, 4 places back: {np.round(by_offset, 2)}")
