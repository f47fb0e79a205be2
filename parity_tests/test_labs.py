"""The shared plumbing in ``labs/``: corpus resolution, batches, tokenizer, CLI.

None of these tests touches the network: downloads go to ``file://`` URLs of
temporary files, and the CLI runs train on a small synthetic corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from labs.plumbing import data
from labs.plumbing.checkpoint import load_checkpoint
from labs.plumbing.checkpoint_format import CONFIG_FILE, MODEL_FILE, expected_shapes
from numpy_impl.char_tokenizer import CharTokenizer

# No chapter marker but the tokenizer's (ch01): the rest is plumbing, not an exercise.
ROOT = Path(__file__).resolve().parent.parent

# A small corpus with Tiny Shakespeare's flavour; long enough for block 16.
TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die "
    "than to famish?\n\nAll:\nResolved. resolved.\n"
) * 8


@pytest.fixture
def corpus(tmp_path) -> Path:
    p = tmp_path / "tiny.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


# -- corpus resolution -------------------------------------------------------------------
def test_resolve_order_explicit_env_cache(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    assert data.resolve_corpus(corpus) == corpus  # explicit path first
    env_copy = tmp_path / "env.txt"
    env_copy.write_text("x", encoding="utf-8")
    monkeypatch.setenv(data.DATA_ENV_VAR, str(env_copy))
    assert data.resolve_corpus() == env_copy  # then the environment variable
    assert data.resolve_corpus(corpus) == corpus  # explicit still wins
    monkeypatch.delenv(data.DATA_ENV_VAR)
    cached = data.cache_path()
    cached.parent.mkdir(parents=True)
    cached.write_text("y", encoding="utf-8")
    assert data.resolve_corpus(url="file:///nonexistent") == cached  # then the cache


def test_missing_explicit_path_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        data.resolve_corpus(tmp_path / "nope.txt")


def test_download_checks_sha256_and_is_atomic(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    good = hashlib.sha256(corpus.read_bytes()).hexdigest()
    dest = tmp_path / "dl" / "corpus.txt"
    with pytest.raises(data.CorpusUnavailableError, match="SHA-256"):
        data.download_corpus(dest, url=corpus.as_uri(), sha256="0" * 64)
    assert not dest.exists() and not list(dest.parent.iterdir())  # no half-written file left
    assert data.download_corpus(dest, url=corpus.as_uri(), sha256=good).read_text() == TEXT


def test_offline_error_says_how_to_pass_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(data.DATA_ENV_VAR, raising=False)
    with pytest.raises(data.CorpusUnavailableError, match="--data PATH"):
        data.resolve_corpus(url=(tmp_path / "missing.txt").as_uri())


@pytest.mark.parametrize(
    "content, match", [(b"", "empty"), (b"caf\xe9 au lait", "not UTF-8")], ids=["empty", "latin1"]
)
def test_bad_corpus_files(tmp_path, content, match):
    p = tmp_path / "bad.txt"
    p.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        data.load_corpus(p)


# -- batches -----------------------------------------------------------------------------
def test_sampler_is_seeded_shifted_and_resumable():
    ids = np.arange(1000) % 37
    a = data.BatchSampler(ids, block_size=16, batch_size=5, seed=3)
    b = data.BatchSampler(ids, block_size=16, batch_size=5, seed=3)
    x, y = a.next()
    assert x.shape == y.shape == (5, 16) and x.dtype == np.int64
    np.testing.assert_array_equal(x, b.next()[0])  # same seed, same batch
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])  # targets are inputs shifted by one
    state = a.get_state()
    after = a.next()
    a.set_state(json.loads(json.dumps(state)))  # the state survives JSON (config.json)
    np.testing.assert_array_equal(a.next()[0], after[0])


def test_split_is_90_10():
    train, val = data.train_val_split(np.arange(1000))
    assert len(train) == 900 and len(val) == 100 and train[-1] + 1 == val[0]


# -- tokenizer ---------------------------------------------------------------------------
@pytest.mark.ch01
def test_char_tokenizer_round_trip_and_unknown_chars():
    tok = CharTokenizer.from_text(TEXT)
    assert tok.vocab_size == len(set(TEXT))
    assert tok.decode(tok.encode(TEXT)) == TEXT
    np.testing.assert_array_equal(tok.encode_array(TEXT), tok.encode(TEXT))
    with pytest.raises(ValueError, match="U\\+00E9"):
        tok.encode("café")
    with pytest.raises(ValueError):
        tok.decode([tok.vocab_size])


# -- the command line --------------------------------------------------------------------
def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "labs", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )


SMALL = [
    "--max-iters", "6", "--eval-interval", "3", "--eval-batches", "2",
    "--eval-batch-size", "4", "--batch-size", "4", "--block-size", "16",
    "--n-layers", "1", "--d-model", "16", "--n-heads", "2", "--warmup-iters", "2",
    "--sample-tokens", "20",
]  # fmt: skip


def test_train_then_sample_across_backends(tmp_path, corpus):
    """Train with each backend, then sample each checkpoint with the other backend."""
    for backend in ("numpy", "torch"):
        out = tmp_path / backend
        r = run_cli("train", "--backend", backend, "--data", str(corpus), "--out", str(out), *SMALL)
        assert r.returncode == 0, r.stderr
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        assert [e["step"] for e in log] == [0, 3, 6]
        assert {"step", "train_loss", "val_loss", "lr", "elapsed_s"} <= set(log[0])
        assert (out / "loss.png").stat().st_size > 0
        assert (out / MODEL_FILE).is_file() and (out / CONFIG_FILE).is_file()
        _, config, opt = load_checkpoint(out)
        assert config["step"] == 6 and opt is not None
    for trained, other in (("numpy", "torch"), ("torch", "numpy")):
        r = run_cli(
            "sample", "--checkpoint", str(tmp_path / trained), "--backend", other,
            "--prompt", "All:", "--max-new-tokens", "15", "--temperature", "0",
        )  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("All:") and len(r.stdout) >= len("All:") + 15  # 15 new chars


def test_greedy_samples_agree_across_backends(tmp_path, corpus):
    out = tmp_path / "run"
    r = run_cli("train", "--backend", "numpy", "--data", str(corpus), "--out", str(out), *SMALL)
    assert r.returncode == 0, r.stderr
    texts = [
        run_cli(
            "sample", "--checkpoint", str(out), "--backend", backend,
            "--prompt", "First", "--max-new-tokens", "30", "--temperature", "0",
        ).stdout
        for backend in ("numpy", "torch")
    ]  # fmt: skip
    assert texts[0] == texts[1]


@pytest.mark.parametrize(
    "args, match",
    [
        (["train", "--backend", "numpy", "--data", "/nonexistent/corpus.txt"], "corpus"),
        (["sample", "--checkpoint", "/nonexistent/run"], "nonexistent"),
    ],
    ids=["missing-corpus", "missing-checkpoint"],
)
def test_cli_errors_are_one_line(args, match, tmp_path):
    if args[0] == "train":  # not train's default runs/numpy: the README's own run may be there
        args = [*args, "--out", str(tmp_path / "run")]
    r = run_cli(*args)
    assert r.returncode == 2
    assert r.stderr.startswith("error:") and match in r.stderr
    assert "Traceback" not in r.stderr


def test_prompt_outside_vocabulary_is_a_clear_error(tmp_path, corpus):
    out = tmp_path / "run"
    r = run_cli("train", "--backend", "numpy", "--data", str(corpus), "--out", str(out), *SMALL)
    assert r.returncode == 0, r.stderr
    r = run_cli("sample", "--checkpoint", str(out), "--prompt", "Zebra")
    assert r.returncode == 2 and "error:" in r.stderr and "Z" in r.stderr


def test_interrupted_checkpoint_write_is_never_mixed(tmp_path, monkeypatch):
    """New weights next to an old config.json (a crash between two renames) must not
    load as one checkpoint: the previous checkpoint, kept whole, loads instead.
    (parity_tests/test_resume.py kills real writers at every stage.)"""
    from labs.plumbing import checkpoint as ck

    cfg = {"vocab_size": 5, "block_size": 4, "n_layers": 1, "n_heads": 1, "d_model": 2}
    shapes = expected_shapes(cfg)
    config = {"model": cfg, "tokenizer": {"type": "char", "chars": "abcde"}}
    state = {k: np.zeros(s, np.float32) for k, s in shapes.items()}
    ck.save_checkpoint(tmp_path, state, config, meta={"step": 1})
    real_replace = os.replace

    def crash_before_config(src, dst):
        if Path(dst).name == CONFIG_FILE:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", crash_before_config)
    state2 = {k: np.ones(s, np.float32) for k, s in shapes.items()}
    with pytest.raises(OSError):
        ck.save_checkpoint(tmp_path, state2, config, meta={"step": 2})
    with pytest.warns(ck.CheckpointWarning, match="interrupted"):
        loaded, loaded_config, _ = load_checkpoint(tmp_path)
    assert loaded_config["step"] == 1 and not loaded["tok_emb.weight"].any()


def test_bpe_runs_train_and_sample_across_backends(tmp_path, corpus):
    """``--tokenizer bpe``: each backend trains the tokenizer with its own implementation
    (the two agree), caches it, saves it as the checkpoint's tokenizer.json, and the
    other backend samples from that checkpoint; the log reports bits per byte."""
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    bpe = ["--tokenizer", "bpe", "--vocab-size", "300"]
    for backend in ("numpy", "torch"):
        out = tmp_path / backend
        args = ["train", "--backend", backend, "--data", str(corpus), "--out", str(out)]
        r = run_cli(*args, *bpe, *SMALL, env_extra=cache)
        assert r.returncode == 0, r.stderr
        assert "trained a BPE tokenizer" in r.stdout and "bits per byte" in r.stdout
        log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
        assert all(0 < e["val_bpb"] < e["val_loss"] * 3 for e in log)
        _, config, _ = load_checkpoint(out)
        assert config["tokenizer"]["type"] == "bpe" and config["model"]["vocab_size"] == 300
        assert "tokenizer.json" in config["files"]
    docs = [(tmp_path / b / "tokenizer.json").read_bytes() for b in ("numpy", "torch")]
    assert docs[0] == docs[1]  # from scratch and HF: the same tokenizer, the same bytes
    r = run_cli(
        "sample", "--checkpoint", str(tmp_path / "numpy"), "--backend", "torch",
        "--prompt", "All:", "--max-new-tokens", "15", "--temperature", "0",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("All:")


def test_bpe_tokenizer_is_trained_once_and_cached(tmp_path, monkeypatch):
    from labs.plumbing import tokenization

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    said = []
    first = tokenization.build_tokenizer("bpe", "numpy", TEXT, 280, log=said.append)
    assert "trained" in said[-1] and tokenization.cache_file("numpy", TEXT, 280).is_file()
    again = tokenization.build_tokenizer("bpe", "numpy", TEXT, 280, log=said.append)
    assert "from the cache" in said[-1] and again.merges == first.merges
    assert not tokenization.cache_file("numpy", TEXT + " ", 280).exists()  # keyed by corpus
    section, files = tokenization.tokenizer_config(first)
    (tmp_path / "tokenizer.json").write_bytes(files["tokenizer.json"])
    loaded = tokenization.load_tokenizer({"tokenizer": section}, tmp_path, "torch")
    assert loaded.encode(TEXT) == first.encode(TEXT)
    (tmp_path / "tokenizer.json").write_bytes(files["tokenizer.json"] + b" ")
    with pytest.raises(ValueError, match="sha256"):
        tokenization.load_tokenizer({"tokenizer": section}, tmp_path, "numpy")
    char = tokenization.build_tokenizer("char", "torch", TEXT, 280)
    assert tokenization.bits_per_byte(np.log(2), tokenization.bytes_per_token(char, [0, 1])) == 1
