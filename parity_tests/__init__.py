"""twinformer's parity suite: the NumPy and PyTorch twins testify against each other.

Run ``python -m pytest parity_tests -q`` (``HYPOTHESIS_PROFILE=thorough`` for
300 examples per property; ``-m ch04`` for one chapter). Every component pair is
registered once in ``registry.py``, and ``test_components.py`` runs the same
properties over all of them. The helpers live in ``tolerances.py`` (the one
assertion and every tolerance), ``strategies.py`` (Hypothesis strategies),
``harness.py`` (random weights, copying, grads) and ``hints.py`` (what a wrong
result looks like).
"""
