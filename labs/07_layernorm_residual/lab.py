# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 07 lab: LayerNorm, residuals, pre-norm and post-norm
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/07_layernorm_residual/lab.py
#
# It prints numbers and writes PNGs into `labs/07_layernorm_residual/figures/`
# (about ten seconds on a laptop CPU, most of it in section 4).
#
# 1. What LayerNorm does to a batch of token vectors, and what eps is for.
# 2. Its backward pass: the two directions the gradient never has.
# 3. A pre-norm block's backward: gradients add up at each residual.
# 4. A post-norm block built here from the same `numpy_impl` parts, checked
#    against PyTorch, then 24-block stacks of each at initialisation: how big
#    the gradient is at each layer.

# %%
import math

from labs.learner.notebook import figure_saver, limit_threads, plot_to_files

save = figure_saver("07_layernorm_residual")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import nn

import numpy_impl as N
import torch_impl as T
from numpy_impl.module import Module

np.set_printoptions(precision=4, suppress=True)


# %% [markdown]
# ## 1. LayerNorm, row by row
#
# Eight token vectors of width C = 64, each with its own offset and spread.
# LayerNorm (weight 1, bias 0) maps every row to mean 0 and standard deviation
# about 1, using that row's own statistics: the biased variance (divide by C)
# and eps = 1e-5 added inside the square root. The last row is almost
# constant (spread 1e-3): there eps is no longer negligible next to the
# variance, and the output's spread stays below 1 instead of blowing the
# rounding noise up to unit size.

# %%
rng = np.random.default_rng(0)
C = 64
offsets = np.array([0.0, 5.0, -3.0, 100.0, 0.0, 0.0, -20.0, 7.0])
spreads = np.array([1.0, 1.0, 0.2, 10.0, 50.0, 3.0, 0.5, 1e-3])
x = offsets[:, None] + spreads[:, None] * rng.standard_normal((8, C))
ln = N.LayerNorm(C, dtype=np.float64)
y = ln(x)

print("row   in: mean      std   out: mean      std   (std = biased, divide by C)")
for i in range(len(x)):
    print(f"{i:>3} {x[i].mean():>12.3f} {x[i].std():>8.3f} {y[i].mean():>12.1e} {y[i].std():>8.4f}")
var_last = x[-1].var()
print(
    f"last row: var = {var_last:.1e}, so std of the output = sqrt(var / (var + eps)) = "
    f"{math.sqrt(var_last / (var_last + 1e-5)):.4f}"
)
# across the batch nothing is normalised: that would be BatchNorm
print(f"one feature across the 8 rows, before: std {x[:, 0].std():.2f}; after: {y[:, 0].std():.2f}")

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 3.8))
for i in range(len(x)):
    ax0.plot(np.full(C, i), x[i], ".", ms=3)
    ax1.plot(np.full(C, i), y[i], ".", ms=3)
ax0.set_yscale("symlog", linthresh=1.0)
ax0.set_title("8 token vectors (C = 64): own mean, own spread")
ax1.set_title("after LayerNorm: each row mean 0, std ~1")
for ax in (ax0, ax1):
    ax.set_xlabel("row (token)")
    ax.grid(alpha=0.3)
ax1.annotate(
    "near-constant row:\neps keeps it small",
    xy=(7, 0),
    xytext=(4.2, -2.8),
    arrowprops={"arrowstyle": "->"},
    fontsize=8,
)
fig.tight_layout()
save(fig, "layernorm_rows.png")

# %% [markdown]
# ## 2. The backward pass
#
# With xhat the normalised row, rstd = 1/sqrt(var + eps) and g = dout * weight,
#
#     dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
#
# Subtracting mean(g) removes the component along the all-ones direction, and
# the last term removes (almost) the component along xhat. LayerNorm's output
# does not change if you shift a row or (nearly) if you scale it, so the
# gradient has no component in those two directions: per row, sum(dx) = 0
# and dot(dx, xhat) ~ 0 (exactly 0 if eps were 0).

# %%
x = rng.standard_normal((4, 6, C)) * 3.0 + 1.0
dout = rng.standard_normal(x.shape)
ln = N.LayerNorm(C, dtype=np.float64)
ln.weight.data[...] = 1.0 + 0.5 * rng.standard_normal(C)  # a gain that is not all ones
y = ln(x)
xhat = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
ln.zero_grad()
dx = ln.backward(dout)
print(f"max |sum over C of dx|      = {np.abs(dx.sum(-1)).max():.1e}")
print(f"max |dot(dx, xhat)| per row = {np.abs((dx * xhat).sum(-1)).max():.1e}")
print(f"(for scale: max |dx| = {np.abs(dx).max():.2f})")

# the same thing through torch's autograd
torch_ln = T.LayerNorm(C, dtype=torch.float64)
torch_ln.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ln.state_dict().items()})
x_t = torch.tensor(x, requires_grad=True)
(torch_ln(x_t) * torch.from_numpy(dout)).sum().backward()
print(f"NumPy vs torch: dx {np.abs(dx - x_t.grad.numpy()).max():.1e}, ", end="")
print(f"dweight {np.abs(ln.weight.grad - torch_ln.weight.grad.numpy()).max():.1e}, ", end="")
print(f"dbias {np.abs(ln.bias.grad - torch_ln.bias.grad.numpy()).max():.1e}")

# %% [markdown]
# ## 3. Gradients add up at each residual
#
# A pre-norm block computes x1 = x + attn(ln1(x)), then out = x1 + ffn(ln2(x1)).
# Going backward, the gradient arriving at `out` goes two ways at the second
# add: straight through (identity) and into the FFN branch; the two results
# add. The same happens at the first add. `Block.backward` is those two lines.

# %%
B, T_len, C, H = 2, 8, 32, 4
block = N.Block(C, H, dtype=np.float64, rng=rng)
x = rng.standard_normal((B, T_len, C))
dout = rng.standard_normal(x.shape)
block(x)
block.zero_grad()
dx = block.backward(dout)

# the same, by hand, one branch at a time
x1 = x + block.attn(block.ln1(x), is_causal=True)
block.ffn(block.ln2(x1))
ffn_branch = block.ln2.backward(block.ffn.backward(dout))
dx1 = dout + ffn_branch  # residual add: identity path + FFN branch
block.attn(block.ln1(x), is_causal=True)
attn_branch = block.ln1.backward(block.attn.backward(dx1))
dx_by_hand = dx1 + attn_branch  # residual add: identity path + attention branch
print(f"|dout| {np.linalg.norm(dout):.3f}")
print(f"|FFN branch| {np.linalg.norm(ffn_branch):.3f}, |attention branch| ", end="")
print(f"{np.linalg.norm(attn_branch):.3f}")
print(f"|dx| {np.linalg.norm(dx):.3f}; Block.backward vs by hand: ", end="")
print(f"{np.abs(dx - dx_by_hand).max():.1e}")

# %% [markdown]
# ## 4. Post-norm, built from the same parts
#
# The original transformer (Vaswani et al. 2017) put the LayerNorm after the
# residual add: x = LN(x + f(x)). Here is that block, written with the
# `numpy_impl` pieces, with its own hand-written backward. Its twin in
# PyTorch is four lines; we check the two agree before using them.


# %%
class PostNormBlock(Module):
    """x = ln1(x + attn(x));  x = ln2(x + ffn(x)).  Same parts as Block, other order."""

    def __init__(self, d_model, n_heads, dtype=np.float64, rng=None):
        self.ln1 = N.LayerNorm(d_model, dtype=dtype)
        self.attn = N.SelfAttention(d_model, n_heads, dtype=dtype, rng=rng)
        self.ln2 = N.LayerNorm(d_model, dtype=dtype)
        self.ffn = N.FeedForward(d_model, dtype=dtype, rng=rng)

    def forward(self, x):
        x = self.ln1(x + self.attn(x, is_causal=True))  # the stream itself is normalised
        return self.ln2(x + self.ffn(x))

    def backward(self, dout):
        d = self.ln2.backward(dout)  # every gradient passes through the LayerNorm first
        d = d + self.ffn.backward(d)  # then splits at the residual add
        d = self.ln1.backward(d)
        return d + self.attn.backward(d)


class TorchPostNormBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.ln1 = T.LayerNorm(d_model, dtype=torch.float64)
        self.attn = T.SelfAttention(d_model, n_heads, dtype=torch.float64)
        self.ln2 = T.LayerNorm(d_model, dtype=torch.float64)
        self.ffn = T.FeedForward(d_model, dtype=torch.float64)

    def forward(self, x):
        x = self.ln1(x + self.attn(x, is_causal=True))
        return self.ln2(x + self.ffn(x))


post, post_t = PostNormBlock(C, H, rng=rng), TorchPostNormBlock(C, H)
post.load_state_dict({k: v.detach().numpy() for k, v in post_t.state_dict().items()})
x_t = torch.tensor(x, requires_grad=True)
(post_t(x_t) * torch.from_numpy(dout)).sum().backward()
out = post(x)
post.zero_grad()
dx = post.backward(dout)
params_t = dict(post_t.named_parameters())
worst_param = max(
    np.abs(p.grad - params_t[n].grad.numpy()).max() for n, p in post.named_parameters()
)
out_err = np.abs(out - post_t(x_t).detach().numpy()).max()
print(f"post-norm block, NumPy vs torch: output {out_err:.1e}", end="")
print(f", dx {np.abs(dx - x_t.grad.numpy()).max():.1e}, worst parameter grad {worst_param:.1e}")

# %% [markdown]
# ### Deep stacks at initialisation
#
# Now 24 blocks of each kind. The pre-norm stack ends with a final LayerNorm
# (GPT's `ln_f`), the post-norm stack already ends with one; then a linear
# head to 64 classes and the cross-entropy against random targets. The
# weights are Xavier-normal, the initialisation Xiong et al. (2020) analyse;
# inputs are N(0, 1). We measure, for every block, the norm of the gradient of
# all its parameters, and the size of the residual stream it outputs.
#
# What to expect (Xiong et al. 2020, sec. 3): in the post-norm stack the
# gradients of the top layers do not shrink as the stack gets deeper, which is
# why post-norm training needs a learning-rate warmup to survive its first
# steps. In the pre-norm stack the residual stream grows with depth (every
# block adds to it and nothing rescales it), the LayerNorm in front of each
# branch divides by that growing size, and the gradients of the upper blocks
# shrink as the stack deepens (Xiong et al. bound them by a 1/sqrt(L) factor;
# in this small experiment they shrink more slowly than that).


# %%
def xavier_(blocks, rng) -> None:
    """Xavier-normal matrices, zero biases, unit LayerNorm gains."""
    for b in blocks:
        for name, p in b.named_parameters():
            if p.ndim == 2:
                fan_out, fan_in = p.shape
                p.data[...] = rng.normal(0.0, math.sqrt(2.0 / (fan_in + fan_out)), p.shape)
            else:
                p.data[...] = 1.0 if name.endswith("weight") and "ln" in name else 0.0


def stack_at_init(kind: str, n_layers: int, seed: int = 1, C=64, H=4, B=4, T_len=16, V=64):
    """Per-block parameter-gradient norms and residual-stream RMS of a fresh stack."""
    rng = np.random.default_rng(seed)
    if kind == "pre":
        blocks = [N.Block(C, H, dtype=np.float64, rng=rng) for _ in range(n_layers)]
    else:
        blocks = [PostNormBlock(C, H, rng=rng) for _ in range(n_layers)]
    xavier_(blocks, rng)
    ln_f = N.LayerNorm(C, dtype=np.float64)
    head = N.Linear(C, V, bias=False, dtype=np.float64, rng=rng)
    head.weight.data[...] = rng.normal(0.0, 1.0 / math.sqrt(C), head.weight.shape)
    loss_fn = N.CrossEntropyLoss()

    h = rng.standard_normal((B, T_len, C))
    rms = []
    for b in blocks:
        h = b(h)
        rms.append(float(np.sqrt(np.mean(h**2))))
    if kind == "pre":
        h = ln_f(h)
    loss = loss_fn(head(h), rng.integers(0, V, (B, T_len)))
    d = head.backward(loss_fn.backward())
    if kind == "pre":
        d = ln_f.backward(d)
    for b in reversed(blocks):
        d = b.backward(d)
    grad_norms = [math.sqrt(sum(float(np.sum(p.grad**2)) for p in b.parameters())) for b in blocks]
    return np.array(grad_norms), np.array(rms), loss


if __name__ == "__main__":
    L = 24
    runs = {kind: stack_at_init(kind, L) for kind in ("pre", "post")}
    for kind, (g, r, loss) in runs.items():
        print(f"{kind}-norm, {L} blocks, loss at init {loss:.3f} (ln 64 = {math.log(64):.3f})")
        print(f"  parameter-gradient norm, blocks 1, 6, 12, 18, 24: {g[[0, 5, 11, 17, 23]]}")
        print(f"  residual-stream RMS after them:                  {r[[0, 5, 11, 17, 23]]}")

    depths = [2, 4, 8, 16, 32]
    top = {kind: [stack_at_init(kind, n)[0][-1] for n in depths] for kind in ("pre", "post")}
    print("gradient norm of the top block's parameters vs depth L:")
    for kind, values in top.items():
        print(
            f"  {kind:<5}",
            "  ".join(f"L={n}: {v:.3f}" for n, v in zip(depths, values, strict=True)),
        )

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    layers = np.arange(1, L + 1)
    for kind, style in (("pre", "o-"), ("post", "s-")):
        g, r, _ = runs[kind]
        axes[0].plot(layers, g, style, ms=3, label=f"{kind}-norm")
        axes[1].plot(layers, r, style, ms=3, label=f"{kind}-norm")
        axes[2].plot(depths, top[kind], style, label=f"{kind}-norm")
    ref = top["pre"][0] * np.sqrt(depths[0] / np.array(depths))
    axes[2].plot(depths, ref, "k:", lw=1, label="~ 1/sqrt(L)")
    axes[0].set(
        xlabel="block",
        ylabel="|grad of the block's parameters|",
        title=f"{L} blocks at init: gradient per block",
    )
    axes[1].set(
        xlabel="block",
        ylabel="RMS of the residual stream",
        title="the stream grows in pre-norm only",
    )
    axes[2].set(
        xlabel="depth L", ylabel="|grad| of the top block", title="top block's gradient vs depth"
    )
    axes[2].set_xscale("log", base=2)
    axes[2].set_xticks(depths, [str(n) for n in depths])
    axes[2].minorticks_off()
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, "pre_vs_post_norm.png")
