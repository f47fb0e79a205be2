"""``python -m labs bench --train-iters N``: the whole run, not just the step.

``python -m labs train --backend B --max-iters N`` runs once per backend, as a
subprocess, with train's own defaults (nanoGPT's CPU baby GPT: evaluation at
step 0 and at the end, a checkpoint at each, the final 500-character sample)
and whatever ``--train-args`` adds, on the corpus ``labs train`` would use
(``--data``, else ``$TWINFORMER_DATA``, the cache, or a download). Its output
goes to a fresh temporary directory, removed afterwards: never to ``runs/``.

Per run, in seconds:

* ``wall_s``: measured around the subprocess: interpreter start, imports, the
  corpus, every step, evaluation, checkpoints, the plot and the sample;
* ``loop_s``: the training loop, from the run's last ``log.jsonl`` row
  (``elapsed_s``): steps, evaluations and checkpoints;
* ``train_steps_s``: ``train_step`` alone, from the run's ``config.json``
  (tokens trained / ``metrics.tokens_per_s``, which counts step time only);
* ``eval_checkpoint_s`` = loop - steps, ``startup_summary_s`` = wall - loop.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import UserError
from ..plumbing.backends import BACKENDS

#: train's options that the benchmark sets itself (or that would touch existing runs)
_OWN_OPTIONS = ("--backend", "--max-iters", "--out", "--data", "--resume", "--init-from")


def prepare_training(args: argparse.Namespace) -> dict:
    """The corpus path and the extra train options, checked before anything is timed.

    Raises:
        UserError: no corpus (named), or ``--train-args`` that cannot be parsed or
            that set what the benchmark sets.
    """
    from ..plumbing.data import CorpusUnavailableError, resolve_corpus

    try:
        extra = shlex.split(args.train_args or "")
    except ValueError as e:
        raise UserError(f"--train-args: {e} in {args.train_args!r}") from e
    for option in extra:
        name = option.split("=", 1)[0]
        if name in _OWN_OPTIONS or name == "--overwrite":
            raise UserError(
                f"--train-args: {name} is set by the benchmark (it trains into a temporary "
                "directory); use --data for the corpus"
            )
    try:
        corpus = resolve_corpus(args.data)
    except (OSError, CorpusUnavailableError) as e:
        raise UserError(f"the corpus for --train-iters: {e}") from e
    return {"corpus": str(Path(corpus).resolve()), "extra": extra}


def _read_run(out: Path) -> tuple[float, float]:
    """``(loop_s, train_steps_s)`` of the finished run in ``out``."""
    config = json.loads((out / "config.json").read_text())
    rows = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if line]
    train, metrics = config["train"], config["metrics"]
    tokens = config["step"] * train["batch_size"] * train["grad_accum"] * train["block_size"]
    return float(rows[-1]["elapsed_s"]), tokens / metrics["tokens_per_s"]


def run_training(setup: dict, args: argparse.Namespace, env: dict, say) -> dict:
    """Train on each backend; return ``{"train": [...], "numpy_over_torch_train_wall_ratio":
    ..., "numpy_over_torch_train_steps_ratio": ...}`` (a failed run: ``error``, ratios None)."""
    runs = []
    for backend in BACKENDS:
        say(f"training {backend} for {args.train_iters} steps ...")
        with tempfile.TemporaryDirectory(prefix="twinformer-bench-") as tmp:
            out = Path(tmp) / "run"
            cmd = [sys.executable, "-m", "labs", "train", "--backend", backend]
            cmd += ["--max-iters", str(args.train_iters), "--out", str(out)]
            cmd += ["--data", setup["corpus"], *setup["extra"]]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
            wall = time.perf_counter() - t0
            run = {"backend": backend, "max_iters": args.train_iters}
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                runs.append({**run, "error": last})
                continue
            try:
                loop, steps = _read_run(out)
            except (OSError, ValueError, KeyError, IndexError, ZeroDivisionError) as e:
                runs.append({**run, "error": f"could not read the run's log and config: {e}"})
                continue
        runs.append(
            {
                **run,
                "wall_s": wall,
                "loop_s": loop,
                "train_steps_s": steps,
                "eval_checkpoint_s": loop - steps,
                "startup_summary_s": wall - loop,
                "train_steps_share": steps / wall,
            }
        )
    ok = {r["backend"]: r for r in runs if "error" not in r}
    both = set(ok) == set(BACKENDS)
    return {
        "train": runs,
        "train_options": ["--data", setup["corpus"], *setup["extra"]],
        "numpy_over_torch_train_wall_ratio": (
            ok["numpy"]["wall_s"] / ok["torch"]["wall_s"] if both else None
        ),
        "numpy_over_torch_train_steps_ratio": (
            ok["numpy"]["train_steps_s"] / ok["torch"]["train_steps_s"] if both else None
        ),
    }


def format_training(summary: dict) -> list[str]:
    """The training runs as table lines, then the two ratios."""
    runs = summary["train"]
    iters = runs[0]["max_iters"]
    lines = [
        f"the whole run: labs train --max-iters {iters} {shlex.join(summary['train_options'])}",
        f"  {'backend':<9}{'wall':>10}{'steps':>10}{'eval+ckpt':>11}{'start+end':>11}"
        f"{'steps share':>13}",
    ]
    for r in runs:
        if "error" in r:
            lines.append(f"  {r['backend']:<9}  failed: {r['error']}")
            continue
        lines.append(
            f"  {r['backend']:<9}{r['wall_s']:>8.1f} s{r['train_steps_s']:>8.1f} s"
            f"{r['eval_checkpoint_s']:>9.1f} s{r['startup_summary_s']:>9.1f} s"
            f"{r['train_steps_share']:>13.0%}"
        )
    for key, label in (
        ("numpy_over_torch_train_wall_ratio", "wall time"),
        ("numpy_over_torch_train_steps_ratio", "training steps' time"),
    ):
        value = summary[key]
        lines.append(
            f"numpy / torch whole-run {label}: {'-' if value is None else f'{value:.2f}'}x"
        )
    return lines
