"""``python -m labs import``: a real model as a twinformer checkpoint.

    python -m labs import gpt2 DIR --out RUN        # a Hugging Face GPT-2 directory
    python -m labs import llama DIR --out RUN       # a Llama-style one that fits this GPT
    python -m labs import nanogpt ckpt.pt --meta meta.pkl --out RUN    # nanoGPT, characters
    python -m labs import nanogpt ckpt.pt --tokenizer GPT2DIR --out RUN  # nanoGPT, GPT-2 tokens

DIR is a local directory in Hugging Face's layout, read with JSON and safetensors (no
``transformers``, no download). RUN, a new checkpoint directory, is written all at once
after every check (``labs/plumbing/importing.py``).
"""

from __future__ import annotations

import argparse
import time

from .. import UserError
from ..plumbing.importing import KINDS, count_parameters, import_gpt2, import_llama, import_nanogpt
from ..plumbing.importing import write_run as _write_run
from .shared import naming, path_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``import`` command's options."""
    p.add_argument("kind", choices=KINDS, help="what SOURCE is")
    p.add_argument(
        "source",
        metavar="SOURCE",
        help="gpt2, llama: a Hugging Face model directory; nanogpt: its ckpt.pt",
    )
    p.add_argument(
        "--out", type=path_text, metavar="RUN", required=True, help="the new checkpoint directory"
    )
    g = p.add_argument_group("nanogpt")
    g.add_argument("--meta", metavar="PKL", help="the run's meta.pkl (a character vocabulary)")
    g.add_argument(
        "--tokenizer",
        metavar="DIR",
        help="a directory with GPT-2's tokenizer.json or vocab.json + merges.txt (a run on "
        "GPT-2 tokens)",
    )
    g = p.add_argument_group("llama")
    g.add_argument(
        "--rope-layout",
        choices=("half", "interleaved"),
        default="half",
        help="RoPE pairs of the imported model: HF's (weights as they are) or Meta's "
        "(q and k rows permuted; the same function)",
    )


def main(args: argparse.Namespace) -> int:
    """Read, convert, check, write; print what was imported (UserError: RUN exists, a file
    is missing or unreadable, the model does not fit this GPT)."""
    if args.kind != "nanogpt" and (args.meta or args.tokenizer):
        raise UserError(f"--meta and --tokenizer are nanogpt's; {args.kind} reads SOURCE's own")
    if args.kind != "llama" and args.rope_layout != "half":
        raise UserError(f"--rope-layout is llama's; {args.kind} has learned positions")
    t0 = time.perf_counter()
    try:
        if args.kind == "gpt2":
            imported = import_gpt2(args.source)
        elif args.kind == "llama":
            imported = import_llama(args.source, args.rope_layout)
        else:
            imported = import_nanogpt(args.source, args.meta, args.tokenizer)
        out = _write_run(args.out, imported)
    except FileExistsError as e:
        raise UserError(f"--out {e}") from e
    except (OSError, ValueError) as e:
        raise UserError(naming(args.source, args.out, e)) from e
    c = imported.model_config
    tied = c["tie_weights"]
    counts = count_parameters(imported.state, tied)
    tok = imported.tokenizer
    tok_kind = "characters" if hasattr(tok, "chars") else "byte-level BPE"
    print(
        f"imported {args.kind} from {args.source} in {time.perf_counter() - t0:.1f} s: "
        f"{counts['total']:,} parameters ({'tied head' if tied else 'untied head'}), "
        f"{c['n_layers']} layers, {c['n_heads']} heads, d_model {c['d_model']}, context "
        f"{c['block_size']}, vocabulary {c['vocab_size']} ({tok_kind})"
    )
    for note in imported.notes:
        print(f"note: {note}")
    print(f"wrote {out}/")
    print(
        f"next: python -m labs sample --checkpoint {out} --prompt 'Hello'   "
        f"(or inspect, train --init-from {out}, export {out} --to hf)"
    )
    return 0
