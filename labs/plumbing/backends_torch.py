"""The PyTorch backend's adapter: ``torch_impl``, gradients by autograd.

:class:`TorchBackend`, method for method the twin of :class:`NumpyBackend` in
``backends_numpy.py``; ``backends.py`` has the interface they share.
"""

from __future__ import annotations

import base64
import math

import numpy as np

from .backends import (
    ADAM_EPS,
    AMP_DTYPES,
    Adapter,
    NonFiniteError,
    _check_dtype,
    _check_state_dict,
    _first_nonfinite,
    _global_norm,
    _micro_batches,
    _train_config,
)
from .distributed import own_state, with_ranks


class TorchBackend(Adapter):
    """The library model: ``torch_impl``, gradients by autograd; :class:`NumpyBackend`'s
    interface, with ``attn_impl`` ``"sdpa"`` or ``"explicit"``, ``device`` (weights drawn on
    the CPU first: a seed gives the same start anywhere) and ``amp`` (None, ``"bf16"`` or
    ``"fp16"``: the forward under ``torch.autocast``, weights and AdamW in float32; fp16
    with a ``GradScaler`` that skips an overflowed step)."""

    name = "torch"

    def __init__(
        self,
        model_config: dict,
        seed: int = 0,
        train_config: dict | None = None,
        dtype: str = "float32",
        attn_impl: str = "sdpa",
        device: str = "cpu",
        amp: str | None = None,
    ):
        import torch

        from torch_impl.gpt import GPT, GPTConfig
        from torch_impl.loss import CrossEntropyLoss
        from torch_impl.optim import AdamW, configure_param_groups, cosine_lr

        self.torch, self._cosine_lr = torch, cosine_lr
        self.config = GPTConfig(**dict(model_config))
        self.train_config = tc = _train_config(train_config)
        self.dtype = {"float32": torch.float32, "float64": torch.float64}[_check_dtype(dtype)]
        self.device = torch.device(device)
        self._seed = seed
        torch.manual_seed(seed)  # the initial weights come from torch's global generator
        self.model = GPT(self.config, attn_impl=attn_impl, dtype=self.dtype).to(self.device)
        self.loss_fn = CrossEntropyLoss()
        self.optimizer = AdamW(
            configure_param_groups(self.model, tc["weight_decay"]),
            lr=tc["lr"],
            betas=(tc["beta1"], tc["beta2"]),
            eps=ADAM_EPS,
            foreach=False,  # one tensor at a time, in the NumPy twin's order
        )
        self.step = 0
        self._ddp = None  # the DistributedDataParallel wrapper, once distribute() is called
        if amp not in AMP_DTYPES:
            raise ValueError(f"amp: expected one of {sorted(AMP_DTYPES, key=str)}, got {amp!r}")
        if amp is not None and self.dtype != torch.float32:
            raise ValueError(
                f"amp: mixed precision keeps float32 weights; dtype is {dtype!r}, not 'float32'"
            )
        self.amp = amp
        # fp16 only: bf16 has float32's range, so its gradients neither overflow nor vanish
        self.scaler = torch.amp.GradScaler(self.device.type) if amp == "fp16" else None

    def _autocast(self):
        """``torch.autocast`` in the ``amp`` type, or nothing."""
        import contextlib

        if self.amp is None:
            return contextlib.nullcontext()
        dtype = getattr(self.torch, AMP_DTYPES[self.amp])
        return self.torch.autocast(device_type=self.device.type, dtype=dtype)

    def scaler_state(self) -> dict | None:
        """The fp16 GradScaler's state (scale, growth counter), JSON-ready; None without one."""
        return None if self.scaler is None else dict(self.scaler.state_dict())

    def set_scaler_state(self, state: dict | None) -> None:
        """Restore :meth:`scaler_state` (ignored without a GradScaler or a state)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)

    def distribute(self, bucket_mb: float = 25.0) -> None:
        """Train under ``torch.distributed`` (the process group initialised): the model in
        DistributedDataParallel, which averages the ranks' gradients during ``backward`` in
        buckets of ``bucket_mb`` MiB (Li et al. 2020). With equal slices of the batch, that
        is the gradient of the whole batch's mean loss."""
        from torch.nn.parallel import DistributedDataParallel

        # DDP broadcasts rank 0's weights to the others: every rank starts equal
        ids = None if self.device.type == "cpu" else [self.device]
        self._ddp = DistributedDataParallel(self.model, device_ids=ids, bucket_cap_mb=bucket_mb)
        rank = self.torch.distributed.get_rank()
        if rank > 0:  # every rank its own dropout masks (rank 0 keeps the 1-process stream)
            self.torch.manual_seed(self._seed + rank)

    def train_step(self, x: np.ndarray, y: np.ndarray, grad_accum: int = 1) -> dict:
        """As :meth:`NumpyBackend.train_step`; under DDP the gradients are averaged once, at
        the last micro-batch. A step the fp16 GradScaler skips says ``"skipped": True``
        (and counts, as nanoGPT's)."""
        import contextlib

        from torch_impl.optim import clip_grad_norm_

        torch = self.torch
        micro_x, micro_y = _micro_batches(x, y, grad_accum)
        lr = self._set_lr()
        model = self.model if self._ddp is None else self._ddp
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        for j, (xm, ym) in enumerate(zip(micro_x, micro_y, strict=True)):
            xm, ym = self._tensor(xm), self._tensor(ym)
            last = j == grad_accum - 1
            sync = contextlib.nullcontext() if self._ddp is None or last else self._ddp.no_sync()
            with sync:
                with self._autocast():
                    logits = model(xm)  # (B/N, T) -> (B/N, T, V)
                    loss = self.loss_fn(logits, ym)
                scaled = loss / grad_accum if grad_accum > 1 else loss
                if self.scaler is not None:
                    scaled = self.scaler.scale(scaled)
                scaled.backward()  # adds into every p.grad (under DDP, averaged at the last)
            loss_sum += loss.detach().double()
        loss_value = loss_sum / grad_accum
        if self._ddp is not None:  # report the whole batch's loss: the mean of the ranks'
            torch.distributed.all_reduce(loss_value)
            loss_value /= torch.distributed.get_world_size()
        loss_value = float(loss_value)
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # the true gradients, before clipping
        params = [p for p in self.model.parameters() if p.grad is not None]

        def norm_of_grads() -> float:
            return _global_norm(p.grad.detach().double().cpu().numpy() for p in params)

        clip = self.train_config["grad_clip"]
        if clip > 0:
            try:  # error_if_nonfinite: a NaN norm would otherwise make every gradient NaN
                grad_norm = float(clip_grad_norm_(params, clip, error_if_nonfinite=True))
            except RuntimeError as e:
                if "non-finite" not in str(e):
                    raise
                grad_norm = norm_of_grads()  # the gradients are still unscaled
        else:
            grad_norm = norm_of_grads()
        overflowed = self.scaler is not None and math.isfinite(loss_value)
        if not (math.isfinite(loss_value) and (math.isfinite(grad_norm) or overflowed)):
            named = (
                (n, None if p.grad is None else p.grad.detach().cpu().numpy())
                for n, p in self.model.named_parameters()
            )
            raise NonFiniteError(self.step, loss_value, grad_norm, _first_nonfinite(named))
        stats = {"loss": loss_value, "lr": lr, "grad_norm": grad_norm}
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skipped if a gradient is inf or NaN
            self.scaler.update()  # scale halved after an overflow, doubled after 2000 good steps
            stats["skipped"] = not math.isfinite(grad_norm)
        else:
            self.optimizer.step()
        self.step += 1
        return stats

    def eval_loss(self, batches) -> float:
        """As :meth:`NumpyBackend.eval_loss`; no autograd graph is built."""
        torch = self.torch
        self.model.eval()
        try:
            with torch.inference_mode(), self._autocast():
                losses = [
                    float(self.loss_fn(self.model(self._tensor(x)), self._tensor(y)))
                    for x, y in batches
                ]
        finally:
            self.model.train()
        return float(np.mean(losses))

    def state_dict(self, copy: bool = True) -> dict[str, np.ndarray]:
        """As :meth:`NumpyBackend.state_dict`."""
        arrays = {k: v.detach().cpu().numpy() for k, v in self.model.state_dict().items()}
        return {k: v.copy() if copy else v for k, v in arrays.items()}

    def _tensor(self, a: np.ndarray):
        return self.torch.from_numpy(a).to(self.device)

    def load_state_dict(self, sd: dict[str, np.ndarray]) -> None:
        """As :meth:`NumpyBackend.load_state_dict` (the same CheckpointError)."""
        own = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        sd = _check_state_dict(sd, own, self.config.tie_weights)
        self.model.load_state_dict(
            {
                k: self.torch.from_numpy(np.asarray(v)).to(self.device, self.dtype)
                for k, v in sd.items()
            }
        )

    def rng_state(self) -> dict:
        """Torch's global generators (they draw the dropout masks) as base64 of their bytes,
        the CPU's and, on a GPU, the device's; under DDP every rank's in ``"by_rank"``
        (a collective: every rank calls it)."""
        torch = self.torch

        def b64(state) -> str:
            return base64.b64encode(state.cpu().numpy().tobytes()).decode("ascii")

        own = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            own["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"backend": self.name, **{k: b64(v) for k, v in own.items()}}
        return state if self._ddp is None else with_ranks(state)

    def set_rng_state(self, state: dict) -> None:
        """Restore :meth:`rng_state`'s dict (under DDP this rank's; a rank the saved run
        did not have is seeded as a fresh run seeds it).

        Raises:
            ValueError: not a state saved by this backend.
        """
        torch = self.torch
        if state.get("backend") != self.name:
            raise ValueError(f"rng state: from the {state.get('backend')!r} backend, not torch")
        own = state
        if self._ddp is not None:
            own = own_state(state)
            if own is None:  # a rank the saved run did not have: seeded as a fresh run
                torch.manual_seed(self._seed + torch.distributed.get_rank())
                return

        def tensor(text: str):
            raw = np.frombuffer(base64.b64decode(text, validate=True), dtype=np.uint8)
            return torch.from_numpy(raw.copy())

        try:
            torch.set_rng_state(tensor(own["cpu"]))
            if self.device.type == "cuda" and "cuda" in own:
                torch.cuda.set_rng_state(tensor(own["cuda"]), self.device)
        except (KeyError, TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"rng state: not a valid torch generator state ({e})") from e

    def optimizer_state(self, copy: bool = True) -> dict[str, np.ndarray]:
        """As :meth:`NumpyBackend.optimizer_state`."""
        state = {"step": np.array(self.step, dtype=np.int64)}
        for name, p in self.model.named_parameters():  # the tied weight once
            st = self.optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                value = st.get(key, self.torch.zeros_like(p)).detach().cpu().numpy()
                state[f"{key}.{name}"] = value.copy() if copy else value
        return state

    def load_optimizer_state(self, state: dict[str, np.ndarray]) -> None:
        """As :meth:`NumpyBackend.load_optimizer_state`."""
        torch = self.torch
        step = int(state["step"])
        self.optimizer.state.clear()
        if step > 0:
            for name, p in self.model.named_parameters():
                self.optimizer.state[p] = {
                    # torch keeps AdamW's step count as a float32 tensor
                    "step": torch.tensor(float(step), dtype=torch.float32),
                    "exp_avg": torch.from_numpy(np.array(state[f"exp_avg.{name}"])).to(p),
                    "exp_avg_sq": torch.from_numpy(np.array(state[f"exp_avg_sq.{name}"])).to(p),
                }
        self.step = step  # the learning rate is cosine_lr(step, ...): nothing else to restore

    def generate(
        self, prompt_ids: list[int], max_new_tokens: int, seed=None, on_token=None, **sampling
    ) -> list[int]:
        """As :meth:`NumpyBackend.generate` (the same seed draws other random numbers)."""
        from torch_impl.sampling import generate

        torch = self.torch
        generator = torch.Generator(device=self.device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(seed)
        idx = torch.tensor([prompt_ids], dtype=torch.long, device=self.device)  # (1, T0)
        with torch.inference_mode():
            out = generate(
                self.model,
                idx,
                max_new_tokens,
                **{"use_cache": True, **sampling},
                generator=generator,
                on_token=None if on_token is None else lambda ids: on_token(int(ids[0])),
            )
        return out[0, len(prompt_ids) :].tolist()

    def num_parameters(self) -> int:
        """As :meth:`NumpyBackend.num_parameters`."""
        return sum(p.numel() for p in self.model.parameters())
