# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 13 lab: sinusoids and rotary embeddings (RoPE)
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     python labs/13_positional_rope/lab.py
#
# It prints numbers and writes PNGs into `labs/13_positional_rope/figures/`
# (a few seconds; no corpus, no training).
#
# 1. RoPE's angles are the sinusoidal encoding's: the same clocks.
# 2. One plane rotated over the positions: fast and slow planes.
# 3. The score of query i and key j depends on i - j only; long-term decay.
# 4. The two layouts, and the permutation that converts weights between them.
# 5. The backward is the rotation back.
# 6. Grouped-query attention: the KV cache against n_kv_heads.

# %%


from labs.learner.notebook import figure_saver, limit_threads, max_diff, plot_to_files

save = figure_saver("13_positional_rope")  # save(fig, "name.png") into figures/
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
# ## 1. The same clocks as the sinusoidal encoding
#
# Vaswani et al. (2017, sec. 3.5): PE[p, 2i] = sin(p theta_i), PE[p, 2i+1] =
# cos(p theta_i), theta_i = 10000^(-2i/d). Written out here from the paper's
# formula, then compared with RoPE's tables for the same width: RoPE turns
# the plane i of a query at position p by exactly the angle p theta_i whose
# sine and cosine the sinusoidal table *adds* to the input.

# %%
T_len, d = 64, 16
p = np.arange(T_len)[:, None]
i = np.arange(d // 2)[None, :]
pe = np.zeros((T_len, d))
pe[:, 0::2] = np.sin(p / 10000 ** (2 * i / d))
pe[:, 1::2] = np.cos(p / 10000 ** (2 * i / d))
cos, sin = N.rope_cos_sin(T_len, d, dtype=np.float64)
print(f"sinusoidal table vs RoPE's sin / cos tables: {max_diff(pe[:, 0::2], sin):.1e}, ", end="")
print(f"{max_diff(pe[:, 1::2], cos):.1e}")
print("angular speed of each plane (rad per position):", 10000 ** (-2 * i[0] / d))

# %% [markdown]
# ## 2. One plane over the positions
#
# The pair (1, 0) in planes 0, 1 and 3 of a head with d_k = 16, at positions
# 0 .. 63. Plane 0 turns one radian per position (ten turns in 64 steps),
# plane 3 about 0.03: fast planes tell neighbours apart, slow ones still
# change over long distances.

# %%
x = np.zeros((1, 1, T_len, d))
x[..., 0::2] = 1.0  # (a, b) = (1, 0) in every interleaved plane
rot, _ = N.RotaryEmbedding(d, "interleaved")(x, x)
fig, axes = plt.subplots(1, 3, figsize=(12, 4.2))
for ax, plane in zip(axes, (0, 1, 3), strict=True):
    a, b = rot[0, 0, :, 2 * plane], rot[0, 0, :, 2 * plane + 1]
    ax.plot(a, b, "-", lw=0.6, color="0.7")
    sc = ax.scatter(a, b, c=np.arange(T_len), cmap="viridis", s=12)
    ax.set_aspect("equal")
    ax.set_xlim(-1.15, 1.15)
    ax.set_ylim(-1.15, 1.15)
    theta = 10000 ** (-2 * plane / d)
    ax.set_title(f"plane {plane}\n{theta:.3g} rad per position")
fig.colorbar(sc, ax=axes, label="position", shrink=0.8)
save(fig, "rope_planes.png")

# %% [markdown]
# ## 3. Scores depend on i - j only
#
# One query vector q and one key vector k, the same at every position. With
# RoPE, score[i, j] = (R_i q) . (R_j k) = q . R_(j-i) k: every diagonal of the
# score matrix is constant. Adding absolute vectors instead (random, like an
# untrained learned table) gives no such structure. Then RoFormer's long-term
# decay (sec. 3.4.3): for q = k = all ones, the score is sum_i 2 cos((j-i)
# theta_i), which falls off, with ripples, as |i - j| grows.

# %%
d = 32
q1, k1 = rng.standard_normal(d), rng.standard_normal(d)
Q = np.tile(q1, (1, 1, T_len, 1))
K = np.tile(k1, (1, 1, T_len, 1))
qr, kr = N.RotaryEmbedding(d, "half")(Q, K)
scores_rope = qr[0, 0] @ kr[0, 0].T  # (T, T)
spread = max(np.ptp(np.diagonal(scores_rope, o)) for o in range(-T_len + 1, T_len))
print(f"RoPE: largest spread along a diagonal of the {T_len}x{T_len} scores: {spread:.1e}")
absolute = 0.5 * rng.standard_normal((T_len, d))
scores_abs = (q1 + absolute) @ (k1 + absolute).T
spread_abs = max(np.ptp(np.diagonal(scores_abs, o)) for o in range(-T_len + 1, T_len - 1))
print(f"absolute vectors added instead: largest spread {spread_abs:.2f}")

ones = np.ones((1, 1, 256, d))
qo, ko = N.RotaryEmbedding(d, "half")(ones, ones)
decay = qo[0, 0, 0] @ ko[0, 0].T  # score of position 0 with 0 .. 255
print("RoFormer decay, q = k = ones, d = 32: score at distance 0, 4, 16, 64, 255:", end=" ")
print(decay[[0, 4, 16, 64, 255]].round(2))

fig, axes = plt.subplots(1, 3, figsize=(14, 4))
for ax, s, title in (
    (axes[0], scores_rope, "RoPE: score[i, j] depends on i - j"),
    (axes[1], scores_abs, "absolute vectors added: no such structure"),
):
    im = ax.imshow(s, cmap="RdBu_r")
    ax.set(title=title, xlabel="key position j", ylabel="query position i")
    fig.colorbar(im, ax=ax, shrink=0.8)
axes[2].plot(decay)
axes[2].set(title="q = k = ones: score vs distance", xlabel="|i - j|", ylabel="score")
axes[2].grid(alpha=0.3)
fig.tight_layout()
save(fig, "rope_scores.png")

# %% [markdown]
# ## 4. Two layouts, one model
#
# The vector (1, 2, 3, 4) at position 1: "interleaved" turns the planes
# (x0, x1) and (x2, x3), "half" the planes (x0, x2) and (x1, x3). Different
# numbers; but an attention layer with the "interleaved" layout, its q and k
# rows permuted by `permute_qkv_for_rope`, computes with "half" exactly what
# it computed before.

# %%
v = np.array([[[[1.0, 2.0, 3.0, 4.0]]]])
for layout in ("interleaved", "half"):
    print(
        f"{layout:>11}: (1, 2, 3, 4) at position 1 ->",
        N.RotaryEmbedding(4, layout)(v, v, 1)[0][0, 0, 0],
    )
print("rope_permutation(8, 'interleaved', 'half') =", N.rope_permutation(8, "interleaved", "half"))

C, H = 24, 2
x = rng.standard_normal((2, 10, C))
inter = N.SelfAttention(C, H, rope="interleaved", dtype=np.float64, rng=rng)
sd = inter.state_dict()
half = N.SelfAttention(C, H, rope="half", dtype=np.float64)
half.load_state_dict(sd)  # the same weights, the other layout: another model
reference = inter(x, is_causal=True)
print(
    "same weights, other layout:     max |difference| "
    f"{max_diff(half(x, is_causal=True), reference):.3f}"
)
converted = dict(sd)
for kind in ("weight", "bias"):
    converted[f"qkv_proj.{kind}"] = N.permute_qkv_for_rope(
        sd[f"qkv_proj.{kind}"], H, "interleaved", "half"
    )
half.load_state_dict(converted)
print(
    "q, k rows permuted, other layout: max |difference| "
    f"{max_diff(half(x, is_causal=True), reference):.1e}"
)

# %% [markdown]
# ## 5. The backward rotates back
#
# R_p is orthogonal, so the gradient of the unrotated q is R_p^T dq' = R_(-p) dq':
# the forward with -sin. NumPy's backward against PyTorch's autograd, at start_pos 7.

# %%
q = rng.standard_normal((2, 3, 5, 8))
k = rng.standard_normal((2, 3, 5, 8))
dq_out, dk_out = rng.standard_normal(q.shape), rng.standard_normal(k.shape)
rope = N.RotaryEmbedding(8, "half")
rope(q, k, 7)
dq, dk = rope.backward(dq_out, dk_out)
q_t = torch.tensor(q, requires_grad=True)
k_t = torch.tensor(k, requires_grad=True)
qr_t, kr_t = T.RotaryEmbedding(8, "half")(q_t, k_t, 7)
((qr_t * torch.from_numpy(dq_out)).sum() + (kr_t * torch.from_numpy(dk_out)).sum()).backward()
print(f"dq: NumPy vs autograd {max_diff(dq, q_t.grad):.1e}; dk: {max_diff(dk, k_t.grad):.1e}")
cos, sin = N.rope_cos_sin(5, 8, start_pos=7, dtype=np.float64)
there_and_back = N.apply_rope(N.apply_rope(q, cos, sin, "half"), cos, -sin, "half")
print(f"rotate by +angle, then by -angle: back to q within {max_diff(there_and_back, q):.1e}")

# %% [markdown]
# ## 6. Grouped-query attention: a smaller KV cache
#
# H = 8 query heads, 4 layers, d_k = 32; 256 positions cached, float32. The cache
# holds the H_kv key/value heads only: H / H_kv times less memory, measured.

# %%
ids = rng.integers(0, 65, (1, 256))
kv_heads, kib = [8, 4, 2, 1], []
for h_kv in kv_heads:
    config = N.GPTConfig(65, 256, n_heads=8, d_model=256, n_kv_heads=h_kv, pos_emb="rope")
    model = N.GPT(config, seed=0)
    cache = model.new_kv_cache()
    model(ids, kv_cache=cache)  # fills (1, H_kv, 256, 32) per layer, k and v
    kib.append(sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers) / 1024)
    print(f"n_kv_heads {h_kv}: KV cache {kib[-1]:,.0f} KiB ({kib[0] / kib[-1]:.0f}x smaller)")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.bar(["8 (MHA)", "4 (GQA)", "2 (GQA)", "1 (MQA)"], kib)
ax.set(xlabel="n_kv_heads (of 8 heads)", ylabel="KV cache (KiB)",
       title="KV cache at 256 positions, NumPy twin")  # fmt: skip
fig.tight_layout()
save(fig, "kv_cache_heads.png")
