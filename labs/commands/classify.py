"""``python -m labs classify``: who says this speech? A TransformerClassifier on Tiny Shakespeare.

The speeches of the N most frequent speakers (:func:`speaker_dataset`; N = 4: GLOUCESTER,
DUKE VINCENTIO, MENENIUS, ROMEO), split 80 / 20 by speech. The model reads the first
``--block-size`` tokens of a speech (a random window of a longer training speech) and
predicts the speaker; the held-out accuracy is reported next to the majority-class
baseline. ``--out`` (default ``runs/classify-<backend>``) receives ``log.jsonl`` and
``metrics.json``.
"""

from __future__ import annotations

import argparse

import numpy as np

from .. import UserError
from ..plumbing.data import DATA_ENV_VAR, CorpusUnavailableError, load_corpus, resolve_corpus
from ..plumbing.tasks import TaskModel
from ..plumbing.tasks_speakers import WordTokenizer, encode_padded, random_crops, speaker_dataset
from .shared import (
    TaskOutput,
    add_task_arguments,
    at_least,
    batches,
    check_min_lr,
    check_task_size,
    number,
    path_text,
    positive_int,
    task_out,
    train_task,
    training_options,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = add_task_arguments(
        p,
        "classify",
        "weights, split and batches",
        max_iters=1000,
        n_layers=(1, "encoder blocks"),
        batch_size=(32, "speeches per step"),
        dropout=0.2,
        lr=3e-3,
        warmup_iters=50,
        weight_decay=0.1,
        eval_interval=200,
    )
    p.add_argument(
        "--data",
        type=path_text,
        metavar="PATH",
        help=f"Tiny Shakespeare text file (default: ${DATA_ENV_VAR}, the cache, or a download)",
    )
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
    check_task_size(args, args.max_vocab if args.tokenizer == "word" else 256, args.speakers)
    out_dir = task_out(args, "classify")  # before the work
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
    n_train, B = len(data.train_labels), args.batch_size

    def speeches():  # batches and crops, the same for both backends
        rng = np.random.default_rng(args.seed + 1)
        while True:  # an epoch: a new order
            order = rng.permutation(n_train)
            for pos in range(0, max(n_train - B, 0) + 1, B):
                pick = order[pos : pos + B]
                texts = [data.train_texts[i] for i in pick]
                idx, mask = random_crops(tokenizer, texts, args.block_size, rng)
                yield {"idx": idx, "token_mask": mask}, data.train_labels[pick]

    def evaluated() -> dict:
        val_loss, acc = evaluate(model, val_idx, val_mask, data.val_labels)
        return {"val_loss": val_loss, "val_accuracy": acc}

    def say(row: dict) -> str:
        return (
            f"step {row['step']:5d}: train loss {row['train_loss']:.3f}, held-out loss "
            f"{row['val_loss']:.3f}, accuracy {row['val_accuracy']:.1%} (baseline "
            f"{baseline:.1%}), {row['elapsed_s']:.0f} s"
        )

    with TaskOutput(out_dir, args.overwrite, "classify") as output:
        print(
            f"{args.backend} backend, {model.num_parameters():,} parameters; "
            f"{n_train} training / {len(data.val_labels)} held-out speeches of "
            f"{args.speakers} speakers: "
            + ", ".join(data.speakers)
            + f"; {args.tokenizer} tokens, vocabulary {tokenizer.vocab_size}"
        )
        print(
            f"majority-class baseline (always {data.speakers[majority]}): "
            f"{baseline:.1%} held-out accuracy"
        )
        metrics = {
            **train_task(model, args, output, speeches(), evaluated, say),
            "majority_baseline": baseline,
            "speakers": data.speakers,
            "n_train": n_train,
            "n_val": len(data.val_labels),
            "backend": args.backend,
        }
        output.finish(metrics)
        print(
            f"held-out accuracy {metrics['val_accuracy']:.1%} vs majority baseline {baseline:.1%} "
            f"({len(data.val_labels)} speeches); wrote {output.metrics_path}"
        )
        return metrics


def main(args: argparse.Namespace) -> int:
    run(args)
    return 0
