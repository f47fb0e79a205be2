"""The NumPy backend's adapter: ``numpy_impl``, every gradient by hand.

:class:`NumpyBackend`, method for method the twin of :class:`TorchBackend` in
``backends_torch.py``; ``backends.py`` has the interface they share.
"""

from __future__ import annotations

import math

import numpy as np

from .backends import (
    ADAM_EPS,
    Adapter,
    NonFiniteError,
    _check_dtype,
    _check_state_dict,
    _first_nonfinite,
    _global_norm,
    _micro_batches,
    _train_config,
)
from .distributed import with_ranks


class NumpyBackend(Adapter):
    """The from-scratch model: ``numpy_impl`` with hand-written backward passes.

    Args:
        model_config: GPTConfig fields as a dict.
        seed: seed of the initial weights.
        train_config: keys of :data:`DEFAULT_TRAIN_CONFIG` (missing ones: its defaults).
        dtype: ``"float32"`` (training) or ``"float64"``.
        attn_impl: ``"flash"`` (FlashAttention's tiles) or ``"explicit"`` (chapter 03).
        fast: apply ``numpy_impl/fast.py`` (:func:`accelerate`, the flat-buffer AdamW);
            False trains the chapters' formulas (``labs train --no-fast``).

    Raises:
        ValueError: an invalid model config (the field named), unknown train_config keys,
            or an unknown dtype.
    """

    name = "numpy"

    def __init__(
        self,
        model_config: dict,
        seed: int = 0,
        train_config: dict | None = None,
        dtype: str = "float32",
        attn_impl: str = "flash",
        fast: bool = True,
    ):
        from numpy_impl.fast import accelerate
        from numpy_impl.gpt import GPT, GPTConfig
        from numpy_impl.loss import CrossEntropyLoss
        from numpy_impl.optim import AdamW, configure_param_groups, cosine_lr

        self._cosine_lr = cosine_lr
        self.config = GPTConfig.from_dict(dict(model_config))
        self.train_config = tc = _train_config(train_config)
        dtype = np.dtype(_check_dtype(dtype))
        self.model = GPT(self.config, seed=seed, attn_impl=attn_impl, dtype=dtype)
        self.attn_impl = attn_impl
        if not isinstance(fast, bool):
            raise TypeError(f"fast: expected True or False, got {fast!r}")
        self.fast = fast
        if fast:
            accelerate(self.model)
        self.loss_fn = CrossEntropyLoss()
        self.optimizer = AdamW(
            configure_param_groups(self.model, tc["weight_decay"]),
            lr=tc["lr"],
            betas=(tc["beta1"], tc["beta2"]),
            eps=ADAM_EPS,
        )
        self._params = self.model.parameters()  # walked once, not at every step
        self._flat = None  # the parameters in flat buffers, from the first fast training step
        self.step = 0
        self._seed, self._sync = seed, None  # _sync: the ranks' all-reduce, after distribute()

    def distribute(self, bucket_mb: float = 25.0) -> None:
        """As :meth:`TorchBackend.distribute`, with ``distributed.GradientAllReduce`` for DDP;
        rank r > 0 draws its own dropout masks (seeded seed + r)."""
        from .distributed import GradientAllReduce, rank_and_world

        self._sync = GradientAllReduce(self.model, bucket_mb)
        rank = rank_and_world()[0]
        if rank > 0:
            fresh = np.random.default_rng(self._seed + rank).bit_generator.state
            self.model.dropout_rng.bit_generator.state = fresh

    def train_step(self, x: np.ndarray, y: np.ndarray, grad_accum: int = 1) -> dict:
        """One optimizer step on the batch ``x``, ``y`` (both ``(B, T)`` int64), run as
        ``grad_accum`` = N micro-batches of ``B / N`` rows: every backward ADDS into
        ``p.grad``, so the gradient of the batch's mean loss needs only ``1 / N`` on each.

        Returns:
            ``{"loss", "lr", "grad_norm"}``: the loss before the update, the rate used, the
            gradient norm before clipping.

        Raises:
            ValueError: ``grad_accum`` not a positive divisor of B.
            NonFiniteError: a NaN or infinite loss or gradient norm; nothing updated.
        """
        from numpy_impl import fast, flat_buffers
        from numpy_impl.optim import clip_grad_norm_

        micro_x, micro_y = _micro_batches(x, y, grad_accum)
        lr = self._set_lr()
        self.model.train()
        flat = self._flat_parameters() if self.fast else None
        if flat is not None:
            flat.zero_grad()  # every gradient, in one call
        else:
            self.optimizer.zero_grad()  # the optimizer holds every parameter, tied ones once
        losses = []
        for j, (xm, ym) in enumerate(zip(micro_x, micro_y, strict=True)):
            logits = self.model.forward(xm)  # (B/N, T) -> (B/N, T, V)
            losses.append(self.loss_fn.forward(logits, ym))
            dlogits = self.loss_fn.backward()  # of this micro-batch's mean loss
            if self._sync is not None and j == grad_accum - 1:
                self._sync.arm(flat)  # the ranks' gradients summed during this last backward
            self.model.backward(dlogits / grad_accum if grad_accum > 1 else dlogits)
        loss = float(np.mean(losses))
        if self._sync is not None:  # the mean gradient and loss over every rank's rows
            loss = self._sync.finish(loss)
        params = self._params
        if self.train_config["grad_clip"] > 0:
            with np.errstate(invalid="ignore"):  # inf * 0 when the norm is inf: checked below
                if flat is not None:  # one scaling over the gradients' buffer (flat_buffers.py)
                    grad_norm = flat_buffers.clip_grad_norm_(flat, self.train_config["grad_clip"])
                else:
                    grad_norm = clip_grad_norm_(params, self.train_config["grad_clip"])
        else:
            grad_norm = _global_norm(p.grad for p in params)
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            # Stop before the update. Clipping left a NaN gradient as it was and made an
            # infinite one NaN (inf * 0), so the first offender is still non-finite.
            named = ((n, p.grad) for n, p in self.model.named_parameters())
            raise NonFiniteError(self.step, float(loss), float(grad_norm), _first_nonfinite(named))
        if flat is None or not fast.adamw_step(self.optimizer, flat):
            self.optimizer.step()  # one parameter at a time
        self.step += 1
        return {"loss": float(loss), "lr": float(lr), "grad_norm": float(grad_norm)}

    def _flat_parameters(self):
        """The parameters as views of two flat buffers (``flat_buffers.FlatParameters``), made
        at the first training step and again if a parameter's array was rebound; None when
        the optimizer's groups are not exactly the model's parameters, each once."""
        from numpy_impl import flat_buffers

        order = [p for group in self.optimizer.param_groups for p in group["params"]]
        if self._sync is not None:  # backward's order: each bucket one slice (distributed.py)
            order = [p for _, bucket in self._sync.buckets for p in bucket]
        ids = [id(p) for p in order]
        if len(set(ids)) != len(ids) or set(ids) != {id(p) for p in self._params}:
            return None
        self._flat = flat_buffers.flat_parameters(self._flat, order)
        return self._flat

    def eval_loss(self, batches) -> float:
        """Mean loss over ``batches`` (a list of ``(x, y)``), in eval mode, keeping no
        backward caches (``no_grad``; the torch backend's ``torch.inference_mode``)."""
        from numpy_impl.module import no_grad

        self.model.eval()
        try:
            with no_grad():
                losses = [self.loss_fn(self.model(x), y) for x, y in batches]
        finally:
            self.model.train()
        return float(np.mean(losses))

    def state_dict(self, copy: bool = True) -> dict[str, np.ndarray]:
        """Every state-dict name (``head.weight`` included) -> a copy (``copy=False``: the
        live arrays, for a save that only reads them)."""
        return {k: v.copy() if copy else v for k, v in self.model.state_dict().items()}

    def load_state_dict(self, sd: dict[str, np.ndarray]) -> None:
        """Copy weights in (``head.weight`` may be omitted when tied).

        Raises:
            CheckpointError: missing or unexpected names or wrong shapes, all listed.
        """
        own = {k: v.shape for k, v in self.model.state_dict().items()}
        self.model.load_state_dict(_check_state_dict(sd, own, self.config.tie_weights))

    def rng_state(self) -> dict:
        """The dropout generator's state, JSON-ready (``bit_generator.state``); after
        :meth:`distribute`, every rank's under ``"by_rank"`` (a collective)."""
        state = {"backend": self.name, "dropout": self.model.dropout_rng.bit_generator.state}
        return state if self._sync is None else with_ranks(state)

    def set_rng_state(self, state: dict) -> None:
        """Restore :meth:`rng_state`'s dict: the next dropout masks are the saved model's.

        Raises:
            ValueError: not a state of this backend's generator.
        """
        if state.get("backend") != self.name:
            raise ValueError(f"rng state: from the {state.get('backend')!r} backend, not numpy")
        if self._sync is not None:  # this rank's, or a fresh seed for a rank the run lacked
            from .distributed import own_state, rank_and_world

            fresh = np.random.default_rng(self._seed + rank_and_world()[0]).bit_generator.state
            state = own_state(state) or {"dropout": fresh}
        try:
            self.model.dropout_rng.bit_generator.state = state["dropout"]
        except (TypeError, ValueError, KeyError) as e:
            raise ValueError(f"rng state: not a valid dropout generator state ({e})") from e

    def optimizer_state(self, copy: bool = True) -> dict[str, np.ndarray]:
        """AdamW's moments by parameter name (zero where untouched yet), plus ``"step"``
        (0-d int64). ``copy``: as :meth:`state_dict`'s."""
        state = {"step": np.array(self.step, dtype=np.int64)}
        for name, p in self.model.named_parameters():
            st = self.optimizer.state.get(p)
            for key in ("exp_avg", "exp_avg_sq"):
                value = st[key] if st is not None else np.zeros(p.shape, p.dtype)
                state[f"{key}.{name}"] = value.astype(p.dtype, copy=copy)
        return state

    def load_optimizer_state(self, state: dict[str, np.ndarray]) -> None:
        """Restore :meth:`optimizer_state`'s dict (from either backend).

        Raises:
            KeyError: a parameter's moment is missing.
        """
        step = int(state["step"])
        self.optimizer.state.clear()
        if step > 0:
            for name, p in self.model.named_parameters():
                self.optimizer.state[p] = {
                    "step": step,
                    "exp_avg": np.array(state[f"exp_avg.{name}"], dtype=p.dtype),
                    "exp_avg_sq": np.array(state[f"exp_avg_sq.{name}"], dtype=p.dtype),
                }
        self.step = step

    def generate(
        self, prompt_ids: list[int], max_new_tokens: int, seed=None, on_token=None, **sampling
    ) -> list[int]:
        """The ``max_new_tokens`` ids that follow ``prompt_ids`` (prompt excluded).
        ``sampling``: ``temperature``, ``top_k``, ``top_p`` and ``use_cache`` (default True: the
        KV cache of chapter 12); ``on_token``: called with each new id as it is drawn.

        Raises:
            ValueError: empty prompt, invalid sampling settings.
        """
        from numpy_impl.sampling import generate

        idx = np.array([prompt_ids], dtype=np.int64)  # (1, T0)
        out = generate(
            self.model,
            idx,
            max_new_tokens,
            **{"use_cache": True, **sampling},
            rng=np.random.default_rng(seed),
            on_token=None if on_token is None else lambda ids: on_token(int(ids[0])),
        )
        return out[0, len(prompt_ids) :].tolist()

    def num_parameters(self) -> int:
        """Scalar parameters, the tied matrix counted once."""
        return self.model.num_parameters()
