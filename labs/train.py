"""``python -m labs train``: train a character-level GPT on Tiny Shakespeare.

The defaults are nanoGPT's "baby GPT" for CPUs (config/train_shakespeare_char.py
scaled down as its README suggests): 4 layers, 4 heads, d_model 128, context
64, batch 12, 2000 steps, AdamW with lr 1e-3 -> 1e-4 (100 warmup steps, then a
cosine), beta2 0.99, weight decay 0.1, gradient clipping at 1.0, no dropout.
It ends near a validation loss of 1.9 nats per character (1.91 for the
PyTorch backend with the default seed; nanoGPT reports 1.88 for its version).
The same run on either backend, with the same seed, sees the same batches.

Outputs, in ``--out`` (default ``runs/<backend>``):

* ``log.jsonl``: one JSON object per evaluation (``step``, ``train_loss``,
  ``val_loss``, ``lr``, ``elapsed_s``);
* the checkpoint (``model.safetensors``, ``optimizer.safetensors``,
  ``config.json``), rewritten atomically at every evaluation;
* ``loss.png``: the loss curves.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path

from . import UserError
from .backends import BACKENDS, make_backend
from .checkpoint import CONFIG_FILE, expected_shapes, load_checkpoint, save_checkpoint
from .data import (
    DATA_ENV_VAR,
    BatchSampler,
    CorpusUnavailableError,
    fixed_eval_batches,
    load_corpus,
    resolve_corpus,
    train_val_split,
)
from .tokenization import (
    KINDS,
    bits_per_byte,
    build_tokenizer,
    bytes_per_token,
    tokenizer_config,
)

#: ``--arch``: GPTConfig fields that differ from the GPT-2 defaults. Llama-style
#: (Touvron et al. 2023, sec. 2.2): RoPE (Meta's interleaved pairs), RMSNorm,
#: SwiGLU, no biases. The LM head stays tied to the embedding, as in the gpt2
#: model, so the comparison changes only what the paper changes.
ARCHS: dict[str, dict] = {
    "gpt2": {},
    "llama": {
        "pos_emb": "rope",
        "rope_layout": "interleaved",
        "norm": "rmsnorm",
        "ffn": "swiglu",
        "bias": False,
    },
}

LOG_FILE = "log.jsonl"
PLOT_FILE = "loss.png"

#: Sampling settings of the sample printed after training. nanoGPT uses
#: temperature 0.8 and top_k 200; with 65 characters top_k 200 keeps them
#: all, so we leave top-k off and only sharpen the distribution a little.
FINAL_SAMPLE = {"temperature": 0.8, "top_k": None, "top_p": None}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` command's options (defaults: nanoGPT's CPU baby GPT)."""
    p.add_argument("--backend", choices=BACKENDS, required=True)
    p.add_argument(
        "--data",
        metavar="PATH",
        help=f"Tiny Shakespeare text file (default: ${DATA_ENV_VAR}, the cache, or a download)",
    )
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/<backend>)")
    p.add_argument("--resume", action="store_true", help="continue from the checkpoint in --out")
    p.add_argument("--max-iters", type=int, default=2000, help="optimizer steps")
    p.add_argument("--seed", type=int, default=1337, help="weights and batches")
    p.add_argument(
        "--tokenizer",
        choices=KINDS,
        default="char",
        help="characters, or byte-level BPE trained by the backend's own implementation",
    )
    p.add_argument(
        "--vocab-size", type=int, default=1000, help="BPE vocabulary size (with --tokenizer bpe)"
    )
    g = p.add_argument_group("model")
    g.add_argument(
        "--arch",
        choices=tuple(ARCHS),
        default="gpt2",
        help="gpt2: learned positions, LayerNorm, GELU MLP, biases (default); llama: RoPE, "
        "RMSNorm, SwiGLU, no biases, d_ff chosen for the gpt2 model's parameter count",
    )
    g.add_argument(
        "--d-ff",
        type=int,
        default=None,
        help="FFN hidden width (default: 4 d_model for gpt2; for llama, the multiple of 8 "
        "that brings the parameter count closest to gpt2's)",
    )
    g.add_argument("--block-size", type=int, default=64, help="context length T")
    g.add_argument("--n-layers", type=int, default=4, help="transformer blocks")
    g.add_argument("--n-heads", type=int, default=4, help="attention heads per block")
    g.add_argument("--d-model", type=int, default=128, help="width C of the residual stream")
    g.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    g.add_argument(
        "--bias",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="biases in Linear and LayerNorm layers, as GPT-2 (default: on)",
    )
    g.add_argument(
        "--gelu",
        choices=("tanh", "none"),
        default="tanh",
        help="GELU form: tanh approximation (GPT-2) or exact erf ('none')",
    )
    g.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype"
    )
    g.add_argument(
        "--attn-impl",
        choices=("sdpa", "explicit"),
        default="sdpa",
        help="torch attention: fused sdpa or written out (numpy: always explicit)",
    )
    g = p.add_argument_group("optimization")
    g.add_argument("--batch-size", type=int, default=12, help="sequences per step B")
    g.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    g.add_argument("--min-lr", type=float, default=1e-4, help="final learning rate")
    g.add_argument("--warmup-iters", type=int, default=100, help="linear warmup steps")
    g.add_argument(
        "--lr-decay-iters",
        type=int,
        default=None,
        help="step where the cosine reaches --min-lr (default: --max-iters, "
        "at least --warmup-iters + 1)",
    )
    g.add_argument("--beta1", type=float, default=0.9, help="AdamW first-moment decay")
    g.add_argument("--beta2", type=float, default=0.99, help="AdamW second-moment decay")
    g.add_argument("--weight-decay", type=float, default=0.1, help="AdamW decay of the matrices")
    g.add_argument("--grad-clip", type=float, default=1.0, help="0 disables clipping")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-interval", type=int, default=250, help="steps between evaluations")
    g.add_argument("--eval-batches", type=int, default=20, help="fixed batches per split")
    g.add_argument("--eval-batch-size", type=int, default=60, help="sequences per eval batch")
    g.add_argument("--sample-tokens", type=int, default=500, help="sample printed at the end")


def _check_args(args: argparse.Namespace) -> None:
    if args.d_ff is not None and args.d_ff < 1:
        raise UserError(f"--d-ff must be >= 1, got {args.d_ff}")
    positive = ("max_iters", "block_size", "n_layers", "n_heads", "d_model", "batch_size")
    for name in (*positive, "eval_interval", "eval_batches", "eval_batch_size"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup_iters < 0 or args.sample_tokens < 0:
        raise UserError("--warmup-iters and --sample-tokens must be >= 0")
    if args.lr_decay_iters is not None and args.lr_decay_iters <= args.warmup_iters:
        raise UserError(
            f"--lr-decay-iters ({args.lr_decay_iters}) must exceed --warmup-iters "
            f"({args.warmup_iters})"
        )


def _decay_iters(args: argparse.Namespace) -> int:
    # When max_iters <= warmup_iters the run ends inside the warmup; any decay
    # point after it gives the same rates, and the schedulers need decay > warmup.
    if args.lr_decay_iters is not None:
        return args.lr_decay_iters
    return max(args.max_iters, args.warmup_iters + 1)


def matched_d_ff(model_config: dict, multiple_of: int = 8) -> tuple[int, int, int]:
    """The SwiGLU width that brings a model closest to the gpt2 model's parameter count.

    Args:
        model_config: GPTConfig fields of the model to size (its ``d_ff`` is ignored).
        multiple_of: the width is a multiple of this (Llama's rounding rule).

    Returns:
        ``(d_ff, its parameter count, the gpt2 model's parameter count)``; the
        gpt2 model has the same vocabulary, context, depth, heads and width.
    """

    def count(config: dict) -> int:
        shapes = expected_shapes(config)
        if config.get("tie_weights", True):
            del shapes["head.weight"]  # the tied head is the embedding: counted once
        return sum(math.prod(s) for s in shapes.values())

    keys = ("vocab_size", "block_size", "n_layers", "n_heads", "d_model")
    target = count({k: model_config[k] for k in keys})
    at = {f: count({**model_config, "d_ff": f}) for f in (multiple_of, 2 * multiple_of)}
    per_unit = (at[2 * multiple_of] - at[multiple_of]) / multiple_of  # parameters per hidden unit
    best = max(1, round((target - at[multiple_of]) / per_unit / multiple_of) + 1) * multiple_of
    return best, count({**model_config, "d_ff": best}), target


def plot_losses(log_path: Path, png_path: Path, title: str = "", unit: str = "character") -> None:
    """Draw train and val loss against step from a ``log.jsonl`` into a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(steps, [r["train_loss"] for r in rows], marker="o", ms=3, label="train")
    ax.plot(steps, [r["val_loss"] for r in rows], marker="o", ms=3, label="val")
    ax.set_xlabel("step")
    ax.set_ylabel(f"loss (nats per {unit})")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path)
    plt.close(fig)


def run(args: argparse.Namespace) -> dict:
    """Train as ``args`` says; print progress; return the final metrics.

    Raises:
        UserError: a missing or unreadable corpus, bad arguments, or (with
            ``--resume``) a missing or mismatched checkpoint.
    """
    from tqdm import tqdm

    _check_args(args)
    out = Path(args.out or f"runs/{args.backend}")

    # -- data: the same arrays, the same batches, whatever the backend ---------
    try:
        corpus_path = resolve_corpus(args.data)
        text = load_corpus(corpus_path)
    except (OSError, ValueError, CorpusUnavailableError) as e:
        raise UserError(str(e)) from e
    try:
        tokenizer = build_tokenizer(args.tokenizer, args.backend, text, args.vocab_size)
    except (TypeError, ValueError) as e:
        raise UserError(f"--vocab-size: {e}") from e
    train_ids, val_ids = train_val_split(tokenizer.encode_array(text), 0.9)
    B, T = args.batch_size, args.block_size
    for split, ids in (("training", train_ids), ("validation", val_ids)):
        if len(ids) <= T:
            raise UserError(
                f"{corpus_path}: the {split} split has {len(ids)} characters, fewer than "
                f"--block-size + 1 = {T + 1}; use a longer text or a smaller --block-size"
            )
    val_bytes_per_token = bytes_per_token(tokenizer, val_ids)  # for bits per byte
    sampler = BatchSampler(train_ids, T, B, seed=args.seed)
    # Evaluation batches are drawn once, so every evaluation sees the same text.
    eval_sets = {
        "train": fixed_eval_batches(
            train_ids, T, args.eval_batch_size, args.eval_batches, seed=args.seed + 1
        ),
        "val": fixed_eval_batches(
            val_ids, T, args.eval_batch_size, args.eval_batches, seed=args.seed + 2
        ),
    }

    # -- model and optimizer ------------------------------------------------------
    model_config = {
        "vocab_size": tokenizer.vocab_size,
        "block_size": T,
        "n_layers": args.n_layers,
        "n_heads": args.n_heads,
        "d_model": args.d_model,
        "dropout": args.dropout,
        "bias": args.bias,
        "gelu_approximate": args.gelu,
        "d_ff": args.d_ff,
    }
    model_config.update(ARCHS[args.arch])
    if args.arch == "llama":
        model_config["bias"] = False  # Llama has none: --bias does not apply
        if args.d_ff is None:
            d_ff, n_params, n_gpt2 = matched_d_ff(model_config)
            model_config["d_ff"] = d_ff
            print(
                f"llama: d_ff {d_ff} gives {n_params:,} parameters; the gpt2 model of the "
                f"same size has {n_gpt2:,} ({100 * (n_params / n_gpt2 - 1):+.2f}%)"
            )
    train_config = {
        "lr": args.lr,
        "min_lr": args.min_lr,
        "warmup_iters": args.warmup_iters,
        "lr_decay_iters": _decay_iters(args),
        "weight_decay": args.weight_decay,
        "beta1": args.beta1,
        "beta2": args.beta2,
        "grad_clip": args.grad_clip,
    }
    try:
        backend = make_backend(
            args.backend,
            model_config,
            seed=args.seed,
            train_config=train_config,
            dtype=args.dtype,
            attn_impl=args.attn_impl,
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    model_config = dataclasses.asdict(backend.config)  # every field, defaults filled in
    train_args = {k: v for k, v in vars(args).items() if k not in ("command", "func")}
    train_args.update(data=str(corpus_path), lr_decay_iters=train_config["lr_decay_iters"])
    tokenizer_section, tokenizer_files = tokenizer_config(tokenizer)
    config = {"model": model_config, "tokenizer": tokenizer_section, "train": train_args}

    log_path = out / LOG_FILE
    elapsed_before = 0.0  # wall time of the run we resume, if any
    if args.resume:
        elapsed_before = _resume(out, backend, sampler, config)
    else:
        out.mkdir(parents=True, exist_ok=True)
        log_path.unlink(missing_ok=True)  # a fresh run gets a fresh log

    print(
        f"{backend.name} backend, {backend.num_parameters():,} parameters, "
        f"vocab {tokenizer.vocab_size}, {len(train_ids):,} train / {len(val_ids):,} val "
        f"tokens from {corpus_path}; writing to {out}/"
    )

    # -- the loop -------------------------------------------------------------------
    t_start = time.perf_counter()
    train_time, train_tokens = 0.0, 0  # time in train_step only, for tokens/s
    metrics: dict = {}

    def evaluate_and_save() -> None:
        losses = {split: backend.eval_loss(batches) for split, batches in eval_sets.items()}
        if not all(math.isfinite(v) for v in losses.values()):
            # keep the last good checkpoint and a log of valid JSON: stop before writing
            raise UserError(
                f"the evaluation loss became non-finite at step {backend.step} "
                f"(train {losses['train']}, val {losses['val']}); the checkpoint in {out} "
                "is the last good one. Try a lower --lr or keep --grad-clip on"
            )
        elapsed = elapsed_before + time.perf_counter() - t_start
        tok_s = train_tokens / train_time if train_time else 0.0
        row = {
            "step": backend.step,
            "train_loss": losses["train"],
            "val_loss": losses["val"],
            "val_bpb": bits_per_byte(losses["val"], val_bytes_per_token),
            "lr": backend.current_lr(),
            "elapsed_s": round(elapsed, 3),
        }
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        metrics.update(row, tokens_per_s=round(tok_s, 1))
        tqdm.write(
            f"step {backend.step:5d}: train loss {losses['train']:.4f}, "
            f"val loss {losses['val']:.4f} ({row['val_bpb']:.4f} bits/byte), "
            f"lr {row['lr']:.2e}, {elapsed:.1f} s" + (f", {tok_s:,.0f} tok/s" if tok_s else "")
        )
        save_checkpoint(
            out,
            backend.state_dict(),
            config,
            backend.optimizer_state(),
            meta={
                "step": backend.step,
                "backend": backend.name,
                "metrics": dict(metrics),
                "sampler_state": sampler.get_state(),
            },
            extra_files=tokenizer_files,
        )

    if backend.step == 0:
        evaluate_and_save()
    bar = tqdm(
        total=args.max_iters,
        initial=backend.step,
        desc="train",
        unit="step",
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,  # spare log files the redraws
    )
    window_time, window_tokens = 0.0, 0  # for the bar's recent tokens/s
    while backend.step < args.max_iters:
        x, y = sampler.next()
        t0 = time.perf_counter()
        stats = backend.train_step(x, y)
        dt = time.perf_counter() - t0
        if not math.isfinite(stats["loss"]):
            bar.close()
            raise UserError(
                f"the loss became {stats['loss']} at step {backend.step}; "
                "try a lower --lr or keep --grad-clip on"
            )
        train_time += dt
        train_tokens += x.size
        window_time += dt
        window_tokens += x.size
        bar.update(1)
        if backend.step % 10 == 0 or backend.step == args.max_iters:
            bar.set_postfix_str(
                f"loss {stats['loss']:.4f}, lr {stats['lr']:.2e}, "
                f"{window_tokens / window_time:,.0f} tok/s",
                refresh=False,  # drawn at the bar's own pace (mininterval)
            )
            window_time, window_tokens = 0.0, 0
        if backend.step % args.eval_interval == 0 or backend.step == args.max_iters:
            evaluate_and_save()
    bar.close()
    wall = elapsed_before + time.perf_counter() - t_start
    if "val_loss" not in metrics:  # resumed a run that had already finished
        evaluate_and_save()

    # -- summary --------------------------------------------------------------------
    unit = "character" if args.tokenizer == "char" else "token"
    plot_losses(log_path, out / PLOT_FILE, title=f"{backend.name} backend, {out.name}", unit=unit)
    print(f"final val loss {metrics['val_loss']:.4f} (train {metrics['train_loss']:.4f})")
    print(
        f"final val bits per byte {metrics['val_bpb']:.4f} (nats per {unit} "
        f"x {1 / val_bytes_per_token:.4f} {unit}s per byte / ln 2)"
    )
    print(
        f"total wall time {wall:.1f} s; training throughput "
        f"{metrics['tokens_per_s']:,.0f} tokens/s (train steps only, evaluation excluded)"
    )
    print(f"wrote {out / CONFIG_FILE}, {log_path}, {out / PLOT_FILE}")
    if args.sample_tokens:
        print(
            f"--- sample: {args.sample_tokens} {unit}s after a newline, "
            f"temperature {FINAL_SAMPLE['temperature']}, seed {args.seed} ---"
        )
        ids = backend.generate(
            tokenizer.encode("\n"), args.sample_tokens, seed=args.seed, **FINAL_SAMPLE
        )
        print(tokenizer.decode(ids))
    return {**metrics, "wall_s": round(wall, 3)}


def _resume(out: Path, backend, sampler: BatchSampler, config: dict) -> float:
    """Load ``out``'s checkpoint into ``backend`` and ``sampler``; return the
    wall time the earlier run had already spent."""
    try:
        model_state, saved, optimizer_state = load_checkpoint(out)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot resume: {e}") from e
    try:  # a config saved before some GPTConfig fields existed: fill in their defaults
        saved["model"] = dataclasses.asdict(type(backend.config).from_dict(saved["model"]))
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot resume: {out / CONFIG_FILE}: {e}") from e
    for key in ("model", "tokenizer"):
        if saved[key] != config[key]:
            raise UserError(
                f"cannot resume: the {key} in {out / CONFIG_FILE} ({saved[key]}) differs "
                f"from this run's ({config[key]})"
            )
    backend.load_state_dict(model_state)
    if optimizer_state is not None:
        backend.load_optimizer_state(optimizer_state)
    if "sampler_state" in saved:
        sampler.set_state(saved["sampler_state"])
    print(f"resuming from {out} at step {backend.step}")
    return float(saved.get("metrics", {}).get("elapsed_s", 0.0))


def main(args: argparse.Namespace) -> int:
    run(args)
    return 0
