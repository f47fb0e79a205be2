"""``python -m labs bench-tokenizer``: byte-level BPE from scratch against HF tokenizers.

In one process, on Tiny Shakespeare, side by side:

* training seconds of the from-scratch trainer (``numpy_impl.bpe_trainer.train_bpe``,
  pure Python) and of HF's ``BpeTrainer`` (Rust, ``train_from_iterator`` on the same
  text), at each ``--vocab-sizes``, and how many merges agree, in order;
* encoding throughput (MB of UTF-8 per second) of the whole corpus: ours (first call,
  cache empty; and a second call) against HF's ``Tokenizer.encode`` of the whole
  corpus in one call;
* compression, UTF-8 bytes per token over the whole corpus, of: characters (chapter
  01); the plain BPE of the source material's chapter on tokenization (no
  pre-tokenization: merges cross word boundaries), trained with
  ``train_bpe(pattern=None)``, which the suite tests equal to that chapter's rescanning
  ``train_bpe_plain``; the from-scratch byte-level BPE with GPT-2's regex; HF
  ``ByteLevel``; and HF with that chapter's ``Whitespace`` pre-tokenizer (which drops
  whitespace, so it is not reversible: see the notes it prints).

HF trains on a thread pool: ``RAYON_NUM_THREADS`` (``--threads``) sets its size, and
the header says how many cores there were and how busy. Timings taken while other
processes run are inflated; the ratios, measured alternately in one process, are the
numbers to compare.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

from .. import UserError
from ..plumbing.data import CorpusUnavailableError, load_corpus, resolve_corpus

MB = 1e6


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``bench-tokenizer`` command's options."""
    p.add_argument("--data", metavar="PATH", help="Tiny Shakespeare (default: as train)")
    p.add_argument("--vocab-sizes", type=int, nargs="+", default=[1000, 10000], help="vocabularies")
    p.add_argument(
        "--repeats",
        type=int,
        default=3,
        help="timings per measurement (the best is kept: the least disturbed by others)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="RAYON_NUM_THREADS for HF (default: HF's choice, one per core)",
    )
    p.add_argument(
        "--no-plain",
        action="store_true",
        help="skip the plain BPE without pre-tokenization (about a minute)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object, no table")


def _best(fn, repeats: int):
    """``(result of the last call, best wall time)`` of ``repeats`` calls of ``fn``."""
    best, out = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def _hf_bytelevel(text: str, vocab_size: int):
    """Train a raw HF tokenizer as ``torch_impl.BPETokenizer.train`` does (no wrapper)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text], trainer)
    return tok


def _hf_whitespace(text: str, vocab_size: int):
    """The snippet of the source material's chapter on tokenization:
    ``BPE(unk_token="[UNK]")``, ``Whitespace()``, ``BpeTrainer``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False))
    return tok


def measure(text: str, vocab_sizes: list[int], repeats: int, plain: bool) -> dict:
    """Every number of the report, as a dict (see the module docstring)."""
    from numpy_impl.bpe_trainer import train_bpe
    from numpy_impl.byte_level import str_to_token
    from numpy_impl.char_tokenizer import CharTokenizer
    from numpy_impl.tokenizer import BPETokenizer

    n_bytes = len(text.encode("utf-8"))
    res: dict = {"bytes": n_bytes, "characters": len(text), "vocab": {}}
    res["char"] = {
        "vocab_size": CharTokenizer.from_text(text).vocab_size,
        "bytes_per_token": n_bytes / len(text),
    }
    for V in vocab_sizes:
        row: dict = {}
        # training, alternating so that a burst of load hits both sides alike
        t_ours, t_hf = math.inf, math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            ours = BPETokenizer.train(text, V, special_tokens=())
            t_ours = min(t_ours, time.perf_counter() - t0)
            t0 = time.perf_counter()
            hf = _hf_bytelevel(text, V)
            t_hf = min(t_hf, time.perf_counter() - t0)
        row["train_s"] = {"ours": t_ours, "hf": t_hf, "ratio": t_ours / t_hf}
        hf_doc = json.loads(hf.to_str())["model"]
        hf_merges = [tuple(str_to_token(t) for t in m) for m in hf_doc["merges"]]
        same = 0
        for a, b in zip(ours.merges, hf_merges, strict=False):
            if a != b:
                break
            same += 1
        row["merges"] = {
            "ours": len(ours.merges),
            "hf": len(hf_merges),
            "identical_prefix": same,
            "identical": ours.merges == hf_merges,
            "same_vocab": ours.vocab == {str_to_token(s): i for s, i in hf_doc["vocab"].items()},
        }
        # encoding the whole corpus
        ours._cache.clear()
        t0 = time.perf_counter()
        ids = ours.encode(text)
        e_cold = time.perf_counter() - t0
        _, e_warm = _best(lambda: ours.encode(text), repeats)  # noqa: B023
        hf_ids, e_hf = _best(lambda: hf.encode(text, add_special_tokens=False).ids, repeats)  # noqa: B023
        row["encode_mb_s"] = {
            "ours_first_call": n_bytes / e_cold / MB,
            "ours": n_bytes / e_warm / MB,
            "hf_one_call": n_bytes / e_hf / MB,
            "ratio": e_hf / e_warm,
            "ratio_first_call": e_hf / e_cold,
            "same_ids": ids == hf_ids,
        }
        ws = _hf_whitespace(text, V)
        ws_tokens = len(ws.encode(text).ids)
        non_ws = sum(len(w.encode("utf-8")) for w in text.split())
        row["bytes_per_token"] = {
            "ours_gpt2_regex": n_bytes / len(ids),
            "hf_bytelevel": n_bytes / len(hf_ids),
            "hf_whitespace": n_bytes / ws_tokens,
            "hf_whitespace_non_space_bytes": non_ws / ws_tokens,
        }
        if plain:
            t0 = time.perf_counter()
            vocab, merges = train_bpe(text, V, pattern=None)
            t_train = time.perf_counter() - t0
            tok = BPETokenizer(vocab, merges, pattern=None)
            t0 = time.perf_counter()
            n = len(tok.encode(text))
            row["bytes_per_token"]["plain"] = n_bytes / n
            row["plain_s"] = {"train": t_train, "encode": time.perf_counter() - t0}
        res["vocab"][str(V)] = row
    return res


def _table(res: dict, header: str) -> str:
    out = [header, ""]
    out.append("Training and encoding, side by side in this process (best of the repeats):")
    out.append(
        f"{'vocab':>6} | {'ours train s':>12} | {'HF train s':>10} | {'ours/HF':>7} | "
        f"{'identical merges':>17} | {'ours enc MB/s':>13} | {'(1st call)':>10} | "
        f"{'HF enc MB/s':>11} | {'ours/HF speed':>13}"
    )
    for V, row in res["vocab"].items():
        tr, m, e = row["train_s"], row["merges"], row["encode_mb_s"]
        merges = f"{m['identical_prefix']:,}/{m['hf']:,}" + (" all" if m["identical"] else "")
        out.append(
            f"{V:>6} | {tr['ours']:>12.2f} | {tr['hf']:>10.2f} | {tr['ratio']:>7.2f} | "
            f"{merges:>17} | {e['ours']:>13.2f} | {e['ours_first_call']:>10.2f} | "
            f"{e['hf_one_call']:>11.2f} | {e['ratio']:>12.2f}x"
        )
    out += ["", "Compression, UTF-8 bytes per token over the whole corpus:"]
    sizes = list(res["vocab"])
    out.append(f"{'tokenizer':<44}" + "".join(f" | {'vocab ' + V:>12}" for V in sizes))
    rows = [
        ("characters (chapter 01, 65 tokens)", lambda r: res["char"]["bytes_per_token"]),
        ("plain BPE (no pre-tokenization)", lambda r: r.get("plain")),
        ("from scratch, GPT-2 regex (chapter 11)", lambda r: r["ours_gpt2_regex"]),
        ("HF ByteLevel (GPT-2 regex)", lambda r: r["hf_bytelevel"]),
        ("HF Whitespace pre-tokenizer [1]", lambda r: r["hf_whitespace"]),
        ("  same, non-space bytes per token [1]", lambda r: r["hf_whitespace_non_space_bytes"]),
    ]  # fmt: skip
    for name, get in rows:
        cells = []
        for V in sizes:
            v = get(res["vocab"][V]["bytes_per_token"])
            cells.append(f" | {v:>12.3f}" if v is not None else f" | {'not run':>12}")
        out.append(f"{name:<44}" + "".join(cells))
    out += [
        "",
        "[1] Whitespace() splits on \\w+|[^\\w\\s]+ and throws the spaces and newlines away:",
        "    fewer tokens, but decode cannot give the text back (and unseen characters are",
        "    [UNK]). Byte-level BPE keeps every byte, so decode(encode(s)) == s.",
    ]
    for V, row in res["vocab"].items():
        if "plain_s" in row:
            p = row["plain_s"]
            out.append(
                f"plain BPE at vocab {V}: trained in {p['train']:.1f} s "
                f"(train_bpe(pattern=None), the whole corpus as one word), encoded in "
                f"{p['encode']:.1f} s"
            )
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise UserError(f"--threads must be >= 1, got {args.threads}")
        os.environ["RAYON_NUM_THREADS"] = str(args.threads)  # before HF starts its pool
    if any(v < 257 for v in args.vocab_sizes) or args.repeats < 1:
        raise UserError("--vocab-sizes must be >= 257 and --repeats >= 1")
    try:
        path = resolve_corpus(args.data)
        text = load_corpus(path)
    except (OSError, ValueError, CorpusUnavailableError) as e:
        raise UserError(str(e)) from e
    cores = os.cpu_count()
    threads = os.environ.get("RAYON_NUM_THREADS")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    res = measure(text, args.vocab_sizes, args.repeats, plain=not args.no_plain)
    res.update(
        corpus=str(path),
        cores=cores,
        rayon_num_threads=threads,
        load_average_1min_before=load,
        load_average_1min_after=os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    )
    if args.json:
        print(json.dumps(res, indent=2))
        return 0
    hf_threads = f"RAYON_NUM_THREADS={threads}" if threads else f"unset: one per core, {cores}"
    header = (
        f"{path}: {res['characters']:,} characters, {res['bytes']:,} UTF-8 bytes. "
        f"{cores} CPU cores; HF threads: {hf_threads}; ours: 1 thread (pure Python). "
        f"Load average {load:.2f} before, {res['load_average_1min_after']:.2f} after."
    )
    print(_table(res, header))
    return 0
