# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 10 lab: sampling
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/10_sampling/lab.py
#
# It prints numbers and samples and writes PNGs into `labs/10_sampling/figures/`
# (10 to 30 seconds on a laptop CPU). For the samples it uses the checkpoint
# of `python -m labs train --backend numpy` if `runs/numpy/` exists, and
# otherwise trains a tiny model for a few hundred steps first (from
# `$TWINFORMER_DATA` or the cached corpus; never a download; without either,
# from two sonnets built into this file).
#
# 1. What temperature, top-k and top-p do to one distribution.
# 2. Top-p keeps the token that crosses the threshold.
# 3. Drawing a token: inverse-CDF sampling with one uniform number.
# 4. Samples at several temperatures; greedy decoding on both backends.

# %%
import math
import time

from labs.learner.notebook import (
    SONNETS,
    figure_saver,
    limit_threads,
    load_text,
    plot_to_files,
    repository_path,
)

CHECKPOINT = repository_path("runs", "numpy")  # python -m labs train --backend numpy
save = figure_saver("10_sampling")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np
import torch

import numpy_impl as N
import torch_impl as T
from labs.plumbing.backends import make_backend
from labs.plumbing.data import BatchSampler, train_val_split
from numpy_impl.char_tokenizer import CharTokenizer
from numpy_impl.module import no_grad
from numpy_impl.sampling import softmax

np.set_printoptions(precision=3, suppress=True)


def entropy(p: np.ndarray) -> float:
    """Shannon entropy in nats; exp(entropy) is the 'effective number of choices'."""
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


# %% [markdown]
# ## 1. One distribution, four knobs
#
# Ten tokens and their logits, as a model might produce for the next
# character. `filter_logits` divides by the temperature, then sets the
# logits of the tokens top-k and top-p drop to -inf; the softmax turns those
# into probability 0 and renormalises the rest. Below 1 the temperature
# sharpens the distribution, above 1 it flattens it; top-k keeps a fixed
# number of tokens, top-p a fixed share of the probability mass, so it keeps
# few tokens when the model is sure and many when it is not.

# %%
tokens = list("etaoinshrd")
logits = np.array([[3.0, 2.6, 2.2, 1.5, 1.2, 0.8, 0.3, 0.0, -0.6, -1.5]])  # (B=1, V=10)
settings = {
    "original (T = 1)": {},
    "temperature 0.5": {"temperature": 0.5},
    "temperature 2.0": {"temperature": 2.0},
    "top-k = 3": {"top_k": 3},
    "top-p = 0.8": {"top_p": 0.8},
    "T 0.8, top-k 5, top-p 0.9": {"temperature": 0.8, "top_k": 5, "top_p": 0.9},
}
p0 = softmax(logits)[0]
fig, axes = plt.subplots(2, 3, figsize=(12, 6), sharey=True)
for ax, (title, kwargs) in zip(axes.flat, settings.items(), strict=True):
    filtered = N.filter_logits(logits, **kwargs)
    filtered_t = T.filter_logits(torch.from_numpy(logits), **kwargs).numpy()
    assert np.array_equal(np.isneginf(filtered), np.isneginf(filtered_t))  # the twins agree
    p = softmax(filtered)[0]
    kept = ~np.isneginf(filtered[0])
    ax.bar(tokens, p, color=np.where(kept, "C0", "0.8"))
    ax.plot(np.arange(10), p0, "_", color="k", ms=22, mew=1.5, label="original")
    ax.set_title(f"{title}\nkept {kept.sum()}, entropy {entropy(p):.2f} nats", fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    print(f"{title:<26} kept {kept.sum():>2}  p = {p}")
axes[0, 0].legend(fontsize=8)
axes[0, 0].set_ylabel("probability")
axes[1, 0].set_ylabel("probability")
fig.tight_layout()
save(fig, "filters.png")

# %% [markdown]
# ## 2. Top-p keeps the token that crosses the threshold
#
# Sorted probabilities 0.5, 0.3, 0.15, 0.05 and top_p = 0.6. The first token
# alone holds 0.5, short of 0.6; adding the second reaches 0.8. The nucleus is
# the smallest set whose mass reaches top_p, so it is the first *two*
# tokens. The rule in code: keep a token if the mass strictly *before* it (in
# sorted order) is below top_p. The most likely token always survives, even
# with a tiny top_p.

# %%
probs = np.array([[0.5, 0.3, 0.15, 0.05]])
for top_p in (0.45, 0.6, 0.85, 0.97, 0.01):
    kept = ~np.isneginf(N.filter_logits(np.log(probs), top_p=top_p))[0]
    kept_t = ~torch.isneginf(T.filter_logits(torch.from_numpy(np.log(probs)), top_p=top_p))[0]
    print(
        f"top_p = {top_p:<5} keeps tokens {np.flatnonzero(kept).tolist()}  "
        f"(torch: {np.flatnonzero(kept_t.numpy()).tolist()})"
    )

# %% [markdown]
# ## 3. Drawing one token
#
# `generate` turns probabilities into a token with one uniform number u in
# [0, 1): the first token whose cumulative probability exceeds u. Token i
# is picked when cdf[i-1] <= u < cdf[i], an interval of length p[i]: exactly
# its probability. (PyTorch's `torch.multinomial` does the same job with its
# own generator, so the two backends draw different tokens from the same seed,
# with the same frequencies.) Temperature 0 skips all this: greedy decoding
# takes the argmax.

# %%
p = softmax(N.filter_logits(logits, temperature=1.0))  # (1, V)
cdf = np.cumsum(p, axis=-1)
rng = np.random.default_rng(0)
n = 20_000
u = rng.random((n, 1)) * cdf[:, -1:]  # scaled by the total, which rounding may leave at 1 - 1e-16
draws = np.minimum((cdf <= u).sum(axis=-1), p.shape[-1] - 1)  # index of the first cdf > u
freq = np.bincount(draws, minlength=p.shape[-1]) / n
draws_t = torch.multinomial(
    torch.from_numpy(p).expand(n, -1),
    1,
    replacement=True,
    generator=torch.Generator().manual_seed(0),
)[:, 0].numpy()
freq_t = np.bincount(draws_t, minlength=p.shape[-1]) / n
print(f"probabilities          {p[0]}")
print(f"inverse-CDF, {n} draws {freq}")
print(f"torch.multinomial      {freq_t}")
print(f"max |frequency - p|: NumPy {np.abs(freq - p[0]).max():.4f}, torch ", end="")
print(f"{np.abs(freq_t - p[0]).max():.4f} (standard error ~{math.sqrt(0.25 / n):.4f})")
print(f"greedy (temperature 0) picks token {logits.argmax()} = {tokens[logits.argmax()]!r}")


# %% [markdown]
# ## 4. Samples from a model
#
# A trained checkpoint if there is one (`python -m labs train --backend numpy`
# writes `runs/numpy/`), else a tiny model trained here for a few hundred
# steps: not Shakespeare, but enough to see what temperature does. The model's
# context is 32 (or the checkpoint's block_size) characters and we generate
# more than that: `generate` feeds the model only the last block_size tokens.


# %%
def load_or_train():
    """(backend, tokenizer, model_config, where the weights came from)."""
    if (CHECKPOINT / "config.json").is_file():
        from labs.plumbing.checkpoint import load_checkpoint

        state, config, _ = load_checkpoint(CHECKPOINT)
        backend = make_backend("numpy", config["model"])
        backend.load_state_dict(state)
        tok = CharTokenizer.from_dict(config["tokenizer"])
        return backend, tok, config["model"], f"checkpoint {CHECKPOINT} (step {config['step']})"
    text, source = load_text(SONNETS, "built-in sonnets", "using two built-in sonnets instead")
    tok = CharTokenizer.from_text(text)
    train_ids, _ = train_val_split(tok.encode_array(text), 0.9)
    model_config = {
        "vocab_size": tok.vocab_size,
        "block_size": 32,
        "n_layers": 2,
        "n_heads": 4,
        "d_model": 64,
    }
    steps = 300
    train_config = {"lr": 3e-3, "min_lr": 3e-4, "warmup_iters": 20, "lr_decay_iters": steps}
    backend = make_backend("numpy", model_config, seed=0, train_config=train_config)
    sampler = BatchSampler(train_ids, model_config["block_size"], 16, seed=0)
    t0 = time.perf_counter()
    for step in range(steps):
        stats = backend.train_step(*sampler.next())
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step:>3}: loss {stats['loss']:.3f}")
    where = f"a tiny model trained here for {steps} steps on {source} "
    return backend, tok, model_config, where + f"({time.perf_counter() - t0:.0f} s)"


if __name__ == "__main__":
    backend, tok, model_config, where = load_or_train()
    print(f"weights: {where}; block_size {model_config['block_size']}")
    prompt = "ROMEO:\n" if all(c in tok.chars for c in "ROMEO:\n") else "\n"
    prompt_ids = tok.encode(prompt)
    n_new = 160
    runs = [
        ("greedy (temperature 0)", {"temperature": 0.0}),
        ("temperature 0.5", {"temperature": 0.5}),
        ("temperature 1.0", {"temperature": 1.0}),
        ("temperature 1.5", {"temperature": 1.5}),
        ("temperature 1.0, top-k 5", {"temperature": 1.0, "top_k": 5}),
        ("temperature 1.0, top-p 0.9", {"temperature": 1.0, "top_p": 0.9}),
    ]
    samples = {}
    for title, kwargs in runs:
        ids = backend.generate(prompt_ids, n_new, seed=7, **kwargs)
        samples[title] = tok.decode(ids)
        distinct = len(set(samples[title])) / tok.vocab_size
        print(f"\n--- {title} ({distinct:.0%} of the vocabulary used) ---")
        print(prompt + samples[title])

    # greedy decoding is deterministic: the PyTorch backend, same weights, same tokens
    twin = make_backend("torch", model_config)
    twin.load_state_dict(backend.state_dict())
    greedy_t = tok.decode(twin.generate(prompt_ids, n_new, temperature=0.0))
    same = greedy_t == samples["greedy (temperature 0)"]
    print(
        f"\ngreedy, PyTorch backend: {'identical' if same else 'DIFFERENT'} text ({n_new} "
        f"characters, the context cropped to the last {model_config['block_size']})"
    )

    # how sure is the model? the next-character distribution after the prompt
    x = np.array([prompt_ids[-model_config["block_size"] :]])
    with no_grad():  # evaluation: no layer keeps its activations for a backward
        next_logits = backend.model.forward(x)[:, -1, :]  # (1, V)
    temps = [0.25, 0.5, 0.8, 1.0, 1.5, 2.0]
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(11, 3.8))
    order = np.argsort(-next_logits[0])[:15]
    for t in (0.5, 1.0, 2.0):
        ax0.plot(softmax(next_logits / t)[0][order], "o-", ms=3, label=f"T = {t}")
    ax0.set_xticks(range(len(order)), [repr(tok.chars[i])[1:-1] for i in order])
    ax0.set(title=f"next character after {prompt!r}: the 15 most likely", ylabel="probability")
    ents = [entropy(softmax(next_logits / t)[0]) for t in temps]
    ax1.plot(temps, np.exp(ents), "o-")
    ax1.axhline(tok.vocab_size, color="0.6", ls=":", label=f"vocab_size = {tok.vocab_size}")
    ax1.set(title="exp(entropy): how many characters are 'in play'", xlabel="temperature")
    for ax in (ax0, ax1):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save(fig, "temperature.png")
