"""The two tasks of ``python -m labs classify`` and ``python -m labs seq2seq``: their data,
and a few steps of each command with each backend (a smoke test, not a result).

No chapter marker: this is plumbing, not an exercise. No network: the corpus is
a small synthetic text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labs.plumbing.tasks import IGNORE_INDEX
from labs.plumbing.tasks_sequence import BOS, EOS, PAD, SequenceTask
from labs.plumbing.tasks_speakers import (
    WordTokenizer,
    encode_padded,
    parse_speeches,
    random_crops,
    speaker_dataset,
)
from numpy_impl.char_tokenizer import CharTokenizer
from parity_tests.harness import held_arrays

ROOT = Path(__file__).resolve().parent.parent

PLAY = """First Citizen:
Before we proceed any further, hear me speak.

All:
Speak, speak.

First Citizen:
You are all resolved rather to die than to famish?

Enter MENENIUS

MENENIUS:
What work's, my countrymen, in hand? where go you
With bats and clubs?

KING RICHARD III:
Now is the winter of our discontent.

All:
Resolved. resolved.
"""


def test_parse_speeches_reads_headers_and_skips_the_rest():
    speeches = parse_speeches(PLAY)
    assert [name for name, _ in speeches] == [
        "First Citizen",
        "All",
        "First Citizen",
        "MENENIUS",
        "KING RICHARD III",
        "All",
    ]  # "Enter MENENIUS" is a stage direction: no colon, no speech
    assert (
        speeches[3][1] == "What work's, my countrymen, in hand? where go you\nWith bats and clubs?"
    )


def test_speaker_dataset_is_a_stratified_split_by_speech():
    names = ["ANNA", "BORIS", "CARL"]
    text = "".join(f"{names[i % 3]}:\nline {i} of speaker {i % 3}\n\n" for i in range(60))
    text += "DORA:\nrare\n\n"
    data = speaker_dataset(text, 3, val_fraction=0.25, seed=0)
    assert data.speakers == names  # DORA (one speech) is not among the 3 most frequent
    assert len(data.val_labels) == 15 and len(data.train_labels) == 45
    assert np.bincount(data.val_labels).tolist() == [5, 5, 5]
    assert not set(data.val_texts) & set(data.train_texts)  # no speech in both splits
    for text_, y in zip(data.val_texts, data.val_labels, strict=True):
        assert text_.endswith(f"speaker {y}")
    _, baseline = data.majority_baseline()
    assert baseline == pytest.approx(1 / 3)
    again = speaker_dataset(text, 3, val_fraction=0.25, seed=0)
    assert again.val_texts == data.val_texts  # seeded


def test_encode_padded_masks_the_padding():
    tok = CharTokenizer("abc")
    ids, mask = encode_padded(tok, ["ab", "abcabc", ""], 4)
    assert ids.tolist() == [[0, 1, 0, 0], [0, 1, 2, 0], [0, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]
    crops, crop_mask = random_crops(tok, ["abcabc", "a"], 4, np.random.default_rng(0))
    assert crop_mask.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    assert "".join("abc"[i] for i in crops[0]) in "abcabc"  # a window of the speech


def test_word_tokenizer():
    tok = WordTokenizer.from_texts(["The king, the KING!", "O'er the hill"], max_vocab=3)
    assert tok.words == ["<pad>", "<unk>", "the", "king", ","]  # most frequent first
    assert tok.encode_array("the King o'er").tolist() == [2, 3, 1]  # o'er: one unknown token
    assert WordTokenizer.PATTERN.findall("o'er the hill, 'tis") == [
        "o'er",
        "the",
        "hill",
        ",",
        "'",
        "tis",
    ]


@pytest.mark.parametrize("name", ["reverse", "sort"])
def test_sequence_task_batches(name):
    task = SequenceTask(name, min_len=1, max_len=4, n_val=50, seed=0)
    assert len({tuple(s) for s in task.val}) == 50  # distinct
    b = task.batch([np.array([3, 1, 4]), np.array([5])])
    y = [4, 1, 3] if name == "reverse" else [1, 3, 4]
    d = [3 + v for v in y]
    assert b["src"].tolist() == [[6, 4, 7, PAD], [8, PAD, PAD, PAD]]
    assert b["src_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]]
    assert b["tgt_in"].tolist() == [[BOS, *d, PAD], [BOS, 8, PAD, PAD, PAD]]
    assert b["tgt_out"].tolist() == [[*d, EOS, IGNORE_INDEX], [8, EOS, *[IGNORE_INDEX] * 3]]
    assert b["tgt_mask"].tolist() == [[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]]
    held_out = {tuple(s) for s in task.val}
    assert not any(tuple(s) in held_out for s in task.train_sequences(500))
    good = np.array([[*d, EOS, 9], [8, EOS, 0, 0, 0]])
    assert task.exact_match(good, [np.array([3, 1, 4]), np.array([5])]).tolist() == [True, True]
    no_eos = np.array([[*d, 5, 5]])
    assert task.exact_match(no_eos, [np.array([3, 1, 4])]).tolist() == [False]
    assert task.decode(good[0]) == "".join(map(str, y)) + "<eos>"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "labs", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(("backend", "tokenizer"), [("numpy", "word"), ("torch", "char")])
def test_classify_cli_smoke(tmp_path, backend, tokenizer):
    corpus = tmp_path / "play.txt"
    corpus.write_text((PLAY + "\n") * 6, encoding="utf-8")
    out = tmp_path / "run"
    r = run_cli(
        "classify", "--backend", backend, "--data", str(corpus), "--out", str(out),
        "--speakers", "3", "--max-iters", "4", "--eval-interval", "2", "--block-size", "24",
        "--tokenizer", tokenizer,
        "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--batch-size", "4",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "majority-class baseline" in r.stdout and "held-out accuracy" in r.stdout
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert [row["step"] for row in log] == [2, 4]
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["val_accuracy"] <= 1.0 and 0.0 < metrics["majority_baseline"] <= 1.0
    assert metrics["speakers"] == ["All", "First Citizen", "KING RICHARD III"]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_seq2seq_cli_smoke(tmp_path, backend):
    out = tmp_path / "run"
    r = run_cli(
        "seq2seq", "--backend", backend, "--out", str(out), "--max-iters", "3",
        "--eval-interval", "3", "--max-len", "4", "--n-val", "20", "--d-model", "16",
        "--n-heads", "2", "--n-layers", "1", "--batch-size", "8",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out exact match" in r.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["step"] == 3 and 0.0 <= metrics["exact_match"] <= 1.0


def test_task_cli_errors_are_one_line():
    r = run_cli("seq2seq", "--backend", "numpy", "--min-len", "5", "--max-len", "3")
    assert r.returncode == 2 and r.stderr.startswith("error: --min-len (5) must not exceed")


@pytest.mark.parametrize("kind", ["classifier", "seq2seq"])
def test_predict_keeps_no_backward_cache_and_training_still_works(kind):
    # evaluation (labs classify, labs seq2seq) runs under no_grad, as the torch side's
    # inference_mode: afterwards no layer holds an activation, and the next step trains
    from labs.plumbing.tasks import TaskModel

    rng = np.random.default_rng(0)
    sizes = {"n_heads": 2, "d_model": 8, "block_size": 8, "dropout": 0.1}
    if kind == "classifier":
        kwargs = {"vocab_size": 11, "num_classes": 3, "n_layers": 1, **sizes}
        inputs = {"idx": rng.integers(0, 11, (2, 8)), "token_mask": np.ones((2, 8), bool)}
        targets = np.array([0, 2])
    else:
        kwargs = {"src_vocab_size": 11, "tgt_vocab_size": 11, "n_encoder_layers": 1}
        kwargs.update(n_decoder_layers=1, **sizes)
        inputs = {"src": rng.integers(0, 11, (2, 8)), "tgt": rng.integers(0, 11, (2, 5))}
        targets = rng.integers(0, 11, (2, 5))
    model = TaskModel("numpy", kind, kwargs, dtype="float64")
    model.train_step(inputs, targets)
    model.predict(inputs)
    assert held_arrays(model.model) == []
    assert model.model.training  # back in training mode
    assert np.isfinite(model.train_step(inputs, targets))
