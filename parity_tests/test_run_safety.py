"""A run directory is never destroyed, never left unusable, and never misreported.

``python -m labs train`` into a directory that holds a run refuses (``--overwrite``
replaces it, keeping its checkpoint until the new run's first); what a killed save
leaves behind (``.staging/``, ``.previous.tmp/``, ``*.tmp``) is cleaned on the next
start; a log row is written only with its checkpoint, and a torn or NUL-padded last
line is repaired on resume; a damaged checkpoint is reported as damaged, and
``.previous`` is loaded only when asked (``--from-previous``), the steps lost said;
a full disk is one line, with the last good checkpoint intact and no partial files;
a weights-only checkpoint resumes at its step; every file written is strict JSON.

No chapter marker: this is the plumbing of ``labs/`` (plumbing/checkpoint.py,
plumbing/run_dir.py, commands/train*.py, commands/sample.py).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from labs.plumbing import checkpoint as ck
from labs.plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, OPTIMIZER_FILE
from parity_tests.test_labs import TEXT

TINY = [
    "--eval-interval", "1", "--eval-batches", "2", "--eval-batch-size", "4",
    "--batch-size", "4", "--block-size", "16", "--n-layers", "1", "--d-model", "16",
    "--n-heads", "2", "--warmup-iters", "2", "--sample-tokens", "0", "--lr-decay-iters", "8",
]  # fmt: skip
STEPS = 3  # the fixture's run: checkpoints at steps 0, 1, 2, 3


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``python -m labs ARGV`` in this process: (exit status, stdout, stderr)."""
    from labs.__main__ import main

    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"bare {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def log_steps(out: Path) -> list[int]:
    lines = (out / "log.jsonl").read_text().splitlines()
    return [strict_json(line)["step"] for line in lines]


def digests(directory: Path) -> dict[str, str]:
    """SHA-256 of every file below ``directory`` (hidden ones included)."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


@pytest.fixture(scope="module")
def base_run(tmp_path_factory) -> Path:
    """One numpy run of STEPS steps, a checkpoint at each (copied by each test)."""
    from labs.__main__ import main

    base = tmp_path_factory.mktemp("runs")
    corpus = base / "tiny.txt"
    corpus.write_text(TEXT, encoding="utf-8")
    out = base / "run"
    argv = ["train", "--backend", "numpy", "--data", str(corpus), "--out", str(out)]
    assert main([*argv, "--max-iters", str(STEPS), *TINY]) == 0
    return out


@pytest.fixture
def run(base_run, tmp_path) -> Path:
    dst = tmp_path / "run"
    shutil.copytree(base_run, dst)
    return dst


def train_argv(run: Path, *extra) -> list[str]:
    return ["train", "--backend", "numpy", "--data", str(run.parent / "tiny.txt"), *extra, *TINY]


@pytest.fixture
def corpus(run) -> Path:
    p = run.parent / "tiny.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


# -- a run is never replaced by surprise ---------------------------------------------------
def test_train_into_an_existing_run_refuses_and_changes_nothing(run, corpus, capsys):
    before = digests(run)
    status, _, err = cli(capsys, *train_argv(run, "--out", run, "--max-iters", "2"))
    assert status == 2, err
    assert err.startswith("error: --out") and "already holds a run" in err
    assert f"--resume {run}" in err and "--overwrite" in err and len(err.splitlines()) == 1
    assert digests(run) == before


def test_overwrite_keeps_the_old_run_until_the_new_one_has_a_checkpoint(run, corpus, capsys):
    old_step = ck.load_checkpoint(run)[1]["step"]
    # the new run stops before its first checkpoint (a bad --data): nothing of the old changes
    before = digests(run)
    status, _, err = cli(
        capsys, "train", "--backend", "numpy", "--data", str(run / "missing.txt"),
        "--out", run, "--overwrite", "--max-iters", "2", *TINY,
    )  # fmt: skip
    assert status == 2 and "corpus" in err
    assert digests(run) == before
    status, out, err = cli(
        capsys, *train_argv(run, "--out", run, "--max-iters", "2", "--overwrite")
    )
    assert status == 0, err
    assert "--overwrite: replacing the run" in out
    assert log_steps(run) == [0, 1, 2]  # the new run's log alone
    assert ck.load_checkpoint(run)[1]["step"] == 2
    # the old run's last checkpoint stayed whole until the new run's first, then was kept
    # in .previous until the second: now .previous holds the new run's step 1
    assert ck.load_checkpoint(run / ck.PREVIOUS_DIR)[1]["step"] == 1 != old_step


def test_overwrite_replaces_only_a_run_of_its_own_kind(run, corpus, tmp_path, capsys):
    """``classify --overwrite`` into a train run once replaced its log.jsonl alone (the
    checkpoint stayed: ``train --resume`` then mixed the two); a run of another kind is
    refused whole, ``--overwrite`` or not, and one of the same kind replaced whole."""
    task = ["--max-iters", "2", "--eval-interval", "1", "--d-model", "16", "--n-heads", "2",
            "--n-layers", "1", "--batch-size", "4"]  # fmt: skip
    classify = ["classify", "--backend", "numpy", "--data", corpus, "--speakers", "2",
                "--block-size", "16", *task]  # fmt: skip
    before = digests(run)
    for extra in ([], ["--overwrite"]):
        status, _, err = cli(capsys, *classify, "--out", run, *extra)
        assert status == 2 and len(err.splitlines()) == 1, err
        assert err.startswith(f"error: --out {run} holds a train run (config.json"), err
        assert digests(run) == before
    other = tmp_path / "classified"
    status, _, err = cli(capsys, *classify, "--out", other)
    assert status == 0, err
    assert strict_json((other / "metrics.json").read_text())["command"] == "classify"
    before = digests(other)
    seq2seq = ["seq2seq", "--backend", "numpy", "--max-len", "4", "--n-val", "20", *task]
    for argv in (train_argv(run, "--max-iters", "2"), seq2seq):
        status, _, err = cli(capsys, *argv, "--out", other, "--overwrite")
        assert status == 2 and len(err.splitlines()) == 1, err
        assert f"holds a classify run (metrics.json), not a {argv[0]} run" in err
        assert digests(other) == before
    # the same kind: a run that stops before its first row replaces nothing; the first
    # row replaces the old log and removes the old metrics.json (never half of each)
    with np.errstate(over="ignore", invalid="ignore"):  # the rate overflows on purpose
        status, _, err = cli(capsys, *classify, "--out", other, "--overwrite", "--lr", "1e30")
    assert status == 2 and "training stopped" in err
    assert digests(other) == before
    from labs.commands.shared import TaskOutput

    with TaskOutput(other, True, "classify") as output:
        output.row({"step": 1, "train_loss": 1.0})
    assert not (other / "metrics.json").exists() and log_steps(other) == [1]


def test_one_process_per_run_directory(run, corpus, capsys):
    from labs.plumbing.run_dir import RunLock

    lock = RunLock(run)  # as a second process training into it would hold it
    try:
        status, _, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    finally:
        lock.release()
    assert status == 2 and "in use by another process" in err
    assert log_steps(run) == [0, 1, 2, 3]


# -- what a killed writer leaves is cleaned up --------------------------------------------------
@pytest.mark.parametrize("leftover", [".previous.tmp", ".staging", ".log.jsonl.tmp"])
@pytest.mark.parametrize("kind", ["directory", "file"])
def test_leftovers_of_a_killed_save_never_break_the_run(leftover, kind, run, corpus, capsys):
    """A ``.previous.tmp/`` directory (a kill while the current set was being kept) once
    made every later save fail with IsADirectoryError."""
    path = run / leftover
    if kind == "directory":
        path.mkdir()
        (path / MODEL_FILE).write_bytes(b"half")
    else:
        path.write_bytes(b"half")
    status, out, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    assert status == 0, err
    assert "removed what an interrupted run left" in out
    assert not path.exists() and log_steps(run) == [0, 1, 2, 3, 4, 5]


# -- the log: one row per checkpoint, repaired after a crash ------------------------------------
@pytest.mark.parametrize(
    "tail",
    [b'{"step": 4, "train_lo', b"\x00" * 64, b'{"step": 4, "train_loss": 1.0}\x00\x00\n'],
    ids=["torn", "nul-padded", "row-then-nul"],
)
def test_a_torn_last_log_line_is_repaired_on_resume(tail, run, corpus, capsys):
    with open(run / "log.jsonl", "ab") as f:
        f.write(tail)
    status, out, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    assert status == 0, err
    assert ("dropped it" if tail.strip(b"\x00") else "NUL bytes") in out
    assert log_steps(run) == [0, 1, 2, 3, 4, 5]


def test_a_log_row_lost_after_its_checkpoint_is_restored(run, corpus, capsys):
    lines = (run / "log.jsonl").read_text().splitlines(keepends=True)
    (run / "log.jsonl").write_text("".join(lines[:-1]))  # killed before the row of step 3
    status, out, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "4"))
    assert status == 0, err
    assert "had no row for step 3" in out
    rows = [strict_json(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    assert rows[3] == strict_json(lines[-1])  # the very row, from the checkpoint


# -- damaged checkpoints are reported, .previous only when asked ---------------------------------
def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("command", ["sample", "resume"])
def test_a_damaged_checkpoint_is_reported_and_previous_is_opt_in(command, run, corpus, capsys):
    truncate(run / MODEL_FILE)
    argv = (
        ["sample", "--checkpoint", run, "--max-new-tokens", "3", "--prompt", "All"]
        if command == "sample"
        else train_argv(run, "--resume", run, "--max-iters", "5")
    )
    before = digests(run)
    status, _, err = cli(capsys, *argv)
    assert status == 2, err
    assert "is damaged" in err and f"step {STEPS}" in err and f"(step {STEPS - 1})" in err
    assert "interrupted while being written" not in err and "--from-previous" in err
    assert digests(run) == before  # nothing written
    status, out, err = cli(capsys, *argv, "--from-previous")
    assert status == 0, err
    assert f"loaded the older checkpoint in {run / ck.PREVIOUS_DIR} (step {STEPS - 1})" in (
        out + err
    )
    assert "the 1 steps after it are lost" in out + err
    if command == "resume":
        assert log_steps(run) == [0, 1, 2, 3, 4, 5]  # step 3 redone, its row replaced
        assert ck.load_checkpoint(run)[1]["step"] == 5


def test_an_interrupted_save_recovers_on_its_own(run, corpus, capsys):
    """New weights next to the old config.json (a kill between two renames): the
    checkpoint config.json describes is whole in .previous, and loads from there."""
    step = ck.load_checkpoint(run)[1]["step"]
    shutil.rmtree(run / ck.PREVIOUS_DIR)
    ck._keep_previous(run)  # what the killed save had done before its renames
    (run / "new").write_bytes((run / MODEL_FILE).read_bytes()[:-8] + bytes(8))
    os.replace(run / "new", run / MODEL_FILE)  # its first rename: another model file
    status, out, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    assert status == 0, err
    assert f"loaded that checkpoint (step {step})" in out and "nothing is lost" in out
    assert log_steps(run) == [0, 1, 2, 3, 4, 5]


def test_sample_of_a_file_says_it_is_a_file(run, capsys):
    status, _, err = cli(capsys, "sample", "--checkpoint", run / CONFIG_FILE)
    assert status == 2 and "is a file, not a checkpoint directory" in err
    assert "not found" not in err


# -- a full disk ----------------------------------------------------------------------------
def test_a_full_disk_is_one_line_and_leaves_the_checkpoint_intact(run, corpus, capsys, monkeypatch):
    from labs.plumbing import checkpoint_files

    real_write = checkpoint_files._write_arrays
    calls = []

    def fill_up(path, arrays):
        calls.append(path)
        if len(calls) == 2:  # the second file of the first save after the resume
            path.write_bytes(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(path, arrays)

    monkeypatch.setattr(ck, "_write_arrays", fill_up)
    before = digests(run)
    status, _, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    assert status == 2, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "no space left" in err and "Traceback" not in err
    assert f"the last good checkpoint (step {STEPS}) is intact" in err
    assert not (run / ck.STAGING_DIR).exists() and not list(run.glob(".*.tmp"))
    assert digests(run) == before
    assert ck.load_checkpoint(run)[1]["step"] == STEPS


# -- weights only ---------------------------------------------------------------------------
def test_a_weights_only_checkpoint_resumes_at_its_step(run, corpus, capsys):
    weights, config, _ = ck.load_checkpoint(run)
    meta = {k: v for k, v in config.items() if k not in ("model", "tokenizer", "train")}
    meta = {k: v for k, v in meta.items() if k not in ("format", "version", "files")}
    shutil.rmtree(run / ck.PREVIOUS_DIR)
    ck.save_checkpoint(run, weights, {k: config[k] for k in ("model", "tokenizer", "train")},
                       None, meta=meta)  # fmt: skip
    assert not (run / OPTIMIZER_FILE).exists()
    status, out, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "5"))
    assert status == 0, err
    assert f"resuming from {run} at step {STEPS}" in out and "holds weights only" in out
    assert log_steps(run) == [0, 1, 2, 3, 4, 5]
    _, config, opt = ck.load_checkpoint(run)
    assert config["step"] == 5 and int(opt["step"]) == 5  # labelled with the steps taken
    last = strict_json((run / "log.jsonl").read_text().splitlines()[-1])
    assert config["metrics"]["lr"] == last["lr"] < config["train"]["lr"]  # the schedule went on


# -- strict JSON ------------------------------------------------------------------------------
def test_every_json_file_a_run_writes_is_strict(run):
    for path in [run / CONFIG_FILE, run / ck.PREVIOUS_DIR / CONFIG_FILE]:
        strict_json(path.read_text())
    for line in (run / "log.jsonl").read_text().splitlines():
        strict_json(line)
    weights, config, moments = ck.load_checkpoint(run)
    sections = {k: config[k] for k in ("model", "tokenizer")}
    with pytest.raises(ValueError, match="NaN"):
        ck.save_checkpoint(run / "nan", weights, sections, moments, meta={"metrics": {"x": np.nan}})
    assert not (run / "nan").exists()
    config = (run / CONFIG_FILE).read_text().replace('"step": 3', '"step": NaN', 1)
    (run / CONFIG_FILE).write_text(config)
    with pytest.raises(ValueError, match="not valid JSON"):
        ck.load_checkpoint(run)
