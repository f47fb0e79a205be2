"""The learner's tools.

* ``exercises.py``: ``python -m labs start|check|status|reset``, the exercises.
* ``diff.py``: ``python -m labs diff``, the NumPy and PyTorch twins side by side.
* ``docs.py``: ``python -m labs docs``, the HTML site of the chapters and their code.
* ``notebook.py``: the set-up every chapter's ``lab.py`` shares.
"""
