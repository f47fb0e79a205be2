"""Cross-entropy over logits, as a log-softmax, with the softmax and its backward taken
together in one step: dlogits = softmax - onehot."""

from __future__ import annotations

import numpy as np

from .module import Module, check_float


def check_ignore_index(ignore_index) -> int:
    """``ignore_index`` as a Python int (PyTorch's default -100 is never a class id).

    Raises TypeError: not an integer (a bool, 1.5, None); ValueError: outside int64.
    """
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, (int, np.integer)):
        raise TypeError(f"ignore_index: expected an int, got {ignore_index!r}")
    if not -(2**63) <= ignore_index < 2**63:
        raise ValueError(f"ignore_index: expected an int in [-2**63, 2**63), got {ignore_index}")
    return int(ignore_index)


class CrossEntropyLoss(Module):
    """loss = mean over kept rows n of (logsumexp(z_n) - z_n[t_n]) = -log softmax(z_n)[t_n].

    A log-softmax (Goodfellow et al. 2016, sec. 6.2.2.3), stable: each row's max is subtracted
    before exp. Rows whose target is ``ignore_index`` do not count; all ignored: loss 0.0 (torch
    gives NaN). Backward, as in llm.c: dlogits_n = (softmax(z_n) - onehot(t_n)) / N_kept.
    Shapes: logits ``(..., V)``, integer targets ``(...)`` -> loss (float); backward dloss ->
    dlogits ``(..., V)``. Cache: the shifted logits ``(N, V)`` and their logsumexp ``(N,)``.
    Raises TypeError: non-integer targets or ``ignore_index``; ValueError: targets' shape is not
    ``logits.shape[:-1]``, a target outside ``[0, V)`` and not ``ignore_index``, an
    ``ignore_index`` outside int64.
    """

    _caches = ("_cache",)  # what backward reads; dropped under no_grad()

    def __init__(self, ignore_index: int = -100):
        self.ignore_index = check_ignore_index(ignore_index)
        self._cache = None

    def forward(self, logits: np.ndarray, targets: np.ndarray) -> float:
        if logits.ndim < 1:
            raise ValueError(f"logits: expected shape (..., V), got {tuple(logits.shape)}")
        check_float(logits, "logits")
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
        t = targets.reshape(-1)  # (N,), checked in its own dtype: a uint64 2**63 stays 2**63
        keep = t != self.ignore_index
        if np.any((t[keep] < 0) | (t[keep] >= V)):
            bad = t[keep & ((t < 0) | (t >= V))]
            raise ValueError(
                f"targets: class ids must lie in [0, V={V}) or equal ignore_index="
                f"{self.ignore_index}, got {bad[:5].tolist()}"
            )
        t = t.astype(np.int64)
        ### BEGIN SOLUTION ch09
        ### TODO: z (N, V), t (N,), keep (N,) from above; per row the negative log-softmax of its
        ###   target, nll = logsumexp(z_n) - z_n[t_n], (N,); loss = its mean over the kept rows
        ###   (a Python float, 0.0 if none). Hint: shift z by its row max before exp (stable);
        ###   cache what backward needs in self._cache
        N = len(t)
        t_safe = np.where(keep, t, 0)  # a valid column for the ignored rows too (masked later)
        shifted = z - z.max(axis=1, keepdims=True)  # (N, V); each row's max is 0: exp <= 1
        logsumexp = np.log(np.exp(shifted).sum(axis=1))  # (N,): logsumexp(z) - max
        nll = logsumexp - shifted[np.arange(N), t_safe]  # (N,): -log softmax(z)[t]
        loss = float(nll[keep].mean()) if keep.any() else 0.0
        self._cache = (shifted, logsumexp, t_safe, keep, logits.shape)
        return loss
        ### END SOLUTION

    def backward(self, dloss: float = 1.0) -> np.ndarray:
        """dlogits = dloss * (softmax - onehot) / N_kept, zero on ignored rows."""
        ### BEGIN SOLUTION ch09
        ### TODO: dlogits (N, V) = dloss * (softmax(z) - onehot(t)) / N_kept on the kept rows,
        ###   0 on the ignored ones, reshaped like the logits. Hint: softmax = exp(shifted -
        ###   logsumexp) from the cached values
        shifted, logsumexp, t_safe, keep, shape = self._cache
        self._cache = None
        N, n_kept = len(t_safe), int(keep.sum())
        softmax = np.exp(shifted - logsumexp[:, None])  # (N, V)
        onehot = np.zeros_like(softmax)  # (N, V)
        onehot[np.arange(N), t_safe] = 1.0
        dlogits = dloss * (softmax - onehot) * keep[:, None] / max(n_kept, 1)  # (N, V)
        return dlogits.reshape(shape)  # (N, V) -> (..., V)
        ### END SOLUTION
