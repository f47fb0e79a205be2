"""One adapter per backend, so the training loop does not care which model it drives.

Read :class:`NumpyBackend` (``backends_numpy.py``) and :class:`TorchBackend`
(``backends_torch.py``) side by side: each method does the same job, once by
hand and once with PyTorch's machinery. The NumPy training step spells out what
``loss.backward()`` hides::

    NumPy                                  PyTorch
    group["lr"] = cosine_lr(step, ...)     group["lr"] = cosine_lr(step, ...)
    model.zero_grad()                      optimizer.zero_grad()
    for each of the N micro-batches:       for each of the N micro-batches:
      logits = model.forward(x)              logits = model(x)
      loss = loss_fn.forward(logits, y)      loss = loss_fn(logits, y)
      model.backward(loss_fn.backward()/N)   (loss / N).backward()
    clip_grad_norm_(params, clip)          clip_grad_norm_(params, clip)
    optimizer.step()                       optimizer.step()

Everything crossing this boundary is NumPy (int64 batches in; state dicts and AdamW
moments out, by the shared names): checkpoints are interchangeable. This module holds
what the adapters share and :func:`make_backend`.
"""

from __future__ import annotations

import math

import numpy as np

from .checkpoint_format import CheckpointError

BACKENDS = ("numpy", "torch")

#: nanoGPT's "baby GPT" on Shakespeare (config/train_shakespeare_char.py), CPU edition.
DEFAULT_TRAIN_CONFIG = {
    "lr": 1e-3,
    "min_lr": 1e-4,
    "warmup_iters": 100,
    "lr_decay_iters": 2000,
    "weight_decay": 0.1,
    "beta1": 0.9,
    "beta2": 0.99,
    "grad_clip": 1.0,
}
ADAM_EPS = 1e-8
#: ``--amp``: the torch backend's mixed precision (None: compute in the parameters' dtype).
AMP_DTYPES = {None: None, "bf16": "bfloat16", "fp16": "float16"}


def _train_config(train_config: dict | None) -> dict:
    unknown = sorted(set(train_config or {}) - set(DEFAULT_TRAIN_CONFIG))
    if unknown:
        raise ValueError(f"train_config: unknown keys {unknown}")
    return {**DEFAULT_TRAIN_CONFIG, **(train_config or {})}


def _check_dtype(dtype: str) -> str:
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
    return dtype


def _micro_batches(x, y, grad_accum: int) -> tuple[list, list]:
    """``x`` and ``y`` cut into ``grad_accum`` equal micro-batches (ValueError: it does not
    divide the batch)."""
    B = x.shape[0]
    if isinstance(grad_accum, bool) or not isinstance(grad_accum, int) or grad_accum < 1:
        raise ValueError(f"grad_accum: expected a positive integer, got {grad_accum!r}")
    if B % grad_accum:
        raise ValueError(f"grad_accum: {grad_accum} does not divide the batch size {B}")
    n = B // grad_accum
    return (
        [x[j * n : (j + 1) * n] for j in range(grad_accum)],
        [y[j * n : (j + 1) * n] for j in range(grad_accum)],
    )


def _global_norm(grads) -> float:
    """sqrt(sum of squares of every gradient): what clipping would report."""
    return math.sqrt(sum(float(np.vdot(g, g)) for g in grads))


class NonFiniteError(FloatingPointError):
    """The loss or the gradient norm of a training step is NaN or infinite: raised after
    the backward pass, before the update (the weights are the last good step's).

    Attributes:
        step: the step that failed (0-based); loss, grad_norm: the two numbers;
        parameter: the first parameter whose gradient is not finite (None: none is).
    """

    def __init__(self, step: int, loss: float, grad_norm: float, parameter: str | None):
        self.step, self.loss, self.grad_norm, self.parameter = step, loss, grad_norm, parameter
        where = (
            f"the first parameter whose gradient is non-finite is {parameter}"
            if parameter is not None
            else "every gradient is finite"
        )
        super().__init__(
            f"step {step}: the loss is {loss} and the gradient norm {grad_norm}; {where}"
        )


def _first_nonfinite(named_grads) -> str | None:
    """Name of the first ``(name, gradient)`` holding a NaN or an infinity."""
    for name, g in named_grads:
        if g is not None and not np.isfinite(g).all():
            return name
    return None


def _check_state_dict(
    sd: dict[str, np.ndarray], own: dict[str, tuple[int, ...]], tied: bool
) -> dict[str, np.ndarray]:
    """``sd`` with the tied head filled in, checked to name exactly the model's parameters
    with their shapes (CheckpointError: every difference listed)."""
    sd = _with_tied_head(sd, tied)
    missing = sorted(set(own) - set(sd))
    unexpected = sorted(set(sd) - set(own))
    problems = []
    if missing:
        problems.append(f"missing keys {missing}")
    if unexpected:
        problems.append(f"unexpected keys {unexpected}")
    problems += [
        f"{k}: expected shape {own[k]}, got {tuple(np.shape(v))}"
        for k, v in sd.items()
        if k in own and tuple(np.shape(v)) != own[k]
    ]
    if problems:
        raise CheckpointError("state_dict does not match the model: " + "; ".join(problems))
    return sd


def _with_tied_head(sd: dict[str, np.ndarray], tied: bool) -> dict[str, np.ndarray]:
    """Add ``head.weight`` (``tok_emb.weight``) when tied and absent."""
    if tied and "head.weight" not in sd and "tok_emb.weight" in sd:
        return {**sd, "head.weight": sd["tok_emb.weight"]}
    return sd


class Adapter:
    """What the two adapters share: the learning rate of each step (``_cosine_lr``: the
    backend's ``optim.cosine_lr``)."""

    def current_lr(self) -> float:
        """The learning rate the next :meth:`train_step` will use."""
        tc = self.train_config
        return self._cosine_lr(
            self.step, tc["lr"], tc["min_lr"], tc["warmup_iters"], tc["lr_decay_iters"]
        )

    def _set_lr(self) -> float:
        """Set :meth:`current_lr` into every parameter group (nanoGPT's way); return it."""
        lr = self.current_lr()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr


def make_backend(name: str, model_config: dict, seed: int = 0, **kwargs):
    """``NumpyBackend`` or ``TorchBackend`` by ``name`` (ValueError: another), with
    ``kwargs`` ``train_config``, ``dtype``, ``attn_impl``, ``device``, ``amp``, ``fast``
    (NumPy: the CPU, no ``amp``; torch: no ``fast=False``). ``attn_impl``: ``"explicit"``,
    or the backend's fast path by either name or None (``"sdpa"``, ``"flash"``)."""
    if name == "numpy":
        from .backends_numpy import NumpyBackend

        kwargs["attn_impl"] = _attn_impl(kwargs.get("attn_impl"), fast="flash")
        if kwargs.pop("device", "cpu") != "cpu":
            raise ValueError("device: the numpy backend runs on the CPU only")
        if kwargs.pop("amp", None) is not None:
            raise ValueError(
                "amp: the numpy backend computes in its dtype only; mixed precision "
                "(torch.autocast) is the torch backend's"
            )
        return NumpyBackend(model_config, seed, **kwargs)
    if name == "torch":
        from .backends_torch import TorchBackend

        kwargs["attn_impl"] = _attn_impl(kwargs.get("attn_impl"), fast="sdpa")
        if kwargs.pop("fast", True) is not True:
            raise ValueError(
                "fast: the torch backend runs PyTorch's own kernels; fast=False (the "
                "chapters' formulas instead of numpy_impl/fast.py) is the numpy backend's"
            )
        return TorchBackend(model_config, seed, **kwargs)
    raise ValueError(f"backend: expected one of {BACKENDS}, got {name!r}")


ATTN_IMPLS = ("sdpa", "flash", "explicit")  # what --attn-impl accepts, for either backend


def _attn_impl(value: str | None, fast: str) -> str:
    """``"explicit"``, or ``fast`` (the backend's fast path) for None, "sdpa" or "flash"."""
    if value is not None and value not in ATTN_IMPLS:
        raise ValueError(f"attn_impl: expected one of {ATTN_IMPLS}, got {value!r}")
    return "explicit" if value == "explicit" else fast
