"""pytest set-up for the parity suite: import path, Hypothesis profiles, chapter markers.

Hypothesis profiles (``HYPOTHESIS_PROFILE=thorough python -m pytest parity_tests``):

* ``default``: 15 examples per property, quick enough for every CI run.
* ``thorough``: 300 examples per property, for a change to a backward pass.

Neither has a deadline (the first example pays for imports and warm-up) and
both print the blob that replays a failure (``@reproduce_failure``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# The suite runs from a checkout without `pip install -e .` too.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the path set-up, like the implementations)

settings.register_profile("default", max_examples=15, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=300, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

#: One marker per chapter of the course, so a learner runs ``pytest -m ch04``.
CHAPTERS = {
    "ch01": "foundations: Linear layer, parameters and state dicts",
    "ch02": "token embeddings",
    "ch03": "scaled dot-product attention",
    "ch04": "multi-head (causal self-) attention",
    "ch05": "positional embeddings",
    "ch06": "feed-forward network, GELU, dropout",
    "ch07": "LayerNorm and the transformer block",
    "ch08": "the GPT model",
    "ch09": "training: loss, AdamW, clipping, schedule, checkpoints",
    "ch10": "sampling: filter_logits, generate",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, what in CHAPTERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    # The suite's tensors are tiny: intra-op threads only add synchronisation, and
    # on a busy 2-core runner OpenMP's spinning threads made a 4-layer GPT's
    # forward + backward ~300x slower (0.5 s instead of 2 ms). One thread it is.
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _torch_default_dtype_untouched():
    """Tests build float64 modules with ``dtype=``; none may change the global default."""
    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    assert after == before, f"a test changed torch's default dtype from {before} to {after}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Print the worst errors reached per comparison kind, to tighten tolerances by."""
    from parity_tests.tolerances import REACHED

    if not REACHED:
        return
    tr = terminalreporter
    tr.section("parity tolerances reached (worst over the session)")
    tr.write_line(
        f"{'kind':<14}{'dtype':<10}{'checks':>8}{'max abs diff':>15}"
        f"{'max|a-e|/max|e|':>17}{'fraction of tol':>17}"
    )
    for (kind, dtype), r in sorted(REACHED.items()):
        tr.write_line(
            f"{kind:<14}{dtype:<10}{r['checks']:>8}{r['max_abs']:>15.2e}"
            f"{r['max_normwise_rel']:>17.2e}{r['worst_fraction_of_tol']:>17.2e}"
        )
    if config.getoption("verbose") > 0:
        for (kind, dtype), r in sorted(REACHED.items()):
            tr.write_line(f"closest to its tolerance, {kind} {dtype}: {r['worst_check']}")
