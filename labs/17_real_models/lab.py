# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # Chapter 17 lab: real models in the twins
#
# A plain Python script that is also a notebook (jupytext percent format).
# Run it from the repository root:
#
#     python labs/17_real_models/lab.py
#
# It prints numbers and writes PNGs into `labs/17_real_models/figures/`
# (about half a minute on a laptop CPU). It runs offline: with no real model
# at hand it builds a small random GPT-2 directory in Hugging Face's layout
# itself. To use a real one, download it once and point the lab at it:
#
#     huggingface-cli download gpt2 --local-dir ~/models/gpt2
#     TWINFORMER_GPT2_DIR=~/models/gpt2 python labs/17_real_models/lab.py
#
# (GPT-2 124M in the NumPy twin: expect minutes, not seconds, for section 5.)
#
# 1. A GPT-2 directory: config.json, model.safetensors, tokenizer.json.
# 2. GPT-2's names and GPT-2's Conv1D: the renames and the transposes.
# 3. `labs import`, then inspect: parameters by component, the tied head.
# 4. Sampling from the NumPy twin, with and without the KV cache.
# 5. Fine-tuning briefly: `labs train --init-from`, with `--grad-accum`.
# 6. `labs export`, and the model back in `transformers` (when installed).

# %%
import json
import os
import tempfile
import time
from pathlib import Path

from labs.learner.notebook import SONNETS, figure_saver, limit_threads, load_text, plot_to_files

save = figure_saver("17_real_models")  # save(fig, "name.png") into figures/
limit_threads()  # before NumPy loads: small arrays, extra threads only add overhead
plot_to_files()  # before pyplot loads: PNG files only, unless inside Jupyter

import matplotlib.pyplot as plt
import numpy as np

from labs.__main__ import main as labs
from labs.plumbing.backends import make_backend
from labs.plumbing.checkpoint import load_checkpoint
from labs.plumbing.checkpoint_format import expected_shapes
from labs.plumbing.hf_files import hf_tokenizer_files, read_hf_weights, write_hf_directory
from labs.plumbing.importing import count_parameters
from labs.plumbing.interop_gpt2 import gpt2_config_dict
from labs.plumbing.tokenization import load_tokenizer
from numpy_impl import pretrained
from numpy_impl.gpt import GPT, GPTConfig
from numpy_impl.tokenizer import BPETokenizer

np.set_printoptions(precision=4, suppress=True)
work = Path(tempfile.mkdtemp(prefix="ch17-"))  # the lab's directories: new ones on every run
print(f"working in {work}")

# %% [markdown]
# ## 1. A GPT-2 directory
#
# What `save_pretrained` writes and the hub serves: `config.json` (the
# architecture), `model.safetensors` (the weights: a JSON header of names,
# shapes and dtypes, then the raw little-endian arrays; no pickle, so reading
# it cannot run code) and the tokenizer (`tokenizer.json`, or GPT-2's original
# `vocab.json` + `merges.txt`).
#
# Without a real GPT-2, the lab makes one: a byte-level BPE of 512 tokens
# trained on the corpus (chapter 11), a NumPy GPT of GPT-2's architecture with
# random weights (chapter 8), written in GPT-2's names and layout, which is
# what `labs export` does (section 6).

# %%
text, source = load_text(SONNETS, "the built-in sonnets", "the lab trains on a built-in passage")
print(f"corpus: {source}, {len(text):,} characters")
if len(text) < 100_000:  # the built-in passage: repeated, so that both splits hold batches
    text = text * (100_000 // len(text) + 1)
corpus_file = work / "corpus.txt"
corpus_file.write_text(text, encoding="utf-8")

real = os.environ.get("TWINFORMER_GPT2_DIR")
if real:
    gpt2_dir = Path(real).expanduser()
    print(f"using the GPT-2 directory {gpt2_dir}")
else:
    bpe = BPETokenizer.train(text[:200_000], vocab_size=512)
    small = {
        "vocab_size": bpe.vocab_size,
        "block_size": 128,
        "n_layers": 2,
        "n_heads": 4,
        "d_model": 64,
        "dropout": 0.0,
    }
    random_gpt = GPT(GPTConfig(**small), seed=0)
    hf_state = pretrained.to_gpt2_state(random_gpt.state_dict(), small["n_layers"])
    del hf_state["lm_head.weight"]  # tied: save_pretrained stores the embedding once
    files, _ = hf_tokenizer_files(bpe, small["block_size"])
    gpt2_dir = write_hf_directory(work / "gpt2-random", gpt2_config_dict(small), hf_state, files)
    print(f"wrote a random GPT-2 of {random_gpt.num_parameters():,} parameters to {gpt2_dir}")

config = json.loads((gpt2_dir / "config.json").read_text())
shown = ("model_type", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size")
print({k: config.get(k) for k in (*shown, "activation_function", "layer_norm_epsilon")})
print(sorted(p.name for p in gpt2_dir.iterdir()))

# %% [markdown]
# ## 2. GPT-2's names, and GPT-2's Conv1D
#
# GPT-2 calls the fused q, k, v projection of block 0
# `transformer.h.0.attn.c_attn`; this GPT calls it `blocks.0.attn.qkv_proj`.
# The renames are a table (`numpy_impl/pretrained.py`, your exercise). One
# more thing differs: GPT-2's four projections are `Conv1D` modules, which
# compute `x @ W + b` with `W` stored `(in, out)`; `nn.Linear` and both twins
# compute `x @ W.T + b` with `W` stored `(out, in)`. Same numbers, transposed
# storage. nanoGPT kept GPT-2's names but uses `nn.Linear`: renamed, not
# transposed.

# %%
weights = read_hf_weights(gpt2_dir)
for name in list(weights)[:6]:
    print(f"{name:40s} {weights[name].shape}")
n_layers = config["n_layer"]
prefix = "" if any(k.startswith("transformer.") for k in weights) else "transformer."
hf = {k if k == "lm_head.weight" else prefix + k: v for k, v in weights.items()}
table = pretrained.gpt2_key_table(n_layers, tied=True)
print("\nthe rows of block 0 (ours <- GPT-2's, Conv1D?):")
for ours, theirs, conv1d in table[2:14]:
    print(f"  {ours:32s} <- {theirs:36s} {'transposed' if conv1d else ''}")
ours = pretrained.from_gpt2_state(hf, n_layers, tied=True)
W_conv = hf["transformer.h.0.attn.c_attn.weight"]  # (C, 3C): (in, out)
W, b = ours["blocks.0.attn.qkv_proj.weight"], ours["blocks.0.attn.qkv_proj.bias"]  # (3C, C)
x = np.random.default_rng(0).standard_normal((3, W.shape[1])).astype(np.float32)
print(
    f"\nc_attn {W_conv.shape} -> qkv_proj {W.shape}; max |x @ W_conv - x @ W.T| = "
    f"{np.abs(x @ W_conv - x @ W.T).max():.1e} (float32 rounding: the same products)"
)

# %% [markdown]
# ## 3. `labs import`, then inspect
#
# `python -m labs import gpt2 DIR --out RUN` does section 2 for every tensor,
# checks the config (a field this GPT cannot run is named and refused), and
# writes an ordinary checkpoint: model.safetensors, config.json and the
# tokenizer, all at once into a directory that did not exist. Here the lab
# calls the command line in-process (`labs([...])` is `python -m labs ...`).
#
# Where do the parameters sit? In GPT-2 124M, almost a third are the token
# embedding: 50257 x 768 = 38.6M. The LM head is the same matrix (tied), so it
# adds nothing: `head.weight` *is* `tok_emb.weight`.

# %%
run = work / "run"
assert labs(["import", "gpt2", str(gpt2_dir), "--out", str(run)]) == 0
assert labs(["inspect", str(run)]) == 0
state, run_config, _ = load_checkpoint(run)
print("tied: head.weight is tok_emb.weight:", state["head.weight"] is state["tok_emb.weight"])

gpt2_124m = {"vocab_size": 50257, "block_size": 1024, "n_layers": 12, "n_heads": 12, "d_model": 768}
counts = {
    "this model": count_parameters(state, tied=True),
    "GPT-2 124M": count_parameters(
        {k: np.empty(s, np.uint8) for k, s in expected_shapes(gpt2_124m).items()}, tied=True
    ),
}
parts = ["embeddings", "attention", "ffn", "norms"]
fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=True)
for ax, (name, c) in zip(axes, counts.items(), strict=True):
    ax.bar(parts, [c[p] / c["total"] for p in parts], color="tab:blue")
    ax.set_title(f"{name}: {c['total']:,} parameters", fontsize=10)
    ax.tick_params(axis="x", labelsize=9)
    for i, p in enumerate(parts):
        ax.text(i, c[p] / c["total"], f"{c[p]:,}", ha="center", va="bottom", fontsize=8)
axes[0].set_ylabel("share of the parameters")
fig.suptitle("where the parameters are (the tied head counts once, in the embedding)", y=1.02)
save(fig, "parameters.png")

# %% [markdown]
# ## 4. Sampling from the NumPy twin
#
# `labs sample` decodes with the KV cache by default (chapter 12): after the
# prompt, one token per forward pass. Greedy decoding gives the same tokens
# either way; the cache only saves work, and more of it the longer the
# context (GPT-2 124M in NumPy: `python -m labs bench-gpt2`).

# %%
numpy_twin = make_backend("numpy", run_config["model"])
numpy_twin.load_state_dict(state)
tokenizer = load_tokenizer(run_config, run, "numpy")
prompt = tokenizer.encode("ROMEO:\n")
timings = {}
for use_cache in (True, False):
    t0 = time.perf_counter()
    ids = numpy_twin.generate(prompt, 60, temperature=0.0, use_cache=use_cache)
    timings[use_cache] = time.perf_counter() - t0
    print(f"cache {use_cache!s:5s}: {60 / timings[use_cache]:6.0f} tokens/s  {ids[:8]} ...")
print(repr(tokenizer.decode(ids)[:120]))
torch_twin = make_backend("torch", run_config["model"])
torch_twin.load_state_dict(state)
print("torch twin, same greedy tokens:", torch_twin.generate(prompt, 60, temperature=0.0) == ids)

# %% [markdown]
# ## 5. Fine-tuning: `labs train --init-from`
#
# The model and the tokenizer come from RUN, the text from `--data`; AdamW
# starts afresh at step 0. `--grad-accum 2` runs each step as two
# micro-batches of `--batch-size` sequences and adds their gradients before
# the update: the step of a batch twice as large, with one micro-batch's
# activations in memory (the NumPy backward passes *add* into `.grad`, so
# accumulating costs nothing but the 1/2 on each micro-batch's loss).

# %%
tuned = work / "tuned"
status = labs(
    [
        "train",
        "--init-from",
        str(run),
        "--data",
        str(corpus_file),
        "--out",
        str(tuned),
        "--backend",
        "numpy",
        "--max-iters",
        "80",
        "--eval-interval",
        "20",
        "--batch-size",
        "8",
        "--grad-accum",
        "2",
        "--block-size",
        "64",
        "--lr",
        "1e-2",
        "--warmup-iters",
        "5",
        "--eval-batches",
        "4",
        "--eval-batch-size",
        "16",
        "--sample-tokens",
        "0",
    ]
)
assert status == 0, "labs train failed: see the error above"
log = [json.loads(line) for line in (tuned / "log.jsonl").read_text().splitlines()]
fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot([r["step"] for r in log], [r["train_loss"] for r in log], marker="o", label="train")
ax.plot([r["step"] for r in log], [r["val_loss"] for r in log], marker="o", label="val")
ax.set_xlabel("step")
ax.set_ylabel("loss (nats per token)")
ax.set_title("fine-tuning the imported model")
ax.legend()
save(fig, "fine_tuning.png")
after = make_backend("numpy", run_config["model"])
after.load_state_dict(load_checkpoint(tuned)[0])
for name, twin in (("before", numpy_twin), ("after", after)):  # temperature 0.8, one seed
    print(f"{name}: {tokenizer.decode(twin.generate(prompt, 40, temperature=0.8, seed=0))!r}")

# %% [markdown]
# ## 6. `labs export`, and back in `transformers`
#
# `python -m labs export RUN --to hf --out DIR` writes GPT-2's names and
# layout again (Conv1D weights transposed back), the config with
# `model_type: "gpt2"`, and the tokenizer, so that
# `AutoModelForCausalLM.from_pretrained(DIR)` and
# `AutoTokenizer.from_pretrained(DIR)` load them. A model HF cannot express
# (post-norm, say) is refused with the field named.

# %%
exported = work / "exported"
assert labs(["export", str(tuned), "--to", "hf", "--out", str(exported)]) == 0
try:
    import torch
    import transformers
except ImportError:
    print("transformers is not installed (pip install -e '.[interop]'): not reloaded")
else:
    hf_model = transformers.AutoModelForCausalLM.from_pretrained(exported).eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(exported)
    ids = hf_tok("ROMEO:\nWhat light")["input_ids"]
    assert ids == tokenizer.encode("ROMEO:\nWhat light")
    with torch.no_grad():
        theirs = hf_model(torch.tensor([ids])).logits[0].numpy()
    after.model.eval()
    mine = after.model(np.array([ids]))[0]
    print(
        f"{type(hf_model).__name__}: max |logits(HF) - logits(numpy twin)| = "
        f"{np.abs(theirs - mine).max():.1e} (scale {np.abs(mine).max():.1f})"
    )
