"""``python -m labs classify``: who says this speech? A TransformerClassifier on Tiny Shakespeare.

The labelled task is built from the corpus itself
(:func:`labs.plumbing.tasks_speakers.speaker_dataset`): the speeches of the N
most frequent speakers (N = 4: GLOUCESTER, DUKE
VINCENTIO, MENENIUS, ROMEO, from four plays), split by speech into a training
set and a held-out set (80 / 20, stratified per speaker). The model reads the
first ``--block-size`` tokens of a speech, shorter speeches padded and masked,
and predicts the speaker; training speeches longer than that are read from a
random window each time they are drawn. Tokens are lower-cased words (a
vocabulary of the 2000 most frequent words of the training speeches, the rest
``<unk>``) or, with ``--tokenizer char``, characters (the CharTokenizer of the
whole corpus). The held-out accuracy is reported next to the majority-class
baseline (always answer the most frequent training speaker).

Outputs, in ``--out`` (default ``runs/classify-<backend>``): ``log.jsonl``, one
JSON object per evaluation (``step``, ``train_loss``, ``val_loss``,
``val_accuracy``, ``elapsed_s``), and ``metrics.json`` at the end.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from .. import UserError
from ..plumbing.backends import BACKENDS, NonFiniteError
from ..plumbing.data import DATA_ENV_VAR, CorpusUnavailableError, load_corpus, resolve_corpus
from ..plumbing.tasks import TaskModel
from ..plumbing.tasks_speakers import WordTokenizer, encode_padded, random_crops, speaker_dataset
from .shared import (
    TaskOutput,
    add_model_and_optimizer_arguments,
    at_least,
    batches,
    check_min_lr,
    check_out,
    check_task_size,
    check_weights_finite,
    number,
    path_text,
    positive_int,
    refuse_to_replace,
    seed_int,
    stopped_training,
    training_options,
)

LOG_FILE = TaskOutput.LOG_FILE
METRICS_FILE = TaskOutput.METRICS_FILE


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--backend", choices=BACKENDS, required=True, help="required")
    p.add_argument(
        "--data",
        type=path_text,
        metavar="PATH",
        help=f"Tiny Shakespeare text file (default: ${DATA_ENV_VAR}, the cache, or a download)",
    )
    p.add_argument("--out", type=path_text, metavar="DIR", help="default: runs/classify-<backend>")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --out that already holds a run's log.jsonl and metrics.json, "
        "replacing them (refused without it)",
    )
    p.add_argument("--seed", type=seed_int, default=1337, help="weights, split and batches")
    p.add_argument(
        "--speakers", type=at_least(2), default=4, help="classes: the N most frequent speakers"
    )
    p.add_argument(
        "--val-fraction",
        type=number(0, 1, low_open=True),
        default=0.2,
        help="held-out share of speeches",
    )
    p.add_argument(
        "--tokenizer",
        choices=("char", "word"),
        default="word",
        help="characters (the corpus' CharTokenizer) or lower-cased words (the --max-vocab "
        "most frequent of the training speeches, the rest <unk>)",
    )
    p.add_argument("--max-vocab", type=positive_int, default=2000, help="word vocabulary size")
    p.add_argument("--max-iters", type=positive_int, default=1000, help="optimizer steps")
    g = add_model_and_optimizer_arguments(
        p,
        n_layers=(1, "encoder blocks"),
        batch_size=(32, "speeches per step"),
        dropout=0.2,
        lr=3e-3,
        warmup_iters=50,
        weight_decay=0.1,
        eval_interval=200,
    )
    g.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help="tokens read per speech (default: 64 words, or 128 characters)",
    )


def evaluate(model: TaskModel, val_idx, val_mask, val_labels, batch_size: int = 128):
    """Held-out (mean cross-entropy, accuracy) in eval mode."""
    losses, correct = [], 0
    for sl in batches(len(val_labels), batch_size):
        logits = model.predict({"idx": val_idx[sl], "token_mask": val_mask[sl]})
        y = val_labels[sl]
        z = logits - logits.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        losses.append(-logp[np.arange(len(y)), y])
        correct += int((logits.argmax(axis=1) == y).sum())
    return float(np.concatenate(losses).mean()), correct / len(val_labels)


def run(args: argparse.Namespace) -> dict:
    """Build the task, train, evaluate; print progress; return the final metrics.

    Raises:
        UserError: a missing corpus or bad arguments.
    """
    from numpy_impl.char_tokenizer import CharTokenizer

    if args.block_size is None:
        args.block_size = 64 if args.tokenizer == "word" else 128
    check_min_lr(args)
    check_out(args.out)
    check_task_size(args, args.max_vocab if args.tokenizer == "word" else 256, args.speakers)
    out_dir = Path(args.out or f"runs/classify-{args.backend}")
    refuse_to_replace(
        out_dir, (LOG_FILE, METRICS_FILE), args.overwrite, kind="classify"
    )  # before the work
    try:
        corpus_path = resolve_corpus(args.data)
        text = load_corpus(corpus_path)
    except (OSError, ValueError, CorpusUnavailableError) as e:
        raise UserError(str(e)) from e
    try:
        data = speaker_dataset(text, args.speakers, args.val_fraction, args.seed)
        if args.tokenizer == "char":
            tokenizer = CharTokenizer.from_text(text)
        else:  # the vocabulary of the training speeches only
            tokenizer = WordTokenizer.from_texts(data.train_texts, args.max_vocab)
        val_idx, val_mask = encode_padded(tokenizer, data.val_texts, args.block_size)
        model = TaskModel(
            args.backend,
            "classifier",
            {
                "vocab_size": tokenizer.vocab_size,
                "num_classes": args.speakers,
                "block_size": args.block_size,
                "n_layers": args.n_layers,
                "n_heads": args.n_heads,
                "d_model": args.d_model,
                "d_ff": args.d_ff,
                "dropout": args.dropout,
            },
            **training_options(args),
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    majority, baseline = data.majority_baseline()
    with TaskOutput(out_dir, args.overwrite, "classify") as output:
        out = output.out
        print(
            f"{args.backend} backend, {model.num_parameters():,} parameters; "
            f"{len(data.train_labels)} training / {len(data.val_labels)} held-out speeches of "
            f"{args.speakers} speakers: "
            + ", ".join(data.speakers)
            + f"; {args.tokenizer} tokens, vocabulary {tokenizer.vocab_size}"
        )
        print(
            f"majority-class baseline (always {data.speakers[majority]}): "
            f"{baseline:.1%} held-out accuracy"
        )

        rng = np.random.default_rng(args.seed + 1)  # batches and crops, the same for both backends
        order, pos = rng.permutation(len(data.train_labels)), 0
        t0, recent = time.perf_counter(), []
        metrics: dict = {}
        while model.step < args.max_iters:
            if pos + args.batch_size > len(order):  # a new epoch: a new order
                order, pos = rng.permutation(len(data.train_labels)), 0
            pick = order[pos : pos + args.batch_size]
            pos += args.batch_size
            idx, mask = random_crops(
                tokenizer, [data.train_texts[i] for i in pick], args.block_size, rng
            )
            try:
                loss = model.train_step({"idx": idx, "token_mask": mask}, data.train_labels[pick])
            except NonFiniteError as e:
                raise stopped_training(e, output.log_path) from e
            recent.append(loss)
            if model.step % args.eval_interval == 0 or model.step == args.max_iters:
                check_weights_finite(model, output.log_path)
                val_loss, acc = evaluate(model, val_idx, val_mask, data.val_labels)
                row = {
                    "step": model.step,
                    "train_loss": float(np.mean(recent)),
                    "val_loss": val_loss,
                    "val_accuracy": acc,
                    "elapsed_s": round(time.perf_counter() - t0, 3),
                }
                recent = []
                output.row(row)
                metrics = row
                print(
                    f"step {row['step']:5d}: train loss {row['train_loss']:.3f}, held-out loss "
                    f"{val_loss:.3f}, accuracy {acc:.1%} (baseline {baseline:.1%}), "
                    f"{row['elapsed_s']:.0f} s",
                    flush=True,
                )
        metrics = {
            **metrics,
            "majority_baseline": baseline,
            "speakers": data.speakers,
            "n_train": len(data.train_labels),
            "n_val": len(data.val_labels),
            "backend": args.backend,
        }
        output.finish(metrics)
        print(
            f"held-out accuracy {metrics['val_accuracy']:.1%} vs majority baseline {baseline:.1%} "
            f"({len(data.val_labels)} speeches); wrote {out / METRICS_FILE}"
        )
        return metrics


def main(args: argparse.Namespace) -> int:
    run(args)
    return 0
