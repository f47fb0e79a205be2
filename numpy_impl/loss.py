"""Cross-entropy over logits, with the softmax and its backward fused."""

from __future__ import annotations

import numpy as np

from .module import Module


class CrossEntropyLoss(Module):
    """loss = mean over kept positions n of ( logsumexp(logits_n) - logits_n[target_n] ).

    Numerically stable: the row maximum is subtracted before exponentiating.
    Positions whose target equals ``ignore_index`` do not count (neither in
    the sum nor in the mean's denominator); if every position is ignored the
    loss is 0.0 and the gradient zero (``torch`` would return NaN there).

    Fused backward (softmax and cross-entropy together, as in llm.c):
        dlogits_n = (softmax(logits_n) - onehot(target_n)) / N_kept

    Shapes:
        forward: logits ``(..., V)``, targets ``(...)`` integer -> loss (Python float)
        backward: dloss (float, default 1.0) -> dlogits ``(..., V)``

    Raises:
        TypeError: targets are not integers.
        ValueError: targets' shape does not match ``logits.shape[:-1]``, or a
            target lies outside ``[0, V)`` and is not ``ignore_index``.
    """

    def __init__(self, ignore_index: int = -100):
        self.ignore_index = ignore_index
        self._cache = None

    def forward(self, logits: np.ndarray, targets: np.ndarray) -> float:
        targets = np.asarray(targets)
        if targets.shape != logits.shape[:-1]:
            raise ValueError(
                f"targets: expected shape {logits.shape[:-1]} (logits without its last axis), "
                f"got {targets.shape}"
            )
        if targets.dtype == np.bool_ or not np.issubdtype(targets.dtype, np.integer):
            raise TypeError(f"targets: class ids must be integers, got dtype {targets.dtype}")
        V = logits.shape[-1]
        z = logits.reshape(-1, V)  # (N, V)
        t = targets.reshape(-1).astype(np.int64)  # (N,)
        keep = t != self.ignore_index
        if np.any((t[keep] < 0) | (t[keep] >= V)):
            bad = t[keep & ((t < 0) | (t >= V))]
            raise ValueError(
                f"targets: class ids must lie in [0, V={V}) or equal ignore_index="
                f"{self.ignore_index}, got {bad[:5].tolist()}"
            )
        ### BEGIN SOLUTION ch09
        ### TODO: with z (N, V), t (N,) and keep (N,) from above: loss = mean over the kept
        ###   rows n of logsumexp(z_n) - z_n[t_n], stable (subtract the row max first), a Python
        ###   float, 0.0 if no row is kept; cache what backward needs in self._cache
        n_kept = int(keep.sum())
        t_safe = np.where(keep, t, 0)  # any valid column for ignored rows; masked below

        probs = z - z.max(axis=1, keepdims=True)  # shifted logits, max 0 per row
        target_logit = probs[np.arange(len(t)), t_safe]  # z_t - max, before exponentiating
        np.exp(probs, out=probs)
        sum_exp = probs.sum(axis=1)  # (N,)
        nll = np.log(sum_exp) - target_logit  # logsumexp(z) - z_t, per row
        loss = float(nll[keep].sum() / n_kept) if n_kept else 0.0
        probs /= sum_exp[:, None]  # softmax, kept for the fused backward
        self._cache = (probs, t_safe, keep, n_kept, logits.shape)
        return loss
        ### END SOLUTION

    def backward(self, dloss: float = 1.0) -> np.ndarray:
        """dlogits = dloss * (softmax - onehot) / N_kept; reuses the cached probabilities."""
        ### BEGIN SOLUTION ch09
        ### TODO: dlogits = dloss * (softmax - onehot(target)) / N_kept, zero on ignored rows,
        ###   shaped like the logits
        probs, t_safe, keep, n_kept, shape = self._cache
        self._cache = None  # the buffer becomes the gradient
        dlogits = probs
        dlogits[np.arange(len(t_safe)), t_safe] -= 1.0
        dlogits[~keep] = 0.0
        dlogits *= dloss / n_kept if n_kept else 0.0
        return dlogits.reshape(shape)
        ### END SOLUTION
