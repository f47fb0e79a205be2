"""``python -m labs bench-generate``: generation tokens/s with and without the KV cache.

Greedy decoding (temperature 0, so the tokens can be compared) from a random
16-token prompt, batch 1, with randomly initialised weights (speed does not
depend on what the weights say), the same weights in both backends:

1. the default model (``GPTConfig`` defaults: 4 layers, 4 heads, d_model 128,
   block_size 64), 256 new tokens, NumPy and PyTorch, ``use_cache`` off and on.
   The sequence outgrows block_size after 48 tokens; from then on the window
   slides every step, every token changes position (learned absolute
   positions), and the cache is refilled from the whole window each step: the
   cache saves work only on the first 48 tokens.
2. the same model with block_size 256 and 240 new tokens, so the sequence
   never outgrows the window: every step after the prompt is one token through
   the model instead of up to 256. The target: >= 5x tokens/s in NumPy, with
   identical tokens.

Each figure is the best of ``--repeats`` runs (the least disturbed by other
processes); the ratios compare runs made side by side in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from .. import UserError

VOCAB = 65  # Tiny Shakespeare's characters
TARGET_SPEEDUP = 5.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench-generate`` command's options."""
    p.add_argument("--prompt-len", type=int, default=16, help="prompt tokens")
    p.add_argument("--new-tokens", type=int, default=256, help="new tokens, default model")
    p.add_argument("--long-block-size", type=int, default=256, help="block_size of part 2")
    p.add_argument("--long-new-tokens", type=int, default=240, help="new tokens of part 2")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement (best kept)")
    p.add_argument("--threads", type=int, default=1, help="torch threads")
    p.add_argument("--seed", type=int, default=0, help="weights and prompt")
    p.add_argument(
        "--n-kv-heads", type=int, default=None, help="key/value heads of the 4 (GQA; 1: MQA)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")


def _models(block_size: int, seed: int, n_kv_heads=None):
    """(NumPy GPT, torch GPT), float32, the same random weights."""
    import torch

    import numpy_impl as N
    import torch_impl as T

    config = {"vocab_size": VOCAB, "block_size": block_size, "n_kv_heads": n_kv_heads}
    numpy_model = N.GPT(N.GPTConfig(**config), seed=seed, dtype=np.float32)
    torch_model = T.GPT(T.GPTConfig(**config), dtype=torch.float32)
    torch_model.load_state_dict(
        {k: torch.from_numpy(v.copy()) for k, v in numpy_model.state_dict().items()}
    )
    return numpy_model, torch_model


def measure_generation(
    backend: str, model, prompt: np.ndarray, new_tokens: int, use_cache: bool, repeats: int
) -> dict:
    """Best-of-``repeats`` wall time of greedy ``generate``; returns tokens/s and the tokens."""
    if backend == "numpy":
        from numpy_impl.sampling import generate

        def run():
            return generate(model, prompt, new_tokens, temperature=0.0, use_cache=use_cache)
    else:
        import torch

        from torch_impl.sampling import generate

        prompt_t = torch.from_numpy(prompt)

        def run():
            out = generate(model, prompt_t, new_tokens, temperature=0.0, use_cache=use_cache)
            return out.numpy()

    best, tokens = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = run()
        best = min(best, time.perf_counter() - t0)
    return {
        "backend": backend,
        "use_cache": use_cache,
        "new_tokens": new_tokens,
        "seconds": best,
        "tokens_per_s": new_tokens / best,
        "tokens": tokens[0, prompt.shape[1] :].tolist(),
    }


def run_part(block_size, prompt_len, new_tokens, repeats, seed, n_kv_heads=None) -> dict:
    """Both backends, cache off and on; speedups, whether the tokens agree, the cache's bytes."""
    models = dict(zip(("numpy", "torch"), _models(block_size, seed, n_kv_heads), strict=True))
    prompt = np.random.default_rng(seed).integers(0, VOCAB, (1, prompt_len), dtype=np.int64)
    runs = [
        measure_generation(name, model, prompt, new_tokens, use_cache, repeats)
        for name, model in models.items()
        for use_cache in (False, True)
    ]
    by = {(r["backend"], r["use_cache"]): r for r in runs}
    part = {"block_size": block_size, "prompt_len": prompt_len, "new_tokens": new_tokens}
    cache = models["numpy"].new_kv_cache()
    models["numpy"](prompt, kv_cache=cache)  # the buffers: block_size positions of H_kv heads
    part["kv_cache_bytes"] = sum(layer.k.nbytes + layer.v.nbytes for layer in cache.layers)
    for name in models:
        off, on = by[name, False], by[name, True]
        part[f"{name}_speedup"] = on["tokens_per_s"] / off["tokens_per_s"]
        part[f"{name}_identical"] = on["tokens"] == off["tokens"]
    part["backends_agree"] = by["numpy", True]["tokens"] == by["torch", True]["tokens"]
    part["runs"] = [{k: v for k, v in r.items() if k != "tokens"} for r in runs]
    return part


def main(args: argparse.Namespace) -> int:
    sizes = (args.prompt_len, args.new_tokens, args.long_block_size, args.long_new_tokens)
    if min(sizes) < 1 or args.repeats < 1 or args.threads < 1:
        raise UserError("every size, --repeats and --threads must be >= 1")
    if args.prompt_len > args.long_block_size:
        raise UserError("--prompt-len must not exceed --long-block-size")
    if args.n_kv_heads is not None and (args.n_kv_heads < 1 or 4 % args.n_kv_heads):
        raise UserError(f"--n-kv-heads {args.n_kv_heads}: must divide the model's 4 heads")
    import torch

    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    from numpy_impl.gpt import GPTConfig

    default_block = GPTConfig(vocab_size=VOCAB).block_size
    common = (args.repeats, args.seed, args.n_kv_heads)
    parts = [
        run_part(default_block, args.prompt_len, args.new_tokens, *common),
        run_part(args.long_block_size, args.prompt_len, args.long_new_tokens, *common),
    ]
    target_met = parts[1]["numpy_speedup"] >= TARGET_SPEEDUP and parts[1]["numpy_identical"]
    summary = {
        "parts": parts,
        "target": {"numpy_speedup_at_least": TARGET_SPEEDUP, "met": target_met},
        "torch_threads": args.threads,
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    print(
        f"greedy generation, batch 1, prompt {args.prompt_len}, 4 layers, 4 heads "
        f"({args.n_kv_heads or 4} K/V), d_model 128, float32, torch threads {args.threads} "
        f"(best of {args.repeats})"
    )
    header = f"{'block_size':>10} {'new':>5}  {'backend':<7}{'no cache':>14}{'KV cache':>14}"
    header += f"{'speedup':>9}  same tokens"
    print(header)
    print("-" * len(header))
    for part in parts:
        by = {(r["backend"], r["use_cache"]): r for r in part["runs"]}
        for name in ("numpy", "torch"):
            off, on = by[name, False]["tokens_per_s"], by[name, True]["tokens_per_s"]
            print(
                f"{part['block_size']:>10} {part['new_tokens']:>5}  {name:<7}{off:>8,.0f} tok/s"
                f"{on:>8,.0f} tok/s{part[f'{name}_speedup']:>8.1f}x  "
                f"{'yes' if part[f'{name}_identical'] else 'NO'}"
            )
        agree = "yes" if part["backends_agree"] else "no (float32 near-ties)"
        print(f"{'':>18}NumPy and torch tokens identical: {agree}")
        print(f"{'':>18}KV cache: {part['kv_cache_bytes'] / 1024:,.0f} KiB (NumPy buffers)")
    verdict = "reached" if target_met else "not reached with these settings"
    print(
        f"\nKV cache speedup, NumPy, block_size {args.long_block_size}, "
        f"{args.long_new_tokens} new tokens: {parts[1]['numpy_speedup']:.1f}x "
        f"(the project's goal: >= {TARGET_SPEEDUP:.0f}x with identical tokens at the defaults; "
        f"{verdict})"
    )
    print(
        f"(block_size {default_block}: past it the window slides, the cache is refilled every "
        "step, and only the first steps gain)"
    )
    if load_before > 0.5 * (os.cpu_count() or 1):
        print(
            f"note: the machine was busy (load average {load_before:.1f} on {os.cpu_count()} "
            "cores): tokens/s are deflated; the speedups are measured side by side."
        )
    return 0
