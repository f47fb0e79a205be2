"""The efficiency benchmarks' plumbing, on CPU and tiny: ``bench-attention``,
``bench-generate`` and ``scripts/gpu_check.sh --dry-run``.

The numbers themselves are the scripts' business (benchmarks print ratios,
tests never time anything); these tests only make sure the scripts run, report
what they claim, and fail cleanly where they must (no CUDA).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from labs.__main__ import main
from labs.commands.bench_attention import CPU_IMPLS, measure_attention

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_measure_attention_on_cpu(impl):
    r = measure_attention(impl, T=24, B=1, H=2, d_k=8, dtype="float32", iters=1, tile=16)
    assert "error" not in r, r
    assert r["median_ms"] > 0
    expected = "tracemalloc" if impl.startswith("numpy") else "rss"
    assert r["memory_method"] == expected
    if impl.startswith("numpy"):
        assert r["peak_mib"] > 0  # forward + backward allocate something NumPy reports
    # (RSS growth means something only in a fresh process, as the CLI's workers are)


def test_numpy_flash_peak_memory_is_a_fraction_of_explicit():
    """The benchmark's own measurement at T = 1024 (the CLI goes to 4096): under 1/8."""
    kw = {"T": 1024, "B": 1, "H": 1, "d_k": 16, "iters": 1, "tile": 64}
    flash = measure_attention("numpy-flash", **kw)["peak_mib"]
    explicit = measure_attention("numpy-explicit", **kw)["peak_mib"]
    assert flash < explicit / 8, (flash, explicit)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_bench_attention_on_cuda_without_cuda_is_a_clean_error():
    code, out, err = run_cli("bench-attention", "--device", "cuda", "--lengths", "16")
    assert code == 2 and "error: --device cuda: CUDA is not available" in err


def test_bench_attention_rejects_unknown_impls():
    code, _, err = run_cli("bench-attention", "--impls", "numpy-magic")
    assert code == 2 and "--impls" in err


def test_bench_generate_tiny_run():
    code, out, _ = run_cli(
        "bench-generate", "--prompt-len", "3", "--new-tokens", "4", "--long-block-size", "8",
        "--long-new-tokens", "5", "--repeats", "1", "--json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(out)
    short, long_ = summary["parts"]
    assert (short["block_size"], short["new_tokens"]) == (64, 4)  # the default model
    assert (long_["block_size"], long_["new_tokens"]) == (8, 5)
    for part in (short, long_):
        assert part["numpy_identical"] and part["torch_identical"], part
        assert {(r["backend"], r["use_cache"]) for r in part["runs"]} == {
            (b, c) for b in ("numpy", "torch") for c in (False, True)
        }
        assert all(r["tokens_per_s"] > 0 for r in part["runs"])
    assert set(summary["target"]) == {"numpy_speedup_at_least", "met"}


def test_gpu_check_script_is_executable_and_parses():
    script = ROOT / "scripts" / "gpu_check.sh"
    assert os.access(script, os.X_OK), f"{script} is not executable"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "-m gpu" in text and "bench-attention" in text and "1024 4096 16384" in text


@pytest.mark.slow
def test_gpu_check_dry_run_on_cpu():
    """The whole script on CPU: device report, the GPU tests (skipped here), the benchmark
    (tiny, through its subprocess workers), and the final verdict."""
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(
        [str(ROOT / "scripts" / "gpu_check.sh"), "--dry-run"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "gpu_check: all stages passed" in r.stdout
    assert "numpy-flash" in r.stdout and "torch-fused" in r.stdout


def test_bench_generate_kv_cache_shrinks_by_n_heads_over_n_kv_heads():
    """Grouped-query attention: the cache holds n_kv_heads of the 4 heads (MQA: a quarter)."""
    args = ("bench-generate", "--prompt-len", "3", "--new-tokens", "2", "--long-block-size", "8",
            "--long-new-tokens", "2", "--repeats", "1", "--json")  # fmt: skip
    sizes = {}
    for kv in (4, 2, 1):
        code, out, _ = run_cli(*args, "--n-kv-heads", str(kv))
        assert code == 0
        sizes[kv] = [part["kv_cache_bytes"] for part in json.loads(out)["parts"]]
    assert sizes[4] == [2 * s for s in sizes[2]] == [4 * s for s in sizes[1]], sizes
    assert run_cli(*args, "--n-kv-heads", "3")[0] != 0  # 3 does not divide 4
