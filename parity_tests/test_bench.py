"""The benchmarks, end to end on tiny sizes: every command runs, its JSON is strict (no NaN),
and it reports what it claims. Tests never time anything; benchmarks print ratios."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from labs.__main__ import main
from labs.commands import bench, bench_more

ROOT = Path(__file__).resolve().parent.parent


def run_json(*argv: str) -> dict:
    """``python -m labs ARGV --json`` in this process; its stdout, parsed strictly."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue(), parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))


def test_bench_numpy_as_train_runs_it_against_torch():
    """Two NumPy ranks (train's launcher, gloo all-reduce) and torch, two rounds, profiled."""
    report = run_json(
        "bench", "--sizes", "4x8", "--iters", "2", "--warmup", "1", "--rounds", "2",
        "--processes", "2", "--threads", "1", "--profile",
    )  # fmt: skip
    results = {(r["variant"], r["batch_size"]): r for r in report["results"]}
    assert set(results) == {("numpy", 4), ("torch", 4)}
    for (variant, _), r in results.items():
        assert "error" not in r, r
        assert r["processes"] == (2 if variant == "numpy" else 1) and r["threads"] == 1
        assert r["rounds"] == 2 and r["iters"] == len(r["step_times_s"]) == 2
        assert r["median_step_s"] > 0 and r["peak_rss_growth_mib"] is not None
        B, T = r["batch_size"], r["block_size"]
        assert r["model_flops_per_step"] == bench.model_flops_per_step(r["model_config"], B, T)
    assert results["numpy", 4]["tracemalloc_peak_mib"] > 0
    assert report["numpy_over_torch_step_ratio"] > 0
    assert report["numpy_over_torch_peak_rss_ratio"] > 0
    profiles = report["profile"]
    assert [(p["variant"], p["batch_size"]) for p in profiles] == [("numpy", 4), ("torch", 4)]
    functions = " ".join(f["function"] for f in profiles[0]["profile"])
    assert "allreduce" in functions or "wait" in functions  # the ranks' all-reduce is seen


def test_bench_one_process_and_the_other_variants():
    report = run_json(
        "bench", "--sizes", "2x8,1x4", "--iters", "1", "--warmup", "0", "--rounds", "1",
        "--processes", "1", "--variants", "numpy-explicit", "torch-nanogpt",
    )  # fmt: skip
    by = {r["variant"]: r for r in report["results"]}
    explicit = by["numpy-explicit"]
    assert explicit["attn_impl"] == "explicit" and explicit["processes"] == 1
    assert by["torch-nanogpt"]["model_config"]["bias"] is False
    # the first size's keys unsuffixed, as at the defaults; None: no numpy and torch rows
    assert report["numpy_over_torch_step_ratio"] is None
    assert report["numpy_over_torch_step_ratio_b1_t4"] is None


def test_model_flops_formula_for_the_default_model():
    config = {"vocab_size": 65, "block_size": 64}  # 4 layers, d_model 128, d_ff 512
    N = 4 * (3 * 128 * 128 + 128 * 128 + 2 * 128 * 512) + 128 * 65
    assert bench.model_flops_per_step(config, 12, 64) == 12 * 64 * (6 * N + 12 * 4 * 128 * 64)


def test_table_shows_failures_after_the_known_cells():
    columns = {"B": ("batch_size", "{}"), "variant": ("variant", "{}"), "ms": ("ms", "{:.1f}")}
    rows = [{"batch_size": 2, "variant": "numpy", "ms": 1.25}, {"batch_size": 2, "error": "boom"}]
    lines = bench.table(rows, columns).splitlines()
    assert [c.strip() for c in lines[0].split("|")[1:-1]] == ["B", "variant", "ms"]
    assert [c.strip() for c in lines[2].split("|")[1:-1]] == ["2", "numpy", "1.2"]
    assert [c.strip() for c in lines[3].split("|")[1:-1]] == ["2", "failed: boom", ""]


@pytest.mark.parametrize(
    "argv",
    [("bench", "--iters", "0"), ("bench", "--sizes", "12by64"), ("bench", "--processes", "0"),
     ("bench-attention", "--iters", "0"), ("bench-gpt2", "--grad-accum", "0"),
     ("bench-tokenizer", "--vocab-sizes", "100"), ("bench", "--seed", "-1"),
     ("bench-generate", "--seed", "-1"), ("bench-generate", "--threads", "100000000"),
     ("bench-tokenizer", "--vocab-sizes", "100000000000")],
)  # fmt: skip
def test_bad_options_are_refused_by_argparse(argv, capsys):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --") and ("must" in err or "expected" in err)


def test_bench_attention_cpu():
    report = run_json(
        "bench-attention", "--lengths", "24", "--heads", "2", "--head-dim", "8",
        "--iters", "1", "--tile", "16",
    )  # fmt: skip
    by = {r["impl"]: r for r in report["results"]}
    assert set(by) == set(bench_more.IMPLS["cpu"])
    for impl, r in by.items():
        assert "error" not in r and r["median_ms"] > 0, r
        assert r["memory"] == ("tracemalloc" if impl.startswith("numpy") else "rss")
    assert {r["pair"] for r in report["ratios"]} >= {"numpy-flash / numpy-explicit"}


def test_numpy_flash_peak_memory_is_a_fraction_of_explicit():
    kw = {"T": 1024, "B": 1, "H": 1, "d_k": 16, "iters": 1, "tile": 64}
    flash = bench_more.measure_attention("numpy-flash", **kw)["peak_mib"]
    explicit = bench_more.measure_attention("numpy-explicit", **kw)["peak_mib"]
    assert flash < explicit / 8, (flash, explicit)


def test_bench_attention_without_cuda_is_a_clean_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["bench-attention", "--device", "cuda", "--lengths", "16"]) == 2
    assert "error: --device cuda: CUDA is not available" in capsys.readouterr().err


def test_bench_generate():
    report = run_json(
        "bench-generate", "--prompt-len", "3", "--new-tokens", "4", "--long-block-size", "8",
        "--long-new-tokens", "5", "--repeats", "1",
    )  # fmt: skip
    runs = report["runs"]
    assert [(r["block_size"], r["backend"]) for r in runs] == [
        (64, "numpy"), (64, "torch"), (8, "numpy"), (8, "torch"),
    ]  # fmt: skip
    assert all(r["identical"] and r["cache_tokens_per_s"] > 0 for r in runs), runs
    assert set(report["target"]) == {"numpy_speedup_at_least", "met"}


def test_bench_gpt2_on_the_default_model():
    report = run_json(
        "bench-gpt2", "--model", "default", "--forward-tokens", "8", "--prompt-tokens", "2",
        "--new-tokens", "3", "--block-size", "8", "--steps", "2",
    )  # fmt: skip
    for backend in ("numpy", "torch"):
        r = report["backends"][backend]
        assert r["parameters"] > 0 and r["same_tokens"] and r["later_step_s"] > 0, r
    table = bench_more.format_table(report)
    assert "| parameters" in table and "inference memory, numpy / torch" in table
    assert "fine-tuning step (later, mean)" in table


def test_bench_tokenizer(tmp_path):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20)
    report = run_json("bench-tokenizer", "--data", str(corpus), "--vocab-sizes", "280",
                      "--repeats", "1")  # fmt: skip
    (row,) = report["vocab"]
    assert row["all_merges_identical"] and row["same_ids"], row
    assert set(row["bytes_per_token"]) >= {"char", "plain", "ours_gpt2_regex", "hf_bytelevel"}


def test_gpu_check_script_is_executable_and_parses():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert os.access(script, os.X_OK), f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert "bench-attention" in script.read_text()


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu():
    """The whole script on CPU: the device, the GPU tests (skipped here), the benchmark."""
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(
        [str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gpu_check: all stages passed" in r.stdout and "numpy-flash" in r.stdout


def test_bench_generate_kv_cache_shrinks_by_n_heads_over_n_kv_heads():
    """Grouped-query attention: the cache holds n_kv_heads of the 4 heads (MQA: a quarter)."""
    args = ("bench-generate", "--prompt-len", "3", "--new-tokens", "2", "--long-block-size", "8",
            "--long-new-tokens", "2", "--repeats", "1")  # fmt: skip
    sizes = {kv: [row["kv_cache_bytes"] for row in run_json(*args, "--n-kv-heads", str(kv))["runs"]]
             for kv in (4, 2, 1)}  # fmt: skip
    assert sizes[4] == [2 * s for s in sizes[2]] == [4 * s for s in sizes[1]], sizes
    with contextlib.redirect_stderr(io.StringIO()):
        assert main([*args, "--n-kv-heads", "3"]) != 0  # 3 does not divide 4


def test_bench_gpt2_smollm2_is_its_published_config_and_runs_shrunk_in_each_backend():
    """The smollm2-135m entry is `labs import`'s reading of SmolLM2-135M's config.json; the same
    shape shrunk (9 heads, 3 KV heads) runs in both twins and in transformers, equal in size."""
    import torch

    from labs.plumbing.interop_llama import from_llama_config
    from numpy_impl.gpt import GPTConfig

    published = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
                 "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152,
                 "max_position_embeddings": 8192, "rope_theta": 100000.0, "rms_norm_eps": 1e-5,
                 "tie_word_embeddings": True}  # fmt: skip
    entry = bench_more.MODELS["smollm2-135m"]
    assert GPTConfig(**from_llama_config(published)) == GPTConfig(**entry)
    tiny = {**entry, "vocab_size": 97, "block_size": 16, "n_layers": 2, "d_model": 36, "d_ff": 48}
    o = {"forward_tokens": 8, "prompt_tokens": 2, "new_tokens": 3, "block_size": 8,
         "batch_size": 2, "grad_accum": 2, "steps": 2}  # fmt: skip
    job = partial(bench_more._gpt2_job, config=tiny, o=o)
    runs = [job("inference", b) for b in ("numpy", "torch", "transformers")]
    assert len({r["parameters"] for r in runs}) == 1 and all(r["same_tokens"] for r in runs), runs
    assert torch.is_grad_enabled()  # the later tests of this process train
    assert job("training", "transformers")["later_step_s"] > 0
