"""``python -m labs train``: train a GPT on Tiny Shakespeare (characters or BPE tokens).

The defaults are nanoGPT's CPU "baby GPT" (config/train_shakespeare_char.py, scaled down
as its README suggests); it ends near a validation loss of 1.9 nats per character. The
same seed gives the same batches on either backend. ``--out`` (default ``runs/<backend>``)
receives ``log.jsonl``, the checkpoint (rewritten atomically at every evaluation) and
``loss.png``. With N processes every rank draws the same batch and keeps its ``B / N``
rows: the one-process run with batch B; rank 0 alone prints and writes.

The steps are in ``train_steps.py``, resuming in ``train_resume.py``, fine-tuning in
``train_init.py``, several processes in ``train_distributed.py``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .. import UserError
from ..plumbing.backends import ATTN_IMPLS, BACKENDS
from ..plumbing.checkpoint_format import parameter_count, physical_memory
from ..plumbing.data import DATA_ENV_VAR
from ..plumbing.tokenization import KINDS
from .shared import (
    add_model_and_optimizer_arguments,
    check_min_lr,
    check_out,
    check_size,
    fraction,
    int_range,
    natural_int,
    number,
    path_text,
    positive_int,
    refuse_to_replace,
    seed_int,
)
from .train_distributed import (
    _init_distributed,
    _shutdown_distributed,
    launch,
    processes_to_start,
)
from .train_init import _prepare_init, load_init_weights
from .train_resume import _prepare_resume
from .train_steps import (
    RUN_OUTPUTS,
    Run,
    _resume_hint,
    build_backend,
    load_data,
    prepare_output,
    run_config,
    summarize,
    train_loop,
)

#: ``--arch``: GPTConfig fields that differ from the GPT-2 defaults. Llama-style (Touvron
#: et al. 2023, sec. 2.2); the head stays tied, so only what the paper changes changes.
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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``train`` command's options (defaults: nanoGPT's CPU baby GPT)."""
    p.add_argument(
        "--backend", choices=BACKENDS, help="required, except with --resume (default: the run's)"
    )
    p.add_argument(
        "--data",
        type=path_text,
        metavar="PATH",
        help=f"Tiny Shakespeare text file (default: ${DATA_ENV_VAR}, the cache, or a download)",
    )
    p.add_argument(
        "--out", type=path_text, metavar="DIR", help="output directory (default: runs/<backend>)"
    )
    p.add_argument(
        "--resume",
        nargs="?",
        const="",
        metavar="DIR",
        help="continue the run whose checkpoint is in DIR (alone: the one in --out), exactly "
        "where it stopped; its recorded settings apply unless given again, and it writes to "
        "--out (default: DIR)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="train into an --out that already holds a run, replacing it (its checkpoint "
        "stays in place until the new run's first one is written); without it, such an "
        "--out is refused",
    )
    p.add_argument(
        "--from-previous",
        action="store_true",
        help="with --resume: if the run's checkpoint is damaged, continue from the older "
        "one in DIR/.previous (the steps after it are lost)",
    )
    p.add_argument(
        "--init-from",
        metavar="RUN",
        help="fine-tune the checkpoint in RUN (a run, or an import): its model and tokenizer, "
        "a fresh optimizer at step 0, the text of --data",
    )
    p.add_argument("--max-iters", type=positive_int, default=2000, help="optimizer steps")
    p.add_argument("--seed", type=seed_int, default=1337, help="weights and batches")
    p.add_argument(
        "--tokenizer",
        choices=KINDS,
        default="char",
        help="characters, or byte-level BPE trained by the backend's own implementation",
    )
    p.add_argument(
        "--vocab-size",
        type=int_range(1, 2**20),
        default=1000,
        help="BPE vocabulary size (with --tokenizer bpe)",
    )
    g, o = add_model_and_optimizer_arguments(
        p,
        n_layers=(4, "transformer blocks"),
        batch_size=(
            12,
            "sequences per step B (per micro-batch with --grad-accum; with several "
            "processes: in all, split over them)",
        ),
        dropout=0.0,
        lr=1e-3,
        warmup_iters=100,
        weight_decay=0.1,
        eval_interval=250,
        d_model=128,
        d_ff_help="FFN hidden width (default: 4 d_model for gpt2; for llama, the multiple of 8 "
        "that brings the parameter count closest to gpt2's)",
        attn_impl=(
            ATTN_IMPLS,
            None,
            "attention: the backend's fast path (the default; 'sdpa' and 'flash' both name "
            "it: torch's fused kernel, NumPy's FlashAttention tiles) or 'explicit', the formula "
            "written out",
        ),
    )
    g.add_argument(
        "--arch",
        choices=tuple(ARCHS),
        default="gpt2",
        help="gpt2: learned positions, LayerNorm, GELU MLP, biases (default); llama: RoPE, "
        "RMSNorm, SwiGLU, no biases, d_ff chosen for the gpt2 model's parameter count",
    )
    g.add_argument("--block-size", type=positive_int, default=64, help="context length T")
    g.add_argument(
        "--n-kv-heads",
        type=positive_int,
        default=None,
        help="llama: key/value heads, dividing --n-heads (grouped-query attention; 1: "
        "multi-query; default: --n-heads)",
    )
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
        "--no-fast",
        dest="fast",
        action="store_false",
        help="numpy backend: train the formulas the chapters write, without the fast backend "
        "(numpy_impl/fast.py)",
    )
    g.add_argument(
        "--amp",
        choices=("bf16", "fp16"),
        default=None,
        help="torch backend: mixed precision, the forward under torch.autocast in bfloat16 or "
        "float16 (fp16: with a GradScaler); weights and AdamW stay float32 (default: off)",
    )
    g.add_argument(
        "--device",
        default="cpu",
        help="torch backend: where the model runs (cpu, cuda, cuda:1, ...); under torchrun "
        "with cuda, process N uses cuda:N",
    )
    o.add_argument(
        "--grad-accum",
        type=positive_int,
        default=1,
        help="micro-batches of --batch-size sequences per step, gradients added before the "
        "update: the step of a batch N times larger, one micro-batch's activations in memory",
    )
    o.add_argument(
        "--lr-decay-iters",
        type=natural_int,
        default=None,
        help="step where the cosine reaches --min-lr (default: --max-iters, "
        "at least --warmup-iters + 1)",
    )
    o.add_argument("--beta1", type=fraction, default=0.9, help="AdamW first-moment decay")
    o.add_argument("--beta2", type=fraction, default=0.99, help="AdamW second-moment decay")
    o.add_argument(
        "--grad-clip",
        type=number(0, what=" (0: no clipping)"),
        default=1.0,
        help="0 disables clipping",
    )
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-batches", type=positive_int, default=20, help="fixed batches per split")
    g.add_argument(
        "--eval-batch-size", type=positive_int, default=60, help="sequences per eval batch"
    )
    g.add_argument(
        "--sample-tokens", type=natural_int, default=500, help="sample printed at the end"
    )
    g = p.add_argument_group("processes")
    g.add_argument(
        "--processes",
        type=positive_int,
        default=None,
        help="data-parallel ranks this command starts, each on its share of the batch "
        "(lowered to the largest count dividing --batch-size; default: $TWINFORMER_PROCESSES, "
        "else one per core for the numpy backend, 1 for torch; under torchrun: torchrun's)",
    )
    g.add_argument(
        "--bucket-mb",
        type=number(0),
        default=25.0,
        help="several ranks: gradients all-reduced in buckets of this many MiB, each started "
        "as soon as backward has filled it (0: one per block; DDP's bucket_cap_mb)",
    )


def _check_args(args: argparse.Namespace) -> None:
    """Every option, before anything is read or written, whichever the backend."""
    if args.backend is None:
        raise UserError("--backend is required (numpy or torch), except with --resume DIR")
    check_out(args.out)
    if args.from_previous and args.resume is None:
        raise UserError("--from-previous goes with --resume DIR")
    _check_device(args)
    check_min_lr(args)
    evaluated = 2 * args.eval_batches * args.eval_batch_size * args.block_size  # x, y: int64
    if evaluated * 8 > (physical_memory() or float("inf")):
        raise UserError(
            f"--eval-batches {args.eval_batches} x --eval-batch-size {args.eval_batch_size} x "
            f"--block-size {args.block_size}: the fixed evaluation batches would not fit in memory"
        )
    if args.n_kv_heads is not None and (args.arch != "llama" or args.n_heads % args.n_kv_heads):
        raise UserError(
            f"--n-kv-heads {args.n_kv_heads}: needs --arch llama and to divide --n-heads"
        )
    if not args.fast and args.backend == "torch":
        raise UserError(
            "--no-fast: the torch backend runs PyTorch's own kernels; running the chapters' "
            "formulas instead of numpy_impl/fast.py is the numpy backend's choice"
        )
    if args.amp is not None and args.backend != "torch":
        raise UserError(
            f"--amp {args.amp}: the {args.backend} backend computes in --dtype only; mixed "
            "precision (torch.autocast) is the torch backend's"
        )
    if args.amp is not None and args.dtype != "float32":
        raise UserError(f"--amp {args.amp} keeps float32 weights: drop --dtype {args.dtype}")
    if args.lr_decay_iters is not None and args.lr_decay_iters <= args.warmup_iters:
        raise UserError(
            f"--lr-decay-iters ({args.lr_decay_iters}) must exceed --warmup-iters "
            f"({args.warmup_iters})"
        )


def _check_device(args: argparse.Namespace) -> None:
    """``--device``: cpu for NumPy; for torch, a device torch names and this machine has."""
    if args.backend == "numpy":
        if args.device != "cpu":
            raise UserError(f"--device {args.device}: the numpy backend runs on the CPU only")
        return
    import torch

    try:
        device = torch.device(args.device)
    except (RuntimeError, ValueError, TypeError) as e:
        raise UserError(
            f"--device {args.device}: not a device torch knows (cpu, cuda, cuda:1, ...)"
        ) from e
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"--device {args.device}: this machine has no CUDA device for torch")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UserError(
            f"--device {args.device}: this machine has {torch.cuda.device_count()} CUDA devices"
        )
    if device.type not in ("cpu", "cuda"):
        raise UserError(f"--device {args.device}: the torch backend runs on cpu or cuda")


def _decay_iters(args: argparse.Namespace) -> int:
    # When max_iters <= warmup_iters the run ends inside the warmup; any decay
    # point after it gives the same rates (and decay > warmup keeps a cosine phase).
    if args.lr_decay_iters is not None:
        return args.lr_decay_iters
    return max(args.max_iters, args.warmup_iters + 1)


def matched_d_ff(model_config: dict, multiple_of: int = 8) -> tuple[int, int, int]:
    """``(d_ff, its parameter count, the gpt2 model's)``: the SwiGLU width, a multiple of
    ``multiple_of`` (Llama's rounding), that brings the model of ``model_config`` closest
    to the gpt2 model of the same vocabulary, context, depth, heads and width."""
    keys = ("vocab_size", "block_size", "n_layers", "n_heads", "d_model")
    target = parameter_count({k: model_config[k] for k in keys})
    at = {f: parameter_count({**model_config, "d_ff": f}) for f in (multiple_of, 2 * multiple_of)}
    per_unit = (at[2 * multiple_of] - at[multiple_of]) / multiple_of  # parameters per hidden unit
    best = max(1, round((target - at[multiple_of]) / per_unit / multiple_of) + 1) * multiple_of
    return best, parameter_count({**model_config, "d_ff": best}), target


def _check_size(args: argparse.Namespace, model_config: dict) -> None:
    """Refuse a model that cannot train in this machine's memory, before allocating it."""
    B, T, C = args.batch_size, args.block_size, args.d_model
    V, L = model_config["vocab_size"], args.n_layers
    logits = 2 * B * T * V  # the logits and their gradient
    per_layer = B * T * C * 8 + B * args.n_heads * T * T  # a few (B, T, C) and the scores
    check_size(parameter_count(model_config), logits + L * per_layer, args.dtype, args.device)


def _model_config(args: argparse.Namespace, vocab_size: int) -> dict:
    """The GPTConfig fields of ``--arch`` and the model options; for llama without
    ``--d-ff``, the width that matches the gpt2 model's parameter count (said)."""
    keys = ("block_size", "n_layers", "n_heads", "d_model", "dropout", "bias", "d_ff", "n_kv_heads")
    model_config = {"vocab_size": vocab_size, **{k: getattr(args, k) for k in keys}}
    model_config |= {"gelu_approximate": args.gelu, **ARCHS[args.arch]}  # llama: no --bias
    if args.arch == "llama" and args.d_ff is None:
        d_ff, n_params, n_gpt2 = matched_d_ff(model_config)
        model_config["d_ff"] = d_ff
        print(
            f"llama: d_ff {d_ff} gives {n_params:,} parameters; the gpt2 model of the "
            f"same size has {n_gpt2:,} ({100 * (n_params / n_gpt2 - 1):+.2f}%)"
        )
    return model_config


def _optimizer_config(args: argparse.Namespace) -> dict:
    """AdamW's settings and the learning-rate schedule (the backends' ``train_config``)."""
    keys = ("lr", "min_lr", "warmup_iters", "weight_decay", "beta1", "beta2", "grad_clip")
    return {**{k: getattr(args, k) for k in keys}, "lr_decay_iters": _decay_iters(args)}


def run(args: argparse.Namespace) -> dict:
    """Train as ``args`` says; print progress; return the final metrics.

    Raises:
        UserError: a missing corpus, bad arguments, an unusable checkpoint to resume.
    """
    resumed = _prepare_resume(args) if args.resume is not None else None
    init = _prepare_init(args, resumed)
    _check_args(args)
    out = Path(args.out or (resumed.directory if resumed else f"runs/{args.backend}"))
    check_out(out)
    if init is not None and resumed is None and out.resolve() == init.directory.resolve():
        raise UserError(
            f"--out {out} is the --init-from checkpoint: a fine-tuned run writes a new directory"
        )
    continuing = resumed is not None and out.resolve() == resumed.directory.resolve()
    if not continuing:  # said now, before the corpus is read; checked again under the lock
        refuse_to_replace(out, RUN_OUTPUTS, args.overwrite, _resume_hint(out), "train")
    rank, world = _init_distributed(args)
    if args.batch_size % world:
        raise UserError(
            f"--batch-size {args.batch_size} is the whole step's batch, split over the "
            f"{world} processes: it must be divisible by {world}"
        )
    say = print if rank == 0 else (lambda *a, **k: None)  # one voice, not one per process

    data = load_data(args, init.tokenizer if init else None)
    model_config = init.model_config if init else _model_config(args, data.tokenizer.vocab_size)
    _check_size(args, model_config)
    train_config = _optimizer_config(args)
    backend = build_backend(args, model_config, train_config, world)
    config, tokenizer_files = run_config(args, backend, data, train_config)
    this = Run(args, backend, data, config, tokenizer_files, out, rank, world)
    try:
        return _train(this, resumed, init, say)
    finally:
        if this.lock is not None:
            this.lock.release()  # (a process that ends releases it anyway)


def _train(this: Run, resumed, init, say) -> dict:
    """Take the output directory, train, summarize; return the final metrics."""
    args, backend, data, out, world = this.args, this.backend, this.data, this.out, this.world
    prepare_output(this, resumed, say)
    if init is not None and resumed is None:
        load_init_weights(this, init, say)
    say(
        f"{backend.name} backend ({_how_it_runs(backend)}), "
        f"{backend.num_parameters():,} parameters, "
        f"vocab {data.tokenizer.vocab_size}, {len(data.train_ids):,} train / "
        f"{len(data.val_ids):,} val tokens from {data.corpus_path}; writing to {out}/"
        + (
            f"; {world} processes, {args.batch_size // world} sequences each per step"
            if world > 1
            else ""
        )
        + (
            f"; {args.grad_accum} micro-batches of {args.batch_size} per step"
            if args.grad_accum > 1
            else ""
        )
    )
    wall = train_loop(this, resumed)
    if this.rank == 0:
        summarize(this, wall)
    return {**this.metrics, "wall_s": round(wall, 3)}


def _how_it_runs(backend) -> str:
    """``attention flash, fast backend, 2 threads``: how the model runs."""
    impl = getattr(backend.model, "attn_impl", None)
    if backend.name == "numpy":
        from threadpoolctl import threadpool_info

        threads = max((p["num_threads"] for p in threadpool_info()), default=1)
        impl = f"{impl}, {'fast backend' if backend.fast else 'the formulas as written'}"
    else:
        import torch

        threads = torch.get_num_threads()
    return f"attention {impl}, {threads} thread{'s' if threads != 1 else ''}"


def main(args: argparse.Namespace) -> int:
    n = processes_to_start(args)
    if n > 1:
        if args.resume is None:
            _check_args(args)  # said here once, before any rank starts
        return launch(args, n)
    run(args)
    _shutdown_distributed()  # after a failure, the process leaves the group by exiting
    return 0
