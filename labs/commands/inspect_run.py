"""``python -m labs inspect RUN``: what a checkpoint holds (the architecture, its origin,
the tokenizer, the parameters by component, the last metrics), without building a model.
"""

from __future__ import annotations

import argparse
import json

from .. import UserError
from ..plumbing.checkpoint import load_checkpoint
from ..plumbing.importing import count_parameters


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``inspect`` command's options."""
    p.add_argument("run", metavar="RUN", help="a checkpoint directory")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")


def summary(run: str) -> dict:
    """The facts ``inspect`` prints, as a dict (raises as ``load_checkpoint``)."""
    state, config, optimizer = load_checkpoint(run)
    model = config["model"]
    tied = bool(model.get("tie_weights", True))
    tokenizer = config["tokenizer"]
    return {
        "run": str(run),
        "step": config.get("step", 0),
        "backend": config.get("backend"),
        "imported_from": config.get("imported_from"),
        "model": model,
        "tokenizer": {k: v for k, v in tokenizer.items() if k != "chars"}
        | ({"chars": len(tokenizer["chars"])} if "chars" in tokenizer else {}),
        "parameters": count_parameters(state, tied),
        "tied_head": tied,
        "dtype": str(state["tok_emb.weight"].dtype),
        "optimizer_state": optimizer is not None,
        "metrics": config.get("metrics"),
    }


def main(args: argparse.Namespace) -> int:
    try:
        facts = summary(args.run)
    except (OSError, ValueError) as e:
        raise UserError(str(e)) from e
    if args.json:
        print(json.dumps(facts, indent=2))
        return 0
    m, p = facts["model"], facts["parameters"]
    source = facts["imported_from"]
    origin = (
        f"imported ({source['kind']}) from {source['path']}"
        if source
        else f"trained by the {facts['backend']} backend"
    )
    print(f"{facts['run']}: step {facts['step']}, {origin}")
    arch = ", ".join(f"{k}={v}" for k, v in m.items())
    print(f"model: {arch}")
    tok = facts["tokenizer"]
    print(f"tokenizer: {tok.get('type')}, {m['vocab_size']} ids")
    print(f"parameters ({facts['dtype']}):")
    for part in ("embeddings", "attention", "ffn", "norms", "head"):
        note = (
            "  (tied: the token embedding, counted there)"
            if part == "head" and p[part] == 0 and facts["tied_head"]
            else ""
        )
        print(f"  {part:<11}{p[part]:>15,}{note}")
    print(f"  {'total':<11}{p['total']:>15,}")
    if facts["metrics"]:
        keys = ("val_loss", "train_loss", "val_bpb")
        print(
            "metrics: "
            + ", ".join(f"{k} {facts['metrics'][k]:.4f}" for k in keys if k in facts["metrics"])
        )
    return 0
