"""The learner's command line: ``python -m labs train|sample|bench``.

    python -m labs train --backend numpy --max-iters 200
    python -m labs sample --checkpoint runs/numpy --prompt "ROMEO:"
    python -m labs bench [--profile] [--json]      # a training step, NumPy vs torch
    python -m labs bench-attention [--device cuda]
    python -m labs bench-generate
    python -m labs bench-tokenizer
    python -m labs classify --backend torch        # speaker classification
    python -m labs seq2seq --backend numpy         # encoder-decoder, digit reversal
    python -m labs import gpt2 DIR --out RUN       # a Hugging Face GPT-2 (or llama, nanogpt)
    python -m labs export RUN --to hf --out DIR    # back to Hugging Face's layout
    python -m labs inspect RUN                     # what a checkpoint holds
    python -m labs bench-gpt2                      # GPT-2 124M on this CPU, both backends
    python -m labs start|check|status|reset NN     # the exercises (docs/exercises.md)
    python -m labs grade WS1 WS2 --out grades      # a teacher's gradebook (docs/teaching.md)
    python -m labs release --out DIR               # the course without its solutions

Expected bad inputs (a missing corpus, a corrupt checkpoint, a prompt with
characters the model never saw) end with one line, ``error: ...``, and exit
status 2; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

from .plumbing import runtime

# before the first import of NumPy, which loads OpenBLAS and fixes how long its idle
# threads poll: labs/plumbing/runtime.py
runtime.let_idle_blas_threads_sleep()

import argparse  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from . import UserError  # noqa: E402
from .commands import (  # noqa: E402
    bench,
    bench_more,
    classify,
    export,
    import_model,
    inspect_run,
    sample,
    seq2seq,
    train,
)
from .commands.train_distributed import exit_worker  # noqa: E402
from .learner import diff, docs, exercises, grade, notebook_export, release  # noqa: E402
from .plumbing.runtime import check_thread_env, tune_malloc  # noqa: E402


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Show "(default: X)" after each option's help, unless the help already
    says it or there is nothing to show (flags, options without a default)."""

    def _get_help_string(self, action):
        help_ = action.help or ""
        no_default = action.default is None or action.default is False  # not `in`: 0.0 == False
        if "default" in help_ or no_default or action.default == argparse.SUPPRESS:
            return help_
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """A bad option is a ``UserError``, one ``error:`` line naming it, like any other."""

    def error(self, message):
        message = message.removeprefix("argument ")  # "--lr: must be ..."
        raise UserError(f"{message} (see {self.prog} --help)")


def build_parser() -> argparse.ArgumentParser:
    invoked = Path(sys.argv[0]).name  # `twinformer ...` (the console script) or `python -m labs`
    parser = _Parser(
        prog="twinformer" if invoked.startswith("twinformer") else "python -m labs",
        description="twinformer labs: train, sample and benchmark the NumPy and PyTorch "
        "models, and work through the chapters' exercises.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module, help_ in (
        ("train", train, "train a GPT on Tiny Shakespeare (characters or BPE tokens)"),
        ("sample", sample, "continue a prompt with a trained checkpoint"),
        ("bench", bench, "time a training step on both backends"),
        ("bench-attention", bench_more.attention, "explicit vs flash/fused attention"),
        ("bench-generate", bench_more.generate, "generation tokens/s with and without KV cache"),
        ("bench-tokenizer", bench_more.tokenizer, "from-scratch BPE against HF tokenizers"),
        ("bench-gpt2", bench_more.gpt2, "GPT-2 124M on this CPU: memory, speed, a step"),
        ("import", import_model, "a GPT-2, Llama or nanoGPT checkpoint as a run directory"),
        ("export", export, "a run directory as a Hugging Face model directory"),
        ("inspect", inspect_run, "what a checkpoint holds: config, tokenizer, parameters"),
        ("classify", classify, "train a transformer classifier: who says this speech?"),
        ("seq2seq", seq2seq, "train an encoder-decoder to reverse or sort digit strings"),
        ("start", exercises.start, "make a workspace where one chapter's NumPy code is yours"),
        ("check", exercises.check, "run one chapter's parity tests against your workspace"),
        ("status", exercises.status, "show which chapters are done"),
        ("reset", exercises.reset, "restore one chapter's exercise stubs in your workspace"),
        ("grade", grade, "a teacher's gradebook: many learners' workspaces, chapter by chapter"),
        ("release", release, "a copy of the course for students: no solutions in it"),
        ("diff", diff, "show the NumPy and PyTorch version of a component side by side"),
        ("docs", docs, "build the HTML reference site under docs/site/"),
        ("notebook", notebook_export, "write a chapter's lab as a Jupyter notebook (.ipynb)"),
    ):
        sub = commands.add_parser(
            name,
            help=help_,
            description=help_[0].upper() + help_[1:] + ("" if help_[-1] in ".?!" else "."),
            formatter_class=_HelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(func=module.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the exit status."""
    tune_malloc()  # see labs/plumbing/runtime.py: NumPy's temporaries stop page-faulting
    try:
        args = build_parser().parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)  # what was given explicitly
        check_thread_env()  # a bad thread variable, said before anything is written
        return args.func(args)
    except UserError as e:
        if os.environ.get("RANK", "0") == "0":  # several ranks: the first one says it
            print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if os.environ.get("RANK", "0") == "0":
            print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    status = main()
    exit_worker(status)  # under torchrun: leave before finalization can abort (a no-op otherwise)
    sys.exit(status)
