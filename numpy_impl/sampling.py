"""Autoregressive sampling: temperature, top-k, top-p (nucleus), greedy."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import numpy as np

from .module import Module, check_float, check_ids, no_grad


def _is_number(value) -> bool:
    """A real number (np.float32 too), not a bool and not an array (not even 0-d or 1-element)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_sampling_args(temperature, top_k, top_p) -> None:
    if not _is_number(temperature) or not 0 <= temperature < np.inf:  # also catches NaN
        raise ValueError(
            f"temperature: must be a finite number >= 0 (0 = greedy), got {temperature}"
        )
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k <= 0
    ):
        raise ValueError(f"top_k: must be a positive int or None, got {top_k!r}")
    if top_p is not None and (not _is_number(top_p) or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p: must lie in (0, 1] or be None, got {top_p!r}")


def filter_logits(logits: np.ndarray, temperature=1.0, top_k=None, top_p=None) -> np.ndarray:
    """Scale ``(B, V)`` logits by 1/temperature (> 0), then keep the top-k and/or top-p nucleus.

    Removed entries become -inf (probability 0); returns a new ``(B, V)`` array. top-k keeps the
    k largest logits (ties at the k-th stay). top-p (Holtzman et al. 2020) keeps token i, ranked
    by probability, iff the mass strictly before it is < top_p: the most likely always survives.
    That mass is computed in float64 in both twins, so the same logits keep the same tokens.
    Raises TypeError: logits not floating; ValueError: logits not ``(B, V)`` with V >= 1,
    temperature <= 0, top_k <= 0, top_p outside (0, 1] (or not a number, e.g. an array).
    """
    if logits.ndim != 2 or logits.shape[-1] == 0:
        raise ValueError(f"logits: expected shape (B, V) with V >= 1, got {logits.shape}")
    check_float(logits, "logits")
    _check_sampling_args(temperature, top_k, top_p)
    if temperature == 0:
        raise ValueError("temperature: filter_logits needs temperature > 0; 0 means greedy")
    ### BEGIN SOLUTION ch10
    ### TODO: divide by temperature (a new array), then set to -inf what top_k and top_p
    ###   remove (see the docstring: ties at the k-th value stay; top-p keeps token i iff
    ###   the mass of the tokens ranked above it is < top_p; that mass in float64)
    logits = logits / temperature
    V = logits.shape[-1]
    if top_k is not None and top_k < V:
        kth = np.partition(logits, V - top_k, axis=-1)[:, V - top_k, None]  # k-th largest
        logits[logits < kth] = -np.inf
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-logits, axis=-1, kind="stable")  # descending
        sorted_logits = np.take_along_axis(logits, order, axis=-1)
        sorted_probs = softmax(sorted_logits.astype(np.float64))  # (B, V), descending, float64
        cum = np.cumsum(sorted_probs, axis=-1)
        mass_before = np.zeros_like(cum)  # probability of the tokens ranked above
        mass_before[:, 1:] = cum[:, :-1]
        remove_sorted = mass_before >= top_p
        remove = np.zeros_like(remove_sorted)
        np.put_along_axis(remove, order, remove_sorted, axis=-1)
        logits[remove] = -np.inf
    return logits
    ### END SOLUTION


def softmax(logits: np.ndarray) -> np.ndarray:
    """Stable softmax over the last axis."""
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


class _UniformStream:
    """Stands in for ``rng`` when the caller supplies the uniform numbers: the
    ``step``-th call of ``random((B, 1))`` returns row ``step`` of ``uniforms``."""

    def __init__(self, uniforms: np.ndarray):
        self.uniforms, self.step = uniforms, 0

    def random(self, shape) -> np.ndarray:
        u = self.uniforms[self.step].reshape(shape)
        self.step += 1
        return u


def _shifted(logits: np.ndarray, step: int) -> np.ndarray:
    """``logits`` minus each row's max: the same softmax, and dividing by a tiny temperature
    gives -inf or 0, never +inf or NaN. Raises ValueError: a row with NaN or +inf, or all -inf.
    """
    top = logits.max(axis=-1, keepdims=True)  # (B, 1); NaN if the row holds one
    if not np.isfinite(top).all():
        raise ValueError(
            f"logits: the model's logits at generation step {step} hold NaN or infinity "
            f"(row maxima {top.ravel().tolist()}): are its weights finite?"
        )
    return logits - top


def _check_uniforms(uniforms, max_new_tokens: int, B: int) -> np.ndarray:
    u = np.asarray(uniforms, dtype=np.float64)
    if u.shape != (max_new_tokens, B):
        raise ValueError(
            f"uniforms: expected shape (max_new_tokens={max_new_tokens}, B={B}), got {u.shape}"
        )
    if u.size and not (np.all(u >= 0.0) and np.all(u < 1.0)):
        raise ValueError("uniforms: every number must lie in [0, 1)")
    return u


def _cached_next_logits(model: Module, idx: np.ndarray, cache) -> np.ndarray:
    """Logits ``(B, V)`` of the token after ``idx`` ``(B, T)``, with a KV ``cache`` (chapter 12).

    While the sequence fits in ``block_size``, one forward of the newest token at
    ``start_pos = T - 1`` appends it. Otherwise (the first step, or a sliding window whose
    tokens all moved position) one forward of the whole window refills the cache.
    """
    T = idx.shape[1]
    block_size = model.config.block_size
    ### BEGIN SOLUTION ch12
    ### TODO: if T <= block_size and the cache holds the first T - 1 positions
    ###   (cache.length == T - 1), run the model on the newest token only, at
    ###   start_pos=T - 1; otherwise refill: the last block_size tokens at start_pos=0.
    ###   Return the logits of the last position, (B, V)
    if T <= block_size and cache.length == T - 1:
        logits = model.forward(idx[:, -1:], kv_cache=cache, start_pos=T - 1)  # (B, 1, V)
    else:  # first step, or the window slid: every position changed, recompute the window
        logits = model.forward(idx[:, -block_size:], kv_cache=cache, start_pos=0)
    return logits[:, -1, :]
    ### END SOLUTION


@no_grad()  # as the twin's @torch.no_grad(): each layer keeps no backward cache
def generate(
    model: Module,
    idx: np.ndarray,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = False,
    uniforms: np.ndarray | None = None,
    *,
    rng: np.random.Generator | None = None,
    on_token: Callable[[np.ndarray], object] | None = None,
) -> np.ndarray:
    """Extend ``idx`` ``(B, T0)`` by ``max_new_tokens`` -> ``(B, T0 + max_new_tokens)`` int64.

    Each step sees the last ``block_size`` tokens. Temperature 0 is greedy (argmax; ties: the
    lowest id). Otherwise inverse-CDF sampling: with one ``u = rng.random()`` per row, the first
    token whose cumulative probability exceeds u, computed in float64 as in the PyTorch twin, so
    both draw the same token from the same u. Logits are shifted to a row max of 0 first, and a
    temperature below the dtype's smallest normal (1.2e-38 in float32) is taken as that number.
    ``use_cache``: decode with a KV cache, one token per forward; the same tokens.
    ``uniforms`` ``(max_new_tokens, B)`` in ``[0, 1)``: used instead of ``rng``, row s at step s.
    ``rng``: a fresh unseeded Generator if None. ``on_token``: called with each step's ids ``(B,)``.
    Raises TypeError: a non-integer prompt; ValueError: empty prompt, an id outside
    ``[0, vocab_size)``, max_new_tokens < 0, temperature < 0 or not finite, top_k <= 0, top_p
    outside (0, 1], ``uniforms`` of the wrong shape or range, logits holding NaN or +inf.
    """
    _check_sampling_args(temperature, top_k, top_p)
    if (
        isinstance(max_new_tokens, bool)
        or not isinstance(max_new_tokens, (int, np.integer))
        or max_new_tokens < 0
    ):
        raise ValueError(f"max_new_tokens: must be an int >= 0, got {max_new_tokens!r}")
    idx = np.asarray(idx)
    if idx.ndim != 2 or idx.shape[1] == 0:
        raise ValueError(f"idx: expected a non-empty prompt of shape (B, T0), got {idx.shape}")
    # every prompt id, not only the window the model sees; int64: new ids never wrap round
    idx = check_ids(idx, model.config.vocab_size, "idx")
    if uniforms is not None:
        rng = _UniformStream(_check_uniforms(uniforms, max_new_tokens, idx.shape[0]))
    rng = np.random.default_rng() if rng is None else rng
    cache = model.new_kv_cache() if use_cache else None
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    try:
        for step in range(max_new_tokens):
            if cache is not None:
                logits = _cached_next_logits(model, idx, cache)  # (B, V)
            else:
                logits = model.forward(idx[:, -block_size:])[:, -1, :]  # (B, V), last position
            logits = _shifted(logits, step)  # (B, V), the largest 0: any temperature is safe
            if temperature == 0:
                nxt = logits.argmax(axis=-1)  # ties: the lowest id (the first maximum)
            else:
                # a temperature that rounds to 0 in the logits' dtype: the smallest that does not
                temperature = max(temperature, float(np.finfo(logits.dtype).tiny))
                ### BEGIN SOLUTION ch10
                ### TODO: draw nxt (B,), one token per row, from
                ###   softmax(filter_logits(logits, ...)), computed in float64: inverse-CDF
                ###   sampling with one u = rng.random() per row
                filtered = filter_logits(logits, temperature, top_k, top_p)
                probs = softmax(filtered.astype(np.float64))  # (B, V), float64: the docstring
                cdf = np.cumsum(probs, axis=-1)
                u = rng.random((idx.shape[0], 1)) * cdf[:, -1:]
                nxt = np.minimum((cdf <= u).sum(axis=-1), probs.shape[-1] - 1)
                ### END SOLUTION
            idx = np.concatenate([idx, nxt[:, None].astype(np.int64)], axis=1)
            if on_token is not None:
                on_token(idx[:, -1])
    finally:
        model.train(was_training)
    return idx
