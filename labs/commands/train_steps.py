"""The steps of ``python -m labs train``, in the order ``train.run`` takes them:
:func:`load_data`, :func:`build_backend`, :func:`run_config`, :func:`prepare_output`,
:func:`train_loop` (an evaluation and a checkpoint every ``--eval-interval``),
:func:`summarize`.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from .. import UserError
from ..plumbing.backends import NonFiniteError, make_backend
from ..plumbing.checkpoint import PREVIOUS_DIR, remove_leftovers, save_checkpoint
from ..plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE
from ..plumbing.data import (
    BatchSampler,
    CorpusUnavailableError,
    fixed_eval_batches,
    load_corpus,
    resolve_corpus,
)
from ..plumbing.distributed import eval_mean
from ..plumbing.run_dir import (
    LOG_FILE,
    RunLock,
    append_row,
    read_log,
    reconcile_log,
    write_log,
)
from ..plumbing.tokenization import (
    TOKENIZER_FILE,
    bits_per_byte,
    build_tokenizer,
    bytes_per_token,
    tokenizer_config,
)
from .shared import lock_out, refuse_to_replace
from .train_distributed import _device
from .train_resume import _resume, _Resumed

PLOT_FILE = "loss.png"
TRAIN_FRACTION = 0.9  # the first 90% of the corpus trains, the rest validates (nanoGPT's)
#: What a run writes into --out: a directory holding any of them holds a run.
RUN_OUTPUTS = (CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, LOG_FILE, PREVIOUS_DIR, TOKENIZER_FILE)


def _resume_hint(out: Path) -> str:
    return f"`python -m labs train --resume {out} --max-iters N`"


#: The sample printed after training: nanoGPT's temperature (its top_k 200 keeps every char).
FINAL_SAMPLE = {"temperature": 0.8, "top_k": None, "top_p": None}


def plot_losses(log_path: Path, png_path: Path, title: str = "", unit: str = "character") -> None:
    """Draw train and val loss against step from a ``log.jsonl`` into a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    rows, _ = read_log(log_path)
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(steps, [r["train_loss"] for r in rows], marker="o", ms=3, label="train")
    ax.plot(steps, [r["val_loss"] for r in rows], marker="o", ms=3, label="val")
    ax.set(xlabel="step", ylabel=f"loss (nats per {unit})", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    tmp = png_path.with_name(f".{png_path.name}.tmp")  # a kill never leaves half a PNG
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, png_path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)


# -- data: the same arrays, the same batches, whatever the backend -----------------
@dataclasses.dataclass
class Data:
    """The corpus as token ids, and the batches drawn from it."""

    corpus_path: Path
    tokenizer: object
    train_ids: np.ndarray
    val_ids: np.ndarray
    val_bytes_per_token: float  # for bits per byte
    sampler: BatchSampler  # the training batches
    eval_sets: dict  # split -> its fixed evaluation batches


def load_data(args: argparse.Namespace, tokenizer=None) -> Data:
    """Read the corpus, build the tokenizer (unless given: ``--init-from``'s), split the
    ids and set up the batches (``--batch-size`` x ``--grad-accum`` sequences per step).

    Raises:
        UserError: an unreadable corpus, a bad ``--vocab-size``, a text the tokenizer
            cannot encode, a split shorter than ``--block-size + 1``.
    """
    try:
        corpus_path = resolve_corpus(args.data)
        text = load_corpus(corpus_path)
    except (OSError, ValueError, CorpusUnavailableError) as e:
        raise UserError(str(e)) from e
    # Split the text: BPE learns its merges from the training text alone (else they would
    # flatter the validation loss); a char vocabulary holds every character of the corpus.
    cut = int(TRAIN_FRACTION * len(text))
    train_text, val_text = text[:cut], text[cut:]
    if tokenizer is None:
        try:
            source = text if args.tokenizer == "char" else train_text
            tokenizer = build_tokenizer(args.tokenizer, args.backend, source, args.vocab_size)
        except (TypeError, ValueError) as e:
            raise UserError(f"--vocab-size: {e}") from e
    try:
        train_ids, val_ids = tokenizer.encode_array(train_text), tokenizer.encode_array(val_text)
    except ValueError as e:  # a char vocabulary from --init-from that lacks some characters
        raise UserError(f"--data {corpus_path}: {e}") from e
    B, T = args.batch_size * args.grad_accum, args.block_size
    for split, ids in (("training", train_ids), ("validation", val_ids)):
        if len(ids) <= T:
            unit = "character" if args.tokenizer == "char" else "token"
            raise UserError(
                f"{corpus_path}: the {split} split has {len(ids)} {unit}"
                f"{'' if len(ids) == 1 else 's'}, fewer than "
                f"--block-size + 1 = {T + 1}; use a longer text or a smaller --block-size"
            )
    val_bytes_per_token = bytes_per_token(tokenizer, val_ids)  # for bits per byte
    sampler = BatchSampler(train_ids, T, B, seed=args.seed)
    eval_sets = {  # drawn once: every evaluation sees the same text
        split: fixed_eval_batches(ids, T, args.eval_batch_size, args.eval_batches, args.seed + i)
        for i, (split, ids) in enumerate((("train", train_ids), ("val", val_ids)), start=1)
    }
    return Data(corpus_path, tokenizer, train_ids, val_ids, val_bytes_per_token, sampler, eval_sets)


# -- model and optimizer ------------------------------------------------------------
def build_backend(args: argparse.Namespace, model_config: dict, train_config: dict, world: int):
    """The backend ``--backend`` names, with its model and optimizer, distributed over
    several ranks (UserError: a model config it refuses)."""
    try:
        backend = make_backend(
            args.backend,
            model_config,
            seed=args.seed,
            train_config=train_config,
            dtype=args.dtype,
            attn_impl=args.attn_impl,
            device=_device(args, world),
            amp=args.amp,
            fast=getattr(args, "fast", True),
        )
    except ValueError as e:
        raise UserError(str(e)) from e
    if world > 1:  # gradients averaged over the ranks, in buckets of --bucket-mb
        backend.distribute(getattr(args, "bucket_mb", 25.0))
    return backend


def run_config(
    args: argparse.Namespace, backend, data: Data, train_config: dict
) -> tuple[dict, dict]:
    """``(config, tokenizer_files)``: the sections config.json records (model,
    tokenizer, training settings) and the tokenizer's own files."""
    model_config = dataclasses.asdict(backend.config)  # every field, defaults filled in
    train_args = {k: v for k, v in vars(args).items() if k not in ("command", "func", "argv")}
    train_args.update(data=str(data.corpus_path), lr_decay_iters=train_config["lr_decay_iters"])
    tokenizer_section, tokenizer_files = tokenizer_config(data.tokenizer)
    config = {"model": model_config, "tokenizer": tokenizer_section, "train": train_args}
    return config, tokenizer_files


# -- the run under way: its output directory, the loop ------------------------------
@dataclasses.dataclass
class Run:
    """A training run under way: what the loop and each evaluation share."""

    args: argparse.Namespace
    backend: object
    data: Data
    config: dict  # config.json's sections
    tokenizer_files: dict  # written next to the checkpoint
    out: Path
    rank: int
    world: int
    elapsed_before: float = 0.0  # wall time of the run we resume, if any
    t_start: float = 0.0
    train_time: float = 0.0  # time in train_step only, for tokens/s
    train_tokens: int = 0
    metrics: dict = dataclasses.field(default_factory=dict)
    last_saved: int = 0  # step of the last checkpoint written (or resumed from)
    log_started: bool = False  # False until the first row: a fresh run replaces the file
    lock: RunLock | None = None  # held by rank 0 while it writes into out

    @property
    def log_path(self) -> Path:
        return self.out / LOG_FILE


def prepare_output(run: Run, resumed: _Resumed | None, say=print) -> None:
    """Take the output directory (rank 0): create and lock it, refuse to replace a run
    (unless ``--overwrite``), remove what a killed writer left. A resumed run loads its
    checkpoint and gets a log of one row per evaluation up to its step; a fresh run writes
    nothing yet (its first checkpoint replaces an overwritten run's files).

    Raises:
        UserError: the directory cannot be created or is in use, holds a run not to
            replace, or the checkpoint does not fit.
    """
    out, rank, log_path = run.out, run.rank, run.log_path
    continuing = resumed is not None and out.resolve() == resumed.directory.resolve()
    if resumed is not None:  # in memory only: a checkpoint that does not fit writes nothing
        run.elapsed_before = _resume(resumed, run.backend, run.data.sampler, run.config, say)
        run.last_saved = run.backend.step
    if rank != 0:
        return
    run.lock = lock_out(out)
    if not continuing:
        if refuse_to_replace(out, RUN_OUTPUTS, run.args.overwrite, _resume_hint(out), "train"):
            say(
                f"--overwrite: replacing the run in {out}; its files stay until this "
                f"run's first checkpoint, then its checkpoint is kept in {out / PREVIOUS_DIR} "
                "until the second"
            )
    removed = remove_leftovers(out)
    if removed:
        say(f"removed what an interrupted run left in {out}: {', '.join(removed)}")
    if resumed is not None:
        try:
            notes = reconcile_log(
                resumed.directory / LOG_FILE, log_path, run.backend.step, resumed.log_row
            )
        except OSError as e:
            raise UserError(f"cannot write {log_path}: {e.strerror or e}") from e
        for note in notes:
            say(f"note: {note}")
        run.log_started = True


def evaluate_and_save(run: Run) -> None:
    """Evaluate both splits; log the row and write the checkpoint (rank 0).

    Raises:
        UserError: a non-finite evaluation loss (nothing is written then).
    """
    from tqdm import tqdm

    backend, out, metrics, rank = run.backend, run.out, run.metrics, run.rank
    # each rank evaluates its share of the batches; every rank gets the mean of all
    losses = {split: eval_mean(backend.eval_loss, b) for split, b in run.data.eval_sets.items()}
    if not all(math.isfinite(v) for v in losses.values()):
        # keep the last good checkpoint and a log of valid JSON: stop before writing
        if run.log_started:
            kept = f"the checkpoint in {out} (step {run.last_saved}) is the last good one"
        else:  # a fresh run's first evaluation: no checkpoint of it exists to point to
            kept = "nothing of this run was written"
            init_from = getattr(run.args, "init_from", None)
            if backend.step == 0 and init_from:
                kept += f" (the weights of --init-from {init_from} give it, before any step)"
        raise UserError(
            f"the evaluation loss became non-finite at step {backend.step} "
            f"(train {losses['train']}, val {losses['val']}); {kept}. Try a lower --lr or "
            "keep --grad-clip on"
        )
    elapsed = run.elapsed_before + time.perf_counter() - run.t_start
    tok_s = run.train_tokens / run.train_time if run.train_time else 0.0
    row = {
        "step": backend.step,
        "train_loss": losses["train"],
        "val_loss": losses["val"],
        "val_bpb": bits_per_byte(losses["val"], run.data.val_bytes_per_token),
        "lr": backend.current_lr(),
        "elapsed_s": round(elapsed, 3),
    }
    metrics.update(row, tokens_per_s=round(tok_s, 1))
    rng_state = backend.rng_state()  # several ranks: gathered from every one
    if rank != 0:
        return  # every rank evaluates (same weights, same batches); rank 0 writes
    tqdm.write(
        f"step {backend.step:5d}: train loss {losses['train']:.4f}, "
        f"val loss {losses['val']:.4f} ({row['val_bpb']:.4f} bits/byte), "
        f"lr {row['lr']:.2e}, {elapsed:.1f} s" + (f", {tok_s:,.0f} tok/s" if tok_s else "")
    )
    kept = (
        f"the last good checkpoint (step {run.last_saved}) is intact"
        if run.log_started
        else "nothing of this run was written"
    )
    scaler = getattr(backend, "scaler_state", lambda: None)()  # --amp fp16's loss scale
    try:
        save_checkpoint(
            out,
            backend.state_dict(copy=False),  # read once, by the save: no second copy
            run.config,
            backend.optimizer_state(copy=False),
            meta={
                "step": backend.step,
                "backend": backend.name,
                "metrics": dict(metrics),
                "log_row": row,  # the log's line of this evaluation, restored if lost
                "sampler_state": run.data.sampler.get_state(),
                "rng_state": rng_state,  # the dropout masks to come
                **({"grad_scaler": scaler} if scaler else {}),
            },
            extra_files=run.tokenizer_files,
        )
    except OSError as e:
        raise UserError(
            f"cannot write the checkpoint of step {backend.step} in {out}: {e.strerror or e}; "
            f"{kept}" + (f"; {_resume_hint(out)} continues from it" if run.log_started else "")
        ) from e
    run.last_saved = backend.step
    # the log's row only once its checkpoint is committed: a row is never without one
    try:
        if run.log_started:
            append_row(run.log_path, row)
        else:  # the first row of a fresh run: a new file (it replaces an overwritten run's)
            write_log(run.log_path, [row])
            run.log_started = True
    except OSError as e:
        raise UserError(
            f"cannot write {run.log_path}: {e.strerror or e}; the checkpoint of step "
            f"{backend.step} is saved, and {_resume_hint(out)} restores its log row"
        ) from e


def train_loop(run: Run, resumed: _Resumed | None) -> float:
    """Train up to ``--max-iters`` steps, evaluating and saving every ``--eval-interval``
    and at the end; return the run's wall time (the resumed run's included).

    Raises:
        UserError: a non-finite step or evaluation (the last good checkpoint is kept).
    """
    from tqdm import tqdm

    args, backend, rank, world = run.args, run.backend, run.rank, run.world
    run.t_start = time.perf_counter()
    run.last_saved = backend.step
    if backend.step == 0 and resumed is None:  # (a run resumed at 0 has logged step 0)
        evaluate_and_save(run)
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
    B, N = args.batch_size, args.grad_accum
    b = B // world
    try:
        while backend.step < args.max_iters:
            x, y = run.data.sampler.next()  # every rank draws the same (N B, T) batch...
            if world > 1:  # ...and keeps its b rows of each of the N micro-batches
                x = x.reshape(N, B, -1)[:, rank * b : (rank + 1) * b].reshape(N * b, -1)
                y = y.reshape(N, B, -1)[:, rank * b : (rank + 1) * b].reshape(N * b, -1)
            t0 = time.perf_counter()
            try:
                stats = backend.train_step(x, y, grad_accum=N)
            except NonFiniteError as e:
                raise UserError(
                    f"training stopped at {e}. The last good checkpoint (step {run.last_saved}) "
                    f"is kept in {run.out}, not overwritten. Try a lower --lr or keep "
                    "--grad-clip on"
                ) from e
            dt = time.perf_counter() - t0
            run.train_time += dt
            run.train_tokens += x.size * world
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
                evaluate_and_save(run)
    finally:
        bar.close()  # also when a step or a save stops the run: its error line comes clean
    return run.elapsed_before + time.perf_counter() - run.t_start


# -- summary --------------------------------------------------------------------------
def summarize(run: Run, wall: float) -> None:
    """Plot the losses; print the final numbers, the files written and a sample."""
    args, backend, out, metrics = run.args, run.backend, run.out, run.metrics
    tokenizer, log_path = run.data.tokenizer, run.log_path
    unit = "character" if args.tokenizer == "char" else "token"
    try:  # the plot is a convenience: a full disk here costs nothing of the run
        plot_losses(log_path, out / PLOT_FILE, title=f"{backend.name} backend, {out}", unit=unit)
    except OSError as e:
        print(f"warning: could not write {out / PLOT_FILE}: {e.strerror or e}", file=sys.stderr)
    print(f"final val loss {metrics['val_loss']:.4f} (train {metrics['train_loss']:.4f})")
    print(
        f"final val bits per byte {metrics['val_bpb']:.4f} (nats per {unit} "
        f"x {1 / run.data.val_bytes_per_token:.4f} {unit}s per byte / ln 2)"
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
        try:
            prompt, after = tokenizer.encode("\n"), "a newline"
        except ValueError:  # a corpus without newlines: start from its first token
            prompt, after = run.data.sampler.data[:1].tolist(), "the corpus's first token"
        print(
            f"--- sample: {args.sample_tokens} {unit}s after {after}, "
            f"temperature {FINAL_SAMPLE['temperature']}, seed {args.seed} ---"
        )
        ids = backend.generate(prompt, args.sample_tokens, seed=args.seed, **FINAL_SAMPLE)
        print(tokenizer.decode(ids))
