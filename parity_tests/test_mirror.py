"""The twins mirror each other mechanically: the same positional parameters, and no cross-imports.

For every module ``X`` present in both ``numpy_impl/`` and ``torch_impl/``, and
every public name that both ``X``s define (a function, or a class's ``__init__``
and ``forward``), the positional parameters (``inspect.signature``:
POSITIONAL_ONLY and POSITIONAL_OR_KEYWORD) must have the same names, in the same
order, with the same defaults. Framework-only arguments (NumPy ``dtype``,
``rng``, ``seed``; torch ``dtype``, ``device``, ``generator``) are keyword-only
and last in both, so they are not compared: ``Linear(4, 8, True)`` means the
same layer in both backends, and a keyword never lands in the wrong slot.

One exception: where the torch twin is PyTorch's own object re-exported
(``torch.optim.AdamW``, ``torch.nn.utils.clip_grad_norm_``), the NumPy twin
implements a part of it, so its positional parameters must be a leading prefix
of PyTorch's, with equal defaults.

Public names: a module's ``__all__`` when it has one, else the functions and
classes whose ``__module__`` is that module (not what it imported), without a
leading underscore.

Then the import rules of the house: ``numpy_impl`` never imports torch (nor,
on its default paths, scipy: only the exact GELU needs it), and ``torch_impl``
never imports ``numpy_impl``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import numpy_impl
import numpy_impl.module as numpy_module
import torch_impl

ROOT = Path(__file__).resolve().parent.parent
NUMPY_DIR = Path(numpy_impl.__file__).resolve().parent  # a learner's workspace, under check
TORCH_DIR = Path(torch_impl.__file__).resolve().parent
POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _twin_modules() -> list[str]:
    numpy_files = {p.stem for p in NUMPY_DIR.glob("*.py")}
    torch_files = {p.stem for p in TORCH_DIR.glob("*.py")}
    return sorted((numpy_files & torch_files) - {"__init__"})


def _public(module) -> dict[str, object]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__
        ]
    return {name: getattr(module, name) for name in names}


def _callables(obj) -> dict[str, object]:
    """``{"": f}`` for a function; ``{"__init__": ..., "forward": ...}`` for a class, each
    method only where the class (or a base of its own) defines it: the placeholders of
    ``object``, ``torch.nn.Module`` and ``numpy_impl.module.Module`` do not count."""
    if not inspect.isclass(obj):
        return {"": obj}
    placeholders = (object, torch.nn.Module, numpy_module.Module)
    methods = {}
    for name in ("__init__", "forward"):
        owner = next((k for k in obj.__mro__ if name in vars(k)), object)
        if owner not in placeholders:
            methods[name] = getattr(obj, name)
    return methods


def _is_pytorchs(obj) -> bool:
    """True for PyTorch's own object re-exported by a torch_impl module."""
    return obj.__module__.split(".")[0] == "torch"


def _pairs() -> list:
    params = []
    for stem in _twin_modules():
        np_mod = importlib.import_module(f"numpy_impl.{stem}")
        torch_mod = importlib.import_module(f"torch_impl.{stem}")
        np_names, torch_names = _public(np_mod), _public(torch_mod)
        for name in sorted(np_names.keys() & torch_names.keys()):
            np_obj, torch_obj = np_names[name], torch_names[name]
            np_parts, torch_parts = _callables(np_obj), _callables(torch_obj)
            for part in sorted(np_parts.keys() & torch_parts.keys()):
                label = f"{stem}.{name}" + (f".{part}" if part else "")
                params.append(
                    pytest.param(
                        np_parts[part], torch_parts[part], _is_pytorchs(torch_obj), id=label
                    )
                )
    return params


def _positional(fn) -> list[tuple[str, object]]:
    """``[(name, default), ...]`` of the positional parameters, ``self`` left out."""
    params = list(inspect.signature(fn).parameters.values())
    if params and params[0].name == "self":
        params = params[1:]
    return [(p.name, p.default) for p in params if p.kind in POSITIONAL]


def _show(params: list[tuple[str, object]]) -> str:
    empty = inspect.Parameter.empty
    return "(" + ", ".join(n if d is empty else f"{n}={d!r}" for n, d in params) + ")"


def test_the_twins_are_compared():
    """The registry is not empty by accident: the core modules and names are in it."""
    ids = {p.id for p in PAIRS}
    expected_ids = (
        "linear.Linear.__init__",
        "linear.linear",
        "optim.AdamW.__init__",
        "ffn.FeedForward.__init__",
        "sampling.generate",
        "rope.rope_cos_sin",
    )
    for expected in expected_ids:
        assert expected in ids, f"{expected} is not compared; compared: {sorted(ids)}"


PAIRS = _pairs()

#: numpy_impl files with no torch twin, each by design: the base Module (torch has nn.Module),
#: the fast backend and its flat buffers (torch's are its own kernels), the char tokenizer
#: (plain Python, one for both) and the pretrained loader (torch loads through
#: labs/plumbing/interop*.py).
NUMPY_ONLY = {"module.py", "fast.py", "flat_buffers.py", "char_tokenizer.py", "pretrained.py"}


def test_every_file_has_its_twin_or_is_named_one_sided():
    numpy_files = {p.name for p in (ROOT / "numpy_impl").glob("*.py")}
    torch_files = {p.name for p in (ROOT / "torch_impl").glob("*.py")}
    assert numpy_files - torch_files == NUMPY_ONLY and not torch_files - numpy_files


@pytest.mark.parametrize(("numpy_fn", "torch_fn", "pytorchs_own"), PAIRS)
def test_positional_parameters_mirror(numpy_fn, torch_fn, pytorchs_own):
    ours, theirs = _positional(numpy_fn), _positional(torch_fn)
    if pytorchs_own:
        # PyTorch's own object: the NumPy twin implements a leading part of its arguments
        assert ours == theirs[: len(ours)], (
            f"NumPy {_show(ours)} is not a leading prefix of PyTorch's {_show(theirs)}"
        )
    else:
        assert ours == theirs, (
            f"positional parameters differ: NumPy {_show(ours)}, torch {_show(theirs)}; "
            "framework-only arguments (dtype, rng, seed, device, generator) belong after `*`"
        )


def _imports(path: Path) -> set[str]:
    """Top-level package names imported by ``path``, at any depth of the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        pytest.param(NUMPY_DIR, "torch", id="numpy_impl-imports-no-torch"),
        pytest.param(TORCH_DIR, "numpy_impl", id="torch_impl-imports-no-numpy_impl"),
    ],
)
def test_no_import_across_the_twins(package: Path, forbidden: str):
    offenders = sorted(p.name for p in package.glob("*.py") if forbidden in _imports(p))
    assert not offenders, f"{package.name}: {offenders} import {forbidden}"


def test_numpy_impl_runs_without_torch_or_scipy():
    """Importing numpy_impl loads no torch; GELU (both forms) and SiLU run with scipy
    absent, the exact GELU through math.erf (the values torch's erf gives, checked here
    against the closed forms erf(0) = 0, erf(-x) = -erf(x), and one tabulated value)."""
    code = (
        "import math, sys\n"
        "sys.modules['scipy'] = None  # any import of scipy now fails\n"
        "import numpy as np\n"
        "import numpy_impl as N\n"
        "from numpy_impl.activations import erf\n"
        "x = np.linspace(-3.0, 3.0, 7)\n"
        "for layer in (N.GELU(), N.GELU('none'), N.SiLU()):\n"
        "    layer(x)\n"
        "    layer.backward(np.ones_like(x))\n"
        "e = erf(np.array([0.0, 0.5, -0.5], dtype=np.float32))\n"
        "assert e.dtype == np.float32 and e[0] == 0 and e[1] == -e[2], e\n"
        "assert abs(erf(np.array([1.0]))[0] - 0.8427007929497149) < 1e-15\n"
        "assert 'torch' not in sys.modules, 'importing numpy_impl loaded torch'\n"
        "assert 'scipy.special' not in sys.modules\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=NUMPY_DIR.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_erf_without_scipy_matches_scipy(monkeypatch):
    """The exact GELU's erf: math.erf element by element (no scipy) gives scipy's values."""
    special = pytest.importorskip("scipy.special")
    from numpy_impl.activations import erf

    x = np.concatenate([np.linspace(-6.0, 6.0, 1001), [0.0, -0.0, 1e-300, 30.0, -30.0]])
    with_scipy = {dt: special.erf(x.astype(dt)) for dt in (np.float64, np.float32)}
    monkeypatch.setitem(sys.modules, "scipy.special", None)  # `from scipy.special import` fails
    for dt, expected in with_scipy.items():
        got = erf(x.astype(dt))
        assert got.dtype == dt
        np.testing.assert_allclose(got, expected, rtol=4 * np.finfo(dt).eps, atol=0)
