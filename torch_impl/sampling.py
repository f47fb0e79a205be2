"""Autoregressive sampling: temperature, top-k and nucleus (top-p) filtering.

Twin of ``numpy_impl/sampling.py``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .embedding import check_token_ids
from .linear import check_float


def _is_number(value) -> bool:
    """A real number (np.float32 too), not a bool and not a tensor."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_sampling_args(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not _is_number(temperature) or not 0 <= temperature < math.inf:  # also catches NaN
        raise ValueError(
            f"temperature: must be a finite number >= 0 (0 = greedy), got {temperature}"
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k <= 0
    ):
        raise ValueError(f"top_k: must be a positive int or None, got {top_k!r}")
    if top_p is not None and (not _is_number(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p: must lie in (0, 1] or be None, got {top_p!r}")


def filter_logits(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> torch.Tensor:
    """``logits / temperature``, then ``-inf`` outside the top-k and the nucleus; a new tensor.

    top-k keeps the ``k`` largest (and ties with the k-th). top-p (Holtzman et al. 2020)
    keeps a token iff the probability mass sorted before it is ``< top_p``, computed in
    float64 as in the NumPy twin. Shapes: ``(B, V)`` -> ``(B, V)``.
    ``ValueError`` for a bad shape or option (a tensor is not a number); ``TypeError``
    for non-float logits.
    """
    if logits.dim() != 2 or logits.shape[-1] == 0:
        raise ValueError(f"logits: expected shape (B, V) with V >= 1, got {tuple(logits.shape)}")
    check_float(logits, "logits")
    _check_sampling_args(temperature, top_k, top_p)
    if not temperature > 0:
        raise ValueError(
            f"temperature: must be > 0 in filter_logits (generate() treats 0 as greedy), "
            f"got {temperature}"
        )
    logits = logits / temperature
    V = logits.shape[-1]

    if top_k is not None and top_k < V:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1): the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))

    if top_p is not None and top_p < 1.0:
        # stable, as NumPy's argsort: among tied tokens at the boundary the lower id is kept
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True, stable=True)
        cum = F.softmax(sorted_logits, dim=-1, dtype=torch.float64).cumsum(dim=-1)
        mass_before = F.pad(cum[:, :-1], (1, 0))  # exclusive prefix sum; 0 for the top token
        remove_sorted = mass_before >= top_p
        remove = remove_sorted.scatter(-1, order, remove_sorted)  # back to vocabulary order
        logits = logits.masked_fill(remove, float("-inf"))
    return logits


def _check_uniforms(uniforms, max_new_tokens: int, B: int) -> torch.Tensor:
    u = torch.as_tensor(uniforms, dtype=torch.float64)
    if tuple(u.shape) != (max_new_tokens, B):
        raise ValueError(
            f"uniforms: expected shape (max_new_tokens={max_new_tokens}, B={B}), "
            f"got {tuple(u.shape)}"
        )
    if u.numel() and not bool(((u >= 0.0) & (u < 1.0)).all()):
        raise ValueError("uniforms: every number must lie in [0, 1)")
    return u


def _shifted(logits: torch.Tensor, step: int) -> torch.Tensor:
    """``logits`` minus each row's largest; ``ValueError`` for NaN, +inf or an all -inf row."""
    top = logits.max(dim=-1, keepdim=True).values  # (B, 1); NaN if the row holds one
    if not bool(torch.isfinite(top).all()):
        raise ValueError(
            f"logits: the model's logits at generation step {step} hold NaN or infinity "
            f"(row maxima {top.flatten().tolist()}): are its weights finite?"
        )
    return logits - top


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The first index whose running sum exceeds u: probs ``(B, V)``, u ``(B,)`` -> ``(B, 1)`` long.

    The NumPy twin's draw: the same uniform numbers pick the same tokens.
    """
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # (B, V); float64, as NumPy's, to agree
    u = u.double()[:, None] * cdf[:, -1:]  # the total may round to 1 - 1e-16
    return (cdf <= u).sum(dim=-1, keepdim=True).clamp_max(probs.shape[-1] - 1)


def _cached_next_logits(model: nn.Module, idx: torch.Tensor, cache) -> torch.Tensor:
    """Logits ``(B, V)`` of the token after ``idx`` ``(B, T)``, with ``cache`` (chapter 12)."""
    T = idx.shape[1]
    block_size = model.config.block_size
    if T <= block_size and cache.length == T - 1:
        logits = model(idx[:, -1:], kv_cache=cache, start_pos=T - 1)  # (B, 1, V)
    else:  # first step, or the window slid: every position changed, recompute the window
        logits = model(idx[:, -block_size:], kv_cache=cache, start_pos=0)
    return logits[:, -1, :]


@torch.no_grad()
def generate(
    model: nn.Module,
    idx: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = False,
    uniforms: torch.Tensor | None = None,
    *,
    generator: torch.Generator | None = None,
    on_token: Callable[[torch.Tensor], object] | None = None,
) -> torch.Tensor:
    """Extend each prompt ``idx (B, T0)`` by ``max_new_tokens``: ``(B, T0 + max_new_tokens)``.

    The NumPy twin's loop: the last ``block_size`` tokens in, the argmax out when
    ``temperature == 0``, else a draw from ``softmax(filter_logits(...))``. ``uniforms``
    ``(max_new_tokens, B)`` in ``[0, 1)`` replace ``torch.multinomial`` by
    :func:`sample_inverse_cdf`, so both twins pick the same tokens; ``use_cache`` gives the
    same tokens with a KV cache. Eval mode during, the previous mode restored after.
    ``TypeError`` for non-integer ids; ``ValueError`` for a bad shape or option, or
    logits holding NaN or +inf.
    """
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"idx: expected an integer torch.Tensor, got {type(idx).__name__}")
    if idx.dim() != 2:
        raise ValueError(f"idx: expected shape (B, T0), got {tuple(idx.shape)}")
    if idx.shape[1] < 1:
        raise ValueError(f"idx: the prompt must hold at least one token, got T0={idx.shape[1]}")
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, numbers.Integral)  # np.int64 too, as in NumPy's twin
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens: must be an int >= 0, got {max_new_tokens!r}")
    _check_sampling_args(temperature, top_k, top_p)
    idx = check_token_ids(idx, model.config.vocab_size, bound="vocab_size")
    if uniforms is not None:
        uniforms = _check_uniforms(uniforms, max_new_tokens, idx.shape[0])
    block_size = model.config.block_size
    cache = model.new_kv_cache() if use_cache else None

    was_training = model.training
    model.eval()
    try:
        for step in range(max_new_tokens):
            if cache is not None:
                logits = _cached_next_logits(model, idx, cache)  # (B, V)
            else:
                logits = model(idx[:, -block_size:])[:, -1, :]  # (B, T, V) -> (B, V): last one
            logits = _shifted(logits, step)  # (B, V), the largest 0: any temperature is safe
            if temperature == 0:
                next_id = logits.argmax(dim=-1, keepdim=True)  # (B, 1); ties: the lowest id
            else:
                # a temperature below the dtype's smallest normal number would divide to inf
                temperature = max(temperature, torch.finfo(logits.dtype).tiny)
                logits = filter_logits(logits, temperature, top_k, top_p)
                probs = F.softmax(logits, dim=-1, dtype=torch.float64)  # as in NumPy's twin
                if uniforms is not None:
                    next_id = sample_inverse_cdf(probs, uniforms[step].to(probs.device))
                else:
                    next_id = torch.multinomial(probs, num_samples=1, generator=generator)
            idx = torch.cat([idx, next_id], dim=1)  # (B, T) -> (B, T + 1)
            if on_token is not None:
                on_token(idx[:, -1])
    finally:
        model.train(was_training)
    return idx
