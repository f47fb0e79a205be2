"""The command line at its edges: every option checked before anything is written, the
same way for both backends; no traceback, no garbage, no bare NaN in a file.

* ``train``, ``sample``, ``classify``, ``seq2seq``: a NaN, an infinity, a number out of
  range, a seed outside ``[0, 2**63)``, an empty path: one ``error:`` line naming the
  option, exit status 2, and no output directory created.
* ``sample``: any positive temperature samples sensibly (a tiny one is greedy), on
  both backends.
* ``classify`` and ``seq2seq`` stop on a non-finite step (as ``train`` does) and write
  strict JSON only.
* ``train --tokenizer bpe`` learns its merges from the training split alone.

No chapter marker: this is the plumbing of ``labs/`` (commands/*.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from parity_tests.test_labs import TEXT

TINY = [
    "--eval-interval", "1", "--eval-batches", "1", "--eval-batch-size", "2",
    "--batch-size", "2", "--block-size", "8", "--n-layers", "1", "--d-model", "16",
    "--n-heads", "2", "--sample-tokens", "0",
]  # fmt: skip


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``python -m labs ARGV`` in this process: (exit status, stdout, stderr)."""
    from labs.__main__ import main

    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def strict_json(text: str):
    def refuse(name):
        raise ValueError(f"bare {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def one_error_line(err: str, *needles: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def checkpoint(corpus) -> Path:
    """A trained run to sample from (two steps)."""
    from labs.__main__ import main

    out = corpus.parent / "run"
    argv = ["train", "--backend", "numpy", "--data", corpus, "--out", out, "--max-iters", "2"]
    assert main([str(a) for a in [*argv, *TINY]]) == 0
    return out


# -- train: every option checked first -------------------------------------------------------
TRAIN_BAD = [  # (option, value, what the error says)
    ("--lr", "inf", "--lr: must be a finite number > 0"),
    ("--lr", "nan", "--lr: must be a finite number > 0"),
    ("--lr", "0", "--lr: must be a finite number > 0"),
    ("--min-lr", "inf", "--min-lr: must be a finite number >= 0"),
    ("--weight-decay", "nan", "--weight-decay: must be a finite number >= 0"),
    ("--weight-decay", "inf", "--weight-decay: must be a finite number >= 0"),
    ("--dropout", "nan", "--dropout: must be a finite number in [0, 1)"),
    ("--dropout", "1", "--dropout: must be a finite number in [0, 1)"),
    ("--beta1", "nan", "--beta1: must be a finite number in [0, 1)"),
    ("--beta2", "1", "--beta2: must be a finite number in [0, 1)"),
    ("--grad-clip", "inf", "--grad-clip: must be a finite number >= 0"),
    ("--seed", "-1", "--seed: must lie in [0, 2**63)"),
    ("--seed", str(2**63), "--seed: must lie in [0, 2**63)"),
    ("--max-iters", "0", "--max-iters: must be >= 1"),
    ("--d-ff", "0", "--d-ff: must be >= 1"),
    ("--vocab-size", "0", "--vocab-size: must lie in [1, 1,048,576]"),
    ("--warmup-iters", "-1", "--warmup-iters: must be >= 0"),
    ("--out", "", "--out: must name a path"),
    ("--data", "", "--data: must name a path"),
    ("--d-model", str(2**40), "more than this machine's"),
    ("--min-lr", "0.01", "--min-lr (0.01) must not exceed --lr"),
    ("--device", "bogus", "--device bogus"),
    ("--data", "/", "is a directory"),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("option", "value", "says"), TRAIN_BAD, ids=[o + v for o, v, _ in TRAIN_BAD]
)
def test_train_refuses_a_bad_option_before_writing(
    option, value, says, backend, corpus, tmp_path, capsys
):
    out = tmp_path / "run"
    argv = ["train", "--backend", backend, "--data", corpus, "--out", out, "--max-iters", "1"]
    if option == "--d-model":
        argv += ["--n-heads", "1"]
    status, _, err = cli(capsys, *argv, *TINY, option, value)
    assert status == 2
    one_error_line(err, says)
    assert not out.exists(), "something was written before the options were checked"


# -- sample ------------------------------------------------------------------------------------
SAMPLE_BAD = [
    ("--temperature", "nan", "--temperature: must be a finite number >= 0"),
    ("--temperature", "inf", "--temperature: must be a finite number >= 0"),
    ("--temperature", "-1", "--temperature: must be a finite number >= 0"),
    ("--top-p", "nan", "--top-p: must be a finite number in (0, 1]"),
    ("--top-k", "0", "--top-k: must be >= 1"),
    ("--seed", "-1", "--seed: must lie in [0, 2**63)"),
    ("--seed", "99999999999999999999999", "--seed: must lie in [0, 2**63)"),
    ("--max-new-tokens", "-1", "--max-new-tokens: must lie in [0, 100,000]"),
    ("--checkpoint", "", "--checkpoint: must name a path"),
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize(
    ("option", "value", "says"), SAMPLE_BAD, ids=[o + v for o, v, _ in SAMPLE_BAD]
)
def test_sample_refuses_a_bad_option(option, value, says, backend, checkpoint, capsys):
    argv = ["sample", "--checkpoint", checkpoint, "--backend", backend, "--max-new-tokens", "3"]
    status, _, err = cli(capsys, *argv, option, value)
    assert status == 2
    one_error_line(err, says)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("temperature", ["1e-40", "5e-324", "1e-300", "1e-30"])
def test_a_tiny_temperature_is_greedy_not_garbage(temperature, backend, checkpoint, capsys):
    """logits / 1e-40 overflowed to inf: NumPy printed newlines (a NaN softmax drew
    id 0), torch.multinomial raised. Now the largest logit takes all the mass."""
    argv = ["sample", "--checkpoint", checkpoint, "--backend", backend, "--prompt", "All",
            "--max-new-tokens", "12"]  # fmt: skip
    status, greedy, err = cli(capsys, *argv, "--temperature", "0")
    assert status == 0, err
    status, tiny, err = cli(capsys, *argv, "--temperature", temperature)
    assert status == 0, err
    assert tiny == greedy and tiny.strip() != "All"


# -- classify and seq2seq ----------------------------------------------------------------------
TASK = ["--max-iters", "2", "--eval-interval", "1", "--d-model", "16", "--n-heads", "2",
        "--n-layers", "1", "--batch-size", "4"]  # fmt: skip


def task_argv(command: str, backend: str, out: Path, corpus: Path) -> list:
    argv = [command, "--backend", backend, "--out", out, *TASK]
    if command == "classify":
        return [*argv, "--data", corpus, "--speakers", "2", "--block-size", "16"]
    return [*argv, "--max-len", "4", "--n-val", "20"]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("command", ["classify", "seq2seq"])
@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--lr", "inf", "--lr: must be a finite number > 0"),
        ("--weight-decay", "nan", "--weight-decay: must be a finite number >= 0"),
        ("--seed", "-1", "--seed: must lie in [0, 2**63)"),
        ("--seed", str(2**64), "--seed: must lie in [0, 2**63)"),
        ("--dropout", "nan", "--dropout: must be a finite number in [0, 1)"),
    ],
)
def test_task_commands_refuse_a_bad_option(
    option, value, says, command, backend, corpus, tmp_path, capsys
):
    out = tmp_path / "run"
    status, _, err = cli(capsys, *task_argv(command, backend, out, corpus), option, value)
    assert status == 2
    one_error_line(err, says)
    assert not out.exists()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's overflows: the point here
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("command", ["classify", "seq2seq"])
def test_task_commands_stop_on_a_non_finite_step(command, backend, corpus, tmp_path, capsys):
    """``--lr inf`` once trained to NaN, exited 0 and wrote "accuracy 29.2%" (argmax of
    NaN logits is class 0) and a metrics.json no strict parser reads."""
    out = tmp_path / "run"
    argv = task_argv(command, backend, out, corpus)
    argv[argv.index("--max-iters") + 1] = "6"
    status, _, err = cli(capsys, *argv, "--lr", "1e30", "--warmup-iters", "0")
    assert status == 2
    one_error_line(err, "training stopped at step", "Try a lower --lr")
    assert not (out / "metrics.json").exists()
    if (out / "log.jsonl").exists():  # (stopped at the first evaluation: no log yet)
        for line in (out / "log.jsonl").read_text().splitlines():
            strict_json(line)


@pytest.mark.parametrize("command", ["classify", "seq2seq"])
def test_task_commands_refuse_to_replace_a_run(command, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    argv = task_argv(command, "numpy", out, corpus)
    status, _, err = cli(capsys, *argv)
    assert status == 0, err
    strict_json((out / "metrics.json").read_text())
    for line in (out / "log.jsonl").read_text().splitlines():
        strict_json(line)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    status, _, err = cli(capsys, *argv)
    assert status == 2
    one_error_line(err, "already holds a run", "--overwrite")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    status, _, err = cli(capsys, *argv, "--overwrite")
    assert status == 0, err


# -- BPE: merges from the training split --------------------------------------------------------
def test_bpe_merges_are_learned_from_the_training_split_only(tmp_path, capsys, monkeypatch):
    """A word that occurs only in the last 10% of the corpus (the validation split) must
    not become a token: merges learned from it would flatter val_bpb."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    corpus = tmp_path / "corpus.txt"
    head = TEXT * 4
    corpus.write_text(head + "Zyzzyva! " * (len(head) // 9 // 9 + 1), encoding="utf-8")
    out = tmp_path / "run"
    argv = ["train", "--backend", "numpy", "--data", corpus, "--out", out, "--max-iters", "1",
            "--tokenizer", "bpe", "--vocab-size", "300"]  # fmt: skip
    status, _, err = cli(capsys, *argv, *TINY)
    assert status == 0, err
    vocab = json.loads((out / "tokenizer.json").read_text())["model"]["vocab"]
    assert not [t for t in vocab if "yz" in t or "zz" in t], "validation text became merges"
    shutil.rmtree(tmp_path / "cache")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (
            ["seq2seq", "--backend", "numpy", "--n-val", str(10**8)],
            "--n-val: must lie in [1, 100,000]",
        ),
        (["start", "03", "--workspace", ""], "--workspace is empty"),
        # once accepted silently, named n_val, or ran for minutes without a word
        (["diff", "attention", "--width", "0"], "--width: must lie in [40, 10,000]"),
        (["diff", "attention", "--width", "-5"], "--width: must lie in [40, 10,000]"),
        (
            ["seq2seq", "--backend", "numpy", "--task", "sort", "--min-len", "1", "--max-len", "1"],
            "--n-val must be at most 5 (half of the 10 sequences of 1 digit), got 1,000",
        ),
        (
            ["seq2seq", "--backend", "numpy", "--max-len", "1000", "--max-iters", "3"],
            "--max-len: must lie in [1, 32]",
        ),
        (["start", "03", "--workspace", "/proc/no/such/dir"], "cannot make the workspace"),
    ],
)
def test_other_commands_refuse_what_they_cannot_do(argv, says, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # (a command that wrongly went on writes its runs/ here)
    status, _, err = cli(capsys, *argv)
    assert status == 2
    one_error_line(err, says)


def test_a_workspace_that_is_a_file_is_refused(corpus, capsys):
    status, _, err = cli(capsys, "start", "03", "--workspace", corpus)
    assert status == 2
    one_error_line(err, "cannot make the workspace", "Not a directory")


def test_docs_never_writes_into_a_folder_of_other_files(tmp_path, capsys, monkeypatch):
    """``docs --out DIR`` once overwrote index.html and figures/ in any folder (a run
    directory, /): a folder that is not empty and not a previous site is refused,
    unless --force; a previous site (its marker file) is rebuilt in place."""
    pytest.importorskip("markdown")
    pytest.importorskip("pygments")
    pytest.importorskip("latex2mathml")
    monkeypatch.setenv("TWINFORMER_FIGURES", str(tmp_path / "no-figures"))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index.html").write_text("my own page")
    argv = ["docs", "--out", mine, "--figures", "existing"]
    status, _, err = cli(capsys, *argv)
    assert status == 2
    one_error_line(err, f"--out {mine}", "not empty", "--force")
    assert [p.name for p in mine.iterdir()] == ["index.html"]
    assert (mine / "index.html").read_text() == "my own page"
    status, _, err = cli(capsys, *argv, "--force")
    assert status == 0, err
    assert (mine / ".twinformer-site").is_file() and (mine / "03_attention.html").is_file()
    status, _, err = cli(capsys, *argv)  # a previous site: rebuilt without --force
    assert status == 0, err


def test_a_corpus_shorter_than_the_context_says_how_short(tmp_path, capsys):
    corpus = tmp_path / "two.txt"
    corpus.write_text("ab", encoding="utf-8")  # a training split of 1 character
    out = tmp_path / "run"
    argv = ["train", "--backend", "numpy", "--data", corpus, "--out", out, *TINY]
    status, _, err = cli(capsys, *argv)
    assert status == 2
    one_error_line(err, "the training split has 1 character, fewer than --block-size + 1 = 9")
    assert not out.exists()


def test_no_fast_trains_the_formulas_and_is_the_numpy_backends_option(
    capsys, corpus, tmp_path, monkeypatch
):
    from numpy_impl import fast
    from parity_tests.harness import count_calls

    out = tmp_path / "formulas"
    calls = count_calls(monkeypatch, fast, "layer_norm")
    argv = ["train", "--backend", "numpy", "--data", corpus, "--out", out, "--max-iters", "2"]
    status, stdout, err = cli(capsys, *argv, *TINY, "--no-fast")
    assert status == 0, err
    assert not calls  # LayerNorm ran as norm.layer_norm, the chapter's formula
    assert "the formulas as written" in stdout + err
    assert strict_json((out / "config.json").read_text())["train"]["fast"] is False
    torch_out = tmp_path / "torch"
    argv = ["train", "--backend", "torch", "--data", corpus, "--out", torch_out, "--no-fast"]
    status, _, err = cli(capsys, *argv, *TINY)
    assert status == 2
    one_error_line(err, "--no-fast", "numpy backend")
    assert not torch_out.exists()  # refused before anything was written
