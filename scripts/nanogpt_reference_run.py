"""Replay nanoGPT's CPU Tiny Shakespeare run with ``torch_impl`` and score it two ways.

nanoGPT's README trains a character-level GPT on a CPU with::

    python train.py config/train_shakespeare_char.py --device=cpu --compile=False
        --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12 --n_layer=4
        --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0

and reports a validation loss of about 1.88. This script reruns that recipe on
twinformer's ``torch_impl.GPT`` as faithfully as the facts allow:

* the same model: no biases (nanoGPT's ``bias=False`` default), exact GELU, tied head;
* the same random stream: ``torch.manual_seed(seed)``, then the draws nanoGPT's
  constructor makes in its order (``nn.Embedding``/``nn.Linear`` default inits, then
  the N(0, 0.02) re-init in module post-order, the tied head last, then the
  residual projections N(0, 0.02/sqrt(2 n_layer))), then ``torch.randint`` batches,
  with the evaluation batches drawn from the same stream between training steps;
* the same loop: AdamW(0.9, 0.99), weight decay 0.1 on matrices, clip 1.0, warmup 100
  then cosine to 1e-4, evaluation every 250 steps on 20 random batches of 12.

At every evaluation it prints nanoGPT's number (the mean over 20 *random* batches,
~15k tokens, what nanoGPT logs) next to twinformer's (``python -m labs train``'s
20 *fixed* batches of 60 sequences, ~77k tokens) and, at the end, the loss over the
whole validation split. The spread of nanoGPT's estimate over repeated draws is
printed too: it is the noise in a single "val loss 1.88" line.

    python scripts/nanogpt_reference_run.py --data PATH [--seed 1337]

Float rounding differs from nanoGPT's own code (operation order inside our
modules, BLAS), so after 2000 steps the trajectory is a sibling of nanoGPT's run,
not a bit-for-bit copy; the seed, the data order and the initial weights are
nanoGPT's.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from labs.plumbing.data import fixed_eval_batches, load_corpus, resolve_corpus, train_val_split
from numpy_impl.char_tokenizer import CharTokenizer
from torch_impl.gpt import GPT, GPTConfig


def nanogpt_init(model: GPT, n_layers: int) -> None:
    """Draw the weights with nanoGPT's sequence of RNG calls and copy them in."""
    c = model.config
    C, V, T = c.d_model, c.vocab_size, c.block_size

    def emb(n):  # nn.Embedding.reset_parameters
        return nn.init.normal_(torch.empty(n, C))

    def lin(o, i):  # nn.Linear.reset_parameters (bias=False: no bias draw)
        return nn.init.kaiming_uniform_(torch.empty(o, i), a=math.sqrt(5))

    # 1. construction, in nanoGPT's order: wte, wpe, blocks (c_attn, c_proj, c_fc, c_proj), lm_head
    wte, wpe = emb(V), emb(T)
    blocks = [(lin(3 * C, C), lin(C, C), lin(4 * C, C), lin(C, 4 * C)) for _ in range(n_layers)]
    head = lin(V, C)
    # 2. self.apply(_init_weights): children before parents, so wte, wpe, the blocks, lm_head
    for w in (wte, wpe):
        nn.init.normal_(w, 0.0, 0.02)
    for ws in blocks:
        for w in ws:
            nn.init.normal_(w, 0.0, 0.02)
    nn.init.normal_(head, 0.0, 0.02)  # the tied tensor: this draw is wte's final value
    # 3. the residual projections (names ending in c_proj.weight), in parameter order
    for _, a_proj, _, m_proj in blocks:
        nn.init.normal_(a_proj, 0.0, 0.02 / math.sqrt(2 * n_layers))
        nn.init.normal_(m_proj, 0.0, 0.02 / math.sqrt(2 * n_layers))

    with torch.no_grad():
        model.tok_emb.weight.copy_(head)
        model.pos_emb.weight.copy_(wpe)
        for block, (c_attn, a_proj, c_fc, m_proj) in zip(model.blocks, blocks, strict=True):
            block.attn.qkv_proj.weight.copy_(c_attn)
            block.attn.out_proj.weight.copy_(a_proj)
            block.ffn.fc1.weight.copy_(c_fc)
            block.ffn.fc2.weight.copy_(m_proj)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", help="path to tinyshakespeare.txt (default: as python -m labs)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--max-iters", type=int, default=2000)
    p.add_argument(
        "--warmup",
        choices=["current", "original"],
        default="current",
        help="nanoGPT's warmup lr: lr*(it+1)/(warmup+1) (current) or lr*it/warmup (original)",
    )
    args = p.parse_args()

    B, T, L, H, C = 12, 64, 4, 4, 128
    lr, min_lr, warmup, decay_iters = 1e-3, 1e-4, 100, args.max_iters
    eval_interval, eval_iters = 250, 20

    text = load_corpus(resolve_corpus(args.data))
    tok = CharTokenizer.from_text(text)
    train_ids, val_ids = train_val_split(tok.encode_array(text), 0.9)
    data = {"train": train_ids, "val": val_ids}
    # twinformer's evaluator: python -m labs train uses seed + 2 for the val batches
    fixed_val = fixed_eval_batches(val_ids, T, 60, 20, seed=args.seed + 2)

    torch.manual_seed(args.seed)
    model = GPT(
        GPTConfig(
            vocab_size=tok.vocab_size,
            block_size=T,
            n_layers=L,
            n_heads=H,
            d_model=C,
            dropout=0.0,
            bias=False,
            gelu_approximate="none",
        )
    )
    torch.manual_seed(args.seed)  # nanoGPT seeds once, before building its model
    nanogpt_init(model, L)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ],
        lr=lr,
        betas=(0.9, 0.99),
    )

    def get_batch(split):
        d = data[split]
        ix = torch.randint(len(d) - T, (B,))
        x = torch.stack([torch.from_numpy(d[i : i + T].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(d[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
        return x, y

    def loss_of(x, y):
        logits = model(x)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1))

    @torch.no_grad()
    def nanogpt_estimate():
        model.eval()
        out = {
            s: statistics.fmean(loss_of(*get_batch(s)).item() for _ in range(eval_iters))
            for s in ("train", "val")
        }
        model.train()
        return out

    @torch.no_grad()
    def fixed_val_loss():
        model.eval()
        v = statistics.fmean(
            loss_of(torch.from_numpy(x), torch.from_numpy(y)).item() for x, y in fixed_val
        )
        model.train()
        return v

    def get_lr(it):
        if it < warmup:
            return lr * (it + 1) / (warmup + 1) if args.warmup == "current" else lr * it / warmup
        if it > decay_iters:
            return min_lr
        r = (it - warmup) / (decay_iters - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * r)) * (lr - min_lr)

    t0 = time.perf_counter()
    X, Y = get_batch("train")
    it = 0
    while True:
        for g in opt.param_groups:
            g["lr"] = get_lr(it)
        if it % eval_interval == 0:
            est = nanogpt_estimate()
            print(
                f"step {it}: nanoGPT estimate train {est['train']:.4f} val {est['val']:.4f}"
                f" | twinformer fixed val {fixed_val_loss():.4f}"
                f" | {time.perf_counter() - t0:.0f} s",
                flush=True,
            )
        if it == args.max_iters:
            break  # nanoGPT takes one more step after its last evaluation; it changes nothing
        loss = loss_of(X, Y)
        X, Y = get_batch("train")
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        it += 1

    # The noise in one nanoGPT "val loss" line: 100 more independent 20-batch estimates.
    gen = torch.Generator().manual_seed(0)
    ests = []
    with torch.no_grad():
        model.eval()
        d = val_ids
        for _ in range(100):
            ix = torch.randint(len(d) - T, (eval_iters * B,), generator=gen)
            x = torch.stack([torch.from_numpy(d[i : i + T].astype(np.int64)) for i in ix])
            y = torch.stack([torch.from_numpy(d[i + 1 : i + 1 + T].astype(np.int64)) for i in ix])
            ests.append(loss_of(x, y).item())
        n = (len(d) - 1) // T
        x = torch.from_numpy(d[: n * T].astype(np.int64).reshape(n, T))
        y = torch.from_numpy(d[1 : n * T + 1].astype(np.int64).reshape(n, T))
        total = 0.0
        for i in range(0, n, 256):  # sum of per-token losses, 256 windows at a time
            logits = model(x[i : i + 256])
            total += F.cross_entropy(
                logits.reshape(-1, logits.size(-1)), y[i : i + 256].reshape(-1), reduction="sum"
            ).item()
        whole = total / (n * T)
    ests.sort()
    print(
        f"final (seed {args.seed}): twinformer fixed val {fixed_val_loss():.4f}; "
        f"whole val split (non-overlapping windows) {whole:.4f}; nanoGPT-style 20x12 estimates: "
        f"mean {statistics.fmean(ests):.4f}, sd {statistics.stdev(ests):.4f}, "
        f"5%-95% [{ests[5]:.4f}, {ests[94]:.4f}]"
    )


if __name__ == "__main__":
    main()
