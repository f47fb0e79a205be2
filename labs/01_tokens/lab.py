# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 01 lab: tokens and characters
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root or from this folder:
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/01_tokens/lab.py
#
# It prints numbers and writes PNGs into `labs/01_tokens/figures/`. It never
# downloads anything: it reads the corpus from `$TWINFORMER_DATA` or from the
# cache that `python -m labs train` fills, and otherwise falls back to a short
# built-in passage (and says so). A few seconds on a laptop CPU.
#
# What we look at:
#
# 1. The character vocabulary of Tiny Shakespeare: which 65 symbols, how often.
# 2. `CharTokenizer.encode` / `.decode`: a round trip, and the error for a
#    character the vocabulary does not have.
# 3. Characters against whitespace-separated words: vocabulary size, sequence
#    length, and words the validation text uses that training never saw.
# 4. How the vocabulary grows as we read more text: characters stop growing
#    almost at once, words never do.

# %%
import time
from collections import Counter

from labs.learner.notebook import HAMLET, figure_saver, load_text, plot_to_files

save = figure_saver("01_tokens")  # save(fig, "name.png") into figures/
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np

from numpy_impl import CharTokenizer

np.set_printoptions(linewidth=100)
text, source = load_text(
    HAMLET,
    "built-in passage (Hamlet III.1)",
    "using a short built-in passage, so the numbers below are small",
)
print(f"corpus: {source}: {len(text):,} characters")

# %% [markdown]
# ## 1. The vocabulary is the set of characters
#
# `CharTokenizer.from_text` collects every distinct character of the corpus
# and sorts them; a character's id is its index in that sorted string. Sorting
# makes the ids depend only on *which* characters occur, not on where they
# first occur, so two people building the tokenizer from the same text get
# the same ids.

# %%
tok = CharTokenizer.from_text(text)
print(f"vocab_size = {tok.vocab_size}")
print(f"chars      = {tok.chars!r}")
print("a few ids  :", {c: tok.encode(c)[0] for c in (tok.chars[:3] + tok.chars[-3:])})

counts = Counter(text)
freq = np.array([counts[c] for c in tok.chars])
order = np.argsort(freq)[::-1]
rare = [(tok.chars[i], int(freq[i])) for i in order[-5:]]
print("most frequent:", [(tok.chars[i], int(freq[i])) for i in order[:5]])
print("rarest       :", rare)

fig, ax = plt.subplots(figsize=(12, 3.6))
labels = [repr(tok.chars[i])[1:-1] or " " for i in order]
labels = ["\u2423" if s == " " else s for s in labels]  # a visible space
ax.bar(range(len(order)), freq[order], color="tab:blue")
ax.set_yscale("log")
ax.set_xticks(range(len(order)), labels, fontsize=7, family="monospace")
ax.set_xlim(-1, len(order))
ax.set_ylabel("occurrences (log scale)")
ax.set_title(f"The {tok.vocab_size} characters of the corpus, most frequent first")
save(fig, "char_frequencies.png")

# %% [markdown]
# ## 2. encode and decode
#
# `encode` maps each character to its id; `decode` maps ids back. The round
# trip must give back the exact text. A character outside the vocabulary has
# no id, and silently dropping or replacing it would corrupt the data the
# model learns from, so `encode` raises a `ValueError` naming the character
# and its code point.

# %%
line = "ROMEO:\nBut soft!" if "R" in tok.chars else text.splitlines()[1]
line = "".join(c for c in line if c in tok.chars)
ids = tok.encode(line)
print(f"text   {line!r}")
print(f"ids    {ids}")
print(f"decode {tok.decode(ids)!r}")
assert tok.decode(ids) == line

for bad in ("caf\u00e9", "tab\there"):
    try:
        tok.encode(bad)
    except ValueError as e:
        print(f"encode({bad!r}) -> ValueError: {str(e)[:90]}...")
try:
    tok.decode([tok.vocab_size])
except ValueError as e:
    print(f"decode([{tok.vocab_size}]) -> ValueError: {e}")

# %% [markdown]
# `encode` is a Python loop over a dictionary. For a whole corpus the
# tokenizer also has `encode_array`, one NumPy gather through a table indexed
# by code point. They must agree; the test for this chapter checks that too.

# %%
t0 = time.perf_counter()
ids_list = tok.encode(text)
t1 = time.perf_counter()
ids_arr = tok.encode_array(text)
t2 = time.perf_counter()
assert np.array_equal(ids_arr, ids_list)
print(f"encode (loop)        : {1e3 * (t1 - t0):7.1f} ms for {len(text):,} characters")
print(f"encode_array (gather): {1e3 * (t2 - t1):7.1f} ms, same ids")

# %% [markdown]
# ## 3. Characters against words
#
# The simplest alternative to characters is to split on whitespace and give
# each distinct word an id. The comparison below uses the same 90/10 split as
# training (the first 90% of the text trains, the rest validates).

# %%
n_train = int(0.9 * len(text))
train_text, val_text = text[:n_train], text[n_train:]
train_words, val_words = train_text.split(), val_text.split()
word_vocab = set(train_words)
char_vocab = set(train_text)
unseen_words = sum(w not in word_vocab for w in val_words)
unseen_chars = sum(c not in char_vocab for c in val_text)
context = 64  # the block_size of the default model, in tokens

rows = [
    ("characters", len(char_vocab), len(train_text), unseen_chars / max(len(val_text), 1)),
    ("whitespace words", len(word_vocab), len(train_words), unseen_words / max(len(val_words), 1)),
]
print(f"{'tokenization':<18}{'vocab (train)':>14}{'train tokens':>14}{'val tokens unseen':>19}")
for name, v, n, unseen in rows:
    print(f"{name:<18}{v:>14,}{n:>14,}{unseen:>18.2%}")
chars_per_word = len(train_text) / max(len(train_words), 1)
print(f"one word is {chars_per_word:.1f} characters on average (counting the space after it):")
print(f"a context of {context} characters covers ~{context / chars_per_word:.0f} words")
print(f"a context of {context} words covers ~{context * chars_per_word:.0f} characters")
singletons = sum(1 for n in Counter(train_words).values() if n == 1)
print(f"{singletons:,} of the {len(word_vocab):,} training words occur exactly once")

# %% [markdown]
# ## 4. How fast each vocabulary grows
#
# Read the text from the start and count the distinct symbols seen so far.
# The character count stops almost at once (any later jump is a rare symbol
# such as `$` or `3`); the word count keeps climbing, because names, rare
# words and words with punctuation attached (`king,` is not `king`) keep
# arriving. A word vocabulary built from the training text will always meet
# strangers in new text; a character vocabulary almost never does.

# %%
checkpoints = np.unique(np.geomspace(100, len(text), 40).astype(int))
seen_chars, seen_words = set(), set()
char_growth, word_growth = [], []
start = 0
for end in checkpoints:
    chunk = text[start:end]
    seen_chars.update(chunk)
    char_growth.append(len(seen_chars))
    # words cut by a checkpoint boundary are counted once they are whole
    cut = chunk.rfind(" ") + 1 if end < len(text) else len(chunk)
    seen_words.update(chunk[:cut].split())
    word_growth.append(len(seen_words))
    start += cut

fig, ax = plt.subplots(figsize=(6.5, 4))
ax.loglog(checkpoints, word_growth, "o-", ms=3, label="distinct whitespace words")
ax.loglog(checkpoints, char_growth, "o-", ms=3, label="distinct characters")
ax.set_xlabel("characters of the corpus read")
ax.set_ylabel("vocabulary size so far")
ax.set_title("The character vocabulary saturates; the word vocabulary does not")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
save(fig, "vocab_growth.png")
print(f"after {checkpoints[-1]:,} characters: {char_growth[-1]} chars, {word_growth[-1]:,} words")
