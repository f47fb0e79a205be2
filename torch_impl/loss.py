"""Mean cross-entropy of next-token predictions, twin of ``numpy_impl/loss.py``."""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import nn

from .linear import check_float


def check_ignore_index(ignore_index) -> int:
    """``ignore_index`` as a Python int: an integer (not a bool) that fits in int64, the
    range of PyTorch's targets (-100 by default; any negative one can never be a class id).

    Raises:
        TypeError: not an integer (1.5, "1", None). ValueError: outside int64.
    """
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"ignore_index: expected an int, got {ignore_index!r}")
    if not -(2**63) <= ignore_index < 2**63:
        raise ValueError(f"ignore_index: expected an int in [-2**63, 2**63), got {ignore_index}")
    return int(ignore_index)


#: Unsigned dtypes whose values may not fit in int64, and on which torch has few operations.
_WIDE_UNSIGNED = tuple(
    getattr(torch, n) for n in ("uint16", "uint32", "uint64") if hasattr(torch, n)
)


class CrossEntropyLoss(nn.Module):
    """``loss = mean_n [ -log softmax(logits_n)[targets_n] ]`` over the non-ignored targets.

    The softmax is over the last (vocabulary) axis; equivalently
    ``logsumexp(logits_n) - logits_n[targets_n]`` per position. Positions whose
    target equals ``ignore_index`` contribute nothing, to the sum or to the count.

    Args:
        ignore_index: target value to skip (torch's default, -100).

    Shapes:
        logits: ``(..., V)``, float; typically ``(B, T, vocab_size)``.
        targets: ``logits.shape[:-1]``, any integer dtype; typically ``(B, T)``.
        returns: scalar (0-dim) tensor, logits' dtype.

    If every target is ignored the result is ``0.0`` with zero gradients,
    where ``F.cross_entropy`` would return NaN (0 / 0); the NumPy twin does the
    same, so an all-padding batch cannot poison a run.

    Raises:
        ValueError: ``logits`` with no dimensions, ``targets`` of the wrong
            shape, or a target outside ``[0, V)`` that is not ``ignore_index``;
            ``ignore_index`` outside int64.
        TypeError: ``targets`` that is not an integer tensor; ``ignore_index`` not an int.
    """

    def __init__(self, ignore_index: int = -100):
        super().__init__()
        self.ignore_index = check_ignore_index(ignore_index)

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if logits.dim() < 1:
            raise ValueError(f"logits: expected shape (..., V), got {tuple(logits.shape)}")
        check_float(logits, "logits")
        V = logits.shape[-1]
        if not isinstance(targets, torch.Tensor):
            raise TypeError(
                f"targets: expected an integer torch.Tensor, got {type(targets).__name__}"
            )
        if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
            raise TypeError(f"targets: expected an integer tensor, got dtype {targets.dtype}")
        if targets.shape != logits.shape[:-1]:
            raise ValueError(
                f"targets: expected shape logits.shape[:-1]={tuple(logits.shape[:-1])}, "
                f"got {tuple(targets.shape)}"
            )
        if targets.dtype in _WIDE_UNSIGNED:  # torch compares these poorly: check as ints
            values = targets.flatten().tolist()  # exact, even 2**63 and above
            bad = [v for v in values if v != self.ignore_index and not 0 <= v < V]
            if bad:
                raise ValueError(
                    f"targets: class indices must lie in [0, V={V}) or equal "
                    f"ignore_index={self.ignore_index}, got min={min(bad)}, max={max(bad)}"
                )
        targets = targets.long()
        kept = targets != self.ignore_index
        if kept.any():
            lo, hi = (int(t) for t in torch.aminmax(targets[kept]))
            if lo < 0 or hi >= V:
                raise ValueError(
                    f"targets: class indices must lie in [0, V={V}) or equal "
                    f"ignore_index={self.ignore_index}, got min={lo}, max={hi}"
                )
            return F.cross_entropy(
                logits.reshape(-1, V), targets.reshape(-1), ignore_index=self.ignore_index
            )
        # Nothing to average: a sum over zero terms is 0, and it stays in the graph.
        return F.cross_entropy(
            logits.reshape(-1, V),
            targets.reshape(-1),
            ignore_index=self.ignore_index,
            reduction="sum",
        )

    def extra_repr(self) -> str:
        return f"ignore_index={self.ignore_index}"
