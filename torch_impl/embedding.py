"""Token embedding: a learned lookup table, the twin of ``numpy_impl/embedding.py``.

Row ``i`` of ``weight`` is the vector for token id ``i``; the forward pass is
plain indexing. The only subtle part is validation: PyTorch indexing would
accept a negative id and silently read a row from the end of the table, so the
ids are range-checked explicitly first.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def check_token_ids(
    idx: torch.Tensor, num_embeddings: int, name: str = "idx", bound: str = "num_embeddings"
) -> torch.Tensor:
    """Validate a tensor of token ids and return it as ``torch.long``.

    Args:
        idx: token ids, any shape, any integer dtype.
        num_embeddings: ids must lie in ``[0, num_embeddings)``.
        name: argument name used in error messages.
        bound: name of the upper bound used in error messages (``vocab_size``
            for a language model).

    Returns:
        ``idx`` converted to ``torch.long`` (int64), same shape.

    Raises:
        TypeError: if ``idx`` is not a tensor, or is a floating, complex or
            bool tensor.
        ValueError: if any id is outside ``[0, num_embeddings)`` (an unsigned
            64-bit id of 2**63 or more is rejected, not wrapped round to a negative id).
    """
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
    """Lookup table mapping integer ids to learned vectors: ``out[..., :] = weight[idx]``.

    Args:
        num_embeddings: number of rows (the vocabulary size).
        embedding_dim: length of each vector (``d_model``).
        dtype: parameter dtype (``None``: torch's default).

    Parameters:
        weight: ``(num_embeddings, embedding_dim)``, initialised N(0, 1) as in
            ``torch.nn.Embedding``; :class:`~torch_impl.gpt.GPT` re-draws it
            with standard deviation 0.02 (Radford et al. 2019).

    Shapes:
        idx: ``(...)`` any integer dtype -> ``(..., embedding_dim)``, weight's dtype.
        Typically ``(B, T) -> (B, T, d_model)``.

    Raises:
        TypeError: ids that are not an integer tensor.
        ValueError: ids outside ``[0, num_embeddings)``.
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
