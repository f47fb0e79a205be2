# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 15 lab: encoder models and classification
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/15_encoder_classifier/lab.py
#
# It prints numbers and writes PNGs into `labs/15_encoder_classifier/figures/`
# (about half a minute on a laptop CPU). The corpus comes from
# `$TWINFORMER_DATA` or the cache; without either, a small built-in play.
#
# 1. A padded batch: the key-padding mask and what attention does with it.
# 2. The three mask conventions, converted.
# 3. Mean pooling over real tokens only.
# 4. The synthetic step of the tutorial "Getting Started with Transformers in PyTorch"
#    (whose classifier this chapter builds) in both backends: the first loss is ln 2.
# 5. Who says this speech? The task, and a short training run.

# %%
import math
import time
from collections import Counter

from labs.learner.notebook import figure_saver, limit_threads, load_text, plot_to_files

save = figure_saver("15_encoder_classifier")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import numpy_impl.masks as NA
import torch_impl as T
import torch_impl.masks as TA
from labs.plumbing.tasks import TaskModel
from labs.plumbing.tasks_speakers import (
    WordTokenizer,
    encode_padded,
    parse_speeches,
    random_crops,
    speaker_dataset,
)

np.set_printoptions(precision=3, suppress=True)

FALLBACK_PLAY = "\n".join(
    f"{name}:\n{line}\n"
    for name, line in [
        ("ROMEO", "But, soft! what light through yonder window breaks?"),
        ("JULIET", "O Romeo, Romeo! wherefore art thou Romeo?"),
        ("ROMEO", "Shall I hear more, or shall I speak at this?"),
        ("JULIET", "What's in a name? that which we call a rose"),
        ("MERCUTIO", "A plague o' both your houses!"),
        ("ROMEO", "It is the east, and Juliet is the sun."),
        ("JULIET", "Good night, good night! parting is such sweet sorrow"),
        ("MERCUTIO", "Nay, I'll conjure too. Romeo! humours! madman!"),
    ]
    * 12
)


# %% [markdown]
# ## 1. A padded batch
#
# Three "sentences" of lengths 5, 3 and 0 share a batch of length T = 5. The
# token mask is True for real tokens; `key_padding_attn_mask` turns it into a
# `(B, 1, 1, T)` attention mask that hides padded *keys* from every query.
# Padded *queries* still compute something (their rows are ignored later, by
# the pooling); a sequence of nothing but padding has no key at all, so each of
# its queries gets probability 0 everywhere and an output of 0, not NaN.

# %%
rng = np.random.default_rng(0)
B, T_, H, d_k = 3, 5, 1, 4
token_mask = np.arange(T_)[None, :] < np.array([5, 3, 0])[:, None]  # (B, T)
attn_mask = NA.key_padding_attn_mask(token_mask)  # (B, 1, 1, T)
print("token_mask:\n", token_mask.astype(int), "\nattn_mask shape:", attn_mask.shape)
q, k, v = (rng.normal(size=(B, H, T_, d_k)) for _ in range(3))
out, cache = N.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
probs = cache.probs  # the cache holds the attention probabilities (B, H, T, T)
print("row sums of the probabilities (1 = a distribution, 0 = nothing to attend to):")
print(probs.sum(-1)[:, 0])
print("output of the all-padding sequence:", out[2, 0, 0], "(zeros, not NaN)")
out_t = T.scaled_dot_product_attention(
    *map(torch.from_numpy, (q, k, v)), torch.from_numpy(attn_mask)
)
print("torch (fused kernel) agrees:", np.allclose(out, out_t.numpy()))

fig, axes = plt.subplots(1, 3, figsize=(10, 3.2))
for b, ax in enumerate(axes):
    ax.imshow(probs[b, 0], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"sequence {b}: {token_mask[b].sum()} real tokens")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
fig.suptitle("attention probabilities with a key-padding mask (padded keys get 0)")
save(fig, "padding_attention.png")

# %% [markdown]
# ## 2. Three conventions, one meaning
#
# The same causal-plus-padding pattern written three ways. `to_attn_mask`
# converts each into twinformer's (bool, True = may attend); docs/masks.md has
# the table.

# %%
T_ = 4
mha_mask = torch.triu(torch.ones(T_, T_), diagonal=1).bool()  # nn.MultiheadAttention: True = masked
sdpa_mask = torch.ones(T_, T_).tril().bool()  # F.scaled_dot_product_attention: True = attend
keep_mask = torch.ones(T_, T_).tril()  # the tutorial's / Annotated Transformer's: 1 = keep
for name, mask, convention in (
    ("nn.MultiheadAttention", mha_mask, "masked"),
    ("F.scaled_dot_product_attention", sdpa_mask, "attend"),
    ("0/1 keep-mask", keep_mask, "keep"),
):
    converted = TA.to_attn_mask(mask, convention)
    print(f"{name:32s} -> same as twinformer's causal mask: "
          f"{torch.equal(converted, TA.causal_attn_mask(T_, T_))}")  # fmt: skip
both = NA.combine_attn_mask(
    NA.key_padding_attn_mask(np.array([[True, True, True, False]])), True, 4, 4
)
print("padding AND causal, one explicit mask (the last key is padding):\n", both[0, 0].astype(int))

# %% [markdown]
# ## 3. Mean pooling over real tokens
#
# The tutorial pools with `x.mean(dim=1)`, which counts padding as tokens: the same
# sentence gets a different vector in a longer batch. `MeanPool` divides by the
# number of real tokens instead (and an all-padding row pools to zeros).

# %%
x = rng.normal(size=(1, 3, 4))  # one sentence of 3 tokens, d_model = 4
padded = np.concatenate([x, rng.normal(size=(1, 2, 4))], axis=1)  # + 2 padding positions
mask = np.array([[True, True, True, False, False]])
print("plain mean, alone vs padded:  ", x.mean(1)[0], padded.mean(1)[0])
print("masked mean, alone vs padded: ", N.MeanPool()(x)[0], N.MeanPool()(padded, mask)[0])

# %% [markdown]
# ## 4. The tutorial's synthetic step, in both backends
#
# Vocabulary 10000, 2 classes, batch 8, length 32, d_model 128, 4 heads, 2
# layers. The head's weights start small (N(0, 0.02)), so the logits start
# near 0, the softmax near uniform, and the first loss near ln 2 = 0.6931.

# %%
tokens = rng.integers(0, 10000, (8, 32))
labels = rng.integers(0, 2, 8)
cfg = {"d_model": 128, "n_heads": 4, "n_layers": 2}
np_model = N.TransformerClassifier(10000, 2, **cfg, seed=0)
loss_np = N.CrossEntropyLoss()(np_model(tokens), labels)
torch.manual_seed(0)
t_model = T.TransformerClassifier(10000, 2, **cfg)
loss_t = torch.nn.functional.cross_entropy(
    t_model(torch.from_numpy(tokens)), torch.from_numpy(labels)
)
print(f"initial loss: numpy {loss_np:.4f}, torch {loss_t.item():.4f}, ln 2 = {math.log(2):.4f}")
print(f"parameters: {np_model.num_parameters():,} (the embedding: {10000 * 128:,})")

# %% [markdown]
# ## 5. Who says this speech?
#
# The speeches of the most frequent speakers of Tiny Shakespeare, split by
# speech (stratified) into training and held-out sets. Below: how many
# speeches each speaker has, and a short training run (the full run is
# `python -m labs classify --backend torch`, a few minutes; its result is in
# the chapter's README).

# %%
text, source = load_text(FALLBACK_PLAY, "built-in play", "using a built-in play")
speeches = parse_speeches(text)
counts = Counter(name for name, _ in speeches).most_common(10)
print(f"{len(speeches)} speeches in {source}; the most frequent speakers: {counts[:6]}")
fig, ax = plt.subplots(figsize=(7, 3))
ax.barh([n for n, _ in counts][::-1], [c for _, c in counts][::-1])
ax.set_xlabel("speeches")
ax.set_title("the ten most frequent speakers")
save(fig, "speakers.png")

n_speakers = min(4, len({n for n, _ in speeches}))
data = speaker_dataset(text, n_speakers, val_fraction=0.2, seed=0)
majority, baseline = data.majority_baseline()
tok = WordTokenizer.from_texts(data.train_texts, max_vocab=2000)  # training speeches only
print("a speech as word ids:", tok.encode_array(data.train_texts[0])[:12], "...")
val_idx, val_mask = encode_padded(tok, data.val_texts, 64)
model = TaskModel(
    "numpy",
    "classifier",
    {"vocab_size": tok.vocab_size, "num_classes": n_speakers, "block_size": 64,
     "n_layers": 1, "n_heads": 4, "d_model": 64, "dropout": 0.2},
    lr=3e-3, warmup_iters=50, lr_decay_iters=300,
)  # fmt: skip
batch_rng = np.random.default_rng(1)
t0 = time.perf_counter()
for _ in range(300):
    pick = batch_rng.integers(0, len(data.train_labels), 32)
    idx, m = random_crops(tok, [data.train_texts[i] for i in pick], 64, batch_rng)
    loss = model.train_step({"idx": idx, "token_mask": m}, data.train_labels[pick])
logits = model.predict({"idx": val_idx, "token_mask": val_mask})
acc = float((logits.argmax(1) == data.val_labels).mean())
print(
    f"300 NumPy steps ({time.perf_counter() - t0:.0f} s), {n_speakers} speakers, word tokens: "
    f"held-out accuracy {acc:.1%}, majority baseline ({data.speakers[majority]}) {baseline:.1%}"
)
