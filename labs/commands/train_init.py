"""``python -m labs train --init-from RUN``: fine-tune a checkpoint on another text.

The model and the tokenizer come from RUN (a run, or an import); the text from ``--data``;
the optimizer starts fresh at step 0. Options that would change the model or the tokenizer
are refused, but ``--dropout`` (as nanoGPT's fine-tuning) and ``--block-size`` (at most the
model's context). The run records the model's real settings: ``--resume`` continues it.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint import load_checkpoint
from ..plumbing.checkpoint_format import CheckpointError, first_nonfinite
from ..plumbing.tokenization import load_tokenizer

#: Options that define the model or the tokenizer: with --init-from they come from RUN.
FROM_RUN = (
    "arch",
    "d_ff",
    "n_layers",
    "n_heads",
    "n_kv_heads",
    "d_model",
    "bias",
    "gelu",
    "tokenizer",
    "vocab_size",
)


@dataclasses.dataclass
class _Init:
    """The checkpoint a fine-tuning run starts from."""

    directory: Path
    model_state: dict | None  # None when the run is resumed: its own checkpoint has the weights
    model_config: dict  # every GPTConfig field
    tokenizer: object
    config: dict  # the checkpoint's config.json


def _explicit_options(args: argparse.Namespace) -> set[str]:
    """The options ``args.argv`` gives (without one: those that differ from the defaults)."""
    from .train_resume import _given_options, _probe

    if getattr(args, "argv", None) is not None:
        return _given_options(args)
    defaults = vars(_probe().parse_args([]))
    return {k for k, v in vars(args).items() if k in defaults and v != defaults[k]}


def _prepare_init(args: argparse.Namespace, resumed) -> _Init | None:
    """The checkpoint of this run's model and tokenizer (``--init-from RUN``, or a resumed
    fine-tuning run's), else None. Fills in ``--backend`` (RUN's, else numpy) and the
    model's real settings in ``args``.

    Raises:
        UserError: an unusable RUN, options that would change its model or tokenizer,
            a ``--block-size`` above the model's.
    """
    given = _explicit_options(args)
    if resumed is not None:
        if not (resumed.config.get("train") or {}).get("init_from"):
            return None
        directory, state, config = resumed.directory, None, resumed.config
    elif args.init_from:
        directory = Path(args.init_from)
        try:
            state, config, _ = load_checkpoint(directory)
        except (OSError, CheckpointError) as e:
            raise UserError(f"--init-from: {e}") from e
        if bad := first_nonfinite(state):  # training from it would stop at its first step
            raise UserError(
                f"--init-from {directory}: {bad[0]} holds {bad[1]} NaN or infinite value(s): "
                "a model with such weights computes NaN; start from a checkpoint whose "
                "weights are finite"
            )
    else:
        return None
    conflicts = sorted(f"--{k.replace('_', '-')}" for k in given & set(FROM_RUN))
    if conflicts:
        raise UserError(
            f"{', '.join(conflicts)}: with --init-from the model and the tokenizer are those of "
            f"{directory} (python -m labs inspect {directory} shows them)"
        )
    if args.backend is None:
        args.backend = config.get("backend") or "numpy"
    from numpy_impl.gpt import GPTConfig

    try:
        model_config = dataclasses.asdict(GPTConfig.from_dict(dict(config["model"])))
    except (TypeError, ValueError) as e:
        raise UserError(f"--init-from {directory}: bad model config: {e}") from e
    if "dropout" in given:
        model_config["dropout"] = args.dropout
    if "block_size" not in given:  # the command's default, within the model's context
        args.block_size = min(args.block_size, model_config["block_size"])
    if args.block_size > model_config["block_size"]:
        raise UserError(
            f"--block-size {args.block_size}: the model in {directory} has a context of "
            f"{model_config['block_size']} tokens; train with --block-size at most that"
        )
    try:
        tokenizer = load_tokenizer(config, directory, args.backend)
    except (OSError, ValueError) as e:
        raise UserError(f"--init-from {directory}: {e}") from e
    # config.json's "train" section then says what the model really is
    for key in ("n_layers", "n_heads", "n_kv_heads", "d_model", "d_ff", "bias", "dropout"):
        setattr(args, key, model_config[key])
    args.gelu, args.vocab_size = model_config["gelu_approximate"], model_config["vocab_size"]
    args.tokenizer = "char" if config["tokenizer"].get("type") == "char" else "bpe"
    args.arch = "llama" if model_config["pos_emb"] == "rope" else "gpt2"
    return _Init(directory, state, model_config, tokenizer, config)


def load_init_weights(run, init: _Init, say=print) -> None:
    """Copy RUN's weights into the fresh run's backend (UserError: they do not fit)."""
    try:
        run.backend.load_state_dict(init.model_state)
    except CheckpointError as e:
        raise UserError(f"--init-from {init.directory}: {e}") from e
    init.model_state = None  # the backend holds the weights now: no second copy
    source = init.config.get("imported_from")
    origin = f"imported from {source['kind']}" if source else f"step {init.config.get('step', 0)}"
    say(
        f"initialised from {init.directory} ({origin}): its weights and tokenizer; a fresh "
        "optimizer from step 0"
    )
