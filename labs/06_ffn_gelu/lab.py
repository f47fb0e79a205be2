# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 06 lab: the feed-forward network and GELU
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/06_ffn_gelu/lab.py
#
# It prints numbers and writes PNGs into `labs/06_ffn_gelu/figures/`.
# Everything here takes a second or two on a laptop CPU.
#
# What we look at:
#
# 1. GELU, exact and tanh-approximated, next to ReLU: the curves and their
#    derivatives, straight out of `numpy_impl.GELU.forward/backward`.
# 2. How far apart the two GELU forms are (not far), and the sigmoid identity
#    the NumPy tanh form is computed with.
# 3. The feed-forward network: the shape at every step, its parameter count,
#    and the property that makes it "position-wise": each token is processed
#    on its own.
# 4. The NumPy FFN against its PyTorch twin, output and every gradient.

# %%


from labs.learner.notebook import figure_saver, limit_threads, plot_to_files

save = figure_saver("06_ffn_gelu")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T

np.set_printoptions(precision=4, suppress=True)


def gelu_and_grad(form: str, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU(x) and dGELU/dx from the NumPy module: forward, then backward with dout = 1."""
    act = N.GELU(form)
    y = act.forward(x)
    dy = act.backward(np.ones_like(x))  # dout = 1 turns the vector-Jacobian product into dy/dx
    return y, dy


# %% [markdown]
# ## 1. GELU next to ReLU
#
# GELU(x) = x Phi(x): the input times the probability that a standard normal
# variable is below it (Hendrycks & Gimpel 2016). Far to the right Phi is 1 and
# GELU is the identity; far to the left Phi is 0 and GELU is 0; in between it
# is a smooth ReLU with a small negative dip. The derivative is the one the
# backward pass computes; ReLU's jumps from 0 to 1 at the origin.

# %%
x = np.linspace(-4.0, 4.0, 801)
y_exact, dy_exact = gelu_and_grad("none", x)
y_tanh, dy_tanh = gelu_and_grad("tanh", x)
y_relu, dy_relu = np.maximum(x, 0.0), (x > 0).astype(float)

fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(10, 4))
ax0.plot(x, y_relu, color="0.6", lw=1.5, label="ReLU")
ax0.plot(x, y_exact, lw=2.5, label="GELU exact (erf)")
ax0.plot(x, y_tanh, "--", lw=1.5, label="GELU tanh approximation")
ax0.set_title("GELU(x) = x Phi(x)")
ax1.plot(x, dy_relu, color="0.6", lw=1.5, label="ReLU'")
ax1.plot(x, dy_exact, lw=2.5, label="exact: Phi(x) + x phi(x)")
ax1.plot(x, dy_tanh, "--", lw=1.5, label="tanh form")
ax1.set_title("derivative (NumPy backward with dout = 1)")
for ax in (ax0, ax1):
    ax.axhline(0, color="k", lw=0.5)
    ax.axvline(0, color="k", lw=0.5)
    ax.set_xlabel("x")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "gelu_curves.png")

x_fine = np.linspace(-1.0, -0.5, 50_001)
y_fine, _ = gelu_and_grad("none", x_fine)
i_min = int(np.argmin(y_fine))
print(f"GELU's minimum: {y_fine[i_min]:.4f} at x = {x_fine[i_min]:.4f} (ReLU never goes below 0)")
print(f"GELU'(x) exceeds 1 just right of the origin: max derivative {dy_exact.max():.4f}")

# %% [markdown]
# ## 2. How far apart are the two forms?
#
# The tanh form replaces Phi(x) by 0.5 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
# GPT-2 was trained with it, so loading GPT-2 weights means using it; a
# model trained from scratch may use either. The difference is even in x
# (both forms satisfy GELU(x) - GELU(-x) = x), so we look at its size.

# %%
xs = np.linspace(-10.0, 10.0, 200_001)  # float64, step 1e-4
ye, dye = gelu_and_grad("none", xs)
yt, dyt = gelu_and_grad("tanh", xs)
diff, ddiff = np.abs(ye - yt), np.abs(dye - dyt)
print(f"max |GELU_exact - GELU_tanh|   = {diff.max():.3e} at |x| = {abs(xs[diff.argmax()]):.3f}")
print(f"max |GELU'_exact - GELU'_tanh| = {ddiff.max():.3e} at |x| = {abs(xs[ddiff.argmax()]):.3f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(xs, ye - yt, label="GELU exact - tanh form")
ax.plot(xs, dye - dyt, label="derivative: exact - tanh form")
ax.set_xlim(-6, 6)
ax.set_xlabel("x")
ax.set_title("exact minus tanh form: values < 5e-4 apart, slopes < 9e-4")
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
fig.tight_layout()
save(fig, "gelu_difference.png")

# %% [markdown]
# The NumPy tanh form never calls `np.tanh`. It uses the identity
# 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + exp(-2u)): one `exp`, and a
# derivative that reuses the sigmoid s it already has, ds/du = 2 s (1 - s).
# Far to the left exp(-2u) overflows to inf and s becomes exactly 0, which
# is the right limit; the forward silences that one warning on purpose.

# %%
u = np.linspace(-20.0, 20.0, 4001)
identity_gap = np.abs(0.5 * (1.0 + np.tanh(u)) - 1.0 / (1.0 + np.exp(-2.0 * u))).max()
print(f"max |0.5 (1 + tanh u) - sigmoid(2u)| over u in [-20, 20]: {identity_gap:.1e}")

# the same numbers from torch's own GELU (autograd for the derivative)
for form in ("none", "tanh"):
    xt = torch.tensor(xs, requires_grad=True)
    T.GELU(form)(xt).sum().backward()
    ours, dours = (ye, dye) if form == "none" else (yt, dyt)
    err = np.abs(ours - T.GELU(form)(xt).detach().numpy()).max()
    derr = np.abs(dours - xt.grad.numpy()).max()
    print(f"GELU({form!r}): NumPy vs torch, max |y diff| {err:.1e}, max |dy/dx diff| {derr:.1e}")

# %% [markdown]
# ## 3. The feed-forward network, shape by shape
#
# FFN(x) = fc2(GELU(fc1(x))), with fc1: C -> d_ff and fc2: d_ff -> C, and
# d_ff = 4 C by default (Vaswani et al. 2017). Every Linear flattens the
# leading axes into one (B*T, ...) matrix: one matrix product per layer.

# %%
B, T_len, C = 2, 5, 8
rng = np.random.default_rng(0)
ffn = N.FeedForward(C, dtype=np.float64, rng=rng)
d_ff = ffn.fc1.out_features
xb = rng.standard_normal((B, T_len, C))
h_pre = ffn.fc1(xb)
h = ffn.act(h_pre)
out = ffn.fc2(h)
print(f"x            {xb.shape}   (B, T, C)")
print(f"fc1(x)       {h_pre.shape}  (B, T, d_ff), d_ff = 4 C = {d_ff}")
print(f"GELU(fc1(x)) {h.shape}  (B, T, d_ff)")
print(f"fc2(...)     {out.shape}   (B, T, C)")
n_params = ffn.num_parameters()
print(
    f"parameters: fc1 {C}x{d_ff} + {d_ff}, fc2 {d_ff}x{C} + {C} = 8 C^2 + 5 C = "
    f"{8 * C * C + 5 * C} (num_parameters(): {n_params})"
)
C_gpt = 128  # the default labs GPT: the FFN holds 2/3 of each block's weights
per_block = 12 * C_gpt * C_gpt + 13 * C_gpt
print(
    f"at d_model = {C_gpt}: FFN {8 * C_gpt**2 + 5 * C_gpt:,} of {per_block:,} parameters per "
    f"block ({(8 * C_gpt**2 + 5 * C_gpt) / per_block:.0%})"
)

# %% [markdown]
# **Position-wise.** Attention mixes tokens; the FFN does not. Change the
# input at one position and only that position's output moves. This is the
# sense in which attention communicates between tokens and the FFN computes on
# each token alone.

# %%
t_changed = 3
x2 = xb.copy()
x2[:, t_changed] += rng.standard_normal((B, C))
moved = np.abs(ffn(x2) - ffn(xb)).max(axis=(0, 2))  # (T,)
print(f"changed the input at position {t_changed}; max |output change| per position:")
print("  FFN:      ", moved)
attn = N.SelfAttention(C, 2, dtype=np.float64, rng=rng)
moved_attn = np.abs(attn(x2, is_causal=True) - attn(xb, is_causal=True)).max(axis=(0, 2))
print("  attention:", moved_attn, "(causal: positions after 3 see the change too)")

# %% [markdown]
# ## 4. The NumPy FFN against PyTorch
#
# The same weights (copied through the state dict, no transposes: both sides
# store a Linear weight as (out_features, in_features)), the same input, a
# random upstream gradient. The parity suite does this on random shapes; here
# it is once, by hand.

# %%
torch_ffn = T.FeedForward(C, dtype=torch.float64)
numpy_ffn = N.FeedForward(C, dtype=np.float64)
numpy_ffn.load_state_dict({k: v.detach().numpy() for k, v in torch_ffn.state_dict().items()})

x_np = rng.standard_normal((B, T_len, C))
dout = rng.standard_normal((B, T_len, C))
x_t = torch.tensor(x_np, requires_grad=True)
out_t = torch_ffn(x_t)
(out_t * torch.from_numpy(dout)).sum().backward()  # pushes dout back through autograd

out_np = numpy_ffn(x_np)
numpy_ffn.zero_grad()
dx_np = numpy_ffn.backward(dout)

print(f"output       max |diff| {np.abs(out_np - out_t.detach().numpy()).max():.1e}")
print(f"dx           max |diff| {np.abs(dx_np - x_t.grad.numpy()).max():.1e}")
torch_params = dict(torch_ffn.named_parameters())
for name, p in numpy_ffn.named_parameters():
    err = np.abs(p.grad - torch_params[name].grad.numpy()).max()
    print(f"d{name:<11} max |diff| {err:.1e}")
assert np.abs(dx_np - x_t.grad.numpy()).max() < 1e-12, "the NumPy FFN disagrees with torch"
