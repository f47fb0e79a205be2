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
    """A real number (np.float32 too), not a bool and not a tensor (not even 0-d or 1-element)."""
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
    """Scale logits by ``1 / temperature``, then mask out tokens outside the top-k and the nucleus.

    Applied in this order, each on the result of the previous step:

    1. temperature: ``logits / temperature``; below 1 sharpens, above 1 flattens.
    2. top-k: keep the ``k`` largest logits of each row (all tokens tied with
       the k-th largest are kept too); ``k > V`` keeps everything.
    3. top-p (nucleus, Holtzman et al. 2020): sort the row's probabilities in
       decreasing order and keep token ``i`` iff the probability mass of the
       tokens *before* it is ``< top_p``. This keeps the smallest prefix whose
       mass reaches ``top_p``, including the token that crosses the threshold,
       and always the most likely token. ``top_p == 1`` keeps everything
       (no rounding-driven removals). The probabilities and their running sum
       are computed in float64 whatever the logits' dtype, as in the NumPy twin:
       the same logits keep the same tokens.

    Removed tokens get ``-inf``, so a following softmax gives them probability 0.
    The input is not modified.

    Args:
        logits: ``(B, V)``, float.
        temperature: ``> 0`` (greedy decoding is :func:`generate`'s ``temperature=0``).
        top_k: positive int, or ``None`` for no top-k filter.
        top_p: in ``(0, 1]``, or ``None`` for no nucleus filter.

    Returns:
        ``(B, V)``, logits' dtype.

    Raises:
        ValueError: ``logits`` not 2-D or with ``V = 0``, ``temperature <= 0``,
            ``top_k <= 0``, ``top_p`` outside ``(0, 1]`` (or not a number: a tensor
            or array is refused, even of one element).
        TypeError: ``logits`` not floating-point.
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
        # stable: tied tokens in id order, as NumPy's stable argsort (the nucleus boundary
        # falls between tied tokens the same way in both backends: the lower id is kept)
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
    """As the NumPy twin's: ``logits`` minus each row's largest (no logit above 0).

    Raises:
        ValueError: a row holds NaN or +inf, or is all -inf.
    """
    top = logits.max(dim=-1, keepdim=True).values  # (B, 1); NaN if the row holds one
    if not bool(torch.isfinite(top).all()):
        raise ValueError(
            f"logits: the model's logits at generation step {step} hold NaN or infinity "
            f"(row maxima {top.flatten().tolist()}): are its weights finite?"
        )
    return logits - top


def sample_inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse-CDF sampling: the first index whose running sum exceeds u.

    The NumPy twin's draw, so that the same uniform numbers pick the same tokens: the
    running sum is in float64 whatever ``probs``' dtype, in both twins (a float32 sum
    over 50,000 tokens drifts by ~1e-3 and differs between NumPy and PyTorch);
    :func:`generate` passes float64 probabilities.

    Args:
        probs: ``(B, V)``, rows summing to 1 (up to rounding).
        u: ``(B,)`` numbers in ``[0, 1)``.

    Returns:
        ``(B, 1)``, ``torch.long``.
    """
    cdf = probs.cumsum(dim=-1, dtype=torch.float64)  # (B, V), summed in float64 as in NumPy
    u = u.double()[:, None] * cdf[:, -1:]  # the total may round to 1 - 1e-16
    return (cdf <= u).sum(dim=-1, keepdim=True).clamp_max(probs.shape[-1] - 1)


def _cached_next_logits(model: nn.Module, idx: torch.Tensor, cache) -> torch.Tensor:
    """Logits ``(B, V)`` of the token after ``idx`` ``(B, T)``, with ``cache`` (chapter 12).

    While the sequence fits in ``block_size``, the cache holds every token but
    the newest: one forward of that token at ``start_pos = T - 1`` appends it.
    Otherwise (first step, or the window slid and every token moved) the cache
    is refilled from the whole window, as costly as a step without a cache.
    """
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
    """Extend each sequence by ``max_new_tokens`` tokens, one at a time.

    Each step feeds the last ``block_size`` tokens to the model, takes the
    logits at the final position and picks the next token: the argmax when
    ``temperature == 0`` (greedy; ``top_k`` and ``top_p`` cannot change it; among
    tied logits the lowest id, as in NumPy), otherwise a draw from
    ``softmax(filter_logits(...))`` with ``torch.multinomial``. The logits are
    shifted so that each row's largest is 0 before the temperature divides them:
    any positive temperature gives finite probabilities, and one below the
    smallest normal number of the dtype is taken as that number (all the
    probability on the largest logits). The model runs in eval mode (no dropout) and is put
    back in its previous mode afterwards, even on error.

    Args:
        model: a :class:`~torch_impl.gpt.GPT` (anything with ``config.block_size``
            that maps ``(B, T)`` ids to ``(B, T, V)`` logits).
        idx: ``(B, T0)`` prompt ids, any integer dtype, ``T0 >= 1``; may be
            longer than ``block_size`` (only the tail is seen).
        max_new_tokens: number of tokens to append, ``>= 0``.
        temperature: ``>= 0``; 0 means greedy.
        top_k, top_p: see :func:`filter_logits`.
        use_cache: decode with a KV cache (``model.new_kv_cache()``): after the
            prompt, one token per forward instead of the whole window; the same
            tokens as without it.
        uniforms: ``(max_new_tokens, B)`` numbers in ``[0, 1)``: draw step s's
            tokens by inverse-CDF sampling with row s (:func:`sample_inverse_cdf`)
            instead of ``torch.multinomial``. The NumPy twin does the same, so
            both backends sample identical tokens from one stream.
        generator (keyword): a ``torch.Generator`` for reproducible sampling, on the
            model's device.
        on_token (keyword): as in NumPy's twin, called with each step's new ids ``(B,)``.

    Returns:
        ``(B, T0 + max_new_tokens)``, ``torch.long``: the prompt followed by
        the new tokens.

    Raises:
        TypeError: ``idx`` that is not an integer tensor.
        ValueError: ``idx`` not 2-D or with ``T0 == 0``, ``max_new_tokens < 0``,
            ``temperature < 0`` or not finite, ``top_k <= 0``, ``top_p`` outside
            ``(0, 1]``, ``uniforms`` of the wrong shape or outside ``[0, 1)``, ids
            the model rejects, or logits holding NaN or +inf.
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
                # a temperature that would round to 0 in the logits' dtype: the smallest that
                # does not (the distribution is all on the largest logits either way)
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
