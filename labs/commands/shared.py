"""What the commands share: their model and optimization options, the argparse checks of
every number (in range, finite), the refusal to replace a run, and the output and the
training loop of ``labs classify`` and ``labs seq2seq``."""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np

from .. import UserError
from ..plumbing.backends import BACKENDS, NonFiniteError


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
    d_model: int = 64,
    d_ff_help: str = "FFN width (default: 4 d_model)",
    attn_impl: tuple[tuple, str | None, str] = (("sdpa", "explicit"), "sdpa", "torch only"),
):
    """The "model" and "optimization" option groups of ``labs train``, ``classify`` and
    ``seq2seq``, with each command's defaults (``n_layers``, ``batch_size``: default and
    help; ``attn_impl``: choices, default, help). Returns the two groups."""
    g = p.add_argument_group("model")
    g.add_argument("--n-layers", type=positive_int, default=n_layers[0], help=n_layers[1])
    g.add_argument("--n-heads", type=positive_int, default=4, help="attention heads per block")
    g.add_argument(
        "--d-model", type=positive_int, default=d_model, help="width C of the residual stream"
    )
    g.add_argument("--d-ff", type=positive_int, default=None, help=d_ff_help)
    g.add_argument("--dropout", type=fraction, default=dropout, help="dropout probability")
    g.add_argument(
        "--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype"
    )
    choices, default, help_text = attn_impl
    g.add_argument("--attn-impl", choices=choices, default=default, help=help_text)
    o = p.add_argument_group("optimization")
    o.add_argument("--batch-size", type=positive_int, default=batch_size[0], help=batch_size[1])
    o.add_argument("--lr", type=number(0, low_open=True), default=lr, help="peak learning rate")
    o.add_argument("--min-lr", type=number(0), default=1e-4, help="final learning rate")
    o.add_argument(
        "--warmup-iters", type=natural_int, default=warmup_iters, help="linear warmup steps"
    )
    o.add_argument(
        "--weight-decay", type=number(0), default=weight_decay, help="AdamW decay of the matrices"
    )
    every = "steps between evaluations"
    o.add_argument("--eval-interval", type=positive_int, default=eval_interval, help=every)
    return g, o


def add_task_arguments(p, kind: str, seed_help: str, **defaults):
    """The options of ``labs classify`` and ``labs seq2seq`` (``kind``) that every run has, and
    :func:`add_model_and_optimizer_arguments` with ``defaults``. Returns the model group."""
    p.add_argument("--backend", choices=BACKENDS, required=True, help="required")
    p.add_argument("--out", type=path_text, metavar="DIR", help=f"default: runs/{kind}-<backend>")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="write into an --out that already holds a run's log.jsonl and metrics.json, "
        "replacing them (refused without it)",
    )
    p.add_argument("--seed", type=seed_int, default=1337, help=seed_help)
    p.add_argument(
        "--max-iters", type=positive_int, default=defaults.pop("max_iters"), help="optimizer steps"
    )
    return add_model_and_optimizer_arguments(p, **defaults)[0]


def training_options(args) -> dict:
    """:class:`TaskModel`'s optimizer and runtime arguments (decaying over ``--max-iters``)."""
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


def _checked(convert, ok, must: str):
    """An argparse ``type=``: ``convert`` the text, then require ``ok(value)`` (the error
    says what it ``must``; argparse names the option)."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must {must}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"must {must}, got {value}")
        return value

    return parse


def at_least(low: int):
    """An integer option >= ``low``."""
    return _checked(int, lambda v: v >= low, f"be >= {low}")


def int_range(low: int, high: int):
    """An integer option in ``[low, high]``."""
    return _checked(int, lambda v: low <= v <= high, f"lie in [{low:,}, {high:,}]")


positive_int, natural_int = at_least(1), at_least(0)
path_text = _checked(str, str.strip, "name a path")  # not empty
#: Seeds every command takes: NumPy's generators take any int >= 0, torch's
#: manual_seed one below 2**64; [0, 2**63) fits both, and seed + small offsets too.
seed_int = _checked(int, lambda v: 0 <= v < 2**63, "lie in [0, 2**63)")


def number(low: float, high: float = math.inf, *, low_open=False, high_open=True, what=""):
    """A finite float option in the interval (NaN and infinities refused whatever it is)."""
    if math.isinf(high):
        where = f"{'>' if low_open else '>='} {low:g}"
    else:
        where = f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def ok(v: float) -> bool:
        above = v > low if low_open else v >= low
        below = v < high if high_open else v <= high
        return math.isfinite(v) and above and below

    return _checked(float, ok, f"be a finite number {where}{what}")


fraction = number(0, 1)  # dropout, AdamW's betas: [0, 1)


def check_min_lr(args) -> None:
    """``--min-lr`` at most ``--lr``: the schedule decays from one to the other."""
    if args.min_lr > args.lr:
        raise UserError(
            f"--min-lr ({args.min_lr}) must not exceed --lr ({args.lr}): the schedule decays "
            "from --lr down to --min-lr"
        )


def check_out(out) -> None:
    """``--out`` that names a directory (or nothing yet), not a file."""
    if out is not None and Path(out).exists() and not Path(out).is_dir():
        raise UserError(f"--out {out}: is a file, not a directory")


def run_kind(out) -> tuple[str | None, list[str]]:
    """What kind of run ``out`` holds, and the files that say so: ``"train"``,
    ``"classify"``, ``"seq2seq"``, ``None`` (no run) or ``"unknown"`` (another's files)."""
    from ..plumbing.checkpoint import PREVIOUS_DIR
    from ..plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, _loads_strict
    from ..plumbing.run_dir import LOG_FILE, existing_outputs, read_log
    from ..plumbing.tokenization import TOKENIZER_FILE

    out = Path(out)
    checkpoint = (CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE, PREVIOUS_DIR, TOKENIZER_FILE)
    if held := existing_outputs(out, checkpoint):
        return "train", held
    metrics_file = TaskOutput.METRICS_FILE
    if (out / metrics_file).is_file():
        try:
            metrics = _loads_strict((out / metrics_file).read_text(encoding="utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            metrics = None
        if isinstance(metrics, dict):
            if metrics.get("command") in ("classify", "seq2seq"):
                return metrics["command"], [metrics_file]
            if "speakers" in metrics:
                return "classify", [metrics_file]
            if "task" in metrics:
                return "seq2seq", [metrics_file]
        return "unknown", [metrics_file]
    rows = read_log(out / LOG_FILE)[0]
    if not rows:  # no log, or one that holds nothing of a run
        return None, []
    keys = set(rows[0])
    for kind, key in (
        ("train", "val_bpb"),
        ("classify", "val_accuracy"),
        ("seq2seq", "exact_match"),
    ):
        if key in keys:
            return kind, [LOG_FILE]
    return "unknown", [LOG_FILE]


def refuse_to_replace(
    out, names: tuple[str, ...], overwrite: bool, resume: str = "", kind: str | None = None
) -> list[str]:
    """Raise ``UserError`` if ``out`` holds any of ``names`` (a run's files) and not
    ``overwrite``, or holds a run of another ``kind`` (:func:`run_kind`) at all; return what
    it holds. ``resume``: how to continue it."""
    from ..plumbing.checkpoint_files import CheckpointError, check_directory
    from ..plumbing.run_dir import existing_outputs

    if Path(out).is_dir():
        try:
            check_directory(Path(out))
        except CheckpointError as e:
            raise UserError(f"--out {e}") from None
    held = existing_outputs(out, names)
    found, files = run_kind(out) if kind is not None else (None, [])
    if found is not None and found != kind:
        what = f"a {found} run" if found != "unknown" else "a run of another command"
        raise UserError(
            f"--out {out} holds {what} ({', '.join(files)}), not a {kind} run: "
            f"--overwrite replaces only a {kind} run, so choose another --out (or move "
            "that run away yourself)"
        )
    if held and not overwrite:
        from ..plumbing.checkpoint import _step_of

        step = _step_of(Path(out))
        what = ", ".join(held) if step is None else f"its checkpoint is at step {step}"
        raise UserError(
            f"--out {out} already holds a run ({what}): "
            + (f"continue it with {resume}, or " if resume else "")
            + "choose another --out, or give --overwrite to replace it"
        )
    return held


def check_size(n_params: int, activations: int, dtype: str, device: str = "cpu") -> None:
    """Refuse (UserError) a model whose training cannot fit in this machine's memory, before
    anything is allocated: ``n_params`` parameters and ``activations`` floats (a lower
    bound) in ``dtype``; only the ``"cpu"`` ``device`` is checked."""
    from ..plumbing.checkpoint_format import physical_memory

    available = physical_memory()
    if available is None or not str(device).startswith("cpu"):
        return
    size = 8 if dtype == "float64" else 4
    need = (4 * n_params + activations) * size  # weights, gradients, AdamW's two moments
    if need > available:
        raise UserError(
            f"the model has {n_params:,} parameters: its weights, gradients, AdamW moments "
            f"and a step's activations need at least {need / 2**30:,.1f} GiB, more than this "
            f"machine's {available / 2**30:,.1f} GiB; choose a smaller model (--d-model, "
            "--n-layers), context, batch or vocabulary"
        )


def lock_out(out: Path):
    """Create ``out`` and take its :class:`RunLock` (UserError: in use, or not writable)."""
    from ..plumbing.run_dir import RunDirectoryBusy, RunLock

    try:
        out.mkdir(parents=True, exist_ok=True)
        return RunLock(out)
    except RunDirectoryBusy as e:
        raise UserError(str(e)) from e
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror or e})") from e


class TaskOutput:
    """The output directory of ``labs classify`` and ``labs seq2seq`` (``kind``), locked:
    ``log.jsonl`` (a row per evaluation) and ``metrics.json`` (at the end, ``kind`` as
    ``"command"``), strict JSON, whole after a kill. With ``overwrite``, the first row
    replaces an old run's log and metrics.json.

    Raises:
        UserError: as :func:`refuse_to_replace` and :func:`lock_out`.
    """

    LOG_FILE = "log.jsonl"
    METRICS_FILE = "metrics.json"

    def __init__(self, out, overwrite: bool, kind: str):
        from ..plumbing.checkpoint import remove_leftovers

        check_out(out)
        self.out, self.kind = Path(out), kind
        names = (self.LOG_FILE, self.METRICS_FILE)
        refuse_to_replace(self.out, names, overwrite, kind=kind)
        self.lock = lock_out(self.out)
        refuse_to_replace(self.out, names, overwrite, kind=kind)  # again, under the lock
        remove_leftovers(self.out)
        self.log_path = self.out / self.LOG_FILE
        self.metrics_path = self.out / self.METRICS_FILE
        self.rows = 0

    def __enter__(self) -> TaskOutput:
        return self

    def __exit__(self, *exc) -> None:
        self.lock.release()

    def _write(self, what, do) -> None:
        try:
            do()
        except OSError as e:
            raise UserError(f"cannot write {what}: {e.strerror or e}") from e

    def row(self, row: dict) -> None:
        """Log an evaluation (its numbers checked finite first: a ``UserError`` otherwise)."""
        from ..plumbing.run_dir import append_row, write_log

        bad = {k: v for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)}
        if bad:
            raise UserError(
                f"training stopped at step {row.get('step')}: its evaluation is not finite "
                f"({bad}), and was not written. Try a lower --lr"
            )
        if self.rows == 0:  # a new log: it replaces an overwritten run's, metrics and all
            self._write(self.metrics_path, lambda: self.metrics_path.unlink(missing_ok=True))
            self._write(self.log_path, lambda: write_log(self.log_path, [row]))
        else:
            self._write(self.log_path, lambda: append_row(self.log_path, row))
        self.rows += 1

    def finish(self, metrics: dict) -> None:
        """Write metrics.json atomically (strict JSON)."""
        from ..plumbing.checkpoint_files import write_atomic
        from ..plumbing.run_dir import dumps_strict

        metrics = {**metrics, "command": self.kind}
        data = (dumps_strict(metrics, indent=1) + "\n").encode("utf-8")
        self._write(self.metrics_path, lambda: write_atomic(self.metrics_path, data))


def task_out(args, kind: str) -> Path:
    """``--out`` (default ``runs/KIND-BACKEND``), refused before any work if it holds a run."""
    check_out(args.out)
    out = Path(args.out or f"runs/{kind}-{args.backend}")
    names = (TaskOutput.LOG_FILE, TaskOutput.METRICS_FILE)
    refuse_to_replace(out, names, args.overwrite, kind=kind)
    return out


def train_task(model, args, output: TaskOutput, batches_, evaluate, say) -> dict:
    """Train ``model`` on ``batches_``'s ``(inputs, targets)`` up to ``--max-iters``; every
    ``--eval-interval`` steps and at the end, log a row of ``evaluate()``'s numbers and print
    ``say(row)``. Returns the last row.

    Raises:
        UserError: a non-finite step, or weights made non-finite (an argmax of NaN logits is
            class 0: a wrong answer that looks like one); nothing is written after it.
    """
    t0, recent, row = time.perf_counter(), [], {}
    after = f"({output.log_path} holds the evaluations before; no metrics.json). Try a lower --lr"
    while model.step < args.max_iters:
        try:
            recent.append(model.train_step(*next(batches_)))
        except NonFiniteError as e:
            raise UserError(f"training stopped at {e}. Nothing was written after it {after}") from e
        if model.step % args.eval_interval == 0 or model.step == args.max_iters:
            if (name := model.first_nonfinite_parameter()) is not None:
                raise UserError(
                    f"training stopped at step {model.step}: the update made the weights "
                    f"non-finite (the first is {name}); nothing was evaluated {after}"
                )
            row = {"step": model.step, "train_loss": float(np.mean(recent)), **evaluate()}
            row["elapsed_s"] = round(time.perf_counter() - t0, 3)
            recent = []
            output.row(row)
            print(say(row), flush=True)
    return row


def check_task_size(
    args, vocab_size: int, n_out: int, decoder: bool = False, block_size: int | None = None
) -> None:
    """:func:`check_size` for ``labs classify`` and (``decoder``) ``labs seq2seq``."""
    C, L, T = args.d_model, args.n_layers, block_size or args.block_size
    F = args.d_ff or 4 * C
    block = 4 * C * C + 2 * C * F
    n_params = (vocab_size + T) * C + L * block + C * n_out
    if decoder:  # a second embedding, and self- plus cross-attention in each decoder block
        n_params += (vocab_size + T) * C + L * (block + 4 * C * C)
    activations = args.batch_size * L * (8 * T * C + args.n_heads * T * T)
    check_size(n_params, activations, args.dtype)


def naming(source, out, error: Exception) -> str:
    """The error's message, with ``source`` in front unless it names ``source`` or ``out``."""
    message = str(error)
    named = str(Path(source)) in message or str(Path(out)) in message
    return message if named else f"{source}: {message}"
