"""Token embedding: a lookup into a learned table, and its scatter-add backward."""

from __future__ import annotations

import numpy as np

from .module import Module, Parameter, check_ids


class Embedding(Module):
    """out[b, t] = weight[idx[b, t]]; weight is ``(num_embeddings, embedding_dim)`` (V, C).

    Shapes: idx ``(...)`` int -> ``(..., embedding_dim)``. Backward adds into dW
    ``(num_embeddings, embedding_dim)`` and returns None (ids have no gradient); it is
    a scatter-add: an id seen n times gets the sum of its n gradients.
    Init N(0, 1) as PyTorch's (the GPT re-initialises with N(0, 0.02)).

    Raises TypeError if ``idx`` is not integer; ValueError for a size below 1 or an id
    outside ``[0, num_embeddings)`` (negative ids are rejected, not wrapped round).
    """

    _caches = ("_idx",)  # what backward reads; dropped under no_grad()

    def __init__(self, num_embeddings, embedding_dim, *, dtype=np.float32, rng=None):
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(
                f"num_embeddings and embedding_dim must be positive, "
                f"got num_embeddings={num_embeddings}, embedding_dim={embedding_dim}"
            )
        rng = np.random.default_rng() if rng is None else rng
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(rng.standard_normal((num_embeddings, embedding_dim)).astype(dtype))
        self._idx = None

    def forward(self, idx: np.ndarray) -> np.ndarray:
        idx = check_ids(idx, self.num_embeddings, "idx")
        ### BEGIN SOLUTION ch02
        ### TODO: keep idx in self._idx for backward; return the rows weight[idx],
        ###   shape (..., embedding_dim)
        self._idx = idx
        return self.weight.data[idx]  # (..., ) -> (..., embedding_dim)
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> None:
        ### BEGIN SOLUTION ch02
        ### TODO: scatter-add dout into the rows of weight.grad that the ids name: an id that occurs
        ###   n times receives the sum of its n gradients (np.add.at; fancy-index += keeps one)
        flat = dout.reshape(-1, self.embedding_dim)  # (N, C)
        np.add.at(self.weight.grad, self._idx.reshape(-1), flat)  # scatter-add over repeats
        self._idx = None
        ### END SOLUTION
