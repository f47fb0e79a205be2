# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 11 lab: byte-level BPE
#
# A plain Python script that is also a notebook (jupytext percent format):
#
#     TWINFORMER_DATA=/path/to/tinyshakespeare.txt python labs/11_tokenization/lab.py
#
# It prints numbers and writes PNGs into `labs/11_tokenization/figures/`. It never
# downloads: without the corpus it uses a short built-in passage and says so.
# About 30 s on a laptop CPU with the corpus (two BPE trainings, a dozen encodings).
#
# What we look at:
#
# 1. Bytes, not characters: every string has a UTF-8 encoding, so the 256 byte
#    tokens cover everything and byte-level BPE never needs `[UNK]`.
# 2. GPT-2's pre-tokenization, and what it keeps merges from doing.
# 3. Training: the from-scratch trainer learns HF's merges, in HF's order.
# 4. The leading-space effect: `"the"`, `" the"` and `"The"` are different tokens.
# 5. Compression against vocabulary size, and one sentence cut by three vocabularies.
# 6. Decoding: bytes first, UTF-8 once; a stream that never prints half a character;
#    special tokens.

# %%
import os
import time

from labs.learner.notebook import HAMLET, figure_saver, load_text, plot_to_files

save = figure_saver("11_tokenization")  # save(fig, "name.png") into figures/
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np

import torch_impl.tokenizer as TT
from numpy_impl import BPETokenizer, CharTokenizer
from numpy_impl.bpe_trainer import train_bpe
from numpy_impl.byte_level import (
    BASE_BYTES,
    BYTE_TO_UNICODE,
    GPT2_SPLIT_PATTERN,
    pre_tokenize,
    token_to_str,
)
from numpy_impl.tokenizer import train_bpe_plain

# Used only without a corpus: the speech's first 11 lines, four times over.
FALLBACK_TEXT = "".join(HAMLET.splitlines(keepends=True)[:11]) * 4
text, source = load_text(
    FALLBACK_TEXT,
    "built-in passage (Hamlet III.1)",
    "using a short built-in passage, so the numbers below are small",
)
n_bytes = len(text.encode("utf-8"))
print(f"corpus: {source}: {len(text):,} characters, {n_bytes:,} UTF-8 bytes")
BIG = len(text) > 100_000  # the real corpus: the full-size experiments

# %% [markdown]
# ## 1. Bytes: the vocabulary that covers every string
#
# A character tokenizer only knows the characters it was built from. Byte-level BPE
# starts from the 256 byte values instead: any string is a sequence of UTF-8 bytes
# (1 byte for ASCII, 2 for `é`, 3 for `日`, 4 for an emoji), and each byte is a token.
# Merges are shortcuts on top; an unknown word, an emoji, a typo, all still encode.

# %%
chars = CharTokenizer.from_text(text)
probe = "caf\u00e9 \u65e5\u672c \U0001f600"
for ch in probe:
    print(f"{ch!r:>10} -> UTF-8 bytes {list(ch.encode('utf-8'))}")
try:
    chars.encode(probe)
except ValueError as e:
    print(f"CharTokenizer: ValueError: {str(e)[:80]}...")
tiny = BPETokenizer.train("hello world", vocab_size=260)  # 3 merges, nothing else learned
ids = tiny.encode(probe)
print(f"a BPE that learned only 'hello world' encodes it anyway: {len(ids)} ids, {ids}")
assert tiny.decode(ids) == probe

# %% [markdown]
# The tokens are bytes, so a tokenizer.json must spell them as text: GPT-2 maps
# each byte to a printable stand-in (`bytes_to_unicode`), the space to `Ġ` and the
# newline to `Ċ`. That is why vocabularies show `Ġthe`.

# %%
print({bytes([b]): BYTE_TO_UNICODE[b] for b in (32, 10, 9, 0, 65, 233)})
print("ids 0..5 are the bytes of", [token_to_str(bytes([b])) for b in BASE_BYTES[:6]])

# %% [markdown]
# ## 2. Pre-tokenization: where merges may not cross
#
# GPT-2 first splits the text with a regex: contractions, then an optional space
# followed by letters, or digits, or other symbols, then whitespace. Merges happen
# inside the pieces only: `" the"` can become a token, `"the,"` never does.

# %%
print(GPT2_SPLIT_PATTERN)
for s in ("y is ?", "HE'S here", "he's here", "Tis 1603;  anon!\n\nROMEO:"):
    print(f"{s!r:<28} -> {pre_tokenize(s)}")
pieces = pre_tokenize(text)
print(f"the corpus: {len(pieces):,} pieces, {len(set(pieces)):,} distinct")

# %% [markdown]
# ## 3. Training, and HF's merges
#
# `train_bpe` counts each distinct piece once, keeps a heap of pair counts and
# updates only the neighbours of each merge. Ties break as in HF's BpeTrainer
# (highest count, then the smallest pair of ids), so the merges are HF's, in order.

# %%
V = 1000 if BIG else 300
t0 = time.perf_counter()
ours = BPETokenizer.train(text, V)
t_ours = time.perf_counter() - t0
t0 = time.perf_counter()
hf = TT.BPETokenizer.train(text, V)
t_hf = time.perf_counter() - t0
same = sum(1 for a, b in zip(ours.merges, hf.merges, strict=False) if a == b)
print(f"vocab {V}: from scratch {t_ours:.2f} s, HF {t_hf:.2f} s (HF uses {os.cpu_count()} cores)")
print(f"identical merges: {same}/{len(hf.merges)}; same tokenizer.json: {ours.merges == hf.merges}")
print("first 12 merges:", [(a + b).decode("utf-8", "replace") for a, b in ours.merges[:12]])

# %% [markdown]
# The source material's version recounts every pair of the whole text at every merge and has no
# pre-tokenization. On a slice of the corpus it gives exactly the fast trainer's
# merges with `pattern=None`, much more slowly.

# %%
piece = text[:20_000]
t0 = time.perf_counter()
_, v_plain, m_plain = train_bpe_plain(piece, 400)
t_plain = time.perf_counter() - t0
t0 = time.perf_counter()
v_fast, m_fast = train_bpe(piece, 400, pattern=None)
t_fast = time.perf_counter() - t0
print(
    f"20,000 characters, vocab 400: the plain rescanning trainer {t_plain:.2f} s, "
    f"fast trainer {t_fast:.2f} s, same merges: {m_plain == m_fast}"
)

# %% [markdown]
# ## 4. The leading space is part of the token
#
# The pattern glues a space to the word after it, so `" the"` (mid-sentence) and
# `"the"` (after a newline) and `"The"` are three different tokens with unrelated
# embeddings. A prompt ending in a space changes what the model sees.

# %%
for s in ("the", " the", "The", " The", "THE", " cat", "cat", "\nthe"):
    ids = ours.encode(s)
    print(f"{s!r:>8} -> {[ours.id_to_token(i) for i in ids]} {ids}")
spaced = sum(t.startswith(b" ") for t in ours.vocab)
print(f"{spaced} of the {len(ours.vocab)} tokens start with a space")

# %% [markdown]
# ## 5. Compression against vocabulary size
#
# BPE at vocab V is the first V - 256 merges of any longer run, so one training at
# the largest size gives every smaller tokenizer: keep a prefix of the merges.

# %%
V_MAX = 10_000 if BIG else 400
big = BPETokenizer.train(text, V_MAX, special_tokens=())
sizes = [v for v in (256, 300, 500, 1000, 2000, 5000, 10_000) if v <= len(big.vocab)]
ratios = []
for v in sizes:
    keep = big.merges[: v - 256]
    vocab = {t: i for t, i in big.vocab.items() if i < v}
    t0 = time.perf_counter()
    n = len(BPETokenizer(vocab, keep).encode(text))  # a fresh tokenizer: an empty cache
    dt = time.perf_counter() - t0
    ratios.append(n_bytes / n)
    print(f"vocab {v:>6}: {n:>9,} tokens, {n_bytes / n:.2f} bytes per token, encoded in {dt:.2f} s")
fig, ax = plt.subplots(figsize=(6, 3.8))
ax.semilogx(sizes, ratios, "o-", label="byte-level BPE, GPT-2 regex")
ax.axhline(n_bytes / len(text), color="gray", ls="--", label="characters (65 tokens)")
ax.set_xlabel("vocabulary size")
ax.set_ylabel("UTF-8 bytes per token")
ax.set_title("Compression grows slowly with the vocabulary")
ax.grid(True, which="both", alpha=0.3)
ax.legend()
save(fig, "compression.png")

lengths = np.array([len(t) for t in big.vocab])
fig, ax = plt.subplots(figsize=(6, 3.4))
ax.hist(lengths, bins=np.arange(1, lengths.max() + 2) - 0.5, color="tab:blue")
ax.set_xlabel("token length in bytes")
ax.set_ylabel("tokens")
ax.set_title(f"The {len(big.vocab):,} tokens by length")
save(fig, "token_lengths.png")
print("longest tokens:", sorted(big.vocab, key=len)[-5:])

# %% [markdown]
# The same in one sentence: each token a coloured box, cut by three vocabularies.
# At 256 (bytes only) every character is a token; with more merges, common words
# and their leading space become one token each, and rare ones stay in pieces.

# %%
sentence = "To be, or not to be, that is the question: whether 'tis nobler"
cuts = [v for v in (256, 1000, V_MAX) if v <= len(big.vocab)]
fig, ax = plt.subplots(figsize=(11, 0.9 * len(cuts) + 0.4))
for row, v in enumerate(cuts):
    vocab = {t: i for t, i in big.vocab.items() if i < v}
    cut = BPETokenizer(vocab, big.merges[: v - 256])
    tokens = [cut.decode([i]) for i in cut.encode(sentence)]  # an ASCII sentence: whole
    x = 0
    for k, tok in enumerate(tokens):  # one box per token, one unit per character
        ax.add_patch(plt.Rectangle((x, -row - 0.4), len(tok), 0.8, color=f"C{k % 10}", alpha=0.35))
        for j, c in enumerate(tok):
            ax.text(
                x + j + 0.5,
                -row,
                "\u2423" if c == " " else c,
                ha="center",
                va="center",
                family="monospace",
                fontsize=10,
            )
        x += len(tok)
    ax.text(-1, -row, f"vocab {v:,}: {len(tokens)} tokens", ha="right", va="center", fontsize=9)
ax.set_xlim(-16, len(sentence) + 0.5)
ax.set_ylim(-len(cuts) + 0.4, 0.6)
ax.axis("off")
ax.set_title("One sentence, its tokens coloured: more merges, fewer and longer tokens")
save(fig, "token_boundaries.png")

# %% [markdown]
# ## 6. Decoding: join the bytes, decode UTF-8 once
#
# An emoji's four bytes may be four tokens. Decoding each token alone would print
# four replacement characters; joining the bytes first gives the emoji. A stream of
# generated ids needs the same care: `DecodeStream` holds back an incomplete
# trailing sequence until its last byte arrives.

# %%
emoji = "\U0001f600"
ids = [ours.vocab[bytes([b])] for b in emoji.encode("utf-8")]
print("one token at a time:", [ours.decode([i]) for i in ids])
print("bytes joined, then decoded:", ours.decode(ids))
stream = ours.decode_stream()
print("stream steps:", [stream.step(i) for i in ids])

# Special tokens are whole, and only where allowed: a user typing the end-of-text
# marker gets bytes, a data pipeline that means it gets the id.
doc = "The end.<|endoftext|>A new play."
print(len(ours.encode(doc)), "ids as text;", ours.encode(doc, allowed_special="all"))
