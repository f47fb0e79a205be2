"""Autoregressive sampling: temperature, top-k, top-p (nucleus), greedy."""

from __future__ import annotations

import numpy as np

from .module import Module, check_ids


def _check_sampling_args(temperature, top_k, top_p) -> None:
    if not temperature >= 0:  # also catches NaN
        raise ValueError(f"temperature: must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (
        isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k <= 0
    ):
        raise ValueError(f"top_k: must be a positive int or None, got {top_k!r}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p: must lie in (0, 1] or be None, got {top_p!r}")


def filter_logits(logits: np.ndarray, temperature=1.0, top_k=None, top_p=None) -> np.ndarray:
    """Scale by 1/temperature, then keep the top-k and/or the top-p nucleus.

    Removed entries become -inf, so a softmax gives them probability 0.

    * top-k keeps the k largest logits (ties at the k-th value are kept).
    * top-p (Holtzman et al. 2020) sorts descending and keeps the smallest
      prefix whose probability mass reaches ``top_p``, *including* the token
      that crosses the threshold: token i is kept iff the mass strictly before
      it is < top_p. So the most likely token always survives.

    Args:
        logits: ``(B, V)``.
        temperature: > 0 here (greedy decoding never calls this).

    Returns:
        ``(B, V)``, a new array.

    Raises:
        ValueError: temperature <= 0, top_k <= 0, top_p outside (0, 1].
    """
    if logits.ndim != 2:
        raise ValueError(f"logits: expected shape (B, V), got {logits.shape}")
    _check_sampling_args(temperature, top_k, top_p)
    if temperature == 0:
        raise ValueError("temperature: filter_logits needs temperature > 0; 0 means greedy")
    ### BEGIN SOLUTION ch10
    ### TODO: divide by temperature (a new array), then set to -inf what top_k and top_p
    ###   remove (see the docstring: ties at the k-th value stay; top-p keeps token i iff
    ###   the mass of the tokens ranked above it is < top_p)
    logits = logits / temperature
    V = logits.shape[-1]
    if top_k is not None and top_k < V:
        kth = np.partition(logits, V - top_k, axis=-1)[:, V - top_k, None]  # k-th largest
        logits[logits < kth] = -np.inf
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-logits, axis=-1, kind="stable")  # descending
        sorted_logits = np.take_along_axis(logits, order, axis=-1)
        p = np.exp(sorted_logits - sorted_logits[:, :1])
        p /= p.sum(axis=-1, keepdims=True)
        cum = np.cumsum(p, axis=-1)
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


def generate(
    model: Module,
    idx: np.ndarray,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """Extend ``idx`` by ``max_new_tokens`` tokens, one forward pass per token.

    The context is cropped to the last ``block_size`` tokens. Temperature 0
    is greedy (argmax). Otherwise a token is drawn by inverse-CDF sampling
    with one uniform number per row, ``u = rng.random()``: the first token
    whose cumulative probability exceeds u.

    Args:
        model: a GPT (anything with ``config.block_size`` and ``forward``).
        idx: ``(B, T0)`` integer prompt, T0 >= 1.
        rng: ``np.random.Generator``; a fresh unseeded one if None.

    Returns:
        ``(B, T0 + max_new_tokens)`` int64.

    Raises:
        TypeError: the prompt is not integer.
        ValueError: empty prompt, an id outside ``[0, vocab_size)``, max_new_tokens < 0,
            temperature < 0, top_k <= 0, top_p outside (0, 1].
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
    # every id of the prompt, not only the last block_size that the model sees;
    # int64 so that new ids never wrap round in a narrow prompt dtype
    idx = check_ids(idx, model.config.vocab_size, "idx")
    rng = np.random.default_rng() if rng is None else rng
    was_training = model.training
    model.eval()
    block_size = model.config.block_size
    try:
        for _ in range(max_new_tokens):
            logits = model.forward(idx[:, -block_size:])[:, -1, :]  # (B, V), last position
            if temperature == 0:
                nxt = logits.argmax(axis=-1)
            else:
                ### BEGIN SOLUTION ch10
                ### TODO: draw nxt (B,), one token per row, from
                ###   softmax(filter_logits(logits, ...)): inverse-CDF sampling with one
                ###   u = rng.random() per row
                probs = softmax(filter_logits(logits, temperature, top_k, top_p))
                cdf = np.cumsum(probs, axis=-1)
                u = rng.random((idx.shape[0], 1)) * cdf[:, -1:]
                nxt = np.minimum((cdf <= u).sum(axis=-1), probs.shape[-1] - 1)
                ### END SOLUTION
            idx = np.concatenate([idx, nxt[:, None].astype(np.int64)], axis=1)
    finally:
        model.train(was_training)
    return idx
