"""``python -m labs export RUN --to hf --out DIR``: a checkpoint as a Hugging Face directory.

DIR (new, written all at once) gets what ``transformers``' ``from_pretrained`` loads;
what the architecture cannot express is refused (``labs/plumbing/exporting.py``).
"""

from __future__ import annotations

import argparse

from .. import UserError
from ..plumbing.exporting import TARGETS, export_run
from .shared import naming, path_text


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``export`` command's options."""
    p.add_argument("run", metavar="RUN", help="a checkpoint directory (train's --out, import's)")
    p.add_argument("--to", choices=TARGETS, required=True, help="the format: hf, Hugging Face's")
    p.add_argument("--out", type=path_text, metavar="DIR", required=True, help="the new directory")


def main(args: argparse.Namespace) -> int:
    """Export; print what was written (UserError: DIR exists, RUN unusable, or a model HF
    cannot express)."""
    try:
        out, hf_config, notes = export_run(args.run, args.out, args.to)
    except FileExistsError as e:
        raise UserError(f"--out {e}") from e
    except (OSError, ValueError) as e:
        raise UserError(naming(args.run, args.out, e)) from e
    for note in notes:
        print(f"note: {note}")
    arch = hf_config["architectures"][0]
    print(f"wrote {out}/ ({arch}: config.json, model.safetensors, tokenizer.json)")
    print(
        "load it with: AutoModelForCausalLM.from_pretrained(DIR), "
        "AutoTokenizer.from_pretrained(DIR)  (pip install transformers)"
    )
    return 0
