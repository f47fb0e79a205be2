"""``python -m labs bench-gpt2``: GPT-2 124M on this CPU, both backends side by side.

A randomly initialised model of GPT-2 small's configuration (vocabulary 50257,
context 1024, 12 layers, 12 heads, d_model 768, tied head: 124,439,808
parameters; nothing is downloaded) in float32, measured per backend in fresh
processes, so that each peak resident set size (``ru_maxrss``) is that
backend's alone:

* inference: the model built; one forward of ``--forward-tokens`` tokens
  (tokens/s); greedy generation of ``--new-tokens`` after a ``--prompt-tokens``
  prompt, with and without the KV cache (tokens/s); the process's peak memory;
* fine-tuning: ``--steps`` AdamW steps of ``--batch-size`` x ``--grad-accum``
  sequences of ``--block-size`` tokens (``train_step(x, y, grad_accum)``, as
  ``labs train --grad-accum`` runs it); the time of each, and the peak memory
  (weights, gradients, AdamW's two moments, one micro-batch's activations).

Prints a table (``--json``: the numbers as one JSON object) and the CPU it ran on.
Timings on a shared machine vary by 10-20% from run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time

from .. import UserError

#: GPT-2 small (Radford et al. 2019; the hub's "gpt2"): what ``labs import gpt2`` gives.
GPT2_124M = {
    "vocab_size": 50257,
    "block_size": 1024,
    "n_layers": 12,
    "n_heads": 12,
    "d_model": 768,
    "dropout": 0.0,
    "bias": True,
    "tie_weights": True,
    "gelu_approximate": "tanh",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench-gpt2`` command's options."""
    p.add_argument("--backends", nargs="+", choices=("numpy", "torch"), default=["numpy", "torch"])
    p.add_argument("--forward-tokens", type=int, default=256, help="tokens in the timed forward")
    p.add_argument("--prompt-tokens", type=int, default=16, help="prompt of the generation")
    p.add_argument("--new-tokens", type=int, default=32, help="greedy tokens generated")
    p.add_argument("--block-size", type=int, default=128, help="fine-tuning: tokens per sequence")
    p.add_argument(
        "--batch-size", type=int, default=2, help="fine-tuning: sequences per micro-batch"
    )
    p.add_argument("--grad-accum", type=int, default=2, help="fine-tuning: micro-batches per step")
    p.add_argument(
        "--steps", type=int, default=2, help="fine-tuning: steps timed (the first warms up)"
    )
    p.add_argument("--no-train", action="store_true", help="skip the fine-tuning step")
    p.add_argument("--json", action="store_true", help="print the numbers as JSON")
    p.add_argument(
        "--worker", help=argparse.SUPPRESS
    )  # internal: one measurement, in a fresh process


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform``) and its core count."""
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{name}, {os.cpu_count()} cores"


def _load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages: how busy the machine was (timings on a shared
    machine depend on it); None where the OS does not say."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _peak_rss_mb() -> float:
    """This process's peak resident set size so far, MB (Linux reports KB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20) if sys.platform == "darwin" else peak / 1024


def _inference(backend_name: str, opts: dict) -> dict:
    import numpy as np

    from ..plumbing.backends import make_backend

    t0 = time.perf_counter()
    backend = make_backend(backend_name, GPT2_124M, seed=0)
    out = {"build_s": time.perf_counter() - t0, "parameters": backend.num_parameters()}
    out["rss_built_mb"] = _peak_rss_mb()
    rng = np.random.default_rng(0)
    T = opts["forward_tokens"]
    x = rng.integers(0, GPT2_124M["vocab_size"], (1, T), dtype=np.int64)
    forward = _forward_fn(backend)
    forward(x[:, :8])  # warm-up: first-call allocations, thread pools
    t0 = time.perf_counter()
    forward(x)
    out["forward_tok_s"] = T / (time.perf_counter() - t0)
    prompt = x[0, : opts["prompt_tokens"]].tolist()
    n = opts["new_tokens"]
    for use_cache in (True, False):
        t0 = time.perf_counter()
        ids = backend.generate(prompt, n, temperature=0.0, use_cache=use_cache)
        out[f"generate_{'cache' if use_cache else 'nocache'}_tok_s"] = n / (
            time.perf_counter() - t0
        )
        out[f"ids_{use_cache}"] = ids
    out["same_tokens"] = out.pop("ids_True") == out.pop("ids_False")
    out["rss_peak_mb"] = _peak_rss_mb()
    return out


def _forward_fn(backend):
    """Logits of ``x`` in eval mode, no autograd graph."""
    if backend.name == "numpy":
        backend.model.eval()
        return backend.model
    torch = backend.torch
    backend.model.eval()

    def forward(x):
        with torch.inference_mode():
            return backend.model(torch.from_numpy(x))

    return forward


def _training(backend_name: str, opts: dict) -> dict:
    import numpy as np

    from ..plumbing.backends import make_backend

    backend = make_backend(backend_name, GPT2_124M, seed=0)
    B, N, T = opts["batch_size"], opts["grad_accum"], opts["block_size"]
    rng = np.random.default_rng(1)
    times = []
    for _ in range(opts["steps"]):
        ids = rng.integers(0, GPT2_124M["vocab_size"], (B * N, T + 1), dtype=np.int64)
        t0 = time.perf_counter()
        backend.train_step(ids[:, :-1], ids[:, 1:], grad_accum=N)
        times.append(time.perf_counter() - t0)
    return {"step_s": times, "tokens_per_step": B * N * T, "rss_peak_mb": _peak_rss_mb()}


def _run_worker(spec: str) -> int:
    job = json.loads(spec)
    fn = {"inference": _inference, "training": _training}[job["what"]]
    print(json.dumps(fn(job["backend"], job["opts"])))
    return 0


def _measure(what: str, backend: str, opts: dict) -> dict:
    """One measurement in a fresh process (its peak memory is its own)."""
    spec = json.dumps({"what": what, "backend": backend, "opts": opts})
    proc = subprocess.run(
        [sys.executable, "-m", "labs", "bench-gpt2", "--worker", spec],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise UserError(f"bench-gpt2: the {backend} {what} run failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> int:
    if args.worker:
        return _run_worker(args.worker)
    for name in (
        "forward_tokens",
        "prompt_tokens",
        "block_size",
        "batch_size",
        "grad_accum",
        "steps",
    ):
        if getattr(args, name) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.new_tokens < 1:
        raise UserError(f"--new-tokens must be >= 1, got {args.new_tokens}")
    limit = GPT2_124M["block_size"]
    if args.forward_tokens > limit or args.block_size > limit:
        raise UserError(f"--forward-tokens and --block-size must be <= {limit} (GPT-2's context)")
    opts = {
        k: getattr(args, k)
        for k in (
            "forward_tokens",
            "prompt_tokens",
            "new_tokens",
            "block_size",
            "batch_size",
            "grad_accum",
            "steps",
        )
    }
    results = {"cpu": cpu_name(), "config": GPT2_124M, "options": opts, "backends": {}}
    results["load_average_before"] = _load_average()
    for backend in args.backends:
        if not args.json:
            print(f"measuring the {backend} backend ...", file=sys.stderr, flush=True)
        entry = {"inference": _measure("inference", backend, opts)}
        if not args.no_train:
            entry["training"] = _measure("training", backend, opts)
        results["backends"][backend] = entry
    results["load_average_after"] = _load_average()
    if len(args.backends) == 2:
        np_, t_ = (results["backends"][b]["inference"]["rss_peak_mb"] for b in ("numpy", "torch"))
        results["inference_memory_ratio_numpy_to_torch"] = np_ / t_
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(format_table(results))
    return 0


def _later_steps(times: list[float]) -> str:
    """The mean time of the steps after the first (which allocates AdamW's moments)."""
    return f"{sum(times[1:]) / len(times[1:]):.1f} s" if len(times) > 1 else "-"


def format_table(results: dict) -> str:
    """The numbers of :func:`main` as a Markdown table."""
    backends = list(results["backends"])
    o = results["options"]
    rows = [
        ("parameters", lambda r: f"{r['inference']['parameters']:,}"),
        ("build the model (random init)", lambda r: f"{r['inference']['build_s']:.1f} s"),
        ("memory: model built (peak RSS)", lambda r: f"{r['inference']['rss_built_mb']:,.0f} MB"),
        (
            "memory: + forward and generation (peak RSS)",
            lambda r: f"{r['inference']['rss_peak_mb']:,.0f} MB",
        ),
        (
            f"forward, 1 x {o['forward_tokens']} tokens",
            lambda r: f"{r['inference']['forward_tok_s']:,.0f} tokens/s",
        ),
        (
            f"greedy generation, KV cache ({o['prompt_tokens']} + {o['new_tokens']})",
            lambda r: f"{r['inference']['generate_cache_tok_s']:.1f} tokens/s",
        ),
        (
            "greedy generation, no cache",
            lambda r: f"{r['inference']['generate_nocache_tok_s']:.1f} tokens/s",
        ),
    ]
    if all("training" in results["backends"][b] for b in backends):
        label = (
            f"fine-tuning step, {o['batch_size']} x {o['block_size']} tokens x "
            f"--grad-accum {o['grad_accum']}"
        )
        rows += [
            (f"{label} (first)", lambda r: f"{r['training']['step_s'][0]:.1f} s"),
            (f"{label} (later, mean)", lambda r: _later_steps(r["training"]["step_s"])),
            ("memory: fine-tuning (peak RSS)", lambda r: f"{r['training']['rss_peak_mb']:,.0f} MB"),
        ]
    load = results.get("load_average_before"), results.get("load_average_after")
    busy = f" (load average {load[0][0]:.1f} before, {load[1][0]:.1f} after)" if all(load) else ""
    lines = [
        f"GPT-2 124M (random weights, float32) on {results['cpu']}{busy}",
        "",
        "| | " + " | ".join(backends) + " |",
        "|---|" + "---:|" * len(backends),
    ]
    for label, cell in rows:
        lines.append(
            f"| {label} | " + " | ".join(cell(results["backends"][b]) for b in backends) + " |"
        )
    ratio = results.get("inference_memory_ratio_numpy_to_torch")
    if ratio is not None:
        lines += ["", f"inference memory, numpy / torch: {ratio:.2f}x"]
    same = {b: results["backends"][b]["inference"]["same_tokens"] for b in backends}
    lines.append(
        "greedy tokens with and without the cache identical: "
        + ", ".join(f"{b} {'yes' if s else 'NO'}" for b, s in same.items())
    )
    return "\n".join(lines)
