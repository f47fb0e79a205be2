"""The other benchmarks: bench-attention, bench-generate, bench-gpt2 and bench-tokenizer.

* ``bench-attention``: causal attention forward + backward on random ``(B, H, T, d_k)``
  inputs: the explicit formula (it writes the ``(T, T)`` scores) against FlashAttention's
  tiles (NumPy) and torch's fused kernels. Median time and peak extra memory: NumPy's
  ``tracemalloc`` peak; torch on CPU, the peak RSS growth of a fresh process; on CUDA,
  ``max_memory_allocated``. ``scripts/gpu_check.sh`` runs it with ``--device cuda``.
* ``bench-generate``: greedy tokens/s with and without the KV cache, both backends, the
  same random weights; at block_size 64 (the window slides after 48 tokens, and the cache
  is refilled every step) and at ``--long-block-size`` (it never slides).
* ``bench-gpt2``: a model of :data:`MODELS` (random weights, float32, nothing downloaded),
  each backend in fresh processes: memory, forward and generation tokens/s, fine-tuning
  steps (``train_step(x, y, grad_accum)``); ``transformers``: its own model of the config.
* ``bench-tokenizer``: the from-scratch byte-level BPE against Hugging Face ``tokenizers``
  on Tiny Shakespeare: training time, identical merges, encoding MB/s, bytes per token.

On a shared machine compare the ratios, measured side by side, not the times.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tracemalloc
from functools import partial
from typing import NamedTuple

import numpy as np

from .. import UserError
from .bench import MiB, _peak_rss_bytes, _rss_bytes, table
from .shared import at_least, int_range, seed_int


class Command(NamedTuple):
    """What ``labs/__main__.py`` registers: a command's options and its job."""

    add_arguments: object
    main: object


def _in_fresh_process(argv: list[str]) -> dict:
    """``python -m labs ARGV``'s last line of JSON, or ``{"error": its last stderr line}``."""
    proc = subprocess.run([sys.executable, "-m", "labs", *argv], capture_output=True, text=True)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return {"error": (proc.stderr.strip().splitlines() or ["(no output)"])[-1]}


def _best(fn, repeats: int = 1):
    """``(fn()'s last result, its best wall time)``: the run least disturbed by others."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def _say(args: argparse.Namespace, message: str) -> None:
    if not args.json:
        print(message, file=sys.stderr, flush=True)


# -- bench-attention ------------------------------------------------------------------------
IMPLS = {
    "cpu": ("numpy-explicit", "numpy-flash", "torch-explicit", "torch-fused"),
    "cuda": ("torch-explicit", "torch-fused", "torch-flash", "torch-efficient", "torch-cudnn"),
}
IMPLS["cuda"] += ("torch-math",)
DEFAULTS = {"cpu": ([256, 1024, 4096], 4, "float32"), "cuda": ([1024, 4096, 16384], 8, "bfloat16")}


ATTENTION_COLUMNS = {  # header: (key, format)
    "T": ("T", "{}"), "implementation": ("impl", "{}"), "fwd+bwd": ("median_ms", "{:.1f} ms"),
    "peak extra memory": ("peak_mib", "{:,.1f} MiB"), "by": ("memory", "{}"),
}  # fmt: skip
RATIO_COLUMNS = {
    "in the same run": ("pair", "{}"), "T": ("T", "{}"), "time": ("time", "{:.2f}x"),
    "peak memory": ("memory", "{:.4f}x"),
}  # fmt: skip


def _attention_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", choices=tuple(IMPLS), default="cpu")
    p.add_argument("--lengths", type=at_least(1), nargs="+", help="T (default: 256 1024 4096)")
    p.add_argument("--batch-size", type=at_least(1), default=1, help="B")
    p.add_argument("--heads", type=at_least(1), help="H (default: 4, on cuda 8)")
    p.add_argument("--head-dim", type=at_least(1), default=64, help="d_k")
    dtypes = ("float32", "float64", "float16", "bfloat16")
    p.add_argument("--dtype", choices=dtypes, help="default: float32, on cuda bfloat16")
    p.add_argument("--impls", nargs="+", help=f"a subset (default: all): {IMPLS}")
    p.add_argument("--iters", type=at_least(1), default=3, help="timed runs per measurement")
    p.add_argument("--tile", type=at_least(1), default=128, help="numpy-flash tile length")
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one implementation, T = --lengths


def _attention_step(impl: str, arrays, dtype: str, device: str, tile: int):
    """One causal attention forward + backward on ``arrays`` (q, k, v, dout), as a call."""
    if impl.startswith("numpy"):
        import numpy_impl as N

        q, k, v, dout = (a.astype(dtype) for a in arrays)
        if impl == "numpy-flash":
            flash = lambda: N.flash_attention(q, k, v, is_causal=True, tile_q=tile, tile_k=tile)  # noqa: E731
            return lambda: N.flash_attention_backward(dout, flash()[1])
        explicit = lambda: N.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
        return lambda: N.scaled_dot_product_attention_backward(dout, explicit()[1])
    import torch

    import torch_impl

    q, k, v, dout = (torch.from_numpy(a).to(device, getattr(torch, dtype)) for a in arrays)
    kind = impl.removeprefix("torch-")
    how = {"sdpa_backend": "auto" if kind == "fused" else kind}  # fused: PyTorch's choice
    if kind == "explicit":
        how = {"impl": "explicit"}

    def step():
        for x in (q, k, v):
            x.grad = None
            x.requires_grad_(True)
        torch_impl.scaled_dot_product_attention(q, k, v, is_causal=True, **how).backward(dout)
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def measure_attention(impl, T, B=1, H=4, d_k=64, dtype="float32", device="cpu", iters=3, tile=128):
    """``median_ms`` and ``peak_mib`` (extra memory) of one causal forward + backward;
    ``error`` instead when a forced CUDA kernel cannot run the inputs or memory runs out."""
    arrays = [np.random.default_rng(i).standard_normal((B, H, T, d_k)) for i in range(4)]
    result = {"impl": impl, "T": T, "B": B, "H": H, "d_k": d_k, "dtype": dtype, "device": device}
    try:
        _attention_step(impl, [a[..., :8, :] for a in arrays], dtype, device, tile)()  # warm
        step = _attention_step(impl, arrays, dtype, device, tile)
        if impl.startswith("numpy"):
            tracemalloc.start()
            step()
            result.update(peak_mib=tracemalloc.get_traced_memory()[1] / MiB, memory="tracemalloc")
            tracemalloc.stop()
        elif device == "cuda":
            import torch

            torch.cuda.reset_peak_memory_stats()
            before = torch.cuda.memory_allocated()
            step()
            result.update(peak_mib=(torch.cuda.max_memory_allocated() - before) / MiB)
            result["memory"] = "cuda"
        else:
            before = _rss_bytes()
            step()
            result.update(peak_mib=(_peak_rss_bytes() - before) / MiB, memory="rss")
        times = [_best(step)[1] for _ in range(iters)]
    except (RuntimeError, MemoryError) as e:
        return {**result, "error": str(e).strip().splitlines()[0][:120]}
    return {**result, "median_ms": statistics.median(times) * 1e3}


def _attention_main(args: argparse.Namespace) -> int:
    lengths, heads, dtype = DEFAULTS[args.device]
    lengths, H, dtype = args.lengths or lengths, args.heads or heads, args.dtype or dtype
    impls = args.impls or list(IMPLS[args.device])
    if unknown := sorted(set(impls) - set(IMPLS[args.device])):
        raise UserError(f"--impls {unknown}: choose from {IMPLS[args.device]} on {args.device}")
    if dtype in ("float16", "bfloat16") and any(i.startswith("numpy") for i in impls):
        raise UserError(f"--dtype {dtype}: NumPy has no such dtype; use float32")
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError("--device cuda: CUDA is not available on this machine")
    shape = {"B": args.batch_size, "H": H, "d_k": args.head_dim, "dtype": dtype}
    if args.worker:
        found = measure_attention(
            args.worker, lengths[0], **shape, iters=args.iters, tile=args.tile
        )
        print(json.dumps(found))
        return 0
    results = []
    for T, impl in ((T, impl) for T in lengths for impl in impls):
        _say(args, f"measuring {impl} at T={T} ...")
        if args.device == "cuda":
            results.append(measure_attention(impl, T, **shape, device="cuda", iters=args.iters))
            continue
        argv = ["bench-attention", "--worker", impl, "--lengths", str(T), "--dtype", dtype]
        argv += ["--batch-size", str(args.batch_size), "--heads", str(H), "--head-dim"]
        argv += [str(args.head_dim), "--iters", str(args.iters), "--tile", str(args.tile)]
        results.append({"impl": impl, "T": T, **_in_fresh_process(argv)})
    by = {(r["impl"], r["T"]): r for r in results if "error" not in r}
    pairs = [("numpy-flash", "numpy-explicit")] + [(i, "torch-explicit") for i in IMPLS["cuda"][1:]]
    ratios = [
        {"pair": f"{new} / {old}", "T": T,
         "time": by[new, T]["median_ms"] / by[old, T]["median_ms"],
         "memory": by[new, T]["peak_mib"] / by[old, T]["peak_mib"]}
        for new, old in pairs for T in lengths
        if (new, T) in by and (old, T) in by and by[old, T]["peak_mib"] > 0
    ]  # fmt: skip
    if args.json:
        summary = {"settings": shape, "results": results, "ratios": ratios}
        print(json.dumps(summary, allow_nan=False))
        return 0
    print(f"causal attention forward + backward, {shape}, {args.device}")
    print(table(results, ATTENTION_COLUMNS))
    print(table(ratios, RATIO_COLUMNS))
    return 0


attention = Command(_attention_args, _attention_main)


# -- bench-generate -------------------------------------------------------------------------
GENERATE_COLUMNS = {
    "block_size": ("block_size", "{}"), "new": ("new_tokens", "{}"), "backend": ("backend", "{}"),
    "no cache": ("no_cache_tokens_per_s", "{:,.0f} tok/s"),
    "KV cache": ("cache_tokens_per_s", "{:,.0f} tok/s"),
    "speedup": ("speedup", "{:.1f}x"), "same tokens": ("identical", "{}"),
    "KV cache bytes": ("kv_cache_bytes", "{:,}"),
}  # fmt: skip


def _generate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--prompt-len", type=at_least(1), default=16, help="prompt tokens")
    p.add_argument(
        "--new-tokens", type=at_least(1), default=256, help="new tokens at block_size 64"
    )
    p.add_argument("--long-block-size", type=at_least(1), default=256, help="block_size of part 2")
    p.add_argument("--long-new-tokens", type=at_least(1), default=240, help="new tokens of part 2")
    p.add_argument(
        "--repeats", type=at_least(1), default=3, help="runs per measurement (best kept)"
    )
    p.add_argument("--threads", type=int_range(1, 1024), default=1, help="torch threads")
    p.add_argument("--seed", type=seed_int, default=0, help="weights and prompt")
    p.add_argument(
        "--n-kv-heads",
        type=at_least(1),
        default=None,
        help="key/value heads of the 4 (GQA; 1: MQA)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")


def _generation(block_size: int, new_tokens: int, args: argparse.Namespace) -> list[dict]:
    """One row per backend: tokens/s without and with the cache, and the token checks."""
    from ..plumbing.backends import make_backend

    config = {"vocab_size": 65, "block_size": block_size, "n_kv_heads": args.n_kv_heads}
    models = {name: make_backend(name, config, seed=args.seed) for name in ("numpy", "torch")}
    models["torch"].load_state_dict(models["numpy"].state_dict())
    prompt = np.random.default_rng(args.seed).integers(0, 65, args.prompt_len).tolist()
    rows, ids = [], {}
    for name, backend in models.items():
        row = {"block_size": block_size, "new_tokens": new_tokens, "backend": name}
        for cache in (False, True):
            run = partial(backend.generate, prompt, new_tokens, temperature=0.0, use_cache=cache)
            ids[name, cache], seconds = _best(run, args.repeats)
            row[f"{'cache' if cache else 'no_cache'}_tokens_per_s"] = new_tokens / seconds
        row["speedup"] = row["cache_tokens_per_s"] / row["no_cache_tokens_per_s"]
        row["identical"] = ids[name, False] == ids[name, True]  # the cache changes no token
        rows.append(row)
    cache = models["numpy"].model.new_kv_cache()
    models["numpy"].model(np.asarray([prompt]), kv_cache=cache)  # fills the H_kv heads
    for row in rows:
        row["kv_cache_bytes"] = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    for row in rows:
        row["backends_agree"] = ids["numpy", True] == ids["torch", True]
    return rows


def _generate_main(args: argparse.Namespace) -> int:
    if args.prompt_len > args.long_block_size:
        raise UserError("--prompt-len must not exceed --long-block-size")
    if args.n_kv_heads is not None and 4 % args.n_kv_heads:
        raise UserError(f"--n-kv-heads {args.n_kv_heads}: must divide the model's 4 heads")
    import torch

    torch.set_num_threads(args.threads)
    rows = _generation(64, args.new_tokens, args)
    rows += _generation(args.long_block_size, args.long_new_tokens, args)
    met = rows[2]["speedup"] >= 5.0 and rows[2]["identical"]  # NumPy, the long window
    if args.json:
        summary = {"runs": rows, "target": {"numpy_speedup_at_least": 5.0, "met": met}}
        print(json.dumps({**summary, "torch_threads": args.threads}, allow_nan=False))
        return 0
    print(f"greedy generation, batch 1, prompt {args.prompt_len}, float32, best of {args.repeats}")
    print(table(rows, GENERATE_COLUMNS))
    print(
        f"NumPy's KV-cache speedup at block_size {args.long_block_size}: {rows[2]['speedup']:.1f}x"
        f" (the goal, >= 5x with the same tokens: {'reached' if met else 'not reached'})"
    )
    return 0


generate = Command(_generate_args, _generate_main)


# -- bench-gpt2 -----------------------------------------------------------------------------
#: ``--model``: the GPTConfig fields of each model (random weights: nothing is downloaded).
MODELS = {
    "gpt2": {  # GPT-2 small (Radford et al. 2019), 124M parameters, as `labs import gpt2`
        "vocab_size": 50257, "block_size": 1024, "n_layers": 12, "n_heads": 12, "d_model": 768,
        "dropout": 0.0, "bias": True, "tie_weights": True, "gelu_approximate": "tanh",
    },
    "smollm2-135m": {  # SmolLM2-135M's published config.json (Allal et al. 2025), as `labs import`
        "vocab_size": 49152, "block_size": 8192, "n_layers": 30, "n_heads": 9, "n_kv_heads": 3,
        "d_model": 576, "d_ff": 1536, "dropout": 0.0, "bias": False, "tie_weights": True,
        "pos_emb": "rope", "rope_layout": "half", "rope_base": 100000.0, "norm": "rmsnorm",
        "ffn": "swiglu", "norm_eps": 1e-5, "qkv_bias": False,
    },
    "default": {"vocab_size": 65, "block_size": 64},  # the course's model: labs train's
}  # fmt: skip
#: the table's rows: (label, the worker's key, format); {o[...]}: the options
GPT2_ROWS = (
    ("parameters", "parameters", "{:,}"),
    ("build the model (random init)", "build_s", "{:.1f} s"),
    ("memory: model built (peak RSS)", "rss_built_mb", "{:,.0f} MB"),
    ("memory: + forward and generation (peak RSS)", "rss_peak_mb", "{:,.0f} MB"),
    ("forward, 1 x {o[forward_tokens]} tokens", "forward_tok_s", "{:,.0f} tokens/s"),
    ("greedy generation, KV cache ({o[prompt_tokens]} + {o[new_tokens]})", "generate_cache_tok_s",
     "{:.1f} tokens/s"),
    ("greedy generation, no cache", "generate_nocache_tok_s", "{:.1f} tokens/s"),
    ("fine-tuning step, {o[batch_size]} x {o[block_size]} tokens x --grad-accum {o[grad_accum]}"
     " (first)", "first_step_s", "{:.1f} s"),
    ("fine-tuning step (later, mean)", "later_step_s", "{:.1f} s"),
    ("memory: fine-tuning (peak RSS)", "train_rss_peak_mb", "{:,.0f} MB"),
)  # fmt: skip


def _gpt2_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", choices=tuple(MODELS), default="gpt2", help="the model measured")
    backends = ("numpy", "torch", "transformers")  # transformers: its own model of the config
    p.add_argument("--backends", nargs="+", choices=backends, default=["numpy", "torch"])
    p.add_argument("--forward-tokens", type=at_least(1), default=256, help="tokens in the forward")
    p.add_argument("--prompt-tokens", type=at_least(1), default=16, help="prompt of the generation")
    p.add_argument("--new-tokens", type=at_least(1), default=32, help="greedy tokens generated")
    p.add_argument(
        "--block-size", type=at_least(1), default=128, help="fine-tuning: tokens per row"
    )
    p.add_argument("--batch-size", type=at_least(1), default=2, help="fine-tuning: rows per step")
    p.add_argument("--grad-accum", type=at_least(1), default=2, help="fine-tuning: micro-batches")
    p.add_argument("--steps", type=at_least(1), default=2, help="fine-tuning steps (1st: warm-up)")
    p.add_argument("--no-train", action="store_true", help="skip the fine-tuning steps")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one JSON job, in a fresh process


class _Transformers:
    """transformers' own model of a GPT config (GPT-2's or Llama's class, its random init),
    driven as bench-gpt2 drives a backend: AdamW steps, greedy ``generate``."""

    def __init__(self, config: dict):
        import torch
        from transformers import AutoModelForCausalLM

        from ..plumbing.interop_gpt2 import gpt2_config
        from ..plumbing.interop_llama import llama_config

        torch.manual_seed(0)
        hf_config = (llama_config if config.get("pos_emb") == "rope" else gpt2_config)(config)
        self.torch, self.model = torch, AutoModelForCausalLM.from_config(hf_config)
        self.optimizer = torch.optim.AdamW(self.model.parameters())

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())  # a tied matrix once

    def generate(self, prompt: list[int], n: int, temperature: float, use_cache: bool):
        idx, greedy = self.torch.tensor([prompt]), {"do_sample": False, "eos_token_id": None}
        out = self.model.generate(idx, max_new_tokens=n, use_cache=use_cache, **greedy)
        return out[0, len(prompt) :].tolist()

    def train_step(self, x: np.ndarray, y: np.ndarray, grad_accum: int) -> None:
        F, t = self.torch.nn.functional, self.torch.from_numpy
        self.model.train()
        self.optimizer.zero_grad()
        for xm, ym in zip(np.split(x, grad_accum), np.split(y, grad_accum), strict=True):
            logits = self.model(t(xm)).logits  # (B/N, T, V)
            (F.cross_entropy(logits.flatten(0, 1), t(ym).flatten()) / grad_accum).backward()
        self.torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()


def _gpt2_job(what: str, backend_name: str, config: dict, o: dict) -> dict:
    """``inference`` (build, forward, generation with and without the cache) or
    ``training`` (fine-tuning steps), with this process's peak memory in MB."""
    from ..plumbing.backends import make_backend

    build = partial(make_backend, backend_name, config, seed=0)
    backend, build_s = _best(
        partial(_Transformers, config) if backend_name == "transformers" else build
    )
    rng, V = np.random.default_rng(0), config["vocab_size"]
    if what == "training":
        B, N, T = o["batch_size"], o["grad_accum"], o["block_size"]
        ids = [rng.integers(0, V, (B * N, T + 1)) for _ in range(o["steps"])]
        times = [_best(lambda x=x: backend.train_step(x[:, :-1], x[:, 1:], N))[1] for x in ids]
        later = statistics.mean(times[1:]) if len(times) > 1 else None
        out = {"step_s": times, "first_step_s": times[0], "later_step_s": later}
        return {**out, "train_rss_peak_mb": _peak_rss_bytes() / MiB}
    out = {"build_s": build_s, "parameters": backend.num_parameters()}
    out["rss_built_mb"] = _peak_rss_bytes() / MiB
    x = rng.integers(0, V, (1, o["forward_tokens"]))
    backend.model.eval()
    forward = backend.model
    if backend_name != "numpy":

        def forward(ids):
            with backend.torch.no_grad():  # this call only: a test runs later jobs in-process
                return backend.model(backend.torch.from_numpy(ids))

    forward(x[:, :8])  # warm-up: first-call allocations, thread pools
    out["forward_tok_s"] = o["forward_tokens"] / _best(lambda: forward(x))[1]
    prompt, ids = x[0, : o["prompt_tokens"]].tolist(), {}
    for cache in (True, False):
        run = partial(backend.generate, prompt, o["new_tokens"], temperature=0.0, use_cache=cache)
        ids[cache], seconds = _best(run)
        out[f"generate_{'cache' if cache else 'nocache'}_tok_s"] = o["new_tokens"] / seconds
    return {**out, "same_tokens": ids[True] == ids[False], "rss_peak_mb": _peak_rss_bytes() / MiB}


def _gpt2_main(args: argparse.Namespace) -> int:
    if args.worker:
        job = json.loads(args.worker)
        print(json.dumps(_gpt2_job(job["what"], job["backend"], MODELS[job["model"]], job["opts"])))
        return 0
    limit = MODELS[args.model]["block_size"]
    if max(args.forward_tokens, args.block_size) > limit:
        raise UserError(f"--forward-tokens and --block-size must be <= {limit} (the context)")
    options = ("forward_tokens", "prompt_tokens", "new_tokens", "block_size", "batch_size")
    opts = {k: getattr(args, k) for k in (*options, "grad_accum", "steps")}
    results = {"cpu": f"{_cpu_name()}, {os.cpu_count()} cores", "model": args.model}
    results.update(config=MODELS[args.model], options=opts, backends={})
    results["load_average_before"] = os.getloadavg()
    for backend in args.backends:
        _say(args, f"measuring the {backend} backend ...")
        for what in ("inference",) + (() if args.no_train else ("training",)):
            job = json.dumps({"what": what, "backend": backend, "model": args.model, "opts": opts})
            found = _in_fresh_process(["bench-gpt2", "--worker", job])
            if "error" in found:
                raise UserError(f"bench-gpt2: the {backend} {what} run failed: {found['error']}")
            results["backends"].setdefault(backend, {}).update(found)
    results["load_average_after"] = os.getloadavg()
    if {"numpy", "torch"} <= set(args.backends):
        numpy_, torch_ = (results["backends"][b]["rss_peak_mb"] for b in ("numpy", "torch"))
        results["inference_memory_ratio_numpy_to_torch"] = numpy_ / torch_
    print(json.dumps(results, indent=2, allow_nan=False) if args.json else format_table(results))
    return 0


def _cpu_name() -> str:
    """The CPU's model name, from ``/proc/cpuinfo`` (Linux), else ``platform``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or platform.machine()


def format_table(results: dict) -> str:
    """:func:`_gpt2_main`'s numbers as a Markdown table, a column per backend."""
    found, o = results["backends"], results["options"]
    columns = {"": ("label", "{}"), **{b: (b, "{}") for b in found}}
    rows = [
        {"label": label.format(o=o), **{b: spec.format(found[b][key]) for b in found}}
        for label, key, spec in GPT2_ROWS if all(found[b].get(key) is not None for b in found)
    ]  # fmt: skip
    load = results["load_average_before"][0], results["load_average_after"][0]
    lines = [f"{results['model']} (random weights, float32) on {results['cpu']} (load average "
             f"{load[0]:.1f} before, {load[1]:.1f} after)", "",
             table(rows, columns), ""]  # fmt: skip
    ratio = results.get("inference_memory_ratio_numpy_to_torch")
    if ratio is not None:
        lines.append(f"inference memory, numpy / torch: {ratio:.2f}x")
    same = ", ".join(f"{b} {'yes' if found[b]['same_tokens'] else 'NO'}" for b in found)
    return "\n".join([*lines, f"greedy tokens with and without the cache identical: {same}"])


gpt2 = Command(_gpt2_args, _gpt2_main)


# -- bench-tokenizer ------------------------------------------------------------------------
def _tokenizer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", metavar="PATH", help="Tiny Shakespeare (default: as train)")
    p.add_argument(
        "--vocab-sizes", type=int_range(257, 1_000_000), nargs="+", default=[1000, 10000]
    )
    p.add_argument("--repeats", type=at_least(1), default=3, help="timings per measurement (best)")
    p.add_argument(
        "--threads", type=int_range(1, 1024), help="RAYON_NUM_THREADS for HF (default: per core)"
    )
    p.add_argument("--no-plain", action="store_true", help="skip the plain BPE (about a minute)")
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")


def _hf_bpe(text: str, vocab_size: int, byte_level: bool):
    """HF's BPE trained on ``text``: byte-level with GPT-2's regex (as
    ``torch_impl.BPETokenizer.train``), or the tokenization chapter's ``Whitespace`` one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if byte_level:
        tok, alphabet = Tokenizer(models.BPE()), pre_tokenizers.ByteLevel.alphabet()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok, alphabet = Tokenizer(models.BPE(unk_token="[UNK]")), []
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                        initial_alphabet=alphabet))  # fmt: skip
    return tok


#: bytes per token: (label, the row's key), the table's rows
COMPRESSION = (
    ("characters (chapter 01)", "char"), ("plain BPE (no pre-tokenization)", "plain"),
    ("from scratch, GPT-2 regex", "ours_gpt2_regex"), ("HF ByteLevel", "hf_bytelevel"),
    ("HF Whitespace [1]", "hf_whitespace"),
    ("  the same, non-space bytes [1]", "hf_whitespace_non_space"),
)  # fmt: skip
TOKENIZER_COLUMNS = {
    "vocab": ("vocab", "{}"), "ours train": ("train_s", "{:.2f} s"),
    "HF train": ("hf_train_s", "{:.2f} s"),
    "identical merges": ("identical_merges", "{:,}"), "of HF's": ("hf_merges", "{:,}"),
    "ours encode": ("encode_mb_s", "{:.2f} MB/s"),
    "(first call)": ("first_encode_mb_s", "{:.2f} MB/s"),
    "HF encode": ("hf_encode_mb_s", "{:.2f} MB/s"),
}  # fmt: skip


def measure_tokenizers(text: str, vocab_size: int, repeats: int, plain: bool) -> dict:
    """Training seconds, merges, encoding MB/s and ``bytes_per_token`` at one vocabulary."""
    from numpy_impl.bpe_trainer import train_bpe
    from numpy_impl.byte_level import str_to_token
    from numpy_impl.tokenizer import BPETokenizer

    n, V = len(text.encode("utf-8")), vocab_size
    ours, train_s = _best(lambda: BPETokenizer.train(text, V, special_tokens=()), repeats)
    hf, hf_train_s = _best(lambda: _hf_bpe(text, V, byte_level=True), repeats)
    merges = [tuple(map(str_to_token, m)) for m in json.loads(hf.to_str())["model"]["merges"]]
    pairs = enumerate(zip(ours.merges, merges, strict=False))
    same = next((i for i, (a, b) in pairs if a != b), min(len(ours.merges), len(merges)))
    ours._cache.clear()
    ids, first_s = _best(lambda: ours.encode(text))
    encode_s = _best(lambda: ours.encode(text), repeats)[1]
    hf_ids, hf_encode_s = _best(lambda: hf.encode(text, add_special_tokens=False).ids, repeats)
    ws = len(_hf_bpe(text, V, byte_level=False).encode(text).ids)
    non_space = sum(len(w.encode("utf-8")) for w in text.split())
    row = {"vocab": V, "train_s": train_s, "hf_train_s": hf_train_s, "hf_merges": len(merges)}
    row.update(identical_merges=same, all_merges_identical=ours.merges == merges)
    row.update(encode_mb_s=n / encode_s / 1e6, first_encode_mb_s=n / first_s / 1e6)
    row.update(hf_encode_mb_s=n / hf_encode_s / 1e6, same_ids=ids == hf_ids)
    bpt = {"char": n / len(text), "ours_gpt2_regex": n / len(ids), "hf_bytelevel": n / len(hf_ids)}
    bpt.update(hf_whitespace=n / ws, hf_whitespace_non_space=non_space / ws)
    if plain:  # the chapter's plain BPE: no pre-tokenization, merges cross word boundaries
        tok, row["plain_train_s"] = _best(
            lambda: BPETokenizer(*train_bpe(text, V, pattern=None), pattern=None)
        )
        bpt["plain"] = n / len(tok.encode(text))
    return {**row, "bytes_per_token": bpt}


def _tokenizer_main(args: argparse.Namespace) -> int:
    from ..plumbing.data import CorpusUnavailableError, load_corpus, resolve_corpus

    if args.threads is not None:
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # before HF starts its pool
    try:
        path = resolve_corpus(args.data)
        text = load_corpus(path)
    except (OSError, ValueError, CorpusUnavailableError) as e:
        raise UserError(str(e)) from e
    rows = []
    for V in args.vocab_sizes:
        _say(args, f"training and encoding at vocabulary {V} ...")
        rows.append(measure_tokenizers(text, V, args.repeats, plain=not args.no_plain))
    threads = os.environ.get("RAYON_NUM_THREADS")
    res = {"corpus": str(path), "bytes": len(text.encode("utf-8")), "characters": len(text)}
    res.update(cores=os.cpu_count(), rayon_num_threads=threads, vocab=rows)
    if args.json:
        print(json.dumps({**res, "load_average": os.getloadavg()}, indent=2, allow_nan=False))
        return 0
    print(
        f"{path}: {len(text):,} characters, {res['bytes']:,} bytes; HF threads: "
        f"{threads or f'one per core ({os.cpu_count()})'}; ours: 1 (pure Python)"
    )
    print(table(rows, TOKENIZER_COLUMNS) + "\n")
    columns = {"UTF-8 bytes per token": ("label", "{}")}
    columns.update({f"vocab {r['vocab']}": (r["vocab"], "{:.3f}") for r in rows})
    bpt = [{"label": label, **{r["vocab"]: r["bytes_per_token"].get(key) for r in rows}}
           for label, key in COMPRESSION]  # fmt: skip
    print(table(bpt, columns))
    print(
        "[1] Whitespace() drops spaces and newlines: fewer tokens, but decode cannot give the text"
        " back. Byte-level BPE keeps every byte."
    )
    return 0


tokenizer = Command(_tokenizer_args, _tokenizer_main)
