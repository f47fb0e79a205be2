"""twinformer's parity suite: the NumPy and PyTorch twins testify against each other.

Run ``python -m pytest parity_tests -q`` (``HYPOTHESIS_PROFILE=thorough`` for
300 examples per property; ``-m ch04`` for one chapter). The helpers live in
``tolerances.py`` (the one assertion and every tolerance), ``strategies.py``
(Hypothesis strategies) and ``harness.py`` (random weights, copying, grads).
"""
