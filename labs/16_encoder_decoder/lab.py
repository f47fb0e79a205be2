# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 16 lab: the encoder-decoder and cross-attention
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root:
#
#     python labs/16_encoder_decoder/lab.py
#
# It prints numbers and writes PNGs into `labs/16_encoder_decoder/figures/`
# (about half a minute on a laptop CPU; no corpus needed).
#
# 1. Cross-attention: queries from one sequence, keys and values from another.
# 2. The decoder's self-attention mask: causal AND target padding.
# 3. Teacher forcing: what the decoder reads and what it must predict.
# 4. A small model learns to reverse digit strings; its cross-attention
#    looks at the source backwards.
# 5. Greedy decoding, the same tokens in both backends.

# %%
import time

from labs.learner.notebook import figure_saver, limit_threads, plot_to_files

save = figure_saver("16_encoder_decoder")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import numpy_impl.masks as NA
import torch_impl as T
from labs.plumbing.tasks import TaskModel
from labs.plumbing.tasks_sequence import BOS, EOS, SequenceTask

np.set_printoptions(precision=2, suppress=True)


# %% [markdown]
# ## 1. Cross-attention
#
# The queries come from the decoder's sequence x `(B, T_q, C)`, the keys and
# values from the encoder's output, the memory `(B, T_k, C)`. The scores are
# `(B, H, T_q, T_k)`: one distribution over the *source* per target position.
# No causal mask here (the whole source is known); only the source's padding.

# %%
rng = np.random.default_rng(0)
C, H = 8, 2
cross = N.SelfAttention(C, H, dtype=np.float64, rng=rng)  # the one attention module
x, memory = rng.normal(size=(2, 3, C)), rng.normal(size=(2, 5, C))  # T_q = 3, T_k = 5
src_mask = np.array([[True] * 5, [True, True, False, False, False]])
y = cross(x, kv=memory, attn_mask=NA.key_padding_attn_mask(src_mask))  # kv: cross-attention
probs = cross._cache.probs
print("x", x.shape, "memory", memory.shape, "-> out", y.shape, "; probabilities", probs.shape)
print("sequence 1, head 0 (its source has 2 real tokens):\n", probs[1, 0])
dx, dmemory = cross.backward(np.ones_like(y))
print("backward returns two gradients:", dx.shape, dmemory.shape)

# %% [markdown]
# ## 2. The decoder's self-attention: causal and padding, one mask
#
# Target position i may read positions j <= i (it must not see the answer it is
# predicting), and never a padded position. `combine_attn_mask` folds the two
# into the one explicit mask the softmax sees.

# %%
tgt_mask = np.array([[True, True, True, True, False, False]])  # 4 real tokens, 2 padding
combined = NA.combine_attn_mask(NA.key_padding_attn_mask(tgt_mask), True, 6, 6)[0, 0]
fig, axes = plt.subplots(1, 3, figsize=(9, 3))
for ax, (title, m) in zip(
    axes,
    [
        ("causal", NA.causal_attn_mask(6, 6)),
        ("key padding", np.broadcast_to(tgt_mask, (6, 6))),
        ("combined (&)", combined),
    ],
    strict=True,
):
    ax.imshow(m, cmap="Greys_r", vmin=0, vmax=1)
    ax.set_title(title)
    ax.set_xlabel("key j")
    ax.set_ylabel("query i")
fig.suptitle("white = may attend")
save(fig, "decoder_masks.png")

# %% [markdown]
# ## 3. Teacher forcing
#
# For the source `3 1 4` the target is `4 1 3`. The decoder reads the target
# shifted right, `<bos> 4 1 3`, and must predict `4 1 3 <eos>`: all positions
# at once, in one forward pass, each seeing only its past. Padding in the
# targets is `-100`, which the loss ignores.

# %%
task = SequenceTask("reverse", min_len=3, max_len=8, n_val=300, seed=0)
b = task.batch([np.array([3, 1, 4]), np.array([2, 7, 1, 8, 2])])
for key in ("src", "tgt_in", "tgt_out"):
    print(f"{key:8s}", b[key].tolist())
print("ids: <pad> 0, <bos> 1, <eos> 2, digit d -> 3 + d")

# %% [markdown]
# ## 4. Learning to reverse
#
# A small model (d_model 32, one encoder and one decoder block) trained for a
# few hundred steps on fresh sequences of 3 to 8 digits, then decoded greedily
# on held-out sequences. The full run (`python -m labs seq2seq`, 2 + 2 blocks,
# d_model 64) reaches more than 99% exact match; see the README.

# %%
model = TaskModel(
    "torch",
    "seq2seq",
    {"src_vocab_size": task.vocab_size, "tgt_vocab_size": task.vocab_size, "block_size": 9,
     "n_encoder_layers": 1, "n_decoder_layers": 1, "n_heads": 2, "d_model": 32},
    lr=3e-3, warmup_iters=30, lr_decay_iters=400, seed=0,
)  # fmt: skip
t0, losses = time.perf_counter(), []
for _ in range(400):
    batch = task.batch(task.train_sequences(64))
    inputs = {"src": batch["src"], "src_mask": batch["src_mask"]}
    inputs |= {"tgt": batch["tgt_in"], "tgt_mask": batch["tgt_mask"]}
    losses.append(model.train_step(inputs, batch["tgt_out"]))
val = task.batch(task.val)
generated = model.generate(val["src"], val["src_mask"], task.max_len + 1, BOS, EOS)
exact = task.exact_match(generated, task.val).mean()
print(
    f"400 steps in {time.perf_counter() - t0:.0f} s: loss {np.mean(losses[:20]):.2f} -> "
    f"{np.mean(losses[-20:]):.3f}; held-out exact match {exact:.1%}"
)
for s, g in zip(task.val[:3], generated[:3], strict=True):
    print(f"  {''.join(map(str, s))} -> {task.decode(g)}")

fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(losses)
ax.set_yscale("log")
ax.set_xlabel("step")
ax.set_ylabel("cross-entropy (teacher-forced)")
save(fig, "loss.png")

# %% [markdown]
# The trained weights, copied into the NumPy twin through the state dict, and
# the cross-attention probabilities of its decoder for one held-out source:
# output position t looks at source position L - 1 - t, an anti-diagonal.
# (Position L predicts `<eos>`.)

# %%
t_model = model.model
np_model = N.Seq2SeqTransformer(
    task.vocab_size, task.vocab_size, block_size=9, n_encoder_layers=1, n_decoder_layers=1,
    n_heads=2, d_model=32, dtype=np.float32,
)  # fmt: skip
np_model.load_state_dict({k: v.detach().numpy() for k, v in t_model.state_dict().items()})
np_model.eval()
s = task.val[0]
one = task.batch([s])
n = len(s)
np_model(one["src"][:, :n], one["tgt_in"][:, : n + 1])
probs = np_model.decoder.blocks[0].cross_attn._cache.probs[0]  # (H, T_q, T_k)
fig, axes = plt.subplots(1, 2, figsize=(8, 3.5))
for h, ax in enumerate(axes):
    ax.imshow(probs[h], cmap="viridis", vmin=0, vmax=1)
    ax.set_xticks(range(n), [str(d) for d in s])
    ax.set_yticks(range(n + 1), ["<bos>", *[str(d) for d in s[::-1]]])
    ax.set_xlabel("source token (key)")
    ax.set_ylabel("decoder input (query)")
    ax.set_title(f"cross-attention, head {h}")
save(fig, "cross_attention.png")

# %% [markdown]
# ## 5. Greedy decoding in both backends
#
# Same weights, same source: the NumPy twin decodes the same tokens as the
# PyTorch model, step by step.

# %%
src = val["src"][:8]
src_mask = val["src_mask"][:8]
out_np = np_model.generate(src, task.max_len + 1, BOS, src_mask, EOS)
t_model.eval()
out_t = t_model.generate(
    torch.from_numpy(src), task.max_len + 1, BOS, torch.from_numpy(src_mask), EOS
)
print("identical greedy tokens in both backends:", np.array_equal(out_np, out_t.numpy()))
for s, g in zip(task.val[:4], out_np[:4], strict=True):
    print(f"  {''.join(map(str, s))} -> {task.decode(g)}")
# the state dicts match name for name: the mirror rule at work
assert list(np_model.state_dict()) == list(
    T.Seq2SeqTransformer(13, 13, 9, 1, 1, 2, 32).state_dict()
)
