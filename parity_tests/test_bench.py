"""``python -m labs bench``: its report, on tiny sizes (``--sizes``, a hidden option).

Benchmarks print ratios, tests never time anything: these check that every
number the command claims is there, finite and consistent (the FLOP formula,
MFU, the profile's rows adding up to the step, the training runs), and that bad
options fail with ``error: ...`` naming the option.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import statistics
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from labs.__main__ import main
from labs.commands import bench, bench_profile

VARIANTS = ("numpy", "numpy-explicit", "torch", "torch-nanogpt")
SIZES = ((2, 16), (3, 8))


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def report():
    code, out, err = run_cli(
        "bench", "--json", "--iters", "1", "--warmup", "0", "--threads", "1",
        "--sizes", "2x16,3x8", "--profile", "--rounds", "2",
    )  # fmt: skip
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow  # the report: 16 worker processes (2 rounds), ~25 s on a 2-core box
def test_every_variant_and_size_reports_flops_sgemm_and_mfu(report):
    results = report["results"]
    assert report["rounds"] == 2
    for r in results:  # --iters 1 over 2 rounds: one step each, pooled
        assert r["rounds"] == 2 and r["iters"] == len(r["step_times_s"]) == 2, r
        assert r["median_step_s"] == pytest.approx(statistics.median(r["step_times_s"]))
        assert len(r["round_median_step_s"]) == 2
    assert [(p["batch_size"], p["block_size"]) for p in report["paired"]] == list(SIZES)
    for B, T in SIZES:  # one GEMM rate per library and size
        rates = {r["backend"]: set() for r in results}
        for r in results:
            if (r["batch_size"], r["block_size"]) == (B, T):
                rates[r["backend"]].add(r["sgemm_gflops"])
        assert all(len(found) == 1 for found in rates.values()), rates
    for index, ((B, T), pair) in enumerate(zip(SIZES, report["paired"], strict=True)):
        assert "error" not in pair, pair
        assert pair["variants"] == ["numpy", "torch"] and pair["iters"] == 2  # 2 x --iters
        assert pair["turn_steps"] == bench.PAIRED_TURN
        times = pair["step_times_s"]
        assert len(times["numpy"]) == len(times["torch"]) == 2
        ratios = [a / b for a, b in zip(times["numpy"], times["torch"], strict=True)]
        assert pair["median_pair_ratio"] == pytest.approx(statistics.median(ratios))
        key = bench.ratio_key("numpy_over_torch_paired", index, B, T)
        assert report[key] == pair["median_pair_ratio"] > 0
    assert [(r["name"], r["batch_size"], r["block_size"]) for r in results] == [
        (v, B, T) for B, T in SIZES for v in VARIANTS
    ]
    for r in results:
        assert "error" not in r, r
        for key in ("median_step_s", "tokens_per_s", "achieved_gflops", "sgemm_gflops", "mfu"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["model_flops_per_step"] == bench.model_flops_per_step(
            r["model_config"], r["batch_size"], r["block_size"]
        )
        assert r["achieved_gflops"] == pytest.approx(
            r["model_flops_per_step"] / r["median_step_s"] / 1e9
        )
        assert r["mfu"] == pytest.approx(r["achieved_gflops"] / r["sgemm_gflops"])
        assert len(r["sgemm_shapes"]) == 5
        assert r["threads"] == 1  # --threads 1: torch's, or NumPy's BLAS (threadpoolctl)
        assert any(p["user_api"] == "blas" for p in r["thread_pools"])
    by_name = {r["name"]: r for r in results if r["batch_size"] == 2}
    assert (by_name["numpy"]["backend"], by_name["numpy"]["variant"]) == ("numpy", "default")
    assert by_name["numpy"]["tracemalloc_peak_mib"] > 0
    assert by_name["numpy"]["attn_impl"] == "flash"  # labs train's attention
    assert (by_name["numpy-explicit"]["variant"], by_name["numpy-explicit"]["attn_impl"]) == (
        "explicit",
        "explicit",
    )
    assert (by_name["torch"]["backend"], by_name["torch"]["variant"]) == ("torch", "default")
    assert by_name["torch"]["attn_impl"] == "sdpa"
    nano = by_name["torch-nanogpt"]
    assert (nano["backend"], nano["variant"], nano["attn_impl"]) == ("torch", "nanogpt", "sdpa")
    assert nano["model_config"]["bias"] is False
    assert nano["model_config"]["gelu_approximate"] == "none"


@pytest.mark.slow  # the report: 8 worker processes, ~15 s on a 2-core box
def test_top_level_keys(report):
    for prefix in ("numpy_over_torch", "numpy_over_torch_nanogpt"):
        for key in (f"{prefix}_step_ratio", f"{prefix}_step_ratio_b3_t8"):
            assert report[key] > 0, key  # the first size unsuffixed, as at the default sizes
    for key in ("numpy_mfu", "torch_mfu", "torch_nanogpt_mfu"):
        assert set(report[key]) == {"b2_t16", "b3_t8"}
        assert all(math.isfinite(v) and v > 0 for v in report[key].values()), report[key]
    assert set(report["profile"]) == {"b2_t16", "b3_t8"}
    assert {"cpus", "load_avg_1min", "numpy", "torch"} <= set(report["machine"])


def test_default_sizes_keep_the_historical_ratio_keys():
    keys = [bench.ratio_key("numpy_over_torch", i, B, T) for i, (B, T) in enumerate(bench.SIZES)]
    assert keys == ["numpy_over_torch_step_ratio", "numpy_over_torch_step_ratio_b64_t256"]
    assert bench.size_key(*bench.SIZES[1]) == "b64_t256"


def test_model_flops_formula_for_the_default_model():
    config = {"vocab_size": 65, "block_size": 64}  # 4 layers, d_model 128, d_ff 512
    N = 4 * (3 * 128 * 128 + 128 * 128 + 2 * 128 * 512) + 128 * 65
    assert bench.matmul_parameters(config) == N == 794_752
    assert bench.model_flops_per_step(config, 12, 64) == 12 * 64 * (6 * N + 12 * 4 * 128 * 64)
    # bias and GELU change no GEMM: the nanoGPT-style model has the same FLOPs
    nano = {**config, "bias": False, "gelu_approximate": "none"}
    assert bench.model_flops_per_step(nano, 12, 64) == bench.model_flops_per_step(config, 12, 64)


def test_matmul_parameters_are_the_models_linear_weights():
    """N counts every Linear's weight, the tied head included, and nothing else."""
    from numpy_impl.gpt import GPT, GPTConfig
    from numpy_impl.linear import Linear

    config = {"vocab_size": 11, "block_size": 8, "n_layers": 2, "d_model": 16, "d_ff": 24}
    model = GPT(GPTConfig(**config), seed=0)
    weights = sum(m.weight.data.size for _, m in model.named_modules() if isinstance(m, Linear))
    assert bench.matmul_parameters(config) == weights
    shapes = bench.gemm_shapes(config, 2, 8)
    flops = sum(2 * count * M * K * N for count, M, K, N in shapes)
    assert 3 * flops == 6 * weights * 2 * 8  # forward GEMMs x 3 = the 6 N per token


def test_measure_sgemm_both_libraries():
    shapes = bench.gemm_shapes({"vocab_size": 7, "n_layers": 1, "d_model": 8}, 2, 4)
    for library in ("numpy", "torch"):
        got = bench.measure_sgemm(shapes, library)
        assert math.isfinite(got["sgemm_gflops"]) and got["sgemm_gflops"] > 0
        assert [(s["m"], s["k"], s["n"]) for s in got["sgemm_shapes"]] == [
            (M, K, N) for _, M, K, N in shapes
        ]


def test_profile_rows_add_up_to_the_step():
    profile = bench_profile.profile_numpy_step(B=2, T=16, iters=5, warmup=1)
    kinds = [row["kind"] for row in profile["rows"]]
    for kind in (
        "embedding", "layernorm", "attention qkv projection", "attention core",
        "attention out projection", "ffn linear", "gelu", "head", "loss",
        "zero_grad", "gradient clipping", "AdamW update", "other",
    ):  # fmt: skip
        assert kind in kinds, kind
    total = sum(row["total_ms"] for row in profile["rows"])
    assert total == pytest.approx(profile["step_ms"])  # the median step's own breakdown
    assert sum(p["ms"] for p in profile["phases"]) == pytest.approx(total)
    other = next(row for row in profile["rows"] if row["kind"] == "other")
    assert 0 <= other["total_ms"] < 0.5 * profile["step_ms"]  # the wrappers see most of it
    assert {p["phase"] for p in profile["phases"]} == {"forward", "backward", "optimizer", "other"}


def test_profile_wrappers_are_removed_afterwards():
    from labs.plumbing.backends import make_backend

    backend = make_backend("numpy", {"vocab_size": 5, "block_size": 4, "n_layers": 1}, seed=0)
    timer = bench_profile._Timer()
    with bench_profile._instrumented(backend, timer):
        x = np.zeros((1, 4), dtype=np.int64)
        backend.train_step(x, x)
    assert timer.totals[("attention core", "forward")] > 0
    for _, mod in backend.model.named_modules():
        assert "forward" not in vars(mod) and "backward" not in vars(mod)
    assert "step" not in vars(backend.optimizer)
    import numpy_impl.optim

    assert numpy_impl.optim.clip_grad_norm_.__name__ == "clip_grad_norm_"


@pytest.mark.slow  # the report: 8 worker processes, ~15 s on a 2-core box
def test_profile_in_the_report(report):
    for key in ("b2_t16", "b3_t8"):
        for name in ("profile", "profile_torch"):
            profile = report[name][key]
            assert "error" not in profile, profile
            assert profile["iters"] == 1
            total = sum(row["total_ms"] for row in profile["rows"])
            assert total == pytest.approx(profile["step_ms"])
        kinds = [row["kind"] for row in report["profile_comparison"][key]]
        assert kinds == list(bench_profile.COMPARE_KINDS)


_BW = "autograd::engine::evaluate_function: "  # the profiler's name for a backward node
_LINEAR, _OPT, _GLUE = (
    "linear layers (GEMM + bias)",
    "optimizer (zero_grad, clipping, AdamW)",
    "residual adds, dropout, glue, other",
)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("aten::linear", (_LINEAR, "forward")),
        (_BW + "AddmmBackward0", (_LINEAR, "backward")),
        ("aten::layer_norm", ("layernorm", "forward")),
        (_BW + "NativeLayerNormBackward0", ("layernorm", "backward")),
        ("aten::scaled_dot_product_attention", ("attention core", "forward")),
        (_BW + "ScaledDotProductFlashAttentionForCpuBackward0", ("attention core", "backward")),
        (_BW + "GeluBackward0", ("activation (GELU, ...)", "backward")),
        ("Optimizer.step#AdamW.step", (_OPT, "optimizer")),
        ("Optimizer.zero_grad#AdamW.zero_grad", (_OPT, "optimizer")),
        ("gradient clipping", (_OPT, "optimizer")),
        ("aten::add", (_GLUE, "forward")),
        (_BW + "ViewBackward0", (_GLUE, "backward")),
    ],
)
def test_torch_profiler_events_map_to_kinds(name, expected):
    assert bench_profile.torch_kind(name) == expected


def test_torch_profile_rows_add_up_and_compare_with_numpy():
    import torch_impl.optim

    clip = torch_impl.optim.clip_grad_norm_
    torch_profile = bench_profile.profile_torch_step(B=2, T=16, iters=3, warmup=1)
    assert torch_impl.optim.clip_grad_norm_ is clip  # the label is taken off again
    total = sum(row["total_ms"] for row in torch_profile["rows"])
    assert total == pytest.approx(torch_profile["step_ms"])
    assert torch_profile["unprofiled_step_ms"] > 0
    by_kind = {row["kind"]: row for row in torch_profile["rows"]}
    for kind in bench_profile.COMPARE_KINDS:  # every kind seen, each in its own phases
        assert by_kind[kind]["total_ms"] > 0, kind
    assert set(by_kind["layernorm"]["ms"]) == {"forward", "backward"}
    assert set(by_kind["optimizer (zero_grad, clipping, AdamW)"]["ms"]) == {"optimizer"}

    numpy_profile = bench_profile.profile_numpy_step(B=2, T=16, iters=3, warmup=1)
    rows = bench_profile.compare_profiles(numpy_profile, torch_profile)
    assert [row["kind"] for row in rows] == list(bench_profile.COMPARE_KINDS)
    numpy_rows = {row["kind"]: row["total_ms"] for row in numpy_profile["rows"]}
    linear = next(row for row in rows if row["kind"] == "linear layers (GEMM + bias)")
    assert linear["numpy_ms"] == pytest.approx(
        sum(
            numpy_rows[k]
            for k in ("attention qkv projection", "attention out projection", "ffn linear", "head")
        )
    )  # NumPy's four linear rows merged, as torch's aten::linear cannot tell them apart
    assert sum(row["numpy_ms"] for row in rows) == pytest.approx(numpy_profile["step_ms"])
    for row in rows:
        assert row["ratio"] == pytest.approx(row["numpy_ms"] / row["torch_ms"])
    lines = bench_profile.format_comparison(numpy_profile, torch_profile)
    assert len(lines) == 2 + len(rows) + 1 and "unprofiled" in lines[0]


@pytest.mark.slow
def test_train_iters_runs_both_backends(tmp_path, monkeypatch):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    monkeypatch.chdir(tmp_path)  # nothing may be written here (runs/ least of all)
    code, out, err = run_cli(
        "bench", "--json", "--iters", "1", "--warmup", "0", "--threads", "1", "--sizes", "2x8",
        "--rounds", "1", "--train-iters", "2", "--data", str(corpus),
        "--train-args", "--eval-batches 1 --eval-batch-size 2 --sample-tokens 0",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    runs = {r["backend"]: r for r in summary["train"]}
    assert set(runs) == {"numpy", "torch"}
    for r in runs.values():
        assert "error" not in r, r
        assert r["max_iters"] == 2
        assert 0 < r["train_steps_s"] <= r["loop_s"] <= r["wall_s"]
        assert r["eval_checkpoint_s"] == pytest.approx(r["loop_s"] - r["train_steps_s"])
    assert summary["numpy_over_torch_train_wall_ratio"] == pytest.approx(
        runs["numpy"]["wall_s"] / runs["torch"]["wall_s"]
    )
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["tiny.txt"]


@pytest.mark.parametrize("warmup", [0, 1, 2])
@pytest.mark.parametrize("iters", [1, 3, 5, 6, 7])
def test_paired_steps_run_in_turns_each_timed_step_after_its_own(iters, warmup, monkeypatch):
    """Every timed step follows a step of its own backend (the turn's first is untimed),
    turns alternate which backend goes first, both run the same batches, a pair is the
    two backends' steps on one batch, and ``iters`` pairs come out whatever the turn
    length leaves over. No real timing: a fake clock advances by n on the n-th step,
    so each recorded time names the step it timed."""
    calls = []  # (variant, x) in the order the steps ran
    clock = [0.0]

    class Fake:
        def __init__(self, name):
            self.name = name

        def train_step(self, x, y):
            calls.append((self.name, x.copy()))
            clock[0] += len(calls)  # the n-th step (1-based) lasts n

    monkeypatch.setattr("labs.plumbing.backends.make_backend", lambda name, *a, **k: Fake(name))
    monkeypatch.setattr(bench, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    result = bench.measure_paired(2, 4, iters, warmup=warmup)
    assert result["iters"] == iters and result["turn_steps"] == bench.PAIRED_TURN
    times = result["step_times_s"]
    assert len(times["numpy"]) == len(times["torch"]) == iters
    expected, turns, left = ["numpy", "torch"] * warmup, [], iters  # the warm-up, the turns
    while left:
        timed = min(bench.PAIRED_TURN - 1, left)
        first, second = ("numpy", "torch") if len(turns) % 2 == 0 else ("torch", "numpy")
        turns.append((len(expected), timed + 1))
        expected += [first] * (timed + 1) + [second] * (timed + 1)
        left -= timed
    assert [name for name, _ in calls] == expected
    for start, steps in turns:  # both backends ran the turn's batches, in the same order
        ours, theirs = calls[start : start + steps], calls[start + steps : start + 2 * steps]
        assert all(np.array_equal(a[1], b[1]) for a, b in zip(ours, theirs, strict=True))
    # every step of a turn but each backend's first was timed, once, in order; each
    # timed step (1-based n) came right after a step of its own backend
    for variant in ("numpy", "torch"):
        expected_timed = [
            n + 1  # calls[n] is the (n + 1)-th step
            for start, steps in turns
            for n in range(start, start + 2 * steps)
            if calls[n][0] == variant and n not in (start, start + steps)
        ]
        assert times[variant] == expected_timed
        assert all(calls[int(n) - 2][0] == variant for n in times[variant])
    for a, b in zip(times["numpy"], times["torch"], strict=True):  # a pair: one batch
        assert np.array_equal(calls[int(a) - 1][1], calls[int(b) - 1][1])
    assert result["median_pair_ratio"] == statistics.median(
        [a / b for a, b in zip(times["numpy"], times["torch"], strict=True)]
    )


def test_rounds_are_pooled_step_by_step():
    def round_(times, sgemm, rss, traced=None):
        median = statistics.median(times)
        return {
            "name": "numpy", "batch_size": 2, "block_size": 4, "model_flops_per_step": 8e9,
            "median_step_s": median, "step_times_s": times, "sgemm_gflops": sgemm,
            "sgemm_shapes": [sgemm], "peak_rss_growth_mib": rss, "tracemalloc_peak_mib": traced,
        }  # fmt: skip

    pooled = bench.pool_rounds([round_([1.0, 3.0], 50, 10, 2.0), round_([2.0], 90, 30, 5.0),
                                round_([4.0, 5.0], 70, 20, 1.0)])  # fmt: skip
    assert pooled["step_times_s"] == [1.0, 3.0, 2.0, 4.0, 5.0] and pooled["iters"] == 5
    assert pooled["median_step_s"] == 3.0 and pooled["min_step_s"] == 1.0
    assert pooled["round_median_step_s"] == [2.0, 2.0, 4.5] and pooled["rounds"] == 3
    assert pooled["sgemm_gflops"] == 70 and pooled["sgemm_shapes"] == [70]  # the median round
    assert pooled["achieved_gflops"] == pytest.approx(8e9 / 3.0 / 1e9)
    assert pooled["mfu"] == pytest.approx(pooled["achieved_gflops"] / 70)
    assert pooled["tokens_per_s"] == pytest.approx(8 / 3.0)
    assert pooled["peak_rss_growth_mib"] == 30 and pooled["tracemalloc_peak_mib"] == 5.0
    others = [round_([9.0], sgemm, 1) for sgemm in (10, 20, 30, 40)]
    shared = bench.pool_rounds([round_([1.0, 3.0], 50, 10)], others)  # the library's median
    assert shared["sgemm_gflops"] == 20 and shared["median_step_s"] == 2.0
    failed = {"name": "numpy", "batch_size": 2, "block_size": 4, "error": "boom"}
    assert bench.pool_rounds([round_([1.0], 1, 1), failed]) is failed


@pytest.mark.parametrize(
    "argv, option",
    [
        (("--iters", "0"), "--iters"),
        (("--warmup", "-1"), "--warmup"),
        (("--rounds", "0"), "--rounds"),
        (("--threads", "0"), "--threads"),
        (("--train-iters", "-1"), "--train-iters"),
        (("--data", "x.txt"), "--data"),
        (("--profile", "--sizes", "12by64"), "--sizes"),
        (("--sizes", "0x16"), "--sizes"),
        (("--train-iters", "1", "--train-args", "--out runs/x"), "--train-args"),
        (("--train-iters", "1", "--train-args", "'unclosed"), "--train-args"),
        (("--train-iters", "1", "--data", "/nonexistent/corpus.txt"), "corpus"),
        (("--worker", "--paired", "--batch-size", "0"), "--batch-size"),
        (("--worker", "--paired", "--block-size", "-8"), "--block-size"),
        (("--worker", "--variant", "numpy", "--batch-size", "-2"), "--batch-size"),
    ],
)
def test_bad_options_are_clean_errors(argv, option):
    code, out, err = run_cli("bench", *argv)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and option in err, err


def test_torch_profile_gives_torch_its_threads_back_after_a_failed_step(monkeypatch):
    """The profile runs torch on one thread; a step that raises (here the first, before
    the profiled ones) must not leave the process there."""
    import torch

    import torch_impl.optim
    from labs.plumbing.backends_torch import TorchBackend

    def fail(self, x, y, grad_accum=1):
        raise RuntimeError("a failed step")

    clip, threads = torch_impl.optim.clip_grad_norm_, torch.get_num_threads()
    monkeypatch.setattr(TorchBackend, "train_step", fail)
    torch.set_num_threads(2)  # not one, or a count left at one would pass unseen
    try:
        with pytest.raises(RuntimeError, match="a failed step"):
            bench_profile.profile_torch_step(B=1, T=4, iters=1, warmup=1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    assert torch_impl.optim.clip_grad_norm_ is clip
