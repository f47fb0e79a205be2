"""Token embedding, a learned lookup table; twin of ``numpy_impl/embedding.py``.

Ids are range-checked first: indexing would read a negative id from the table's end.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def check_token_ids(
    idx: torch.Tensor, num_embeddings: int, name: str = "idx", bound: str = "num_embeddings"
) -> torch.Tensor:
    """``idx`` (any integer dtype) as ``torch.long``, same shape. ``TypeError`` for a
    non-integer tensor; ``ValueError`` for an id outside ``[0, num_embeddings)``.
    ``name`` and ``bound`` name the argument and the bound in the messages."""
    if not isinstance(idx, torch.Tensor):
        raise TypeError(f"{name}: expected an integer torch.Tensor, got {type(idx).__name__}")
    if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
        raise TypeError(f"{name}: token ids must be an integer tensor, got dtype {idx.dtype}")
    ids = idx.long()  # int64 supports min/max for every source dtype (uint32 does not)
    if ids.numel() > 0:
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if idx.dtype == torch.uint64 and lo < 0:  # .long() wrapped an id >= 2**63 round
            raise ValueError(
                f"{name}: token ids must lie in [0, {bound}={num_embeddings}), "
                "got a uint64 id >= 2**63"
            )
        if lo < 0 or hi >= num_embeddings:
            raise ValueError(
                f"{name}: token ids must lie in [0, {bound}={num_embeddings}), "
                f"got min={lo}, max={hi}"
            )
    return ids


class Embedding(nn.Module):
    """``out = weight[idx]``; weight ``(num_embeddings, embedding_dim)``, init N(0, 1)
    (GPT re-draws it with std 0.02, Radford et al. 2019).

    Shapes: idx ``(...)`` integer -> ``(..., embedding_dim)``. Raises as :func:`check_token_ids`.
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, *, dtype: torch.dtype | None = None
    ):
        super().__init__()
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(
                f"num_embeddings and embedding_dim must be positive, "
                f"got num_embeddings={num_embeddings}, embedding_dim={embedding_dim}"
            )
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        ids = check_token_ids(idx, self.num_embeddings)
        return F.embedding(ids, self.weight)  # (...) -> (..., embedding_dim)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"
