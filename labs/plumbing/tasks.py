"""The model adapter of the two non-GPT tasks, :class:`TaskModel`: one model, its loss and
its AdamW for either backend, NumPy arrays in and out. Their data: ``tasks_speakers.py``
(who says this speech?) and ``tasks_sequence.py`` (reverse or sort digits).
"""

from __future__ import annotations

import math

import numpy as np

from .backends import NonFiniteError, _first_nonfinite, _global_norm

IGNORE_INDEX = -100  # targets that count for nothing (padding), as in CrossEntropyLoss


# -- one model, its loss and its optimizer, either backend ---------------------------------------
class TaskModel:
    """A ``backend`` model of ``kind`` ``"classifier"`` (:class:`TransformerClassifier`) or
    ``"seq2seq"`` (:class:`Seq2SeqTransformer`), built from ``model_kwargs``, with
    ``labs train``'s recipe: cross-entropy, AdamW (no decay on 1-D parameters), warmup +
    cosine, clipping. ``attn_impl``: torch only. ValueError: unknown backend or kind, bad
    model arguments."""

    def __init__(
        self,
        backend: str,
        kind: str,
        model_kwargs: dict,
        seed: int = 0,
        lr: float = 1e-3,
        min_lr: float = 1e-4,
        warmup_iters: int = 100,
        lr_decay_iters: int = 1000,
        weight_decay: float = 0.01,
        grad_clip: float = 1.0,
        dtype: str = "float32",
        attn_impl: str = "sdpa",
    ):
        if kind not in ("classifier", "seq2seq"):
            raise ValueError(f"kind: expected 'classifier' or 'seq2seq', got {kind!r}")
        if dtype not in ("float32", "float64"):
            raise ValueError(f"dtype: expected 'float32' or 'float64', got {dtype!r}")
        self.backend, self.kind = backend, kind
        self.schedule = (lr, min_lr, warmup_iters, max(lr_decay_iters, warmup_iters + 1))
        self.grad_clip = grad_clip
        self.step = 0
        betas = (0.9, 0.99)
        if backend == "numpy":
            import numpy_impl as N
            from numpy_impl.optim import AdamW, configure_param_groups

            cls = N.TransformerClassifier if kind == "classifier" else N.Seq2SeqTransformer
            self.model = cls(**model_kwargs, seed=seed, dtype=np.dtype(dtype))
            self.loss_fn = N.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
            self.optimizer = AdamW(
                configure_param_groups(self.model, weight_decay), lr=lr, betas=betas
            )
            self._params = self.model.parameters()
        elif backend == "torch":
            import torch

            import torch_impl as T
            from torch_impl.optim import AdamW, configure_param_groups

            self.torch = torch
            torch.manual_seed(seed)
            cls = T.TransformerClassifier if kind == "classifier" else T.Seq2SeqTransformer
            self.model = cls(**model_kwargs, attn_impl=attn_impl, dtype=getattr(torch, dtype))
            self.loss_fn = T.CrossEntropyLoss(ignore_index=IGNORE_INDEX)
            self.optimizer = AdamW(
                configure_param_groups(self.model, weight_decay), lr=lr, betas=betas, foreach=False
            )
        else:
            raise ValueError(f"backend: expected 'numpy' or 'torch', got {backend!r}")

    def num_parameters(self) -> int:
        if self.backend == "numpy":
            return self.model.num_parameters()
        return sum(p.numel() for p in self.model.parameters())

    def train_step(self, inputs: dict[str, np.ndarray], targets: np.ndarray) -> float:
        """One AdamW step on ``loss(model(**inputs), targets)``; returns the loss before it
        (NonFiniteError: a NaN or infinite loss or gradient norm; nothing updated)."""
        if self.backend == "numpy":
            from numpy_impl.optim import clip_grad_norm_, cosine_lr
        else:
            from torch_impl.optim import clip_grad_norm_, cosine_lr
        for group in self.optimizer.param_groups:  # nanoGPT's schedule, set before each step
            group["lr"] = cosine_lr(self.step, *self.schedule)
        self.model.train()
        if self.backend == "numpy":
            self.optimizer.zero_grad()
            loss = self.loss_fn(self.model(**inputs), targets)
            self.model.backward(self.loss_fn.backward())
            if self.grad_clip > 0:
                with np.errstate(invalid="ignore"):  # inf * 0 when the norm is inf: checked
                    grad_norm = clip_grad_norm_(self._params, self.grad_clip)
            else:
                grad_norm = _global_norm(p.grad for p in self._params)
            named = ((n, p.grad) for n, p in self.model.named_parameters())
            self._check_finite(float(loss), float(grad_norm), named)
        else:
            torch = self.torch
            self.optimizer.zero_grad(set_to_none=True)
            t_inputs = {k: torch.from_numpy(v) for k, v in inputs.items()}
            loss_t = self.loss_fn(self.model(**t_inputs), torch.from_numpy(targets))
            loss_t.backward()
            params = [p for p in self.model.parameters() if p.grad is not None]
            # the norm before clipping, which a NaN would spread
            grad_norm = _global_norm(p.grad.detach().double().numpy() for p in params)
            loss = loss_t.item()
            named = (
                (n, None if p.grad is None else p.grad.detach().numpy())
                for n, p in self.model.named_parameters()
            )
            self._check_finite(loss, grad_norm, named)
            if self.grad_clip > 0:
                clip_grad_norm_(params, self.grad_clip)
        self.optimizer.step()
        self.step += 1
        return float(loss)

    def first_nonfinite_parameter(self) -> str | None:
        """The name of the first parameter holding a NaN or an infinity (None if none)."""
        if self.backend == "numpy":
            named = ((n, p.data) for n, p in self.model.named_parameters())
        else:
            named = ((n, p.detach().numpy()) for n, p in self.model.named_parameters())
        return _first_nonfinite(named)

    def _check_finite(self, loss: float, grad_norm: float, named_grads) -> None:
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            raise NonFiniteError(self.step, loss, grad_norm, _first_nonfinite(named_grads))

    def predict(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """Logits in eval mode, as a NumPy array, keeping no backward caches."""
        self.model.eval()
        try:
            if self.backend == "numpy":
                from numpy_impl.module import no_grad

                with no_grad():
                    return self.model(**inputs)
            torch = self.torch
            with torch.inference_mode():
                return self.model(**{k: torch.from_numpy(v) for k, v in inputs.items()}).numpy()
        finally:
            self.model.train()

    def generate(self, src, src_mask, max_new_tokens: int, bos_id: int, eos_id: int) -> np.ndarray:
        """Greedy decoding (seq2seq models): ``(B, n)`` int64, BOS excluded."""
        if self.backend == "numpy":
            return self.model.generate(src, max_new_tokens, bos_id, src_mask, eos_id)
        torch = self.torch
        out = self.model.generate(
            torch.from_numpy(src), max_new_tokens, bos_id, torch.from_numpy(src_mask), eos_id
        )
        return out.numpy()
