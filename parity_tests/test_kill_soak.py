"""SIGKILL ``python -m labs train`` anywhere, resume, and end with the uninterrupted run.

* The soak (``scripts/kill_soak.py``), short: a few random kills of a run that saves
  at every step, each followed by ``train --resume``; the final weights, AdamW
  moments, sampler and dropout states equal an uninterrupted run's bit for bit, and
  ``log.jsonl`` holds one row per checkpointed evaluation.
* Every stage of a save, deterministically: the writer is stopped at a named stage
  of its third save (``TWINFORMER_TEST_CHECKPOINT_PAUSE``), SIGKILLed there, and the
  resumed run is again the uninterrupted one, log included.

No chapter marker: this is the plumbing of ``labs/`` (plumbing/checkpoint.py,
plumbing/run_dir.py, commands/train*.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from labs.plumbing import checkpoint as ck
from labs.plumbing.checkpoint_files import PAUSE_ENV_VAR
from parity_tests.test_labs import TEXT

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
sys.path.insert(0, str(ROOT / "scripts"))

import kill_soak  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("soak") / "tiny.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def test_random_kills_then_resumes_end_as_the_uninterrupted_run(corpus, tmp_path):
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "kill_soak.py"), "--kills", "3",
         "--data", str(corpus), "--max-iters", "1000", "--min-delay", "0.8", "--max-delay", "1.6",
         "--work", str(tmp_path / "work"), "--seed", "1"],
        capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3 SIGKILLs" in r.stdout and "bit for bit" in r.stdout, r.stdout


STEPS = 5
#: Where the writer dies: STAGE@N, the Nth time it gets there (a save of step >= 1).
STAGES = [
    "writing@5",  # half of a staged file written (files 1-3: step 0, 4: the log's first row)
    "keeping-previous@2",  # .previous.tmp/ complete, not renamed yet
    "previous-removed@2",  # the old .previous/ gone, .previous.tmp/ not yet renamed
    "moved-optimizer.safetensors@3",  # new weights and moments, the old config.json
    "committed@3",  # the checkpoint is in place, its log row is not
]


@pytest.fixture(scope="module")
def straight(corpus, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("straight") / "run"
    r = subprocess.run(
        kill_soak.first_command(args(corpus), out), env=ENV, cwd=ROOT, capture_output=True
    )
    assert r.returncode == 0, r.stderr.decode()[-3000:]
    return out


def args(corpus: Path):
    class Args:
        backend, data, max_iters = "numpy", corpus, STEPS

    return Args


@pytest.mark.parametrize("stage", STAGES)
def test_a_kill_at_each_stage_of_a_save_resumes_to_the_same_run(stage, corpus, straight, tmp_path):
    out = tmp_path / "run"
    child = subprocess.Popen(
        kill_soak.first_command(args(corpus), out),
        env={**ENV, PAUSE_ENV_VAR: stage},
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    try:
        while "checkpoint writer paused" not in child.stderr.readline():
            assert time.monotonic() < deadline and child.poll() is None, "never paused"
    finally:
        child.kill()
        child.wait(timeout=30)
        child.stderr.close()
    log = out / "log.jsonl"
    rows = (
        [json.loads(line)["step"] for line in log.read_text().splitlines()] if log.exists() else []
    )
    with warnings.catch_warnings():  # (a kill between renames: the checkpoint is in .previous)
        warnings.simplefilter("ignore", ck.CheckpointWarning)
        step = ck.load_checkpoint(out)[1]["step"] if (out / ck.CONFIG_FILE).exists() else -1
    committed = stage.startswith("committed")  # killed between the checkpoint and its row
    assert rows == list(range(step if committed else step + 1)), (
        f"log rows {rows} for the checkpoint of step {step}: a row without its checkpoint"
    )
    r = subprocess.run(
        [sys.executable, "-m", "labs", "train", "--resume", str(out)],
        env=ENV, cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert kill_soak.compare(straight, out, STEPS) == []
    assert not (out / ck.STAGING_DIR).exists()
