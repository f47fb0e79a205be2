"""What ``labs classify`` and ``labs seq2seq`` share: the model and optimization
options (each command with its own defaults), their checks, and the loops' helpers."""

from __future__ import annotations

import math

import numpy as np


def add_model_and_optimizer_arguments(
    p,
    *,
    n_layers: tuple[int, str],
    batch_size: tuple[int, str],
    dropout: float,
    lr: float,
    warmup_iters: int,
    weight_decay: float,
    eval_interval: int,
):
    """The "model" and "optimization" option groups ``labs classify`` and ``labs seq2seq``
    share, with each command's defaults (``n_layers`` and ``batch_size``: default and
    help text). Returns the model group, for a command's own model options."""
    g = p.add_argument_group("model")
    g.add_argument("--n-layers", type=int, default=n_layers[0], help=n_layers[1])
    g.add_argument("--n-heads", type=int, default=4, help="attention heads per block")
    g.add_argument("--d-model", type=int, default=64, help="width of the residual stream")
    g.add_argument("--d-ff", type=int, default=None, help="FFN width (default: 4 d_model)")
    g.add_argument("--dropout", type=float, default=dropout, help="dropout probability")
    g.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype"
    )
    g.add_argument("--attn-impl", choices=("sdpa", "explicit"), default="sdpa", help="torch only")
    o = p.add_argument_group("optimization")
    o.add_argument("--batch-size", type=int, default=batch_size[0], help=batch_size[1])
    o.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    o.add_argument("--min-lr", type=float, default=1e-4, help="final learning rate")
    o.add_argument("--warmup-iters", type=int, default=warmup_iters, help="linear warmup steps")
    o.add_argument(
        "--weight-decay", type=float, default=weight_decay, help="AdamW decay of the matrices"
    )
    o.add_argument(
        "--eval-interval", type=int, default=eval_interval, help="steps between evaluations"
    )
    return g


def training_options(args) -> dict:
    """The optimizer and runtime keyword arguments of :class:`TaskModel`, from the
    options ``labs classify`` and ``labs seq2seq`` share (the schedule decays over
    ``--max-iters``)."""
    return {
        "seed": args.seed,
        "lr": args.lr,
        "min_lr": args.min_lr,
        "warmup_iters": args.warmup_iters,
        "lr_decay_iters": args.max_iters,
        "weight_decay": args.weight_decay,
        "dtype": args.dtype,
        "attn_impl": args.attn_impl,
    }


def batches(n: int, batch_size: int):
    """Slices ``[i, i + batch_size)`` covering ``range(n)``."""
    for i in range(0, n, batch_size):
        yield slice(i, min(i + batch_size, n))


def fmt_seconds(s: float) -> str:
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def check_positive(args, names: tuple[str, ...]) -> None:
    """Raise ``UserError`` naming the first option in ``names`` that is < 1."""
    from .. import UserError

    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def mean_or_nan(values) -> float:
    values = list(values)
    return float(np.mean(values)) if values else math.nan
