"""The small piece of ``torch.nn.Module`` that the NumPy side builds for itself (no twin).

A :class:`Module` finds its parameters and sub-modules by walking its attributes in assignment
order, as ``torch.nn.Module`` does, so both backends give the same state-dict names.

Contract for every layer (CS231n / llm.c style):

* ``forward(x) -> out`` caches on ``self`` only what ``backward`` needs, in the attributes
  named by the class's ``_caches`` (dropped under :func:`no_grad`).
* ``backward(dout) -> dx`` returns the input gradient and *adds* into each parameter's
  ``.grad``, so a parameter used twice (tied embedding and LM head) collects both.
  Zeroing is one explicit call, :meth:`Module.zero_grad`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import numpy as np


class _GradMode(threading.local):
    enabled = True  # each thread's own; False inside no_grad(), as in torch


_grad_mode = _GradMode()


def is_grad_enabled() -> bool:
    """False inside :func:`no_grad` (``torch.is_grad_enabled``)."""
    return _grad_mode.enabled


@contextlib.contextmanager
def no_grad():
    """Forward passes inside the ``with`` keep no backward caches (``torch.no_grad``).

    For evaluation and sampling: ``Module.__call__`` drops each layer's ``_caches`` as soon as
    its forward returns (call layers as ``layer(x)``), so one layer's arrays are held at a time.
    A backward afterwards raises ``RuntimeError``, as PyTorch's does. Nests; restores the
    previous mode on the way out, exceptions included.
    """
    was = is_grad_enabled()
    _grad_mode.enabled = False
    try:
        yield
    finally:
        _grad_mode.enabled = was


class _NoForward:
    """What a layer's ``_caches`` attributes hold after a forward under :func:`no_grad`.

    A backward that reads one gets a ``RuntimeError`` saying why (as PyTorch refuses
    to differentiate a ``torch.no_grad`` result), not a ``TypeError`` about ``None``
    from deep inside its formula, and never a silent result (a ``None`` mask reads as
    "dropout was off"). Any arithmetic, indexing, unpacking or attribute on it raises.
    """

    __slots__ = ()
    __array_ufunc__ = None  # NumPy's operators hand over to the reflected ones below

    def _refuse(self, *args, **kwargs):
        raise RuntimeError(
            "backward: this layer's last forward ran under no_grad(), which keeps nothing "
            "to differentiate; run the forward again outside no_grad() before backward"
        )

    def __getattr__(self, name):
        if name.startswith("__"):  # protocol probes (copy, pickle, NumPy): absent
            raise AttributeError(name)
        self._refuse()

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __matmul__ = __rmatmul__ = _refuse
    __neg__ = __getitem__ = __iter__ = __array__ = _refuse

    def __repr__(self) -> str:
        return "NO_FORWARD"

    def __reduce__(self) -> str:
        return "NO_FORWARD"  # copies and pickles are this one object


NO_FORWARD = _NoForward()


class Parameter:
    """A trainable array and the gradient accumulated into it.

    Attributes:
        data: the value, any shape, float32 or float64.
        grad: same shape and dtype as ``data``; backward passes add into it. It is
            allocated (zeros) on first use: inference never holds gradients.
    """

    __slots__ = ("data", "_grad")

    def __init__(self, data: np.ndarray):
        self.data = np.ascontiguousarray(data)
        self._grad = None

    @property
    def grad(self) -> np.ndarray:
        if self._grad is None:
            self._grad = np.zeros(self.data.shape, self.data.dtype)
        return self._grad

    @grad.setter
    def grad(self, value: np.ndarray) -> None:
        self._grad = value

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    def __repr__(self) -> str:
        return f"Parameter(shape={self.data.shape}, dtype={self.data.dtype})"


class Module:
    """Base class: parameter discovery, train/eval mode, state dicts."""

    training: bool = True
    _caches: tuple[str, ...] = ()  # the attributes forward fills for backward (see no_grad)

    def __call__(self, *args, **kwargs):
        out = self.forward(*args, **kwargs)
        if self._caches and not is_grad_enabled():
            for name in self._caches:  # inference: nothing will differentiate this call
                setattr(self, name, NO_FORWARD)  # a backward now says so (see _NoForward)
        return out

    def forward(self, *args, **kwargs):  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, dout):  # pragma: no cover - abstract
        raise NotImplementedError

    # -- traversal ---------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, Module | Parameter]]:
        for name, value in vars(self).items():
            if name.startswith("_"):
                continue  # private attributes are caches, never parameters
            if isinstance(value, (Module, Parameter)):
                yield name, value

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for name, child in self._children():
            if isinstance(child, Module):
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def named_parameters(
        self, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """Yield ``(name, Parameter)``; a shared Parameter is yielded once, under
        its first name, like ``torch.nn.Module.named_parameters``."""
        seen: set[int] = set()
        for mod_name, mod in self.named_modules(prefix):
            for name, child in mod._children():
                if isinstance(child, Parameter):
                    if remove_duplicate and id(child) in seen:
                        continue
                    seen.add(id(child))
                    yield (f"{mod_name}.{name}" if mod_name else name), child

    def parameters(self) -> list[Parameter]:
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        """Number of scalar parameters, shared parameters counted once."""
        return sum(p.data.size for p in self.parameters())

    # -- modes and gradients -------------------------------------------------
    def train(self, mode: bool = True) -> Module:
        for _, mod in self.named_modules():
            mod.training = mode
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad.fill(0.0)

    def astype(self, dtype) -> Module:
        """Cast every parameter (and its gradient) to ``dtype`` in place."""
        for p in self.parameters():
            p.data = p.data.astype(dtype)
            p.grad = None  # allocated, zeros, in the new dtype when next used
        for _, mod in self.named_modules():
            mod._on_astype(np.dtype(dtype))
        return self

    def _on_astype(self, dtype: np.dtype) -> None:
        """Hook for modules holding non-parameter arrays (buffers)."""

    # -- state dicts ---------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Every parameter by name, shared ones under each of their names (as
        ``torch.nn.Module.state_dict`` does). Values are the live arrays."""
        return {name: p.data for name, p in self.named_parameters(remove_duplicate=False)}

    def load_state_dict(self, state_dict: dict[str, np.ndarray], strict: bool = True) -> None:
        """Copy arrays into the parameters, casting to each parameter's dtype.

        Raises:
            KeyError: with ``strict``, listing every missing and unexpected key.
            ValueError: listing every key whose shape does not match.
        """
        own = dict(self.named_parameters(remove_duplicate=False))
        missing = sorted(set(own) - set(state_dict))
        unexpected = sorted(set(state_dict) - set(own))
        if strict and (missing or unexpected):
            raise KeyError(
                f"state_dict does not match the model: missing keys {missing}, "
                f"unexpected keys {unexpected}"
            )
        bad = [
            f"{k}: expected {own[k].shape}, got {tuple(np.shape(v))}"
            for k, v in state_dict.items()
            if k in own and tuple(np.shape(v)) != own[k].shape
        ]
        if bad:
            raise ValueError("state_dict shapes do not match the model: " + "; ".join(bad))
        for k, v in state_dict.items():
            if k in own:
                own[k].data[...] = np.asarray(v, dtype=own[k].dtype)


class ModuleList(Module):
    """An indexable list of sub-modules named ``0``, ``1``, ... (as in torch)."""

    def __init__(self, modules=()):
        self._modules = list(modules)

    def _children(self):
        for i, m in enumerate(self._modules):
            yield str(i), m

    def __getitem__(self, i: int) -> Module:
        return self._modules[i]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)


# -- input checks shared by the NumPy layers -----------------------------------
# Both backends validate up front and raise the same exception types, naming the argument.


def check_ids(idx: np.ndarray, vocab_size: int, name: str = "idx") -> np.ndarray:
    """Validate integer token ids and return them as an int64 array.

    Raises:
        TypeError: ``idx`` is not an integer array (floats, bools, objects).
        ValueError: an id lies outside ``[0, vocab_size)``.
    """
    idx = np.asarray(idx)
    if idx.dtype == np.bool_ or not np.issubdtype(idx.dtype, np.integer):
        raise TypeError(f"{name}: token ids must be integers, got dtype {idx.dtype}")
    if idx.size:
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(
                f"{name}: token ids must lie in [0, vocab_size={vocab_size}), "
                f"got min={lo}, max={hi}"
            )
    return idx.astype(np.int64, copy=False)


def check_float(x: np.ndarray, name: str = "x", dtype=None) -> None:
    """Raise ``TypeError`` unless ``x`` is a floating-point array, of ``dtype`` (a
    layer's parameters') when given: as PyTorch, no silent cast (an int64 input
    would otherwise be upcast here and refused by the torch twin)."""
    if x.dtype.kind != "f":  # np.issubdtype(x.dtype, np.floating), without its ~2 us per layer
        raise TypeError(f"{name}: expected a floating-point array, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"{name}: dtype {x.dtype} differs from the layer's parameters ({np.dtype(dtype)}); "
            "cast the input or the layer (astype)"
        )


def check_last_dim(x: np.ndarray, size: int, name: str, what: str) -> None:
    """Raise ``ValueError`` unless ``x.shape[-1] == size``."""
    if x.ndim < 1 or x.shape[-1] != size:
        raise ValueError(f"{name}: expected shape (..., {what}={size}), got {tuple(x.shape)}")
