"""``python -m labs sample``: continue a prompt with a trained checkpoint.

A checkpoint of either backend loads into either: ``--backend`` chooses who does the
arithmetic. The same seed samples differently on the two (their generators differ);
greedy decoding (``--temperature 0``) agrees up to rounding.
"""

from __future__ import annotations

import argparse
import sys

from .. import UserError
from ..plumbing.backends import ATTN_IMPLS, BACKENDS, make_backend
from ..plumbing.checkpoint_format import first_nonfinite, physical_memory
from ..plumbing.tokenization import load_tokenizer
from .shared import int_range, naming, number, path_text, positive_int, seed_int
from .train_resume import load_for_command


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``sample`` command's options."""
    p.add_argument(
        "--checkpoint", type=path_text, metavar="DIR", required=True, help="a training run's --out"
    )
    p.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="who runs the model (default: the backend that trained it)",
    )
    p.add_argument(
        "--prompt",
        default="\n",
        help=r"text to continue (default: a newline; '\n' in the text means a newline)",
    )
    p.add_argument(
        "--max-new-tokens",
        type=int_range(0, MAX_NEW_TOKENS),
        default=500,
        help="tokens to generate (characters for a char model)",
    )
    p.add_argument(
        "--temperature",
        type=number(0, what=" (0 = greedy)"),
        default=0.8,
        help="0 = greedy (the lowest id among tied logits); a tiny one is greedy too",
    )
    p.add_argument("--top-k", type=positive_int, default=None, help="keep the k most likely tokens")
    p.add_argument(
        "--top-p",
        type=number(0, 1, low_open=True, high_open=False),
        default=None,
        help="nucleus sampling threshold",
    )
    p.add_argument("--seed", type=seed_int, default=1337, help="sampling seed")
    p.add_argument(
        "--attn-impl",
        choices=ATTN_IMPLS,
        default=None,
        help="attention: the backend's fast path (default; 'sdpa' and 'flash' both name it) or "
        "'explicit' (decoding with the KV cache runs the explicit formula in NumPy either way)",
    )
    p.add_argument(
        "--from-previous",
        action="store_true",
        help="if the checkpoint is damaged, sample from the older one in DIR/.previous",
    )
    p.add_argument(
        "--kv-cache",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="decode with the KV cache (chapter 12): one token per forward after the prompt "
        "(default: on; --no-kv-cache runs the whole window at every token)",
    )


def main(args: argparse.Namespace) -> int:
    """Load, encode the prompt, generate, print prompt + continuation.

    Raises:
        UserError: an unusable checkpoint, a prompt outside the vocabulary.
    """
    model_state, config, _ = load_for_command(
        args.checkpoint, args.from_previous, "--from-previous", say=_to_stderr
    )
    if config.get("loaded_from"):  # read the tokenizer of the set that was loaded
        args.checkpoint = config["loaded_from"]
    try:
        # char: shared; BPE: the backend's own implementation reads tokenizer.json
        backend_name = args.backend or config.get("backend", "numpy")
        if backend_name not in BACKENDS:
            raise ValueError(f"{args.checkpoint}: unknown backend {backend_name!r} in config.json")
        tokenizer = load_tokenizer(config, args.checkpoint, backend_name)
    except (OSError, ValueError) as e:  # named by its checkpoint ("chars: ..." is not)
        raise UserError(naming(args.checkpoint, args.checkpoint, e)) from e
    prompt = args.prompt.replace("\\n", "\n")
    if not prompt:
        raise UserError("--prompt is empty: give at least one character")
    try:
        prompt_ids = tokenizer.encode(prompt)
    except ValueError as e:
        raise UserError(f"--prompt {e.args[0].removeprefix('text: ')}") from e

    try:
        backend = make_backend(backend_name, config["model"], seed=0, attn_impl=args.attn_impl)
    except (TypeError, ValueError) as e:  # a config.json edited by hand, say
        raise UserError(f"{args.checkpoint}: bad model config: {e}") from e
    if bad := first_nonfinite(model_state):  # its logits would be NaN at the first token
        raise UserError(
            f"{args.checkpoint}: {bad[0]} holds {bad[1]} NaN or infinite value(s): a model "
            "with such weights computes NaN logits and cannot sample"
        )
    model = config["model"]
    kv_bytes = 8 * model["n_layers"] * model["block_size"] * model["d_model"]  # K and V, float32
    if args.kv_cache and kv_bytes > (physical_memory() or kv_bytes):
        raise UserError(
            f"{args.checkpoint}: its KV cache needs {kv_bytes / 2**30:,.1f} GiB (block_size "
            f"{model['block_size']:,}), more than this machine's memory; try --no-kv-cache"
        )
    backend.load_state_dict(model_state)  # names and shapes were checked on loading
    print(prompt, end="", flush=True)
    stream = _Stream(tokenizer)
    try:
        backend.generate(
            prompt_ids,
            args.max_new_tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            seed=args.seed,
            use_cache=args.kv_cache,
            on_token=stream.add,
        )
    except ValueError as e:  # finite weights whose logits still overflow
        if not str(e).startswith("logits:"):
            raise
        raise UserError(f"{args.checkpoint}: {e}") from e
    finally:  # Ctrl-C too: what was generated is on the screen
        stream.flush()
        print()
    return 0


MAX_NEW_TOKENS = 100_000


class _Stream:
    """Print tokens as they come (a token ending inside a UTF-8 character waits for the rest)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.pending = tokenizer, []

    def add(self, token: int) -> None:
        self.pending.append(token)
        if not self.tokenizer.decode(self.pending).endswith("\ufffd"):
            self.flush()

    def flush(self) -> None:
        sys.stdout.write(self.tokenizer.decode(self.pending))
        sys.stdout.flush()
        self.pending = []


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr)  # stdout holds the sample alone
