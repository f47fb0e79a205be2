"""``python -m labs seq2seq``: an encoder-decoder Transformer learns to reverse (or sort) digits.

A task with a known answer (:class:`SequenceTask`): 3 to 12 digits, reversed (or sorted).
Training is teacher-forced on fresh sequences; the held-out set is decoded greedily and
scored by exact match, EOS included. ``--out`` (default ``runs/seq2seq-<backend>``)
receives ``log.jsonl`` and ``metrics.json``.
"""

from __future__ import annotations

import argparse

import numpy as np

from .. import UserError
from ..plumbing.tasks import TaskModel
from ..plumbing.tasks_sequence import BOS, EOS, SequenceTask
from .shared import (
    TaskOutput,
    add_task_arguments,
    batches,
    check_min_lr,
    check_task_size,
    int_range,
    positive_int,
    task_out,
    train_task,
    training_options,
)

MAX_N_VAL = 100_000
#: The longest --max-len: every evaluation decodes each held-out sequence token by token,
#: so its time grows with the square of the length.
MAX_LEN = 32


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_task_arguments(
        p,
        "seq2seq",
        "weights, held-out set and batches",
        max_iters=1500,
        n_layers=(2, "blocks in encoder and decoder"),
        batch_size=(64, "sequences per step"),
        dropout=0.0,
        lr=1e-3,
        warmup_iters=100,
        weight_decay=0.01,
        eval_interval=250,
    )
    p.add_argument(
        "--task", choices=SequenceTask.TASKS, default="reverse", help="what to map each sequence to"
    )
    p.add_argument("--min-len", type=positive_int, default=3, help="shortest sequence")
    p.add_argument(
        "--max-len",
        type=int_range(1, MAX_LEN),
        default=12,
        help=f"longest sequence (at most {MAX_LEN}: evaluations decode token by token)",
    )
    p.add_argument(
        "--n-val",
        type=int_range(1, MAX_N_VAL),
        default=1000,
        help=f"held-out sequences (at most {MAX_N_VAL:,}), each decoded at every evaluation",
    )


def evaluate(model: TaskModel, task: SequenceTask, batch_size: int = 250) -> dict:
    """Greedy decoding of the held-out set: exact-match rate and per-token accuracy."""
    hits, tokens_right, tokens = [], 0, 0
    for sl in batches(len(task.val), batch_size):
        seqs = task.val[sl]
        b = task.batch(seqs)
        out = model.generate(b["src"], b["src_mask"], task.max_len + 1, BOS, EOS)
        hits.append(task.exact_match(out, seqs))
        for row, s in zip(out, seqs, strict=True):
            want = np.append(3 + task.answer(s), EOS)
            got = np.full(len(want), -1)
            got[: min(len(want), len(row))] = row[: len(want)]
            tokens_right += int((got == want).sum())
            tokens += len(want)
    hits = np.concatenate(hits)
    return {"exact_match": float(hits.mean()), "token_accuracy": tokens_right / tokens}


def run(args: argparse.Namespace) -> dict:
    """Build the task, train, decode the held-out set; return the final metrics.

    Raises:
        UserError: bad arguments.
    """
    check_min_lr(args)
    if args.min_len > args.max_len:
        raise UserError(f"--min-len ({args.min_len}) must not exceed --max-len ({args.max_len})")
    n_possible = sum(SequenceTask.n_digits**n for n in range(args.min_len, args.max_len + 1))
    if args.n_val > n_possible // 2:  # the held-out set takes at most half of them
        lengths = (
            f"{args.min_len} to {args.max_len} digits"
            if args.min_len != args.max_len
            else f"{args.max_len} digit{'s' if args.max_len > 1 else ''}"
        )
        raise UserError(
            f"--n-val must be at most {n_possible // 2:,} (half of the {n_possible:,} "
            f"sequences of {lengths}), got {args.n_val:,}"
        )
    check_task_size(args, 13, 13, decoder=True, block_size=args.max_len + 1)
    out_dir = task_out(args, "seq2seq")  # before the work
    try:
        task = SequenceTask(args.task, args.min_len, args.max_len, args.n_val, args.seed)
        model = TaskModel(
            args.backend,
            "seq2seq",
            {
                "src_vocab_size": task.vocab_size,
                "tgt_vocab_size": task.vocab_size,
                "block_size": task.max_len + 1,
                "n_encoder_layers": args.n_layers,
                "n_decoder_layers": args.n_layers,
                "n_heads": args.n_heads,
                "d_model": args.d_model,
                "d_ff": args.d_ff,
                "dropout": args.dropout,
            },
            **training_options(args),
        )
    except ValueError as e:
        raise UserError(str(e)) from e

    def sequences():
        while True:
            b = task.batch(task.train_sequences(args.batch_size))
            inputs = {k: b[k] for k in ("src", "src_mask", "tgt_mask")} | {"tgt": b["tgt_in"]}
            yield inputs, b["tgt_out"]

    def say(row: dict) -> str:
        return (
            f"step {row['step']:5d}: train loss {row['train_loss']:.4f}, held-out exact "
            f"match {row['exact_match']:.1%}, tokens {row['token_accuracy']:.2%}, "
            f"{row['elapsed_s']:.0f} s"
        )

    with TaskOutput(out_dir, args.overwrite, "seq2seq") as output:
        print(
            f"{args.backend} backend, {model.num_parameters():,} parameters; task {args.task}: "
            f"{args.min_len} to {args.max_len} digits, {len(task.val)} held-out sequences"
        )
        metrics = train_task(model, args, output, sequences(), lambda: evaluate(model, task), say)
        b = task.batch(task.val[:3])
        examples = model.generate(b["src"], b["src_mask"], task.max_len + 1, BOS, EOS)
        for s, g in zip(task.val[:3], examples, strict=True):
            print(f"  {''.join(map(str, s))} -> {task.decode(g)}")
        metrics = {**metrics, "task": args.task, "backend": args.backend, "n_val": len(task.val)}
        output.finish(metrics)
        print(
            f"held-out exact match {metrics['exact_match']:.1%} over {len(task.val)} sequences; "
            f"wrote {output.metrics_path}"
        )
        return metrics


def main(args: argparse.Namespace) -> int:
    run(args)
    return 0
