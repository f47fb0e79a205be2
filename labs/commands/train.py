"""``python -m labs train``: train a GPT on Tiny Shakespeare (characters or BPE tokens).

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

``--resume DIR`` continues the run in DIR exactly where its checkpoint stopped
(weights, AdamW state and step, hence the schedule; the batch sampler's and
the dropout generator's states; the recorded settings, unless given again).

Under ``torchrun --nproc_per_node N`` (torch backend), the N processes train
one model with DistributedDataParallel: ``--batch-size`` is the step's whole
batch, which every process draws from the same seeded sampler before keeping
its own ``B / N`` rows, so the run is the one-process run with batch B. Each
process draws its own dropout masks (rank r > 0 reseeds with seed + r); the
checkpoint holds every rank's generator state. Rank 0 alone prints and writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

from .. import UserError
from ..plumbing.backends import BACKENDS, NonFiniteError, make_backend
from ..plumbing.checkpoint import load_checkpoint, save_checkpoint
from ..plumbing.checkpoint_format import (
    CONFIG_FILE,
    MODEL_FILE,
    OPTIMIZER_FILE,
    CheckpointError,
    expected_shapes,
)
from ..plumbing.data import (
    DATA_ENV_VAR,
    BatchSampler,
    CorpusUnavailableError,
    fixed_eval_batches,
    load_corpus,
    resolve_corpus,
    train_val_split,
)
from ..plumbing.tokenization import (
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
    p.add_argument(
        "--backend", choices=BACKENDS, help="required, except with --resume (default: the run's)"
    )
    p.add_argument(
        "--data",
        metavar="PATH",
        help=f"Tiny Shakespeare text file (default: ${DATA_ENV_VAR}, the cache, or a download)",
    )
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/<backend>)")
    p.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="DIR",
        help="continue the run whose checkpoint is in DIR (alone: the one in --out), exactly "
        "where it stopped; its recorded settings apply unless given again, and it writes to "
        "--out (default: DIR)",
    )
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
    g.add_argument(
        "--device",
        default="cpu",
        help="torch backend: where the model runs (cpu, cuda, cuda:1, ...); under torchrun "
        "with cuda, process N uses cuda:N",
    )
    g = p.add_argument_group("optimization")
    g.add_argument(
        "--batch-size",
        type=int,
        default=12,
        help="sequences per step B (under torchrun: in all, split over the processes)",
    )
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
    if args.backend is None:
        raise UserError("--backend is required (numpy or torch), except with --resume DIR")
    if not 0 <= args.seed < 2**63:
        raise UserError(f"--seed must lie in [0, 2**63), got {args.seed}")
    if args.d_ff is not None and args.d_ff < 1:
        raise UserError(f"--d-ff must be >= 1, got {args.d_ff}")
    positive = ("max_iters", "block_size", "n_layers", "n_heads", "d_model", "batch_size")
    for name in (*positive, "eval_interval", "eval_batches", "eval_batch_size"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.warmup_iters < 0 or args.sample_tokens < 0:
        raise UserError("--warmup-iters and --sample-tokens must be >= 0")
    # checked here, not by each backend: the NumPy schedule took a negative --min-lr that the
    # torch scheduler refuses, and a negative or NaN --grad-clip silently meant "no clipping"
    if not (math.isfinite(args.min_lr) and args.min_lr >= 0):
        raise UserError(f"--min-lr must be a finite number >= 0, got {args.min_lr}")
    if not (math.isfinite(args.grad_clip) and args.grad_clip >= 0):
        raise UserError(
            f"--grad-clip must be a finite number >= 0 (0: no clipping), got {args.grad_clip}"
        )
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

    resumed = _prepare_resume(args) if args.resume is not None else None
    _check_args(args)
    out = Path(args.out or (resumed.directory if resumed else f"runs/{args.backend}"))
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: is a file, not a directory")
    rank, world = _init_distributed(args)
    if args.batch_size % world:
        raise UserError(
            f"--batch-size {args.batch_size} is the whole step's batch, split over the "
            f"{world} processes: it must be divisible by {world}"
        )
    say = print if rank == 0 else (lambda *a, **k: None)  # one voice, not one per process

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
            device=_device(args, world),
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    if world > 1:
        backend.distribute()  # DistributedDataParallel: gradients averaged over the ranks
    model_config = dataclasses.asdict(backend.config)  # every field, defaults filled in
    train_args = {k: v for k, v in vars(args).items() if k not in ("command", "func", "argv")}
    train_args.update(data=str(corpus_path), lr_decay_iters=train_config["lr_decay_iters"])
    tokenizer_section, tokenizer_files = tokenizer_config(tokenizer)
    config = {"model": model_config, "tokenizer": tokenizer_section, "train": train_args}

    log_path = out / LOG_FILE
    elapsed_before = 0.0  # wall time of the run we resume, if any
    if rank == 0:
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"--out {out}: cannot create the directory ({e.strerror})") from e
    if resumed is not None:
        elapsed_before = _resume(resumed, backend, sampler, config, say)
        if rank == 0:
            _copy_log(resumed.directory / LOG_FILE, log_path, backend.step)
    elif rank == 0:
        log_path.unlink(missing_ok=True)  # a fresh run gets a fresh log

    say(
        f"{backend.name} backend, {backend.num_parameters():,} parameters, "
        f"vocab {tokenizer.vocab_size}, {len(train_ids):,} train / {len(val_ids):,} val "
        f"tokens from {corpus_path}; writing to {out}/"
        + (f"; {world} processes, {B // world} sequences each per step" if world > 1 else "")
    )

    # -- the loop -------------------------------------------------------------------
    t_start = time.perf_counter()
    train_time, train_tokens = 0.0, 0  # time in train_step only, for tokens/s
    metrics: dict = {}
    last_saved = [backend.step]  # step of the last checkpoint written (or resumed from)

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
        metrics.update(row, tokens_per_s=round(tok_s, 1))
        rng_state = backend.rng_state()  # under DDP: gathered from every rank
        if rank != 0:
            return  # every rank evaluates (same weights, same batches); rank 0 writes
        with open(log_path, "a") as f:
            f.write(json.dumps(row) + "\n")
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
                "rng_state": rng_state,  # the dropout masks to come
            },
            extra_files=tokenizer_files,
        )
        last_saved[0] = backend.step

    if backend.step == 0 and resumed is None:  # (a run resumed at 0 has logged step 0)
        evaluate_and_save()
    bar = tqdm(
        total=args.max_iters,
        initial=backend.step,
        desc="train",
        unit="step",
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,  # spare log files the redraws
        disable=rank != 0,
    )
    window_time, window_tokens = 0.0, 0  # for the bar's recent tokens/s
    b = B // world
    while backend.step < args.max_iters:
        x, y = sampler.next()  # every rank draws the same (B, T) batch...
        x, y = x[rank * b : (rank + 1) * b], y[rank * b : (rank + 1) * b]  # ...and keeps its b
        t0 = time.perf_counter()
        try:
            stats = backend.train_step(x, y)
        except NonFiniteError as e:
            bar.close()
            raise UserError(
                f"training stopped at step {e.step}: the loss is {e.loss} and the gradient "
                f"norm {e.grad_norm}; "
                + (
                    f"the first parameter whose gradient is non-finite is {e.parameter}"
                    if e.parameter is not None
                    else "every gradient is finite"
                )
                + f". The last good checkpoint (step {last_saved[0]}) is kept in {out}, not "
                "overwritten. Try a lower --lr or keep --grad-clip on"
            ) from e
        dt = time.perf_counter() - t0
        train_time += dt
        train_tokens += x.size * world
        window_time += dt
        window_tokens += x.size * world
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

    if rank != 0:
        return {**metrics, "wall_s": round(wall, 3)}

    # -- summary --------------------------------------------------------------------
    unit = "character" if args.tokenizer == "char" else "token"
    plot_losses(log_path, out / PLOT_FILE, title=f"{backend.name} backend, {out}", unit=unit)
    print(f"final val loss {metrics['val_loss']:.4f} (train {metrics['train_loss']:.4f})")
    print(
        f"final val bits per byte {metrics['val_bpb']:.4f} (nats per {unit} "
        f"x {1 / val_bytes_per_token:.4f} {unit}s per byte / ln 2)"
    )
    print(
        f"total wall time {wall:.1f} s; training throughput "
        f"{metrics['tokens_per_s']:,.0f} tokens/s (train steps only, evaluation excluded)"
    )
    written = [out / MODEL_FILE, out / CONFIG_FILE]
    if (out / OPTIMIZER_FILE).is_file():
        written.append(out / OPTIMIZER_FILE)
    print(f"wrote {', '.join(map(str, [*written, log_path, out / PLOT_FILE]))}")
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


@dataclasses.dataclass
class _Resumed:
    """The checkpoint a run continues from."""

    directory: Path
    model_state: dict
    config: dict
    optimizer_state: dict | None


#: Recorded settings that a resumed run never takes over.
_NOT_RESTORED = ("resume", "out", "command", "func", "argv", "device")  # device: the machine's


def _given_options(args: argparse.Namespace) -> set[str]:
    """The options the command line set explicitly (``args.argv``, kept by
    ``labs/__main__.py``); all of them when there is no command line."""
    argv = getattr(args, "argv", None)
    if argv is None:
        return set(vars(args))
    probe = argparse.ArgumentParser(add_help=False)
    add_arguments(probe)
    # Every default replaced by a marker: what is not the marker came from the command line.
    unset = object()
    probe.set_defaults(**dict.fromkeys(vars(args), unset))
    given, _ = probe.parse_known_args(argv)
    return {k for k, v in vars(given).items() if v is not unset}


def _prepare_resume(args: argparse.Namespace) -> _Resumed:
    """Load the checkpoint to resume and fill ``args`` with the run's recorded
    settings, except those the command line gives again (those win, and are
    listed). ``--data`` falls back to the usual search if the recorded file is gone.

    Raises:
        UserError: no checkpoint, or an unusable one (the reason named); a
            ``--max-iters`` not above the checkpoint's step (nothing to train).
    """
    if args.resume:
        directory = Path(args.resume)
    elif args.out or args.backend:
        directory = Path(args.out or f"runs/{args.backend}")
    else:
        raise UserError("--resume: give the run's directory, --resume DIR")
    try:
        model_state, saved, optimizer_state = load_checkpoint(directory)
    except (OSError, CheckpointError) as e:
        raise UserError(f"cannot resume: {e}") from e
    given = _given_options(args)
    changed = []
    for key, value in (saved.get("train") or {}).items():
        if key in _NOT_RESTORED or not hasattr(args, key):
            continue
        if key in given:
            if getattr(args, key) != value:
                changed.append(f"--{key.replace('_', '-')} {value} -> {getattr(args, key)}")
        elif key == "data" and value is not None and not Path(value).is_file():
            continue  # moved: look for the corpus as a fresh run would
        else:
            setattr(args, key, value)
    step = int(saved.get("step", 0))
    if args.max_iters <= step:  # no step to run: refuse before anything is rewritten
        raise UserError(
            f"--max-iters {args.max_iters}: the checkpoint in {directory} is already at step "
            f"{step}; give --max-iters above {step} to continue it (python -m labs sample "
            "samples from it as it is)"
        )
    if changed and os.environ.get("RANK", "0") == "0":  # under torchrun: said once
        print(f"resuming with changed settings: {', '.join(changed)}")
    return _Resumed(directory, model_state, saved, optimizer_state)


def _resume(resumed: _Resumed, backend, sampler: BatchSampler, config: dict, say=print) -> float:
    """Load the checkpoint into ``backend`` (weights, optimizer, schedule, dropout
    RNG) and ``sampler``; return the wall time the earlier run had already spent."""
    directory, saved = resumed.directory, resumed.config
    try:  # a config saved before some GPTConfig fields existed: fill in their defaults
        saved["model"] = dataclasses.asdict(type(backend.config).from_dict(saved["model"]))
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot resume: {directory / CONFIG_FILE}: {e}") from e
    for key in ("tokenizer", "model"):  # the tokenizer first: a new corpus changes both
        if saved[key] != config[key]:
            fields = sorted(set(saved[key]) | set(config[key]))
            diffs = [
                f"{f} {saved[key].get(f)!r} there, {config[key].get(f)!r} here"
                for f in fields
                if saved[key].get(f) != config[key].get(f)
            ]
            raise UserError(
                f"cannot resume: the {key} in {directory / CONFIG_FILE} differs from this "
                f"run's: " + "; ".join(d if len(d) < 200 else d[:200] + "..." for d in diffs)
            )
    try:
        backend.load_state_dict(resumed.model_state)
    except CheckpointError as e:
        raise UserError(f"cannot resume from {directory}: {e}") from e
    if resumed.optimizer_state is not None:
        backend.load_optimizer_state(resumed.optimizer_state)
    if "sampler_state" in saved:
        sampler.set_state(saved["sampler_state"])
    rng_state = saved.get("rng_state")
    if rng_state is not None and rng_state.get("backend") == backend.name:
        backend.set_rng_state(rng_state)
    elif backend.config.dropout > 0:
        say(
            f"note: the dropout generator's state in {directory} is not the {backend.name} "
            "backend's; the dropout masks from here on differ from the original run's"
        )
    say(f"resuming from {directory} at step {backend.step}")
    return float(saved.get("metrics", {}).get("elapsed_s", 0.0))


def _copy_log(src: Path, dst: Path, step: int) -> None:
    """Keep the rows of ``src`` up to ``step`` in ``dst`` (later rows belong to a
    stretch of the run that the checkpoint does not hold)."""
    rows = []
    if src.is_file():
        for line in src.read_text().splitlines():
            if line.strip() and json.loads(line)["step"] <= step:
                rows.append(line + "\n")
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text("".join(rows))
    os.replace(tmp, dst)


# -- several processes: torchrun ---------------------------------------------------
def _init_distributed(args: argparse.Namespace) -> tuple[int, int]:
    """``(rank, world_size)``: ``(0, 1)`` in a plain process; under ``torchrun``
    with more than one process, joins the process group: gloo on the CPU, nccl
    with ``--device cuda``.

    Raises:
        UserError: several processes but ``--backend numpy``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if args.backend != "torch":
        raise UserError(
            f"{world} processes (torchrun): multi-process training needs --backend torch"
        )
    import torch.distributed as dist

    if not dist.is_initialized():
        if args.device.startswith("cuda"):  # NVIDIA's collectives for CUDA tensors
            import torch

            torch.cuda.set_device(_device(args, world))
            dist.init_process_group("nccl")
        else:
            dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


def _device(args: argparse.Namespace, world: int) -> str:
    """``--device``, except under torchrun with cuda: one GPU per process, cuda:LOCAL_RANK."""
    if world > 1 and args.device.startswith("cuda"):
        return f"cuda:{os.environ.get('LOCAL_RANK', '0')}"
    return args.device


def _shutdown_distributed() -> None:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch.distributed as dist

        if dist.is_initialized():
            # leave together: a rank that tears gloo down while rank 0 still writes its
            # checkpoint and sample can abort ("terminate called without an active exception")
            try:
                dist.barrier()
            finally:
                dist.destroy_process_group()


def main(args: argparse.Namespace) -> int:
    try:
        run(args)
    finally:
        _shutdown_distributed()
    return 0
