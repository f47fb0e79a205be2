"""``python -m labs train --resume DIR``: continue a run exactly where its checkpoint stopped
(weights, AdamW, step, the sampler's and the dropout generator's states, and the recorded
settings the command line does not give again).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import warnings
from pathlib import Path

from .. import UserError
from ..plumbing.checkpoint import CorruptCheckpointError, load_checkpoint
from ..plumbing.checkpoint_format import CONFIG_FILE, CheckpointError
from ..plumbing.data import BatchSampler
from ..plumbing.run_dir import checkpoint_row
from .train_init import FROM_RUN


@dataclasses.dataclass
class _Resumed:
    """The checkpoint a run continues from."""

    directory: Path
    model_state: dict
    config: dict
    optimizer_state: dict | None

    @property
    def log_row(self) -> dict | None:
        """The log row of the evaluation the checkpoint was saved with."""
        return checkpoint_row(self.config)


#: Recorded settings that a resumed run never takes over.
_NOT_RESTORED = (
    *("resume", "out", "command", "func", "argv", "device", "processes"),  # the machine's
    *("overwrite", "from_previous"),  # what to do this time, not a setting of the run
)


def load_for_command(directory, from_previous: bool, flag: str, say=print):
    """``load_checkpoint(directory)`` for a command: UserError for an unusable checkpoint
    (a damaged one: how to take the older with ``flag``); a warning is ``say``-ed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            loaded = load_checkpoint(directory, previous=from_previous)
        except CorruptCheckpointError as e:
            raise UserError(f"{e}: add {flag} to continue from it") from e
        except (OSError, CheckpointError) as e:
            raise UserError(str(e)) from e
    for w in caught:
        say(f"warning: {w.message}")
    return loaded


def _probe() -> argparse.ArgumentParser:
    from .train import add_arguments  # here, not at the top: train.py imports this module

    probe = argparse.ArgumentParser(add_help=False)
    add_arguments(probe)
    return probe


def _given_options(args: argparse.Namespace) -> set[str]:
    """The options ``args.argv`` sets explicitly (all of them without a command line)."""
    argv = getattr(args, "argv", None)
    if argv is None:
        return set(vars(args))
    probe = _probe()
    # Every default replaced by a marker: what is not the marker came from the command line.
    unset = object()
    probe.set_defaults(**dict.fromkeys(vars(args), unset))
    given, _ = probe.parse_known_args(argv)
    return {k for k, v in vars(given).items() if v is not unset}


def _prepare_resume(args: argparse.Namespace) -> _Resumed:
    """Load the checkpoint to resume and fill ``args`` with the run's recorded settings but
    those the command line gives again (listed). A recorded ``--data`` that is gone falls
    back to the usual search.

    Raises:
        UserError: an unusable checkpoint, options that change the model, a
            ``--max-iters`` not above the checkpoint's step.
    """
    if args.resume:
        directory = Path(args.resume)
    elif args.out or args.backend:
        directory = Path(args.out or f"runs/{args.backend}")
    else:
        raise UserError("--resume: give the run's directory, --resume DIR")
    if args.init_from:  # before anything is read: the two start from different checkpoints
        raise UserError(
            f"--init-from {args.init_from}: --init-from starts a new run from a checkpoint and "
            f"--resume continues one ({directory}): give one of them"
        )
    say = print if os.environ.get("RANK", "0") == "0" else (lambda *a, **k: None)
    try:
        model_state, saved, optimizer_state = load_for_command(
            directory, args.from_previous, "--from-previous", say
        )
    except UserError as e:
        raise UserError(f"cannot resume: {e}") from e
    if not saved.get("train"):
        raise UserError(
            f"cannot resume: {directory} holds no training run (it was imported, or written "
            f"without one); fine-tune it with --init-from {directory} --out NEW"
        )
    given = _given_options(args)
    types = {a.dest: a.type for a in _probe()._actions if a.type is not None}
    changed, redefined = [], []
    for key, value in (saved.get("train") or {}).items():
        if key in _NOT_RESTORED or not hasattr(args, key):
            continue
        if key in given:
            if getattr(args, key) != value:
                change = f"--{key.replace('_', '-')} {value} -> {getattr(args, key)}"
                (redefined if key in FROM_RUN else changed).append(change)
        elif key == "data" and value is not None and not Path(value).is_file():
            continue  # moved: look for the corpus as a fresh run would
        else:  # checked as the command line's would be: config.json may be hostile
            try:
                if value is not None and key in types:
                    value = types[key](str(value))
            except (argparse.ArgumentTypeError, ValueError) as e:
                option = f"--{key.replace('_', '-')}"
                raise UserError(f"cannot resume: {directory / CONFIG_FILE}: {option}: {e}") from e
            setattr(args, key, value)
    if redefined:  # refused now, before a corpus is read or a tokenizer trained
        raise UserError(
            f"cannot resume {directory} with another model or tokenizer "
            f"({', '.join(redefined)}): drop those options to continue it, or start a new "
            f"run with --out NEW (fine-tune its weights with --init-from {directory})"
        )
    step = int(saved.get("step", 0))
    if args.max_iters <= step:  # no step to run: refuse before anything is rewritten
        raise UserError(
            f"--max-iters {args.max_iters}: the checkpoint in {directory} is already at step "
            f"{step}; give --max-iters above {step} to continue it (python -m labs sample "
            "samples from it as it is)"
        )
    if changed and os.environ.get("RANK", "0") == "0":  # under torchrun: said once
        print(f"resuming with changed settings: {', '.join(changed)}")
    return _Resumed(directory, model_state, saved, optimizer_state)


def _resume(resumed: _Resumed, backend, sampler: BatchSampler, config: dict, say=print) -> float:
    """Load the checkpoint into ``backend`` and ``sampler``; return the earlier wall time."""
    directory, saved = resumed.directory, resumed.config
    try:  # a config saved before some GPTConfig fields existed: fill in their defaults
        saved["model"] = dataclasses.asdict(type(backend.config).from_dict(saved["model"]))
    except (TypeError, ValueError) as e:
        raise UserError(f"cannot resume: {directory / CONFIG_FILE}: {e}") from e
    for key in ("tokenizer", "model"):  # the tokenizer first: a new corpus changes both
        if saved[key] != config[key]:
            fields = sorted(set(saved[key]) | set(config[key]))
            diffs = [
                f"{f} {saved[key].get(f)!r} there, {config[key].get(f)!r} here"
                for f in fields
                if saved[key].get(f) != config[key].get(f)
            ]
            raise UserError(
                f"cannot resume: the {key} in {directory / CONFIG_FILE} differs from this "
                f"run's: " + "; ".join(d if len(d) < 200 else d[:200] + "..." for d in diffs)
            )
    try:
        backend.load_state_dict(resumed.model_state)
    except CheckpointError as e:
        raise UserError(f"cannot resume from {directory}: {e}") from e
    step = int(saved.get("step", 0))
    if resumed.optimizer_state is not None:
        backend.load_optimizer_state(resumed.optimizer_state)
        if backend.step != step:
            raise UserError(
                f"cannot resume: {directory}: config.json says step {step}, the optimizer "
                f"state step {backend.step}"
            )
    else:  # a weights-only checkpoint: the schedule goes on at its step, AdamW starts over
        backend.step = step
        say(
            f"note: {directory} holds weights only (no optimizer.safetensors): training "
            f"goes on from step {step} with AdamW's moments starting from zero, so it will "
            "not follow the run that wrote the checkpoint exactly"
        )
    if "sampler_state" in saved:
        sampler.set_state(saved["sampler_state"])
    if saved.get("grad_scaler") and hasattr(backend, "set_scaler_state"):
        backend.set_scaler_state(saved["grad_scaler"])  # --amp fp16: the loss scale reached
    rng_state = saved.get("rng_state")
    if rng_state is not None and rng_state.get("backend") == backend.name:
        backend.set_rng_state(rng_state)
    elif backend.config.dropout > 0:
        say(
            f"note: the dropout generator's state in {directory} is not the {backend.name} "
            "backend's; the dropout masks from here on differ from the original run's"
        )
    say(f"resuming from {directory} at step {backend.step}")
    return float(saved.get("metrics", {}).get("elapsed_s", 0.0))
