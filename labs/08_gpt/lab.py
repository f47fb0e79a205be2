# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 08 lab: the whole GPT
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/08_gpt/lab.py
#
# It prints numbers and writes PNGs into `labs/08_gpt/figures/` (ten to twenty
# seconds on a laptop CPU; building the 16M-parameter example model is most of it).
#
# 1. One forward pass taken apart, with the shape after every step.
# 2. Where the parameters are: the count by component, by formula, and by
#    `num_parameters()`, for the default character model and for the example
#    model of the source material (vocabulary 50257), tied and untied.
# 3. The tied head: one matrix, two gradient contributions.
# 4. GPT-2's initialisation: the loss at step 0 is ln(vocab_size), and the
#    1/sqrt(2 n_layers) scaling keeps the residual stream the same size at any
#    depth.
# 5. The NumPy GPT against the PyTorch GPT.
# 6. A tiny GPT trained for a few seconds: its loss curve, and what its heads
#    attend to.

# %%
import math
import time
from collections import Counter

from labs.learner.notebook import SONNETS, figure_saver, limit_threads, load_text, plot_to_files

save = figure_saver("08_gpt")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T

np.set_printoptions(precision=4, suppress=True)

#: ``python -m labs train``'s model: nanoGPT's CPU "baby GPT" on 65 characters.
DEFAULT = {"vocab_size": 65, "block_size": 64, "n_layers": 4, "n_heads": 4, "d_model": 128}
#: The example model of the source material's chapter on from-scratch transformers (its
#: GPTStyleModel, a decoder-only GPT with nn.MultiheadAttention blocks): GPT-2's BPE
#: vocabulary, a small body.
EXAMPLE = {"vocab_size": 50257, "block_size": 512, "n_layers": 4, "n_heads": 8, "d_model": 256}


# %% [markdown]
# ## 1. One forward pass, step by step
#
# `GPT.forward` is six lines. Here they are one at a time on the default
# model, with the shape after each; then the same ids through
# `model.forward` to show nothing was left out.

# %%
rng = np.random.default_rng(0)
model = N.GPT(N.GPTConfig(**DEFAULT), seed=0, dtype=np.float64)
B, T_len = 2, 16
idx = rng.integers(0, DEFAULT["vocab_size"], (B, T_len))
print(f"idx                      {idx.shape}          (B, T) integer ids")
tok = model.tok_emb(idx)
print(f"tok_emb(idx)             {tok.shape}     (B, T, d_model): one row per id")
pos = model.pos_emb(T_len)
print(f"pos_emb(T)               {pos.shape}        (T, d_model): rows 0..T-1")
x = tok + pos
print(f"tok + pos                {x.shape}     broadcast over the batch")
for i, block in enumerate(model.blocks):
    x = block(x)
    print(f"blocks[{i}]                {x.shape}     (B, T, d_model), residual stream")
x = model.ln_f(x)
print(f"ln_f                     {x.shape}")
logits = model.head(x)
print(f"head                     {logits.shape}      (B, T, vocab_size) logits")
print(f"same as model.forward(idx): max |diff| {np.abs(logits - model(idx)).max():.1e}")

# %% [markdown]
# ## 2. Where the parameters are
#
# By formula, with V = vocab_size, C = d_model, L = n_layers and d_ff = 4C:
#
# | piece | count |
# |---|---|
# | token embedding | V C |
# | position embedding | block_size C |
# | per block: ln1, ln2 | 2 x 2C |
# | per block: qkv_proj, out_proj | 3C^2 + 3C + C^2 + C |
# | per block: fc1, fc2 | 4C^2 + 4C + 4C^2 + C |
# | ln_f | 2C |
# | head | 0 if tied, else V C |
#
# so one block is 12 C^2 + 13 C. We count the same thing by walking
# `named_parameters()` (a tied matrix is listed once) and compare with
# `num_parameters()`. For the example config, torch builds the model on the
# "meta" device: shapes without memory, instant.


# %%
def formula(vocab_size, block_size, n_layers, d_model, tie_weights=True, **_) -> int:
    V, C, L = vocab_size, d_model, n_layers
    return (
        V * C + block_size * C + L * (12 * C * C + 13 * C) + 2 * C + (0 if tie_weights else V * C)
    )


def component(name: str) -> str:
    if name.startswith("tok_emb"):
        return "token embedding"
    if name.startswith("pos_emb"):
        return "position embedding"
    if ".attn." in name:
        return "attention"
    if ".ffn." in name:
        return "feed-forward"
    if name.startswith("head"):
        return "head (untied)"
    return "LayerNorms"  # ln1, ln2, ln_f


def breakdown(named_parameters) -> Counter:
    counts = Counter()
    for name, p in named_parameters:
        counts[component(name)] += math.prod(p.shape)
    return counts


PIECES = [
    "token embedding",
    "position embedding",
    "attention",
    "feed-forward",
    "LayerNorms",
    "head (untied)",
]
cases = {}
for tie in (True, False):
    m = N.GPT(N.GPTConfig(**DEFAULT, tie_weights=tie), seed=0)
    counts = cases[f"default, {'tied' if tie else 'untied'}"] = breakdown(m.named_parameters())
    assert sum(counts.values()) == m.num_parameters() == formula(**DEFAULT, tie_weights=tie)
for tie in (True, False):
    with torch.device("meta"):  # shapes only: no memory, no initialisation cost
        m = T.GPT(T.GPTConfig(**EXAMPLE, tie_weights=tie))
    counts = cases[f"example, {'tied' if tie else 'untied'}"] = breakdown(m.named_parameters())
    assert sum(counts.values()) == m.num_parameters() == formula(**EXAMPLE, tie_weights=tie)

print(f"{'':<16}" + "".join(f"{c:>17}" for c in cases))
for piece in PIECES:
    print(f"{piece:<16}" + "".join(f"{counts[piece]:>17,}" for counts in cases.values()))
print(f"{'total':<16}" + "".join(f"{sum(c.values()):>17,}" for c in cases.values()))

fig, ax = plt.subplots(figsize=(9, 3.2))
labels = list(cases)
left = np.zeros(len(labels))
for piece in PIECES:
    share = np.array([cases[c][piece] / sum(cases[c].values()) for c in labels])
    ax.barh(labels, share, left=left, label=piece)
    left += share
for i, c in enumerate(labels):
    ax.text(1.01, i, f"{sum(cases[c].values()) / 1e6:.2f} M", va="center", fontsize=8)
ax.set_xlim(0, 1.12)
ax.invert_yaxis()
ax.set_xlabel("share of the parameters")
ax.set_title("where the parameters are: 65 characters vs 50257 BPE tokens")
ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
fig.tight_layout()
save(fig, "parameter_breakdown.png")

# %% [markdown]
# The example model's NumPy build is checked too (it allocates 16M float32
# numbers and draws them from N(0, 0.02); a few seconds), and we keep it for
# section 4.

# %%
if __name__ == "__main__":
    example_model = N.GPT(N.GPTConfig(**EXAMPLE), seed=0)
    print(
        f"example config, NumPy num_parameters(): {example_model.num_parameters():,} "
        f"(formula: {formula(**EXAMPLE):,})"
    )

# %% [markdown]
# ## 3. The tied head: one matrix, two gradients
#
# With `tie_weights` the head *is* the token-embedding Parameter. Backward
# passes add into `.grad`, so that matrix collects the head's gradient and the
# embedding's scatter-add. Check: an untied model holding the same numbers in
# two separate matrices gets two gradients whose sum is the tied gradient.

# %%
tiny = {"vocab_size": 11, "block_size": 8, "n_layers": 1, "n_heads": 2, "d_model": 8}
tied = N.GPT(N.GPTConfig(**tiny), seed=1, dtype=np.float64)
untied = N.GPT(N.GPTConfig(**tiny, tie_weights=False), seed=2, dtype=np.float64)
untied.load_state_dict(tied.state_dict())  # state_dict lists the tied matrix under both names
print(f"tied: head.weight is tok_emb.weight -> {tied.head.weight is tied.tok_emb.weight}")
idx = rng.integers(0, tiny["vocab_size"], (3, 8))
dlogits = rng.standard_normal((3, 8, tiny["vocab_size"]))
for m in (tied, untied):
    m(idx)
    m.zero_grad()
    m.backward(dlogits)
summed = untied.tok_emb.weight.grad + untied.head.weight.grad
print(f"|head grad| {np.linalg.norm(untied.head.weight.grad):.3f}, ", end="")
print(f"|embedding grad| {np.linalg.norm(untied.tok_emb.weight.grad):.3f}")
gap = np.abs(tied.tok_emb.weight.grad - summed).max()
print(f"tied grad - (head grad + embedding grad): {gap:.1e}")

# %% [markdown]
# ## 4. GPT-2's initialisation
#
# Every matrix starts N(0, 0.02). With the final LayerNorm giving unit-size
# vectors, the logits start around 0.02 sqrt(d_model) in size: nearly equal,
# so the softmax is nearly uniform and the loss is about ln(vocab_size). A
# loss well above that at step 0 means the model starts out confidently wrong.

# %%
loss_fn = N.CrossEntropyLoss()
idx = rng.integers(0, DEFAULT["vocab_size"], (8, 64))
targets = rng.integers(0, DEFAULT["vocab_size"], (8, 64))
base = N.GPT(N.GPTConfig(**DEFAULT, tie_weights=False), seed=0)
print(f"default model: ln(65) = {math.log(65):.4f}")
for std in (0.02, 0.2, 1.0):
    base.head.weight.data[...] = rng.normal(0.0, std, base.head.weight.shape)
    print(f"  head weights N(0, {std}): initial loss {loss_fn(base(idx), targets):.4f}")

if __name__ == "__main__":
    idx = rng.integers(0, EXAMPLE["vocab_size"], (2, 64))
    targets = rng.integers(0, EXAMPLE["vocab_size"], (2, 64))
    logits = example_model(idx)
    print(
        f"example model: logits {logits.shape}, initial loss {loss_fn(logits, targets):.4f}, "
        f"ln(50257) = {math.log(50257):.4f}"
    )

# %% [markdown]
# The two projections that write into the residual stream (`attn.out_proj`
# and `ffn.fc2`) start with std 0.02 / sqrt(2 n_layers): a stack of L blocks
# makes 2L additions to the stream, and with that scaling their total variance
# does not depend on L. Without it, the stream at the top of the stack grows
# like sqrt(L). Measured on fresh models of growing depth:

# %%
if __name__ == "__main__":
    depths = [1, 2, 4, 8, 16, 32]
    small = {"vocab_size": 65, "block_size": 32, "n_heads": 4, "d_model": 64}
    growth = {"GPT-2 init (scaled)": [], "all N(0, 0.02)": []}
    idx = rng.integers(0, 65, (2, 32))
    for L in depths:
        for label, values in growth.items():
            m = N.GPT(N.GPTConfig(**small, n_layers=L), seed=L)
            if label != "GPT-2 init (scaled)":
                for blk in m.blocks:
                    for p in (blk.attn.out_proj.weight, blk.ffn.fc2.weight):
                        p.data[...] = rng.normal(0.0, 0.02, p.shape)
            h = m.tok_emb(idx) + m.pos_emb(32)
            h0 = h.std()
            for blk in m.blocks:
                h = blk(h)
            values.append(h.std() / h0)
    for label, values in growth.items():
        print(f"{label:<20} std(top of stream) / std(embeddings):", np.array(values))

    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for (label, values), style in zip(growth.items(), ("o-", "s-"), strict=True):
        ax.plot(depths, values, style, label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.minorticks_off()
    ax.set_xlabel("n_layers")
    ax.set_ylabel("std of the stream at the top / at the bottom")
    ax.set_title("residual projections scaled by 1/sqrt(2 n_layers)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, "residual_scaling.png")

# %% [markdown]
# ## 5. The NumPy GPT against the PyTorch GPT
#
# Same weights (the NumPy model's, through the state dict), same ids: the
# logits agree to float64 rounding. The parity suite does this with every
# gradient too, on configurations Hypothesis draws.

# %%
numpy_gpt = N.GPT(N.GPTConfig(**DEFAULT), seed=0, dtype=np.float64)
torch_gpt = T.GPT(T.GPTConfig(**DEFAULT), dtype=torch.float64)
torch_gpt.load_state_dict(
    {k: torch.from_numpy(v.copy()) for k, v in numpy_gpt.state_dict().items()}
)
idx = rng.integers(0, DEFAULT["vocab_size"], (4, 64))
with torch.no_grad():
    logits_t = torch_gpt(torch.from_numpy(idx)).numpy()
print(
    f"logits {logits_t.shape}: max |NumPy - torch| = {np.abs(numpy_gpt(idx) - logits_t).max():.1e}"
)

# %% [markdown]
# ## 6. A tiny GPT, trained: its loss and its attention
#
# A small model (2 blocks of 4 heads, `d_model = 64`, 32 characters of
# context) trains for 300 steps of AdamW on characters: the NumPy GPT and its
# hand-written backward, nothing else, in a few seconds. Its loss starts at
# ln(vocab_size), as section 4 predicts, and falls. Then one line goes
# through the trained model, and each head's attention weights are read from
# its cache: one map per head, queries down, keys across.

# %%
if __name__ == "__main__":
    text, source = load_text(
        SONNETS, "built-in sonnets", "training on two built-in sonnets instead"
    )
    chars = N.CharTokenizer.from_text(text)
    ids = chars.encode_array(text)
    split = int(0.9 * len(ids))
    tiny_cfg = {"block_size": 32, "n_layers": 2, "n_heads": 4, "d_model": 64}
    gpt = N.GPT(N.GPTConfig(vocab_size=chars.vocab_size, **tiny_cfg), seed=0)
    opt = N.AdamW(gpt.parameters(), lr=3e-3, weight_decay=0.0)
    T_ctx, STEPS = tiny_cfg["block_size"], 300

    def batch(data: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """``rows`` random windows of the text, and the same shifted by one: (B, T) each."""
        start = rng.integers(0, len(data) - T_ctx - 1, rows)[:, None] + np.arange(T_ctx)
        return data[start], data[start + 1]

    val_x, val_y = batch(ids[split:], 32)
    train_loss, val_loss = [], []
    t0 = time.perf_counter()
    for step in range(STEPS + 1):
        if step % 25 == 0:
            val_loss.append((step, loss_fn(gpt.eval()(val_x), val_y)))
            gpt.train()
        if step == STEPS:
            break
        x, y = batch(ids[:split], 16)
        gpt.zero_grad()
        train_loss.append(loss_fn(gpt(x), y))
        gpt.backward(loss_fn.backward())
        opt.step()
    print(
        f"{source}: {STEPS} steps in {time.perf_counter() - t0:.1f} s, loss "
        f"{train_loss[0]:.3f} -> {val_loss[-1][1]:.3f} (validation; ln V = "
        f"{math.log(chars.vocab_size):.3f})"
    )

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(train_loss, lw=1, alpha=0.6, label="training batch")
    ax.plot(*zip(*val_loss, strict=True), "o-", label="validation")
    ax.axhline(math.log(chars.vocab_size), color="0.5", ls=":", label="ln(vocab_size)")
    ax.set(xlabel="step", ylabel="loss (nats)", title="The tiny GPT learns in seconds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save(fig, "gpt_loss.png")

    line = "".join(c for c in "To be, or not to be:" if c in chars.chars)
    gpt.eval()(chars.encode_array(line)[None])  # (1, T): fills each attention's cache
    ticks = [{" ": "\u2423", "\n": "\u21b5"}.get(c, c) for c in line]  # visible space, newline
    fig, axes = plt.subplots(
        2, 4, figsize=(11, 6.2), sharex=True, sharey=True, layout="constrained"
    )
    for layer, row in enumerate(axes):
        P = gpt.blocks[layer].attn._cache.probs[0]  # (n_heads, T, T)
        for h, ax in enumerate(row):
            ax.imshow(P[h], cmap="viridis", vmin=0, vmax=1)
            back = np.mean(np.diagonal(P[h], -1))  # the mean weight on the previous character
            ax.set_title(f"block {layer}, head {h}: {back:.2f} back", fontsize=9)
    for ax in axes.flat:  # characters on the outer edges only (the axes are shared)
        ax.set_xticks(range(len(line)), ticks, family="monospace", fontsize=8)
        ax.set_yticks(range(len(line)), ticks, family="monospace", fontsize=8)
        ax.tick_params(length=0)
        ax.label_outer()
    fig.suptitle(
        f"The trained GPT's heads on {line!r}: query down, key across; "
        "'back' = mean weight on the previous character"
    )
    save(fig, "gpt_attention.png")
