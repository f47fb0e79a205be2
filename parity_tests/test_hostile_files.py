"""Hostile run directories, configs, imports and workspaces fail safely.

A run directory, an import or a workspace may come from someone else (a course's
starter run, a downloaded checkpoint). Whatever it holds, a command ends with one
``error:`` line, writes nothing outside the directories it was given, and neither
hangs nor allocates what a config merely declares. The three repros of the issue
(a config whose ``files`` map leads outside, a config declaring a billion layers, a
workspace whose ``numpy_impl`` is a link to the reference) run in a child process
held to 2 GB of address space and 20 seconds.

No chapter marker: this is the plumbing of ``labs/``.
"""

from __future__ import annotations

import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomllib
from safetensors.numpy import save_file

from labs.plumbing.checkpoint_format import CONFIG_FILE
from parity_tests import test_run_safety as safety
from parity_tests.test_run_safety import cli, digests, train_argv

base_run, run, corpus = safety.base_run, safety.run, safety.corpus  # its tiny run, copied

ROOT = Path(__file__).resolve().parent.parent


def limited(*argv, cwd=None) -> subprocess.CompletedProcess:
    """``python -m labs ARGV`` in a child held to 2 GB of address space and 20 s."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "labs", *map(str, argv)],
        capture_output=True,
        text=True,
        timeout=20,
        preexec_fn=limit,
        cwd=cwd or ROOT,
        env=env,
    )


def one_error(proc: subprocess.CompletedProcess, match: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and match in lines[0], proc.stderr


def edit(run_dir: Path, change) -> None:
    config = json.loads((run_dir / CONFIG_FILE).read_text())
    change(config)
    config.pop("config_sha256", None)  # a hand edit that also drops the hash
    (run_dir / CONFIG_FILE).write_text(json.dumps(config))


# -- 1. a config's "files" map never leads a save outside the run ----------------------
@pytest.mark.parametrize("via_link", [True, False])
def test_a_files_map_naming_a_path_outside_writes_nothing_there(run, tmp_path, via_link):
    victim_dir = tmp_path / "home"
    victim_dir.mkdir()
    victim = victim_dir / "authorized_keys"
    victim.write_text("the user's own keys\n")
    if via_link:
        (run / "S2").symlink_to(victim_dir)
        name = "../S2/authorized_keys"
    else:
        name = "../home/authorized_keys"
    edit(run, lambda c: c["files"].update({name: "0" * 64}))
    for argv in (
        ["train", "--resume", run],
        [
            "train",
            "--backend",
            "torch",
            "--overwrite",
            "--out",
            run,
            "--data",
            run.parent / "tiny.txt",
        ],
    ):
        proc = limited(*argv, "--max-iters", "4")
        assert proc.returncode == 2 and proc.stderr.count("error:") == 1, proc.stderr
        assert victim.read_text() == "the user's own keys\n"
        assert sorted(p.name for p in victim_dir.iterdir()) == ["authorized_keys"]


def test_links_and_special_files_in_a_run_are_refused_before_any_read(run, capsys):
    os.mkfifo(run / "model.safetensors.fifo")
    status, _, err = cli(capsys, "sample", "--checkpoint", run, "--max-new-tokens", "2")
    assert status == 2 and "is not a regular file" in err
    (run / "model.safetensors.fifo").unlink()
    (run / "log.jsonl").unlink()
    (run / "log.jsonl").symlink_to(run.parent / "elsewhere.jsonl")
    status, _, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "4"))
    assert status == 2 and "symbolic link" in err
    assert not (run.parent / "elsewhere.jsonl").exists()


def test_a_previous_that_is_not_a_directory_is_named(run, capsys):
    shutil.rmtree(run / ".previous")
    (run / ".previous").write_text("not a directory")
    status, _, err = cli(capsys, "sample", "--checkpoint", run, "--max-new-tokens", "2")
    assert status == 2 and ".previous is not a directory" in err


def test_a_lock_file_link_is_never_truncated_through(run, corpus, tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    (run / ".lock").unlink(missing_ok=True)
    (run / ".lock").symlink_to(target)
    status, _, err = cli(capsys, *train_argv(run, "--resume", run, "--max-iters", "4"))
    assert status == 2 and target.read_text() == "keep me"


# -- 2. a declared size is bounded by the weights present and by memory ---------------
@pytest.mark.parametrize("command", ["sample", "inspect", "export", "resume"])
def test_a_config_declaring_a_billion_layers_is_refused_at_once(run, tmp_path, command):
    edit(run, lambda c: c["model"].update(n_layers=1_000_000_000))
    argv = {
        "sample": ["sample", "--checkpoint", run],
        "inspect": ["inspect", run],
        "export": ["export", run, "--to", "hf", "--out", tmp_path / "hf"],
        "resume": ["train", "--resume", run],
    }[command]
    one_error(limited(*argv), "parameters")
    assert not (tmp_path / "hf").exists()


def test_a_config_whose_layers_are_not_in_the_weights_is_refused(run, capsys):
    edit(run, lambda c: c["model"].update(n_layers=2))
    status, _, err = cli(capsys, "sample", "--checkpoint", run)
    assert status == 2 and "declares 2 layers but the weights hold 1" in err


def test_an_edited_model_section_is_refused_by_its_hash(run, capsys):
    config = json.loads((run / CONFIG_FILE).read_text())
    config["model"]["norm_position"] = "post"  # same shapes, another model
    (run / CONFIG_FILE).write_text(json.dumps(config))
    status, _, err = cli(capsys, "sample", "--checkpoint", run)
    assert status == 2 and "edited after the checkpoint was saved" in err


def test_imports_declaring_a_billion_layers_are_refused_at_once(tmp_path):
    import torch

    state = {
        "transformer.wte.weight": torch.zeros(8, 4),
        "transformer.wpe.weight": torch.zeros(8, 4),
        "transformer.h.0.ln_1.weight": torch.ones(4),
    }
    args = {
        "n_layer": 1e9,
        "n_head": 1,
        "n_embd": 4,
        "block_size": 8,
        "bias": False,
        "vocab_size": 8,
        "dropout": 0.0,
    }
    (tmp_path / "meta.pkl").write_bytes(pickle.dumps({"itos": dict(enumerate("abcdefgh"))}))
    for n_layer, match in (
        (1e9, "n_layer must be a positive integer"),
        (1_000_000_000, "declares 1000000000 layers but the weights hold 1"),
    ):
        torch.save(
            {"model": state, "model_args": {**args, "n_layer": n_layer}}, tmp_path / "ckpt.pt"
        )
        one_error(
            limited(
                "import",
                "nanogpt",
                tmp_path / "ckpt.pt",
                "--meta",
                tmp_path / "meta.pkl",
                "--out",
                tmp_path / "run",
            ),
            match,
        )
    hf = tmp_path / "hf"
    hf.mkdir()
    weights = {
        "wte.weight": np.zeros((8, 4), np.float32),
        "h.0.ln_1.weight": np.ones(4, np.float32),
    }
    save_file(weights, hf / "model.safetensors")
    config = {
        "model_type": "gpt2",
        "n_layer": 1_000_000_000,
        "n_head": 1,
        "n_embd": 4,
        "n_positions": 8,
        "vocab_size": 8,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "resid_pdrop": 0.0,
        "embd_pdrop": 0.0,
        "attn_pdrop": 0.0,
    }
    (hf / "config.json").write_text(json.dumps(config))
    proc = limited("import", "gpt2", hf, "--out", tmp_path / "run2")
    one_error(proc, "layers")
    assert not (tmp_path / "run").exists() and not (tmp_path / "run2").exists()


@pytest.mark.parametrize(
    "payload",
    [
        b"\x80\x04}q\x00X\x04\x00\x00\x00itosq\x01]q\x02s.",
        b"\x80\x04\x95",
        b"garbage",
        b"(lp0\n(lp1\ng0\na.",
    ],
)
def test_a_hostile_meta_pkl_is_one_error(tmp_path, payload):
    from labs.plumbing.nanogpt import read_meta

    (tmp_path / "meta.pkl").write_bytes(payload)
    with pytest.raises(ValueError, match="meta.pkl"):
        read_meta(tmp_path / "meta.pkl")


def test_a_string_for_a_true_false_field_is_refused():
    from labs.plumbing.interop_gpt2 import from_gpt2_config, gpt2_config_dict

    config = gpt2_config_dict(
        {"vocab_size": 8, "block_size": 8, "n_layers": 1, "n_heads": 1, "d_model": 4}
    )
    with pytest.raises(ValueError, match="tie_word_embeddings: must be true or false"):
        from_gpt2_config({**config, "tie_word_embeddings": "false"})


# -- 3. a workspace's files are its own ------------------------------------------------
def test_a_workspace_linking_the_reference_package_is_refused(tmp_path):
    before = digests(ROOT / "numpy_impl")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "numpy_impl").symlink_to(ROOT / "numpy_impl")
    one_error(limited("start", "01", "--workspace", ws), "symbolic link")
    assert digests(ROOT / "numpy_impl") == before


# -- 4, 5. report paths are checked before the work -------------------------------------
def test_report_paths_are_checked_before_anything_runs(tmp_path):
    ws = tmp_path / "ws"
    assert limited("start", "01", "--workspace", ws).returncode == 0
    record = (ws / "progress.json").read_bytes()
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for option, target, match in (
        ("--json", ws / "progress.json", "inside the workspace"),
        ("--json", "/proc/nope/x.json", "cannot write"),
        ("--junit", a_file / "x.xml", "cannot write"),
        ("--json", tmp_path, "is a directory"),
    ):
        one_error(limited("check", "01", "--workspace", ws, option, target), match)
    assert (ws / "progress.json").read_bytes() == record
    one_error(limited("grade", ws, "--out", a_file), "cannot write")
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    "record, said",
    [("{not json", "damaged"), ('{"chapters": {"99": {}}, "version": 1}', "not a record")],
)
def test_grade_survives_a_damaged_record(tmp_path, record, said):
    good, bad = tmp_path / "good", tmp_path / "bad"
    for ws in (good, bad):
        assert limited("start", "01", "--workspace", ws).returncode == 0
    (bad / "progress.json").write_text(record)
    proc = subprocess.run(
        [sys.executable, "-m", "labs", "grade", good, bad, "--out", tmp_path / "grades"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    rows = (tmp_path / "grades" / "grades.csv").read_text().splitlines()
    assert len(rows) == 3 and said in rows[2]


@pytest.mark.parametrize("folder", [".reports", ".hypothesis"])
def test_check_never_writes_through_a_linked_folder(tmp_path, folder):
    ws, victim = tmp_path / "ws", tmp_path / "victim"
    assert limited("start", "01", "--workspace", ws).returncode == 0
    victim.mkdir()
    (victim / "ch01.json").write_text("PRECIOUS")
    (ws / folder).symlink_to(victim)
    one_error(limited("check", "01", "--workspace", ws), "not a link")
    assert (victim / "ch01.json").read_text() == "PRECIOUS"


def test_hugging_face_files_are_proven_inside_their_folder(tmp_path, monkeypatch):
    from labs.plumbing import hf_files
    from labs.plumbing.interop_gpt2 import from_gpt2_config

    outside, hf = tmp_path / "outside.json", tmp_path / "hf"
    outside.write_text('{"model_type": "gpt2"}')
    hf.mkdir()
    (hf / "config.json").symlink_to(outside)
    with pytest.raises(ValueError, match="outside"):
        hf_files.read_hf_config(hf)
    (hf / "config.json").unlink()
    (hf / "config.json").write_text("[" * 100_000)
    with pytest.raises(ValueError, match="not valid JSON"):
        hf_files.read_hf_config(hf)
    monkeypatch.setattr(hf_files, "MAX_JSON_BYTES", 10)
    with pytest.raises(ValueError, match="too large"):
        hf_files.read_hf_config(hf)
    with pytest.raises(ValueError, match="n_embd: expected a whole number, got 32.7"):
        from_gpt2_config({"model_type": "gpt2", "n_embd": 32.7, "n_layer": 1, "n_head": 1,
                          "n_positions": 8, "vocab_size": 8})  # fmt: skip


def test_training_on_a_corpus_without_a_newline_ends_with_its_sample(tmp_path, capsys):
    corpus = tmp_path / "letters.txt"
    corpus.write_text("abcab " * 400)
    argv = ["train", "--backend", "numpy", "--data", corpus, "--out", tmp_path / "run"]
    tiny = [
        "--max-iters",
        "2",
        "--eval-interval",
        "2",
        "--batch-size",
        "2",
        "--block-size",
        "8",
        "--n-layers",
        "1",
        "--d-model",
        "8",
        "--n-heads",
        "1",
        "--sample-tokens",
        "5",
    ]
    status, out, _ = cli(capsys, *argv, *tiny)
    assert status == 0 and "after the corpus's first token" in out


# -- 6. the smaller items ----------------------------------------------------------------
def test_sample_streams_and_caps_its_length(run, capsys):
    status, _, err = cli(capsys, "sample", "--checkpoint", run, "--max-new-tokens", "100000000")
    assert status == 2 and "--max-new-tokens: must lie in [0, 100,000]" in err
    seen = []
    from labs.plumbing.backends import make_backend
    from labs.plumbing.checkpoint import load_checkpoint

    state, config, _ = load_checkpoint(run)
    for name in ("numpy", "torch"):
        backend = make_backend(name, config["model"], seed=0)
        backend.load_state_dict(state)
        seen.clear()
        ids = backend.generate([1], 5, seed=0, on_token=seen.append)
        assert seen == ids and len(ids) == 5


def test_bpe_vocabulary_size_is_capped(run, capsys):
    status, _, err = cli(
        capsys,
        *train_argv(
            run.parent / "new",
            "--tokenizer",
            "bpe",
            "--vocab-size",
            "100000000",
            "--out",
            run.parent / "new",
        ),
    )
    assert status == 2 and "--vocab-size: must lie in [1, 1,048,576]" in err


@pytest.mark.parametrize("command", ["export", "import"])
def test_an_empty_out_is_named(run, capsys, command):
    argv = ["export", run, "--to", "hf"] if command == "export" else ["import", "gpt2", run]
    status, _, err = cli(capsys, *argv, "--out", "")
    assert status == 2 and "--out: must name a path" in err


def test_both_twins_raise_the_same_types_for_a_bad_config():
    import numpy_impl.gpt as ng
    import torch_impl.gpt as tg

    for twin in (ng, tg):
        with pytest.raises(TypeError, match="config: expected a GPTConfig"):
            twin.GPT(None)
        with pytest.raises(ValueError, match="dropout: expected a probability"):
            twin.GPTConfig(vocab_size=8, dropout="0.1")


# -- 7. the torch floor -----------------------------------------------------------------
def test_the_torch_floor_has_no_known_weights_only_bypass():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch_spec,) = [d for d in project["dependencies"] if d.startswith("torch")]
    floor = tuple(int(x) for x in torch_spec.split(">=")[1].split(".")[:2])
    assert floor >= (2, 10)  # CVE-2025-32434 (<= 2.5.1), CVE-2026-24747 (< 2.10)


def test_reset_keeps_a_copy_of_the_learners_code(tmp_path):
    ws = tmp_path / "ws"
    assert limited("start", "01", "--workspace", ws).returncode == 0
    mine = ws / "numpy_impl" / "char_tokenizer.py"
    text = mine.read_text().replace("raise NotImplementedError", "return 'my attempt'  # mine", 1)
    mine.write_text(text)
    proc = limited("reset", "01", "--workspace", ws)
    assert proc.returncode == 0 and "copied to" in proc.stdout, proc.stdout + proc.stderr
    (kept,) = (ws / "replaced").iterdir()
    assert kept.read_text() == text and "# mine" not in mine.read_text()
