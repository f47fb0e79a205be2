"""The moves every parity test makes: random weights, copy across, compare by name.

* :func:`randomize_` draws every parameter of the *torch* module from a NumPy
  generator (never from torch's seed: the two frameworks' generators are
  unrelated), with LayerNorm gains away from 1 and biases away from 0 so a
  swapped or forgotten term cannot hide.
* :func:`copy_weights` moves them into the NumPy twin through the state dict,
  the one canonical layout (PyTorch's), with no transposes.
* :func:`assert_param_grads_close` compares every parameter gradient by name.
* :func:`finite_difference_check` checks a NumPy backward on its own.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from parity_tests.strategies import SeededRng
from parity_tests.tolerances import FD_STEP, assert_close

TORCH_DTYPE = {np.dtype(np.float64): torch.float64, np.dtype(np.float32): torch.float32}


def torch_dtype(dtype) -> torch.dtype:
    return TORCH_DTYPE[np.dtype(dtype)]


def tensor(x: np.ndarray, requires_grad: bool = False) -> torch.Tensor:
    """A torch copy of ``x`` (a copy, so neither side can see the other's writes)."""
    t = torch.from_numpy(np.array(x, copy=True))
    return t.requires_grad_(requires_grad)


def to_torch(value):
    """A NumPy array -> a torch copy of it; anything else (None, an int, a bool) unchanged."""
    return tensor(value) if isinstance(value, np.ndarray) else value


def as_tuple(value) -> tuple:
    """A forward's or backward's result as a tuple: ``None`` -> ``()``, one array -> ``(a,)``."""
    if value is None:
        return ()
    return tuple(value) if isinstance(value, tuple) else (value,)


@torch.no_grad()
def randomize_(module, rng: SeededRng):
    """Overwrite every parameter of ``module`` (torch or NumPy) with bounded random values.

    Matrices: U(-1, 1) / sqrt(fan_in), so activations stay O(1). 1-D
    ``...weight`` (LayerNorm gains): 1 + U(-0.5, 0.5). Other 1-D (biases):
    U(-0.5, 0.5). A tied parameter is drawn once. Returns ``module``.
    """
    for name, p in module.named_parameters():
        shape = tuple(p.shape)
        if len(shape) >= 2:
            values = rng.uniform(shape) / np.sqrt(shape[-1])
        elif name.endswith("weight"):
            values = 1.0 + rng.uniform(shape, bound=0.5)
        else:
            values = rng.uniform(shape, bound=0.5)
        if isinstance(p, torch.Tensor):
            p.copy_(torch.from_numpy(values))
        else:  # numpy_impl.Parameter
            p.data[...] = values
    return module


def _tied_by_data(numpy_module, t_names: list) -> str | None:
    """The usual cause of an extra NumPy parameter: two Parameters sharing one array
    (``a.data = b.data``, or a copy) where one Parameter object should serve twice."""
    params = dict(numpy_module.named_parameters())
    torch_names = {n for n, _ in t_names}
    for extra in (n for n in params if n not in torch_names):
        for other in torch_names & params.keys():
            a, b = params[other].data, params[extra].data
            if a.shape == b.shape and (np.shares_memory(a, b) or np.array_equal(a, b)):
                return (
                    f"tied by sharing .data (or a copy): {extra} and {other} are two "
                    "Parameters, two .grad; tie the Parameter itself (one object, two uses)"
                )
    return None


def copy_weights(torch_module: torch.nn.Module, numpy_module) -> None:
    """Load the torch module's weights into its NumPy twin through the state dict.

    Also asserts the mirror rule: the same parameter names, in the same order,
    with the same shapes.
    """
    t_names = [(n, tuple(p.shape)) for n, p in torch_module.named_parameters()]
    n_names = [(n, tuple(p.shape)) for n, p in numpy_module.named_parameters()]
    assert n_names == t_names, (
        f"{_tied_by_data(numpy_module, t_names) or 'mirror rule broken'}: (name, shape) of "
        f"named_parameters() differ\n  numpy_impl: {n_names}\n  torch_impl: {t_names}"
    )
    numpy_module.load_state_dict(
        {k: v.detach().numpy() for k, v in torch_module.state_dict().items()}
    )


def twins(numpy_cls, torch_cls, *args, rng: SeededRng, **kwargs):
    """``numpy_cls(*args, **kwargs)`` and ``torch_cls(...)`` in float64 with the same random
    weights (drawn for torch, copied to NumPy)."""
    torch_module = randomize_(torch_cls(*args, **kwargs, dtype=torch.float64), rng)
    numpy_module = numpy_cls(*args, **kwargs, dtype=np.float64)
    copy_weights(torch_module, numpy_module)
    return numpy_module, torch_module


@torch.no_grad()
def copy_weights_to_torch(numpy_module, torch_module: torch.nn.Module) -> None:
    """The other direction: NumPy weights into the torch twin, through the state dict."""
    torch_module.load_state_dict(
        {k: torch.from_numpy(np.array(v, copy=True)) for k, v in numpy_module.state_dict().items()}
    )


ASSIGNED_NOT_ACCUMULATED = (
    "gradients assigned instead of accumulated (use +=): backward must ADD into .grad"
)


def torch_grad(p: torch.Tensor) -> np.ndarray:
    """``p.grad`` as a NumPy array; zeros when autograd never reached ``p``."""
    return np.zeros(tuple(p.shape)) if p.grad is None else p.grad.detach().numpy()


def assert_param_grads_close(
    numpy_module, torch_module: torch.nn.Module, dtype, what: str = "", subtract=None, hints=None
) -> None:
    """Every parameter's gradient, by name: NumPy ``.grad`` vs torch ``.grad``.

    Args:
        what: context appended to each name, e.g. ``"GPT, tied"``.
        subtract: ``{name: array}`` to subtract from the NumPy gradients first
            (what was in ``.grad`` before the backward, to test accumulation).
        hints: ``{name: hints}``: what a wrong gradient of that parameter looks
            like (see tolerances.assert_close).
    """
    own = dict(numpy_module.named_parameters())
    suffix = f" ({what})" if what else ""
    for name, p in torch_module.named_parameters():
        got, expected = own[name].grad, torch_grad(p)
        param_hints = (hints or {}).get(name)
        if subtract is not None:
            got = got - subtract[name]
            # `.grad = g` instead of `.grad += g` leaves g - prior after the subtraction
            param_hints = {
                **(param_hints or {}),
                ASSIGNED_NOT_ACCUMULATED: expected - subtract[name],
            }
        assert_close(f"grad of {name}{suffix}", got, expected, dtype, hints=param_hints)


def held_arrays(model) -> list[str]:
    """``"layer.attr"`` for every private attribute of every layer of a NumPy ``model``
    that still holds an array (directly or in a tuple): the caches a forward left
    behind. Empty after a forward under ``no_grad()``."""
    held = []
    for name, module in model.named_modules():
        for attr, value in vars(module).items():
            values = value if isinstance(value, tuple) else (value,)
            if attr.startswith("_") and any(isinstance(v, np.ndarray) for v in values):
                held.append(f"{name or 'model'}.{attr}")
    return held


def assert_unchanged(name: str, before: np.ndarray, after: np.ndarray) -> None:
    """NumPy layers must not write into arrays they were handed."""
    assert np.array_equal(before, after, equal_nan=True), (
        f"{name} was modified in place by the NumPy layer "
        f"(max change {np.max(np.abs(np.asarray(before, float) - after)):.3e})"
    )


def finite_difference_check(
    name: str,
    forward: Callable[[], np.ndarray],
    array: np.ndarray,
    analytic: np.ndarray,
    dout: np.ndarray,
    rng: SeededRng,
    n_coords: int = 6,
    h: float = FD_STEP,
) -> float:
    """Central differences of ``sum(dout * forward())`` in a few coordinates of ``array``.

    For each chosen flat index i, ``array`` is perturbed in place by +-h and
    ``sum(dout * (f(x + h e_i) - f(x - h e_i))) / 2h`` (a vector-Jacobian product
    with a random ``dout``: a plain ``sum`` would hide transposes) is compared
    with ``analytic[i]``, the hand-written backward's gradient. ``array`` is
    restored exactly afterwards. A forward with several outputs returns a tuple,
    and ``dout`` is then the tuple of their upstream gradients (the products add up).

    Returns:
        the fraction of the FINITE_DIFF tolerance used by the worst coordinate.
    """
    assert array.dtype == np.float64, "finite differences need float64"
    assert analytic.shape == array.shape, (
        f"{name}: gradient shape {analytic.shape} != {array.shape}"
    )
    flat = array.reshape(-1)  # a view: writes reach the module
    assert np.shares_memory(flat, array)
    douts = dout if isinstance(dout, tuple) else (dout,)

    def outputs() -> list[np.ndarray]:  # copies: outputs may be views
        return [np.array(o, dtype=np.float64, copy=True) for o in as_tuple(forward())]

    chosen = np.sort(rng.choice(array.size, n_coords))
    numeric = np.empty(len(chosen))
    for j, i in enumerate(chosen):
        original = flat[i]
        flat[i] = original + h
        plus = outputs()
        flat[i] = original - h
        minus = outputs()
        flat[i] = original
        numeric[j] = sum(
            np.sum(d * (p - m)) for d, p, m in zip(douts, plus, minus, strict=True)
        ) / (2.0 * h)
    where = ", ".join(
        str(tuple(int(j) for j in np.unravel_index(i, array.shape))) for i in chosen[:4]
    )
    return assert_close(
        f"{name}: hand-written backward vs central differences at {where}...",
        analytic.reshape(-1)[chosen],
        numeric,
        np.float64,
        kind="finite_diff",
    )


def count_calls(monkeypatch, owner, name: str) -> list:
    """Wrap ``owner.name`` (a function of a module or class) for the test: the returned
    list gets one entry per call, the function still runs. ``monkeypatch`` restores it."""
    calls: list = []
    original = getattr(owner, name)

    def spy(*args, **kwargs):
        calls.append(True)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, spy)
    return calls
