"""Kill ``python -m labs train`` with SIGKILL at random moments, resume it each time, and
check that the run ends exactly as an uninterrupted one.

    python scripts/kill_soak.py --kills 50 [--backend numpy] [--data PATH] [--max-iters 400]

A tiny model evaluates and saves a checkpoint at every step (``--eval-interval 1``),
so most kills land in or near a save. The script:

1. trains the reference run, uninterrupted, into ``WORK/reference``;
2. starts the same run into ``WORK/killed`` and, ``--kills`` times, SIGKILLs it after a
   random delay, then starts it again: ``train --resume WORK/killed`` (or, when the
   kill came before its first checkpoint, the first command again with
   ``--overwrite``); every restart must succeed (only our SIGKILL may stop it);
3. lets the last process finish, then checks: the weights, AdamW's moments, the
   batch sampler's and the dropout generator's states equal the reference run's bit
   for bit; ``log.jsonl`` holds exactly one row per checkpointed evaluation (steps
   0..max_iters, once each), equal to the reference's (``elapsed_s`` aside); nothing
   of a killed writer is left (``.staging``, ``*.tmp``).

It prints where the kills landed (judged from the directory right after each kill:
before the first checkpoint, inside a save, between a checkpoint and its log row,
or between saves) and what the restarts said (a fallback to ``.previous``, a log
row restored, a torn line dropped, leftovers removed). Exit status 0 when every
check passes. ``parity_tests/test_kill_soak.py`` runs a short version.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from labs.plumbing import checkpoint as ck  # noqa: E402
from labs.plumbing.run_dir import read_log  # noqa: E402

#: The tiny model (dropout on, so the dropout generator's state matters too).
TINY = [
    "--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--block-size", "16",
    "--batch-size", "4", "--eval-batches", "2", "--eval-batch-size", "8",
    "--sample-tokens", "0", "--eval-interval", "1", "--dropout", "0.1",
    "--warmup-iters", "2",
]  # fmt: skip


def train_command(args, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "labs", "train", *extra, "--out", str(out)]


def first_command(args, out: Path, overwrite: bool = False) -> list[str]:
    cmd = train_command(args, out, "--backend", args.backend, "--data", str(args.data))
    cmd += ["--max-iters", str(args.max_iters), "--lr-decay-iters", str(args.max_iters), *TINY]
    return cmd + (["--overwrite"] if overwrite else [])


def env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def where_it_landed(out: Path) -> str:
    """What a kill interrupted, judged from the directory it left."""
    if not (out / ck.CONFIG_FILE).is_file():
        return "before the first checkpoint"
    if (out / ck.STAGING_DIR).exists() or (out / f"{ck.PREVIOUS_DIR}.tmp").exists():
        return "inside a save"
    try:
        step = json.loads((out / ck.CONFIG_FILE).read_text())["step"]
    except (OSError, ValueError, KeyError):
        return "inside a save"
    rows, _ = read_log(out / "log.jsonl")
    if not rows or rows[-1]["step"] != step:
        return "between a checkpoint and its log row"
    return "between saves"


def checkpoint_step(out: Path) -> int | None:
    try:
        return int(json.loads((out / ck.CONFIG_FILE).read_text())["step"])
    except (OSError, ValueError, KeyError):
        return None


NOTES = {
    "loaded that checkpoint": "recovered an interrupted save from .previous",
    "restored it from the checkpoint": "restored a lost log row",
    "dropped it": "dropped a torn log line",
    "removed what an interrupted run left": "removed a killed writer's leftovers",
}


def soak(args) -> int:
    work = Path(args.work or tempfile.mkdtemp(prefix="kill-soak-"))
    reference, killed = work / "reference", work / "killed"
    for d in (reference, killed):
        shutil.rmtree(d, ignore_errors=True)
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    r = subprocess.run(first_command(args, reference), env=env(), cwd=ROOT, capture_output=True)
    if r.returncode != 0:
        print(r.stderr.decode()[-3000:], file=sys.stderr)
        return 1
    reference_s = time.monotonic() - t0
    print(f"reference run: {args.max_iters} steps in {reference_s:.1f} s")

    landed: collections.Counter[str] = collections.Counter()
    said: collections.Counter[str] = collections.Counter()
    restarts = collections.Counter()
    failures = []
    command = first_command(args, killed)
    for kill in range(args.kills + 1):
        proc = subprocess.Popen(
            command, env=env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if kill < args.kills:
            try:
                proc.wait(timeout=rng.uniform(args.min_delay, args.max_delay))
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        text = out.decode() + err.decode()
        for key, what in NOTES.items():
            said[what] += text.count(key)
        if proc.returncode == -signal.SIGKILL:
            landed[where_it_landed(killed)] += 1
        elif proc.returncode != 0:
            failures.append(f"restart {kill}: exit status {proc.returncode}: {text[-2000:]}")
            break
        if kill < args.kills and checkpoint_step(killed) == args.max_iters:
            print(
                f"the run finished after {kill + 1} kills: give a larger --max-iters",
                file=sys.stderr,
            )
            return 1
        if (killed / ck.CONFIG_FILE).is_file():
            command = train_command(args, killed, "--resume", str(killed))
            restarts["train --resume"] += 1
        else:
            command = first_command(args, killed, overwrite=True)
            restarts["the first command again, --overwrite"] += 1

    print(f"{sum(landed.values())} SIGKILLs; where they landed:")
    for what, n in landed.most_common():
        print(f"  {n:3d}  {what}")
    print("restarts: " + ", ".join(f"{n} x {what}" for what, n in restarts.items()))
    print("the restarts said: " + (", ".join(f"{n} x {w}" for w, n in said.items() if n) or "-"))
    failures += compare(reference, killed, args.max_iters)
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    if not failures:
        print(
            f"final weights, AdamW moments, sampler and dropout states equal the uninterrupted "
            f"run's bit for bit; log.jsonl has one row per evaluation (steps 0..{args.max_iters})"
            f"; {time.monotonic() - t0:.0f} s in all"
        )
    if not args.keep and not failures:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def compare(reference: Path, killed: Path, max_iters: int) -> list[str]:
    """What differs between the two runs' final state (empty when nothing does)."""
    problems = []
    wa, ca, oa = ck.load_checkpoint(reference)
    wb, cb, ob = ck.load_checkpoint(killed)
    if ca["step"] != cb["step"] or cb["step"] != max_iters:
        problems.append(f"steps: reference {ca['step']}, killed run {cb['step']}")
    for what, x, y in (("weight", wa, wb), ("AdamW state", oa, ob)):
        for k in sorted(set(x) | set(y)):
            if (
                k not in x
                or k not in y
                or x[k].dtype != y[k].dtype
                or not np.array_equal(x[k], y[k])
            ):
                problems.append(f"{what} {k} differs")
    for key in ("sampler_state", "rng_state"):
        if ca.get(key) != cb.get(key):
            problems.append(f"{key} differs")
    rows = {}
    for name, run in (("reference", reference), ("killed", killed)):
        got, notes = read_log(run / "log.jsonl")
        problems += [f"{name} log: {n}" for n in notes]
        rows[name] = [{k: v for k, v in r.items() if k != "elapsed_s"} for r in got]
    steps = [r["step"] for r in rows["killed"]]
    if steps != list(range(max_iters + 1)):
        repeated = [s for s, n in collections.Counter(steps).items() if n > 1]
        missing = sorted(set(range(max_iters + 1)) - set(steps))
        problems.append(f"log steps: repeated {repeated[:10]}, missing {missing[:10]}")
    elif rows["killed"] != rows["reference"]:
        bad = [r["step"] for r, s in zip(rows["killed"], rows["reference"], strict=True) if r != s]
        problems.append(f"log rows differ from the reference's at steps {bad[:10]}")
    leftovers = [
        p.name for p in killed.glob(".*") if p.name == ck.STAGING_DIR or p.suffix == ".tmp"
    ]
    if leftovers:
        problems.append(f"leftovers in {killed}: {leftovers}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50, help="SIGKILLs before the run may finish")
    p.add_argument("--backend", choices=("numpy", "torch"), default="numpy")
    p.add_argument(
        "--data",
        default=os.environ.get("TWINFORMER_DATA"),
        help="the corpus (default: $TWINFORMER_DATA)",
    )
    p.add_argument("--max-iters", type=int, default=400, help="steps of the run")
    p.add_argument("--min-delay", type=float, default=0.5, help="shortest life of a process, s")
    p.add_argument("--max-delay", type=float, default=4.0, help="longest life of a process, s")
    p.add_argument("--seed", type=int, default=0, help="of the kill delays")
    p.add_argument("--work", help="working directory (default: a fresh temporary one)")
    p.add_argument("--keep", action="store_true", help="keep the working directory")
    args = p.parse_args(argv)
    if not args.data:
        p.error("--data PATH (or TWINFORMER_DATA) is required")
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
